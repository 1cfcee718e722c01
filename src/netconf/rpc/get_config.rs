//! `<get-config>` (RFC 6241 section 7.1), with subtree/XPath filters and with-defaults.

use super::{data_element, datastore_param, filter_param, nacm_filter, one, with_defaults, Body, OpResult, SessionCtx};
use crate::netconf::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let source = datastore_param(op, "source")?;
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let ds = &ctx.server.datastores;
    let nacm = &ctx.server.nacm;
    let user = &ctx.info.username;
    let data = ds
        .with_tree(source, |tree| match &filter {
            // Unfiltered, nothing to hide: print the datastore tree itself, no copy.
            None if nacm.read_is_unrestricted(user, tree) => data_element(tree, wd),
            None => {
                let mut copy = tree.duplicate().map_err(|e| one(crate::error::RpcError::from_libyang(&e)))?;
                nacm_filter(ctx, &mut copy);
                data_element(&copy, wd)
            }
            Some(f) => {
                let mut selected = f.apply(tree).map_err(one)?;
                nacm_filter(ctx, &mut selected);
                data_element(&selected, wd)
            }
        })
        .map_err(one)??;
    Ok(Body::Data(data))
}
