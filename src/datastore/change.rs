//! Typed configuration changes: what a commit hands to its consumers, and what the
//! datastore replays to keep its spare copy of running in step without a full-tree diff.

use std::collections::HashMap;
use std::sync::Arc;

use yang2::data::{Data, DataNodeRef, DataTree};
use yang2::iter::NodeIterable;
use yang2::schema::{SchemaNode, SchemaNodeKind};

/// What happened to one data node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeOp {
    Create,
    Delete,
    Modify,
    /// A user-ordered list entry or leaf-list value changed position.
    Move,
}

/// The kind of node that changed, so consumers can dispatch without a schema lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Container,
    List,
    Leaf,
    LeafList,
    Other,
}

impl From<SchemaNodeKind> for NodeKind {
    fn from(k: SchemaNodeKind) -> Self {
        match k {
            SchemaNodeKind::Container => NodeKind::Container,
            SchemaNodeKind::List => NodeKind::List,
            SchemaNodeKind::Leaf => NodeKind::Leaf,
            SchemaNodeKind::LeafList => NodeKind::LeafList,
            _ => NodeKind::Other,
        }
    }
}

/// One change to one data node, with the values before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub op: ChangeOp,
    /// Data path with list keys, module-prefixed at module boundaries (libyang's standard
    /// path form), e.g. `/cats-sma:cats-sma/scis/sci[csci-id='a']/expected-interval`.
    pub path: String,
    /// Schema path without predicates, e.g. `/cats-sma:cats-sma/scis/sci/expected-interval`;
    /// what consumers match on. Shared by the changes of one schema node in an edit (a
    /// 100 000-entry edit does not hold 100 000 copies of each schema path).
    pub schema_path: Arc<str>,
    pub kind: NodeKind,
    /// The node is a list key (its value also appears in the path predicate).
    pub is_key: bool,
    pub value: Option<String>,
    pub old_value: Option<String>,
}

impl Change {
    pub(crate) fn of_node(op: ChangeOp, node: &DataNodeRef<'_, '_>) -> Change {
        Change::of_node_in(op, node, &mut SchemaPaths::default())
    }

    /// [`Change::of_node`] with the schema paths of one set of changes shared (a diff of
    /// 100 000 entries asks libyang for each schema node's path once).
    pub(crate) fn of_node_in(op: ChangeOp, node: &DataNodeRef<'_, '_>, paths: &mut SchemaPaths) -> Change {
        let schema = node.schema();
        let value = node.value_canonical();
        let (value, old_value) = match op {
            ChangeOp::Delete => (None, value),
            _ => (value, None),
        };
        let path = node.path();
        Change {
            op,
            schema_path: paths.get(&schema),
            path,
            kind: schema.kind().into(),
            is_key: schema.is_list_key(),
            value,
            old_value,
        }
    }
}

/// The schema paths of the nodes an edit touched, by schema node: every change of one
/// schema node shares one string.
#[derive(Default)]
pub(crate) struct SchemaPaths(HashMap<usize, Arc<str>>);

impl SchemaPaths {
    /// `schema`'s path in the form of [`Change::schema_path`], taken from the schema (not
    /// from a data path: a key value holding both quote kinds makes libyang's data path
    /// ambiguous), once per schema node.
    fn get(&mut self, schema: &SchemaNode<'_>) -> Arc<str> {
        self.0
            .entry(schema.as_raw() as usize)
            // SAFETY: `schema` is a live node of the process-wide context.
            .or_insert_with(|| unsafe { super::local::schema_path(schema.as_raw()) }.into())
            .clone()
    }
}

