//! `<get-config>` (RFC 6241 section 7.1), with subtree/XPath filters and with-defaults.

use super::get::{self, readable_covering};
use super::{data_element, datastore_param, filter_param, one, readable, with_defaults, Body, OpResult, SessionCtx};
use crate::mgmt::filter::{cost, subtree, Filter};
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let source = datastore_param(op, "source")?;
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let ds = &ctx.server.datastores;
    let nacm = &ctx.server.nacm;
    let user = &ctx.info.username;
    match &filter {
        None => {
            // Unfiltered, nothing to hide: print the datastore tree itself, no copy
            // (printing costs what the tree holds, whoever asks).
            let direct = ds
                .with_tree(source, |tree| nacm.whole(user, tree).is_some().then(|| data_element(tree, wd)))
                .map_err(one)?;
            if let Some(data) = direct {
                return Ok(Body::Data(data?));
            }
        }
        Some(Filter::Subtree(el)) if small(el) => {
            if let Some(selected) = select_whole(ds, source, nacm, user, el)? {
                return Ok(Body::Data(data_element(selected.tree(), wd)?));
            }
        }
        Some(Filter::Subtree(_)) => {}
        Some(Filter::XPath(_)) => {}
    }
    // NACM first, then the filter, on a copy of what the filter's selection covers: the
    // lock is not held while they run.
    let tree = match &filter {
        None => readable(ctx, source)?,
        Some(f) => readable_covering(ctx, source, &get::selection(f))?,
    };
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
}

/// A small subtree filter walks only the branches it names, each at most once per
/// sibling: for a reader who may read everything of the datastore `source` it selects
/// straight from the datastore tree, one copy of what it selects. None: NACM hides
/// something of it from `user`. The evaluation permit is taken before the datastore's
/// lock, never waited for under it.
pub(crate) fn select_whole(
    ds: &crate::datastore::Datastores,
    source: crate::datastore::Datastore,
    nacm: &crate::nacm::Nacm,
    user: &str,
    filter: &Element,
) -> Result<Option<crate::mgmt::filter::Readable>, Vec<crate::error::RpcError>> {
    let permit = cost::permit().map_err(one)?;
    let direct = ds
        .with_tree(source, |tree| nacm.whole(user, tree).map(|w| subtree::apply_whole(filter, w, &permit)))
        .map_err(one)?;
    direct.transpose().map_err(one)
}

/// At most this many elements in a subtree filter evaluated under the datastore's lock
/// (`small`): the walk costs at most that many passes over the siblings it meets, about
/// what printing them costs; a larger filter runs on a copy, off the lock.
const MAX_FILTER_ELEMENTS_UNDER_LOCK: usize = 16;

pub(crate) fn small(filter: &Element) -> bool {
    let mut stack: Vec<&Element> = filter.children.iter().collect();
    let mut n = 0;
    while let Some(e) = stack.pop() {
        n += 1;
        if n > MAX_FILTER_ELEMENTS_UNDER_LOCK {
            return false;
        }
        stack.extend(e.children.iter());
    }
    true
}
