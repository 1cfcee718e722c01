//! SCIs learned from subordinate C-SMAs (seed 004, Scalability; `src/hierarchy/`). The
//! coordinator mirrors each subordinate's metric-cache entries into its own cache, so that
//! the policy engine, the update controller and the C-PS adapters see one site. The
//! subordinate owns an SCI's liveness (it authenticated the SCI, it ages the entry); the
//! coordinator owns the subordinate's liveness (`hierarchy::supervisor` withdraws a lost
//! subordinate's contribution). A mirrored entry therefore does not age here: it follows
//! the state the subordinate shows.
//!
//! One SCI, one home: a CSCI-ID held by one subordinate (or registered on the coordinator
//! itself) is refused from any other as a duplicate, so a site is never counted twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::core::{Core, SciConfig};
use super::model::{CsciId, SciState};
use super::report::RawReport;
use super::sci_state::Input;

/// The expected interval a mirrored SCI is registered with, and its TTL here: long enough
/// that the coordinator's own timers never fire before the subordinate says the SCI went
/// stale. A configured `cache/ttl` does not apply to mirrored entries.
pub const MIRROR_INTERVAL: Duration = Duration::from_secs(86_400);
pub const MIRROR_TTL: Duration = Duration::from_secs(2 * 86_400);

/// One SCI as a subordinate shows it, typed (`hierarchy` converts what it decoded).
#[derive(Clone, Debug, PartialEq)]
pub struct Mirrored {
    pub csci_id: String,
    pub cs_id: String,
    pub gas: u32,
    pub computing_time: u32,
    pub health: String,
    pub cost: Option<u32>,
    pub reputation: Option<u8>,
    pub security_label: Option<u8>,
    pub timestamp: DateTime<Utc>,
    pub sequence: u64,
    pub state: SciState,
}

/// What became of one mirrored entry.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Stored (new metrics or a new state).
    Stored,
    /// Nothing new: a resync repeating what is held, or an entry with nothing to
    /// contribute (ACTIVE, or FAILED and not held).
    Unchanged,
    /// Another owner holds the CSCI-ID: a subordinate's name, or `local`.
    Duplicate(String),
    /// Invalid: an identifier or a value outside its type or the configured ranges.
    Refused(String),
}

/// Which subordinates hold each mirrored SCI: one, or with shared SCIs (agents of one
/// MQTT shared-subscription group) several, the first listed being the one shown.
#[derive(Default)]
pub struct Mirrors {
    holders: HashMap<CsciId, Vec<Arc<str>>>,
    counts: HashMap<Arc<str>, u32>,
}

impl Mirrors {
    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// The subordinate an SCI is learned from (the first of its holders).
    pub fn owner(&self, csci_id: &str) -> Option<&Arc<str>> {
        self.holders.get(csci_id).and_then(|h| h.first())
    }

    /// Whether subordinate `from` holds the SCI.
    pub fn holds(&self, csci_id: &str, from: &str) -> bool {
        self.holders.get(csci_id).is_some_and(|h| h.iter().any(|n| **n == *from))
    }

    /// How many SCIs a subordinate contributes.
    pub fn count(&self, from: &str) -> u32 {
        self.counts.get(from).copied().unwrap_or(0)
    }

    fn insert(&mut self, csci_id: &str, from: &str) {
        if self.holds(csci_id, from) {
            return;
        }
        let name = match self.counts.get_key_value(from) {
            Some((k, _)) => k.clone(),
            None => Arc::from(from),
        };
        *self.counts.entry(name.clone()).or_default() += 1;
        self.holders.entry(csci_id.to_owned()).or_default().push(name);
    }

    fn uncount(&mut self, name: &str) {
        if let Some(c) = self.counts.get_mut(name) {
            *c -= 1;
            if *c == 0 {
                self.counts.remove(name);
            }
        }
    }

    /// Forgets that an SCI is learned from any subordinate (a local registration took it
    /// over).
    pub(super) fn remove(&mut self, csci_id: &str) {
        for name in self.holders.remove(csci_id).unwrap_or_default() {
            self.uncount(&name);
        }
    }

    /// `from` no longer holds the SCI; true when nobody does any more.
    fn release(&mut self, csci_id: &str, from: &str) -> bool {
        let Some(h) = self.holders.get_mut(csci_id) else { return false };
        let Some(i) = h.iter().position(|n| **n == *from) else { return false };
        h.remove(i);
        let last = h.is_empty();
        if last {
            self.holders.remove(csci_id);
        }
        self.uncount(from);
        last
    }

