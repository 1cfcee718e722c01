//! `<unlock>` (RFC 6241 section 7.6): only the holder may unlock; releasing the candidate
//! lock discards its uncommitted changes.

use super::{datastore_param, one, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let target = datastore_param(op, "target")?;
    ctx.server.datastores.unlock(ctx.id, target).map_err(one)?;
    Ok(Body::Ok)
}
