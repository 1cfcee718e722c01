//! The edit algorithm of RFC 6241 section 7.2 (edit-config) and RFC 8526 section 3.1.2
//! (edit-data): walks a parsed edit tree carrying `ietf-netconf:operation` metadata and
//! applies it to a target tree in place, recording typed changes for the consumers and an
//! undo log so a failed edit leaves the target exactly as it was.

use yang2::data::{Data, DataNodeRef, DataTree};
use yang2::iter::NodeIterable;
use yang2::schema::SchemaNodeKind;
use yang2::utils::Binding;

use super::change::{Change, ChangeOp};
use crate::error::{ErrorTag, RpcError};

/// The `operation` attribute values (RFC 6241 section 7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditOp {
    Merge,
    Replace,
    Create,
    Delete,
    Remove,
    None,
}

impl EditOp {
    pub fn parse(s: &str) -> Option<EditOp> {
        Some(match s {
            "merge" => EditOp::Merge,
            "replace" => EditOp::Replace,
            "create" => EditOp::Create,
            "delete" => EditOp::Delete,
            "remove" => EditOp::Remove,
            "none" => EditOp::None,
            _ => return None,
        })
    }
}

/// How an edit reacts to an error (RFC 6241 section 7.2, error-option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ErrorOption {
    #[default]
    StopOnError,
    ContinueOnError,
    RollbackOnError,
}

/// One undoable step.
enum Undo {
    /// A node was created: remove it.
    Created(String),
    /// A leaf's value changed: put the old value back. When the old value was the schema
    /// default (an implicit node), the explicit node is removed and the default re-added.
    Modified(String, String, bool),
    /// A subtree was unlinked from `parent` (null: the top level): link it back. Owned by
    /// the undo log until then; freed when the editor is dropped without a rollback.
    /// `anchor`: for an entry of a user-ordered list or leaf-list, a neighbouring entry of
    /// the same schema node and whether the entry goes after it (its previous sibling) or
    /// before (its next), so the order comes back too.
    Unlinked {
        node: *mut yang2::ffi::lyd_node,
        parent: *mut yang2::ffi::lyd_node,
        anchor: Option<(*mut yang2::ffi::lyd_node, bool)>,
    },
    /// A user-ordered instance moved: put it back after `after` (its previous
    /// same-schema sibling), or first when there was none.
    Moved { path: String, after: Option<String> },
    /// An `Unlinked` step pinned before libyang's validation ([`Editor::pin`]): validation
    /// may free nodes of the live tree (the other case of a choice, `when`-false data), so
    /// a parent or anchor still in the live tree is kept as its path and looked up again
    /// (the parent created if validation removed it); one inside a subtree the log owns is
    /// kept as a pointer, validation never sees it.
    Pinned { node: *mut yang2::ffi::lyd_node, parent: Place, anchor: Option<(Place, bool)> },
}

/// Where a pinned subtree goes back: a node the undo log owns, or a path in the live tree.
enum Place {
    Owned(*mut yang2::ffi::lyd_node),
    Path(String),
}

/// Where an edit node's counterpart is looked for in the target.
#[derive(Clone, Copy)]
enum Parent {
    /// Among the top-level nodes.
    Top,
    /// Among the children of this inner node of the target.
    Node(*mut yang2::ffi::lyd_node),
    /// Under a node the target does not have: nothing there exists.
    Missing,
}

/// An edit in progress on one target tree.
pub(crate) struct Editor<'t> {
    pub target: &'t mut DataTree<'static>,
    pub changes: Vec<Change>,
    undo: Vec<Undo>,
    pub errors: Vec<RpcError>,
    /// The schema paths of the changes recorded so far.
    paths: super::change::SchemaPaths,
    /// The data path of the target node whose children were last recorded (a bulk edit
    /// records 100 000 entries under one parent: its path is printed once).
    parent_path: Option<(*mut yang2::ffi::lyd_node, String)>,
    /// New subtrees are moved out of the edit tree instead of copied (see [`Editor::apply`]).
    consume: bool,
    /// The subtrees created whole (copied or moved in), for [`Editor::add_defaults`].
    created: Vec<*mut yang2::ffi::lyd_node>,
    /// How many runs of children [`Editor::adopt_children`] moved (tests check that the
    /// path was taken).
    pub adopted: u64,
}

impl<'t> Editor<'t> {
    pub fn new(target: &'t mut DataTree<'static>) -> Self {
        Editor {
            target,
            changes: Vec::new(),
            undo: Vec::new(),
            errors: Vec::new(),
            paths: Default::default(),
            parent_path: None,
            consume: false,
            created: Vec::new(),
            adopted: 0,
        }
    }

    /// Applies a whole edit tree (all top-level siblings).
    pub fn apply(&mut self, edit: &DataTree<'static>, default_op: EditOp, error_option: ErrorOption) {
        self.consume = false;
        self.apply_edit(edit, default_op, error_option);
    }

    /// Applies a whole edit tree that the caller drops afterwards without reading it: a new
    /// subtree the edit creates is unlinked from `edit` and linked into the target instead
    /// of being copied (a bulk create of 100 000 entries allocates, fills and frees nothing
    /// twice). `edit` is left holding what was not moved.
    pub fn apply_consuming(&mut self, edit: &DataTree<'static>, default_op: EditOp, error_option: ErrorOption) {
        self.consume = true;
        self.apply_edit(edit, default_op, error_option);
        self.consume = false;
    }

