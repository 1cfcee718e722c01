//! Deciding when a commit needs libyang's full-tree validation.
//!
//! Full validation of a 100 000-entry tree costs ~90 ms. Most operator commits change a
//! few plain leaves (a threshold, an interval), and for those the full pass cannot find
//! anything the per-value type check at edit time has not already found. A change skips the
//! full pass only when that is provably so: it modifies the value of an existing config leaf
//! that is not a key, is not a leafref or instance-identifier, sits in no choice, has no
//! must/when of its own or on an ancestor, and whose name appears in no must, when, path or
//! unique expression of any loaded module (a conservative, name-based check). Anything else
//! (creations, deletions, moves) takes the full pass.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use yang2::context::Context;
use yang2::data::{Data, DataTree};
use yang2::schema::{DataValueType, SchemaNodeKind};

use super::change::{Change, ChangeOp, NodeKind};

pub(crate) struct FastPath {
    ctx: &'static Context,
    /// Identifiers that occur in any XPath-bearing statement of any embedded module.
    referenced: HashSet<String>,
    /// Per schema path: may a value modification skip full validation?
    cache: Mutex<HashMap<String, bool>>,
}

impl FastPath {
    pub(crate) fn new(ctx: &'static Context) -> Self {
        let mut referenced = HashSet::new();
        for m in crate::yang::sources() {
            collect_xpath_identifiers(m.text, &mut referenced);
        }
        FastPath { ctx, referenced, cache: Mutex::new(HashMap::new()) }
    }

    /// True when every change is a plain value modification that full validation could not
    /// reject.
    pub(crate) fn covers(&self, changes: &[Change]) -> bool {
        !changes.is_empty()
            && changes.iter().all(|c| {
                c.op == ChangeOp::Modify && c.kind == NodeKind::Leaf && !c.is_key && self.leaf_ok(&c.schema_path)
            })
    }

    fn leaf_ok(&self, schema_path: &str) -> bool {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&ok) = cache.get(schema_path) {
            return ok;
        }
        let ok = self.compute(schema_path);
        cache.insert(schema_path.to_owned(), ok);
        ok
    }

    fn compute(&self, schema_path: &str) -> bool {
        let Ok(node) = self.ctx.find_path(schema_path) else {
            return false;
        };
        if node.kind() != SchemaNodeKind::Leaf || !node.is_config() || node.is_list_key() {
            return false;
        }
        if self.referenced.contains(node.name()) || node.musts().is_some_and(|m| m.count() > 0) {
            return false;
        }
        match node.leaf_type().map(|t| t.base_type()) {
            Some(DataValueType::LeafRef | DataValueType::InstanceId | DataValueType::Union) | None => return false,
            _ => {}
        }
        // An ancestor's must may read this leaf (count(*), sum(*), a path to it).
        node.ancestors().all(|a| a.musts().is_none_or(|m| m.count() == 0))
            && node
                .inclusive_ancestors()
                .all(|a| !matches!(a.kind(), SchemaNodeKind::Choice | SchemaNodeKind::Case) && a.whens().count() == 0)
    }
}

/// Collects the identifiers used in the arguments of must, when, path and unique
/// statements. Over-approximates on purpose: any word in those arguments counts.
fn collect_xpath_identifiers(text: &str, out: &mut HashSet<String>) {
    let bytes = text.as_bytes();
    for kw in ["must", "when", "path", "unique"] {
        let mut from = 0;
        while let Some(pos) = text[from..].find(kw) {
            let start = from + pos;
            from = start + kw.len();
            // A statement keyword follows the end of the previous statement or block
            // opening; inside a description string it follows ordinary words.
            let prev = text[..start].trim_end().chars().next_back();
            let before_ok =
                matches!(prev, None | Some(';' | '{' | '}')) && start > 0 && bytes[start - 1].is_ascii_whitespace()
                    || start == 0;
            let after_ok = bytes.get(from).is_some_and(|b| b.is_ascii_whitespace());
            if !(before_ok && after_ok) {
                continue;
            }
            // The argument runs to the end of the statement.
            let end = text[from..].find([';', '{']).map(|e| from + e).unwrap_or(text.len());
            for word in
                text[from..end].split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_' || c == '.' || c == ':'))
            {
                let word = word.rsplit(':').next().unwrap_or(word);
                if !word.is_empty() {
                    out.insert(word.to_owned());
                }
            }
        }
    }
}

