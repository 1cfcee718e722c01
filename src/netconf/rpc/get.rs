//! `<get>` (RFC 6241 section 7.7): running configuration plus operational state.
//!
//! A filter whose selection a typed state provider serves exactly is answered from typed
//! data (`datastore::render`); any other read takes the libyang path over only what the
//! filter's selection covers (`Datastores::read_covering`), NACM first, then the filter.

use super::{data_element, filter_param, one, with_defaults, Body, OpResult, SessionCtx};
use crate::datastore::render::{self, Format, Options};
use crate::datastore::select::Selection;
use crate::datastore::Datastore;
use crate::error::RpcError;
use crate::mgmt::filter::{Filter, Readable};
use crate::mgmt::with_defaults::WithDefaults;
use crate::xml::Element;

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    let filter = filter_param(op)?;
    let wd = with_defaults(op)?;
    let sel = filter.as_ref().map(selection).unwrap_or_else(Selection::all);
    if let Some(body) = typed(ctx, &sel, wd, None)? {
        return Ok(Body::Data(body));
    }
    // NACM first, then the filter: the filter only sees what the user may read.
    let tree = readable_covering(ctx, Datastore::Operational, &sel)?;
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
}

/// Whether this `<get>` reads no state that only another task can give: its filter
/// selects nothing of `/cats-sma:cats-sma`, by the same test every provider that asks the
/// engine makes before asking (`datastore::tree::outside_cats_sma` on the selection's
/// XPath). An unfiltered or unreadable request is not (an invalid filter is refused by
/// `run` either way).
pub(crate) fn waits_for_no_task(op: &Element) -> bool {
    match filter_param(op) {
        Ok(Some(f)) => {
            let sel = selection(&f);
            !sel.is_all() && crate::datastore::tree::outside_cats_sma(sel.xpath().as_deref())
        }
        _ => false,
    }
}

/// What a `<filter>` selects.
pub(crate) fn selection(f: &Filter<'_>) -> Selection {
    match f {
        Filter::Subtree(el) => Selection::from_subtree(el),
        Filter::XPath(x) => Selection::from_xpath(x),
    }
}

/// The `<data>` of a read of operational state served from typed data, if it can be.
pub(crate) fn typed(
    ctx: &SessionCtx,
    sel: &Selection,
    wd: WithDefaults,
    max_depth: Option<usize>,
) -> Result<Option<String>, Vec<RpcError>> {
    let Some(access) = ctx.server.nacm.read_access(&ctx.info.username) else { return Ok(None) };
    let opts = Options { format: Format::Xml, skip: 0, max_depth, with_defaults: wd };
    let body = render::read_typed(&ctx.server.datastores, sel, &access, opts).map_err(one)?;
    Ok(body.map(|b| if b.is_empty() { "<data/>".to_owned() } else { format!("<data>{b}</data>") }))
}

/// What the session's user may read of the part of a datastore `sel` covers.
pub(crate) fn readable_covering(ctx: &SessionCtx, ds: Datastore, sel: &Selection) -> Result<Readable, Vec<RpcError>> {
    let tree = ctx.server.datastores.read_covering(ds, sel).map_err(one)?;
    Ok(ctx.server.nacm.readable(&ctx.info.username, tree))
}