    fn apply_edit(&mut self, edit: &DataTree<'static>, default_op: EditOp, error_option: ErrorOption) {
        let Some(first) = edit.reference() else {
            return;
        };
        for top in first.inclusive_siblings() {
            let before = self.errors.len();
            self.node(&top, Parent::Top, default_op, error_option);
            if self.errors.len() > before && error_option != ErrorOption::ContinueOnError {
                return;
            }
        }
    }

    /// Frees what the undo log still owns (subtrees unlinked by removals) without undoing
    /// anything: the edit is kept. A large delete's subtrees are freed off the request's
    /// path ([`super::memory::free_later`]).
    fn forget(&mut self) {
        let owned: Vec<super::memory::Garbage> = self
            .undo
            .drain(..)
            .filter_map(|u| match u {
                // The unlinked subtree is owned by the log alone.
                Undo::Unlinked { node, .. } | Undo::Pinned { node, .. } => Some(super::memory::Garbage::Subtree(node)),
                _ => None,
            })
            .collect();
        super::memory::free_later(owned);
    }

    /// Makes the undo log safe against libyang's validation of the target, which may free
    /// nodes of the live tree: every parent and anchor of an unlinked subtree that is in the
    /// live tree is kept as its path from now on. Called before a full validation; O(number
    /// of unlinked subtrees × depth).
    pub fn pin(&mut self) {
        let owned: std::collections::HashSet<usize> = self
            .undo
            .iter()
            .filter_map(|u| match u {
                Undo::Unlinked { node, .. } | Undo::Pinned { node, .. } => Some(*node as usize),
                _ => None,
            })
            .collect();
        let target: &DataTree<'static> = self.target;
        // SAFETY (both closures): called on nodes that are alive right now, before
        // validation: an unlinked step's parent and anchor are live (see `rollback`).
        let in_log = |n: *mut yang2::ffi::lyd_node| unsafe {
            let mut top = n;
            while !(*top).parent.is_null() {
                top = (*top).parent as *mut yang2::ffi::lyd_node;
            }
            owned.contains(&(top as usize))
        };
        let place = |n: *mut yang2::ffi::lyd_node| {
            if in_log(n) {
                Place::Owned(n)
            } else {
                Place::Path(unsafe { DataNodeRef::from_raw(target, n) }.path())
            }
        };
        let pinned: Vec<Undo> = std::mem::take(&mut self.undo)
            .into_iter()
            .map(|u| match u {
                Undo::Unlinked { node, parent, anchor } => Undo::Pinned {
                    node,
                    parent: if parent.is_null() { Place::Path(String::new()) } else { place(parent) },
                    anchor: anchor.map(|(a, after)| (place(a), after)),
                },
                other => other,
            })
            .collect();
        self.undo = pinned;
    }

