//! Event streams (RFC 8040 sections 3.8 and 6): the stream list in
//! `ietf-restconf-monitoring:restconf-state/streams` and delivery of the NETCONF stream as
//! server-sent events, in XML or JSON, with filter, start-time (replay) and stop-time.
//!
//! The SSE plumbing ([`SseStream`]) is separate from what feeds it, so RFC 8650
//! subscriptions (push-update / push-change-update from YANG-Push) can use it as another
//! source.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use chrono::Utc;
use hyper::header::HeaderValue;
use hyper::{Method, Response};
use tokio::sync::{broadcast, mpsc};
use yang2::data::DataTree;

use super::body::RcBody;
use super::error::Failure;
use super::query::Params;
use super::{Caller, Reply, Req, Restconf};
use crate::config::RestconfSettings;
use crate::datastore::StateProvider;
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::events::{Event, NotificationFilter, NETCONF_STREAM};

/// The base URL clients reach the server at (set once the listener is bound), for the
/// stream locations in restconf-state.
pub static BASE_URL: OnceLock<String> = OnceLock::new();

/// Capabilities of RFC 8040 section 9.1.1 (and RFC 8072's yang-patch).
pub const CAPABILITIES: &[&str] = &[
    "urn:ietf:params:restconf:capability:defaults:1.0?basic-mode=explicit",
    "urn:ietf:params:restconf:capability:depth:1.0",
    "urn:ietf:params:restconf:capability:fields:1.0",
    "urn:ietf:params:restconf:capability:filter:1.0",
    "urn:ietf:params:restconf:capability:replay:1.0",
    "urn:ietf:params:restconf:capability:with-defaults:1.0",
    "urn:ietf:params:restconf:capability:yang-patch:1.0",
];

/// Renders `restconf-state` into the operational view.
pub struct MonitoringState {
    pub settings: RestconfSettings,
}

impl StateProvider for MonitoringState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("ietf-restconf-monitoring", "restconf-state")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if xpath.is_some_and(|x| !x.contains("ietf-restconf-monitoring") && x != "/") {
            return Ok(());
        }
        let base = "/ietf-restconf-monitoring:restconf-state";
        let ly = |e: yang2::Error| RpcError::from_libyang(&e);
        for c in CAPABILITIES {
            tree.new_path(&format!("{base}/capabilities/capability[.='{c}']"), None, false).map_err(ly)?;
        }
        let s = format!("{base}/streams/stream[name='{NETCONF_STREAM}']");
        tree.new_path(&format!("{s}/description"), Some("The agent's NETCONF event stream (RFC 5277): its own notifications and the RFC 6470 base notifications"), false).map_err(ly)?;
        tree.new_path(&format!("{s}/replay-support"), Some("true"), false).map_err(ly)?;
        if let Some(base_url) = BASE_URL.get() {
            for enc in ["xml", "json"] {
                tree.new_path(
                    &format!("{s}/access[encoding='{enc}']/location"),
                    Some(&format!("{base_url}/streams/{NETCONF_STREAM}/{enc}")),
                    false,
                )
                .map_err(ly)?;
            }
        }
        Ok(())
    }
}

/// An open SSE response: events pushed here reach the client until it goes away.
pub struct SseStream {
    tx: mpsc::Sender<Bytes>,
}

impl SseStream {
    /// The 200 text/event-stream response and the sender feeding it.
    pub fn open() -> (Reply, SseStream) {
        let (tx, rx) = mpsc::channel(64);
        let mut r = Response::new(RcBody::Stream(rx));
        r.headers_mut().insert("content-type", HeaderValue::from_static("text/event-stream"));
        r.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
        (r, SseStream { tx })
    }

    /// Sends one event: each line of `data`, whether it ends in CRLF, CR or LF, as its own
    /// SSE `data:` field (a lone CR is a line end to every SSE parser, so text carrying one
    /// could otherwise start a forged field or event). False when the client has gone.
    pub async fn send(&self, data: &str) -> bool {
        self.tx.send(Bytes::from(crate::text::sse_event(data))).await.is_ok()
    }

