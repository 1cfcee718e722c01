//! The Metric Cache (seed 004): the latest validated metrics of each SCI with O(1) lookup
//! by CSCI-ID, the SCIs of each CS-ID with their incrementally maintained site aggregate,
//! soft-state aging (TTL → STALE → grace period → FAILED), a maximum size with
//! least-recently-used eviction, and the per-SCI state machine. The registry (hard state)
//! lives elsewhere; this is soft state only.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::aggregate::{Aggregate, ComputingTimeFunction, Contribution};
use super::model::{CsId, CsciId, Metrics, Report, SiteMetrics};
use super::sci_state::{self, Input, Reason, SciState};
use super::validate::History;

/// Flags shown per entry (YANG metric-cache/entry/flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub anomaly_warning: bool,
    pub smoothed: bool,
    pub pull_pending: bool,
    pub gas_zeroed: bool,
}

/// One SCI's cache entry.
#[derive(Clone, Debug)]
pub struct Entry {
    pub csci_id: CsciId,
    /// The CS-ID of the last report.
    pub cs_id: Option<CsId>,
    /// Metrics as reported (validated).
    pub reported: Option<Metrics>,
    /// Metrics after SCI-scope policy: what the site aggregate counts.
    pub effective: Option<Metrics>,
    pub timestamp: Option<DateTime<Utc>>,
    pub sequence: Option<u64>,
    pub state: SciState,
    pub flags: Flags,
    pub last_update: Instant,
    pub last_state_change: DateTime<Utc>,
    pub ttl: Duration,
    pub grace: Duration,
    pub history: History,
    lru_tick: u64,
    timer_version: u64,
}

impl Entry {
    fn contribution(&self) -> Option<Contribution> {
        if !sci_state::contributes(self.state) {
            return None;
        }
        self.effective.as_ref().and_then(Contribution::of)
    }