    /// Puts the target back as it was before the first change.
    pub fn rollback(&mut self) {
        self.created.clear();
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Created(path) => {
                    if let Err(e) = super::tree::remove(self.target, &path) {
                        // Not expected (the path's values were checked when the edit was
                        // parsed). Said, as a refused edit must leave nothing.
                        tracing::error!(%path, error = %e, "rollback could not remove a node the edit created");
                    }
                }
                Undo::Modified(path, _, true) => {
                    let _ = super::tree::remove(self.target, &path);
                    restore_defaults(self.target, &path);
                }
                Undo::Modified(path, old, false) => {
                    let _ = self.target.new_path(&path, Some(&old), false);
                }
                Undo::Unlinked { node, parent, anchor } => {
                    // SAFETY: `node` was unlinked from this target by `remove_node` and is
                    // owned by the undo log; `parent` and `anchor` (list entries, never
                    // implicit defaults) are alive because the later steps, undone first,
                    // only unlink what existed before them and link it back.
                    unsafe {
                        match anchor {
                            Some((a, true)) => {
                                yang2::ffi::lyd_insert_after(a, node);
                            }
                            Some((a, false)) => {
                                yang2::ffi::lyd_insert_before(a, node);
                            }
                            None => super::tree::relink(self.target, node, parent),
                        }
                        if parent.is_null() {
                            super::tree::after_move(self.target);
                        }
                    }
                }
                Undo::Pinned { node, parent, anchor } => {
                    let resolve = |t: &mut DataTree<'static>, p: &Place| -> Option<*mut yang2::ffi::lyd_node> {
                        match p {
                            Place::Owned(n) => Some(*n),
                            Place::Path(path) if path.is_empty() => Some(std::ptr::null_mut()),
                            Place::Path(path) => t.find_path(path).ok().map(|n| n.as_raw()),
                        }
                    };
                    let anchor = anchor.as_ref().and_then(|(a, after)| resolve(self.target, a).map(|a| (a, *after)));
                    let parent = match resolve(self.target, &parent) {
                        Some(p) => Some(p),
                        // Validation removed the parent (another case won): create it again.
                        None => match &parent {
                            Place::Path(path) => {
                                let made = self.target.new_path(path, None, false).is_ok();
                                if made {
                                    self.target.find_path(path).ok().map(|n| n.as_raw())
                                } else {
                                    None
                                }
                            }
                            Place::Owned(_) => None,
                        },
                    };
                    // SAFETY: `node` is owned by the log; `parent` and `anchor` were just
                    // looked up in the live tree, or are subtrees the log owned and earlier
                    // (later-recorded) steps linked back.
                    unsafe {
                        match (anchor, parent) {
                            (Some((a, true)), _) => {
                                yang2::ffi::lyd_insert_after(a, node);
                            }
                            (Some((a, false)), _) => {
                                yang2::ffi::lyd_insert_before(a, node);
                            }
                            (None, Some(p)) => super::tree::relink(self.target, node, p),
                            (None, None) => {
                                tracing::warn!(
                                    "rollback: the parent of a removed subtree is gone; the subtree is dropped"
                                );
                                yang2::ffi::lyd_free_tree(node);
                                continue;
                            }
                        }
                        if parent == Some(std::ptr::null_mut()) {
                            super::tree::after_move(self.target);
                        }
                    }
                }
                Undo::Moved { path, after } => {
                    let Ok(node) = self.target.find_path(&path) else {
                        continue;
                    };
                    let node_raw = node.as_raw();
                    let anchor = match &after {
                        Some(a) => self.target.find_path(a).ok().map(|n| (n.as_raw(), false)),
                        None => all_siblings(&node).find(|s| s.schema() == node.schema()).map(|s| (s.as_raw(), true)),
                    };
                    if let Some((anchor, before)) = anchor.filter(|(a, _)| *a != node_raw) {
                        move_node(self.target, node_raw, anchor, before);
                    }
                }
            }
        }
        self.changes.clear();
    }

    /// Where the counterpart of edit node `e` is in the target (a hash lookup among the
    /// children of `parent`, no path built or parsed), or None.
    fn lookup(&self, e: &DataNodeRef<'_, 'static>, parent: Parent) -> Option<*mut yang2::ffi::lyd_node> {
        let first = match parent {
            Parent::Missing => return None,
            Parent::Top => self.target.reference()?.as_raw(),
            // SAFETY: `p` is a live inner node (container or list entry) of the target,
            // which this editor holds mutably.
            Parent::Node(p) => unsafe { (*(p as *mut yang2::ffi::lyd_node_inner)).child },
        };
        if first.is_null() {
            return None;
        }
        let mut found = std::ptr::null_mut();
        // SAFETY: `first` is a live sibling of the target and `e` a live node of the edit
        // tree, both of the process-wide context; only a lookup.
        let ret = unsafe { yang2::ffi::lyd_find_sibling_first(first, e.as_raw(), &mut found) };
        (ret == yang2::ffi::LY_ERR::LY_SUCCESS && !found.is_null()).then_some(found)
    }

    /// Whether a target node counts as configured data for create/delete: implicit default
    /// leaves do not (non-presence containers libyang added do).
    fn counts(&self, n: *mut yang2::ffi::lyd_node) -> bool {
        // SAFETY: `n` is a live node of the target (just looked up).
        let node = unsafe { DataNodeRef::from_raw(&*self.target, n) };
        !node.is_default() || !is_leaf(&node.schema().kind())
    }

    fn fail(&mut self, e: RpcError) {
        self.errors.push(e);
    }

    /// The data path of `parent`, a live inner node of the target, printed once for a run
    /// of children recorded under it.
    fn path_of_parent(&mut self, parent: *mut yang2::ffi::lyd_node) -> String {
        match &self.parent_path {
            Some((p, path)) if *p == parent => path.clone(),
            _ => {
                // SAFETY: `parent` is a live node of the target (the caller's lookup or link).
                let path = unsafe { DataNodeRef::from_raw(&*self.target, parent) }.path();
                self.parent_path = Some((parent, path.clone()));
                path
            }
        }
    }

    /// Records the changes of the subtree at `n`, a live node of the target.
    fn record_subtree(&mut self, op: ChangeOp, n: *mut yang2::ffi::lyd_node, skip_defaults: bool) {
        // SAFETY: `n` is live and linked in the target; its parent pointer is read as is.
        let parent = unsafe { (*n).parent as *mut yang2::ffi::lyd_node };
        let parent_path = (!parent.is_null()).then(|| self.path_of_parent(parent));
        // SAFETY: as above.
        let node = unsafe { DataNodeRef::from_raw(&*self.target, n) };
        super::change::subtree(op, &node, skip_defaults, parent_path.as_deref(), &mut self.paths, &mut self.changes);
    }

    fn node(&mut self, e: &DataNodeRef<'_, 'static>, parent: Parent, inherited: EditOp, eo: ErrorOption) {
        let op = match operation_of(e) {
            Ok(Some(op)) => op,
            Ok(None) => inherited,
            Err(err) => return self.fail(err),
        };
        let schema = e.schema();
        if !schema.is_config() {
            return self.fail(
                RpcError::application(
                    ErrorTag::InvalidValue,
                    format!("\"{}\" is state data and cannot be configured", schema.name()),
                )
                .with_path(e.path())
                .with_bad_element(schema.name()),
            );
        }
        let found = self.lookup(e, parent);
        let exists = found.is_some_and(|n| self.counts(n));
        match (op, found) {
            (EditOp::Create, _) if exists => self.fail(
                RpcError::application(ErrorTag::DataExists, format!("\"{}\" already exists", schema.name()))
                    .with_path(e.path())
                    .with_bad_element(schema.name()),
            ),
            (EditOp::Delete, _) if !exists => self.fail(
                RpcError::application(ErrorTag::DataMissing, format!("\"{}\" does not exist", schema.name()))
                    .with_path(e.path())
                    .with_bad_element(schema.name()),
            ),
            (EditOp::Delete | EditOp::Remove, Some(n)) if exists => self.remove_node(n),
            (EditOp::Delete | EditOp::Remove, _) => {}
            (EditOp::Replace, _) => {
                let found = match found {
                    Some(n) if exists && !is_leaf(&schema.kind()) => {
                        self.remove_node(n);
                        None
                    }
                    other => other,
                };
                self.merge_node(e, found, EditOp::Merge, eo);
            }
            (EditOp::Create | EditOp::Merge, _) => self.merge_node(e, found, EditOp::Merge, eo),
            (EditOp::None, _) if !exists && !requests_change(e) => self.fail(
                // RFC 6241 7.2: with "none", data without a corresponding level in the
                // target is an error unless an operation below asks to create it.
                RpcError::application(ErrorTag::DataMissing, format!("\"{}\" does not exist", schema.name()))
                    .with_path(e.path())
                    .with_bad_element(schema.name()),
            ),
            (EditOp::None, _) => {
                let below = match found {
                    Some(n) if exists => Parent::Node(n),
                    _ => Parent::Missing,
                };
                for child in e.children() {
                    if child.schema().is_list_key() {
                        continue;
                    }
                    let before = self.errors.len();
                    self.node(&child, below, EditOp::None, eo);
                    if self.errors.len() > before && eo != ErrorOption::ContinueOnError {
                        return;
                    }
                }
            }
        }
    }

    /// Creates or updates `e` itself, then processes its children with `merge` inherited.
    /// `found` is `e`'s counterpart in the target (None when it has none).
    fn merge_node(
        &mut self,
        e: &DataNodeRef<'_, 'static>,
        found: Option<*mut yang2::ffi::lyd_node>,
        inherited: EditOp,
        eo: ErrorOption,
    ) {
        let schema = e.schema();
        match schema.kind() {
            SchemaNodeKind::Leaf => {
                let new = e.value_canonical();
                // SAFETY: `found` is a live node of the target (just looked up).
                let old = found
                    .map(|n| unsafe { DataNodeRef::from_raw(&*self.target, n) })
                    .map(|n| (n.value_canonical(), n.is_default()));
                match old {
                    Some((Some(old), false)) if Some(&old) == new.as_ref() => {}
                    Some((Some(old), was_default)) => {
                        let path = e.path();
                        if let Err(err) = self.target.new_path(&path, new.as_deref(), false) {
                            return self.fail(RpcError::from_libyang(&err).with_path(path));
                        }
                        let mut c = self.change_at(ChangeOp::Modify, &path);
                        c.old_value = Some(old.clone());
                        self.changes.push(c);
                        self.undo.push(Undo::Modified(path, old, was_default));
                    }
                    _ => self.create_one(&e.path(), new.as_deref()),
                }
            }
            _ => {
                let has_insert = e.meta().any(|m| m.name() == "insert");
                let node = match found {
                    Some(n) => n,
                    None => {
                        let path = e.path();
                        self.create_one(&path, None);
                        match self.target.find_path(&path) {
                            Ok(n) => n.as_raw(),
                            // create_one recorded the failure.
                            Err(_) => return,
                        }
                    }
                };
                if has_insert {
                    if let Err(err) = self.position(e, &e.path()) {
                        return self.fail(err);
                    }
                }
                if inherited == EditOp::Merge && self.adopt_children(e, node) {
                    return;
                }
                for child in e.children() {
                    if child.schema().is_list_key() {
                        continue;
                    }
                    if inherited == EditOp::Merge && self.create_child_subtree(&child, node) {
                        continue;
                    }
                    let before = self.errors.len();
                    self.node(&child, Parent::Node(node), inherited, eo);
                    if self.errors.len() > before && eo != ErrorOption::ContinueOnError {
                        return;
                    }
                }
            }
        }
    }

    /// Creates one node (and any missing ancestors), recording every node libyang created.
    fn create_one(&mut self, path: &str, value: Option<&str>) {
        // Record missing ancestors first, top-down.
        let ancestors = ancestor_paths(path);
        let missing: Vec<String> = ancestors.into_iter().filter(|p| self.target.find_path(p).is_err()).collect();
        if let Err(err) = self.target.new_path(path, value, false) {
            return self.fail(RpcError::from_libyang(&err).with_path(path));
        }
        for p in missing.iter().map(String::as_str).chain(std::iter::once(path)) {
            let Ok(node) = self.target.find_path(p) else {
                continue;
            };
            let mut recs = vec![Change::of_node(ChangeOp::Create, &node)];
            for k in node.list_keys() {
                recs.push(Change::of_node(ChangeOp::Create, &k));
            }
            self.changes.extend(recs);
        }
        // Undo the outermost node created: that removes the whole new branch.
        let outermost = missing.first().cloned().unwrap_or_else(|| path.to_owned());
        self.undo.push(Undo::Created(outermost));
    }

    /// Creates a new child subtree in one step when it can: the child does not exist under
    /// `parent` (a hash lookup, no path), asks for no other operation than merge / create /
    /// replace, and carries no metadata below it. libyang links a copy without metadata
    /// under the parent; the same Create changes are recorded as the node-by-node walk
    /// would, and one undo step removes the copy. A bulk create (100 000 list entries in
    /// one edit) then costs a copy instead of several path lookups per node. False when it
    /// does not apply; the caller walks node by node.
    fn create_child_subtree(&mut self, e: &DataNodeRef<'_, 'static>, parent: *mut yang2::ffi::lyd_node) -> bool {
        let schema = e.schema();
        if !schema.is_config() || is_leaf(&schema.kind()) {
            return false;
        }
        if !matches!(operation_of(e), Ok(None | Some(EditOp::Merge | EditOp::Create | EditOp::Replace))) {
            return false;
        }
        if !plain_subtree(e) {
            return false;
        }
        // SAFETY: `parent` is a live inner node of the target tree, which this editor holds
        // mutably; its first child is read fresh each time (inserts may change it).
        let first = unsafe { (*(parent as *mut yang2::ffi::lyd_node_inner)).child };
        if !first.is_null() {
            let mut found = std::ptr::null_mut();
            // SAFETY: `first` is a live sibling list of the target and `e` a live node of
            // the edit tree; both use the process-wide context. Only a lookup.
            let ret = unsafe { yang2::ffi::lyd_find_sibling_first(first, e.as_raw(), &mut found) };
            if ret == yang2::ffi::LY_ERR::LY_SUCCESS {
                return false;
            }
        }
        let node = if self.consume {
            let n = e.as_raw();
            // SAFETY: `n` is a live child (its parent is not null: only children reach here)
            // of the edit tree, which the caller of `apply_consuming` owns and does not read
            // again; the edit iterates its siblings with the next one already taken. Once
            // unlinked, the subtree is ours: its metadata (only its own `operation`, by
            // `plain_subtree`) is freed and it is linked under `parent`, a live inner node of
            // the target of the same context, which then owns it.
            unsafe {
                if yang2::ffi::lyd_unlink_tree(n) != yang2::ffi::LY_ERR::LY_SUCCESS {
                    return false;
                }
                if !(*n).meta.is_null() {
                    yang2::ffi::lyd_free_meta_siblings((*n).meta);
                }
                if yang2::ffi::lyd_insert_child(parent, n) != yang2::ffi::LY_ERR::LY_SUCCESS {
                    yang2::ffi::lyd_free_tree(n);
                    self.fail(RpcError::application(
                        ErrorTag::OperationFailed,
                        format!("could not link the new \"{}\"", schema.name()),
                    ));
                    return true;
                }
            }
            n
        } else {
            let mut dup = std::ptr::null_mut();
            // SAFETY: `e` is live (borrowed for this call) and `parent` a live inner node of
            // the target; libyang copies `e` recursively without metadata and links the copy
            // under `parent`, after which the target tree owns it.
            let ret = unsafe {
                yang2::ffi::lyd_dup_single(
                    e.as_raw(),
                    parent as *mut yang2::ffi::lyd_node_inner,
                    yang2::ffi::LYD_DUP_RECURSIVE | yang2::ffi::LYD_DUP_NO_META,
                    &mut dup,
                )
            };
            if ret != yang2::ffi::LY_ERR::LY_SUCCESS || dup.is_null() {
                return false;
            }
            dup
        };
        self.record_created(node);
        true
    }

    /// Records a subtree this editor linked into the target whole: its Create changes, the
    /// undo step that removes it (by path, as validation may free and re-create nodes), and
    /// its place in the list [`Editor::add_defaults`] completes.
    fn record_created(&mut self, node: *mut yang2::ffi::lyd_node) {
        let first = self.changes.len();
        self.record_subtree(ChangeOp::Create, node, false);
        if let Some(c) = self.changes.get(first) {
            self.undo.push(Undo::Created(c.path.clone()));
        }
        self.created.push(node);
    }

    /// Moves every child of the edit container `e` into `target`, its counterpart, in one
    /// step when all of them are new: the bulk create of a list (100 000 entries in one
    /// edit). Applies when the editor consumes the edit, `e` is a container whose children
    /// are all config subtrees (no leaves) asking for merge / create / replace (or nothing),
    /// with no metadata below them but libyang's own sorted-list index, no instance the edit
    /// repeats at any depth ([`distinct_sorted_neighbours`]), and `target` holds no instance
    /// of any of their schema nodes. libyang then moves the whole run of siblings
    /// (`lyd_unlink_siblings`, then `lyd_insert_child`), keeping the edit's sorted index of a
    /// list instead of taking each entry out of one index and into another (10 % of such a
    /// create, with the lookups). The same Create changes, undo steps and defaults are
    /// recorded as [`Editor::create_child_subtree`] records for each child. False, with
    /// nothing changed, when it does not apply; the caller goes child by child.
    fn adopt_children(&mut self, e: &DataNodeRef<'_, 'static>, target: *mut yang2::ffi::lyd_node) -> bool {
        if !self.consume || e.schema().kind() != SchemaNodeKind::Container {
            return false;
        }
        let internal = |m: &yang2::data::Metadata<'_, '_>| m.name() == "lyds_tree";
        let mut moved: Vec<*mut yang2::ffi::lyd_node> = Vec::new();
        let mut runs: Vec<*const yang2::ffi::lysc_node> = Vec::new();
        // The children themselves first (cheap): a container whose counterpart already has
        // children of the same kind is given up before any subtree is walked.
        for child in e.children() {
            let schema = child.schema();
            if !schema.is_config() || is_leaf(&schema.kind()) {
                return false;
            }
            if !matches!(operation_of(&child), Ok(None | Some(EditOp::Merge | EditOp::Create | EditOp::Replace))) {
                return false;
            }
            if !child.meta().all(|m| m.name() == "operation" || internal(&m)) {
                return false;
            }
            // SAFETY: `child` is a live node of the edit tree.
            let sch = unsafe { (*child.as_raw()).schema };
            match moved.last() {
                // SAFETY: `prev` is the live sibling before `child`.
                Some(&prev) if unsafe { (*prev).schema } == sch => {
                    if !distinct_sorted_neighbours(prev, &child) {
                        return false;
                    }
                }
                _ => {
                    // libyang keeps the instances of one schema node together; should a
                    // later run of them come, the neighbour check would not see across runs.
                    if runs.contains(&sch) {
                        return false;
                    }
                    runs.push(sch);
                    // SAFETY: `target` is a live inner node of the target tree (the caller's
                    // lookup or creation) and `sch` a node of the process-wide context; only
                    // a lookup of the first instance.
                    let first = unsafe { (*(target as *mut yang2::ffi::lyd_node_inner)).child };
                    let mut found = std::ptr::null_mut();
                    if !first.is_null()
                        && unsafe { yang2::ffi::lyd_find_sibling_val(first, sch, std::ptr::null(), 0, &mut found) }
                            == yang2::ffi::LY_ERR::LY_SUCCESS
                    {
                        return false;
                    }
                }
            }
            moved.push(child.as_raw());
        }
        // Then everything below them: no metadata but the sorted index, no repeated instance.
        for child in e.children() {
            for n in child.traverse().skip(1) {
                if !n.meta().all(|m| internal(&m)) {
                    return false;
                }
                // SAFETY: `n` is a live node of the edit tree; its next sibling is read as is.
                let (schema, next) = unsafe { ((*n.as_raw()).schema, (*n.as_raw()).next) };
                if schema.is_null() {
                    // Opaque data (a strict parse leaves none): not moved.
                    return false;
                }
                if !next.is_null() && unsafe { (*next).schema } == schema {
                    // SAFETY: `next` is a live sibling of `n` in the same tree.
                    let next = unsafe { DataNodeRef::from_raw(n.tree(), next) };
                    if !distinct_sorted_neighbours(n.as_raw(), &next) {
                        return false;
                    }
                }
            }
        }
        let Some(&first) = moved.first() else {
            return false;
        };
        // SAFETY: the children are live nodes of the edit tree, which the caller of
        // `apply_consuming` owns and does not read again; only `e`'s schema is read after
        // this. Their only metadata besides libyang's sorted index is their own `operation`,
        // freed here. Unlinked as one run of siblings (the first child starts it), they are
        // linked under `target`, a live inner node of the target tree of the same context,
        // which then owns them.
        unsafe {
            for &n in &moved {
                let mut m = (*n).meta;
                while !m.is_null() {
                    let next = (*m).next;
                    if std::ffi::CStr::from_ptr((*m).name).to_bytes() == b"operation" {
                        yang2::ffi::lyd_free_meta_single(m);
                    }
                    m = next;
                }
            }
            if yang2::ffi::lyd_unlink_siblings(first) != yang2::ffi::LY_ERR::LY_SUCCESS
                || yang2::ffi::lyd_insert_child(target, first) != yang2::ffi::LY_ERR::LY_SUCCESS
            {
                // Not expected (no child is a key, all belong under `target`'s schema, and
                // `target` has none of their kind). Wherever each child is now — in the edit,
                // the run, or linked under `target` — it is taken out and freed, so the target
                // keeps nothing unrecorded, and the edit fails.
                for &n in &moved {
                    yang2::ffi::lyd_unlink_tree(n);
                    yang2::ffi::lyd_free_tree(n);
                }
                self.fail(RpcError::application(
                    ErrorTag::OperationFailed,
                    format!("could not link the new children of \"{}\"", e.schema().name()),
                ));
                return true;
            }
        }
        for n in moved {
            self.record_created(n);
        }
        self.adopted += 1;
        true
    }

    /// Gives the subtrees created whole their implicit defaults, as validation would: a bulk
    /// create then leaves validation nothing to add and record in its diff node by node (14 %
    /// of a 100 000-SCI create). Called once every edit of the transaction is applied and
    /// right before validating it, never on a candidate that is kept unvalidated (later edits
    /// must not find defaults there that an unvalidated entry would not have). The defaults
    /// are not changes (only what the edits wrote is), and the undo steps remove them with
    /// their subtrees.
    pub fn add_defaults(&mut self) {
        for n in self.created.drain(..) {
            // SAFETY: `n` was linked into the target by this editor and nothing has been
            // freed since (the edit steps unlink, never free; only a rollback frees, and it
            // clears this list): it is live, in the target or in a subtree the undo log owns.
            // lyd_new_implicit_tree only adds configuration children below it, no diff.
            unsafe {
                yang2::ffi::lyd_new_implicit_tree(n, yang2::ffi::LYD_IMPLICIT_NO_STATE, std::ptr::null_mut());
            }
        }
    }

    /// Removes a target node and its subtree, recording a Delete per node (implicit
    /// defaults below it excepted). The subtree is unlinked, not copied: the undo log owns it
    /// until a rollback links it back or the editor is dropped.
    fn remove_node(&mut self, n: *mut yang2::ffi::lyd_node) {
        self.record_subtree(ChangeOp::Delete, n, true);
        // SAFETY: `n` is a live node of the target (just looked up).
        let node = unsafe { DataNodeRef::from_raw(&*self.target, n) };
        let anchor = if node.schema().is_user_ordered() {
            // SAFETY: `n` is live and linked.
            unsafe { super::tree::same_schema_neighbour(n) }
        } else {
            None
        };
        // SAFETY: `n` is live and linked in the target; afterwards it is owned by the log.
        let parent = unsafe { super::tree::unlink(self.target, n) };
        self.undo.push(Undo::Unlinked { node: n, parent, anchor });
    }

    fn change_at(&self, op: ChangeOp, path: &str) -> Change {
        match self.target.find_path(path) {
            Ok(n) => Change::of_node(op, &n),
            Err(_) => Change {
                op,
                path: path.to_owned(),
                schema_path: super::change::schema_path_of(path).into(),
                kind: super::change::NodeKind::Other,
                is_key: false,
                value: None,
                old_value: None,
            },
        }
    }

    /// Honours the YANG `insert` attribute (RFC 7950 section 7.8.6) on user-ordered lists
    /// and leaf-lists.
    fn position(&mut self, e: &DataNodeRef<'_, 'static>, path: &str) -> Result<(), RpcError> {
        let insert = e.meta().find(|m| m.name() == "insert").map(|m| m.value().to_owned());
        let Some(insert) = insert else { return Ok(()) };
        let schema = e.schema();
        if !schema.is_user_ordered() {
            return Err(RpcError::protocol(ErrorTag::BadAttribute, "insert is only allowed on ordered-by user nodes")
                .with_bad_attribute("insert")
                .with_bad_element(schema.name()));
        }
        let anchor_pred = match insert.as_str() {
            "first" | "last" => None,
            "before" | "after" => {
                let attr = if schema.kind() == SchemaNodeKind::List { "key" } else { "value" };
                let v = e.meta().find(|m| m.name() == attr).map(|m| m.value().to_owned());
                match v {
                    Some(v) if schema.kind() == SchemaNodeKind::List => Some(v),
                    Some(v) => Some(format!("[.='{v}']")),
                    None => {
                        return Err(RpcError::protocol(
                            ErrorTag::MissingAttribute,
                            format!("insert=\"{insert}\" needs the \"{attr}\" attribute"),
                        )
                        .with_bad_attribute(attr)
                        .with_bad_element(schema.name()))
                    }
                }
            }
            other => {
                return Err(RpcError::protocol(ErrorTag::BadAttribute, format!("invalid insert value \"{other}\""))
                    .with_bad_attribute("insert")
                    .with_bad_element(schema.name()))
            }
        };
        let base = strip_last_predicates(path);
        let node = self.target.find_path(path).map_err(|e| RpcError::from_libyang(&e))?;
        let previous = {
            let mut prev = None;
            for s in all_siblings(&node).filter(|s| s.schema() == schema) {
                if s == node {
                    break;
                }
                prev = Some(s.path());
            }
            prev
        };
        let anchor = match (&anchor_pred, insert.as_str()) {
            (Some(pred), _) => {
                let anchor_path = format!("{base}{pred}");
                match self.target.find_path(&anchor_path) {
                    Ok(a) => Some(a.as_raw()),
                    Err(_) => {
                        // RFC 7950 section 15.7.
                        return Err(RpcError::protocol(
                            ErrorTag::BadAttribute,
                            format!("the insert anchor {anchor_path} does not exist"),
                        )
                        .with_app_tag("missing-instance")
                        .with_bad_attribute(if schema.kind() == SchemaNodeKind::List { "key" } else { "value" })
                        .with_path(anchor_path));
                    }
                }
            }
            (None, "first") => all_siblings(&node).find(|s| s.schema() == schema).map(|s| s.as_raw()),
            (None, _) => all_siblings(&node).filter(|s| s.schema() == schema).last().map(|s| s.as_raw()),
        };
        let node_raw = node.as_raw();
        if let Some(anchor) = anchor {
            if anchor != node_raw {
                let before = insert == "first" || insert == "before";
                if !move_node(self.target, node_raw, anchor, before) {
                    return Err(RpcError::application(
                        ErrorTag::OperationFailed,
                        "could not move the user-ordered entry",
                    )
                    .with_path(path));
                }
                let mut c = self.change_at(ChangeOp::Move, path);
                c.value = Some(insert.clone());
                c.old_value = anchor_pred;
                self.changes.push(c);
                self.undo.push(Undo::Moved { path: path.to_owned(), after: previous });
            }
        }
        Ok(())
    }
}