    fn of(&self, from: &str) -> Vec<CsciId> {
        self.holders.iter().filter(|(_, h)| h.iter().any(|n| **n == *from)).map(|(id, _)| id.clone()).collect()
    }
}

impl Core {
    /// Mirrors one entry of subordinate `from`, which may contribute `max` SCIs. With
    /// `shared`, subordinates share SCIs (each report of an SCI reaches one agent of their
    /// MQTT shared-subscription group): an SCI may be held by several, the newest report
    /// from any of them wins, and it stays while one of them holds it.
    pub fn mirror(&mut self, from: &str, m: &Mirrored, max: u32, shared: bool) -> Outcome {
        let raw = RawReport {
            csci_id: m.csci_id.clone(),
            cs_id: m.cs_id.clone(),
            sequence: m.sequence,
            timestamp: m.timestamp,
            gas: i64::from(m.gas),
            computing_time: i64::from(m.computing_time),
            health: m.health.clone(),
            cost: m.cost.map(i64::from),
            reputation: m.reputation.map(i64::from),
            security_label: m.security_label.map(i64::from),
        };
        if let Err(d) = super::report::check_id(super::report::IdKind::CsciId, &m.csci_id) {
            return Outcome::Refused(d);
        }
        let holds = self.mirrors.holds(&m.csci_id, from);
        match self.mirrors.owner(&m.csci_id) {
            Some(o) if !holds && !shared => return Outcome::Duplicate(o.to_string()),
            Some(_) => {}
            None if self.cache.registration(&m.csci_id).is_some() => return Outcome::Duplicate("local".into()),
            None => {}
        }
        let held = self.mirrors.owner(&m.csci_id).is_some();
        let others = held && !(holds && self.mirrors.holders.get(&m.csci_id).is_some_and(|h| h.len() == 1));
        match m.state {
            // Nothing reported yet: nothing to contribute; what it held is withdrawn.
            SciState::Active => {
                return if self.unmirror(from, &m.csci_id) { Outcome::Stored } else { Outcome::Unchanged };
            }
            // A shared SCI another agent still holds: this agent's reports stopped, not
            // the SCI's (they reach the others); it just no longer holds it.
            SciState::Stale | SciState::Failed if shared && others => {
                return if self.unmirror(from, &m.csci_id) { Outcome::Stored } else { Outcome::Unchanged };
            }
            SciState::Failed if !held => return Outcome::Unchanged,
            _ => {}
        }
        if let Err(d) = raw.check_ids() {
            return Outcome::Refused(d);
        }
        let metrics = match super::validate::check_metrics(&raw, &self.validation) {
            Ok(v) => v,
            Err((_, d)) => {
                // What was held stays no longer than the subordinate's word.
                self.unmirror(from, &m.csci_id);
                return Outcome::Refused(d);
            }
        };
        // A new entry never evicts another: a subordinate cannot crowd out the
        // coordinator's own SCIs or another subordinate's.
        if !holds && self.mirrors.count(from) >= max {
            return Outcome::Refused(format!("subordinate {from} contributes its maximum of {max} SCIs"));
        }
        if self.cache.get(&m.csci_id).is_none() && self.cache.len() >= self.cache.max_entries {
            return Outcome::Refused("the metric cache is full".into());
        }
        let mut changed = false;
        let registered_for = self.cache.registration(&m.csci_id).map(|r| r.may_report_for(&m.cs_id));
        if registered_for != Some(true) {
            let sci = SciConfig {
                cs_ids: vec![m.cs_id.clone()],
                credential_ref: None,
                unauthenticated: false,
                expected_interval: MIRROR_INTERVAL,
            };
            self.cache.set_registration(&m.csci_id, &sci);
        }
        let (now, wall) = (self.clock.now(), self.clock.wall());
        if self.cache.get(&m.csci_id).is_none() {
            let ev = self.cache.register(&m.csci_id, MIRROR_TTL, self.cache_config.grace_period, now, wall);
            self.absorb(ev);
        }
        self.mirrors.insert(&m.csci_id, from);
        let newer = match self.cache.get(&m.csci_id) {
            None => return Outcome::Refused("the metric cache has no room".into()),
            Some(e) => match (e.timestamp(), e.sequence()) {
                (Some(t), Some(s)) => m.timestamp > t || (m.timestamp == t && m.sequence > s),
                _ => true,
            },
        };
        if newer {
            let slot = self.cache.lookup(&m.csci_id);
            let report = super::model::ReportRef {
                csci_id: &m.csci_id,
                cs_id: &m.cs_id,
                sequence: m.sequence,
                timestamp: m.timestamp,
                metrics,
            };
            self.store(slot, report, false, now, wall);
            changed = true;
        }
        // The subordinate's state: a report makes the entry HEALTHY here; STALE and FAILED
        // follow the subordinate's own timers.
        let steps: &[Input] = match m.state {
            SciState::Stale => &[Input::TtlExpired],
            SciState::Failed => &[Input::TtlExpired, Input::GraceExpired],
            _ => &[],
        };
        for input in steps {
            let ev = self.cache.fail(&m.csci_id, *input, wall);
            changed |= !ev.is_empty();
            self.absorb(ev);
        }
        if changed {
            Outcome::Stored
        } else {
            Outcome::Unchanged
        }
    }

