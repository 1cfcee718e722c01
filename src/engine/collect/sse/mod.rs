//! SSE collection (seed 004, SCI Collection Interface, push mode: "HTTP/2 with Server-Sent
//! Events"): for a pull target in `mode sse` the C-SMA opens a GET with
//! `Accept: text/event-stream` to the SCI's URL and keeps it open; each event's data is
//! one JSON report (or batch) of docs/sci-protocol.md, attributed to the target's CSCI-ID
//! and ingested through the engine path every transport takes (transport `sse`). The
//! connection is HTTP/2 when the server chooses it in the TLS handshake (ALPN h2, then
//! http/1.1), HTTP/1.1 otherwise. When the stream ends or fails, the C-SMA reconnects
//! after an exponential backoff (1 s doubling to 60 s, or the server's `retry` if longer)
//! with `Last-Event-ID` set to the last event id it saw; no byte for three intervals ends
//! a silent connection. The framing is [`event`] (bounded, fuzzed).

pub mod event;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::pull::{failure, Endpoint, FetchError, PullStatus, Target, TIMEOUT};
use crate::backoff::Backoff;
use crate::engine::core::{Proof, Sender};
use crate::engine::report::{self, Encoding};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::tls::client::Loader;

/// The transport name in counters, audit records and notifications.
const TRANSPORT: &str = "sse";

/// Largest header block of the server's answer (HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE).
const MAX_HEADER_LIST: u32 = 16 * 1024;

/// Reconnection delays: first and longest.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// How an sse target's subscription stands (YANG `target/state/sse/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    Connecting,
    Connected,
    /// Waiting out the backoff before the next connection.
    Waiting,
}

impl Connection {
    pub fn yang(self) -> &'static str {
        match self {
            Connection::Connecting => "connecting",
            Connection::Connected => "connected",
            Connection::Waiting => "waiting",
        }
    }
}

/// An sse target's subscription state, beside the pull target's.
#[derive(Clone, Debug)]
pub struct SseState {
    pub connection: Connection,
    /// "2" or "1.1" while connected.
    pub http_version: Option<&'static str>,
    pub connected_since: Option<DateTime<Utc>>,
    /// Events dispatched by the stream (reports, refused ones included).
    pub events: u64,
    /// Connections opened after the first.
    pub reconnects: u64,
    /// The last event id seen (sent as Last-Event-ID on reconnection); empty: none.
    pub last_event_id: String,
}

/// A running subscription, ended when dropped.
pub(crate) struct Subscription {
    /// The target it was started for (a changed target restarts it).
    pub target: Target,
    task: JoinHandle<()>,
    wake: Arc<Notify>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Subscription {
    pub fn start(
        engine: &Engine,
        id: &str,
        target: Target,
        p: super::pull::Prepared,
        status: &PullStatus,
    ) -> Subscription {
        let wake = Arc::new(Notify::new());
        let last = status.with(id, |s| s.sse.as_ref().map(|x| x.last_event_id.clone()).unwrap_or_default());
        status.with(id, |s| {
            s.sse = Some(SseState {
                connection: Connection::Connecting,
                http_version: None,
                connected_since: None,
                events: s.sse.as_ref().map_or(0, |x| x.events),
                reconnects: s.sse.as_ref().map_or(0, |x| x.reconnects),
                last_event_id: last.clone(),
            })
        });
        let sub = Subscriber {
            engine: engine.clone(),
            csci_id: id.to_owned(),
            url: p.url,
            idle: p.interval.saturating_mul(3),
            tls: p.tls,
            status: status.clone(),
            last_event_id: last,
            items: 0,
        };
        let task = tokio::spawn(sub.run(wake.clone()));
        Subscription { target, task, wake }
    }

    /// Ends the backoff wait at once (the SCI went STALE).
    pub fn wake(&self) {
        self.wake.notify_one();
    }
}

struct Subscriber {
    engine: Engine,
    csci_id: String,
    url: String,
    idle: Duration,
    tls: Option<Loader>,
    status: PullStatus,
    last_event_id: String,
    /// Items (events and refused ones) read from every connection so far.
    items: u64,
}

/// How a connection ended.
enum Ended {
    /// The server ended the stream.
    Closed,
    Failed(FetchError),
}

impl Subscriber {
    fn set(&self, f: impl FnOnce(&mut SseState)) {
        self.status.with(&self.csci_id, |s| {
            if let Some(x) = s.sse.as_mut() {
                f(x)
            }
        });
    }