impl Drop for Editor<'_> {
    fn drop(&mut self) {
        self.forget();
    }
}

/// Re-adds the implicit default nodes under the parent of `path` (after an explicit copy of
/// a default leaf was removed).
fn restore_defaults(tree: &mut DataTree<'static>, path: &str) {
    let Some(parent) = ancestor_paths(path).pop() else { return };
    let Ok(node) = tree.find_path(&parent) else { return };
    // Configuration defaults only: an implicit state container (config false, e.g. a
    // `state` child of the parent) would make the next NO_STATE validation fail.
    // SAFETY: `node` is a live inner node of `tree`; lyd_new_implicit_tree only adds
    // children below it (no sibling or root changes), and a null diff pointer is allowed.
    unsafe {
        yang2::ffi::lyd_new_implicit_tree(node.as_raw(), yang2::ffi::LYD_IMPLICIT_NO_STATE, std::ptr::null_mut());
    }
}

/// Moves `node` just before or after `anchor`. Both must be live, distinct instances of the
/// same user-ordered schema node under one parent in `tree` (found in it with nothing freed
/// since), which is what lyd_insert_before/after require.
fn move_node(
    tree: &mut DataTree<'static>,
    node: *mut yang2::ffi::lyd_node,
    anchor: *mut yang2::ffi::lyd_node,
    before: bool,
) -> bool {
    // SAFETY: guaranteed by the caller as documented above.
    let (ret, top_level) = unsafe {
        let ret = if before {
            yang2::ffi::lyd_insert_before(anchor, node)
        } else {
            yang2::ffi::lyd_insert_after(anchor, node)
        };
        (ret, (*node).parent.is_null())
    };
    if top_level {
        super::tree::after_move(tree);
    }
    ret == yang2::ffi::LY_ERR::LY_SUCCESS
}

