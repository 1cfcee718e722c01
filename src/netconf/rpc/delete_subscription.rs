//! `<delete-subscription>` and `<kill-subscription>` (RFC 8639 sections 2.4.4 and 2.4.5):
//! end one of this session's subscriptions, or (kill, an operator's RPC that NACM denies by
//! default) any session's, whose receiver then gets subscription-terminated.

use super::{one, Body, OpResult, SessionCtx};
use crate::push::{params, NS_SN};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let id = params::id(op, NS_SN).map_err(one)?;
    ctx.server.push.delete(ctx.id, id).map_err(one)?;
    Ok(Body::Ok)
}

pub fn kill(ctx: &SessionCtx, op: &Element) -> OpResult {
    let id = params::id(op, NS_SN).map_err(one)?;
    ctx.server.push.kill(id).map_err(one)?;
    Ok(Body::Ok)
}
