//! `<resync-subscription>` (RFC 8641 section 4.4.3): a push-update with everything an
//! on-change subscription of this session selects, pending changes dropped.

use super::{one, Body, OpResult, SessionCtx};
use crate::push::{params, NS_YP};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let id = params::id(op, NS_YP).map_err(one)?;
    let resync = ctx.server.push.resync(ctx.id, id).map_err(one)?;
    ctx.after_reply(resync);
    Ok(Body::Ok)
}
