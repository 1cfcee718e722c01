//! NETCONF filters: subtree (RFC 6241 section 6) and XPath 1.0 (the :xpath capability,
//! section 8.9), both applied to a libyang data tree and producing a new tree holding only
//! what was selected (with ancestors and list keys).

pub mod subtree;
pub mod xpath;

use yang2::data::{Data, DataTree};

use super::xml::Element;
use super::NS_BASE;
use crate::error::{ErrorTag, RpcError};

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
            "subtree" => Ok(Filter::Subtree(el)),
            "xpath" => {
                let select = el.attr("select").or_else(|| el.attr_ns(NS_BASE, "select")).ok_or_else(|| {
                    RpcError::protocol(ErrorTag::MissingAttribute, "an xpath filter needs a select attribute")
                        .with_bad_attribute("select")
                        .with_bad_element("filter")
                })?;
                Ok(Filter::XPath(xpath::to_json_prefixes(select, &el.scope)?))
            }
            other => Err(RpcError::protocol(ErrorTag::BadAttribute, format!("unknown filter type \"{other}\""))
                .with_bad_attribute("type")
                .with_bad_element("filter")),
        }
    }

    /// Applies the filter to `tree`, returning the selected data.
    pub fn apply(&self, tree: &DataTree<'static>) -> Result<DataTree<'static>, RpcError> {
        match self {
            Filter::Subtree(el) => subtree::apply(el, tree),
            Filter::XPath(x) => xpath::apply(x, tree),
        }
    }
}

/// Copies `node` (its whole subtree when `deep`, else just the node with its keys) with all
/// ancestors into `out`.
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

/// Selects all data of a tree that matches one of several XPaths (union), used by both
/// filters.
pub(crate) fn select_xpath(tree: &DataTree<'static>, xpath: &str, out: &mut DataTree<'static>) -> Result<(), RpcError> {
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
