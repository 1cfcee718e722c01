//! Dynamic subscriptions over RESTCONF (RFC 8650): establish-, modify-, delete- and
//! kill-subscription as `{+restconf}/operations/ietf-subscribed-notifications:…` (and
//! `ietf-yang-push:resync-subscription`), and the
//! subscription's notifications as server-sent events on `{+restconf}/subscriptions/<id>`.
//!
//! Each subscription gets a synthetic RESTCONF session id (the YANG-Push registry binds
//! subscriptions to sessions): the SSE connection is that session, so closing it ends the
//! subscription (RFC 8650 section 3). A subscription nobody attaches to within
//! `restconf.subscription_attach_timeout_secs` is deleted. Only the user who established a subscription may read,
//! modify or delete it.

use crate::yang::PrintText as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Method;
use tokio::sync::mpsc;
use yang2::data::{DataFormat, DataPrinterFlags};

use super::error::Failure;
use super::media::Encoding;
use super::streams::SseStream;
use super::{reply, Caller, Reply, Req, Restconf};
use crate::datastore::SessionId;
use crate::error::{ErrorTag, RpcError};
use crate::push::{params, NS_SN};
use crate::xml::escape_text;

/// The module of the operations served here.
pub const MODULE: &str = "ietf-subscribed-notifications";
/// RFC 8650's augmentation of the establish-subscription output (the `uri` leaf).
pub const NS_RESTCONF_SN: &str = "urn:ietf:params:xml:ns:yang:ietf-restconf-subscribed-notifications";
const RESTCONF_SN: &str = "ietf-restconf-subscribed-notifications";
/// Notifications queued between the registry and the SSE connection.
const QUEUE: usize = 64;

/// The RPCs of ietf-subscribed-notifications this binding serves.
pub fn is_operation(module: &str, rpc: &str) -> bool {
    (module == MODULE
        && matches!(
            rpc,
            "establish-subscription" | "modify-subscription" | "delete-subscription" | "kill-subscription"
        ))
        || (module == YANG_PUSH && rpc == "resync-subscription")
}

/// ietf-yang-push, whose resync-subscription is served here too.
pub const YANG_PUSH: &str = "ietf-yang-push";

/// An input libyang refused: an encoding identity this server lacks (encode-json is
/// disabled by its feature) is RFC 8639's encoding-unsupported, as over NETCONF.
pub fn input_error(e: RpcError) -> RpcError {
    if e.app_tag.is_none() && e.message.contains("ietf-subscribed-notifications:encode-") {
        return e.with_app_tag(params::sn("encoding-unsupported"));
    }
    e
}

/// A subscription's notifications and the call that starts it, until a GET attaches.
type Waiting = (mpsc::Receiver<String>, Box<dyn FnOnce() + Send>);

/// A subscription established over RESTCONF.
struct Sub {
    user: String,
    session: SessionId,
    /// Until a GET attaches: the notifications and the start of the subscription.
    waiting: Option<Waiting>,
}

/// The subscriptions established over RESTCONF, by id.
#[derive(Default)]
pub struct Subscriptions(Mutex<HashMap<u32, Sub>>);

impl Subscriptions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Sub>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registry session of subscription `id` if `user` owns it.
    fn session_of(&self, id: u32, user: &str) -> Option<SessionId> {
        self.lock().get(&id).filter(|s| s.user == user).map(|s| s.session)
    }
}

fn no_such(id: u32) -> Failure {
    params::error(
        ErrorTag::InvalidValue,
        &params::sn("no-such-subscription"),
        format!("no subscription {id} of this user"),
    )
    .into()
}

