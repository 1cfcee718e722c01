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
use crate::mgmt::filter::{subtree, Filter, Readable};
use crate::mgmt::with_defaults::WithDefaults;
use crate::xml::Element;

/// A parsed `<get>`: its filter, with-defaults mode and what the filter selects, worked out
/// once (deciding where the RPC runs needs the selection too).
pub(crate) struct Request<'m> {
    filter: Option<Filter<'m>>,
    wd: WithDefaults,
    sel: Selection,
}

impl<'m> Request<'m> {
    pub(crate) fn parse(op: &'m Element) -> Result<Request<'m>, Vec<RpcError>> {
        let filter = filter_param(op)?;
        let wd = with_defaults(op)?;
        let sel = filter.as_ref().map(selection).unwrap_or_else(Selection::all);
        Ok(Request { filter, wd, sel })
    }

    /// Whether this `<get>` reads no state that only another task can give: its filter
    /// selects nothing of `/cats-sma:cats-sma`, by the same test every provider that asks
    /// the engine makes before asking (`datastore::tree::outside_cats_sma` on the
    /// selection's XPath). An unfiltered request is not.
    pub(crate) fn waits_for_no_task(&self) -> bool {
        self.filter.is_some()
            && !self.sel.is_all()
            && crate::datastore::tree::outside_cats_sma(self.sel.xpath().as_deref())
    }
}

pub fn run(ctx: &SessionCtx, op: &Element) -> OpResult {
    run_request(ctx, Request::parse(op)?)
}

pub(crate) fn run_request(ctx: &SessionCtx, req: Request<'_>) -> OpResult {
    let Request { filter, wd, sel } = req;
    if let Some(Filter::Subtree(el)) = &filter {
        if super::get_config::small(el) {
            let (ds, nacm, user) = (&ctx.server.datastores, &ctx.server.nacm, &ctx.info.username);
            if let Some(data) = super::get_config::print_tops(ds, Datastore::Running, nacm, user, el, wd, true)? {
                return Ok(Body::Data(data));
            }
        }
    }
    if let Some(body) = typed(ctx, &sel, wd, None)? {
        return Ok(Body::Data(body));
    }
    if let Some(Filter::Subtree(el)) = &filter {
        if let Some(tree) = select_direct(&ctx.server.datastores, &ctx.server.nacm, &ctx.info.username, el, &sel)? {
            return Ok(Body::Data(data_element(&tree, wd)?));
        }
    }
    // NACM first, then the filter: the filter only sees what the user may read.
    let tree = readable_covering(ctx, Datastore::Operational, &sel)?;
    let tree = match &filter {
        None => tree,
        Some(f) => f.apply(&tree).map_err(one)?,
    };
    Ok(Body::Data(data_element(tree.tree(), wd)?))
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

/// A small subtree filter of containment and selection nodes only (no content match, no
/// attribute match), read by a user NACM hides nothing from, selects straight from running
/// under its lock, as get-config does (one copy of what it selects), and from the state the
/// providers render for its selection alone; the two selections are merged. A filter
/// without content match selects node by node, whatever the node's siblings hold, so
/// selecting from the two parts and merging is selecting from their merge (the covering
/// read's answer, which the randomised test in get_data.rs compares it with). None: the
/// request takes the covering read.
pub(crate) fn select_direct(
    ds: &crate::datastore::Datastores,
    nacm: &crate::nacm::Nacm,
    user: &str,
    filter: &Element,
    sel: &Selection,
) -> Result<Option<yang2::data::DataTree<'static>>, Vec<RpcError>> {
    if !super::get_config::small(filter) || !selects_by_name_only(filter) {
        return Ok(None);
    }
    // Running first: a reader NACM restricts there is known before any state is rendered
    // (the covering read would render it again).
    // The evaluation permit is held for each selection, not while the providers render
    // (the engine's may wait for its task).
    let Some(config) = super::get_config::select_whole(ds, Datastore::Running, nacm, user, filter)? else {
        return Ok(None);
    };
    let mut tree = config.into_tree();
    // A filter of top-level selection nodes only (`<nacm/>`, say) selects whole subtrees:
    // the providers render straight into the copy of running (no second tree, no merge).
    // What they rendered is all selected when every top-level node is one the filter names
    // (a provider may render more than asked: then the covering read answers).
    if filter.children.iter().all(|f| f.children.is_empty()) {
        ds.read_state_into(&mut tree, sel).map_err(one)?;
        let answered = nacm.whole(user, &tree).is_some() && subtree::selects_whole_top(filter, &tree);
        return Ok(answered.then_some(tree));
    }
    let state = ds.read_state(sel).map_err(one)?;
    let Some(whole) = nacm.whole(user, &state) else { return Ok(None) };
    // The providers rendered only whole top-level nodes the filter selects (`<nacm/>`, say):
    // the filter would copy them as they are, so they are moved into the answer instead.
    if subtree::selects_whole_top(filter, &state) {
        crate::datastore::tree::merge_moving(&mut tree, state).map_err(one)?;
        return Ok(Some(tree));
    }
    let permit = crate::mgmt::filter::cost::permit().map_err(one)?;
    let state = subtree::apply_whole(filter, whole, &permit).map_err(one)?;
    if !state.is_empty() {
        tree.merge(state.tree()).map_err(|e| one(RpcError::from_libyang(&e)))?;
    }
    Ok(Some(tree))
}

/// Whether a subtree filter has only containment and selection nodes: no element with
/// text (a content match) and no attribute but namespace declarations (RFC 6241 6.2.2–6.2.5).
fn selects_by_name_only(filter: &Element) -> bool {
    let mut stack: Vec<&Element> = filter.children.iter().collect();
    while let Some(e) = stack.pop() {
        if !e.text.trim().is_empty() || !e.attrs.is_empty() {
            return false;
        }
        stack.extend(e.children.iter());
    }
    true
}
