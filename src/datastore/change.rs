//! Typed configuration changes: what a commit hands to its consumers, and what the
//! datastore replays to keep its spare copy of running in step without a full-tree diff.

use yang2::data::{Data, DataNodeRef, DataTree};
use yang2::schema::SchemaNodeKind;

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
    /// what consumers match on.
    pub schema_path: String,
    pub kind: NodeKind,
    /// The node is a list key (its value also appears in the path predicate).
    pub is_key: bool,
    pub value: Option<String>,
    pub old_value: Option<String>,
}

impl Change {
    pub(crate) fn of_node(op: ChangeOp, node: &DataNodeRef<'_, '_>) -> Change {
        let schema = node.schema();
        let value = node.value_canonical();
        let (value, old_value) = match op {
            ChangeOp::Delete => (None, value),
            _ => (value, None),
        };
        Change {
            op,
            path: node.path(),
            schema_path: schema_path_of(&node.path()),
            kind: schema.kind().into(),
            is_key: schema.is_list_key(),
            value,
            old_value,
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

/// Replays changes on a tree that held the same content as the one they were recorded on.
/// Returns false when a change cannot be replayed faithfully (positions in user-ordered
/// lists); the caller then falls back to a full copy.
pub(crate) fn replay(tree: &mut DataTree<'static>, changes: &[Change]) -> bool {
    for c in changes {
        let ok = match c.op {
            ChangeOp::Move => false,
            ChangeOp::Create | ChangeOp::Modify if c.is_key => true,
            ChangeOp::Create | ChangeOp::Modify => {
                let value = match c.kind {
                    NodeKind::Leaf => c.value.as_deref(),
                    _ => None,
                };
                tree.new_path(&c.path, value, false).is_ok()
            }
            ChangeOp::Delete => {
                // Descendants of a deleted subtree are already gone.
                if tree.find_path(&c.path).is_ok() {
                    super::tree::remove(tree, &c.path).is_ok()
                } else {
                    true
                }
            }
        };
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_path_strips_predicates_with_quoted_brackets() {
        assert_eq!(schema_path_of("/m:a/b[k='x]y'][j=\"1\"]/c[.='v']"), "/m:a/b/c");
    }
}
