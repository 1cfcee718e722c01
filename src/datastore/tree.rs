//! Structural changes to libyang trees that keep `DataTree`'s root pointer right.
//!
//! yang2's `DataTree` points at the first top-level sibling. Freeing that node through
//! `DataTree::remove`, or moving another node in front of it, leaves the pointer dangling
//! or pointing at a middle sibling. Every removal and top-level move in this crate goes
//! through these functions instead.

use yang2::data::{Data, DataTree};
use yang2::utils::Binding;

use crate::error::RpcError;

/// Re-points the tree at its first top-level sibling after the siblings changed, with
/// `gone` (if any) already unlinked or about to be freed and not to be chosen.
fn reseat(tree: &mut DataTree<'static>, gone: Option<*mut yang2::ffi::lyd_node>) {
    let ctx = tree.context();
    let old = std::mem::replace(tree, DataTree::new(ctx));
    let mut root = old.into_raw();
    if root.is_null() {
        return;
    }
    // SAFETY: `root` is a live top-level node of the tree we own (it may be `gone`, which
    // is still allocated and linked at this point). Top-level siblings form a list whose
    // first node's `prev` is the last node (whose `next` is null); walking `prev` until the
    // predecessor's `next` is null reaches the first sibling. When the first sibling is
    // `gone`, its `next` becomes the first.
    unsafe {
        loop {
            let prev = (*root).prev;
            if prev.is_null() || (*prev).next.is_null() {
                break;
            }
            root = prev;
        }
        if Some(root) == gone {
            root = (*root).next;
        }
        *tree = DataTree::from_raw(ctx, root);
    }
}

/// Removes the node at `path` (and its subtree).
pub fn remove(tree: &mut DataTree<'static>, path: &str) -> Result<(), RpcError> {
    let node = tree.find_path(path).map_err(|e| RpcError::from_libyang(&e))?.as_raw();
    // SAFETY: `node` was just found in `tree` and is live; a top-level node has a null
    // parent. For a top-level node the root is moved off it before it is freed.
    unsafe {
        if (*node).parent.is_null() {
            reseat(tree, Some(node));
        }
        yang2::ffi::lyd_free_tree(node);
    }
    Ok(())
}

/// Unlinks `node` (with its subtree) from `tree` and returns its former parent (null for a
/// top-level node). The caller owns the unlinked subtree: it must link it back with
/// [`relink`] or free it.
///
/// # Safety
/// `node` must be a live node linked in `tree`.
pub(crate) unsafe fn unlink(
    tree: &mut DataTree<'static>,
    node: *mut yang2::ffi::lyd_node,
) -> *mut yang2::ffi::lyd_node {
    let parent = (*node).parent as *mut yang2::ffi::lyd_node;
    if parent.is_null() {
        reseat(tree, Some(node));
    }
    yang2::ffi::lyd_unlink_tree(node);
    parent
}

/// Links a subtree [`unlink`] took out back under `parent` (null: at the top level).
///
/// # Safety
/// `node` must be an unlinked subtree of this tree's context owned by the caller (the tree
/// owns it afterwards), and `parent`, when not null, a live inner node of `tree`.
pub(crate) unsafe fn relink(
    tree: &mut DataTree<'static>,
    node: *mut yang2::ffi::lyd_node,
    parent: *mut yang2::ffi::lyd_node,
) {
    if !parent.is_null() {
        yang2::ffi::lyd_insert_child(parent, node);
        return;
    }
    let ctx = tree.context();
    let first = std::mem::replace(tree, DataTree::new(ctx)).into_raw();
    if first.is_null() {
        *tree = DataTree::from_raw(ctx, node);
        return;
    }
    let mut new_first = std::ptr::null_mut();
    yang2::ffi::lyd_insert_sibling(first, node, &mut new_first);
    *tree = DataTree::from_raw(ctx, if new_first.is_null() { first } else { new_first });
}

/// Re-points the tree at its first sibling after nodes were moved at the top level.
pub fn after_move(tree: &mut DataTree<'static>) {
    reseat(tree, None);
}

/// Whether a state request's XPath selection is clearly outside `/cats-sma:cats-sma`, so a
/// provider of that subtree has nothing to render (no selection means everything).
pub fn outside_cats_sma(xpath: Option<&str>) -> bool {
    xpath.is_some_and(|x| !x.contains("cats-sma") && !x.starts_with("/*") && x != "/")
}

