//! `<commit>` (RFC 6241 sections 8.3 and 8.4): the candidate becomes running; with
//! `<confirmed/>` it is rolled back unless confirmed (see `confirmed_commit.rs`).

use super::{one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::confirmed_commit::{CommitRequest, DEFAULT_TIMEOUT};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let timeout = match op.param("confirm-timeout") {
        None => DEFAULT_TIMEOUT,
        Some(t) => match t.trimmed().parse::<u32>() {
            Ok(v) if v > 0 => v,
            _ => {
                return Err(one(RpcError::protocol(
                    ErrorTag::InvalidValue,
                    format!("invalid confirm-timeout \"{}\"", t.trimmed()),
                )
                .with_bad_element("confirm-timeout")))
            }
        },
    };
    let req = CommitRequest {
        confirmed: op.param("confirmed").is_some(),
        timeout,
        persist: op.param("persist").map(|p| p.trimmed().to_owned()),
        persist_id: op.param("persist-id").map(|p| p.trimmed().to_owned()),
    };
    if !req.confirmed && (op.param("confirm-timeout").is_some() || req.persist.is_some()) {
        return Err(one(RpcError::protocol(ErrorTag::InvalidValue, "confirm-timeout and persist need <confirmed/>")
            .with_bad_element(if req.persist.is_some() { "persist" } else { "confirm-timeout" })));
    }
    ctx.server.confirmed_commit.commit(&ctx.server, ctx.id, req).map_err(one)?;
    Ok(Body::Ok)
}
