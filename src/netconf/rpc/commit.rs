//! `<commit>` (RFC 6241 section 8.3): the candidate becomes running.

use super::{one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::netconf::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    if op.param("confirmed").is_some() || op.param("persist").is_some() {
        return Err(one(RpcError::protocol(
            ErrorTag::OperationNotSupported,
            "confirmed commit is not available yet on this server",
        )
        .with_bad_element("confirmed")));
    }
    ctx.server.datastores.commit(ctx.id, false).map_err(one)?;
    Ok(Body::Ok)
}