    /// The subordinate no longer holds the entry: its metrics are withdrawn here. False
    /// when `from` does not hold it.
    pub fn unmirror(&mut self, from: &str, csci_id: &str) -> bool {
        if !self.mirrors.holds(csci_id, from) {
            return false;
        }
        // A shared SCI stays while another subordinate holds it.
        if self.mirrors.release(csci_id, from) {
            self.remove_sci_with(csci_id, false);
        }
        true
    }

    /// Withdraws every SCI of `from` except those in `keep` (a push-update lists all the
    /// subordinate holds; a lost subordinate keeps nothing). Returns how many went.
    pub fn unmirror_except(&mut self, from: &str, keep: &std::collections::HashSet<String>) -> usize {
        let gone: Vec<CsciId> = self.mirrors.of(from).into_iter().filter(|id| !keep.contains(id)).collect();
        for id in &gone {
            self.unmirror(from, id);
        }
        if !gone.is_empty() {
            tracing::info!(subordinate = from, withdrawn = gone.len(), "subordinate's SCIs withdrawn");
        }
        gone.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Clock;

    fn m(id: &str, gas: u32, seq: u64, state: SciState, at: DateTime<Utc>) -> Mirrored {
        Mirrored {
            csci_id: id.into(),
            cs_id: "svc".into(),
            gas,
            computing_time: 10,
            health: "healthy".into(),
            cost: None,
            reputation: None,
            security_label: None,
            timestamp: at,
            sequence: seq,
            state,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_scalability_mirrored_scis_count_once_and_leave_with_their_subordinate() {
        let mut core = Core::new(Clock::default());
        let t = core.clock.wall();
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Healthy, t), 2, false), Outcome::Stored);
        assert_eq!(core.mirror("a", &m("s2", 5, 1, SciState::Healthy, t), 2, false), Outcome::Stored);
        // Its maximum reached, a subordinate's new SCI is refused.
        assert!(matches!(core.mirror("a", &m("s3", 5, 1, SciState::Healthy, t), 2, false), Outcome::Refused(_)));
        assert_eq!(core.cache.site("svc").unwrap().gas, 15);
        // A resync repeats what is held: nothing changes.
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Healthy, t), 10, false), Outcome::Unchanged);
        // Another subordinate cannot add the same SCI again.
        assert_eq!(core.mirror("b", &m("s1", 99, 7, SciState::Healthy, t), 10, false), Outcome::Duplicate("a".into()));
        assert_eq!(core.cache.site("svc").unwrap().gas, 15);
        // Nor can the SCI report to the coordinator directly.
        let raw = RawReport {
            csci_id: "s1".into(),
            cs_id: "svc".into(),
            sequence: 9,
            timestamp: t,
            gas: 1,
            computing_time: 1,
            health: "HEALTHY".into(),
            cost: None,
            reputation: None,
            security_label: None,
        };
        assert!(core.ingest(&raw, None).is_err());
        // STALE still counts, FAILED does not.
        assert_eq!(core.mirror("a", &m("s2", 5, 1, SciState::Stale, t), 10, false), Outcome::Stored);
        assert_eq!(core.cache.site("svc").unwrap().gas, 15);
        assert_eq!(core.mirror("a", &m("s2", 5, 1, SciState::Failed, t), 10, false), Outcome::Stored);
        assert_eq!(core.cache.site("svc").unwrap().gas, 10);
        assert_eq!(core.mirrors.count("a"), 2);
        // The subordinate is lost: all of it goes.
        assert_eq!(core.unmirror_except("a", &Default::default()), 2);
        assert!(core.cache.site("svc").is_none());
        assert_eq!(core.mirrors.count("a"), 0);
        // Now b may contribute s1.
        assert_eq!(core.mirror("b", &m("s1", 99, 7, SciState::Healthy, t), 10, false), Outcome::Stored);
        assert_eq!(core.cache.site("svc").unwrap().gas, 99);
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_scalability_shared_scis_newest_report_wins_and_stay_while_one_holds_them() {
        let mut core = Core::new(Clock::default());
        let t = core.clock.wall();
        let later = t + chrono::Duration::seconds(1);
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Healthy, t), 10, true), Outcome::Stored);
        // The SCI's next report reached the other agent of the group: it wins.
        assert_eq!(core.mirror("b", &m("s1", 20, 2, SciState::Healthy, later), 10, true), Outcome::Stored);
        assert_eq!(core.cache.site("svc").unwrap().gas, 20);
        // The older view of the first agent changes nothing.
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Healthy, t), 10, true), Outcome::Unchanged);
        assert_eq!(core.cache.site("svc").unwrap().gas, 20);
        // One agent's entry goes stale (the reports go to the other): the SCI stays.
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Stale, t), 10, true), Outcome::Stored);
        assert_eq!(core.cache.get("s1").unwrap().state, SciState::Healthy);
        assert_eq!((core.mirrors.count("a"), core.mirrors.count("b")), (0, 1));
        // The last holder loses it: withdrawn.
        assert_eq!(core.unmirror_except("b", &Default::default()), 1);
        assert!(core.cache.site("svc").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_scalability_a_local_registration_takes_over_and_eviction_forgets_the_mirror() {
        let mut core = Core::new(Clock::default());
        let t = core.clock.wall();
        assert_eq!(core.mirror("a", &m("s1", 10, 1, SciState::Stale, t), 10, false), Outcome::Stored);
        // The operator configures s1 here: the subordinate's contribution is withdrawn and
        // its later pushes are duplicates.
        let sci = SciConfig {
            cs_ids: vec!["svc".into()],
            credential_ref: None,
            unauthenticated: true,
            expected_interval: Duration::from_secs(1),
        };
        core.set_sci("s1", sci.clone());
        assert!(core.cache.site("svc").is_none_or(|s| s.gas == 0));
        assert!(core
            .events
            .iter()
            .any(|e| matches!(e, super::super::core::EngineEvent::Withdrawn { csci_id, .. } if csci_id == "s1")));
        assert_eq!(
            core.mirror("a", &m("s1", 10, 2, SciState::Healthy, t), 10, false),
            Outcome::Duplicate("local".into())
        );
        // A full cache: a local SCI evicts a mirrored entry, which is then no longer
        // mirrored, and the subordinate's next push of it does not evict another.
        let mut core = Core::new(Clock::default());
        core.set_cache_config(super::super::core::CacheConfig { max_entries: 1, ..Default::default() });
        assert_eq!(core.mirror("a", &m("m1", 10, 1, SciState::Healthy, t), 10, false), Outcome::Stored);
        core.set_sci("l1", sci);
        assert!(core.mirrors.owner("m1").is_none() && core.mirrors.count("a") == 0);
        assert!(core.cache.registration("m1").is_none());
        assert!(matches!(core.mirror("a", &m("m1", 10, 2, SciState::Healthy, t), 10, false), Outcome::Refused(_)));
        assert!(core.cache.get("l1").is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn seed004_scalability_mirrored_values_are_validated() {
        let mut core = Core::new(Clock::default());
        let t = core.clock.wall();
        let mut bad = m("s1", 10, 1, SciState::Healthy, t);
        bad.reputation = Some(11);
        assert!(matches!(core.mirror("a", &bad, 10, false), Outcome::Refused(_)));
        let mut bad = m("s1", 10, 1, SciState::Healthy, t);
        bad.csci_id = "bad\u{202e}id".into();
        assert!(matches!(core.mirror("a", &bad, 10, false), Outcome::Refused(_)));
        assert!(core.cache.site("svc").is_none());
    }
}
