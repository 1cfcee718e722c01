//! `<cancel-commit>` (RFC 6241 section 8.4.9, :confirmed-commit:1.1).

use super::{one, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let persist_id = op.param("persist-id").map(|p| p.trimmed().to_owned());
    ctx.server.confirmed_commit.cancel(&ctx.server, ctx.id, persist_id.as_deref()).map_err(one)?;
    Ok(Body::Ok)
}