/// The changes of a whole subtree, `root` first, in document order (what
/// `root.traverse().map(of_node)` gives), appended to `out`, with implicit default nodes
/// below the root left out when `skip_defaults`. `parent_path` is the data path of the
/// root's parent when the caller has it (None: libyang prints the root's path). The data
/// path of a container or leaf is its parent's plus one step, a list entry's or leaf-list
/// value's adds its predicates, and schema paths come from `paths`: only instances libyang
/// numbers by position ask libyang for their path, so a 100 000-entry subtree does not
/// print every node's path from the root, and nothing is allocated per node but its path
/// and value.
pub(crate) fn subtree(
    op: ChangeOp,
    root: &DataNodeRef<'_, '_>,
    skip_defaults: bool,
    parent_path: Option<&str>,
    paths: &mut SchemaPaths,
    out: &mut Vec<Change>,
) {
    let schema = root.schema();
    let path = match (parent_path, root.parent()) {
        (Some(pp), Some(parent)) => child_path(pp, &parent.schema(), &schema, root),
        _ => root.path(),
    };
    let schema_path = paths.get(&schema);
    let value = root.value_canonical();
    let (value, old_value) = match op {
        ChangeOp::Delete => (None, value),
        _ => (value, None),
    };
    let idx = out.len();
    out.push(Change {
        op,
        path: String::new(),
        schema_path: schema_path.clone(),
        kind: schema.kind().into(),
        is_key: schema.is_list_key(),
        value,
        old_value,
    });
    below(op, root, &path, skip_defaults, paths, out);
    out[idx].path = path;
}

/// The data path of `n` (schema `schema`) under its parent's `path` (parent schema
/// `parent`), in libyang's standard form (`lyd_path`): one step, prefixed with the module
/// name when it differs from the parent's, and for a list entry or leaf-list value the
/// predicates (`[key='v']` per key in order, `[.='v']` for a leaf-list value, double quotes
/// when the value holds a single one). The instances libyang numbers by position (keyless
/// lists, state leaf-lists) ask libyang.
fn child_path(path: &str, parent: &SchemaNode<'_>, schema: &SchemaNode<'_>, n: &DataNodeRef<'_, '_>) -> String {
    let name = schema.name();
    let module = schema.module();
    let foreign = module != parent.module();
    let mut out = String::with_capacity(path.len() + name.len() + 24);
    out.push_str(path);
    out.push('/');
    if foreign {
        out.push_str(module.name());
        out.push(':');
    }
    out.push_str(name);
    match schema.kind() {
        SchemaNodeKind::LeafList => {
            if !schema.is_config() {
                return n.path();
            }
            let Some(v) = n.value_canonical() else { return n.path() };
            out.push_str("[.=");
            super::tree::push_quoted(&mut out, &v);
            out.push(']');
        }
        SchemaNodeKind::List => {
            let mut keys = 0;
            for k in n.children().take_while(|k| k.schema().is_list_key()) {
                let Some(v) = k.value_canonical() else { return n.path() };
                out.push('[');
                out.push_str(k.schema().name());
                out.push('=');
                super::tree::push_quoted(&mut out, &v);
                out.push(']');
                keys += 1;
            }
            if keys == 0 {
                return n.path();
            }
        }
        _ => {}
    }
    out
}

fn below(
    op: ChangeOp,
    node: &DataNodeRef<'_, '_>,
    path: &str,
    skip_defaults: bool,
    paths: &mut SchemaPaths,
    out: &mut Vec<Change>,
) {
    let parent_schema = node.schema();
    for child in node.children() {
        if skip_defaults && child.is_default() {
            continue;
        }
        let schema = child.schema();
        let kind = schema.kind();
        let child_path = child_path(path, &parent_schema, &schema, &child);
        let child_schema = paths.get(&schema);
        let value = child.value_canonical();
        let (value, old_value) = match op {
            ChangeOp::Delete => (None, value),
            _ => (value, None),
        };
        let change = Change {
            op,
            path: String::new(),
            schema_path: child_schema,
            kind: kind.into(),
            is_key: schema.is_list_key(),
            value,
            old_value,
        };
        if matches!(kind, SchemaNodeKind::Container | SchemaNodeKind::List) {
            // The entry goes before its descendants; its path is moved in after them.
            let idx = out.len();
            out.push(change);
            below(op, &child, &child_path, skip_defaults, paths, out);
            out[idx].path = child_path;
        } else {
            out.push(Change { path: child_path, ..change });
        }
    }
}

