//! NETCONF Access Control (RFC 8341): the ietf-netconf-acm configuration compiled into
//! rules, and the three checks the management plane makes with it: protocol operations
//! (exec), data reads (denied nodes are removed, not refused) and data writes
//! (access-denied). The recovery user and the agent itself bypass NACM (section 3.2).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use yang2::data::{Data, DataNodeRef, DataTree};

use crate::datastore::{
    Change, ChangeOp, ConfigConsumer, Datastore, SessionId, StateProvider, Transaction, WriteGuard,
};
use crate::error::{ErrorTag, RpcError};

const ROOT: &str = "/ietf-netconf-acm:nacm";

/// Operations that are default-deny-all (RFC 8341 section 3.2.6 and the modules'
/// `nacm:default-deny-all` statements): they need an explicit permit rule.
const DENY_ALL_RPCS: &[(&str, &str)] = &[
    ("ietf-netconf", "kill-session"),
    ("ietf-netconf", "delete-config"),
    ("ietf-subscribed-notifications", "kill-subscription"),
];
/// Data subtrees marked `nacm:default-deny-all` in the loaded modules, found once in the
/// schema (so a module that marks a secret is protected without a list to keep in step).
fn deny_all_data() -> &'static [String] {
    static PATHS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PATHS.get_or_init(|| {
        // Top-level data nodes and their subtrees only: the whole-context traversal also
        // meets extension-defined nodes (yang-data) that the bindings cannot represent.
        crate::yang::context()
            .modules(true)
            .flat_map(|m| m.data().collect::<Vec<_>>())
            .flat_map(|top| top.traverse().collect::<Vec<_>>())
            .filter(|n| has_nacm_extension(n, "default-deny-all"))
            .map(|n| n.path(yang2::schema::SchemaPathFormat::DATA))
            .collect()
    })
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

/// Does a rule path cover a data path (the node itself or a descendant)?
fn covers(rule: &str, path: &str) -> bool {
    if rule == "/" {
        return true;
    }
    if let Some(rest) = path.strip_prefix(rule) {
        return rest.is_empty() || rest.starts_with('/') || rest.starts_with('[');
    }
    // A rule without predicates covers every instance.
    if !rule.contains('[') {
        let schema = crate::datastore::change::schema_path_of(path);
        if let Some(rest) = schema.strip_prefix(rule) {
            return rest.is_empty() || rest.starts_with('/');
        }
    }
    false
}

