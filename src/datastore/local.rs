//! Validation that follows the change: a commit that creates or deletes whole list entries
//! is validated on those entries and on what they reach, not on the whole tree.
//!
//! libyang validates a data tree as a whole. With 100 000 SCIs configured that is a few
//! hundred milliseconds for every SCI created or deleted, although running was valid
//! before the commit and only the entry changed. Creating or deleting an entry E of a list
//! S (parent P) can only make the tree invalid through
//! - E itself: its defaults, whens, musts, mandatory nodes, leafrefs, nested lists;
//! - the list S: its `unique`s, `min-elements` / `max-elements`, a choice it sits in;
//! - expressions elsewhere that read nodes of S (musts, whens, leafrefs: the dependents).
//!
//! What each expression reads comes from libyang itself: `lys_find_expr_atoms` gives the
//! schema nodes a compiled must, when or leafref path touches. A list qualifies for this
//! path ([`Plan`]) when
//! - S is a keyed config list with no unique, no min/max-elements, no when, in no choice;
//! - no expression inside S's subtree reads P (whatever climbs out of E, or comes back into
//!   S by an absolute path, passes through P): E's expressions then see only E and nodes
//!   outside S, which the commit did not change;
//! - every dependent outside S is a leafref (adding targets never breaks a leafref; a
//!   deletion is checked, below); no instance-identifier requires an instance anywhere.
//!
//! Created entries are moved into a scratch tree holding copies of their ancestors and of
//! every subtree their expressions reach (the regions), the scratch is validated by libyang
//! (`lyd_validate_module`, with its diff), and the entries move back with the defaults and
//! when-results validation gave them. The scratch result counts only when the diff shows
//! no change outside the entries but new defaults in places no expression of theirs reads.
//! Deleted entries: every leafref that may point at them (only to a key of S) is looked
//! up for the deleted key values, and P's default flag is recomputed as validation would.
//!
//! Anything else — and every failure of the scratch — returns `false` and the caller runs
//! libyang's full validation, which is authoritative and gives the error message. This
//! module never reports a validation error itself, so it cannot make an error differ.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use yang2::context::Context;
use yang2::data::{Data, DataTree};
use yang2::ffi;

use super::change::{self, Change, ChangeOp, NodeKind};
use super::validate::FastPath;
use crate::yang::array_len;

/// A compiled schema node, as a hashable address.
type Snode = usize;

enum Kind {
    Must,
    When,
    /// A leafref (not inside a union) and its target.
    LeafRef {
        target: Snode,
        require_instance: bool,
    },
    /// A union holding a leafref: what it reads is known, how it may break is not.
    Opaque,
}

struct Expr {
    /// The node the expression belongs to (its must, when or type).
    owner: Snode,
    atoms: Vec<Snode>,
    kind: Kind,
    /// Uses what its atoms do not show: deref(), or an axis other than child, parent and
    /// self (a sibling axis finds no schema node, so it adds no atom).
    hidden_reach: bool,
}

struct Deps {
    exprs: Vec<Expr>,
    /// A config instance-identifier with require-instance exists: any deletion may break it.
    instance_ids: bool,
    /// An expression whose atoms libyang could not compute: nothing is provably local.
    unknown: bool,
}

/// What validating created or deleted entries of one list needs.
struct Plan {
    /// The subtrees (schema nodes) the entries' expressions reach outside S.
    regions: Vec<Snode>,
    /// Deletions: the leafrefs that may point at a key of S, with the key's schema path.
    backrefs: Vec<(String, String)>,
    deletes: bool,
    user_ordered: bool,
}

pub(crate) struct LocalValidation {
    ctx: &'static Context,
    deps: OnceLock<Deps>,
    plans: Mutex<HashMap<String, Option<Arc<Plan>>>>,
    enabled: AtomicBool,
    used: AtomicU64,
}

/// Above this many created or deleted entries in one commit, full validation: the scratch
/// costs about four times what full validation spends per entry (28 µs against 7 µs per
/// SCI, release build), so it only pays while the change is small beside the tree.
const MAX_UNITS: usize = 1024;

/// One created or deleted entry of a qualifying list.
struct Unit<'c> {
    change: &'c Change,
    plan: Arc<Plan>,
}

