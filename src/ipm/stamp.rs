//! RTT-ANYCAST (seed 000, section 3.5) measured with STAMP (RFC 8762), unauthenticated
//! mode: a session-sender that probes every A-ER of every application site, and a stateless
//! session-reflector (section 4.3.1), so that two agents measure each other.
//!
//! No maintained Rust crate implements STAMP; the two 44-octet packet formats (sections
//! 4.2.1 and 4.3.1) are encoded and parsed here, pure and fuzzed (`stamp_packet`).
//! Timestamps are NTP 64-bit (Z = 0). The RTT of a reflected packet is (T4 − T1) − (T3 − T2):
//! the sender's own elapsed time (a monotonic clock) less the reflector's turnaround, which
//! is measured on the reflector's clock alone, so no clock synchronisation is needed.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

/// Both test packets are 44 octets in unauthenticated mode.
pub const PACKET: usize = 44;
/// Reflected packets are as long as the test packet (section 4.3), up to this.
pub const MAX_PACKET: usize = 1472;
/// Error Estimate (RFC 4656 section 4.1.2, RFC 8762 section 4.2.1): S = 0 (the clock is not
/// known to be synchronised to UTC), Z = 0 (NTP format), Scale 22 and Multiplier 1: about 1 ms.
pub const ERROR_ESTIMATE: u16 = (22 << 8) | 1;
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// Now as an NTP 64-bit timestamp (seconds since 1900 in the upper half, fraction below).
pub fn ntp_now() -> u64 {
    ntp(SystemTime::now())
}

pub fn ntp(t: SystemTime) -> u64 {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = (d.as_secs() + NTP_UNIX_OFFSET) & 0xffff_ffff;
    let frac = ((u64::from(d.subsec_nanos())) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// The time from NTP timestamp `a` to `b` (zero when `b` is before `a`); wraps of the
/// 32-bit seconds are handled by the wrapping difference.
pub fn ntp_elapsed(a: u64, b: u64) -> Duration {
    let d = b.wrapping_sub(a);
    if d > 1 << 63 {
        return Duration::ZERO;
    }
    Duration::from_nanos(((u128::from(d) * 1_000_000_000) >> 32) as u64)
}

/// A session-sender test packet (section 4.2.1).
pub fn sender_packet(seq: u32, timestamp: u64) -> [u8; PACKET] {
    let mut p = [0u8; PACKET];
    p[0..4].copy_from_slice(&seq.to_be_bytes());
    p[4..12].copy_from_slice(&timestamp.to_be_bytes());
    p[12..14].copy_from_slice(&ERROR_ESTIMATE.to_be_bytes());
    p
}

/// The fields of a reflected test packet (section 4.3.1) the sender needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reflected {
    pub seq: u32,
    /// T3: when the reflector sent it.
    pub timestamp: u64,
    /// T2: when the reflector received the test packet.
    pub receive_timestamp: u64,
    pub sender_seq: u32,
    /// T1 as the sender wrote it.
    pub sender_timestamp: u64,
    pub sender_ttl: u8,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    (u64::from(u32_at(b, o)) << 32) | u64::from(u32_at(b, o + 4))
}

pub fn parse_reflected(b: &[u8]) -> Result<Reflected, String> {
    if b.len() < PACKET {
        return Err(format!("{} octets: a reflected test packet has at least {PACKET}", b.len()));
    }
    Ok(Reflected {
        seq: u32_at(b, 0),
        timestamp: u64_at(b, 4),
        receive_timestamp: u64_at(b, 16),
        sender_seq: u32_at(b, 24),
        sender_timestamp: u64_at(b, 28),
        sender_ttl: b[40],
    })
}

/// The stateless reflector's answer to test packet `req` (section 4.3.1): its sequence
/// number is the sender's, T2 is `received`, T3 `now()` as late as possible, the sender's
/// fields copied, and the packet as long as the test packet. None for a packet that is too
/// short to be one.
pub fn reflect(req: &[u8], received: u64, ttl: u8, now: impl Fn() -> u64) -> Option<Vec<u8>> {
    if req.len() < PACKET {
        return None;
    }
    let mut p = vec![0u8; req.len().min(MAX_PACKET)];
    p[0..4].copy_from_slice(&req[0..4]);
    p[12..14].copy_from_slice(&ERROR_ESTIMATE.to_be_bytes());
    p[16..24].copy_from_slice(&received.to_be_bytes());
    p[24..28].copy_from_slice(&req[0..4]);
    p[28..36].copy_from_slice(&req[4..12]);
    p[36..38].copy_from_slice(&req[12..14]);
    p[40] = ttl;
    p[4..12].copy_from_slice(&now().to_be_bytes());
    Some(p)
}

/// The RTT of a reflected packet: the sender's elapsed time less the reflector's turnaround
/// (never below zero).
pub fn rtt(elapsed: Duration, r: &Reflected) -> Duration {
    elapsed.saturating_sub(ntp_elapsed(r.receive_timestamp, r.timestamp))
}

/// The measurements of one A-ER.
#[derive(Clone, Debug, Default)]
pub struct Rtt {
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub latest: Option<u32>,
    pub at: Option<DateTime<Utc>>,
    samples: VecDeque<u32>,
    next: Option<Instant>,
}

impl Rtt {
    pub fn min(&self) -> Option<u32> {
        self.samples.iter().copied().min()
    }

    pub fn mean(&self) -> Option<u32> {
        if self.samples.is_empty() {
            return None;
        }
        Some((self.samples.iter().map(|v| u64::from(*v)).sum::<u64>() / self.samples.len() as u64) as u32)
    }

    fn sample(&mut self, us: u32, window: usize) {
        self.received += 1;
        self.latest = Some(us);
        self.at = Some(Utc::now());
        self.samples.push_back(us);
        while self.samples.len() > window.max(1) {
            self.samples.pop_front();
        }
    }
}

/// The session-sender's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SenderConfig {
    pub interval: Duration,
    pub timeout: Duration,
    pub port: u16,
    pub window: usize,
}