/// The neighbour a user-ordered entry keeps its place by: its previous instance of the same
/// schema (`true`: the entry goes after it) or else its next one (`false`: before it), None
/// when it is the only instance. libyang keeps the instances of one schema node next to each
/// other, so these are the direct siblings (O(1), not a walk of the list).
///
/// # Safety
/// `n` must be a live, linked node: `prev` of a live node is a live sibling (the first
/// one's is the last, whose `next` is null) and `next` is a live sibling or null.
pub(crate) unsafe fn same_schema_neighbour(n: *mut yang2::ffi::lyd_node) -> Option<(*mut yang2::ffi::lyd_node, bool)> {
    let (schema, prev, next) = ((*n).schema, (*n).prev, (*n).next);
    if !prev.is_null() && prev != n && !(*prev).next.is_null() && (*prev).schema == schema {
        Some((prev, true))
    } else if !next.is_null() && (*next).schema == schema {
        Some((next, false))
    } else {
        None
    }
}

/// A leaf's canonical value (None when the leaf is absent).
pub fn leaf(tree: &DataTree<'static>, path: &str) -> Option<String> {
    tree.find_path(path).ok().and_then(|n| n.value_canonical())
}

/// A list key or leaf-list value as an XPath predicate literal: single-quoted unless the
/// value holds a single quote.
pub fn quote(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    push_quoted(&mut out, v);
    out
}

/// [`quote`] appended to `out`.
pub fn push_quoted(out: &mut String, v: &str) {
    let q = if v.contains('\'') { '"' } else { '\'' };
    out.push(q);
    out.push_str(v);
    out.push(q);
}

/// Creates or updates the node at `path` (state rendering: every provider builds its part
/// of the operational tree this way).
pub fn set(tree: &mut DataTree<'static>, path: &str, value: Option<&str>) -> Result<(), RpcError> {
    tree.new_path(path, value, false).map(|_| ()).map_err(|e| RpcError::from_libyang(&e).with_path(path))
}

/// Moves the nodes of `source` into `tree`, merging them with what is there (operational
/// state: a provider's rendered tree is not needed afterwards, so nothing is copied, unlike
/// `DataTree::merge`, which duplicates every node).
pub fn merge_moving(tree: &mut DataTree<'static>, source: DataTree<'static>) -> Result<(), RpcError> {
    if source.reference().is_none() {
        return Ok(());
    }
    if tree.reference().is_none() {
        *tree = source;
        return Ok(());
    }
    let ctx = tree.context();
    let mut target = std::mem::replace(tree, DataTree::new(ctx)).into_raw();
    let source = source.into_raw();
    // SAFETY: `target` is the first top-level sibling of a tree we own and `source` the root
    // of another tree we own, both of this context. With LYD_MERGE_DESTRUCT libyang takes
    // ownership of `source`: nodes are moved into `target` or freed, on success and on
    // error, so it is never used again here. `target` is updated to the (possibly new)
    // first sibling and handed back to `tree`.
    let ret = unsafe {
        let ret = yang2::ffi::lyd_merge_siblings(&mut target, source, yang2::ffi::LYD_MERGE_DESTRUCT as u16);
        *tree = DataTree::from_raw(ctx, target);
        ret
    };
    if ret != yang2::ffi::LY_ERR::LY_SUCCESS {
        return Err(RpcError::application(crate::error::ErrorTag::OperationFailed, "merging operational state failed"));
    }
    Ok(())
}

/// A date-and-time as YANG wants it (RFC 3339, UTC).
pub fn yang_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_the_first_top_level_node_keeps_the_tree_usable() {
        let ctx = crate::yang::context();
        let mut t = DataTree::new(ctx);
        t.new_path("/cats-sma:cats-sma/agent/csma-id", Some("a"), false).unwrap();
        t.new_path("/ietf-netconf-acm:nacm/enable-nacm", Some("true"), false).unwrap();
        let first = t.reference().unwrap().schema().name().to_owned();
        let first_path = if first == "cats-sma" { "/cats-sma:cats-sma" } else { "/ietf-netconf-acm:nacm" };
        remove(&mut t, first_path).unwrap();
        assert!(t.find_path(first_path).is_err());
        assert_eq!(t.traverse().next().map(|n| n.schema().name() != first), Some(true));
        let other = if first == "cats-sma" { "/ietf-netconf-acm:nacm" } else { "/cats-sma:cats-sma" };
        remove(&mut t, other).unwrap();
        assert!(t.reference().is_none());
        t.new_path("/cats-sma:cats-sma/agent/csma-id", Some("b"), false).unwrap();
        assert!(t.find_path("/cats-sma:cats-sma/agent/csma-id").is_ok());
    }
}
