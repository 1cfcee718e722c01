//! One NETCONF session over any byte stream: the hello exchange (RFC 6241 section 8.1),
//! framing selection (RFC 6242 section 4.1), then requests answered in order until
//! close-session, kill-session, idle timeout, shutdown or a transport failure.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, info, warn};

use super::framing::{encode, Decoder, Framing, FramingError};
use super::rpc::{self, After, SessionCtx};
use super::xml::{self, escape_text};
use super::{server_capabilities, Server, SessionInfo, CAP_BASE_10, CAP_BASE_11, NS_BASE};
use crate::datastore::SessionId;

/// How long a client has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's `<hello>` for a session.
pub fn server_hello(id: SessionId) -> String {
    let mut s = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><hello xmlns=\"{NS_BASE}\"><capabilities>");
    for c in server_capabilities() {
        s.push_str("<capability>");
        s.push_str(&escape_text(&c));
        s.push_str("</capability>");
    }
    s.push_str(&format!("</capabilities><session-id>{id}</session-id></hello>"));
    s
}

/// Checks a client hello; returns whether base:1.1 (chunked framing) was offered.
fn check_client_hello(msg: &[u8]) -> Result<bool, String> {
    let text = std::str::from_utf8(msg).map_err(|_| "hello is not UTF-8".to_string())?;
    let root = xml::parse(text).map_err(|e| format!("hello is not well-formed: {e}"))?;
    if !root.is(NS_BASE, "hello") {
        return Err(format!("expected <hello>, got <{}>", root.name));
    }
    if root.child(NS_BASE, "session-id").is_some() {
        // RFC 6241 8.1: a client hello with a session-id ends the session.
        return Err("a client hello must not carry a session-id".into());
    }
    let caps = root.child(NS_BASE, "capabilities").ok_or("hello without capabilities")?;
    let caps: Vec<&str> = caps.children.iter().filter(|c| c.is(NS_BASE, "capability")).map(|c| c.trimmed()).collect();
    let v11 = caps.contains(&CAP_BASE_11);
    if !v11 && !caps.contains(&CAP_BASE_10) {
        return Err("the client offers neither base:1.0 nor base:1.1".into());
    }
    Ok(v11)
}

/// Runs a session to its end. The caller has registered it with the server (id, info) and
/// unregisters it afterwards.
pub async fn run<S>(stream: S, server: Arc<Server>, id: SessionId, info: Arc<SessionInfo>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut decoder = Decoder::new(server.settings.max_message_size);
    let mut out = Vec::new();
    encode(Framing::EndOfMessage, server_hello(id).as_bytes(), &mut out);
    if wr.write_all(&out).await.is_err() {
        return;
    }
    let mut kill = info.kill.subscribe();
    let mut shutdown = server.shutdown.subscribe();
    let mut buf = vec![0u8; 64 * 1024];

    // The client hello, always end-of-message framed.
    let hello = tokio::time::timeout(HELLO_TIMEOUT, async {
        loop {
            match decoder.next_message() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => return Err("connection closed before hello".to_string()),
                Ok(n) => decoder.feed(&buf[..n]),
            }
        }
    })
    .await;
    let base11 = match hello
        .map_err(|_| "no hello within 60 s".to_string())
        .and_then(|h| h.and_then(|m| check_client_hello(&m)))
    {
        Ok(v11) => v11,
        Err(reason) => {
            server.stats.in_bad_hellos.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            warn!(session = id, user = %info.username, "bad hello, closing: {reason}");
            return;
        }
    };
    let framing = if base11 { Framing::Chunked } else { Framing::EndOfMessage };
    decoder.set_framing(framing);
    info!(session = id, user = %info.username, ?framing, "NETCONF session started");

    let ctx = SessionCtx { id, server: server.clone(), info: info.clone(), base11 };
    let idle = match server.settings.idle_timeout {
        0 => Duration::from_secs(u64::MAX / 4),
        s => Duration::from_secs(s),
    };
    loop {
        // Answer every complete message already buffered, in order.
        loop {
            match decoder.next_message() {
                Ok(Some(msg)) => {
                    let (reply, after) = match std::str::from_utf8(&msg) {
                        Ok(text) => tokio::task::block_in_place(|| rpc::handle(&ctx, text)),
                        Err(_) => rpc::handle(&ctx, "\u{0}not utf-8"),
                    };
                    out.clear();
                    encode(framing, reply.as_bytes(), &mut out);
                    if wr.write_all(&out).await.is_err() {
                        return;
                    }
                    if after == After::Close {
                        debug!(session = id, "close-session");
                        let _ = wr.shutdown().await;
                        return;
                    }
                }
                Ok(None) => break,
                Err(FramingError::TooBig(max)) => {
                    let e = crate::error::RpcError::new(
                        crate::error::ErrorTag::TooBig,
                        crate::error::ErrorType::Rpc,
                        format!("the message exceeds the maximum size of {max} bytes"),
                    );
                    out.clear();
                    encode(framing, super::error::reply_errors("", &[e]).as_bytes(), &mut out);
                    if wr.write_all(&out).await.is_err() {
                        return;
                    }
                }
                Err(e @ FramingError::Malformed(_)) => {
                    warn!(session = id, "closing session: {e}");
                    return;
                }
            }
        }
        tokio::select! {
            r = tokio::time::timeout(idle, rd.read(&mut buf)) => match r {
                Err(_) => {
                    info!(session = id, "idle timeout, closing session");
                    return;
                }
                Ok(Ok(0)) | Ok(Err(_)) => return,
                Ok(Ok(n)) => decoder.feed(&buf[..n]),
            },
            _ = kill.changed() => {
                info!(session = id, "session killed");
                return;
            }
            _ = shutdown.changed() => {
                let _ = wr.shutdown().await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_hello_checks() {
        let ok = format!(
            "<hello xmlns=\"{NS_BASE}\"><capabilities><capability>{CAP_BASE_11}</capability></capabilities></hello>"
        );
        assert_eq!(check_client_hello(ok.as_bytes()), Ok(true));
        let with_id = format!("<hello xmlns=\"{NS_BASE}\"><capabilities><capability>{CAP_BASE_10}</capability></capabilities><session-id>4</session-id></hello>");
        assert!(check_client_hello(with_id.as_bytes()).is_err());
        let none =
            format!("<hello xmlns=\"{NS_BASE}\"><capabilities><capability>urn:x</capability></capabilities></hello>");
        assert!(check_client_hello(none.as_bytes()).is_err());
    }
}