    /// Time left before the entry goes STALE (zero once stale or failed).
    pub fn ttl_remaining(&self, now: Instant) -> Duration {
        match self.state {
            SciState::Healthy => (self.last_update + self.ttl).saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }
}

/// Something the cache did that the engine must act on.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheEvent {
    StateChanged {
        csci_id: CsciId,
        from: SciState,
        to: SciState,
        reason: Reason,
    },
    /// The site aggregate of this CS-ID may have changed.
    SiteChanged {
        cs_id: CsId,
    },
    /// An SCI went STALE: pull it now (seed 004 hybrid mode).
    PullNeeded {
        csci_id: CsciId,
    },
    /// An entry was evicted to make room (seed 004: triggers a withdrawal).
    Evicted {
        csci_id: CsciId,
        cs_id: Option<CsId>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Ttl,
    Grace,
}

#[derive(Default)]
struct Service {
    members: HashSet<CsciId>,
    aggregate: Aggregate,
}

/// The cache.
pub struct MetricCache {
    entries: HashMap<CsciId, Entry>,
    services: HashMap<CsId, Service>,
    /// Touch order for LRU; stale positions are skipped lazily (the entry's tick differs).
    lru: VecDeque<(u64, CsciId)>,
    timers: BinaryHeap<Reverse<(Instant, u64, Timer, CsciId)>>,
    tick: u64,
    pub max_entries: usize,
    pub function: ComputingTimeFunction,
}

impl MetricCache {
    pub fn new(max_entries: usize) -> Self {
        MetricCache {
            entries: HashMap::new(),
            services: HashMap::new(),
            lru: VecDeque::new(),
            timers: BinaryHeap::new(),
            tick: 0,
            max_entries: max_entries.max(1),
            function: ComputingTimeFunction::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, csci_id: &str) -> Option<&Entry> {
        self.entries.get(csci_id)
    }

    pub fn get_mut(&mut self, csci_id: &str) -> Option<&mut Entry> {
        self.entries.get_mut(csci_id)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// The SCIs currently counted for a CS-ID (no scan of the whole cache).
    pub fn members(&self, cs_id: &str) -> impl Iterator<Item = &Entry> {
        self.services.get(cs_id).into_iter().flat_map(|s| s.members.iter().filter_map(|id| self.entries.get(id)))
    }

    pub fn services(&self) -> impl Iterator<Item = &CsId> {
        self.services.keys()
    }

    /// The site metrics of a CS-ID before site-scope policy.
    pub fn site(&self, cs_id: &str) -> Option<SiteMetrics> {
        self.services.get(cs_id).map(|s| s.aggregate.site(cs_id, self.function))
    }

    fn touch(&mut self, csci_id: &str) {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(csci_id) {
            e.lru_tick = self.tick;
            self.lru.push_back((self.tick, csci_id.to_owned()));
        }
        // Keep the lazy queue from growing without bound.
        if self.lru.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.lru.retain(|(t, id)| entries.get(id).is_some_and(|e| e.lru_tick == *t));
        }
    }

    fn schedule(&mut self, csci_id: &str, at: Instant, timer: Timer) {
        if let Some(e) = self.entries.get_mut(csci_id) {
            e.timer_version += 1;
            self.timers.push(Reverse((at, e.timer_version, timer, csci_id.to_owned())));
        }
    }

    /// Creates an ACTIVE entry for a registered SCI (no-op if present), evicting the least
    /// recently used entry when full.
    pub fn register(
        &mut self,
        csci_id: &str,
        ttl: Duration,
        grace: Duration,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        if let Some(e) = self.entries.get_mut(csci_id) {
            e.ttl = ttl;
            e.grace = grace;
            return events;
        }
        if self.entries.len() >= self.max_entries {
            events.extend(self.evict_lru(csci_id));
        }
        self.entries.insert(
            csci_id.to_owned(),
            Entry {
                csci_id: csci_id.to_owned(),
                cs_id: None,
                reported: None,
                effective: None,
                timestamp: None,
                sequence: None,
                state: SciState::Active,
                flags: Flags::default(),
                last_update: now,
                last_state_change: wall,
                ttl,
                grace,
                history: History::default(),
                lru_tick: 0,
                timer_version: 0,
            },
        );
        self.touch(csci_id);
        events
    }

    fn evict_lru(&mut self, keep: &str) -> Vec<CacheEvent> {
        while let Some((tick, id)) = self.lru.pop_front() {
            let current = self.entries.get(&id).is_some_and(|e| e.lru_tick == tick);
            if current && id != keep {
                let cs_id = self.entries.get(&id).and_then(|e| e.cs_id.clone());
                let mut events = self.remove(&id);
                events.push(CacheEvent::Evicted { csci_id: id, cs_id });
                return events;
            }
        }
        Vec::new()
    }

    /// Removes an SCI (deregistered or evicted).
    pub fn remove(&mut self, csci_id: &str) -> Vec<CacheEvent> {
        let Some(e) = self.entries.remove(csci_id) else { return Vec::new() };
        let mut events = Vec::new();
        if let Some(cs) = &e.cs_id {
            self.leave(cs, csci_id, e.contribution().as_ref());
            events.push(CacheEvent::SiteChanged { cs_id: cs.clone() });
        }
        events
    }

    fn leave(&mut self, cs_id: &str, csci_id: &str, contribution: Option<&Contribution>) {
        if let Some(s) = self.services.get_mut(cs_id) {
            s.aggregate.update(contribution, None);
            s.members.remove(csci_id);
            if s.members.is_empty() {
                self.services.remove(cs_id);
            }
        }
    }

    /// Stores an accepted report with its post-policy metrics; returns what changed. The
    /// entry must have been registered.
    pub fn accept(
        &mut self,
        report: &Report,
        effective: Metrics,
        flags: Flags,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        let Some(e) = self.entries.get_mut(&report.csci_id) else { return events };
        let old_contribution = e.contribution();
        let old_cs = e.cs_id.clone();
        let old_state = e.state;
        e.cs_id = Some(report.cs_id.clone());
        e.reported = Some(report.metrics);
        e.effective = Some(effective);
        e.timestamp = Some(report.timestamp);
        e.sequence = Some(report.sequence);
        e.flags = Flags { pull_pending: false, gas_zeroed: false, ..flags };
        e.last_update = now;
        if let Some((to, reason)) = sci_state::next(old_state, Input::Report) {
            e.state = to;
            e.last_state_change = wall;
            events.push(CacheEvent::StateChanged { csci_id: report.csci_id.clone(), from: old_state, to, reason });
        }
        let new_contribution = e.contribution();
        let ttl = e.ttl;
        match &old_cs {
            Some(cs) if *cs != report.cs_id => {
                self.leave(cs, &report.csci_id, old_contribution.as_ref());
                events.push(CacheEvent::SiteChanged { cs_id: cs.clone() });
                self.join(&report.cs_id, &report.csci_id, None, new_contribution.as_ref());
            }
            _ => self.join(&report.cs_id, &report.csci_id, old_contribution.as_ref(), new_contribution.as_ref()),
        }
        events.push(CacheEvent::SiteChanged { cs_id: report.cs_id.clone() });
        self.touch(&report.csci_id);
        self.schedule(&report.csci_id, now + ttl, Timer::Ttl);
        events
    }

    fn join(&mut self, cs_id: &str, csci_id: &str, old: Option<&Contribution>, new: Option<&Contribution>) {
        let s = self.services.entry(cs_id.to_owned()).or_default();
        s.members.insert(csci_id.to_owned());
        s.aggregate.update(old, new);
    }

    /// Re-applies SCI-scope policy to every entry (a policy change), keeping aggregates right.
    pub fn reapply(&mut self, mut f: impl FnMut(&Metrics) -> Metrics) -> Vec<CacheEvent> {
        let ids: Vec<CsciId> = self.entries.keys().cloned().collect();
        let mut changed = HashSet::new();
        for id in ids {
            let Some(e) = self.entries.get_mut(&id) else { continue };
            let (Some(reported), Some(cs)) = (e.reported, e.cs_id.clone()) else { continue };
            let old = e.contribution();
            e.effective = Some(f(&reported));
            let new = e.contribution();
            if old != new {
                self.join(&cs, &id, old.as_ref(), new.as_ref());
                changed.insert(cs);
            }
        }
        changed.into_iter().map(|cs_id| CacheEvent::SiteChanged { cs_id }).collect()
    }

    /// The next time a TTL or grace timer is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, ..))| *t)
    }