    async fn run(mut self, wake: Arc<Notify>) {
        let mut backoff = Backoff::new(BACKOFF_FIRST, BACKOFF_MAX);
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                self.set(|x| x.reconnects += 1);
            }
            self.set(|x| x.connection = Connection::Connecting);
            let before = self.items;
            let (ended, retry) = self.connection().await;
            // Only a stream that delivered an event starts the delays over: a server that
            // accepts (200, text/event-stream) and closes at once is backed off like one that
            // refuses, not reconnected to every second.
            if self.items > before {
                backoff.reset();
            }
            match ended {
                Ended::Closed => {
                    debug!(csci_id = self.csci_id, url = self.url, "SSE stream ended by the SCI; reconnecting");
                }
                Ended::Failed(e) => {
                    match &e {
                        FetchError::Tls(_) | FetchError::Config(_) => {
                            warn!(csci_id = self.csci_id, url = self.url, "SSE subscription failed: {e}")
                        }
                        _ => debug!(csci_id = self.csci_id, url = self.url, "SSE subscription failed: {e}"),
                    }
                    self.status.failed(&self.csci_id, e.to_string());
                }
            }
            let delay = backoff.fail().max(retry.unwrap_or_default().min(BACKOFF_MAX));
            self.set(|x| {
                x.connection = Connection::Waiting;
                x.http_version = None;
                x.connected_since = None;
            });
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = wake.notified() => {}
            }
        }
    }

    /// One connection: opened, read until it ends. Returns how it ended and the `retry`
    /// the server asked for.
    async fn connection(&mut self) -> (Ended, Option<Duration>) {
        let tls = match self.tls.as_mut().map(|l| l.get()) {
            Some(Err(e)) => return (Ended::Failed(FetchError::Config(e.to_string())), None),
            Some(Ok(c)) => Some(c),
            None => None,
        };
        let opened = tokio::time::timeout(TIMEOUT, open(&self.url, tls, &self.last_event_id))
            .await
            .unwrap_or_else(|_| Err(FetchError::Unreachable("timed out".into())));
        let (body, address, verified, h2) = match opened {
            Ok(x) => x,
            Err(e) => return (Ended::Failed(e), None),
        };
        info!(
            csci_id = self.csci_id,
            url = self.url,
            http = if h2 { "2" } else { "1.1" },
            last_event_id = self.last_event_id,
            "SSE stream open"
        );
        self.set(|x| {
            x.connection = Connection::Connected;
            x.http_version = Some(if h2 { "2" } else { "1.1" });
            x.connected_since = Some(Utc::now());
        });
        let sender = Sender {
            csci_id: Some(self.csci_id.clone()),
            transport: TRANSPORT,
            address,
            proof: verified.then_some(Proof::Certificate),
            ..Sender::default()
        };
        let max = self.engine.limits.pull_response_bytes;
        let mut parser = event::Parser::new(
            event::Limits { max_line: max, max_event: max },
            std::mem::take(&mut self.last_event_id),
        );
        let ended = self.read(body, &mut parser, &sender).await;
        // An id-only event (no data, nothing dispatched) moves what the reconnection sends.
        if parser.last_event_id() != self.last_event_id {
            let id = parser.last_event_id().to_owned();
            self.last_event_id.clone_from(&id);
            self.set(|x| x.last_event_id = id);
        }
        let retry = parser.retry.map(Duration::from_millis);
        (ended, retry)
    }

    async fn read(&mut self, mut body: Incoming, parser: &mut event::Parser, sender: &Sender) -> Ended {
        loop {
            let frame = match tokio::time::timeout(self.idle, body.frame()).await {
                Err(_) => {
                    return Ended::Failed(FetchError::Unreachable(format!(
                        "no data for {} s (three intervals): reconnecting",
                        self.idle.as_secs()
                    )))
                }
                Ok(None) => return Ended::Closed,
                Ok(Some(Err(e))) => return Ended::Failed(failure(&e)),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else { continue };
            parser.push(data);
            while let Some(item) = parser.next() {
                self.item(item, sender).await;
            }
        }
    }

    /// One dispatched event: a report for the engine, or a refusal counted as malformed.
    async fn item(&mut self, item: event::Item, sender: &Sender) {
        let id = match &item {
            event::Item::Event(e) => e.id.clone(),
            event::Item::Oversized { id, .. } => id.clone(),
        };
        self.items += 1;
        self.last_event_id.clone_from(&id);
        self.set(|x| {
            x.events += 1;
            x.last_event_id = id;
        });
        let csci_id = self.csci_id.clone();
        // Each event is a message of the SCI's pace, like a pushed one: the per-source
        // bucket is taken before anything is decoded or logged, so a stream of tiny (or
        // malformed) events costs the agent no more than a flood of pushed messages would.
        if let Some(a) = sender.address {
            if let Err(wait) = self.engine.ingress.admit(a, TRANSPORT) {
                self.status.failed(
                    &csci_id,
                    format!("an event was refused: over the per-source rate limit (retry in {} s)", wait.as_secs()),
                );
                return;
            }
        }
        let refused = match item {
            event::Item::Oversized { limit, .. } => {
                let max = if limit == "id" { event::MAX_ID } else { self.engine.limits.pull_response_bytes };
                format!("an event's {limit} is over {max} bytes: dropped")
            }
            event::Item::Event(e) => match report::decode(&e.data, Encoding::Json) {
                Ok(raws) => {
                    match self.engine.ingest_message(raws, None, &e.data, sender.clone()).await {
                        Ok(results) => {
                            self.status.with(&csci_id, |s| s.last_success = Some(Utc::now()));
                            for (reason, detail) in results.iter().filter_map(|r| r.as_ref().err()) {
                                debug!(csci_id, reason = reason.identity(), "SSE report refused: {detail:?}");
                            }
                        }
                        Err(f) => self.status.failed(&csci_id, format!("an event was refused: {}", f.detail)),
                    }
                    return;
                }
                Err(e) => format!("an event's data is not a report: {e}"),
            },
        };
        warn!(csci_id, url = self.url, "SSE event refused: {refused}");
        self.status.failed(&csci_id, refused);
        self.engine.submit_peer(move |core| core.count_rejection(Rejection::Malformed, "sse", &csci_id)).await;
    }
}

