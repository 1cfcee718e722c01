//! The NMDA datastores (RFC 8342): startup, running and candidate as libyang trees,
//! operational as a view rendered on demand, and the one API both front ends (NETCONF,
//! RESTCONF) use: get / edit / copy / delete / lock / unlock / commit / discard / validate.
//!
//! A commit validates, hands typed changes to the registered consumers (prepare → apply, or
//! abort when one vetoes), and only then makes the new configuration the running one.
//! Every failure is an [`RpcError`] with its RFC 6241 Appendix A tag.

pub mod change;
pub mod edit;
mod local;
pub mod memory;
pub mod persist;
pub mod render;
pub mod select;
pub mod tree;
mod validate;

use crate::yang::PrintText as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use yang2::context::Context;
use yang2::data::{
    Data, DataDiffFlags, DataDiffOp, DataFormat, DataParserFlags, DataPrinterFlags, DataTree, DataValidationFlags,
};

pub use change::{Change, ChangeOp, NodeKind};
pub use edit::{EditOp, ErrorOption};

use crate::error::{ErrorTag, RpcError};

/// A NETCONF/RESTCONF session, or 0 for the agent itself.
pub type SessionId = u32;
pub const SYSTEM_SESSION: SessionId = 0;

/// The NMDA datastores (RFC 8342 section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Datastore {
    Startup,
    Running,
    Candidate,
    /// RFC 8342 intended: running after template expansion; we have none, so it is running.
    Intended,
    Operational,
}

impl Datastore {
    /// The ietf-datastores identity name.
    pub fn identity(self) -> &'static str {
        match self {
            Datastore::Startup => "ietf-datastores:startup",
            Datastore::Running => "ietf-datastores:running",
            Datastore::Candidate => "ietf-datastores:candidate",
            Datastore::Intended => "ietf-datastores:intended",
            Datastore::Operational => "ietf-datastores:operational",
        }
    }

    pub fn from_identity(s: &str) -> Option<Datastore> {
        let name = s.rsplit(':').next().unwrap_or(s);
        Some(match name {
            "startup" => Datastore::Startup,
            "running" => Datastore::Running,
            "candidate" => Datastore::Candidate,
            "intended" => Datastore::Intended,
            "operational" => Datastore::Operational,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        self.identity().rsplit(':').next().unwrap_or("")
    }

    fn is_configuration(self) -> bool {
        matches!(self, Datastore::Startup | Datastore::Running | Datastore::Candidate)
    }
}

/// RFC 6241 section 7.2 test-option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TestOption {
    #[default]
    TestThenSet,
    /// Running must stay valid because the engine applies it, so `set` on running is
    /// validated like test-then-set; on candidate nothing is validated before commit anyway.
    Set,
    TestOnly,
}

/// Options of an edit (edit-config / edit-data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EditOptions {
    pub default_operation: EditOp,
    pub test_option: TestOption,
    pub error_option: ErrorOption,
}

impl Default for EditOptions {
    fn default() -> Self {
        EditOptions {
            default_operation: EditOp::Merge,
            test_option: TestOption::default(),
            error_option: ErrorOption::default(),
        }
    }
}

/// Where a copy takes its content from.
pub enum Source<'a> {
    Datastore(Datastore),
    /// Inline configuration (RFC 6241 `<config>`), already parsed.
    Config(&'a DataTree<'static>),
}

/// What a consumer sees of a commit.
pub struct Transaction<'a> {
    /// The changes, in the order they were made.
    pub changes: &'a [Change],
    /// The complete configuration that becomes running if every consumer accepts.
    pub config: &'a DataTree<'static>,
    /// The session that asked for the commit (0 = the agent itself).
    pub session: SessionId,
    /// The changes as runs of neighbours whose schema paths share their first
    /// [`RUN_STEPS`] steps (the run's key), so `changes_under` skips a run the prefix
    /// cannot match without looking at its changes.
    runs: Vec<(std::ops::Range<usize>, &'a str)>,
}

/// How many steps of a schema path key a run of changes.
const RUN_STEPS: usize = 3;

impl<'a> Transaction<'a> {
    pub fn new(changes: &'a [Change], config: &'a DataTree<'static>, session: SessionId) -> Self {
        let mut runs: Vec<(std::ops::Range<usize>, &'a str)> = Vec::new();
        for (i, c) in changes.iter().enumerate() {
            let key = run_key(&c.schema_path);
            match runs.last_mut() {
                Some((r, k)) if *k == key => r.end = i + 1,
                _ => runs.push((i..i + 1, key)),
            }
        }
        Transaction { changes, config, session, runs }
    }

    /// Changes at or below a schema path prefix (a plain string prefix of the schema path),
    /// in order. Costs one comparison per run plus one per change of the runs whose key the
    /// prefix extends: a commit of 100 000 NACM groups is not scanned by every consumer
    /// asking for its own subtrees.
    pub fn changes_under<'s>(&'s self, schema_prefix: &'s str) -> impl Iterator<Item = &'s Change> + 's {
        self.runs
            .iter()
            .filter_map(move |(r, key)| {
                // Every change of a run starts with its key. A prefix no longer than the key
                // matches all of them or none; a longer one only where it extends the key.
                if schema_prefix.len() <= key.len() {
                    key.starts_with(schema_prefix).then_some((r.clone(), false))
                } else {
                    schema_prefix.starts_with(key).then_some((r.clone(), true))
                }
            })
            .flat_map(move |(r, check)| {
                self.changes[r].iter().filter(move |c| !check || c.schema_path.starts_with(schema_prefix))
            })
    }
}

/// The first [`RUN_STEPS`] steps of a schema path (all of it when shorter).
fn run_key(schema_path: &str) -> &str {
    schema_path.match_indices('/').nth(RUN_STEPS).map_or(schema_path, |(i, _)| &schema_path[..i])
}

