//! TCP MD5 signatures (RFC 2385) for BGP sessions: the Linux `TCP_MD5SIG` socket option,
//! set on the connecting socket of an active neighbor and, per neighbor address, on the
//! listener (accepted connections inherit the keys). The libc crate has the option's
//! number but not its argument structure, so the structure is declared here as Linux
//! defines it (include/uapi/linux/tcp.h); no maintained crate wraps the option.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

/// `struct tcp_md5sig` (Linux).
#[repr(C)]
struct TcpMd5Sig {
    addr: libc::sockaddr_storage,
    flags: u8,
    prefixlen: u8,
    keylen: u16,
    ifindex: libc::c_int,
    key: [u8; libc::TCP_MD5SIG_MAXKEYLEN],
}

/// Sets (`Some`) or removes (`None`) the key for `peer` on `socket`.
pub fn set_key(socket: &impl AsRawFd, peer: IpAddr, key: Option<&[u8]>) -> std::io::Result<()> {
    let key = key.unwrap_or_default();
    if key.len() > libc::TCP_MD5SIG_MAXKEYLEN {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "TCP MD5 key longer than 80 octets"));
    }
    // SAFETY: all-zero bytes are a valid value of this plain C structure (integers and
    // byte arrays only).
    let mut sig: TcpMd5Sig = unsafe { std::mem::zeroed() };
    let sa = socket2_addr(SocketAddr::new(peer, 0));
    sig.addr = sa;
    sig.keylen = key.len() as u16;
    sig.key[..key.len()].copy_from_slice(key);
    // SAFETY: `sig` is a live, correctly laid out `struct tcp_md5sig` and the length passed
    // is its size; the kernel only reads it. The descriptor is valid for `socket`'s life.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            (&sig as *const TcpMd5Sig).cast(),
            std::mem::size_of::<TcpMd5Sig>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `addr` as a `sockaddr_storage` (sockaddr_in or sockaddr_in6 inside).
fn socket2_addr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: 0,
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc2385_key_is_accepted_by_the_kernel_and_removed() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        super::set_key(&l, "127.0.0.2".parse().unwrap(), Some(b"secret")).unwrap();
        super::set_key(&l, "127.0.0.2".parse().unwrap(), None).unwrap();
        assert!(super::set_key(&l, "127.0.0.2".parse().unwrap(), Some(&[b'x'; 81])).is_err());
    }
}
