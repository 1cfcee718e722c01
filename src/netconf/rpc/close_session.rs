//! `<close-session>` (RFC 6241 section 7.8): reply ok, then the session ends and releases
//! its locks.

use super::{Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(_ctx: &SessionCtx, _op: &Element) -> OpResult {
    Ok(Body::Ok)
}