impl LocalValidation {
    pub(crate) fn new(ctx: &'static Context) -> Self {
        LocalValidation {
            ctx,
            deps: OnceLock::new(),
            plans: Mutex::new(HashMap::new()),
            enabled: AtomicBool::new(true),
            used: AtomicU64::new(0),
        }
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// How many commits this path validated (tests show it was taken).
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Validates `tree` after `changes` when every change is a created or deleted entry of
    /// a qualifying list, or a leaf modification the fast path covers. True: the tree is
    /// valid and holds what full validation would have given it. False: not proven, run
    /// full validation (the tree may have gained the defaults of created entries).
    pub(crate) fn validate(&self, tree: &mut DataTree<'static>, changes: &[Change], fast: &FastPath) -> bool {
        // A bulk change is not worth grouping into units first.
        if !self.enabled.load(Ordering::Relaxed) || changes.is_empty() || changes.len() > MAX_UNITS * 64 {
            return false;
        }
        let Some(units) = self.units(changes, fast) else {
            return false;
        };
        if units.is_empty() || units.len() > MAX_UNITS {
            return false;
        }
        let ok = units.iter().filter(|u| u.change.op == ChangeOp::Delete).all(|u| deleted_ok(tree, u, changes))
            && self.created_ok(tree, &units);
        if ok {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// The changes as units; None when one of them is not covered.
    fn units<'c>(&self, changes: &'c [Change], fast: &FastPath) -> Option<Vec<Unit<'c>>> {
        let mut units: Vec<Unit<'c>> = Vec::new();
        let mut roots: HashSet<&str> = HashSet::new();
        for c in change::roots(changes) {
            let inside = change::ancestor_ends(&c.path).any(|end| roots.contains(&c.path[..end]));
            if inside {
                // A change below a created or deleted entry of this commit: the entry is
                // validated (or gone) as a whole.
                continue;
            }
            match (c.op, c.kind) {
                (ChangeOp::Create | ChangeOp::Delete, NodeKind::List) => {
                    let plan = self.plan(&c.schema_path)?;
                    if c.op == ChangeOp::Delete && !plan.deletes {
                        return None;
                    }
                    if !roots.insert(c.path.as_str()) {
                        // Deleted and created again in one commit.
                        return None;
                    }
                    units.push(Unit { change: c, plan });
                    if units.len() > MAX_UNITS {
                        return None;
                    }
                }
                _ if fast.covers(std::slice::from_ref(c)) => {}
                _ => return None,
            }
        }
        Some(units)
    }

    fn plan(&self, schema_path: &str) -> Option<Arc<Plan>> {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plans.get(schema_path) {
            return p.clone();
        }
        let deps = self.deps.get_or_init(|| deps(self.ctx));
        let plan = self.ctx.find_path(schema_path).ok().and_then(|s| plan_for(deps, s.as_raw())).map(Arc::new);
        plans.insert(schema_path.to_owned(), plan.clone());
        plan
    }

    /// Validates the created entries, grouped by parent, each group in one scratch tree.
    fn created_ok(&self, tree: &mut DataTree<'static>, units: &[Unit<'_>]) -> bool {
        // One group per parent node and list: members of one group share a plan.
        type Group<'g, 'c> = ((*mut ffi::lyd_node, *const ffi::lysc_node), Vec<(*mut ffi::lyd_node, &'g Unit<'c>)>);
        let mut groups: Vec<Group<'_, '_>> = Vec::new();
        for u in units.iter().filter(|u| u.change.op == ChangeOp::Create) {
            let Ok(node) = tree.find_path(&u.change.path) else { return false };
            let e = node.as_raw();
            // SAFETY: `e` is a live node of `tree`.
            let parent = unsafe { (*e).parent as *mut ffi::lyd_node };
            if parent.is_null() {
                return false;
            }
            // SAFETY: as above.
            let key = (parent, unsafe { (*e).schema });
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push((e, u)),
                None => groups.push((key, vec![(e, u)])),
            }
        }
        for ((parent, _), members) in &groups {
            if members[0].1.plan.user_ordered && members.len() > 1 {
                return false;
            }
            // SAFETY: `parent` and the members are live nodes of `tree`; the scratch is
            // built, validated and freed here, and every member is linked back into `tree`
            // before returning.
            if !unsafe { validate_group(*parent, members) } {
                return false;
            }
        }
        true
    }
}

