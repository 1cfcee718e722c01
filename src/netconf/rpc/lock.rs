//! `<lock>` (RFC 6241 section 7.5): lock-denied carries the holder's session-id.

use super::{datastore_param, one, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let target = datastore_param(op, "target")?;
    ctx.server.datastores.lock(ctx.id, target).map_err(one)?;
    Ok(Body::Ok)
}