impl Policy {
    fn from_tree(tree: &DataTree<'static>) -> Policy {
        let mut p = Policy::default();
        let get = |path: &str| tree.find_path(path).ok().and_then(|n| n.value_canonical());
        p.enabled = get(&format!("{ROOT}/enable-nacm")).as_deref() != Some("false");
        p.read_default = action(get(&format!("{ROOT}/read-default")), Action::Permit);
        p.write_default = action(get(&format!("{ROOT}/write-default")), Action::Deny);
        p.exec_default = action(get(&format!("{ROOT}/exec-default")), Action::Permit);
        if let Ok(users) = tree.find_xpath(&format!("{ROOT}/groups/group/user-name")) {
            for u in users {
                let group = u.parent_name_key();
                if let (Some(user), Some(group)) = (u.value_canonical(), group) {
                    p.groups.entry(user).or_default().push(group);
                }
            }
        }
        if let Ok(lists) = tree.find_xpath(&format!("{ROOT}/rule-list")) {
            for list in lists {
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

trait ParentKey {
    fn parent_name_key(&self) -> Option<String>;
}

impl ParentKey for DataNodeRef<'_, '_> {
    fn parent_name_key(&self) -> Option<String> {
        use yang2::iter::NodeIterable;
        self.parent().and_then(|g| g.list_keys().next()).and_then(|k| k.value_canonical())
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
    users: RwLock<HashMap<SessionId, String>>,
    pub denied_operations: AtomicU64,
    pub denied_data_writes: AtomicU64,
    pub denied_notifications: AtomicU64,
}

impl Nacm {
    pub fn new(recovery_user: Option<String>) -> Arc<Nacm> {
        Arc::new(Nacm {
            policy: RwLock::new(Arc::new(Policy::default())),
            recovery_user,
            users: RwLock::new(HashMap::new()),
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
        self.users.write().unwrap_or_else(|e| e.into_inner()).insert(session, user.to_owned());
    }

    pub fn session_closed(&self, session: SessionId) {
        self.users.write().unwrap_or_else(|e| e.into_inner()).remove(&session);
    }

    fn user_of(&self, session: SessionId) -> Option<String> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).get(&session).cloned()
    }

    /// Users NACM does not apply to: the recovery user (section 3.2) when enforcement is on.
    fn unrestricted(&self, user: &str, policy: &Policy) -> bool {
        !policy.enabled || self.recovery_user.as_deref() == Some(user)
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
            None if DENY_ALL_RPCS.contains(&(module, rpc)) => false,
            None => policy.exec_default == Action::Permit,
        };
        if !allowed {
            self.denied_operations.fetch_add(1, Ordering::Relaxed);
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
        }
        allowed
    }

    fn data_decision(&self, policy: &Policy, user: &str, access: Access, module: &str, path: &str) -> bool {
        let decision = policy.matching(user, access, |r| {
            (r.module == "*" || r.module == module)
                && match &r.target {
                    Target::Any => true,
                    Target::Data(p) => covers(p, path),
                    _ => false,
                }
        });
        match decision {
            Some(a) => a == Action::Permit,
            None if deny_all_data().iter().any(|d| covers(d, path)) => false,
            None => {
                let default = if access == Access::Read { policy.read_default } else { policy.write_default };
                default == Action::Permit
            }
        }
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

    /// Removes what `user` may not read (section 3.4.5: reads are filtered, not refused).
    pub fn filter_read(&self, user: &str, tree: &mut DataTree<'static>) {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return;
        }
        let mut doomed = Vec::new();
        if let Some(first) = tree.reference() {
            for top in first.inclusive_siblings() {
                self.collect_unreadable(&policy, user, &top, &mut doomed);
            }
        }
        for p in doomed {
            let _ = crate::datastore::tree::remove(tree, &p);
        }
    }

    fn collect_unreadable(&self, policy: &Policy, user: &str, n: &DataNodeRef<'_, '_>, out: &mut Vec<String>) {
        let path = n.path();
        let module = n.schema().module().name().to_owned();
        if !self.data_decision(policy, user, Access::Read, &module, &path) {
            out.push(path);
            return;
        }
        for c in n.children() {
            self.collect_unreadable(policy, user, &c, out);
        }
    }
}

impl WriteGuard for Nacm {
    fn check(&self, session: SessionId, _target: Datastore, changes: &[Change]) -> Result<(), RpcError> {
        let Some(user) = self.user_of(session) else { return Ok(()) };
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
            let module = c.path.trim_start_matches('/').split(':').next().unwrap_or("").to_owned();
            if !self.data_decision(&policy, &user, access, &module, &c.path) {
                self.denied_data_writes.fetch_add(1, Ordering::Relaxed);
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
    fn render(&self, tree: &mut DataTree<'static>, _xpath: Option<&str>) -> Result<(), RpcError> {
        for (leaf, v) in [
            ("denied-operations", &self.denied_operations),
            ("denied-data-writes", &self.denied_data_writes),
            ("denied-notifications", &self.denied_notifications),
        ] {
            crate::datastore::tree::set(tree, &format!("{ROOT}/{leaf}"), Some(&v.load(Ordering::Relaxed).to_string()))?;
        }
        Ok(())
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
        assert!(covers("/cats-sma:cats-sma/scis", "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id[.='x']"));
        assert!(covers("/cats-sma:cats-sma/scis/sci", "/cats-sma:cats-sma/scis/sci[csci-id='a']"));
        assert!(covers("/cats-sma:cats-sma/scis/sci[csci-id='a']", "/cats-sma:cats-sma/scis/sci[csci-id='a']/cs-id"));
        assert!(!covers("/cats-sma:cats-sma/scis/sci[csci-id='a']", "/cats-sma:cats-sma/scis/sci[csci-id='ab']"));
        assert!(!covers("/cats-sma:cats-sma/sc", "/cats-sma:cats-sma/scis"));
    }
}