/// What libyang's full validation changed on its own (defaults added, when-false nodes and
/// other cases removed), kept so that a commit refused after validation can put the tree
/// back exactly: the editor's undo log knows only the edit's own changes.
pub(crate) struct ValidationDiff(*mut yang2::ffi::lyd_node);

// SAFETY: the diff is a tree of its own, only touched under the datastore lock.
unsafe impl Send for ValidationDiff {}

impl ValidationDiff {
    pub(crate) fn none() -> Self {
        ValidationDiff(std::ptr::null_mut())
    }

    /// Undoes the validation's changes on the tree it validated (before the editor's own
    /// rollback, which expects the tree as the edit left it).
    pub(crate) fn revert(mut self, tree: &mut DataTree<'static>) {
        if self.0.is_null() {
            return;
        }
        let ctx = tree.context();
        // SAFETY: the diff was made on this tree; the tree is taken out and put back whole.
        unsafe {
            let mut raw = std::mem::replace(tree, DataTree::new(ctx)).into_raw();
            undo(&mut raw, self.0);
            *tree = <DataTree<'static> as yang2::utils::Binding>::from_raw(ctx, raw);
            yang2::ffi::lyd_free_all(self.0);
        }
        self.0 = std::ptr::null_mut();
    }
}

/// Applies the reverse of a validation `diff` to the tree whose first node is `first`.
///
/// # Safety
/// `diff` must be a diff libyang's validation made on that tree; `first` its first node.
pub(crate) unsafe fn undo(first: &mut *mut yang2::ffi::lyd_node, diff: *const yang2::ffi::lyd_node) {
    let mut reversed = std::ptr::null_mut();
    if yang2::ffi::lyd_diff_reverse_all(diff, &mut reversed) == yang2::ffi::LY_ERR::LY_SUCCESS {
        yang2::ffi::lyd_diff_apply_all(first, reversed);
    }
    if !reversed.is_null() {
        yang2::ffi::lyd_free_all(reversed);
    }
}

impl Drop for ValidationDiff {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: owned diff tree.
            unsafe { yang2::ffi::lyd_free_all(self.0) };
        }
    }
}

/// libyang's full validation (config only) of a live tree. On failure, what validation had
/// already changed is undone before returning, so a refused edit leaves no trace; on
/// success its changes are returned for a later refusal (a consumer's veto) to undo.
pub(crate) fn full(tree: &mut DataTree<'static>) -> Result<ValidationDiff, yang2::Error> {
    let ctx = tree.context();
    let mut raw = std::mem::replace(tree, DataTree::new(ctx)).into_raw();
    let mut diff = std::ptr::null_mut();
    // SAFETY: `raw` is the tree's own root, put back below whatever happens; the context
    // pointer comes from the tree's context.
    let ret = unsafe {
        let ctx_raw = if raw.is_null() || (*raw).schema.is_null() {
            std::ptr::null()
        } else {
            (*(*(*raw).schema).module).ctx as *const yang2::ffi::ly_ctx
        };
        if ctx_raw.is_null() {
            *tree = <DataTree<'static> as yang2::utils::Binding>::from_raw(ctx, raw);
            return tree.validate(yang2::data::DataValidationFlags::NO_STATE).map(|()| ValidationDiff::none());
        }
        yang2::ffi::lyd_validate_all(&mut raw, ctx_raw, yang2::ffi::LYD_VALIDATE_NO_STATE, &mut diff)
    };
    // SAFETY: as above.
    *tree = unsafe { <DataTree<'static> as yang2::utils::Binding>::from_raw(ctx, raw) };
    let diff = ValidationDiff(diff);
    if ret != yang2::ffi::LY_ERR::LY_SUCCESS {
        let e = yang2::Error::new(ctx);
        diff.revert(tree);
        return Err(e);
    }
    Ok(diff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_of_must_and_path_are_collected() {
        let mut s = HashSet::new();
        collect_xpath_identifiers(
            "leaf z { description \"the value must be below z-max\"; }\n leaf a { must \"../min-interval <= ../heartbeat\" { } }\n leaf b { type leafref { path \"/x:scis/x:sci/x:csci-id\"; } }",
            &mut s,
        );
        for w in ["min-interval", "heartbeat", "scis", "sci", "csci-id"] {
            assert!(s.contains(w), "{w}");
        }
        assert!(!s.contains("leaf"));
        assert!(!s.contains("z-max"), "words of a description are not references");
    }
}
