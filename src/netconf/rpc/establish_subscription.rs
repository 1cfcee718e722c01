//! `<establish-subscription>` (RFC 8639 section 2.4.2, RFC 8641 section 4.4.1, NETCONF
//! binding RFC 8640): a dynamic subscription to an event stream or a datastore, bound to
//! this session. The reply carries the subscription id; notifications start after it.

use super::{one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::push::encode::Encoding;
use crate::push::{self, params, NS_SN};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let params = params::establish(op, src, &ctx.server.push.filters()).map_err(one)?;
    // RFC 8640 carries notifications as RFC 5277 `<notification>` elements; JSON goes
    // inside one (`push::encode::netconf_json`). CBOR is binary: UDP-notif only.
    let json = match params.encoding {
        None | Some(Encoding::Xml) => false,
        Some(Encoding::Json) => true,
        Some(Encoding::Cbor) => {
            return Err(one(params::error(
                ErrorTag::InvalidValue,
                &params::sn("encoding-unsupported"),
                "NETCONF sends notifications as XML (RFC 8640), or as RFC 7951 JSON text inside one with encode-json; encode-cbor is served to UDP-notif receivers",
            )
            .with_bad_element("encoding")));
        }
    };
    let mut out = ctx.outbox().ok_or_else(|| {
        one(RpcError::application(ErrorTag::OperationFailed, "this session cannot receive notifications"))
    })?;
    if json {
        out = wrap_json(out);
    }
    let est = ctx.server.push.establish(&ctx.server, ctx.id, &ctx.info.username, out, params).map_err(one)?;
    ctx.after_reply(est.start);
    let mut body = format!("<id xmlns=\"{NS_SN}\">{}</id>", est.id);
    if let Some(t) = est.replay_start_revision {
        body.push_str(&format!(
            "<replay-start-time-revision xmlns=\"{NS_SN}\">{}</replay-start-time-revision>",
            push::encode::time(t)
        ));
    }
    Ok(Body::Data(body))
}

/// A sender that puts each JSON message of the subscription into its NETCONF envelope
/// on the way to the session. One slot: the session's backpressure still reaches the
/// subscription's own queue, which is where flow control counts and suspends.
fn wrap_json(session: tokio::sync::mpsc::Sender<String>) -> tokio::sync::mpsc::Sender<String> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1);
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if session.send(push::encode::netconf_json(&m)).await.is_err() {
                return;
            }
        }
    });
    tx
}
