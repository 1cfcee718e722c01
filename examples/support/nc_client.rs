//! A minimal NETCONF-over-SSH client shared by the bulk-edit and soak benchmarks: one SSH
//! connection per session, base:1.1 chunked framing when the server offers it, every reply
//! checked for its message-id and the absence of `<rpc-error>`. The host key is accepted
//! without checking: these benchmarks run on loopback.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use russh::client;
use russh::ChannelMsg;

pub const NS_BASE: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";
const CAP_BASE_10: &str = "urn:ietf:params:netconf:base:1.0";
const CAP_BASE_11: &str = "urn:ietf:params:netconf:base:1.1";
const EOM: &[u8] = b"]]>]]>";

/// Accepts any host key: a loopback benchmark, not a security boundary.
struct AnyHostKey;

impl client::Handler for AnyHostKey {
    type Error = russh::Error;

    async fn check_server_key(&mut self, _key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// RFC 6242 section 4.2 chunked framing: `(\n#<size>\n<data>)+ \n##\n`; `(message, bytes
/// consumed)` or None while incomplete.
fn take_chunked(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut msg = Vec::new();
    let mut pos = 0;
    loop {
        if buf.len() < pos + 4 {
            return Ok(None);
        }
        if &buf[pos..pos + 2] != b"\n#" {
            return Err(format!("bad chunk header at byte {pos}"));
        }
        if buf[pos + 2] == b'#' {
            return if buf[pos + 3] == b'\n' { Ok(Some((msg, pos + 4))) } else { Err("bad end marker".into()) };
        }
        let digits = pos + 2;
        let Some(nl) = buf[digits..].iter().take(11).position(|&b| b == b'\n').map(|p| p + digits) else {
            return if buf.len() - digits > 10 { Err("chunk size too long".into()) } else { Ok(None) };
        };
        let size: usize =
            std::str::from_utf8(&buf[digits..nl]).ok().and_then(|s| s.parse().ok()).ok_or("bad chunk size")?;
        let data = nl + 1;
        if buf.len() < data + size {
            return Ok(None);
        }
        msg.extend_from_slice(&buf[data..data + size]);
        pos = data + size;
    }
}

/// One NETCONF session over its own SSH connection.
pub struct Session {
    handle: client::Handle<AnyHostKey>,
    channel: russh::Channel<client::Msg>,
    chunked: bool,
    buf: Vec<u8>,
    scanned: usize,
    next_id: u64,
    timeout: Duration,
    /// The server's hello.
    pub hello: String,
}

impl Session {
    pub async fn connect(
        host: &str,
        port: u16,
        user: &str,
        password: &str,
        timeout: Duration,
    ) -> Result<Session, String> {
        let config = client::Config { nodelay: true, ..Default::default() };
        let mut handle = client::connect(Arc::new(config), (host, port), AnyHostKey)
            .await
            .map_err(|e| format!("SSH connect: {e}"))?;
        let auth = handle
            .authenticate_password(user.to_owned(), password.to_owned())
            .await
            .map_err(|e| format!("SSH authentication: {e}"))?;
        if !auth.success() {
            return Err(format!("password authentication failed for user {user:?}"));
        }
        let channel = handle.channel_open_session().await.map_err(|e| format!("opening a channel: {e}"))?;
        channel.request_subsystem(true, "netconf").await.map_err(|e| format!("netconf subsystem: {e}"))?;
        let mut s = Session {
            handle,
            channel,
            chunked: false,
            buf: Vec::new(),
            scanned: 0,
            next_id: 1,
            timeout,
            hello: String::new(),
        };
        s.hello = String::from_utf8_lossy(&s.read_message().await?).into_owned();
        if !s.hello.contains("hello") {
            return Err(format!("unexpected server hello: {}", clip(&s.hello)));
        }
        let v11 = s.hello.contains(CAP_BASE_11);
        let mut caps = format!("<capability>{CAP_BASE_10}</capability>");
        if v11 {
            caps.push_str(&format!("<capability>{CAP_BASE_11}</capability>"));
        }
        let ours = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><hello xmlns=\"{NS_BASE}\"><capabilities>{caps}</capabilities></hello>"
        );
        s.send(ours.as_bytes()).await?;
        s.chunked = v11;
        // netconfd (yuma123 2.13) ignores an rpc arriving in the same read as the hello.
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(s)
    }

    /// Whether the server advertised a capability (a substring of its hello).
    pub fn has_capability(&self, cap: &str) -> bool {
        self.hello.contains(cap)
    }

    async fn send(&mut self, msg: &[u8]) -> Result<(), String> {
        let mut frame = Vec::with_capacity(msg.len() + 24);
        if self.chunked {
            frame.extend_from_slice(format!("\n#{}\n", msg.len()).as_bytes());
            frame.extend_from_slice(msg);
            frame.extend_from_slice(b"\n##\n");
        } else {
            frame.extend_from_slice(msg);
            frame.extend_from_slice(EOM);
        }
        self.channel.data(&frame[..]).await.map_err(|e| format!("sending: {e}"))
    }

    async fn read_message(&mut self) -> Result<Vec<u8>, String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let marker: &[u8] = if self.chunked { b"\n##\n" } else { EOM };
            let from = self.scanned.saturating_sub(marker.len() - 1);
            if find(&self.buf[from..], marker).is_some() {
                let got = if self.chunked {
                    take_chunked(&self.buf)?
                } else {
                    find(&self.buf, EOM).map(|p| (self.buf[..p].to_vec(), p + EOM.len()))
                };
                if let Some((msg, used)) = got {
                    self.buf.drain(..used);
                    self.scanned = 0;
                    return Ok(msg);
                }
            }
            self.scanned = self.buf.len();
            match tokio::time::timeout_at(deadline, self.channel.wait()).await {
                Err(_) => return Err(format!("no reply within {} s", self.timeout.as_secs())),
                Ok(None | Some(ChannelMsg::Eof | ChannelMsg::Close)) => {
                    return Err("the server closed the channel".into())
                }
                Ok(Some(ChannelMsg::Data { data })) => self.buf.extend_from_slice(&data),
                Ok(Some(_)) => {}
            }
        }
    }

    /// One round trip: `<rpc>` with `op` inside; the reply, or an error when it holds an
    /// `<rpc-error>` or is not the reply to this message-id. Notifications that arrive
    /// meanwhile are skipped.
    pub async fn rpc(&mut self, op: &str) -> Result<String, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = format!("<rpc xmlns=\"{NS_BASE}\" message-id=\"{id}\">{op}</rpc>");
        self.send(msg.as_bytes()).await?;
        loop {
            let reply = String::from_utf8(self.read_message().await?).map_err(|_| "reply is not UTF-8")?;
            if reply.contains("<notification") && !reply.contains("rpc-reply") {
                continue;
            }
            let id_ok =
                reply.contains(&format!("message-id=\"{id}\"")) || reply.contains(&format!("message-id='{id}'"));
            if !reply.contains("rpc-reply") || !id_ok {
                return Err(format!("message-id {id}: unexpected reply: {}", clip(&reply)));
            }
            if has_rpc_error(&reply) {
                return Err(format!("message-id {id}: rpc-error: {}", clip(&reply)));
            }
            return Ok(reply);
        }
    }

    /// Ends the session politely.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.rpc("<close-session/>")).await;
        let _ = self.handle.disconnect(russh::Disconnect::ByApplication, "", "en").await;
    }
}

/// Whether the reply holds an `<rpc-error>` element (any prefix).
fn has_rpc_error(reply: &str) -> bool {
    reply.match_indices("rpc-error").any(|(i, m)| {
        let before = reply[..i].chars().next_back();
        let after = reply[i + m.len()..].chars().next();
        matches!(before, Some('<' | ':')) && matches!(after, Some('>' | '/' | ' ' | '\t' | '\r' | '\n'))
    })
}

pub fn clip(s: &str) -> &str {
    match s.char_indices().nth(600) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A process's resident set size in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz)
}