/// POST `{+restconf}/operations/ietf-subscribed-notifications:<rpc>`, after the NACM exec
/// check; `input` is the RPC request tree parsed from the body.
pub fn operation(
    rc: &Arc<Restconf>,
    caller: &Caller,
    req: &Req,
    rpc: &str,
    input: &yang2::data::DataTree<'static>,
) -> Result<Reply, Failure> {
    // The registry reads the NETCONF form of the input: print the validated tree as XML.
    let xml = input
        .print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS)
        .map_err(|e| RpcError::from_libyang(&e))?
        .unwrap_or_default();
    let op = crate::xml::parse(&xml)
        .map_err(|e| RpcError::application(ErrorTag::OperationFailed, format!("input re-encoding: {}", e.0)))?;
    let push = &rc.core.push;
    match rpc {
        "establish-subscription" => establish(rc, caller, req, &op, &xml),
        "modify-subscription" => {
            let m = params::modify(&op, &xml, &rc.core.push.filters()).map_err(filter_refusal)?;
            let session = rc.subscriptions.session_of(m.id, &caller.user).ok_or_else(|| no_such(m.id))?;
            let apply = push.modify(&rc.core, session, m)?;
            apply();
            Ok(super::no_content(204))
        }
        "delete-subscription" => {
            let id = params::id(&op, NS_SN)?;
            let session = rc.subscriptions.session_of(id, &caller.user).ok_or_else(|| no_such(id))?;
            push.delete(session, id)?;
            if rc.subscriptions.lock().remove(&id).is_some() {
                rc.core.nacm.session_closed(session);
            }
            Ok(super::no_content(204))
        }
        "kill-subscription" => {
            let id = params::id(&op, NS_SN)?;
            push.kill(id)?;
            Ok(super::no_content(204))
        }
        "resync-subscription" => {
            let id = params::id(&op, crate::push::NS_YP)?;
            let session = rc.subscriptions.session_of(id, &caller.user).ok_or_else(|| {
                params::error(
                    ErrorTag::InvalidValue,
                    &params::yp("no-such-subscription-resync"),
                    format!("no on-change subscription {id} of this user"),
                )
            })?;
            let resync = push.resync(session, id)?;
            resync();
            Ok(super::no_content(204))
        }
        _ => Err(Failure::not_found(format!("{rpc} is not an operation of this server"))),
    }
}

fn establish(
    rc: &Arc<Restconf>,
    caller: &Caller,
    req: &Req,
    op: &crate::xml::Element,
    xml: &str,
) -> Result<Reply, Failure> {
    let mut p = params::establish(op, xml, &rc.core.push.filters()).map_err(filter_refusal)?;
    // RFC 8650 section 3: without an encoding, notifications come in the encoding of the
    // RPC (its reply's media type); CBOR is for UDP-notif receivers only.
    match p.encoding {
        None => {
            p.encoding = Some(match req.accept {
                Encoding::Json => crate::notif::Encoding::Json,
                Encoding::Xml => crate::notif::Encoding::Xml,
            })
        }
        Some(crate::notif::Encoding::Cbor) => {
            return Err(RpcError::application(
                ErrorTag::InvalidValue,
                "encode-cbor is for UDP-notif receivers of configured subscriptions; RESTCONF sends XML or JSON",
            )
            .with_app_tag(params::sn("encoding-unsupported"))
            .into())
        }
        Some(_) => {}
    }
    // The subscription's own identity, held until it ends (released with `release`).
    let session = rc
        .core
        .nacm
        .open_identity(&crate::nacm::RESTCONF_IDS, &caller.user)
        .ok_or_else(|| Failure::status(503, ErrorTag::ResourceDenied, "no subscription identity is free"))?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let est = match rc.core.push.establish(&rc.core, session, &caller.user, tx, p) {
        Ok(e) => e,
        Err(e) => {
            rc.core.nacm.session_closed(session);
            return Err(e.into());
        }
    };
    let id = est.id;
    rc.subscriptions.lock().insert(id, Sub { user: caller.user.clone(), session, waiting: Some((rx, est.start)) });
    // Nobody came for it: the subscription goes (RFC 8650 section 3).
    let weak = Arc::downgrade(rc);
    let wait = Duration::from_secs(rc.settings.subscription_attach_timeout_secs);
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let Some(rc) = weak.upgrade() else { return };
        let unattached = {
            let mut subs = rc.subscriptions.lock();
            match subs.get(&id) {
                Some(s) if s.waiting.is_some() => subs.remove(&id),
                _ => None,
            }
        };
        if let Some(s) = unattached {
            tracing::info!(id, "RESTCONF subscription not attached within {wait:?}: deleted");
            rc.core.push.session_ended(s.session);
            rc.core.nacm.session_closed(s.session);
        }
    });
    // Absolute, like the stream locations in restconf-state (inet:uri).
    let base = super::streams::BASE_URL.get().map(String::as_str).unwrap_or("/restconf");
    let uri = format!("{base}/subscriptions/{id}");
    let mut revision = None;
    if let Some(t) = est.replay_start_revision {
        revision = Some(crate::push::encode::time(t));
    }
    let body = match req.accept {
        Encoding::Json => {
            let mut out = serde_json::Map::new();
            out.insert("id".into(), id.into());
            if let Some(r) = &revision {
                out.insert("replay-start-time-revision".into(), r.clone().into());
            }
            out.insert(format!("{RESTCONF_SN}:uri"), uri.into());
            serde_json::json!({ format!("{MODULE}:output"): out }).to_string()
        }
        Encoding::Xml => {
            let r = revision
                .map(|r| format!("<replay-start-time-revision>{r}</replay-start-time-revision>"))
                .unwrap_or_default();
            format!(
                "<output xmlns=\"{NS_SN}\"><id>{id}</id>{r}<uri xmlns=\"{NS_RESTCONF_SN}\">{}</uri></output>",
                escape_text(&uri)
            )
        }
    };
    Ok(reply(200, req.accept, body))
}