/// A part of the agent driven by configuration (the metric engine, the adapters).
/// `prepare` may veto a commit with a message; `apply` must not fail; `abort` undoes what
/// `prepare` set up. Consumers are called with the datastore lock held: they must not call
/// back into the datastore.
pub trait ConfigConsumer: Send + Sync {
    fn name(&self) -> &str;
    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String>;
    fn apply(&self, tx: &Transaction<'_>);
    fn abort(&self, _tx: &Transaction<'_>) {}
}

/// Decides whether a session may make these changes (NACM, RFC 8341 section 3.4.5). Called
/// on every edit, copy and delete before anything is kept.
pub trait WriteGuard: Send + Sync {
    fn check(&self, session: SessionId, target: Datastore, changes: &[Change]) -> Result<(), RpcError>;
}

/// Renders operational state (config false data) into the operational view.
pub trait StateProvider: Send + Sync {
    /// Adds this provider's state to `tree`. `xpath`, when given, is the selection the
    /// reader asked for; a provider may use it to render less.
    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError>;

    /// Like `render`, for a read that selects (at most) `sel`: `hint` is the selection
    /// as an XPath for providers that only look at that (None: everything). A provider
    /// may render less than all of its state, never less than what `sel` covers.
    fn render_selected(
        &self,
        tree: &mut DataTree<'static>,
        _sel: &select::Selection,
        hint: Option<&str>,
    ) -> Result<(), RpcError> {
        self.render(tree, hint)
    }

    /// The typed renderer of this provider's state, if it has one (see `render.rs`).
    fn typed(&self) -> Option<&dyn render::TypedState> {
        None
    }

    /// The top-level data nodes, as (module, name), inside which this provider renders all
    /// of its state; `None`: it may render anywhere. A read whose selection reaches none of
    /// them does not ask the provider, and a read of whole top-level nodes knows which
    /// providers have state there. Every provider says (no default), so that a new one
    /// cannot be left out of a read by mistake.
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]>;

    /// Appends this provider's state inside the top-level node `top` (one of its `scope`)
    /// as XML: child elements of `top`, each with its `xmlns` unless it is in `top`'s
    /// module, as seen by a reader who may read all of it. Only for state without default
    /// values (printed the same in every with-defaults mode). `false`: this provider cannot,
    /// and the read renders it through `render_selected`.
    fn children_text(&self, _top: (&str, &str), _out: &mut String) -> bool {
        false
    }
}

/// The spare copy of running is kept in step by replaying a commit's changes only up to
/// this many: replaying costs a path lookup per change (about 1 s for the 300 000 changes of
/// a 100 000-entry edit), more than copying the tree afresh at the next candidate edit.
const REPLAY_MAX: usize = 10_000;

struct CandidateState {
    tree: DataTree<'static>,
    changes: Vec<Change>,
    /// The running version the candidate was taken from: when running changed since, the
    /// old running plus the candidate's changes is not the new running (no spare from it).
    base: u64,
}

/// How a commit was validated: only libyang's full pass may change nodes the commit's
/// changes do not name (when-false nodes removed, another case of a choice dropped), so
/// only after it is the spare not kept in step by mirroring the changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Validated {
    Fast,
    Local,
    Full,
}

struct Inner {
    running: DataTree<'static>,
    /// None while the candidate equals running (reads are served from running).
    candidate: Option<CandidateState>,
    /// A copy of running kept in step by replaying changes, so that the next candidate edit
    /// starts without copying the whole tree.
    spare: Option<DataTree<'static>>,
    startup: DataTree<'static>,
    /// The running configuration before a commit that asked to keep it (confirmed commit).
    rollback: Option<DataTree<'static>>,
    /// Holder and lock time per locked datastore.
    locks: HashMap<Datastore, (SessionId, chrono::DateTime<chrono::Utc>)>,
    /// Bumped on every change of running (ETag / content-id for the front ends).
    running_version: u64,
}

/// The datastores and everything that reads or changes them.
pub struct Datastores {
    ctx: &'static Context,
    inner: Mutex<Inner>,
    consumers: RwLock<Vec<Arc<dyn ConfigConsumer>>>,
    providers: RwLock<Vec<Arc<dyn StateProvider>>>,
    guard: RwLock<Option<Arc<dyn WriteGuard>>>,
    startup_file: Option<PathBuf>,
    fast_path: validate::FastPath,
    local: local::LocalValidation,
    /// Runs of new children edits moved in one step (`edit::Editor::adopt_children`).
    adopted: std::sync::atomic::AtomicU64,
}

fn ly(e: yang2::Error) -> RpcError {
    RpcError::from_libyang(&e)
}

/// Appends the NUL libyang's parser needs (it may read past an unterminated buffer).
fn nul_terminated(text: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(text.len() + 1);
    v.extend_from_slice(text);
    if v.last() != Some(&0) {
        v.push(0);
    }
    v
}

impl Datastores {
    /// Opens the datastores. With a startup file, its content (if the file exists) becomes
    /// startup and running; without one, everything starts empty and startup lives in memory.
    pub fn open(ctx: &'static Context, startup_file: Option<PathBuf>) -> Result<Datastores, RpcError> {
        memory::configure();
        let startup = match &startup_file {
            Some(path) => {
                persist::remove_stale_temporaries(path);
                match std::fs::read(path) {
                    Ok(bytes) => Self::parse_config_in(ctx, &bytes, DataFormat::XML, true).map_err(|mut e| {
                        e.message = format!("startup file {}: {}", path.display(), e.message);
                        e
                    })?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => DataTree::new(ctx),
                    Err(e) => {
                        return Err(RpcError::application(
                            ErrorTag::OperationFailed,
                            format!("reading startup file {}: {e}", path.display()),
                        ))
                    }
                }
            }
            None => DataTree::new(ctx),
        };
        let mut running = startup.duplicate().map_err(ly)?;
        running.validate(DataValidationFlags::NO_STATE).map_err(ly)?;
        Ok(Datastores {
            ctx,
            inner: Mutex::new(Inner {
                running,
                candidate: None,
                spare: None,
                startup,
                rollback: None,
                locks: HashMap::new(),
                running_version: 1,
            }),
            consumers: RwLock::new(Vec::new()),
            providers: RwLock::new(Vec::new()),
            guard: RwLock::new(None),
            startup_file,
            fast_path: validate::FastPath::new(ctx),
            local: local::LocalValidation::new(ctx),
            adopted: std::sync::atomic::AtomicU64::new(0),
        })
    }