/// The session-reflector's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReflectorConfig {
    pub listen: SocketAddr,
    pub clients: Vec<ipnet::IpNet>,
    pub max_rate: u32,
}

/// The session-sender: test packets in flight and the RTTs per A-ER.
#[derive(Default)]
pub struct Sender {
    pub rtts: HashMap<IpAddr, Rtt>,
    /// Probes in flight: sequence number → (A-ER, when sent, the T1 written in it).
    outstanding: HashMap<u32, (IpAddr, Instant, u64)>,
    seq: u32,
}

impl Sender {
    /// The test packets due now to `targets`; forgets A-ERs no longer configured and counts
    /// the packets whose timeout passed as lost.
    pub fn due(&mut self, targets: &[IpAddr], c: &SenderConfig, now: Instant) -> Vec<(IpAddr, [u8; PACKET])> {
        self.rtts.retain(|a, _| targets.contains(a));
        let rtts = &mut self.rtts;
        self.outstanding.retain(|_, (a, sent, _)| {
            if now.duration_since(*sent) < c.timeout {
                return true;
            }
            if let Some(r) = rtts.get_mut(a) {
                r.lost += 1;
            }
            false
        });
        let mut out = Vec::new();
        for a in targets {
            let r = self.rtts.entry(*a).or_default();
            if r.next.is_some_and(|t| t > now) {
                continue;
            }
            r.next = Some(now + c.interval);
            r.sent += 1;
            let (seq, t1) = (self.seq, ntp_now());
            self.seq = self.seq.wrapping_add(1);
            self.outstanding.insert(seq, (*a, now, t1));
            out.push((*a, sender_packet(seq, t1)));
        }
        out
    }

    /// A reflected packet from `from`; false when it answers nothing in flight (late,
    /// duplicated, or not ours: another source, or a T1 other than the one sent, which an
    /// off-path spoofer cannot guess).
    pub fn reflected(&mut self, from: IpAddr, b: &[u8], c: &SenderConfig, now: Instant) -> bool {
        let Ok(r) = parse_reflected(b) else { return false };
        let Some((a, sent, t1)) = self.outstanding.get(&r.sender_seq).copied() else { return false };
        if a != from.to_canonical() || r.sender_timestamp != t1 {
            return false;
        }
        self.outstanding.remove(&r.sender_seq);
        if now.duration_since(sent) >= c.timeout {
            if let Some(x) = self.rtts.get_mut(&a) {
                x.lost += 1;
            }
            return false;
        }
        let us = rtt(now.duration_since(sent), &r).as_micros().min(u128::from(u32::MAX)) as u32;
        if let Some(x) = self.rtts.get_mut(&a) {
            x.sample(us.max(1), c.window);
        }
        true
    }
}

