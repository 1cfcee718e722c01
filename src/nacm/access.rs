//! NACM read rules for typed renderers (RFC 8341 section 3.4.5, DESIGN decision 2): the
//! same decision [`Nacm::filter_read`] takes per data node, taken per schema node, so a
//! renderer of typed data can leave out what the reader may not read without a data tree.
//! That is exact when no data rule's path has a predicate (a decision then depends on the
//! schema node only, as `collect_unreadable`'s `by_schema` cache already assumes);
//! otherwise [`Nacm::read_access`] says so and the read takes the libyang path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

type Decisions = (Option<Arc<Policy>>, HashMap<String, bool>);
static DECISIONS: std::sync::LazyLock<Mutex<Decisions>> =
    std::sync::LazyLock::new(|| Mutex::new((None, HashMap::new())));

use super::{Access, Action, Nacm, Policy, Target};

/// How one reader's reads are checked.
pub struct ReadAccess<'a> {
    /// None: NACM does not restrict this reader.
    rules: Option<(&'a Nacm, Arc<Policy>, &'a str)>,
}

impl ReadAccess<'_> {
    /// A reader NACM does not restrict (the agent itself, tests).
    pub fn unrestricted() -> ReadAccess<'static> {
        ReadAccess { rules: None }
    }

    pub fn is_unrestricted(&self) -> bool {
        self.rules.is_none()
    }

    /// May the reader read the node with schema path `path` (`/m:a/b/c`, prefixes where
    /// the module changes), defined by `module`? Its ancestors are checked separately.
    pub fn allows(&self, module: &str, path: &str) -> bool {
        let Some((nacm, policy, user)) = &self.rules else { return true };
        // Decisions are kept per policy (the Arc is held, so a reloaded policy is a new
        // one) and user: a renderer asks the same few dozen schema paths on every read.
        let mut cache = DECISIONS.lock().unwrap_or_else(|e| e.into_inner());
        if !cache.0.as_ref().is_some_and(|p| Arc::ptr_eq(p, policy)) || cache.1.len() > 10_000 {
            *cache = (Some(policy.clone()), HashMap::new());
        }
        let key = format!("{user}\0{module}\0{path}");
        if let Some(d) = cache.1.get(&key) {
            return *d;
        }
        let d = nacm.data_decision(policy, user, Access::Read, module, path);
        cache.1.insert(key, d);
        d
    }
}

impl Nacm {
    /// The read checks for `user`, or None when a decision may depend on data (a rule path
    /// with a predicate): such reads are pruned on the libyang tree.
    pub fn read_access<'a>(&'a self, user: &'a str) -> Option<ReadAccess<'a>> {
        let policy = self.policy();
        if self.unrestricted(user, &policy) {
            return Some(ReadAccess { rules: None });
        }
        let predicates = policy
            .rule_lists
            .iter()
            .any(|l| l.rules.iter().any(|r| matches!(&r.target, Target::Data(p) if p.contains('['))));
        if predicates {
            return None;
        }
        let has_data_rules =
            policy.rule_lists.iter().any(|l| l.rules.iter().any(|r| matches!(r.target, Target::Data(_) | Target::Any)));
        if !has_data_rules && policy.read_default == Action::Permit && super::deny_all_data().is_empty() {
            return Some(ReadAccess { rules: None });
        }
        Some(ReadAccess { rules: Some((self, policy, user)) })
    }
}