    /// Fires the timers due at `now`: HEALTHY → STALE (pull), STALE → FAILED (withdrawn).
    pub fn expire(&mut self, now: Instant, wall: DateTime<Utc>) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        while let Some(Reverse((at, version, timer, id))) = self.timers.peek().cloned() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.entries.get_mut(&id) else { continue };
            if e.timer_version != version {
                continue;
            }
            let input = match timer {
                Timer::Ttl => Input::TtlExpired,
                Timer::Grace => Input::GraceExpired,
            };
            let Some((to, reason)) = sci_state::next(e.state, input) else { continue };
            let from = e.state;
            let old = e.contribution();
            e.state = to;
            e.last_state_change = wall;
            let grace = e.grace;
            match to {
                SciState::Stale => {
                    e.flags.pull_pending = true;
                    events.push(CacheEvent::PullNeeded { csci_id: id.clone() });
                }
                SciState::Failed => {
                    e.flags.pull_pending = false;
                    e.flags.gas_zeroed = true;
                }
                _ => {}
            }
            let new = e.contribution();
            let cs = e.cs_id.clone();
            events.push(CacheEvent::StateChanged { csci_id: id.clone(), from, to, reason });
            if let Some(cs) = cs {
                if old != new {
                    self.join(&cs, &id, old.as_ref(), new.as_ref());
                }
                events.push(CacheEvent::SiteChanged { cs_id: cs });
            }
            if to == SciState::Stale {
                self.schedule(&id, at + grace, Timer::Grace);
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::Health;

    fn report(id: &str, cs: &str, seq: u64, gas: u32) -> Report {
        Report {
            csci_id: id.into(),
            cs_id: cs.into(),
            sequence: seq,
            timestamp: Utc::now(),
            metrics: Metrics {
                gas,
                computing_time_ms: 5,
                health: Health::Healthy,
                cost: None,
                reputation: None,
                security_label: None,
            },
        }
    }

    const TTL: Duration = Duration::from_secs(10);
    const GRACE: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn seed_soft_state_aging_ttl_stale_pull_grace_failed() {
        let mut c = MetricCache::new(100);
        let (now, wall) = (Instant::now(), Utc::now());
        c.register("a", TTL, GRACE, now, wall);
        assert_eq!(c.get("a").unwrap().state, SciState::Active);
        let r = report("a", "AR1", 1, 400);
        let ev = c.accept(&r, r.metrics, Flags::default(), now, wall);
        assert!(ev.contains(&CacheEvent::StateChanged {
            csci_id: "a".into(),
            from: SciState::Active,
            to: SciState::Healthy,
            reason: Reason::FirstReport
        }));
        assert_eq!(c.site("AR1").unwrap().gas, 400);
        assert_eq!(c.next_deadline(), Some(now + TTL));
        // TTL passes without a report: STALE, pull requested, still counted.
        let ev = c.expire(now + TTL, wall);
        assert!(ev.contains(&CacheEvent::PullNeeded { csci_id: "a".into() }));
        assert_eq!(c.get("a").unwrap().state, SciState::Stale);
        assert_eq!(c.site("AR1").unwrap().gas, 400);
        // Grace period passes: FAILED, GAS contribution 0.
        let ev = c.expire(now + TTL + GRACE, wall);
        assert!(ev.iter().any(|e| matches!(e, CacheEvent::StateChanged { to: SciState::Failed, .. })));
        assert_eq!(c.site("AR1").unwrap().gas, 0);
        assert!(c.get("a").unwrap().flags.gas_zeroed);
        // A report brings it back.
        let r = report("a", "AR1", 2, 300);
        c.accept(&r, r.metrics, Flags::default(), now + TTL + GRACE, wall);
        assert_eq!(c.get("a").unwrap().state, SciState::Healthy);
        assert_eq!(c.site("AR1").unwrap().gas, 300);
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_resets_the_ttl() {
        let mut c = MetricCache::new(100);
        let (now, wall) = (Instant::now(), Utc::now());
        c.register("a", TTL, GRACE, now, wall);
        let r = report("a", "AR1", 1, 1);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        let r = report("a", "AR1", 2, 1);
        c.accept(&r, r.metrics, Flags::default(), now + Duration::from_secs(8), wall);
        assert!(c.expire(now + TTL, wall).is_empty(), "the first TTL timer is obsolete");
        assert_eq!(c.get("a").unwrap().state, SciState::Healthy);
    }

    #[test]
    fn seed_lru_eviction_at_max_size_triggers_withdrawal() {
        let mut c = MetricCache::new(2);
        let (now, wall) = (Instant::now(), Utc::now());
        for id in ["a", "b"] {
            c.register(id, TTL, GRACE, now, wall);
            let r = report(id, "AR1", 1, 100);
            c.accept(&r, r.metrics, Flags::default(), now, wall);
        }
        // Touch a, so b is least recently used.
        let r = report("a", "AR1", 2, 100);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        let ev = c.register("c", TTL, GRACE, now, wall);
        assert!(ev.contains(&CacheEvent::Evicted { csci_id: "b".into(), cs_id: Some("AR1".into()) }));
        assert!(c.get("b").is_none() && c.get("a").is_some() && c.get("c").is_some());
        assert_eq!(c.site("AR1").unwrap().gas, 100);
    }

    #[test]
    fn members_by_cs_id_and_moving_between_services() {
        let mut c = MetricCache::new(10);
        let (now, wall) = (Instant::now(), Utc::now());
        for (id, cs) in [("a", "AR1"), ("b", "AR2"), ("d", "AR1")] {
            c.register(id, TTL, GRACE, now, wall);
            let r = report(id, cs, 1, 10);
            c.accept(&r, r.metrics, Flags::default(), now, wall);
        }
        let mut ar1: Vec<_> = c.members("AR1").map(|e| e.csci_id.clone()).collect();
        ar1.sort();
        assert_eq!(ar1, ["a", "d"]);
        let r = report("a", "AR2", 2, 10);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        assert_eq!(c.site("AR1").unwrap().gas, 10);
        assert_eq!(c.site("AR2").unwrap().gas, 20);
        c.remove("d");
        assert!(c.site("AR1").is_none());
    }
}