/// Opens the stream and closes it at once (the `probe-sci` probe of an sse target).
pub async fn probe(url: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<(), FetchError> {
    tokio::time::timeout(TIMEOUT, open(url, tls, ""))
        .await
        .unwrap_or_else(|_| Err(FetchError::Unreachable("timed out".into())))
        .map(|_| ())
}

/// Opens the stream: GET with `Accept: text/event-stream` (and `Last-Event-ID` when one is
/// known), HTTP/2 when the TLS handshake chose it. Returns the body, the server's address,
/// whether it was verified over TLS, and whether HTTP/2 is spoken.
async fn open(
    url: &str,
    tls: Option<Arc<rustls::ClientConfig>>,
    last_event_id: &str,
) -> Result<(Incoming, Option<std::net::IpAddr>, bool, bool), FetchError> {
    use FetchError::{Config, Refused, Unreachable};
    let ep = Endpoint::parse(url)?;
    let c = ep.connect(tls).await?;
    let mut req = hyper::Request::get(if c.h2 {
        ep.uri.clone()
    } else {
        ep.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/").parse().map_err(|e| Config(format!("{e}")))?
    })
    .header(hyper::header::ACCEPT, "text/event-stream")
    .header(hyper::header::CACHE_CONTROL, "no-cache")
    .header(hyper::header::ACCEPT_ENCODING, "identity");
    if !c.h2 {
        req = req.header(hyper::header::HOST, ep.authority.as_str());
    }
    if !last_event_id.is_empty() {
        match hyper::header::HeaderValue::from_str(last_event_id) {
            Ok(v) => req = req.header("last-event-id", v),
            Err(_) => debug!(url, "the last event id is not a valid header value: not sent"),
        }
    }
    let req = req.body(Empty::<Bytes>::new()).map_err(|e| Config(e.to_string()))?;
    let resp = if c.h2 {
        let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_header_list_size(MAX_HEADER_LIST)
            .handshake::<_, Empty<Bytes>>(TokioIo::new(c.io))
            .await
            .map_err(|e| failure(&e))?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| failure(&e))?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(64 * 1024)
            .handshake(TokioIo::new(c.io))
            .await
            .map_err(|e| failure(&e))?;
        tokio::spawn(conn);
        send.send_request(req).await.map_err(|e| failure(&e))?
    };
    if resp.status() != hyper::StatusCode::OK {
        return Err(Unreachable(format!("HTTP {} (an event stream answers 200)", resp.status())));
    }
    let header = |name: hyper::header::HeaderName| {
        resp.headers().get(name).map(|v| crate::text::printable(&String::from_utf8_lossy(v.as_bytes()), 64))
    };
    if let Some(ce) = header(hyper::header::CONTENT_ENCODING).filter(|c| !c.eq_ignore_ascii_case("identity")) {
        return Err(Refused(format!("content-encoding {ce:?} is not accepted (identity only)")));
    }
    let ct = header(hyper::header::CONTENT_TYPE).unwrap_or_default();
    let essence = ct.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("text/event-stream") {
        return Err(Refused(format!("content type {ct:?} is not text/event-stream")));
    }
    Ok((resp.into_body(), c.address, ep.scheme.tls(), c.h2))
}
