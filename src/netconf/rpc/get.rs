//! `<get>` (RFC 6241 section 7.7): running configuration plus operational state.

use super::{data_element, filter_param, nacm_filter, one, with_defaults, Body, OpResult, SessionCtx};
use crate::datastore::Datastore;
use crate::netconf::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let tree = ctx.server.datastores.read(Datastore::Operational, None).map_err(one)?;
    let mut tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    nacm_filter(ctx, &mut tree);
    Ok(Body::Data(data_element(&tree, wd)?))
}