/// A node and all its siblings, from the first.
fn all_siblings<'a, 'b>(node: &'a DataNodeRef<'a, 'b>) -> impl Iterator<Item = DataNodeRef<'a, 'b>> {
    let first = match node.parent() {
        Some(p) => p.children().next(),
        None => {
            // Top-level siblings: walk back via libyang's circular `prev` link.
            // SAFETY: `prev` of a live node is always a live sibling (the first node's
            // `prev` is the last one, whose `next` is null); the returned reference borrows
            // the same tree as `node`.
            unsafe {
                let mut raw = node.as_raw();
                loop {
                    let prev = (*raw).prev;
                    if prev.is_null() || (*prev).next.is_null() {
                        break;
                    }
                    raw = prev;
                }
                Some(DataNodeRef::from_raw(node.tree(), raw))
            }
        }
    };
    first.into_iter().flat_map(|f| f.inclusive_siblings())
}

/// Whether `next`, the sibling after `prev` with the same schema node, can move with it
/// where a child-by-child walk would see the same: both are entries of a list or values of
/// a leaf-list libyang keeps sorted (ordered-by system, so equal ones are neighbours), and
/// they differ. Anything else — a repeated container or leaf, a user-ordered list (whose
/// repeats need not be neighbours), an instance the edit repeats (the walk merges it, or
/// reports data-exists for a create) — is left to that walk.
fn distinct_sorted_neighbours(prev: *mut yang2::ffi::lyd_node, next: &DataNodeRef<'_, '_>) -> bool {
    let schema = next.schema();
    matches!(schema.kind(), SchemaNodeKind::List | SchemaNodeKind::LeafList)
        && !schema.is_user_ordered()
        // SAFETY: both are live siblings of one tree; only compared (keys or value).
        && unsafe { yang2::ffi::lyd_compare_single(prev, next.as_raw(), 0) } != yang2::ffi::LY_ERR::LY_SUCCESS
}

