//! NETCONF filters: subtree (RFC 6241 section 6) and XPath 1.0 (the :xpath capability,
//! section 8.9), both applied to a libyang data tree and producing a new tree holding only
//! what was selected (with ancestors and list keys).
//!
//! Every filter of the agent (get, get-config, get-data, YANG-Push selections, RFC 5277 and
//! RFC 8639 notification filters) is evaluated here and only here, and only over a
//! [`Readable`] tree: one already pruned by NACM for the reader (see
//! [`crate::nacm::Nacm::read`]). A filter therefore cannot test data its reader may not
//! read (RFC 8341 section 3.4.5). Before evaluation the filter's cost is checked
//! ([`check_xpath`], [`check_subtree`]) and evaluation takes one of a bounded number of
//! evaluator permits, so one reader cannot occupy every core.

pub mod cost;
pub mod subtree;
pub mod xpath;

use yang2::data::{Data, DataTree};

use crate::error::{ErrorTag, RpcError};
use crate::mgmt::ns::NS_BASE;
use crate::xml::Element;

pub use cost::{check_subtree, check_xpath, configure, limits, FilterLimits};

/// A data tree holding only what one reader may read: the only input filters accept.
/// Made by [`crate::nacm::Nacm::read`] / [`crate::nacm::Nacm::readable`], by filtering a
/// readable tree, or ([`Readable::synthetic`]) from made-up probe data.
pub struct Readable(DataTree<'static>);

impl Readable {
    /// Wraps a tree the caller has just pruned for its reader (crate::nacm does this).
    pub(crate) fn pruned(tree: DataTree<'static>) -> Readable {
        Readable(tree)
    }

    /// Wraps a tree of made-up data (schema probes): nothing in it is anyone's secret.
    pub(crate) fn synthetic(tree: DataTree<'static>) -> Readable {
        Readable(tree)
    }

    pub fn tree(&self) -> &DataTree<'static> {
        &self.0
    }

    pub fn into_tree(self) -> DataTree<'static> {
        self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.reference().is_none()
    }
}

/// A datastore tree seen by a reader NACM lets read all of it
/// ([`crate::nacm::Nacm::whole`]): a subtree filter may select from it directly, without
/// the copy a [`Readable`] costs.
#[derive(Clone, Copy)]
pub struct Whole<'t>(pub(super) &'t DataTree<'static>);

impl<'t> Whole<'t> {
    /// Made by `Nacm::whole` once it has checked the reader (crate-visible so that NACM,
    /// outside this module, can).
    pub(crate) fn unrestricted(tree: &'t DataTree<'static>) -> Whole<'t> {
        Whole(tree)
    }
}

/// A parsed `<filter>` element.
pub enum Filter<'m> {
    Subtree(&'m Element),
    /// The XPath with its prefixes already translated to module names.
    XPath(String),
}

impl<'m> Filter<'m> {
    /// Reads a `<filter>` element (RFC 6241 section 6 and 8.9).
    pub fn parse(el: &'m Element) -> Result<Filter<'m>, RpcError> {
        let ty = el.attr("type").or_else(|| el.attr_ns(NS_BASE, "type")).unwrap_or("subtree");
        match ty {
            "subtree" => {
                check_subtree(el)?;
                Ok(Filter::Subtree(el))
            }
            "xpath" => {
                let select = el.attr("select").or_else(|| el.attr_ns(NS_BASE, "select")).ok_or_else(|| {
                    RpcError::protocol(ErrorTag::MissingAttribute, "an xpath filter needs a select attribute")
                        .with_bad_attribute("select")
                        .with_bad_element("filter")
                })?;
                let x = xpath::to_json_prefixes(select, &el.scope)?;
                check_xpath(&x)?;
                Ok(Filter::XPath(x))
            }
            other => Err(RpcError::protocol(ErrorTag::BadAttribute, format!("unknown filter type \"{other}\""))
                .with_bad_attribute("type")
                .with_bad_element("filter")),
        }
    }

    /// Applies the filter to readable data, returning the selected data.
    pub fn apply(&self, tree: &Readable) -> Result<Readable, RpcError> {
        match self {
            Filter::Subtree(el) => subtree::apply(el, tree),
            Filter::XPath(x) => xpath::apply(x, tree),
        }
    }
}

/// Copies `node` (its whole subtree) with all ancestors into `out`.
pub(crate) fn copy_into(
    out: &mut DataTree<'static>,
    node: &yang2::data::DataNodeRef<'_, 'static>,
) -> Result<(), RpcError> {
    let dup = node.duplicate(true).map_err(|e| RpcError::from_libyang(&e))?;
    out.merge(&dup).map_err(|e| RpcError::from_libyang(&e))
}

/// Whether a tree is empty.
pub fn is_empty(tree: &DataTree<'static>) -> bool {
    tree.reference().is_none()
}

/// Selects all data of a tree that an XPath selects (with ancestors and subtrees). Private
/// to the filters: the public ways in take a [`Readable`].
fn select_xpath(tree: &DataTree<'static>, xpath: &str, out: &mut DataTree<'static>) -> Result<(), RpcError> {
    if tree.reference().is_none() {
        return Ok(());
    }
    if xpath.trim() == "/" {
        // The root selects everything (libyang's XPath has no node for the root).
        return out.merge(tree).map_err(|e| RpcError::from_libyang(&e));
    }
    let set = tree.find_xpath(xpath).map_err(|e| {
        RpcError::protocol(ErrorTag::InvalidValue, format!("invalid XPath \"{xpath}\": {e}")).with_bad_element("filter")
    })?;
    for n in set {
        copy_into(out, &n)?;
    }
    Ok(())
}