    pub fn closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// One event as RFC 8040 section 6.4 encodes it.
pub fn encode(ev: &Event, json: bool) -> Option<String> {
    if !json {
        return Some(ev.message());
    }
    crate::push::encode::message(crate::notif::Encoding::Json, ev.time, &ev.body)
}

fn marker(name: &str, json: bool) -> String {
    if json {
        serde_json::json!({ "ietf-restconf:notification": {
            "eventTime": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            format!("nc-notifications:{name}"): {}
        }})
        .to_string()
    } else {
        crate::mgmt::events::marker(name)
    }
}

pub async fn handle(rc: &Restconf, caller: &Caller, req: &Req, tail: &str) -> Result<Reply, Failure> {
    let (stream, enc) = tail.split_once('/').unwrap_or((tail, ""));
    if stream != NETCONF_STREAM {
        return Err(Failure::not_found(format!("no event stream \"{stream}\"")));
    }
    let json = match enc {
        "json" => true,
        "xml" => false,
        _ => return Err(Failure::not_found(format!("stream {stream} has encodings xml and json, not \"{enc}\""))),
    };
    if req.method != Method::GET {
        return Err(Failure::method("GET", "an event stream is read with GET (text/event-stream)"));
    }
    let p = Params::parse(&req.method, &req.query, true)?;
    if let Some(start) = p.start_time {
        if start > Utc::now() {
            return Err(Failure::bad(ErrorTag::InvalidValue, "start-time is in the future"));
        }
    }
    if let (Some(a), Some(b)) = (p.start_time, p.stop_time) {
        if b < a {
            return Err(Failure::bad(ErrorTag::InvalidValue, "stop-time is before start-time"));
        }
    }
    let filter = match &p.filter {
        Some(x) => {
            // Checked once now, so a bad expression is a 400 and not a silent nothing.
            crate::mgmt::filter::check_xpath(x).map_err(|e| match e.tag {
                // Too costly: 413; an expression refused for what it is: 400.
                ErrorTag::ResourceDenied => Failure::status(413, ErrorTag::ResourceDenied, e.message),
                tag => Failure::bad(tag, e.message),
            })?;
            crate::yang::context()
                .find_xpath(x)
                .map_err(|e| Failure::bad(ErrorTag::InvalidValue, format!("filter \"{x}\": {e}")))?;
            Some(NotificationFilter::XPath(x.clone()))
        }
        None => None,
    };
    let (replay, live) = rc.core.events.subscribe(p.start_time);
    let (reply, sse) = SseStream::open();
    let nacm = rc.core.nacm.clone();
    let user = caller.user.clone();
    let shutdown = rc.core.shutdown.subscribe();
    let stop = p.stop_time;
    let replaying = p.start_time.is_some();
    tokio::spawn(deliver(sse, replay, live, Delivery { filter, nacm, user, json, stop, replaying }, shutdown));
    Ok(reply)
}

struct Delivery {
    filter: Option<NotificationFilter>,
    nacm: Arc<crate::nacm::Nacm>,
    user: String,
    json: bool,
    stop: Option<chrono::DateTime<Utc>>,
    replaying: bool,
}

impl Delivery {
    /// The event as this user may see it (NACM-pruned content), if the filter selects it.
    fn wanted(&self, ev: &Arc<Event>) -> Option<Arc<Event>> {
        self.nacm
            .event_for(&self.user, ev)
            .filter(|ev| self.filter.as_ref().is_none_or(|f| f.matches(ev, &self.nacm, &self.user)))
    }
}

async fn deliver(
    sse: SseStream,
    replay: Vec<Arc<Event>>,
    mut live: broadcast::Receiver<Arc<Event>>,
    d: Delivery,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut last_seq = None;
    for ev in replay {
        if d.stop.is_some_and(|s| ev.time > s) {
            break;
        }
        last_seq = Some(ev.seq);
        if let Some(ev) = d.wanted(&ev) {
            if let Some(text) = encode(&ev, d.json) {
                if !sse.send(&text).await {
                    return;
                }
            }
        }
    }
    if d.replaying && !sse.send(&marker("replayComplete", d.json)).await {
        return;
    }
    loop {
        let until_stop = d.stop.map(|s| (s - Utc::now()).to_std().unwrap_or_default());
        let next = tokio::select! {
            r = live.recv() => r,
            _ = super::stopped(&mut shutdown) => return,
            _ = async { match until_stop { Some(t) => tokio::time::sleep(t).await, None => std::future::pending().await } } => {
                let _ = sse.send(&marker("notificationComplete", d.json)).await;
                return;
            }
            _ = async { while !sse.closed() { tokio::time::sleep(std::time::Duration::from_secs(1)).await } } => return,
        };
        let ev = match next {
            Ok(ev) => ev,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(user = %d.user, "RESTCONF event stream subscriber fell behind; {n} events not delivered");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        // Events already replayed are not sent twice.
        if last_seq.is_some_and(|s| ev.seq <= s) {
            continue;
        }
        if d.stop.is_some_and(|s| ev.time > s) {
            let _ = sse.send(&marker("notificationComplete", d.json)).await;
            return;
        }
        if let Some(ev) = d.wanted(&ev) {
            if let Some(text) = encode(&ev, d.json) {
                if !sse.send(&text).await {
                    return;
                }
            }
        }
    }
}
