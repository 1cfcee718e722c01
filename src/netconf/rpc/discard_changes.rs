//! `<discard-changes>` (RFC 6241 section 8.3.4.2): the candidate is reset to running.

use super::{one, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, _op: &Element) -> OpResult {
    ctx.server.datastores.discard(ctx.id).map_err(one)?;
    Ok(Body::Ok)
}
