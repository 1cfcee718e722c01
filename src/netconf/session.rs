//! One NETCONF session over any byte stream: the hello exchange (RFC 6241 section 8.1),
//! framing selection (RFC 6242 section 4.1), then requests answered in order, interleaved
//! with event notifications (RFC 5277), until close-session, kill-session, idle timeout,
//! shutdown or a transport failure.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};

use super::framing::{encode, Decoder, Framing, FramingError};
use super::inline::{Costs, Kind};
use super::rpc::{self, After, SessionCtx};
use super::{server_capabilities, CAP_BASE_10, CAP_BASE_11, NS_BASE};
use crate::datastore::SessionId;
use crate::mgmt::events::{self as notifications, SubscriptionSpec};
use crate::mgmt::{Core, SessionInfo};
use crate::xml::{self, escape_text};

/// How long a client has to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(60);
/// Messages queued for the writer before producers wait (replies and notifications).
const OUT_QUEUE: usize = 256;

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
    let root = xml::parse_with(text, crate::config::message_limits::get())
        .map_err(|e| format!("hello is not well-formed: {e}"))?;
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

/// Why a session ended (RFC 6470 termination-reason).
enum End {
    Closed,
    Killed(SessionId),
    Dropped,
    Timeout,
    BadHello,
    Other,
}

/// Runs a session to its end. The caller has registered it with the server (id, info) and
/// unregisters it afterwards.
pub async fn run<S>(stream: S, server: Arc<Core>, id: SessionId, info: Arc<SessionInfo>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    run_with_idle(stream, server, id, info, None).await
}

/// [`run`] with an idle timeout of its own instead of the server's (a periodic Call Home
/// connection's idle-timeout).
pub async fn run_with_idle<S>(
    stream: S,
    server: Arc<Core>,
    id: SessionId,
    info: Arc<SessionInfo>,
    idle: Option<Duration>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (rd, mut wr) = tokio::io::split(stream);
    let mut out = Vec::new();
    encode(Framing::EndOfMessage, server_hello(id).as_bytes(), &mut out);
    if wr.write_all(&out).await.is_err() {
        return;
    }
    let end = serve(rd, wr, server.clone(), id, info.clone(), idle).await;
    let (reason, killer) = match end {
        End::Closed => ("closed", None),
        End::Killed(k) => ("killed", Some(k)),
        End::Dropped => ("dropped", None),
        End::Timeout => ("timeout", None),
        End::BadHello => ("bad-hello", None),
        End::Other => ("other", None),
    };
    notifications::session_end(&server, &info.username, id, info.source, reason, killer);
}

async fn serve<R, W>(
    mut rd: R,
    wr: W,
    server: Arc<Core>,
    id: SessionId,
    info: Arc<SessionInfo>,
    idle: Option<Duration>,
) -> End
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut decoder = Decoder::new(server.settings.max_message_size);
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
            return End::BadHello;
        }
    };
    let framing = if base11 { Framing::Chunked } else { Framing::EndOfMessage };
    decoder.set_framing(framing);
    info!(session = id, user = %info.username, ?framing, "NETCONF session started");
    notifications::session_start(&server, &info.username, id, info.source);

    // One writer owns the transport; replies and notifications queue for it.
    let (tx, rx) = mpsc::channel::<String>(OUT_QUEUE);
    let writer = tokio::spawn(write_loop(wr, rx, framing));
    let ctx = SessionCtx::new(id, server.clone(), info.clone(), base11);
    ctx.set_outbox(tx.clone());
    let idle = idle.unwrap_or(match server.settings.idle_timeout {
        0 => Duration::from_secs(u64::MAX / 4),
        s => Duration::from_secs(s),
    });
    let mut subscription: Option<tokio::task::JoinHandle<()>> = None;
    let end = 'session: loop {
        // Answer every complete message already buffered, in order.
        loop {
            match decoder.next_message() {
                Ok(Some(msg)) => {
                    let text = String::from_utf8_lossy(&msg);
                    // Cheap kinds of RPC run on this task; the others on a blocking thread
                    // (see inline.rs).
                    let kind = Kind::of(&text);
                    let costs = Costs::global();
                    let started = std::time::Instant::now();
                    let (reply, after) = if costs.inline(kind.as_ref(), text.len()) && !server.datastores.busy() {
                        rpc::handle_on(&ctx, &text, true)
                    } else {
                        tokio::task::block_in_place(|| rpc::handle(&ctx, &text))
                    };
                    costs.record(kind, started.elapsed());
                    // A new subscription joins the stream before its reply goes out, so no
                    // event raised after the <ok/> is missed; its task sends them after it.
                    let joined = ctx.take_subscription().map(|spec| {
                        let stream = server.events.subscribe(spec.start);
                        (spec, stream)
                    });
                    if tx.send(reply).await.is_err() {
                        break 'session End::Dropped;
                    }
                    ctx.replied();
                    if let Some((spec, stream)) = joined {
                        // The reply is queued first, so the client sees <ok/> before events.
                        subscription =
                            Some(tokio::spawn(forward(server.clone(), info.clone(), spec, stream, tx.clone())));
                    }
                    if after == After::Close {
                        debug!(session = id, "close-session");
                        break 'session End::Closed;
                    }
                }
                Ok(None) => break,
                Err(FramingError::TooBig(max)) => {
                    let e = crate::error::RpcError::new(
                        crate::error::ErrorTag::TooBig,
                        crate::error::ErrorType::Rpc,
                        format!("the message exceeds the maximum size of {max} bytes"),
                    );
                    if tx.send(crate::mgmt::error::reply_errors("", &[e])).await.is_err() {
                        break 'session End::Dropped;
                    }
                }
                Err(e @ FramingError::Malformed(_)) => {
                    warn!(session = id, "closing session: {e}");
                    break 'session End::Other;
                }
            }
        }
        tokio::select! {
            r = tokio::time::timeout(idle, rd.read(&mut buf)) => match r {
                Err(_) => {
                    info!(session = id, "idle timeout, closing session");
                    break End::Timeout;
                }
                Ok(Ok(0)) | Ok(Err(_)) => break End::Dropped,
                Ok(Ok(n)) => decoder.feed(&buf[..n]),
            },
            _ = kill.changed() => {
                info!(session = id, "session killed");
                break End::Killed((*kill.borrow()).unwrap_or_default());
            }
            _ = shutdown.changed() => break End::Other,
        }
    };
    if let Some(s) = subscription {
        s.abort();
    }
    server.push.session_ended(id);
    // Let the writer flush what is queued (replies in flight), then close. The context
    // holds a sender for subscriptions (its outbox): drop it too, or the writer would only
    // end at the timeout and the session's locks would be released 5 s late.
    drop(ctx);
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
    end
}