/// Strips list/leaf-list predicates from a data path.
pub fn schema_path_of(data_path: &str) -> String {
    let mut out = String::with_capacity(data_path.len());
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in data_path.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '[') => depth += 1,
            (None, ']') => depth = depth.saturating_sub(1),
            (None, '\'' | '"') if depth > 0 => quote = Some(c),
            (None, c) if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The changes not implied by another change in the list: a created or deleted subtree is
/// one change, not one per descendant, and list keys are implied by their entry. A change is
/// implied by an earlier kept Create / Delete of the same op at one of its ancestor paths;
/// each change costs one set lookup per ancestor, so N changes cost O(N × depth) (the
/// netconf-config-change of a 100 000-entry edit was quadratic when every change was
/// compared with every root kept so far).
pub fn roots(changes: &[Change]) -> Vec<&Change> {
    roots_covering(changes, false)
}

/// [`roots`], where with `any_below` a kept created or deleted subtree root covers every
/// change below it whatever its operation (what a subscriber holding the subtree's content
/// needs: on-change YANG-Push), not only changes of its own operation.
pub(crate) fn roots_covering(changes: &[Change], any_below: bool) -> Vec<&Change> {
    // Sized for a bulk edit up front: most changes of a 100 000-entry create are entries
    // (roots) or their keys, and growing the set by rehashing cost more than the lookups.
    let mut covering: std::collections::HashSet<(bool, &str)> =
        std::collections::HashSet::with_capacity(changes.len() / 2);
    // The last kept subtree root: a subtree's changes follow its root, so most are
    // covered by it, which a prefix comparison shows without hashing.
    let mut last: Option<(bool, &str)> = None;
    let mut out = Vec::new();
    // The operation a covering root is kept under (with `any_below`, one for all).
    let class = |create: bool| create || any_below;
    for c in changes {
        let subtree_op = match c.op {
            ChangeOp::Create => Some(true),
            ChangeOp::Delete => Some(false),
            _ => None,
        };
        let probe = if any_below { Some(true) } else { subtree_op };
        let covered = probe.is_some_and(|k| {
            last.is_some_and(|(op, r)| {
                op == k && c.path.len() > r.len() && c.path.starts_with(r) && c.path[r.len()..].starts_with('/')
            }) || ancestor_ends(&c.path).any(|end| covering.contains(&(k, &c.path[..end])))
        });
        if covered || c.is_key {
            continue;
        }
        if let Some(create) = subtree_op {
            covering.insert((class(create), c.path.as_str()));
            last = Some((class(create), c.path.as_str()));
        }
        out.push(c);
    }
    out
}

/// The byte offsets at which the proper ancestors of a data path end (every `/` outside
/// predicates after the first character).
pub(crate) fn ancestor_ends(path: &str) -> impl Iterator<Item = usize> + '_ {
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    path.bytes().enumerate().filter_map(move |(i, b)| {
        match (quote, b) {
            (Some(q), b) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'[') => depth += 1,
            (None, b']') => depth = depth.saturating_sub(1),
            (None, b'\'' | b'"') if depth > 0 => quote = Some(b),
            (None, b'/') if depth == 0 && i > 0 => return Some(i),
            _ => {}
        }
        None
    })
}

