//! `<delete-config>` (RFC 6241 section 7.4): startup only; running can never be deleted.

use super::{datastore_param, one, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let target = datastore_param(op, "target")?;
    ctx.server.datastores.delete(ctx.id, target).map_err(one)?;
    Ok(Body::Ok)
}