/// The reflector's counters (YANG `stamp/reflector/statistics`).
#[derive(Default)]
pub struct ReflectorStats {
    pub reflected: AtomicU64,
    pub too_short: AtomicU64,
    pub not_allowed: AtomicU64,
    pub rate_limited: AtomicU64,
}

/// A token bucket of `rate` packets per second with a burst of one second.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn take(&mut self, rate: u32, now: Instant) -> bool {
        let rate = f64::from(rate);
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * rate).min(rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// `a` as a destination for a dual-stack socket.
pub fn mapped(a: IpAddr, port: u16, v6_socket: bool) -> SocketAddr {
    match a {
        IpAddr::V4(v4) if v6_socket => SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), port),
        a => SocketAddr::new(a, port),
    }
}

/// Enables the TTL / hop limit control messages on a reflector socket.
fn want_ttl(sock: &tokio::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    let on: libc::c_int = 1;
    for (level, opt) in [(libc::IPPROTO_IP, libc::IP_RECVTTL), (libc::IPPROTO_IPV6, libc::IPV6_RECVHOPLIMIT)] {
        // SAFETY: `fd` is the live socket `sock` owns; `on` is a c_int that outlives the
        // call and its size is passed. A failure (an IPv4 option on an IPv6-only socket)
        // only leaves that control message off.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// One datagram with its source and the TTL / hop limit it arrived with (255 when the
/// kernel gave none).
fn recv_with_ttl(sock: &tokio::net::UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr, u8)> {
    use std::os::fd::AsRawFd;
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid; every pointer set below points into locals that
    // outlive the recvmsg call, with their lengths.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut addr as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` is initialised as above and the fd is the live socket.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut ttl = 255u8;
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within
    // msg_controllen; each data pointer read is of a c_int the kernel wrote.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let (level, ty) = ((*c).cmsg_level, (*c).cmsg_type);
            if (level == libc::IPPROTO_IP && ty == libc::IP_TTL)
                || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_HOPLIMIT)
            {
                let v: libc::c_int = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                ttl = v.clamp(0, 255) as u8;
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    let from = sockaddr(&addr).ok_or_else(|| std::io::Error::other("unknown address family"))?;
    Ok((n as usize, from, ttl))
}

fn sockaddr(a: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let s: &libc::sockaddr_in = unsafe { &*(a as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::new(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()), u16::from_be(s.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let s: &libc::sockaddr_in6 = unsafe { &*(a as *const libc::sockaddr_storage).cast() };
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)), u16::from_be(s.sin6_port)))
        }
        _ => None,
    }
}

