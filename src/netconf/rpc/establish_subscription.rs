//! `<establish-subscription>` (RFC 8639 section 2.4.2, RFC 8641 section 4.4.1, NETCONF
//! binding RFC 8640): a dynamic subscription to an event stream or a datastore, bound to
//! this session. The reply carries the subscription id; notifications start after it.

use super::{one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::push::{self, params, NS_SN};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let params = params::establish(op, src, &ctx.server.push.filters()).map_err(one)?;
    // RFC 8640 carries notifications as RFC 5277 `<notification>` elements: XML only.
    if params.encoding.is_some_and(|e| e != push::encode::Encoding::Xml) {
        return Err(one(params::error(
            ErrorTag::InvalidValue,
            &params::sn("encoding-unsupported"),
            "NETCONF sends notifications as XML (RFC 8640); encode-json is served over RESTCONF (RFC 8650) and to configured receivers",
        )
        .with_bad_element("encoding")));
    }
    let out = ctx.outbox().ok_or_else(|| {
        one(RpcError::application(ErrorTag::OperationFailed, "this session cannot receive notifications"))
    })?;
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