async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, mut rx: mpsc::Receiver<String>, framing: Framing) {
    let mut out = Vec::new();
    while let Some(msg) = rx.recv().await {
        out.clear();
        encode(framing, msg.as_bytes(), &mut out);
        // Coalesce whatever else is already queued into one write.
        while let Ok(more) = rx.try_recv() {
            encode(framing, more.as_bytes(), &mut out);
        }
        if wr.write_all(&out).await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

/// Sends one session's subscription: replay, replayComplete, live events, and
/// notificationComplete at stopTime (RFC 5277 sections 2.1.1 and 3.3).
async fn forward(
    server: Arc<Core>,
    info: Arc<SessionInfo>,
    spec: SubscriptionSpec,
    stream: (Vec<Arc<notifications::Event>>, tokio::sync::broadcast::Receiver<Arc<notifications::Event>>),
    tx: mpsc::Sender<String>,
) {
    let (replay, mut rx) = stream;
    // The event as this user may see it (NACM-pruned content), if the filter selects it.
    let wanted = |ev: &Arc<notifications::Event>| {
        server
            .nacm
            .event_for(&info.username, ev)
            .filter(|ev| spec.filter.as_ref().is_none_or(|f| f.matches(ev, &server.nacm, &info.username)))
    };
    let send = |msg: String| {
        let tx = tx.clone();
        let info = info.clone();
        let server = server.clone();
        async move {
            info.out_notifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            server.stats.out_notifications.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tx.send(msg).await.is_ok()
        }
    };
    let mut last_seq = None;
    for ev in replay {
        if spec.stop.is_some_and(|s| ev.time > s) {
            break;
        }
        last_seq = Some(ev.seq);
        if let Some(ev) = wanted(&ev) {
            if !send(ev.message()).await {
                return;
            }
        }
    }
    if spec.start.is_some() && !send(notifications::marker("replayComplete")).await {
        return;
    }
    let stop_in = spec.stop.map(|s| (s - chrono::Utc::now()).to_std().unwrap_or_default());
    let stop = async {
        match stop_in {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(stop);
    if spec.stop.is_some_and(|s| s <= chrono::Utc::now()) {
        let _ = send(notifications::marker("notificationComplete")).await;
        return;
    }
    loop {
        tokio::select! {
            _ = &mut stop => {
                let _ = send(notifications::marker("notificationComplete")).await;
                return;
            }
            r = rx.recv() => match r {
                Ok(ev) => {
                    if last_seq.is_some_and(|l| ev.seq <= l) {
                        continue;
                    }
                    if let Some(ev) = wanted(&ev) {
                        if !send(ev.message()).await {
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(user = %info.username, "subscriber fell behind: {n} notifications could not be delivered");
                    server.stats.dropped_notifications.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                Err(broadcast::error::RecvError::Closed) => return,
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
        let with_id = format!(
            "<hello xmlns=\"{NS_BASE}\"><capabilities><capability>{CAP_BASE_10}</capability></capabilities><session-id>4</session-id></hello>"
        );
        assert!(check_client_hello(with_id.as_bytes()).is_err());
        let none =
            format!("<hello xmlns=\"{NS_BASE}\"><capabilities><capability>urn:x</capability></capabilities></hello>");
        assert!(check_client_hello(none.as_bytes()).is_err());
    }
}