/// Replays changes on a tree that held the same content as `source` before them, `source`
/// being the tree they were made on, after validation: every changed subtree is copied
/// from `source` with its flags, so the defaults validation added (or brought back for a
/// deleted leaf), the when results and the default flags of the containers above are the
/// same in both, and a user-ordered entry lands next to the neighbour it has in `source`.
/// Returns false when a change cannot be mirrored (a move, a missing parent); the caller
/// then falls back to a full copy.
pub(crate) fn replay(tree: &mut DataTree<'static>, source: &DataTree<'static>, changes: &[Change]) -> bool {
    for c in roots(changes) {
        if c.op == ChangeOp::Move {
            return false;
        }
        // SAFETY: both trees are owned by the caller for the call; nodes are looked up just
        // before use and nothing else holds pointers into `tree`.
        if !unsafe { mirror(tree, source, &c.path) } {
            return false;
        }
    }
    true
}

/// Makes the node at `path` in `tree` (absent or not) what it is in `source`.
unsafe fn mirror(tree: &mut DataTree<'static>, source: &DataTree<'static>, path: &str) -> bool {
    use yang2::ffi;
    if let Ok(old) = tree.find_path(path) {
        let n = old.as_raw();
        let parent = super::tree::unlink(tree, n);
        ffi::lyd_free_tree(n);
        fix_default_flags(parent, source, path);
    }
    let Ok(src) = source.find_path(path) else {
        return true;
    };
    let src = src.as_raw();
    let parent_path = ancestor_ends(path).last().map(|end| &path[..end]);
    let parent = match parent_path {
        Some(p) => match tree.find_path(p) {
            Ok(n) => n.as_raw(),
            Err(_) => return false,
        },
        None => std::ptr::null_mut(),
    };
    let mut dup = std::ptr::null_mut();
    let flags = ffi::LYD_DUP_RECURSIVE | ffi::LYD_DUP_WITH_FLAGS;
    if ffi::lyd_dup_single(src, std::ptr::null_mut(), flags, &mut dup) != ffi::LY_ERR::LY_SUCCESS || dup.is_null() {
        return false;
    }
    super::tree::relink(tree, dup, parent);
    // A user-ordered entry next to the neighbour it has in the source.
    let schema = (*src).schema;
    if !schema.is_null() && (*schema).flags as u32 & ffi::LYS_ORDBY_USER != 0 {
        let in_tree = |n: *mut ffi::lyd_node| {
            let p = <DataNodeRef<'_, '_> as yang2::utils::Binding>::from_raw(source, n).path();
            tree.find_path(&p).ok().map(|t| t.as_raw())
        };
        let placed = match super::tree::same_schema_neighbour(src) {
            Some((n, true)) => in_tree(n).map(|a| ffi::lyd_insert_after(a, dup)),
            Some((n, false)) => in_tree(n).map(|a| ffi::lyd_insert_before(a, dup)),
            None => Some(ffi::LY_ERR::LY_SUCCESS),
        };
        if placed != Some(ffi::LY_ERR::LY_SUCCESS) {
            return false;
        }
    }
    fix_default_flags(parent, source, path);
    true
}