    pub fn context(&self) -> &'static Context {
        self.ctx
    }

    /// Whether another thread holds the datastores right now (a commit, a copy, a read in
    /// progress): a caller that must not wait long on a runtime worker goes elsewhere.
    pub fn busy(&self) -> bool {
        matches!(self.inner.try_lock(), Err(std::sync::TryLockError::WouldBlock))
    }

    fn lock_inner(&self) -> MutexGuard<'_, Inner> {
        // A panic in a consumer must not make every later request fail too; the trees are
        // only swapped after all checks, so a poisoned guard still holds consistent data.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a consumer; it sees every later commit, and is told nothing about the
    /// configuration already in running (read it with [`Datastores::read`]).
    pub fn register_consumer(&self, c: Arc<dyn ConfigConsumer>) {
        self.consumers.write().unwrap_or_else(|e| e.into_inner()).push(c);
    }

    /// Installs the write guard (NACM).
    pub fn set_write_guard(&self, g: Arc<dyn WriteGuard>) {
        *self.guard.write().unwrap_or_else(|e| e.into_inner()) = Some(g);
    }

    fn check_guard(&self, session: SessionId, target: Datastore, changes: &[Change]) -> Result<(), RpcError> {
        match self.guard.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(g) if session != SYSTEM_SESSION && !changes.is_empty() => g.check(session, target, changes),
            _ => Ok(()),
        }
    }

    pub fn register_state_provider(&self, p: Arc<dyn StateProvider>) {
        self.providers.write().unwrap_or_else(|e| e.into_inner()).push(p);
    }

    // ----- parsing ---------------------------------------------------------------------

    fn parse_config_in(
        ctx: &'static Context,
        text: &[u8],
        format: DataFormat,
        validate: bool,
    ) -> Result<DataTree<'static>, RpcError> {
        let data = nul_terminated(text);
        let mut parser = DataParserFlags::STRICT | DataParserFlags::NO_STATE;
        if !validate {
            parser |= DataParserFlags::NO_VALIDATION;
        }
        DataTree::parse_string(ctx, &data, format, parser, DataValidationFlags::NO_STATE).map_err(ly)
    }

    /// Parses a complete configuration (copy-config `<config>`, a startup file) and
    /// validates it.
    pub fn parse_config(&self, text: &[u8], format: DataFormat) -> Result<DataTree<'static>, RpcError> {
        Self::parse_config_in(self.ctx, text, format, true)
    }

    /// Parses the content of an edit (edit-config `<config>`, edit-data, a RESTCONF body):
    /// values are type-checked, operation metadata kept, nothing else validated (an edit
    /// is a fragment).
    pub fn parse_edit(&self, text: &[u8], format: DataFormat) -> Result<DataTree<'static>, RpcError> {
        Self::parse_config_in(self.ctx, text, format, false)
    }

    // ----- reading ---------------------------------------------------------------------

    /// Runs `f` on a configuration datastore's tree without copying it.
    pub fn with_tree<R>(&self, ds: Datastore, f: impl FnOnce(&DataTree<'static>) -> R) -> Result<R, RpcError> {
        let inner = self.lock_inner();
        let tree = match ds {
            Datastore::Running | Datastore::Intended => &inner.running,
            Datastore::Candidate => inner.candidate.as_ref().map(|c| &c.tree).unwrap_or(&inner.running),
            Datastore::Startup => &inner.startup,
            Datastore::Operational => {
                return Err(RpcError::application(
                    ErrorTag::OperationNotSupported,
                    "the operational datastore is a view: read it with read()",
                ))
            }
        };
        Ok(f(tree))
    }

    /// A copy of a datastore's content, optionally only the subtree at an instance path
    /// (with its ancestors). The operational datastore is running plus what the state
    /// providers render. The datastore lock is held only to copy (or, for an instance path,
    /// to find and copy the subtree, which costs a lookup per step): filters are evaluated
    /// by the readers on the copy, after NACM pruned it (see `crate::nacm::Nacm::read`), so
    /// no expression a reader writes runs under the lock commits need.
    pub fn read(&self, ds: Datastore, xpath: Option<&str>) -> Result<DataTree<'static>, RpcError> {
        if let Some(p) = xpath {
            if !is_instance_path(p) {
                return Err(RpcError::application(
                    ErrorTag::InvalidValue,
                    format!("\"{p}\" is not an instance path (keys only)"),
                ));
            }
        }
        let full = match ds {
            Datastore::Operational => {
                let mut tree = self.with_tree(Datastore::Running, |t| t.duplicate())?.map_err(ly)?;
                let providers = self.providers.read().unwrap_or_else(|e| e.into_inner()).clone();
                for p in providers {
                    p.render(&mut tree, xpath)?;
                }
                let lib = select::yang_library_cached(self.ctx)?;
                self::tree::merge_moving(&mut tree, lib)?;
                tree
            }
            _ => {
                if xpath.is_some() {
                    return self.with_tree(ds, |t| select(self.ctx, t, xpath))?;
                }
                self.with_tree(ds, |t| t.duplicate())?.map_err(ly)?
            }
        };
        match xpath {
            // `full` is already this reader's own copy: no second duplicate.
            None => Ok(full),
            Some(_) => select(self.ctx, &full, xpath),
        }
    }

    /// The number of running changes so far (for ETags and the like).
    pub fn running_version(&self) -> u64 {
        self.lock_inner().running_version
    }

    // ----- locks (RFC 6241 sections 7.5, 7.6) ------------------------------------------

    pub fn lock(&self, session: SessionId, ds: Datastore) -> Result<(), RpcError> {
        if !ds.is_configuration() {
            return Err(RpcError::protocol(ErrorTag::InvalidValue, format!("{} cannot be locked", ds.name())));
        }
        let mut inner = self.lock_inner();
        if let Some(&(holder, _)) = inner.locks.get(&ds) {
            return Err(RpcError::protocol(
                ErrorTag::LockDenied,
                format!("{} is already locked by session {holder}", ds.name()),
            )
            .with_session_id(holder));
        }
        if ds == Datastore::Candidate && inner.candidate.is_some() {
            // RFC 6241 7.5: no lock on a candidate holding uncommitted changes.
            return Err(RpcError::protocol(
                ErrorTag::LockDenied,
                "the candidate has uncommitted changes; commit or discard them first",
            )
            .with_session_id(SYSTEM_SESSION));
        }
        inner.locks.insert(ds, (session, chrono::Utc::now()));
        Ok(())
    }

    pub fn unlock(&self, session: SessionId, ds: Datastore) -> Result<(), RpcError> {
        let mut inner = self.lock_inner();
        match inner.locks.get(&ds) {
            Some(&(holder, _)) if holder == session => {
                inner.locks.remove(&ds);
                if ds == Datastore::Candidate {
                    // RFC 6241 8.3.5.2: releasing the candidate lock discards its changes.
                    Self::discard_inner(&mut inner);
                }
                Ok(())
            }
            Some(&(holder, _)) => Err(RpcError::protocol(
                ErrorTag::OperationFailed,
                format!("{} is locked by session {holder}, not by this session", ds.name()),
            )
            .with_session_id(holder)),
            None => Err(RpcError::protocol(ErrorTag::OperationFailed, format!("{} is not locked", ds.name()))),
        }
    }

    /// The session holding a datastore's lock.
    pub fn lock_holder(&self, ds: Datastore) -> Option<SessionId> {
        self.lock_inner().locks.get(&ds).map(|(s, _)| *s)
    }

    /// Every lock held: datastore, holder, when it was taken (RFC 6022 locks).
    pub fn locks(&self) -> Vec<(Datastore, SessionId, chrono::DateTime<chrono::Utc>)> {
        self.lock_inner().locks.iter().map(|(&d, &(s, t))| (d, s, t)).collect()
    }

    /// Releases everything a finished session held (locks; candidate changes behind its lock).
    pub fn release_session(&self, session: SessionId) {
        let mut inner = self.lock_inner();
        let held: Vec<Datastore> = inner.locks.iter().filter(|(_, &(s, _))| s == session).map(|(&d, _)| d).collect();
        for ds in held {
            inner.locks.remove(&ds);
            if ds == Datastore::Candidate {
                Self::discard_inner(&mut inner);
            }
        }
    }

    fn check_writable(inner: &Inner, session: SessionId, ds: Datastore) -> Result<(), RpcError> {
        match inner.locks.get(&ds) {
            Some(&(holder, _)) if holder != session => {
                Err(RpcError::protocol(ErrorTag::InUse, format!("{} is locked by session {holder}", ds.name()))
                    .with_session_id(holder))
            }
            _ => Ok(()),
        }
    }

    // ----- edits -----------------------------------------------------------------------

    /// edit-config / edit-data on running, candidate or startup. Returns the changes made
    /// (empty for test-only). On error nothing is changed, except with continue-on-error,
    /// where the parts that succeeded stay (RFC 6241 7.2) if the result is valid.
    pub fn edit(
        &self,
        session: SessionId,
        target: Datastore,
        edit: &DataTree<'static>,
        opts: EditOptions,
    ) -> Result<Vec<Change>, Vec<RpcError>> {
        self.edit_all(session, target, &[edit], opts).map_err(|(_, e)| e)
    }

    /// [`Datastores::edit`] of an edit tree the caller hands over: the subtrees it creates
    /// are moved into the target instead of copied (NETCONF and RESTCONF parse each edit
    /// for one use).
    pub fn edit_owned(
        &self,
        session: SessionId,
        target: Datastore,
        edit: DataTree<'static>,
        opts: EditOptions,
    ) -> Result<Vec<Change>, Vec<RpcError>> {
        let result = self.edit_all_in(session, target, &[&edit], opts, true).map_err(|(_, e)| e);
        Self::drop_edits(vec![edit], result.as_ref().map_or(0, Vec::len));
        result
    }

    /// Frees edit trees after their commit: off the request's path when the commit was
    /// large (a 100 000-entry delete leaves its whole edit tree behind).
    fn drop_edits(edits: Vec<DataTree<'static>>, changes: usize) {
        if changes < memory::TRIM_AFTER_CHANGES {
            return;
        }
        // An empty tree is a null root: `free_later` skips it.
        memory::free_later(edits.into_iter().map(|e| memory::Garbage::Tree(e.into_raw())).collect());
    }

    /// [`Datastores::edit_all`] of edit trees the caller hands over (see
    /// [`Datastores::edit_owned`]).
    pub fn edit_all_owned(
        &self,
        session: SessionId,
        target: Datastore,
        edits: Vec<DataTree<'static>>,
        opts: EditOptions,
    ) -> Result<Vec<Change>, (Option<usize>, Vec<RpcError>)> {
        let refs: Vec<&DataTree<'static>> = edits.iter().collect();
        let result = self.edit_all_in(session, target, &refs, opts, true);
        Self::drop_edits(edits, result.as_ref().map_or(0, Vec::len));
        result
    }

    /// Several edits applied in order as one transaction (RFC 8072 YANG Patch): one
    /// validation, one NACM check and one commit to the consumers for all of them, and
    /// nothing kept unless all succeed. On error, the index of the edit that failed when
    /// the failure belongs to one (an edit error), else None (validation, NACM, consumers).
    pub fn edit_all(
        &self,
        session: SessionId,
        target: Datastore,
        edits: &[&DataTree<'static>],
        opts: EditOptions,
    ) -> Result<Vec<Change>, (Option<usize>, Vec<RpcError>)> {
        self.edit_all_in(session, target, edits, opts, false)
    }

    /// `owned`: the edit trees are dropped by the caller right after, unread.
    fn edit_all_in(
        &self,
        session: SessionId,
        target: Datastore,
        edits: &[&DataTree<'static>],
        opts: EditOptions,
        owned: bool,
    ) -> Result<Vec<Change>, (Option<usize>, Vec<RpcError>)> {
        if !target.is_configuration() {
            return Err((
                None,
                vec![RpcError::protocol(
                    ErrorTag::InvalidValue,
                    format!("{} is not a configuration datastore that can be edited", target.name()),
                )],
            ));
        }
        let mut guard = self.lock_inner();
        let result = self.edit_in(&mut guard, session, target, edits, opts, owned);
        if target == Datastore::Candidate {
            Self::release_clean_candidate(&mut guard, true);
        }
        result
    }

    /// An unmodified candidate (an edit that failed or changed nothing, a copy of running
    /// into it) is running: it goes back to the spare slot, so edits of running and
    /// commits keep it in step instead of a stale copy being committed over them later, and
    /// a lock of the candidate is not refused for changes it does not hold.
    /// `to_spare`: the tree is running's copy as the editor left it (the spare, or a copy,
    /// after a failed or empty edit); a tree built otherwise (copy-config, delete-config)
    /// may differ from running in its defaults and is dropped instead.
    fn release_clean_candidate(inner: &mut Inner, to_spare: bool) {
        if inner.candidate.as_ref().is_some_and(|c| c.changes.is_empty()) {
            let clean = inner.candidate.take().expect("just checked");
            if to_spare && inner.spare.is_none() {
                inner.spare = Some(clean.tree);
            }
        }
    }

    fn edit_in(
        &self,
        inner: &mut Inner,
        session: SessionId,
        target: Datastore,
        edits: &[&DataTree<'static>],
        opts: EditOptions,
        owned: bool,
    ) -> Result<Vec<Change>, (Option<usize>, Vec<RpcError>)> {
        let whole = |e: Vec<RpcError>| (None, e);
        // Test-only on the candidate applies the edits a second time (to a scratch copy).
        let consume = owned && opts.test_option != TestOption::TestOnly;
        Self::check_writable(inner, session, target).map_err(|e| whole(vec![e]))?;
        if target == Datastore::Candidate {
            self.ensure_candidate(inner).map_err(|e| whole(vec![e]))?;
        }
        let tree = match target {
            Datastore::Candidate => &mut inner.candidate.as_mut().expect("candidate just ensured").tree,
            Datastore::Running => &mut inner.running,
            _ => &mut inner.startup,
        };
        let mut ed = edit::Editor::new(tree);
        let mut failed_edit = None;
        for (i, edit) in edits.iter().enumerate() {
            if consume {
                ed.apply_consuming(edit, opts.default_operation, opts.error_option);
            } else {
                ed.apply(edit, opts.default_operation, opts.error_option);
            }
            if !ed.errors.is_empty() && failed_edit.is_none() {
                failed_edit = Some(i);
                if opts.error_option != ErrorOption::ContinueOnError {
                    break;
                }
            }
        }
        self.adopted.fetch_add(ed.adopted, std::sync::atomic::Ordering::Relaxed);
        let errors = std::mem::take(&mut ed.errors);
        if !errors.is_empty() && opts.error_option != ErrorOption::ContinueOnError {
            ed.rollback();
            return Err((failed_edit, errors));
        }
        if let Err(e) = self.check_guard(session, target, &ed.changes) {
            ed.rollback();
            return Err(whole(vec![e]));
        }
        let changes = std::mem::take(&mut ed.changes);
        let test_only = opts.test_option == TestOption::TestOnly;
        let outcome =
            |changes: Vec<Change>| if errors.is_empty() { Ok(changes) } else { Err((failed_edit, errors.clone())) };
        if target == Datastore::Candidate {
            // The candidate is validated at commit; test-only validates a scratch copy.
            if test_only {
                ed.rollback();
                drop(ed);
                let cand = inner.candidate.as_mut().expect("candidate just ensured");
                return self.test_only(&mut cand.tree, edits, opts).map(|_| Vec::new()).map_err(whole);
            }
            drop(ed);
            inner.candidate.as_mut().expect("candidate just ensured").changes.extend(changes.iter().cloned());
            return outcome(changes);
        }
        let (mut validated, mut vdiff) = (Validated::Fast, validate::ValidationDiff::none());
        if !changes.is_empty() {
            ed.add_defaults();
            if !self.fast_path.covers(&changes) {
                // libyang's validation may free nodes the undo log points at.
                ed.pin();
            }
            match self.validate_changed(ed.target, &changes) {
                Ok((v, d)) => (validated, vdiff) = (v, d),
                Err(e) => {
                    ed.rollback();
                    return Err(whole(vec![e]));
                }
            }
        }
        if test_only {
            vdiff.revert(ed.target);
            ed.rollback();
            return outcome(Vec::new());
        }
        let result = match target {
            Datastore::Running => self.run_consumers(&changes, ed.target, session),
            _ if !changes.is_empty() => self
                .persist_startup(ed.target)
                .map(|()| crate::mgmt::audit::config_change(session, target.name(), &changes)),
            _ => Ok(()),
        };
        if let Err(e) = result {
            vdiff.revert(ed.target);
            ed.rollback();
            return Err(whole(vec![e]));
        }
        drop(ed);
        if target == Datastore::Running && !changes.is_empty() {
            self.after_running_changed(inner, &changes, validated);
        }
        memory::after_commit(changes.len());
        outcome(changes)
    }

    /// test-only on the candidate: apply to a scratch copy and validate it.
    fn test_only(
        &self,
        tree: &mut DataTree<'static>,
        edits: &[&DataTree<'static>],
        opts: EditOptions,
    ) -> Result<(), Vec<RpcError>> {
        let mut scratch = tree.duplicate().map_err(|e| vec![ly(e)])?;
        let mut ed = edit::Editor::new(&mut scratch);
        for edit in edits {
            ed.apply(edit, opts.default_operation, opts.error_option);
        }
        if !ed.errors.is_empty() {
            return Err(std::mem::take(&mut ed.errors));
        }
        drop(ed);
        scratch.validate(DataValidationFlags::NO_STATE).map_err(|e| vec![ly(e)])
    }

    /// Makes sure a candidate tree exists (taking the spare copy of running when there is one).
    fn ensure_candidate(&self, inner: &mut Inner) -> Result<(), RpcError> {
        if inner.candidate.is_none() {
            let tree = match inner.spare.take() {
                Some(t) => t,
                None => inner.running.duplicate().map_err(ly)?,
            };
            inner.candidate = Some(CandidateState { tree, changes: Vec::new(), base: inner.running_version });
        }
        Ok(())
    }

    /// Validates a tree after `changes`: skips libyang's full pass when the fast path proves
    /// it cannot fail (`validate.rs`) or the changed entries were validated on their own
    /// (`local.rs`).
    /// On failure nothing of the validation is left in the tree; on success, what full
    /// validation changed by itself comes back for a later refusal to undo.
    fn validate_changed(
        &self,
        tree: &mut DataTree<'static>,
        changes: &[Change],
    ) -> Result<(Validated, validate::ValidationDiff), RpcError> {
        if self.fast_path.covers(changes) {
            return Ok((Validated::Fast, validate::ValidationDiff::none()));
        }
        if self.local.validate(tree, changes, &self.fast_path) {
            return Ok((Validated::Local, validate::ValidationDiff::none()));
        }
        validate::full(tree).map_err(ly).map(|d| (Validated::Full, d))
    }

    /// Turns validation that follows the change (`local.rs`) off or on; off, every commit
    /// that is not a plain leaf change takes libyang's full validation. For tests that
    /// compare the two.
    #[doc(hidden)]
    pub fn set_local_validation(&self, on: bool) {
        self.local.set_enabled(on);
    }

    /// How many commits were validated on their changed entries only.
    #[doc(hidden)]
    pub fn local_validations(&self) -> u64 {
        self.local.used()
    }

    /// How many runs of new children edits moved in one step (tests check the path is
    /// taken).
    #[doc(hidden)]
    pub fn adopted_runs(&self) -> u64 {
        self.adopted.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// prepare on every consumer, then apply on all, or abort on those prepared.
    fn run_consumers(
        &self,
        changes: &[Change],
        config: &DataTree<'static>,
        session: SessionId,
    ) -> Result<(), RpcError> {
        let consumers = self.consumers.read().unwrap_or_else(|e| e.into_inner()).clone();
        if changes.is_empty() {
            return Ok(());
        }
        let tx = Transaction::new(changes, config, session);
        for (i, c) in consumers.iter().enumerate() {
            if let Err(msg) = c.prepare(&tx) {
                for prepared in &consumers[..i] {
                    prepared.abort(&tx);
                }
                return Err(RpcError::application(ErrorTag::OperationFailed, format!("{}: {msg}", c.name())));
            }
        }
        for c in &consumers {
            c.apply(&tx);
        }
        crate::mgmt::audit::config_change(session, Datastore::Running.name(), changes);
        Ok(())
    }

    /// Bookkeeping after running changed in place: keep the clean candidate / spare copy in
    /// step and bump the version.
    fn after_running_changed(&self, inner: &mut Inner, changes: &[Change], validated: Validated) {
        inner.running_version += 1;
        if changes.len() > REPLAY_MAX || validated == Validated::Full {
            inner.spare = None;
        } else if let Some(spare) = inner.spare.as_mut() {
            if !change::replay(spare, &inner.running, changes) {
                inner.spare = None;
            }
        }
    }

    // ----- commit / discard (RFC 6241 8.3, 8.4) ----------------------------------------

    /// Commits the candidate into running. With `keep_rollback`, the previous running stays
    /// available to [`Datastores::rollback`] (confirmed commit) until [`Datastores::confirm`].
    pub fn commit(&self, session: SessionId, keep_rollback: bool) -> Result<Vec<Change>, RpcError> {
        let mut guard = self.lock_inner();
        let inner = &mut *guard;
        Self::check_writable(inner, session, Datastore::Running)?;
        let Some(mut cand) = inner.candidate.take() else {
            // Nothing to commit; a confirmed commit still keeps its rollback point.
            if keep_rollback && inner.rollback.is_none() {
                inner.rollback = Some(inner.running.duplicate().map_err(ly)?);
            }
            return Ok(Vec::new());
        };
        let (validated, vdiff) = match self.validate_changed(&mut cand.tree, &cand.changes) {
            Ok(v) => v,
            Err(e) => {
                inner.candidate = Some(cand);
                return Err(e);
            }
        };
        if let Err(e) = self.run_consumers(&cand.changes, &cand.tree, session) {
            vdiff.revert(&mut cand.tree);
            inner.candidate = Some(cand);
            return Err(e);
        }
        let old = std::mem::replace(&mut inner.running, cand.tree);
        let in_step = cand.base == inner.running_version && validated != Validated::Full;
        inner.running_version += 1;
        if keep_rollback {
            if inner.rollback.is_none() {
                inner.rollback = Some(old);
            }
            inner.spare = None;
        } else {
            let mut old = old;
            inner.spare = if in_step
                && cand.changes.len() <= REPLAY_MAX
                && change::replay(&mut old, &inner.running, &cand.changes)
            {
                Some(old)
            } else {
                None
            };
        }
        memory::after_commit(cand.changes.len());
        Ok(cand.changes)
    }

    /// Confirms a confirmed commit: the rollback point is dropped.
    pub fn confirm(&self) {
        self.lock_inner().rollback = None;
    }

    /// Whether a confirmed commit is pending.
    pub fn has_rollback(&self) -> bool {
        self.lock_inner().rollback.is_some()
    }

    /// Restores running to the configuration before the pending confirmed commit (timeout,
    /// cancel-commit, or the committing session ended). The consumers see it as a commit.
    pub fn rollback(&self) -> Result<Vec<Change>, RpcError> {
        let mut guard = self.lock_inner();
        let inner = &mut *guard;
        let Some(prev) = inner.rollback.take() else {
            return Err(RpcError::protocol(ErrorTag::OperationFailed, "no confirmed commit is pending"));
        };
        let changes = diff_changes(&inner.running, &prev)?;
        if let Err(e) = self.run_consumers(&changes, &prev, SYSTEM_SESSION) {
            inner.rollback = Some(prev);
            return Err(RpcError { tag: ErrorTag::RollbackFailed, ..e });
        }
        inner.running = prev;
        inner.running_version += 1;
        inner.candidate = None;
        inner.spare = None;
        Ok(changes)
    }

    /// discard-changes: the candidate becomes running again.
    pub fn discard(&self, session: SessionId) -> Result<(), RpcError> {
        let mut inner = self.lock_inner();
        Self::check_writable(&inner, session, Datastore::Candidate)?;
        Self::discard_inner(&mut inner);
        Ok(())
    }

    fn discard_inner(inner: &mut Inner) {
        inner.candidate = None;
    }

    /// Whether the candidate holds uncommitted changes.
    pub fn candidate_modified(&self) -> bool {
        self.lock_inner().candidate.is_some()
    }

    // ----- copy / delete / validate (RFC 6241 7.3, 7.4, 8.6) ---------------------------

    pub fn copy(&self, session: SessionId, source: Source<'_>, target: Datastore) -> Result<Vec<Change>, RpcError> {
        if !target.is_configuration() {
            return Err(RpcError::protocol(
                ErrorTag::InvalidValue,
                format!("{} cannot be a copy target", target.name()),
            ));
        }
        if let Source::Datastore(s) = source {
            if s == target {
                return Err(RpcError::protocol(ErrorTag::InvalidValue, "source and target are the same datastore"));
            }
            if s == Datastore::Operational {
                return Err(RpcError::protocol(ErrorTag::InvalidValue, "operational cannot be a copy source"));
            }
        }
        let mut guard = self.lock_inner();
        let inner = &mut *guard;
        Self::check_writable(inner, session, target)?;
        let mut new = match source {
            Source::Config(t) => t.duplicate().map_err(ly)?,
            Source::Datastore(Datastore::Startup) => inner.startup.duplicate().map_err(ly)?,
            Source::Datastore(Datastore::Candidate) => {
                inner.candidate.as_ref().map(|c| &c.tree).unwrap_or(&inner.running).duplicate().map_err(ly)?
            }
            Source::Datastore(_) => inner.running.duplicate().map_err(ly)?,
        };
        // Running and startup are valid already; anything else is validated first.
        if !matches!(source, Source::Datastore(Datastore::Running | Datastore::Intended | Datastore::Startup)) {
            new.validate(DataValidationFlags::NO_STATE).map_err(ly)?;
        }
        match target {
            Datastore::Startup => {
                // The diff first: nothing can fail between writing the file and keeping it.
                let changes = diff_changes(&inner.startup, &new)?;
                self.check_guard(session, target, &changes)?;
                self.persist_startup(&new)?;
                inner.startup = new;
                crate::mgmt::audit::config_change(session, target.name(), &changes);
                Ok(changes)
            }
            Datastore::Candidate => {
                let base = inner.candidate.as_ref().map(|c| &c.tree).unwrap_or(&inner.running);
                let changes = diff_changes(base, &new)?;
                self.check_guard(session, target, &changes)?;
                let (mut all, base) =
                    inner.candidate.take().map_or((Vec::new(), inner.running_version), |c| (c.changes, c.base));
                all.extend(changes.iter().cloned());
                inner.candidate = Some(CandidateState { tree: new, changes: all, base });
                Self::release_clean_candidate(inner, false);
                Ok(changes)
            }
            _ => {
                let changes = diff_changes(&inner.running, &new)?;
                self.check_guard(session, target, &changes)?;
                self.run_consumers(&changes, &new, session)?;
                inner.running = new;
                inner.running_version += 1;
                inner.spare = None;
                memory::after_commit(changes.len());
                Ok(changes)
            }
        }
    }

    /// delete-config: only startup can be deleted (RFC 6241 7.4: never running).
    pub fn delete(&self, session: SessionId, target: Datastore) -> Result<(), RpcError> {
        let mut inner = self.lock_inner();
        match target {
            Datastore::Startup => {
                Self::check_writable(&inner, session, target)?;
                let empty = DataTree::new(self.ctx);
                let changes = diff_changes(&inner.startup, &empty)?;
                self.check_guard(session, target, &changes)?;
                self.persist_startup(&empty)?;
                inner.startup = empty;
                crate::mgmt::audit::config_change(session, target.name(), &changes);
                Ok(())
            }
            Datastore::Candidate => {
                Self::check_writable(&inner, session, target)?;
                let changes = diff_changes(&inner.running, &DataTree::new(self.ctx))?;
                self.check_guard(session, target, &changes)?;
                let base = inner.running_version;
                inner.candidate = Some(CandidateState { tree: DataTree::new(self.ctx), changes, base });
                Self::release_clean_candidate(&mut inner, false);
                Ok(())
            }
            _ => Err(RpcError::protocol(
                ErrorTag::OperationFailed,
                format!("the {} datastore cannot be deleted", target.name()),
            )),
        }
    }

    /// validate (RFC 6241 8.6): full validation of a datastore or inline configuration.
    pub fn validate(&self, source: Source<'_>) -> Result<(), RpcError> {
        let mut copy = match source {
            Source::Config(t) => t.duplicate().map_err(ly)?,
            Source::Datastore(ds) if ds.is_configuration() || ds == Datastore::Intended => {
                self.with_tree(ds, |t| t.duplicate())?.map_err(ly)?
            }
            Source::Datastore(ds) => {
                return Err(RpcError::protocol(ErrorTag::InvalidValue, format!("{} cannot be validated", ds.name())))
            }
        };
        copy.validate(DataValidationFlags::NO_STATE).map_err(ly)
    }

    // ----- persistence -----------------------------------------------------------------

    fn persist_startup(&self, tree: &DataTree<'static>) -> Result<(), RpcError> {
        let Some(path) = &self.startup_file else {
            return Ok(());
        };
        let text = print_xml(tree)?;
        persist::write_atomic(path, text.as_bytes())
            .map_err(|e| RpcError::application(ErrorTag::OperationFailed, format!("writing {}: {e}", path.display())))
    }
}

/// The configuration as XML (explicit values only), as stored in the startup file.
pub fn print_xml(tree: &DataTree<'static>) -> Result<String, RpcError> {
    if tree.reference().is_none() {
        return Ok(String::new());
    }
    Ok(tree
        .print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::WD_EXPLICIT)
        .map_err(ly)?
        .unwrap_or_default())
}

/// Whether `p` is an instance path: `/step/step…`, each step a (prefixed) name with only
/// key tests `[name='v']` / `[.='v']` (or a position), so evaluating it costs a lookup per
/// step whatever the data. The agent builds these itself (RESTCONF targets).
pub fn is_instance_path(p: &str) -> bool {
    let b = p.as_bytes();
    if b.first() != Some(&b'/') || p.contains('\0') {
        return false;
    }
    let name = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':');
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'/' {
            return false;
        }
        i += 1;
        let start = i;
        while i < b.len() && name(b[i]) {
            i += 1;
        }
        if i == start {
            return false;
        }
        while i < b.len() && b[i] == b'[' {
            i += 1;
            let k = i;
            while i < b.len() && name(b[i]) {
                i += 1;
            }
            if i == k {
                return false;
            }
            if b.get(i) == Some(&b']') && b[k..i].iter().all(u8::is_ascii_digit) {
                i += 1;
                continue;
            }
            if b.get(i) != Some(&b'=') {
                return false;
            }
            i += 1;
            let Some(&q) = b.get(i).filter(|q| **q == b'\'' || **q == b'"') else { return false };
            let Some(len) = b[i + 1..].iter().position(|c| *c == q) else { return false };
            i += 1 + len + 1;
            if b.get(i) != Some(&b']') {
                return false;
            }
            i += 1;
        }
    }
    true
}

/// The nodes an XPath selects, with ancestors and subtrees, as a new tree.
fn select(ctx: &'static Context, tree: &DataTree<'static>, xpath: Option<&str>) -> Result<DataTree<'static>, RpcError> {
    let Some(xpath) = xpath else {
        return tree.duplicate().map_err(ly);
    };
    let mut out = DataTree::new(ctx);
    if tree.reference().is_none() {
        return Ok(out);
    }
    let set = tree.find_xpath(xpath).map_err(|e| {
        let mut err = ly(e);
        err.tag = ErrorTag::InvalidValue;
        err
    })?;
    for node in set {
        let dup = node.duplicate(true).map_err(ly)?;
        out.merge(&dup).map_err(ly)?;
    }
    Ok(out)
}