/// GET `{+restconf}/subscriptions/<id>`: the subscription's notifications as SSE.
pub fn handle(rc: &Arc<Restconf>, caller: &Caller, req: &Req, tail: &str) -> Result<Reply, Failure> {
    let id: u32 = tail
        .strip_suffix('/')
        .unwrap_or(tail)
        .parse()
        .map_err(|_| Failure::not_found(format!("\"{tail}\" is not a subscription of this server")))?;
    if req.method != Method::GET {
        return Err(Failure::method("GET", "a subscription is read with GET (text/event-stream)"));
    }
    if let Some((k, _)) = req.query.first() {
        return Err(Failure::bad(ErrorTag::InvalidValue, format!("query parameter \"{k}\" does not apply here")));
    }
    let (session, rx, start) = {
        let mut subs = rc.subscriptions.lock();
        // Another user's subscription is not disclosed: the same 404 as for none.
        let Some(s) = subs.get_mut(&id).filter(|s| s.user == caller.user) else {
            return Err(Failure::not_found(format!("no subscription {id} of this user")));
        };
        let Some((rx, start)) = s.waiting.take() else {
            return Err(Failure::status(409, ErrorTag::InUse, format!("subscription {id} is already being received")));
        };
        (s.session, rx, start)
    };
    let (reply, sse) = SseStream::open();
    start();
    let weak = Arc::downgrade(rc);
    let shutdown = rc.core.shutdown.subscribe();
    tokio::spawn(async move {
        deliver(sse, rx, shutdown).await;
        if let Some(rc) = weak.upgrade() {
            let removed = rc.subscriptions.lock().remove(&id).is_some();
            // The transport went: so does the subscription (no-op if it already ended).
            rc.core.push.session_ended(session);
            // Released once, by whoever removed the entry (an identity closed twice could
            // be another request's by then).
            if removed {
                rc.core.nacm.session_closed(session);
            }
        }
    });
    Ok(reply)
}

/// Forwards notifications until the subscription ends, the client goes, or the server stops.
async fn deliver(sse: SseStream, mut rx: mpsc::Receiver<String>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        let next = tokio::select! {
            m = rx.recv() => m,
            _ = super::stopped(&mut shutdown) => return,
            _ = async { while !sse.closed() { tokio::time::sleep(Duration::from_secs(1)).await } } => return,
        };
        match next {
            Some(m) => {
                if !sse.send(&m).await {
                    return;
                }
            }
            None => return,
        }
    }
}

/// A filter refused for its cost is 413 (issue 11 class 3), like a stream filter; other
/// errors keep their RFC 8040 status.
fn filter_refusal(e: RpcError) -> Failure {
    if e.tag == ErrorTag::ResourceDenied && e.bad_element.as_deref().is_some_and(|b| b.contains("filter")) {
        Failure { status: 413, errors: vec![e], allow: None }
    } else {
        e.into()
    }
}