/// The default flag of `parent` and the containers above it, as in `source` (`path` is
/// the child's path, so the source's nodes are found from it).
unsafe fn fix_default_flags(mut node: *mut yang2::ffi::lyd_node, source: &DataTree<'static>, path: &str) {
    use yang2::ffi;
    let mut ends: Vec<usize> = ancestor_ends(path).collect();
    while !node.is_null() {
        let Some(end) = ends.pop() else { return };
        let Ok(s) = source.find_path(&path[..end]) else { return };
        let dflt = (*s.as_raw()).flags & ffi::LYD_DEFAULT;
        (*node).flags = ((*node).flags & !ffi::LYD_DEFAULT) | dflt;
        node = (*node).parent as *mut ffi::lyd_node;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_path_strips_predicates_with_quoted_brackets() {
        assert_eq!(schema_path_of("/m:a/b[k='x]y'][j=\"1\"]/c[.='v']"), "/m:a/b/c");
    }

    fn ch(op: ChangeOp, path: &str, is_key: bool) -> Change {
        Change {
            op,
            path: path.into(),
            schema_path: schema_path_of(path).into(),
            kind: NodeKind::Other,
            is_key,
            value: None,
            old_value: None,
        }
    }

    #[test]
    fn issue22_subtree_changes_equal_the_per_node_ones() {
        let ctx = crate::yang::context();
        let xml = r#"<cats-sma xmlns="urn:cats-sma:yang:cats-sma"><scis><sci><csci-id>a'b</csci-id><cs-id>X</cs-id><cs-id>Y</cs-id><expected-interval>7</expected-interval></sci></scis><policy xmlns="urn:cats-sma:yang:cats-sma-policy"><update-control><heartbeat-interval>60</heartbeat-interval></update-control></policy></cats-sma><nacm xmlns="urn:ietf:params:xml:ns:yang:ietf-netconf-acm"><groups><group><name>g</name><user-name>u</user-name></group></groups></nacm>"#;
        let mut data = xml.as_bytes().to_vec();
        data.push(0);
        let tree = DataTree::parse_string(
            ctx,
            &data,
            yang2::data::DataFormat::XML,
            yang2::data::DataParserFlags::STRICT | yang2::data::DataParserFlags::NO_STATE,
            yang2::data::DataValidationFlags::NO_STATE,
        )
        .unwrap();
        let mut n = 0;
        let mut paths = SchemaPaths::default();
        let of = |op, root: &DataNodeRef<'_, '_>, skip, parent: Option<&str>, paths: &mut SchemaPaths| {
            let mut out = Vec::new();
            subtree(op, root, skip, parent, paths, &mut out);
            out
        };
        for top in tree.reference().unwrap().inclusive_siblings() {
            // Every node as a subtree root: the top without a parent path, the others
            // with their parent's (as the editor passes it).
            for root in top.traverse() {
                let parent = root.parent().map(|p| p.path());
                for op in [ChangeOp::Create, ChangeOp::Delete] {
                    let want: Vec<Change> = root.traverse().map(|d| Change::of_node(op, &d)).collect();
                    // The schema's path is the data path without predicates.
                    for c in &want {
                        assert_eq!(*c.schema_path, schema_path_of(&c.path), "{}", c.path);
                    }
                    assert_eq!(of(op, &root, false, parent.as_deref(), &mut paths), want);
                    assert_eq!(of(op, &root, false, None, &mut paths), want);
                    let want: Vec<Change> = root
                        .traverse()
                        .filter(|d| !d.is_default() || d.as_raw() == root.as_raw())
                        .map(|d| Change::of_node(op, &d))
                        .collect();
                    assert_eq!(of(op, &root, true, parent.as_deref(), &mut paths), want);
                    n += want.len();
                }
            }
        }
        assert!(n > 20, "{n}");
    }

    #[test]
    fn issue22_roots_keep_subtree_tops_only() {
        let cs = vec![
            ch(ChangeOp::Create, "/m:a/l[k='x/y']", false),
            ch(ChangeOp::Create, "/m:a/l[k='x/y']/k", true),
            ch(ChangeOp::Create, "/m:a/l[k='x/y']/v", false),
            ch(ChangeOp::Delete, "/m:a/l[k='x/y']/w", false),
            ch(ChangeOp::Create, "/m:a/l[k='x']", false),
            ch(ChangeOp::Modify, "/m:a/l[k='x']/v", false),
            ch(ChangeOp::Create, "/m:a/l[k='x']/v/z", false),
            ch(ChangeOp::Create, "/m:a/lx", false),
        ];
        let r: Vec<&str> = roots(&cs).iter().map(|c| c.path.as_str()).collect();
        assert_eq!(r, vec!["/m:a/l[k='x/y']", "/m:a/l[k='x/y']/w", "/m:a/l[k='x']", "/m:a/l[k='x']/v", "/m:a/lx"]);
        let ends: Vec<usize> = ancestor_ends("/m:a/l[k='x/y']/v").collect();
        assert_eq!(ends, vec![4, 15]);
    }
}