fn is_leaf(kind: &SchemaNodeKind) -> bool {
    matches!(kind, SchemaNodeKind::Leaf)
}

/// Whether any node below `e` carries an operation that creates or changes data.
fn requests_change(e: &DataNodeRef<'_, '_>) -> bool {
    e.traverse()
        .any(|n| n.meta().any(|m| m.name() == "operation" && matches!(m.value(), "merge" | "replace" | "create")))
}

/// Whether an edit subtree is plain data: no metadata anywhere except the `operation` of its
/// top node (already applied), so it can be created by copying it as a whole.
fn plain_subtree(e: &DataNodeRef<'_, '_>) -> bool {
    e.meta().all(|m| m.name() == "operation") && e.traverse().skip(1).all(|n| n.meta().next().is_none())
}

/// Reads the `ietf-netconf:operation` metadata of an edit node.
fn operation_of(e: &DataNodeRef<'_, '_>) -> Result<Option<EditOp>, RpcError> {
    match e.meta().find(|m| m.name() == "operation") {
        None => Ok(None),
        Some(m) => EditOp::parse(m.value()).map(Some).ok_or_else(|| {
            RpcError::protocol(ErrorTag::BadAttribute, format!("invalid operation \"{}\"", m.value()))
                .with_bad_attribute("operation")
                .with_bad_element(e.schema().name())
        }),
    }
}