/// Typed changes between two whole trees (copy-config, rollback): libyang's diff, flattened.
fn diff_changes(old: &DataTree<'static>, new: &DataTree<'static>) -> Result<Vec<Change>, RpcError> {
    let diff = old.diff(new, DataDiffFlags::empty()).map_err(ly)?;
    let mut out = Vec::new();
    let mut paths = change::SchemaPaths::default();
    for (op, node) in diff.iter() {
        let mut c = Change::of_node_in(
            match op {
                DataDiffOp::Create => ChangeOp::Create,
                DataDiffOp::Delete => ChangeOp::Delete,
                DataDiffOp::Replace => ChangeOp::Modify,
            },
            &node,
            &mut paths,
        );
        if op == DataDiffOp::Replace {
            c.old_value = node.meta().find(|m| m.name() == "orig-value").map(|m| m.value().to_owned());
        }
        // Children of created/deleted subtrees inherit the operation in libyang's diff.
        let inherited = if op == DataDiffOp::Replace { None } else { Some(c.op) };
        out.push(c);
        if let Some(op) = inherited {
            for d in node.traverse().skip(1) {
                if d.meta().any(|m| m.name() == "operation") {
                    continue;
                }
                out.push(Change::of_node_in(op, &d, &mut paths));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod transaction_tests {
    use super::*;

    #[test]
    fn changes_under_equals_the_plain_prefix_filter() {
        let paths = [
            "/cats-sma:cats-sma",
            "/cats-sma:cats-sma/scis",
            "/cats-sma:cats-sma/scis/sci[csci-id='a']",
            "/cats-sma:cats-sma/scis/sci[csci-id='a']/csci-id",
            "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id[.='x']",
            "/ietf-netconf-acm:nacm/groups/group[name='g']",
            "/ietf-netconf-acm:nacm/groups/group[name='g']/name",
            "/cats-sma:cats-sma/scis/discovery/enabled",
            "/cats-sma:cats-sma/collection/http/listen",
            "/cats-sma:cats-sma/scis/sci[csci-id='b']",
        ];
        let changes: Vec<Change> = paths
            .iter()
            .map(|p| Change {
                op: ChangeOp::Create,
                path: (*p).into(),
                schema_path: change::schema_path_of(p).into(),
                kind: NodeKind::Other,
                is_key: false,
                value: None,
                old_value: None,
            })
            .collect();
        let tree = DataTree::new(crate::yang::context());
        let tx = Transaction::new(&changes, &tree, 0);
        for prefix in [
            "",
            "/",
            "/cats-sma:cats-sma",
            "/cats-sma:cats-sma/",
            "/cats-sma:cats-sma/sc",
            "/cats-sma:cats-sma/scis",
            "/cats-sma:cats-sma/scis/sci",
            "/cats-sma:cats-sma/scis/sci/cs-id",
            "/cats-sma:cats-sma/scis/discovery",
            "/cats-sma:cats-sma/collection",
            "/ietf-netconf-acm:nacm",
            "/ietf-netconf-acm:nacm/groups/group/name",
            "/nothing",
        ] {
            let got: Vec<&str> = tx.changes_under(prefix).map(|c| c.path.as_str()).collect();
            let want: Vec<&str> =
                changes.iter().filter(|c| c.schema_path.starts_with(prefix)).map(|c| c.path.as_str()).collect();
            assert_eq!(got, want, "{prefix}");
        }
    }
}
