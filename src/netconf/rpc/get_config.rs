//! `<get-config>` (RFC 6241 section 7.1), with subtree/XPath filters and with-defaults.

use super::{data_element, datastore_param, filter_param, one, with_defaults, Body, OpResult, SessionCtx};
use crate::netconf::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let source = datastore_param(op, "source")?;
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let ds = &ctx.server.datastores;
    let data = ds
        .with_tree(source, |tree| match &filter {
            // Unfiltered: print the datastore tree itself, no copy.
            None => data_element(tree, wd),
            Some(f) => data_element(&f.apply(tree).map_err(one)?, wd),
        })
        .map_err(one)??;
    Ok(Body::Data(data))
}
