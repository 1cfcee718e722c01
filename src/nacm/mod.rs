//! NETCONF Access Control (RFC 8341): the ietf-netconf-acm configuration compiled into
//! rules, and the three checks the management plane makes with it: protocol operations
//! (exec), data reads (denied nodes are removed, not refused) and data writes
//! (access-denied). The recovery user and the agent itself bypass NACM (section 3.2).

mod access;

pub use access::ReadAccess;

use crate::yang::PrintText as _;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use yang2::data::{Data, DataNodeRef, DataTree};
use yang2::iter::NodeIterable as _;

use crate::datastore::{
    Change, ChangeOp, ConfigConsumer, Datastore, Datastores, SessionId, StateProvider, Transaction, WriteGuard,
};
use crate::error::{ErrorTag, RpcError};
use crate::mgmt::audit::{self, Category};
use crate::mgmt::events::Event;
use crate::mgmt::filter::Readable;

/// Identities of NETCONF sessions (RFC 6241 session-id).
pub const NETCONF_IDS: std::ops::RangeInclusive<SessionId> = 1..=0x7fff_ffff;
/// Identities of RESTCONF requests and RESTCONF-owned subscriptions: disjoint from the
/// NETCONF ones, so a kill-session can never name one.
pub const RESTCONF_IDS: std::ops::RangeInclusive<SessionId> = 0x8000_0000..=SessionId::MAX;

/// Who is behind each live identity, and where each identity range continues.
#[derive(Default)]
struct Identities {
    users: HashMap<SessionId, String>,
    /// Allocations so far per range (keyed by the range start); never wraps.
    issued: HashMap<SessionId, u64>,
}

const ROOT: &str = "/ietf-netconf-acm:nacm";

/// Operations that are default-deny-all by RFC 8341 section 3.2.6 whatever the loaded
/// ietf-netconf module says; every other one comes from the schema ([`deny_all_rpcs`]).
const DENY_ALL_RPCS: &[(&str, &str)] = &[
    ("ietf-netconf", "kill-session"),
    ("ietf-netconf", "delete-config"),
    ("ietf-subscribed-notifications", "kill-subscription"),
];

/// RPCs marked `nacm:default-deny-all` or `nacm:default-deny-write` in the loaded modules
/// (module, rpc): they are denied unless a rule permits them (RFC 8341 section 3.4.4 step 8;
/// an operation marked deny-write changes what the agent believes, so it is treated alike).
fn deny_all_rpcs() -> &'static [(String, String)] {
    static RPCS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    RPCS.get_or_init(|| {
        crate::yang::context()
            .modules(true)
            .flat_map(|m| {
                let module = m.name().to_owned();
                m.rpcs()
                    .filter(|r| {
                        has_nacm_extension(r, "default-deny-all") || has_nacm_extension(r, "default-deny-write")
                    })
                    .map(move |r| (module.clone(), r.name().to_owned()))
                    .collect::<Vec<_>>()
            })
            .collect()
    })
}

fn rpc_denied_by_default(module: &str, rpc: &str) -> bool {
    DENY_ALL_RPCS.contains(&(module, rpc)) || deny_all_rpcs().iter().any(|(m, r)| m == module && r == rpc)
}
/// Data subtrees marked `nacm:default-deny-all` in the loaded modules, found once in the
/// schema (so a module that marks a secret is protected without a list to keep in step).
fn deny_all_data() -> &'static [String] {
    static PATHS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| data_with_extension("default-deny-all"))
}

/// The data nodes marked `nacm:default-deny-write` (RFC 8341 section 3.5.1.1): without a
/// rule that permits it, nobody but the recovery session writes them, whatever
/// write-default says.
fn deny_write_data() -> &'static [String] {
    static PATHS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| data_with_extension("default-deny-write"))
}

fn data_with_extension(name: &str) -> Vec<String> {
    // Top-level data nodes and their subtrees only: the whole-context traversal also
    // meets extension-defined nodes (yang-data) that the bindings cannot represent.
    crate::yang::context()
        .modules(true)
        .flat_map(|m| m.data().collect::<Vec<_>>())
        .flat_map(|top| top.traverse().collect::<Vec<_>>())
        .filter(|n| has_nacm_extension(n, name))
        .map(|n| n.path(yang2::schema::SchemaPathFormat::DATA))
        .collect()
}

/// The modules that define nodes in the schema subtree at `path` (itself included); None
/// when the path names no schema node (the caller then assumes any module may).
type ModuleNames = Option<Arc<Vec<String>>>;

fn modules_under(path: &str) -> ModuleNames {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<HashMap<String, ModuleNames>>> = std::sync::OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = cache.get(path) {
        return m.clone();
    }
    let found = crate::yang::context().find_path(path).ok().map(|n| {
        let mut names: Vec<String> = n.traverse().map(|d| d.module().name().to_owned()).collect();
        names.sort();
        names.dedup();
        Arc::new(names)
    });
    // Paths come from the agent's own code (a fixed few), never from a client.
    cache.insert(path.to_owned(), found.clone());
    found
}

