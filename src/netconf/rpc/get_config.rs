//! `<get-config>` (RFC 6241 section 7.1), with subtree/XPath filters and with-defaults.

use super::{data_element, datastore_param, filter_param, one, readable, with_defaults, Body, OpResult, SessionCtx};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let source = datastore_param(op, "source")?;
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let ds = &ctx.server.datastores;
    let nacm = &ctx.server.nacm;
    let user = &ctx.info.username;
    if filter.is_none() {
        // Unfiltered, nothing to hide: print the datastore tree itself, no copy (printing
        // costs what the tree holds, whoever asks).
        let direct = ds
            .with_tree(source, |tree| nacm.read_is_unrestricted(user, tree).then(|| data_element(tree, wd)))
            .map_err(one)?;
        if let Some(data) = direct {
            return Ok(Body::Data(data?));
        }
    }
    // NACM first, then the filter, on a snapshot: the lock is not held while it runs.
    let tree = readable(ctx, source)?;
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
}