/// The entries of one parent: moved into a scratch tree, validated there, moved back.
///
/// # Safety
/// `parent` and every member must be live nodes of one tree, members children of `parent`.
unsafe fn validate_group(parent: *mut ffi::lyd_node, members: &[(*mut ffi::lyd_node, &Unit<'_>)]) -> bool {
    let plan = &members[0].1.plan;
    // Where each member goes back: user-ordered lists keep the neighbour (one member
    // only); other lists take their entries back at the end, in the order they had (the
    // members of one commit are the last ones, in change order).
    let anchor = if plan.user_ordered { crate::datastore::tree::same_schema_neighbour(members[0].0) } else { None };
    let mut scratch_parent = null_mut();
    if ffi::lyd_dup_single(parent, null_mut(), ffi::LYD_DUP_WITH_PARENTS | ffi::LYD_DUP_WITH_FLAGS, &mut scratch_parent)
        != ffi::LY_ERR::LY_SUCCESS
        || scratch_parent.is_null()
    {
        return false;
    }
    let mut first = top_of(scratch_parent);
    let mut ok = copy_regions(parent, scratch_parent, &mut first, &plan.regions);
    let member_paths = Members::of(members);
    for (e, _) in members {
        ffi::lyd_unlink_tree(*e);
        ffi::lyd_insert_child(scratch_parent, *e);
    }
    if ok {
        let module = (*(*top_of(parent)).schema).module;
        let raw_ctx = (*module).ctx;
        // Every error kept (not only the last) and none logged: errors of the copies and of
        // the skeleton are expected (their own references reach beyond the scratch).
        ffi::ly_err_clean(raw_ctx, null_mut());
        let mut opts = ffi::LY_LOSTORE;
        let previous = ffi::ly_temp_log_options(&mut opts);
        let mut diff = null_mut();
        let r = ffi::lyd_validate_module(
            &mut first,
            module,
            ffi::LYD_VALIDATE_NO_STATE | ffi::LYD_VALIDATE_MULTI_ERROR,
            &mut diff,
        );
        ok = match r {
            ffi::LY_ERR::LY_SUCCESS => true,
            ffi::LY_ERR::LY_EVALID => errors_are_outside(raw_ctx, &member_paths),
            _ => false,
        };
        ffi::ly_err_clean(raw_ctx, null_mut());
        ffi::ly_temp_log_options(previous);
        if ok {
            ok = diff_is_local(diff, &member_paths, &region_paths(scratch_parent, &plan.regions));
        }
        if !ok && !diff.is_null() {
            // Not proven: the members go back as the edit made them (full validation
            // decides), without what the scratch's validation removed or added in them.
            super::validate::undo(&mut first, diff);
        }
        if !diff.is_null() {
            ffi::lyd_free_all(diff);
        }
    }
    for (e, _) in members {
        ffi::lyd_unlink_tree(*e);
        let linked = match anchor {
            Some((a, true)) => ffi::lyd_insert_after(a, *e),
            Some((a, false)) => ffi::lyd_insert_before(a, *e),
            None => ffi::lyd_insert_child(parent, *e),
        };
        if linked != ffi::LY_ERR::LY_SUCCESS {
            // Cannot happen for a node that was a child of `parent`; never lose it.
            ffi::lyd_insert_child(parent, *e);
            ok = false;
        }
    }
    ffi::lyd_free_all(first);
    ok
}

/// Copies into the scratch every instance of the region roots, under the scratch copy of
/// their parent (an ancestor of the members' parent) or at the top level.
unsafe fn copy_regions(
    parent: *mut ffi::lyd_node,
    scratch_parent: *mut ffi::lyd_node,
    first: &mut *mut ffi::lyd_node,
    regions: &[Snode],
) -> bool {
    for &r in regions {
        let r = r as *const ffi::lysc_node;
        let rp = data_parent(r);
        // The real and the scratch node whose children the region's instances are.
        let (mut real, mut copy) = (parent, scratch_parent);
        if !rp.is_null() {
            while !real.is_null() && (*real).schema != rp {
                real = (*real).parent as *mut ffi::lyd_node;
                copy = (*copy).parent as *mut ffi::lyd_node;
            }
            if real.is_null() || copy.is_null() {
                return false;
            }
        }
        let mut child =
            if rp.is_null() { first_sibling(top_of(parent)) } else { (*(real as *mut ffi::lyd_node_inner)).child };
        while !child.is_null() {
            if (*child).schema == r {
                let mut dup = null_mut();
                let under = if rp.is_null() { null_mut() } else { copy as *mut ffi::lyd_node_inner };
                if ffi::lyd_dup_single(child, under, ffi::LYD_DUP_RECURSIVE | ffi::LYD_DUP_WITH_FLAGS, &mut dup)
                    != ffi::LY_ERR::LY_SUCCESS
                {
                    return false;
                }
                if rp.is_null() && ffi::lyd_insert_sibling(*first, dup, first) != ffi::LY_ERR::LY_SUCCESS {
                    ffi::lyd_free_tree(dup);
                    return false;
                }
            }
            child = (*child).next;
        }
    }
    true
}

/// The data paths of the region copies in the scratch.
unsafe fn region_paths(scratch_parent: *mut ffi::lyd_node, regions: &[Snode]) -> Vec<String> {
    let mut out = Vec::new();
    for &r in regions {
        let r = r as *const ffi::lysc_node;
        let rp = data_parent(r);
        let mut copy = scratch_parent;
        if !rp.is_null() {
            while !copy.is_null() && (*copy).schema != rp {
                copy = (*copy).parent as *mut ffi::lyd_node;
            }
            if copy.is_null() {
                continue;
            }
        }
        let mut child = if rp.is_null() {
            first_sibling(top_of(scratch_parent))
        } else {
            (*(copy as *mut ffi::lyd_node_inner)).child
        };
        while !child.is_null() {
            if (*child).schema == r {
                if let Some(p) = node_path(child) {
                    out.push(p);
                }
            }
            child = (*child).next;
        }
    }
    out
}

/// The data paths of a group's members (one parent), for lookups that cost O(depth).
struct Members<'c> {
    entries: HashSet<&'c str>,
    /// The proper ancestors of the members (the parent's path and above).
    ancestors: Vec<&'c str>,
}

impl<'c> Members<'c> {
    fn of(members: &[(*mut ffi::lyd_node, &Unit<'c>)]) -> Members<'c> {
        let entries: HashSet<&'c str> = members.iter().map(|(_, u)| u.change.path.as_str()).collect();
        let first = members[0].1.change.path.as_str();
        let ancestors = change::ancestor_ends(first).map(|end| &first[..end]).collect();
        Members { entries, ancestors }
    }

    /// `p` is a member or below one.
    fn covers(&self, p: &str) -> bool {
        self.entries.contains(p) || change::ancestor_ends(p).any(|end| self.entries.contains(&p[..end]))
    }
}

/// Whether every validation error of the scratch lies outside the members (and says where).
unsafe fn errors_are_outside(ctx: *const ffi::ly_ctx, members: &Members<'_>) -> bool {
    let mut e = ffi::ly_err_first(ctx);
    let mut any = false;
    while !e.is_null() {
        if (*e).level == ffi::LY_LOG_LEVEL::LY_LLERR {
            any = true;
            if (*e).err != ffi::LY_ERR::LY_EVALID || (*e).data_path.is_null() {
                return false;
            }
            let path = CStr::from_ptr((*e).data_path).to_string_lossy();
            if members.covers(&path) || members.ancestors.contains(&&*path) {
                return false;
            }
        }
        e = (*e).next;
    }
    any
}

/// Whether a validation diff changed nothing but the members and created defaults outside
/// the regions (places no expression of the members reads).
unsafe fn diff_is_local(diff: *mut ffi::lyd_node, members: &Members<'_>, regions: &[String]) -> bool {
    let in_region = |p: &str| regions.iter().any(|r| is_below(p, r) || is_below(r, p));
    let mut ok = true;
    let mut top = diff;
    while !top.is_null() && ok {
        walk(top, &mut |n| {
            if !ok {
                return false;
            }
            let op = operation(n);
            let is_entry = !(*n).schema.is_null() && (*(*n).schema).nodetype as u32 == ffi::LYS_LIST;
            if op.as_deref() == Some("none") && !is_entry {
                return true;
            }
            let Some(p) = node_path(n) else {
                ok = false;
                return false;
            };
            if members.covers(&p) {
                // Whatever validation did inside a member is what it would do in running.
                return false;
            }
            match op.as_deref() {
                None | Some("none") => true,
                Some("create") if !in_region(&p) => false,
                _ => {
                    ok = false;
                    false
                }
            }
        });
        top = (*top).next;
    }
    ok
}

/// `p` is `root` or a descendant of it (data paths).
fn is_below(p: &str, root: &str) -> bool {
    p == root || (p.len() > root.len() && p.starts_with(root) && p.as_bytes()[root.len()] == b'/')
}

/// Depth-first over a subtree; `f` says whether to go below the node.
unsafe fn walk(node: *mut ffi::lyd_node, f: &mut impl FnMut(*mut ffi::lyd_node) -> bool) {
    if !f(node) {
        return;
    }
    if (*node).schema.is_null() || (*(*node).schema).nodetype as u32 & (ffi::LYS_CONTAINER | ffi::LYS_LIST) == 0 {
        return;
    }
    let mut child = (*(node as *mut ffi::lyd_node_inner)).child;
    while !child.is_null() {
        walk(child, f);
        child = (*child).next;
    }
}

/// The `yang:operation` of a diff node.
unsafe fn operation(n: *mut ffi::lyd_node) -> Option<String> {
    let mut m = (*n).meta;
    while !m.is_null() {
        if CStr::from_ptr((*m).name).to_bytes() == b"operation" && !(*m).value._canonical.is_null() {
            return Some(CStr::from_ptr((*m).value._canonical).to_string_lossy().into_owned());
        }
        m = (*m).next;
    }
    None
}

/// A node's data path, however long.
unsafe fn node_path(n: *const ffi::lyd_node) -> Option<String> {
    owned(ffi::lyd_path(n, ffi::LYD_PATH_TYPE::LYD_PATH_STD, null_mut(), 0))
}

/// A string libyang allocated for the caller, copied and freed.
unsafe fn owned(p: *mut std::os::raw::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    let s = CStr::from_ptr(p).to_string_lossy().into_owned();
    libc::free(p as *mut libc::c_void);
    Some(s)
}

unsafe fn top_of(mut n: *mut ffi::lyd_node) -> *mut ffi::lyd_node {
    while !(*n).parent.is_null() {
        n = (*n).parent as *mut ffi::lyd_node;
    }
    n
}

/// The first of a top-level node's siblings.
unsafe fn first_sibling(mut n: *mut ffi::lyd_node) -> *mut ffi::lyd_node {
    while !(*(*n).prev).next.is_null() {
        n = (*n).prev;
    }
    n
}

/// A deleted entry: no leafref names one of its keys any more, and P's default flag is what
/// validation would set.
fn deleted_ok(tree: &mut DataTree<'static>, u: &Unit<'_>, changes: &[Change]) -> bool {
    for (referrer, key_schema) in &u.plan.backrefs {
        let values: Vec<&Change> = changes
            .iter()
            .filter(|c| c.op == ChangeOp::Delete && *c.schema_path == **key_schema && is_below(&c.path, &u.change.path))
            .collect();
        if values.is_empty() {
            // The deleted key is not among the changes: nothing proven.
            return false;
        }
        for v in values {
            let Some(v) = v.old_value.as_deref() else { return false };
            if v.contains('\'') && v.contains('"') {
                return false;
            }
            if tree.reference().is_none() {
                break;
            }
            let q = if v.contains('\'') { format!("\"{v}\"") } else { format!("'{v}'") };
            // SAFETY: the tree's first node is live for this call; the set is freed.
            if unsafe { count(tree, &format!("{referrer}[. = {q}]")) } != Some(0) {
                return false;
            }
        }
    }
    // The parent entry or container of the deleted entry: an NP container left with only
    // default children becomes default itself (what validation's final pass does).
    if let Some(parent_path) = parent_path(&u.change.path) {
        if let Ok(p) = tree.find_path(parent_path) {
            // SAFETY: a live node of `tree`.
            unsafe { set_default_containers(p.as_raw()) };
        }
    }
    true
}

/// The parent data path of an entry path (`…/scis/sci[csci-id='a']` → `…/scis`).
fn parent_path(path: &str) -> Option<&str> {
    change::ancestor_ends(path).last().map(|end| &path[..end])
}

/// Instances an XPath selects in `tree` (None: it could not be evaluated).
unsafe fn count(tree: &DataTree<'static>, xpath: &str) -> Option<u32> {
    let first = tree.reference()?.as_raw();
    let xp = CString::new(xpath).ok()?;
    let mut set = null_mut();
    let r = ffi::lyd_find_xpath(first, xp.as_ptr(), &mut set);
    let n = (r == ffi::LY_ERR::LY_SUCCESS && !set.is_null()).then(|| (*set).count);
    if !set.is_null() {
        ffi::ly_set_free(set, None);
    }
    n
}

/// libyang's `lyd_cont_set_dflt`: from `node` up, a non-presence container whose children
/// are all default (or that has none) is default.
unsafe fn set_default_containers(mut node: *mut ffi::lyd_node) {
    while !node.is_null() {
        let s = (*node).schema;
        if s.is_null()
            || (*node).flags & ffi::LYD_DEFAULT != 0
            || (*s).nodetype as u32 != ffi::LYS_CONTAINER
            || (*s).flags as u32 & ffi::LYS_PRESENCE != 0
        {
            return;
        }
        let mut child = (*(node as *mut ffi::lyd_node_inner)).child;
        while !child.is_null() {
            if (*child).flags & ffi::LYD_DEFAULT == 0 {
                return;
            }
            child = (*child).next;
        }
        (*node).flags |= ffi::LYD_DEFAULT;
        node = (*node).parent as *mut ffi::lyd_node;
    }
}

// ----- schema analysis ---------------------------------------------------------------

/// The schema node's parent that is a data node (choice and case skipped).
unsafe fn data_parent(n: *const ffi::lysc_node) -> *const ffi::lysc_node {
    let mut p = (*n).parent as *const ffi::lysc_node;
    while !p.is_null() && (*p).nodetype as u32 & (ffi::LYS_CHOICE | ffi::LYS_CASE) != 0 {
        p = (*p).parent;
    }
    p
}

unsafe fn atoms(
    ctx_node: *const ffi::lysc_node,
    module: *const ffi::lys_module,
    expr: *const ffi::lyxp_expr,
    prefixes: *const ffi::lysc_prefix,
) -> Option<Vec<Snode>> {
    if expr.is_null() {
        return None;
    }
    let mut set: *mut ffi::ly_set = null_mut();
    let r = ffi::lys_find_expr_atoms(ctx_node, module, expr, prefixes, ffi::LYS_FIND_XP_SCHEMA, &mut set);
    if r != ffi::LY_ERR::LY_SUCCESS || set.is_null() {
        if !set.is_null() {
            ffi::ly_set_free(set, None);
        }
        return None;
    }
    let objs = (*set).__bindgen_anon_1.snodes;
    let out = (0..(*set).count as usize).map(|i| *objs.add(i) as Snode).collect();
    ffi::ly_set_free(set, None);
    Some(out)
}

/// Every must, when and leafref of the config data of every module, with its atoms.
fn deps(ctx: &'static Context) -> Deps {
    let mut d = Deps { exprs: Vec::new(), instance_ids: false, unknown: false };
    for module in ctx.modules(false) {
        // SAFETY: compiled modules and schema nodes live as long as the context. The walk
        // follows data children only (actions and notifications hang elsewhere).
        unsafe {
            let compiled = (*module.as_raw()).compiled;
            if compiled.is_null() {
                continue;
            }
            let mut stack: Vec<*const ffi::lysc_node> = Vec::new();
            let mut top = (*compiled).data as *const ffi::lysc_node;
            while !top.is_null() {
                stack.push(top);
                top = (*top).next;
            }
            while let Some(raw) = stack.pop() {
                if (*raw).flags as u32 & ffi::LYS_CONFIG_W == 0 {
                    continue;
                }
                let mut c = ffi::lysc_node_child(raw);
                while !c.is_null() {
                    stack.push(c);
                    c = (*c).next;
                }
                node_deps(&mut d, raw);
            }
        }
    }
    d
}

/// The musts, whens and leafref type of one config schema node.
unsafe fn node_deps(d: &mut Deps, raw: *const ffi::lysc_node) {
    let module = (*raw).module as *const ffi::lys_module;
    let musts = ffi::lysc_node_musts(raw);
    for i in 0..array_len(musts) {
        let m = musts.add(i);
        push(d, raw as Snode, Kind::Must, (*m).cond, atoms(raw, module, (*m).cond, (*m).prefixes));
    }
    let whens = ffi::lysc_node_when(raw);
    for i in 0..array_len(whens) {
        let w = *whens.add(i);
        push(d, raw as Snode, Kind::When, (*w).cond, atoms((*w).context, module, (*w).cond, (*w).prefixes));
    }
    if (*raw).nodetype as u32 & (ffi::LYS_LEAF | ffi::LYS_LEAFLIST) != 0 {
        let ty = (*(raw as *const ffi::lysc_node_leaf)).type_;
        type_deps(d, raw, module, ty, false);
    }
}

fn push(d: &mut Deps, owner: Snode, kind: Kind, expr: *const ffi::lyxp_expr, atoms: Option<Vec<Snode>>) {
    match atoms {
        Some(atoms) => {
            // SAFETY: a compiled expression of the context (not null: atoms() checked it).
            let hidden_reach = unsafe { hidden_reach(expr) };
            d.exprs.push(Expr { owner, atoms, kind, hidden_reach })
        }
        None => d.unknown = true,
    }
}

/// Whether an expression's text uses deref() or an axis beyond child / parent / self
/// (`//` is descendant-or-self).
unsafe fn hidden_reach(expr: *const ffi::lyxp_expr) -> bool {
    let text = ffi::lyxp_get_expr(expr);
    if text.is_null() {
        return true;
    }
    let text = CStr::from_ptr(text).to_string_lossy();
    [
        "deref",
        "sibling::",
        "preceding::",
        "following::",
        "ancestor",
        "descendant",
        "//",
        "namespace::",
        "attribute::",
        "@",
    ]
    .iter()
    .any(|t| text.contains(t))
}

unsafe fn type_deps(
    d: &mut Deps,
    node: *const ffi::lysc_node,
    module: *const ffi::lys_module,
    ty: *const ffi::lysc_type,
    in_union: bool,
) {
    if ty.is_null() {
        return;
    }
    match (*ty).basetype {
        ffi::LY_DATA_TYPE::LY_TYPE_LEAFREF => {
            let l = ty as *const ffi::lysc_type_leafref;
            let a = atoms(node, module, (*l).path, (*l).prefixes);
            let kind = if in_union {
                Kind::Opaque
            } else {
                let target = ffi::lysc_node_lref_target(node) as Snode;
                if target == 0 {
                    d.unknown = true;
                }
                Kind::LeafRef { target, require_instance: (*l).require_instance != 0 }
            };
            push(d, node as Snode, kind, (*l).path, a);
        }
        ffi::LY_DATA_TYPE::LY_TYPE_INST if (*(ty as *const ffi::lysc_type_instanceid)).require_instance != 0 => {
            d.instance_ids = true;
        }
        ffi::LY_DATA_TYPE::LY_TYPE_UNION => {
            let types = (*(ty as *const ffi::lysc_type_union)).types;
            for i in 0..array_len(types) {
                type_deps(d, node, module, *types.add(i), true);
            }
        }
        _ => {}
    }
}

/// The plan for the list `s`, when it qualifies (see the module documentation).
fn plan_for(deps: &Deps, s: *mut ffi::lysc_node) -> Option<Plan> {
    if deps.unknown {
        return None;
    }
    // SAFETY: compiled schema nodes live as long as the context.
    unsafe {
        let flags = (*s).flags as u32;
        if (*s).nodetype as u32 != ffi::LYS_LIST || flags & ffi::LYS_CONFIG_W == 0 || flags & ffi::LYS_KEYLESS != 0 {
            return None;
        }
        let list = s as *const ffi::lysc_node_list;
        if !(*list).uniques.is_null() || (*list).min != 0 || (*list).max != u32::MAX {
            return None;
        }
        if array_len(ffi::lysc_node_when(s)) != 0 {
            return None;
        }
        // In no choice (creating an entry could remove another case), under no when (the
        // scratch copy of an ancestor could be removed with the entries in it).
        let mut a = (*s).parent as *const ffi::lysc_node;
        let mut ancestors: HashSet<Snode> = HashSet::new();
        while !a.is_null() {
            if (*a).nodetype as u32 & (ffi::LYS_CHOICE | ffi::LYS_CASE) != 0 || array_len(ffi::lysc_node_when(a)) != 0 {
                return None;
            }
            ancestors.insert(a as Snode);
            a = (*a).parent;
        }
        let p = (*s).parent as Snode;
        if p == 0 {
            return None;
        }
        let ancestor_lists: HashSet<Snode> = ancestors
            .iter()
            .copied()
            .filter(|&a| (*(a as *const ffi::lysc_node)).nodetype as u32 == ffi::LYS_LIST)
            .collect();
        let subtree = subtree_of(s);
        let keys: HashSet<Snode> = {
            let mut k = HashSet::new();
            let mut c = ffi::lysc_node_child(s);
            while !c.is_null() {
                if (*c).flags as u32 & ffi::LYS_KEY != 0 {
                    k.insert(c as Snode);
                }
                c = (*c).next;
            }
            k
        };
        let mut regions: Vec<Snode> = Vec::new();
        let mut backrefs = Vec::new();
        let mut deletes = !deps.instance_ids;
        for e in &deps.exprs {
            let inside = subtree.contains(&e.owner);
            if inside {
                // Through P, or through a list above it (an absolute path that can select
                // other instances of an ancestor entry), an expression could see entries
                // the scratch does not hold.
                if matches!(e.kind, Kind::Opaque)
                    || e.hidden_reach
                    || e.atoms.contains(&p)
                    || e.atoms.iter().any(|a| ancestor_lists.contains(a))
                {
                    return None;
                }
                for &atom in &e.atoms {
                    if subtree.contains(&atom) || ancestors.contains(&atom) {
                        continue;
                    }
                    // The highest data ancestor of the atom that is not an ancestor of S.
                    let mut r = atom as *const ffi::lysc_node;
                    if (*r).nodetype as u32 & (ffi::LYS_CHOICE | ffi::LYS_CASE) != 0 {
                        // A choice or case as an atom: take its data parent's level below.
                        while !r.is_null() && (*r).nodetype as u32 & (ffi::LYS_CHOICE | ffi::LYS_CASE) != 0 {
                            r = (*r).parent;
                        }
                        if r.is_null() || ancestors.contains(&(r as Snode)) {
                            return None;
                        }
                    }
                    loop {
                        let up = data_parent(r);
                        if up.is_null() || ancestors.contains(&(up as Snode)) {
                            break;
                        }
                        r = up;
                    }
                    if !regions.contains(&(r as Snode)) {
                        regions.push(r as Snode);
                    }
                }
                continue;
            }
            if !e.atoms.iter().any(|a| subtree.contains(a)) {
                continue;
            }
            // A dependent outside S.
            match e.kind {
                Kind::LeafRef { target, require_instance } => {
                    if !require_instance {
                        continue;
                    }
                    let reads_only_key =
                        e.atoms.iter().all(|a| !subtree.contains(a) || *a == s as Snode || *a == target);
                    if keys.contains(&target) && reads_only_key {
                        backrefs.push((
                            schema_path(e.owner as *const ffi::lysc_node),
                            schema_path(target as *const ffi::lysc_node),
                        ));
                    } else {
                        deletes = false;
                    }
                }
                _ => return None,
            }
        }
        // A region that is an ancestor of another is copied whole anyway.
        let all = regions.clone();
        regions.retain(|&r| !all.iter().any(|&o| o != r && is_schema_ancestor(o, r)));
        Some(Plan { regions, backrefs, deletes, user_ordered: flags & ffi::LYS_ORDBY_USER != 0 })
    }
}

unsafe fn is_schema_ancestor(a: Snode, mut n: Snode) -> bool {
    while n != 0 {
        n = (*(n as *const ffi::lysc_node)).parent as Snode;
        if n == a {
            return true;
        }
    }
    false
}

/// `s` and every schema node below it.
unsafe fn subtree_of(s: *mut ffi::lysc_node) -> HashSet<Snode> {
    let mut out = HashSet::new();
    let mut stack = vec![s as *const ffi::lysc_node];
    while let Some(n) = stack.pop() {
        out.insert(n as Snode);
        let mut c = ffi::lysc_node_child(n);
        while !c.is_null() {
            stack.push(c);
            c = (*c).next;
        }
    }
    out
}

/// A schema node's path in the data-path form the changes use
/// (`/cats-sma:cats-sma/collection/pull/target/sci`).
pub(super) unsafe fn schema_path(n: *const ffi::lysc_node) -> String {
    owned(ffi::lysc_path(n, ffi::LYSC_PATH_TYPE::LYSC_PATH_DATA, null_mut(), 0)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sci_list_is_validated_on_its_entries_with_the_collection_copied() {
        let lv = LocalValidation::new(crate::yang::context());
        let plan = lv.plan("/cats-sma:cats-sma/scis/sci").expect("the SCI list qualifies");
        assert!(plan.deletes, "deleting an SCI is checked locally");
        assert!(!plan.user_ordered);
        // credential-ref reaches collection/authentication: the collection is the region.
        let names: Vec<String> =
            plan.regions.iter().map(|&r| unsafe { schema_path(r as *const ffi::lysc_node) }).collect();
        assert_eq!(names, ["/cats-sma:cats-sma/collection"]);
        // The pull and probe targets name SCIs by their key.
        let referrers: Vec<&str> = plan.backrefs.iter().map(|(r, _)| r.as_str()).collect();
        assert!(referrers.contains(&"/cats-sma:cats-sma/collection/pull/target/csci-id"), "{referrers:?}");
        assert!(plan.backrefs.iter().all(|(_, k)| k == "/cats-sma:cats-sma/scis/sci/csci-id"));
        // A list with min-elements, unique or a when does not qualify; NACM groups do.
        assert!(lv.plan("/ietf-netconf-acm:nacm/groups/group").is_some());
    }
}