/// `/a/b[k='1']/c` → [`/a`, `/a/b[k='1']`].
fn ancestor_paths(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, c) in path.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '[') => depth += 1,
            (None, ']') => depth -= 1,
            (None, '\'' | '"') if depth > 0 => quote = Some(c),
            (None, '/') if depth == 0 && i > 0 => out.push(path[..i].to_owned()),
            _ => {}
        }
    }
    out
}

/// `/a/b[k='1']` → `/a/b`.
fn strip_last_predicates(path: &str) -> &str {
    let mut end = path.len();
    while path[..end].ends_with(']') {
        // Find the matching '[' honouring quotes.
        let bytes = path.as_bytes();
        let mut i = end - 1;
        let mut quote: Option<u8> = None;
        loop {
            let b = bytes[i];
            match quote {
                Some(q) if b == q => quote = None,
                Some(_) => {}
                None if b == b'\'' || b == b'"' => quote = Some(b),
                None if b == b'[' => break,
                None => {}
            }
            if i == 0 {
                return path;
            }
            i -= 1;
        }
        end = i;
    }
    &path[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_helpers() {
        assert_eq!(ancestor_paths("/m:a/b[k='x/y']/c"), vec!["/m:a", "/m:a/b[k='x/y']"]);
        assert_eq!(strip_last_predicates("/m:a/b[k='1'][j='[']"), "/m:a/b");
    }
}
