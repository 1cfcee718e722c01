//! The routing-protocol channel of the Protocol Adapter (seed 004, distributed and hybrid
//! models): the BGP-LS speaker (`bgp/`) and the GRASP objective (`grasp.rs`).

pub mod bgp;
pub mod grasp;

use std::net::SocketAddr;

/// A listener bound at once (so a commit that cannot have it is refused) and set
/// non-blocking for tokio, which takes it over when the commit is applied.
pub(crate) fn bind_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The next connection on `l`; an accept error (out of descriptors, say) is logged and
/// retried after a pause instead of in a busy loop.
pub(crate) async fn next_connection(l: &tokio::net::TcpListener, what: &str) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match l.accept().await {
            Ok(c) => return c,
            Err(e) => {
                tracing::warn!("{what} listener: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}
