//! `<modify-subscription>` (RFC 8639 section 2.4.3, RFC 8641 section 4.4.2): new filter,
//! stop-time, period or dampening for one of this session's subscriptions; the receiver
//! gets subscription-modified after the reply.

use super::{one, Body, OpResult, SessionCtx};
use crate::push::params;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element, src: &str) -> OpResult {
    let m = params::modify(op, src, &ctx.server.push.filters()).map_err(one)?;
    let apply = ctx.server.push.modify(&ctx.server, ctx.id, m).map_err(one)?;
    ctx.after_reply(apply);
    Ok(Body::Ok)
}
