//! `<get>` (RFC 6241 section 7.7): running configuration plus operational state.

use super::{data_element, filter_param, one, readable, with_defaults, Body, OpResult, SessionCtx};
use crate::datastore::Datastore;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    // NACM first, then the filter: the filter only sees what the user may read.
    let tree = readable(ctx, Datastore::Operational)?;
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
}