/// Whether a schema node carries the extension `ietf-netconf-acm:<name>`.
fn has_nacm_extension(n: &yang2::schema::SchemaNode<'_>, name: &str) -> bool {
    // SAFETY: the node belongs to the process-global context, so its compiled extension
    // instances (a libyang sized array: the count is stored just before the first element),
    // their definitions and modules live as long as the program.
    unsafe {
        let exts = (*n.as_raw()).exts;
        if exts.is_null() {
            return false;
        }
        let count = *(exts as *const u64).offset(-1) as usize;
        (0..count).any(|i| {
            let def = (*exts.add(i)).def;
            if def.is_null() || (*def).name.is_null() || (*def).module.is_null() || (*(*def).module).name.is_null() {
                return false;
            }
            std::ffi::CStr::from_ptr((*def).name).to_bytes() == name.as_bytes()
                && std::ffi::CStr::from_ptr((*(*def).module).name).to_bytes() == b"ietf-netconf-acm"
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Create = 1,
    Read = 2,
    Update = 4,
    Delete = 8,
    Exec = 16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Permit,
    Deny,
}

#[derive(Clone, Debug, PartialEq)]
enum Target {
    Any,
    Rpc(String),
    Notification(String),
    /// A data path in libyang's canonical form (module prefixes at module changes only).
    Data(String),
}

#[derive(Clone, Debug)]
struct Rule {
    module: String,
    target: Target,
    ops: u8,
    action: Action,
}

#[derive(Clone, Debug)]
struct RuleList {
    groups: Vec<String>,
    rules: Vec<Rule>,
}

/// The compiled ietf-netconf-acm configuration.
#[derive(Clone, Debug)]
struct Policy {
    enabled: bool,
    read_default: Action,
    write_default: Action,
    exec_default: Action,
    /// user → groups
    groups: HashMap<String, Vec<String>>,
    rule_lists: Vec<RuleList>,
}

impl Default for Policy {
    /// RFC 8341 defaults: enabled, read permit, write deny, exec permit.
    fn default() -> Self {
        Policy {
            enabled: true,
            read_default: Action::Permit,
            write_default: Action::Deny,
            exec_default: Action::Permit,
            groups: HashMap::new(),
            rule_lists: Vec::new(),
        }
    }
}

fn action(v: Option<String>, default: Action) -> Action {
    match v.as_deref() {
        Some("permit") => Action::Permit,
        Some("deny") => Action::Deny,
        _ => default,
    }
}

fn ops_bits(v: &[String]) -> u8 {
    let mut bits = 0;
    for s in v.iter().flat_map(|x| x.split_whitespace()) {
        bits |= match s {
            "*" => 31,
            "create" => Access::Create as u8,
            "read" => Access::Read as u8,
            "update" => Access::Update as u8,
            "delete" => Access::Delete as u8,
            "exec" => Access::Exec as u8,
            _ => 0,
        };
    }
    bits
}

/// Removes redundant module prefixes (a step in the same module as its parent) and
/// whitespace, so user-written paths compare with libyang's data paths.
pub fn normalize_path(p: &str) -> String {
    let mut out = String::new();
    let mut current: Option<&str> = None;
    for (i, step) in split_steps(p).into_iter().enumerate() {
        let (name, preds) = match step.find('[') {
            Some(b) => (&step[..b], &step[b..]),
            None => (step, ""),
        };
        let (module, local) = match name.split_once(':') {
            Some((m, l)) => (Some(m), l),
            None => (None, name),
        };
        out.push('/');
        if module.is_some() && (module != current || i == 0) {
            out.push_str(module.unwrap_or_default());
            out.push(':');
            current = module;
        }
        out.push_str(local);
        // Predicates keep their keys; strip prefixes inside them the same way.
        out.push_str(&preds.replace(&format!("{}:", current.unwrap_or("\u{0}")), ""));
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

fn split_steps(p: &str) -> Vec<&str> {
    let mut steps = Vec::new();
    let (mut depth, mut quote, mut start) = (0, None::<char>, 0usize);
    for (i, c) in p.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => depth -= 1,
            (None, '/') if depth == 0 => {
                if i > start {
                    steps.push(p[start..i].trim());
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < p.len() {
        steps.push(p[start..].trim());
    }
    steps
}

/// One step of a data path or rule path: the node name (module-prefixed where the module
/// changes, as [`normalize_path`] writes it) and its predicates.
#[derive(Debug, PartialEq)]
struct Step<'a> {
    name: &'a str,
    preds: Vec<Pred>,
}

#[derive(Debug, PartialEq)]
enum Pred {
    /// `[key='value']`, or `[.='value']` for a leaf-list entry (key ".").
    Eq(String, String),
    /// A predicate that is not a key test (a position, an expression).
    Other,
}

fn steps_of(p: &str) -> Vec<Step<'_>> {
    split_steps(p)
        .into_iter()
        .map(|step| match step.find('[') {
            None => Step { name: step, preds: Vec::new() },
            Some(b) => Step { name: step[..b].trim(), preds: preds_of(&step[b..]) },
        })
        .collect()
}

/// Parses `[k='v'][k2="v2"]…` (prefixes on key names are dropped).
fn preds_of(s: &str) -> Vec<Pred> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while let Some(r) = rest.strip_prefix('[') {
        // The end of this predicate: the first ']' outside quotes.
        let mut quote = None;
        let mut end = None;
        for (i, c) in r.char_indices() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, ']') => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            out.push(Pred::Other);
            break;
        };
        out.push(pred_of(&r[..end]));
        rest = r[end + 1..].trim_start();
    }
    if !rest.is_empty() {
        out.push(Pred::Other);
    }
    out
}

fn pred_of(inner: &str) -> Pred {
    let Some((k, v)) = inner.split_once('=') else { return Pred::Other };
    let k = k.trim();
    let k = k.rsplit(':').next().unwrap_or(k);
    let v = v.trim();
    let unquoted = v
        .strip_prefix('\'')
        .and_then(|x| x.strip_suffix('\''))
        .or_else(|| v.strip_prefix('"').and_then(|x| x.strip_suffix('"')));
    match unquoted {
        Some(v) if !k.is_empty() && (k == "." || k.chars().all(|c| c.is_alphanumeric() || "-_.".contains(c))) => {
            Pred::Eq(k.to_owned(), v.to_owned())
        }
        _ => Pred::Other,
    }
}

/// Does a rule path cover a data path (the node itself or a descendant)? Predicates of the
/// rule are evaluated against the keys in the data path (RFC 8341 `path`: a rule for
/// `/a/b[k='x']` applies to that entry only). A rule predicate that is not a key test
/// cannot be evaluated from the path: it then counts as matching for a deny rule and as
/// not matching for a permit rule (fail closed).
fn covers(rule: &str, path: &str, deny: bool) -> bool {
    if rule == "/" {
        return true;
    }
    if !rule.contains('[') {
        // No predicates (the common case, and every default-deny subtree): a prefix test on
        // the path, or on its schema path when the rule crosses a list entry.
        if let Some(rest) = path.strip_prefix(rule) {
            if rest.is_empty() || rest.starts_with('/') || rest.starts_with('[') {
                return true;
            }
        }
        let schema = crate::datastore::change::schema_path_of(path);
        return schema.strip_prefix(rule).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    }
    let rs = steps_of(rule);
    let ds = steps_of(path);
    if rs.len() > ds.len() {
        return false;
    }
    for (r, d) in rs.iter().zip(&ds) {
        if r.name != d.name {
            return false;
        }
        for p in &r.preds {
            match p {
                Pred::Other => {
                    if !deny {
                        return false;
                    }
                }
                Pred::Eq(k, v) => {
                    let found = d.preds.iter().any(|dp| matches!(dp, Pred::Eq(dk, dv) if dk == k && dv == v));
                    if !found {
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// The module that defines the node at a data path (RFC 8341 section 3.4.4/3.4.5 match
/// rules on it): the last module prefix of the path, since libyang writes a prefix
/// wherever the module changes, and an augmenting module's nodes carry its prefix.
pub fn module_of_path(path: &str) -> &str {
    split_steps(path)
        .into_iter()
        .rev()
        .find_map(|step| {
            let name = &step[..step.find('[').unwrap_or(step.len())];
            name.split_once(':').map(|(m, _)| m.trim())
        })
        .unwrap_or("")
}

impl Policy {
    fn from_tree(tree: &DataTree<'static>) -> Policy {
        let mut p = Policy::default();
        let get = |path: &str| tree.find_path(path).ok().and_then(|n| n.value_canonical());
        p.enabled = get(&format!("{ROOT}/enable-nacm")).as_deref() != Some("false");
        p.read_default = action(get(&format!("{ROOT}/read-default")), Action::Permit);
        p.write_default = action(get(&format!("{ROOT}/write-default")), Action::Deny);
        p.exec_default = action(get(&format!("{ROOT}/exec-default")), Action::Permit);
        // Children walked from the containers, not `find_xpath`: yang2 0.18 never frees an
        // XPath result set, so 100 000 groups leaked 800 KB per commit (issue 22 soak).
        if let Ok(groups) = tree.find_path(&format!("{ROOT}/groups")) {
            for g in groups.children().filter(|g| g.schema().name() == "group") {
                let mut name = None;
                let mut users = Vec::new();
                for c in g.children() {
                    match c.schema().name() {
                        "name" => name = c.value_canonical(),
                        "user-name" => users.extend(c.value_canonical()),
                        _ => {}
                    }
                }
                let Some(group) = name else { continue };
                for user in users {
                    p.groups.entry(user).or_default().push(group.clone());
                }
            }
        }
        if let Ok(nacm) = tree.find_path(ROOT) {
            for list in nacm.children().filter(|l| l.schema().name() == "rule-list") {
                let mut rl = RuleList { groups: Vec::new(), rules: Vec::new() };
                for c in list.children() {
                    match c.schema().name() {
                        "group" => rl.groups.extend(c.value_canonical()),
                        "rule" => rl.rules.push(rule_of(&c)),
                        _ => {}
                    }
                }
                p.rule_lists.push(rl);
            }
        }
        p
    }

    /// The first matching rule's action (section 3.4.4 steps), or None.
    fn matching(&self, user: &str, access: Access, test: impl Fn(&Rule) -> bool) -> Option<Action> {
        let groups = self.groups.get(user);
        for rl in &self.rule_lists {
            let member = rl.groups.iter().any(|g| g == "*" || groups.is_some_and(|gs| gs.contains(g)));
            if !member {
                continue;
            }
            for r in &rl.rules {
                if r.ops & access as u8 != 0 && test(r) {
                    return Some(r.action);
                }
            }
        }
        None
    }
}

fn rule_of(r: &DataNodeRef<'_, '_>) -> Rule {
    let mut rule = Rule { module: "*".into(), target: Target::Any, ops: 0, action: Action::Deny };
    let mut ops = Vec::new();
    for c in r.children() {
        let v = c.value_canonical().unwrap_or_default();
        match c.schema().name() {
            "module-name" => rule.module = v,
            "rpc-name" => rule.target = if v == "*" { Target::Rpc(String::new()) } else { Target::Rpc(v) },
            "notification-name" => {
                rule.target = if v == "*" { Target::Notification(String::new()) } else { Target::Notification(v) }
            }
            "path" => rule.target = Target::Data(normalize_path(&v)),
            "access-operations" => ops.push(v),
            "action" => rule.action = action(Some(v), Action::Deny),
            _ => {}
        }
    }
    // access-operations defaults to "*".
    rule.ops = if ops.is_empty() { 31 } else { ops_bits(&ops) };
    rule
}

/// NACM for the whole agent.
pub struct Nacm {
    policy: RwLock<Arc<Policy>>,
    recovery_user: Option<String>,
    /// Who is behind each session (set when a session opens).
    users: RwLock<Identities>,
    pub denied_operations: AtomicU64,
    pub denied_data_writes: AtomicU64,
    pub denied_notifications: AtomicU64,
}

impl Nacm {
    pub fn new(recovery_user: Option<String>) -> Arc<Nacm> {
        Arc::new(Nacm {
            policy: RwLock::new(Arc::new(Policy::default())),
            recovery_user,
            users: RwLock::new(Identities::default()),
            denied_operations: AtomicU64::new(0),
            denied_data_writes: AtomicU64::new(0),
            denied_notifications: AtomicU64::new(0),
        })
    }

    /// Loads the policy from a configuration tree (startup, or a commit).
    pub fn load(&self, config: &DataTree<'static>) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(Policy::from_tree(config));
    }

    fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn session_opened(&self, session: SessionId, user: &str) {
        self.users.write().unwrap_or_else(|e| e.into_inner()).users.insert(session, user.to_owned());
    }

    pub fn session_closed(&self, session: SessionId) {
        self.users.write().unwrap_or_else(|e| e.into_inner()).users.remove(&session);
    }

    /// Allocates a fresh identity from `ids` for `user` (a NETCONF session, a RESTCONF
    /// request). Identities are issued in order and never twice while the range lasts; a
    /// range used up is walked again, skipping every identity still live, so two live
    /// sessions never share one. None only when every identity of the range is live.
    pub fn open_identity(&self, ids: &std::ops::RangeInclusive<SessionId>, user: &str) -> Option<SessionId> {
        let (start, end) = (*ids.start(), *ids.end());
        let len = u64::from(end - start) + 1;
        let mut g = self.users.write().unwrap_or_else(|e| e.into_inner());
        let Identities { users, issued } = &mut *g;
        if users.len() as u64 >= len {
            return None;
        }
        let n = issued.entry(start).or_insert(0);
        loop {
            let id = start + (*n % len) as SessionId;
            *n += 1;
            if let std::collections::hash_map::Entry::Vacant(v) = users.entry(id) {
                v.insert(user.to_owned());
                return Some(id);
            }
        }
    }

    /// The user a session (NETCONF or a RESTCONF request) acts as.
    pub fn user_of(&self, session: SessionId) -> Option<String> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).users.get(&session).cloned()
    }

    /// What `user` may read of a datastore: a snapshot (taken under the datastore lock,
    /// which is released before anything else happens) pruned of every node the user may
    /// not read. `path`, an instance path (keys only, as RESTCONF targets are), limits the
    /// snapshot to that subtree. Every filter runs on this, never on the datastore itself
    /// (issue 11 classes 1 and 3).
    pub fn read(
        &self,
        datastores: &Datastores,
        user: &str,
        datastore: Datastore,
        path: Option<&str>,
    ) -> Result<Readable, RpcError> {
        let tree = datastores.read(datastore, path)?;
        Ok(self.readable(user, tree))
    }

    /// Prunes a tree that does not come from a datastore read (a notification's content, a
    /// pushed change) for `user`.
    pub fn readable(&self, user: &str, mut tree: DataTree<'static>) -> Readable {
        let _ = self.filter_read(user, &mut tree);
        Readable::pruned(tree)
    }

    /// Whether NACM does not apply to `user` (enforcement off, or the recovery user).
    pub fn is_unrestricted(&self, user: &str) -> bool {
        self.unrestricted(user, &self.policy())
    }

    /// Whether `user` is the recovery user (RFC 8341 section 3.2), whom NACM never restricts.
    pub fn is_recovery_user(&self, user: &str) -> bool {
        self.recovery_user.as_deref() == Some(user)
    }

    /// Users NACM does not apply to: the recovery user (section 3.2) when enforcement is on.
    fn unrestricted(&self, user: &str, policy: &Policy) -> bool {
        !policy.enabled || self.recovery_user.as_deref() == Some(user)
    }

    /// May `user` read everything under the schema node `path` (defined by `module`): the
    /// node itself, and no read rule of the user's rule-lists denies the node's module or
    /// anything beneath it, whatever the rule's predicates. Stricter than NACM's per-node
    /// decision (a deny shadowed by an earlier permit still counts), as fits a reader that
    /// gets only figures derived from the whole subtree (`/metrics`).
    pub fn may_read_subtree(&self, user: &str, module: &str, path: &str) -> bool {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return true;
        }
        if !self.data_decision(&policy, user, Access::Read, module, path) {
            return false;
        }
        let groups = policy.groups.get(user);
        let mut rules = policy
            .rule_lists
            .iter()
            .filter(|rl| rl.groups.iter().any(|g| g == "*" || groups.is_some_and(|gs| gs.contains(g))))
            .flat_map(|rl| rl.rules.iter())
            .filter(|r| r.ops & Access::Read as u8 != 0 && r.action == Action::Deny);
        !rules.any(|r| match &r.target {
            Target::Data(p) => {
                let p = crate::datastore::change::schema_path_of(p);
                p.strip_prefix(path).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
            // A module's nodes anywhere under the subtree (an augmenting module).
            Target::Any => {
                r.module != "*" && r.module != module && modules_under(path).is_none_or(|m| m.contains(&r.module))
            }
            _ => false,
        })
    }

    /// May `user` invoke `module:rpc`? close-session is always allowed (section 3.4.4).
    pub fn may_exec(&self, user: &str, module: &str, rpc: &str) -> bool {
        let policy = self.policy();
        if self.unrestricted(user, &policy) || (module == "ietf-netconf" && rpc == "close-session") {
            return true;
        }
        let decision = policy.matching(user, Access::Exec, |r| {
            (r.module == "*" || r.module == module)
                && match &r.target {
                    Target::Any => true,
                    Target::Rpc(n) => n.is_empty() || n == rpc,
                    _ => false,
                }
        });
        let allowed = match decision {
            Some(a) => a == Action::Permit,
            None if rpc_denied_by_default(module, rpc) => false,
            None => policy.exec_default == Action::Permit,
        };
        if !allowed {
            self.denied_operations.fetch_add(1, Ordering::Relaxed);
            audit::event(Category::NacmDenial)
                .outcome("denied")
                .user(user)
                .field("access", "exec")
                .field("operation", format!("{module}:{rpc}"))
                .emit_aggregated(format!("exec {user} {module}:{rpc}"));
        }
        allowed
    }

    /// May `user` receive notification `module:name`?
    pub fn may_notify(&self, user: &str, module: &str, name: &str) -> bool {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return true;
        }
        let decision = policy.matching(user, Access::Read, |r| {
            (r.module == "*" || r.module == module)
                && match &r.target {
                    Target::Any => true,
                    Target::Notification(n) => n.is_empty() || n == name,
                    _ => false,
                }
        });
        let allowed = decision.map(|a| a == Action::Permit).unwrap_or(policy.read_default == Action::Permit);
        if !allowed {
            self.denied_notifications.fetch_add(1, Ordering::Relaxed);
            audit::event(Category::NacmDenial)
                .outcome("denied")
                .user(user)
                .field("access", "notification")
                .field("notification", format!("{module}:{name}"))
                .emit_aggregated(format!("notify {user} {module}:{name}"));
        }
        allowed
    }

    fn data_decision(&self, policy: &Policy, user: &str, access: Access, module: &str, path: &str) -> bool {
        let decision = policy.matching(user, access, |r| {
            (r.module == "*" || r.module == module)
                && match &r.target {
                    Target::Any => true,
                    Target::Data(p) => covers(p, path, r.action == Action::Deny),
                    _ => false,
                }
        });
        match decision {
            Some(a) => a == Action::Permit,
            None if deny_all_data().iter().any(|d| covers(d, path, true)) => false,
            None if access != Access::Read && deny_write_data().iter().any(|d| covers(d, path, true)) => false,
            None => {
                let default = if access == Access::Read { policy.read_default } else { policy.write_default };
                default == Action::Permit
            }
        }
    }

    /// Whether NACM does not apply to `user`'s reads at all (the recovery session's user, or
    /// NACM switched off): they see every node, whatever the data holds.
    pub fn reads_everything(&self, user: &str) -> bool {
        self.unrestricted(user, &self.policy())
    }

    /// The state leaves of `/nacm` (RFC 8341 section 3.5.2), with their counters: one list
    /// for the libyang render and the text.
    fn counters(&self) -> [(&'static str, &AtomicU64); 3] {
        [
            ("denied-operations", &self.denied_operations),
            ("denied-data-writes", &self.denied_data_writes),
            ("denied-notifications", &self.denied_notifications),
        ]
    }

    /// Whether reads by `user` may need pruning at all (a cheap test that lets unrestricted
    /// readers see the datastore without a copy).
    pub fn read_is_unrestricted(&self, user: &str, tree: &DataTree<'static>) -> bool {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return true;
        }
        let has_data_rules =
            policy.rule_lists.iter().any(|l| l.rules.iter().any(|r| matches!(r.target, Target::Data(_) | Target::Any)));
        let deny_all_present = deny_all_data()
            .iter()
            .any(|d| tree.find_xpath(d).is_ok_and(|mut set| set.any(|n| n.traverse().any(|x| !x.is_default()))));
        policy.read_default == Action::Permit && !has_data_rules && !deny_all_present
    }

    /// `tree` as `user` sees it when nothing of it is hidden from them, for filters to
    /// select from without a pruned copy.
    pub fn whole<'t>(&self, user: &str, tree: &'t DataTree<'static>) -> Option<crate::mgmt::filter::Whole<'t>> {
        self.read_is_unrestricted(user, tree).then(|| crate::mgmt::filter::Whole::unrestricted(tree))
    }

    /// Removes what `user` may not read (section 3.4.5: reads are filtered, not refused).
    /// Private: readers go through [`Nacm::read`] / [`Nacm::readable`], so filters only
    /// ever see pruned data.
    fn filter_read(&self, user: &str, tree: &mut DataTree<'static>) -> usize {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return 0;
        }
        let mut doomed = Vec::new();
        let predicates = policy
            .rule_lists
            .iter()
            .any(|l| l.rules.iter().any(|r| matches!(&r.target, Target::Data(p) if p.contains('['))));
        let mut by_schema = (!predicates).then(HashMap::new);
        if let Some(first) = tree.reference() {
            for top in first.inclusive_siblings() {
                self.collect_unreadable(&policy, user, &top, &mut by_schema, &mut doomed);
            }
        }
        let n = doomed.len();
        for p in doomed {
            let _ = crate::datastore::tree::remove(tree, &p);
        }
        n
    }

    /// A notification as `user` may receive it (RFC 8341 3.4.6): None when the user may
    /// not receive it at all, else the event with every node the user may not read removed
    /// from its content (the same event when nothing is removed). Filters run on this.
    pub fn event_for(&self, user: &str, ev: &Arc<Event>) -> Option<Arc<Event>> {
        if !self.may_notify(user, ev.module, ev.name) {
            return None;
        }
        let policy = self.policy();
        let has_data_rules =
            policy.rule_lists.iter().any(|l| l.rules.iter().any(|r| matches!(r.target, Target::Data(_) | Target::Any)));
        if self.unrestricted(user, &policy) || (policy.read_default == Action::Permit && !has_data_rules) {
            return Some(ev.clone());
        }
        let text = ev.body_nul();
        let flags = yang2::data::DataOperation::NotificationYang;
        let Ok(mut tree) =
            DataTree::parse_op_string(crate::yang::context(), &text, yang2::data::DataFormat::XML, flags)
        else {
            // Content libyang cannot read cannot be pruned: a reader NACM restricts does not
            // get it (fail closed).
            tracing::debug!(event = %ev.name, "notification not delivered to {user:?}: its content cannot be pruned");
            return None;
        };
        if self.filter_read(user, &mut tree) == 0 {
            return Some(ev.clone());
        }
        tree.reference()?;
        let body = tree
            .print_text(yang2::data::DataFormat::XML, yang2::data::DataPrinterFlags::WITH_SIBLINGS)
            .ok()
            .flatten()?;
        Some(Arc::new(Event {
            seq: ev.seq,
            time: ev.time,
            module: ev.module,
            name: ev.name,
            body: body.into_boxed_str(),
        }))
    }

    /// Collects the paths of the unreadable nodes under `n`. With `by_schema` (no rule path
    /// has a predicate, so a decision depends on the schema node only), decisions are taken
    /// once per schema node on its schema path, and data paths are built only for the
    /// nodes removed.
    fn collect_unreadable(
        &self,
        policy: &Policy,
        user: &str,
        n: &DataNodeRef<'_, '_>,
        by_schema: &mut Option<HashMap<usize, bool>>,
        out: &mut Vec<String>,
    ) {
        let schema = n.schema();
        let readable = match by_schema {
            Some(cache) => *cache.entry(schema.as_raw() as usize).or_insert_with(|| {
                let path = schema.path(yang2::schema::SchemaPathFormat::DATA);
                self.data_decision(policy, user, Access::Read, schema.module().name(), &path)
            }),
            None => self.data_decision(policy, user, Access::Read, schema.module().name(), &n.path()),
        };
        if !readable {
            out.push(n.path());
            return;
        }
        for c in n.children() {
            self.collect_unreadable(policy, user, &c, by_schema, out);
        }
    }
}

impl WriteGuard for Nacm {
    fn check(&self, session: SessionId, _target: Datastore, changes: &[Change]) -> Result<(), RpcError> {
        // An identity NACM does not know (a closed or never-opened session) may do nothing.
        let Some(user) = self.user_of(session) else {
            self.denied_data_writes.fetch_add(1, Ordering::Relaxed);
            audit::event(Category::NacmDenial)
                .outcome("denied")
                .session(session)
                .field("access", "write")
                .field("reason", "unknown session")
                .emit_aggregated(format!("write unknown {session}"));
            return Err(RpcError::application(ErrorTag::AccessDenied, format!("session {session} is not known")));
        };
        let policy = self.policy();
        if self.unrestricted(&user, &policy) {
            return Ok(());
        }
        for c in changes {
            let access = match c.op {
                ChangeOp::Create => Access::Create,
                ChangeOp::Delete => Access::Delete,
                ChangeOp::Modify | ChangeOp::Move => Access::Update,
            };
            let module = module_of_path(&c.path);
            if !self.data_decision(&policy, &user, access, module, &c.path) {
                self.denied_data_writes.fetch_add(1, Ordering::Relaxed);
                let what = format!("{access:?}").to_lowercase();
                audit::event(Category::NacmDenial)
                    .outcome("denied")
                    .user(&user)
                    .session(session)
                    .field("access", what.clone())
                    .field("datastore", format!("{_target:?}").to_lowercase())
                    .field("path", c.path.clone())
                    .emit_aggregated(format!("write {user} {what} {}", c.path));
                return Err(RpcError::application(
                    ErrorTag::AccessDenied,
                    format!("user {user} may not {} {}", format!("{access:?}").to_lowercase(), c.path),
                )
                .with_path(c.path.clone()));
            }
        }
        Ok(())
    }
}

impl ConfigConsumer for Nacm {
    fn name(&self) -> &str {
        "nacm"
    }
    fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
        Ok(())
    }
    fn apply(&self, tx: &Transaction<'_>) {
        if tx.changes_under(ROOT).next().is_some() {
            self.load(tx.config);
        }
    }
}

impl StateProvider for Nacm {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("ietf-netconf-acm", "nacm")])
    }

    fn render(&self, tree: &mut DataTree<'static>, _xpath: Option<&str>) -> Result<(), RpcError> {
        let [first, rest @ ..] = self.counters();
        let value = |v: &AtomicU64| v.load(Ordering::Relaxed).to_string();
        // The container is usually there already (a read covering /nacm copies its
        // configuration): found among the top-level nodes, no path is parsed. Otherwise one
        // path lookup makes it with the first counter.
        let existing = tree.reference().and_then(|top| {
            top.inclusive_siblings().find(|n| {
                let schema = n.schema();
                schema.name() == "nacm" && schema.module().name() == "ietf-netconf-acm"
            })
        });
        let (mut nacm, rest) = match existing {
            Some(nacm) => (nacm, &[first, rest[0], rest[1]][..]),
            None => {
                let path = format!("{ROOT}/{}", first.0);
                let leaf = tree
                    .new_path(&path, Some(&value(first.1)), false)
                    .map_err(|e| RpcError::from_libyang(&e).with_path(&path))?;
                let Some(nacm) = leaf.and_then(|l| l.parent()) else {
                    return Err(RpcError::application(
                        ErrorTag::OperationFailed,
                        "the NACM counters have no container",
                    ));
                };
                (nacm, &rest[..])
            }
        };
        for (leaf, v) in rest {
            nacm.new_term(None, leaf, Some(&value(v)))
                .map_err(|e| RpcError::from_libyang(&e).with_path(format!("{ROOT}/{leaf}")))?;
        }
        Ok(())
    }

    fn children_text(&self, _top: (&str, &str), out: &mut String) -> bool {
        use std::fmt::Write as _;
        for (leaf, v) in self.counters() {
            let _ = write!(out, "<{leaf}>{}</{leaf}>", v.load(Ordering::Relaxed));
        }
        true
    }

    fn render_selected(
        &self,
        tree: &mut DataTree<'static>,
        sel: &crate::datastore::select::Selection,
        hint: Option<&str>,
    ) -> Result<(), RpcError> {
        if !sel.is_all() && !sel.touches_module("ietf-netconf-acm") {
            return Ok(());
        }
        self.render(tree, hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_deny_all_subtrees_come_from_the_schema() {
        let paths = deny_all_data();
        for p in [
            "/ietf-netconf-acm:nacm",
            "/cats-sma:cats-sma/collection/authentication",
            "/cats-sma:cats-sma/cats-sma-cps:c-ps/peer/psk/key",
        ] {
            assert!(paths.iter().any(|x| x == p), "{p} not in {paths:?}");
        }
    }

    #[test]
    fn paths_normalise_and_cover() {
        assert_eq!(normalize_path("/cats-sma:cats-sma/cats-sma:scis"), "/cats-sma:cats-sma/scis");
        assert_eq!(
            normalize_path("/cats-sma:cats-sma/cats-sma-policy:policy/cats-sma-policy:rule"),
            "/cats-sma:cats-sma/cats-sma-policy:policy/rule"
        );
        let c = |r: &str, p: &str| covers(&normalize_path(r), p, false);
        assert!(c("/cats-sma:cats-sma/scis", "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id[.='x']"));
        assert!(c("/cats-sma:cats-sma/scis/sci", "/cats-sma:cats-sma/scis/sci[csci-id='a']"));
        assert!(c("/cats-sma:cats-sma/scis/sci[csci-id='a']", "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id"));
        assert!(!c("/cats-sma:cats-sma/scis/sci[csci-id='a']", "/cats-sma:cats-sma/scis/sci[csci-id='ab']"));
        assert!(!c("/cats-sma:cats-sma/sc", "/cats-sma:cats-sma/scis"));
    }

    #[test]
    fn rule_predicates_are_evaluated() {
        let data = "/cats-sma:cats-sma/scis/sci[csci-id='x']/cs-id";
        for r in [
            "/cats-sma:cats-sma/scis/sci[csci-id=\"x\"]",
            "/cats-sma:cats-sma/cats-sma:scis/cats-sma:sci[cats-sma:csci-id = 'x']",
            "/cats-sma:cats-sma/scis/sci[ csci-id='x' ]/cs-id",
        ] {
            assert!(covers(&normalize_path(r), data, false), "{r}");
        }
        assert!(!covers(&normalize_path("/cats-sma:cats-sma/scis/sci[csci-id='y']"), data, false));
        // A rule predicate that is no key test cannot be evaluated: deny rules match, permit
        // rules do not.
        let odd = normalize_path("/cats-sma:cats-sma/scis/sci[cs-id!='q']");
        assert!(covers(&odd, data, true));
        assert!(!covers(&odd, data, false));
        // Keys in the data path that contain ']' or quotes.
        assert!(covers(
            &normalize_path("/cats-sma:cats-sma/scis/sci[csci-id=\"a]'b\"]"),
            "/cats-sma:cats-sma/scis/sci[csci-id=\"a]'b\"]/cs-id",
            false
        ));
    }

    #[test]
    fn issue21_a_subtree_is_readable_only_when_no_deny_reaches_inside_it() {
        let ctx = crate::yang::context();
        let nacm = Nacm::new(None);
        let policy = |rules: &str| {
            let xml = format!(
                "<nacm xmlns=\"urn:ietf:params:xml:ns:yang:ietf-netconf-acm\"><groups><group><name>ops</name>\
                 <user-name>bob</user-name></group></groups><rule-list><name>r</name><group>ops</group>{rules}\
                 </rule-list></nacm>"
            );
            // libyang reads up to a NUL.
            let t = yang2::data::DataTree::parse_string(
                ctx,
                format!("{xml}\0"),
                yang2::data::DataFormat::XML,
                yang2::data::DataParserFlags::NO_VALIDATION,
                yang2::data::DataValidationFlags::empty(),
            )
            .unwrap();
            nacm.load(&t);
        };
        let deny = |target: &str| {
            format!(
                "<rule><name>x</name>{target}<access-operations>read</access-operations><action>deny</action></rule>"
            )
        };
        let services = ("cats-sma", "/cats-sma:cats-sma/services");
        let ok = |n: &Nacm| n.may_read_subtree("bob", services.0, services.1);
        policy("");
        assert!(ok(&nacm));
        // A leaf inside, with or without predicates: the whole group is hidden.
        policy(&deny("<module-name>cats-sma</module-name><path xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:services/c:service[c:cs-id='AR1']/c:site-gas</path>"));
        assert!(!ok(&nacm));
        // Elsewhere: no effect.
        policy(&deny(
            "<module-name>cats-sma</module-name><path xmlns:c=\"urn:cats-sma:yang:cats-sma\">/c:cats-sma/c:scis</path>",
        ));
        assert!(ok(&nacm));
        // A module that augments the subtree (reported-gas), and one that does not.
        policy(&deny("<module-name>cats-sma-policy</module-name>"));
        assert!(!ok(&nacm));
        policy(&deny("<module-name>ietf-netconf-acm</module-name>"));
        assert!(ok(&nacm));
        // The recovery user is never restricted.
        assert!(Nacm::new(Some("bob".into())).may_read_subtree("bob", services.0, services.1));
    }

    #[test]
    fn the_module_of_a_node_is_the_one_that_defines_it() {
        assert_eq!(module_of_path("/cats-sma:cats-sma/scis/sci[csci-id='a:b']"), "cats-sma");
        assert_eq!(module_of_path("/cats-sma:cats-sma/cats-sma-cps:c-ps/peer[name='p']/psk/key"), "cats-sma-cps");
        assert_eq!(module_of_path("/ietf-netconf-acm:nacm/groups"), "ietf-netconf-acm");
        // The schema agrees (reads use the schema node's module).
        let ctx = crate::yang::context();
        let n = ctx.find_path("/cats-sma:cats-sma/cats-sma-cps:c-ps/cats-sma-cps:peer").expect("schema node");
        assert_eq!(n.module().name(), "cats-sma-cps");
    }

    #[test]
    fn engine_changing_rpcs_are_default_deny_from_the_schema() {
        for rpc in ["resync", "clear-quarantine", "probe-sci"] {
            assert!(rpc_denied_by_default("cats-sma", rpc), "{rpc}");
        }
        assert!(rpc_denied_by_default("ietf-netconf", "kill-session"));
        assert!(!rpc_denied_by_default("ietf-netconf", "get"));
        let nacm = Nacm::new(None);
        assert!(!nacm.may_exec("bob", "cats-sma", "probe-sci"));
        assert!(nacm.may_exec("bob", "ietf-netconf", "get-config"));
    }

    #[test]
    fn identities_are_never_shared_while_live() {
        let nacm = Nacm::new(None);
        let ids = 10..=12;
        let a = nacm.open_identity(&ids, "a").unwrap();
        let b = nacm.open_identity(&ids, "b").unwrap();
        let c = nacm.open_identity(&ids, "c").unwrap();
        assert_eq!((a, b, c), (10, 11, 12));
        assert_eq!(nacm.open_identity(&ids, "d"), None, "every identity is live");
        nacm.session_closed(b);
        // The range is used up: the walk starts again and skips the live ones.
        assert_eq!(nacm.open_identity(&ids, "e"), Some(11));
        assert_eq!(nacm.user_of(a).as_deref(), Some("a"));
        assert_eq!(nacm.user_of(11).as_deref(), Some("e"));
    }

    #[test]
    fn an_unknown_session_may_write_nothing() {
        let nacm = Nacm::new(None);
        let change = Change {
            op: ChangeOp::Create,
            path: "/cats-sma:cats-sma/scis/sci[csci-id='a']".into(),
            schema_path: "/cats-sma:cats-sma/scis/sci".into(),
            kind: crate::datastore::NodeKind::List,
            is_key: false,
            value: None,
            old_value: None,
        };
        let e = nacm.check(4242, Datastore::Running, &[change]).unwrap_err();
        assert_eq!(e.tag, ErrorTag::AccessDenied);
    }
}