/// The session-reflector: answers until the task is aborted. `config` is read per packet.
pub async fn reflector(
    sock: tokio::net::UdpSocket,
    config: impl Fn() -> Option<ReflectorConfig>,
    stats: std::sync::Arc<ReflectorStats>,
) {
    want_ttl(&sock);
    let mut buf = vec![0u8; 65_535];
    let mut bucket = Bucket { tokens: 0.0, at: Instant::now() };
    loop {
        let r = sock.async_io(tokio::io::Interest::READABLE, || recv_with_ttl(&sock, &mut buf)).await;
        let received = ntp_now();
        let (n, from, ttl) = match r {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("STAMP reflector: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(c) = config() else { continue };
        if n < PACKET {
            stats.too_short.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let src = from.ip().to_canonical();
        if !c.clients.is_empty() && !c.clients.iter().any(|p| p.contains(&src)) {
            stats.not_allowed.fetch_add(1, Ordering::Relaxed);
            crate::mgmt::audit::event(crate::mgmt::audit::Category::InputRefused)
                .outcome("failure")
                .source(from)
                .transport("stamp")
                .field("reason", "the source is outside stamp/reflector/client-prefix")
                .emit_aggregated(format!("stamp/{src}"));
            continue;
        }
        if !bucket.take(c.max_rate, Instant::now()) {
            stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if let Some(reply) = reflect(&buf[..n], received, ttl, ntp_now) {
            if sock.send_to(&reply, from).await.is_ok() {
                stats.reflected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8762_4_2_1_and_4_3_1_packet_formats() {
        let p = sender_packet(7, 0x0102_0304_0506_0708);
        assert_eq!(p.len(), 44);
        assert_eq!(&p[0..4], &[0, 0, 0, 7]);
        assert_eq!(&p[4..12], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(u16::from_be_bytes([p[12], p[13]]), ERROR_ESTIMATE);
        assert!(p[14..].iter().all(|b| *b == 0), "MBZ");
        let r = reflect(&p, 0x1111_0000_0000_0000, 61, || 0x1111_0000_8000_0000).unwrap();
        assert_eq!(r.len(), 44);
        let f = parse_reflected(&r).unwrap();
        assert_eq!(
            f,
            Reflected {
                seq: 7,
                timestamp: 0x1111_0000_8000_0000,
                receive_timestamp: 0x1111_0000_0000_0000,
                sender_seq: 7,
                sender_timestamp: 0x0102_0304_0506_0708,
                sender_ttl: 61,
            }
        );
        assert!(r[14..16].iter().chain(&r[38..40]).chain(&r[41..44]).all(|b| *b == 0), "MBZ");
        // Half a second of turnaround is taken off the elapsed time.
        assert_eq!(rtt(Duration::from_millis(502), &f), Duration::from_millis(2));
        // Symmetric size: a longer test packet gets an answer as long; a short one none.
        assert_eq!(reflect(&[0u8; 100], 0, 64, || 0).unwrap().len(), 100);
        assert!(reflect(&[0u8; 43], 0, 64, || 0).is_none());
        assert!(parse_reflected(&[0u8; 43]).is_err());
    }

    #[test]
    fn rfc8762_sender_matches_reflections_counts_losses_and_keeps_a_window() {
        let c = SenderConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            port: 862,
            window: 2,
        };
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mut s = Sender::default();
        let t0 = Instant::now();
        let due = s.due(&[a], &c, t0);
        assert_eq!(due.len(), 1);
        assert!(s.due(&[a], &c, t0 + Duration::from_millis(10)).is_empty(), "not due again before the interval");
        let reply = reflect(&due[0].1, 5, 64, || 5).unwrap();
        assert!(!s.reflected("192.0.2.9".parse().unwrap(), &reply, &c, t0), "from another address");
        assert!(s.reflected(a, &reply, &c, t0 + Duration::from_millis(3)));
        assert!(!s.reflected(a, &reply, &c, t0 + Duration::from_millis(4)), "a duplicate");
        assert_eq!(s.rtts[&a].latest, Some(3000));
        // The next one is lost.
        let due = s.due(&[a], &c, t0 + Duration::from_secs(1));
        assert_eq!(due.len(), 1);
        s.due(&[a], &c, t0 + Duration::from_millis(1600));
        assert_eq!((s.rtts[&a].sent, s.rtts[&a].received, s.rtts[&a].lost), (2, 1, 1));
        let late = reflect(&due[0].1, 5, 64, || 5).unwrap();
        assert!(!s.reflected(a, &late, &c, t0 + Duration::from_millis(1700)), "too late");
        for (k, ms) in [(2u64, 5u64), (3, 9)] {
            let d = s.due(&[a], &c, t0 + Duration::from_secs(k));
            let r = reflect(&d[0].1, 5, 64, || 5).unwrap();
            assert!(s.reflected(a, &r, &c, t0 + Duration::from_secs(k) + Duration::from_millis(ms)));
        }
        let r = &s.rtts[&a];
        assert_eq!((r.min(), r.mean(), r.latest), (Some(5000), Some(7000), Some(9000)), "window of 2");
        // An A-ER no longer configured is forgotten.
        s.due(&[], &c, t0 + Duration::from_secs(9));
        assert!(s.rtts.is_empty());
    }

    #[test]
    fn ntp_timestamps() {
        let t = UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(ntp(t), ((NTP_UNIX_OFFSET + 1) << 32) | 0x8000_0000);
        assert!((249..=250).contains(&ntp_elapsed(ntp(t), ntp(t + Duration::from_micros(250))).as_micros()));
        assert_eq!(ntp_elapsed(ntp(t + Duration::from_secs(1)), ntp(t)), Duration::ZERO);
    }
}
