//! Subtree filtering, RFC 6241 section 6: namespace selection (6.2.1), attribute match
//! expressions (6.2.2), containment nodes (6.2.3), selection nodes (6.2.4) and content
//! match nodes (6.2.5), evaluated directly on the libyang data tree.

use yang2::data::{Data, DataNodeRef, DataTree};
use yang2::iter::NodeIterable;

use super::{check_subtree, copy_into, Readable};
use crate::error::RpcError;
use crate::xml::Element;

enum Kind {
    Selection,
    ContentMatch,
    Containment,
}

fn kind(f: &Element) -> Kind {
    if !f.children.is_empty() {
        Kind::Containment
    } else if !f.trimmed().is_empty() {
        Kind::ContentMatch
    } else {
        Kind::Selection
    }
}

/// Applies the children of a `<filter>` element to `tree`. An empty filter selects nothing
/// (section 6.4.2).
pub fn apply(filter: &Element, tree: &Readable) -> Result<Readable, RpcError> {
    apply_tree(filter, tree.tree(), None)
}

/// [`apply`] on a datastore tree whose reader may read all of it (see [`super::Whole`]),
/// under the datastore's lock: the caller took the evaluation permit before the lock (a
/// reader waiting for one must not hold the datastore) and keeps it for the call.
pub fn apply_whole(
    filter: &Element,
    whole: super::Whole<'_>,
    permit: &super::cost::Permit,
) -> Result<Readable, RpcError> {
    apply_tree(filter, whole.0, Some(permit))
}

fn apply_tree(
    filter: &Element,
    tree: &DataTree<'static>,
    held: Option<&super::cost::Permit>,
) -> Result<Readable, RpcError> {
    check_subtree(filter)?;
    let mut out = DataTree::new(tree.context());
    let Some(first) = tree.reference() else {
        return Ok(Readable::pruned(out));
    };
    let _permit = match held {
        Some(_) => None,
        None => Some(super::cost::permit()?),
    };
    let top: Vec<DataNodeRef<'_, 'static>> = first.inclusive_siblings().collect();
    siblings(&top, &filter.children, &mut out)?;
    Ok(Readable::pruned(out))
}

/// Whether the subtree filter selects every top-level node of `tree` whole: each has a
/// selection node (an element with no children and no text, RFC 6241 6.2.3) at the top of
/// the filter. Such a tree is its own filtered answer: applying the filter copies it.
pub fn selects_whole_top(filter: &Element, tree: &DataTree<'static>) -> bool {
    let Some(first) = tree.reference() else { return true };
    first
        .inclusive_siblings()
        .all(|n| filter.children.iter().any(|f| f.children.is_empty() && f.text.trim().is_empty() && same_node(&n, f)))
}

/// Does data node `n` have the filter element's name and (if given) namespace (6.2.1)?
fn same_node(n: &DataNodeRef<'_, '_>, f: &Element) -> bool {
    let s = n.schema();
    s.name() == f.name && f.ns.as_deref().is_none_or(|ns| ns.is_empty() || s.module().namespace() == ns)
}

/// Attribute match expressions (6.2.2): every attribute of the filter node that is not a
/// namespace declaration or a NETCONF filter attribute must equal a metadata of `n`.
fn attrs_match(n: &DataNodeRef<'_, '_>, f: &Element) -> bool {
    f.attrs
        .iter()
        .filter(|a| a.ns.as_deref() != Some(crate::mgmt::ns::NS_BASE))
        .all(|a| n.meta().any(|m| m.name() == a.name && m.value() == a.value))
}

fn value_matches(n: &DataNodeRef<'_, '_>, f: &Element) -> bool {
    let want = f.trimmed();
    match n.value_canonical() {
        Some(v) if v == want => true,
        // identityref content written with an XML prefix: compare the identity names
        // (only for identityrefs: a string such as a CSCI-ID `10.0.0.1:80` may hold ':').
        Some(v) => {
            let identity =
                n.schema().leaf_type().is_some_and(|t| t.base_type() == yang2::schema::DataValueType::IdentityRef);
            identity && want.contains(':') && v.rsplit(':').next() == want.rsplit(':').next()
        }
        None => false,
    }
}

fn siblings(
    data: &[DataNodeRef<'_, 'static>],
    filters: &[Element],
    out: &mut DataTree<'static>,
) -> Result<(), RpcError> {
    for f in filters {
        for n in data.iter().filter(|n| same_node(n, f) && attrs_match(n, f)) {
            match kind(f) {
                Kind::Selection => copy_into(out, n)?,
                // A content match node at this level selects the matching instances.
                Kind::ContentMatch => {
                    if value_matches(n, f) {
                        copy_into(out, n)?
                    }
                }
                Kind::Containment => instance(n, &f.children, out)?,
            }
        }
    }
    Ok(())
}

/// A container or list entry selected by a containment node: its content match children
/// decide whether it is selected at all; with no other children they select its whole
/// subtree, else the other children are filtered in turn (6.2.5).
fn instance(n: &DataNodeRef<'_, 'static>, fchildren: &[Element], out: &mut DataTree<'static>) -> Result<(), RpcError> {
    let children: Vec<DataNodeRef<'_, 'static>> = n.children().collect();
    let (matches, others): (Vec<&Element>, Vec<&Element>) =
        fchildren.iter().partition(|f| matches!(kind(f), Kind::ContentMatch));
    let mut matched = Vec::new();
    for cm in &matches {
        let hits: Vec<&DataNodeRef<'_, 'static>> =
            children.iter().filter(|c| same_node(c, cm) && attrs_match(c, cm) && value_matches(c, cm)).collect();
        if hits.is_empty() {
            return Ok(());
        }
        matched.extend(hits);
    }
    if others.is_empty() {
        return copy_into(out, n);
    }
    for m in matched {
        copy_into(out, m)?;
    }
    let others: Vec<Element> = others.into_iter().cloned().collect();
    let before = out.reference().is_some();
    siblings(&children, &others, out)?;
    // A containment node whose children select nothing still reports the instance when it
    // is a list entry picked by its content match nodes (its keys identify it).
    if !before && out.reference().is_none() && !matches.is_empty() {
        copy_into_shallow(out, n)?;
    }
    Ok(())
}

fn copy_into_shallow(out: &mut DataTree<'static>, n: &DataNodeRef<'_, 'static>) -> Result<(), RpcError> {
    // Keys come with the parents of the first key; a keyless node is copied as is.
    match n.list_keys().next() {
        Some(k) => copy_into(out, &k),
        None => match n.parent() {
            Some(_) | None => copy_into(out, n),
        },
    }
}
