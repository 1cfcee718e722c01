//! `<kill-session>` (RFC 6241 section 7.9): ends another session; its locks are released
//! when it goes.

use super::{missing, one, Body, OpResult, SessionCtx};
use crate::error::{ErrorTag, RpcError};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let p = op.param("session-id").ok_or_else(|| missing("session-id", "kill-session"))?;
    let id: u32 = p.trimmed().parse().map_err(|_| {
        one(RpcError::protocol(ErrorTag::InvalidValue, format!("invalid session-id \"{}\"", p.trimmed()))
            .with_bad_element("session-id"))
    })?;
    if id == ctx.id {
        return Err(one(RpcError::protocol(ErrorTag::InvalidValue, "a session cannot kill itself; use close-session")
            .with_bad_element("session-id")));
    }
    let Some(victim) = ctx.server.session(id) else {
        return Err(one(
            RpcError::protocol(ErrorTag::InvalidValue, format!("no session {id}")).with_bad_element("session-id")
        ));
    };
    let _ = victim.kill.send(Some(ctx.id));
    // Release at once: the victim's task may take a moment to notice.
    ctx.server.close_session(id);
    Ok(Body::Ok)
}
