//! The Metric Cache (seed 004): the latest validated metrics of each SCI with O(1) lookup
//! by CSCI-ID, the SCIs of each CS-ID with their incrementally maintained site aggregate,
//! soft-state aging (TTL → STALE → grace period → FAILED), a maximum size with
//! least-recently-used eviction, and the per-SCI state machine. The registry (hard state)
//! lives elsewhere; this is soft state only.
//!
//! Entries live in a slab (a `Vec` of slots) found through one index by CSCI-ID; the LRU
//! order is a doubly linked list of slot numbers kept in its own dense array (moving an
//! entry to the back touches 8-byte links, not three whole entries), and each entry has at
//! most one reminder in the timer heap, so a report allocates nothing here.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::aggregate::{Aggregate, ComputingTimeFunction, Contribution};
use super::model::{CsId, CsciId, Metrics, Report, ReportRef, SiteMetrics};
use super::sci_state::{self, Input, Reason, SciState};
use super::validate::History;

/// Flags shown per entry (YANG metric-cache/entry/flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub anomaly_warning: bool,
    pub smoothed: bool,
    pub pull_pending: bool,
    pub gas_zeroed: bool,
    /// A newer report of this SCI is held in quarantine.
    pub quarantined: bool,
    /// An active probe of the STALE SCI found neither it nor the site reference answering.
    pub partition_suspected: bool,
    /// An active probe of the STALE SCI got an answer: alive, but not reporting.
    pub alive_not_reporting: bool,
}

/// A slot of the slab; `NIL` ends the LRU list.
pub type Slot = u32;
const NIL: Slot = u32::MAX;

impl Flags {
    /// The YANG `bits` value of the set flags, if any is set.
    pub fn yang_bits(self) -> Option<String> {
        let bits: Vec<&str> = [
            (self.anomaly_warning, "anomaly-warning"),
            (self.quarantined, "quarantined"),
            (self.smoothed, "smoothed"),
            (self.pull_pending, "pull-pending"),
            (self.gas_zeroed, "gas-zeroed"),
            (self.partition_suspected, "partition-suspected"),
            (self.alive_not_reporting, "alive-not-reporting"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
        (!bits.is_empty()).then(|| bits.join(" "))
    }
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
    /// The timer that fires next for this entry (TTL while reporting, grace while STALE).
    due: Option<(Instant, Timer)>,
    /// Whether the timer heap holds this entry's reminder (never more than one).
    queued: bool,
    /// Tells this entry's reminders from those of an earlier entry in the same slot.
    serial: u64,
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
    /// An entry was evicted to make room (seed 004: triggers a withdrawal), with the state
    /// it was in and what the validator remembered of it (kept beyond the entry).
    Evicted {
        csci_id: CsciId,
        cs_id: Option<CsId>,
        state: SciState,
        sequence: Option<u64>,
        timestamp: Option<DateTime<Utc>>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Ttl,
    Grace,
}

#[derive(Default)]
struct Service {
    members: HashSet<Slot, IdHash>,
    aggregate: Aggregate,
    /// Where the engine's event list holds this service's last `SiteChanged`, so that a
    /// batch of reports raises it once (`Core::site_changed`); stale once the list is taken.
    event_at: u32,
}

/// The hash of the cache's indexes: a multiply-and-fold hash, several times faster than
/// SipHash on short CSCI-IDs, seeded per process. Keys are only ever inserted for SCIs
/// in the registry (configuration), so report senders cannot choose colliding keys.
#[derive(Clone, Copy)]
pub struct IdHash {
    seed: u64,
}

impl Default for IdHash {
    fn default() -> Self {
        use std::sync::OnceLock;
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1);
        IdHash { seed }
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.seed)
    }
}

pub struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        let m = u128::from(self.0 ^ word) * u128::from(K);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 59));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i) | 0x100);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let m = u128::from(self.0) * u128::from(K ^ 0xff51_afd7_ed55_8ccd);
        (m as u64) ^ ((m >> 64) as u64)
    }
}

/// The cache.
pub struct MetricCache {
    /// CSCI-ID → slot.
    index: HashMap<Box<str>, Slot, IdHash>,
    slots: Vec<Option<Entry>>,
    free: Vec<Slot>,
    services: HashMap<CsId, Service, IdHash>,
    /// LRU links per slot: [towards least recently used, towards most recently used].
    lru: Vec<[Slot; 2]>,
    /// Least and most recently used ends of the LRU list.
    lru_head: Slot,
    lru_tail: Slot,
    /// One reminder per entry at most: (when, slot, serial). A reminder may be earlier than
    /// the entry's timer (a report pushed the TTL back); it is then re-queued.
    timers: BinaryHeap<Reverse<(Instant, Slot, u64)>>,
    serial: u64,
    pub max_entries: usize,
    pub function: ComputingTimeFunction,
    /// Entries in state HEALTHY (kept on every transition, so failure detection can ask
    /// "do other SCIs still report?" without a scan).
    healthy: usize,
    /// Entries evicted to make room since start (YANG cache/state/evictions).
    pub evictions: u64,
}

impl MetricCache {
    pub fn new(max_entries: usize) -> Self {
        MetricCache {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            services: HashMap::default(),
            lru: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            timers: BinaryHeap::new(),
            serial: 0,
            max_entries: max_entries.max(1),
            function: ComputingTimeFunction::default(),
            healthy: 0,
            evictions: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// How many entries are HEALTHY (reporting within their TTL).
    pub fn healthy_count(&self) -> usize {
        self.healthy
    }

    fn count_transition(&mut self, from: SciState, to: SciState) {
        if from == SciState::Healthy {
            self.healthy = self.healthy.saturating_sub(1);
        }
        if to == SciState::Healthy {
            self.healthy += 1;
        }
    }

    fn slot(&self, csci_id: &str) -> Option<Slot> {
        self.index.get(csci_id).copied()
    }

    /// The slot of an SCI's entry: the report path looks the CSCI-ID up once and works on
    /// the slot from then on (valid until the entry is removed).
    pub fn lookup(&self, csci_id: &str) -> Option<Slot> {
        self.slot(csci_id)
    }

    pub fn at(&self, slot: Slot) -> Option<&Entry> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    pub fn at_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// The mark of a service's last `SiteChanged` in the engine's event list.
    pub(crate) fn site_mark(&mut self, cs_id: &str) -> Option<&mut u32> {
        self.services.get_mut(cs_id).map(|s| &mut s.event_at)
    }

    pub fn get(&self, csci_id: &str) -> Option<&Entry> {
        self.slot(csci_id).and_then(|s| self.at(s))
    }

    pub fn get_mut(&mut self, csci_id: &str) -> Option<&mut Entry> {
        self.slot(csci_id).and_then(|s| self.at_mut(s))
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(Option::as_ref)
    }

    /// The SCIs currently counted for a CS-ID (no scan of the whole cache).
    pub fn members(&self, cs_id: &str) -> impl Iterator<Item = &Entry> {
        self.services.get(cs_id).into_iter().flat_map(|s| s.members.iter().filter_map(|&slot| self.at(slot)))
    }

    pub fn services(&self) -> impl Iterator<Item = &CsId> {
        self.services.keys()
    }

    /// The site metrics of a CS-ID before site-scope policy.
    pub fn site(&self, cs_id: &str) -> Option<SiteMetrics> {
        self.services.get(cs_id).map(|s| s.aggregate.site(cs_id, self.function))
    }

    /// Takes a linked slot out of the LRU list.
    fn unlink(&mut self, slot: Slot) {
        let [prev, next] = self.lru[slot as usize];
        match prev {
            NIL => self.lru_head = next,
            p => self.lru[p as usize][1] = next,
        }
        match next {
            NIL => self.lru_tail = prev,
            n => self.lru[n as usize][0] = prev,
        }
    }

    /// Links an unlinked slot as the most recently used.
    fn push_back(&mut self, slot: Slot) {
        let tail = self.lru_tail;
        if self.lru.len() <= slot as usize {
            self.lru.resize(slot as usize + 1, [NIL, NIL]);
        }
        self.lru[slot as usize] = [tail, NIL];
        match tail {
            NIL => self.lru_head = slot,
            t => self.lru[t as usize][1] = slot,
        }
        self.lru_tail = slot;
    }

    /// Makes a linked slot the most recently used.
    fn touch(&mut self, slot: Slot) {
        if self.lru_tail != slot {
            self.unlink(slot);
            self.push_back(slot);
        }
    }

    /// Sets the entry's next timer, queueing a reminder unless one is already queued (an
    /// earlier reminder re-queues itself for the new time when it comes due).
    fn schedule(&mut self, slot: Slot, at: Instant, timer: Timer) {
        let Some(e) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else { return };
        e.due = Some((at, timer));
        if !e.queued {
            e.queued = true;
            self.timers.push(Reverse((at, slot, e.serial)));
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
        if let Some(e) = self.get_mut(csci_id) {
            e.ttl = ttl;
            e.grace = grace;
            return events;
        }
        if self.len() >= self.max_entries {
            events.extend(self.evict_lru(csci_id));
        }
        self.serial += 1;
        let entry = Entry {
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
            due: None,
            queued: false,
            serial: self.serial,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(entry);
                s
            }
            None => {
                self.slots.push(Some(entry));
                (self.slots.len() - 1) as Slot
            }
        };
        self.index.insert(csci_id.into(), slot);
        self.push_back(slot);
        events
    }

    fn evict_lru(&mut self, keep: &str) -> Vec<CacheEvent> {
        let mut slot = self.lru_head;
        while slot != NIL {
            if let Some(e) = self.at(slot).filter(|e| e.csci_id != keep) {
                let (id, cs_id, state) = (e.csci_id.clone(), e.cs_id.clone(), e.state);
                let (sequence, timestamp) = (e.history.last_sequence, e.history.last_timestamp);
                let mut events = self.remove(&id);
                self.evictions += 1;
                events.push(CacheEvent::Evicted { csci_id: id, cs_id, state, sequence, timestamp });
                return events;
            }
            slot = self.lru[slot as usize][1];
        }
        Vec::new()
    }

    /// Removes an SCI (deregistered or evicted).
    pub fn remove(&mut self, csci_id: &str) -> Vec<CacheEvent> {
        let Some(slot) = self.index.remove(csci_id) else { return Vec::new() };
        self.unlink(slot);
        let Some(e) = self.slots.get_mut(slot as usize).and_then(Option::take) else { return Vec::new() };
        self.free.push(slot);
        self.count_transition(e.state, SciState::Active);
        let mut events = Vec::new();
        if let Some(cs) = &e.cs_id {
            self.leave(cs, slot, e.contribution().as_ref());
            events.push(CacheEvent::SiteChanged { cs_id: cs.clone() });
        }
        events
    }

    fn leave(&mut self, cs_id: &str, slot: Slot, contribution: Option<&Contribution>) {
        if let Some(s) = self.services.get_mut(cs_id) {
            s.aggregate.update(contribution, None);
            s.members.remove(&slot);
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
        let Some(slot) = self.slot(&report.csci_id) else { return events };
        if self.accept_at(slot, report.view(), effective, flags, now, wall, &mut events) {
            events.push(CacheEvent::SiteChanged { cs_id: report.cs_id.clone() });
        }
        events
    }

    /// [`accept`](Self::accept) for the entry in `slot`, adding what changed to `events`
    /// except the `SiteChanged` of the report's own CS-ID: it returns whether that site
    /// changed (always, once stored), and the caller raises it once per batch.
    #[allow(clippy::too_many_arguments)]
    pub fn accept_at(
        &mut self,
        slot: Slot,
        report: ReportRef<'_>,
        effective: Metrics,
        flags: Flags,
        now: Instant,
        wall: DateTime<Utc>,
        events: &mut Vec<CacheEvent>,
    ) -> bool {
        let Some(e) = self.at_mut(slot) else { return false };
        let old_contribution = e.contribution();
        let old_state = e.state;
        // The CS-ID is only replaced (allocated) when it changes.
        let old_cs = match &e.cs_id {
            Some(cs) if *cs == report.cs_id => None,
            _ => Some(e.cs_id.replace(report.cs_id.to_owned())),
        };
        e.reported = Some(report.metrics);
        e.effective = Some(effective);
        e.timestamp = Some(report.timestamp);
        e.sequence = Some(report.sequence);
        e.flags = Flags { pull_pending: false, gas_zeroed: false, ..flags };
        e.last_update = now;
        if let Some((to, reason)) = sci_state::next(old_state, Input::Report) {
            e.state = to;
            e.last_state_change = wall;
            events.push(CacheEvent::StateChanged { csci_id: report.csci_id.to_owned(), from: old_state, to, reason });
        }
        let new_contribution = e.contribution();
        let (ttl, new_state) = (e.ttl, e.state);
        self.count_transition(old_state, new_state);
        match old_cs {
            None => {
                if old_contribution != new_contribution {
                    if let Some(s) = self.services.get_mut(report.cs_id) {
                        s.aggregate.update(old_contribution.as_ref(), new_contribution.as_ref());
                    }
                }
            }
            Some(Some(cs)) => {
                self.leave(&cs, slot, old_contribution.as_ref());
                events.push(CacheEvent::SiteChanged { cs_id: cs });
                self.join(report.cs_id, slot, None, new_contribution.as_ref());
            }
            Some(None) => self.join(report.cs_id, slot, old_contribution.as_ref(), new_contribution.as_ref()),
        }
        self.touch(slot);
        self.schedule(slot, now + ttl, Timer::Ttl);
        true
    }

    fn join(&mut self, cs_id: &str, slot: Slot, old: Option<&Contribution>, new: Option<&Contribution>) {
        if !self.services.contains_key(cs_id) {
            self.services.insert(cs_id.to_owned(), Service::default());
        }
        if let Some(s) = self.services.get_mut(cs_id) {
            s.members.insert(slot);
            s.aggregate.update(old, new);
        }
    }

    /// Re-applies SCI-scope policy to every entry (a policy change), keeping aggregates right.
    pub fn reapply(&mut self, mut f: impl FnMut(&Metrics) -> Metrics) -> Vec<CacheEvent> {
        let mut changed = HashSet::new();
        for slot in 0..self.slots.len() as Slot {
            let Some(e) = self.at_mut(slot) else { continue };
            let (Some(reported), Some(cs)) = (e.reported, e.cs_id.clone()) else { continue };
            let old = e.contribution();
            e.effective = Some(f(&reported));
            let new = e.contribution();
            if old != new {
                self.join(&cs, slot, old.as_ref(), new.as_ref());
                changed.insert(cs);
            }
        }
        changed.into_iter().map(|cs_id| CacheEvent::SiteChanged { cs_id }).collect()
    }

    /// Moves an SCI to FAILED at once (seed 004, SCI Failure Detection: an active probe
    /// found it failed, or an external health monitor said so): GAS contribution 0, its
    /// pending timers void; the next accepted report brings it back. Nothing happens when
    /// the state machine refuses the input (e.g. a probe result for an SCI that reported
    /// meanwhile).
    pub fn fail(&mut self, csci_id: &str, input: Input, wall: DateTime<Utc>) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        let Some(slot) = self.slot(csci_id) else { return events };
        let Some(e) = self.at_mut(slot) else { return events };
        if sci_state::next(e.state, input).is_none() {
            return events;
        }
        e.due = None;
        self.transition(slot, input, wall, &mut events);
        events
    }

    /// Applies a state-machine input to a slot's entry: the new state and its flags (STALE:
    /// pull pending, with a `PullNeeded`; FAILED: GAS zeroed), the transition counted and
    /// announced, and the entry's service re-aggregated. Returns the new state, or `None`
    /// when the input does not change the state.
    fn transition(
        &mut self,
        slot: Slot,
        input: Input,
        wall: DateTime<Utc>,
        events: &mut Vec<CacheEvent>,
    ) -> Option<SciState> {
        let e = self.at_mut(slot)?;
        let (to, reason) = sci_state::next(e.state, input)?;
        let from = e.state;
        let old = e.contribution();
        e.state = to;
        e.last_state_change = wall;
        match to {
            SciState::Stale => {
                e.flags.pull_pending = true;
                events.push(CacheEvent::PullNeeded { csci_id: e.csci_id.clone() });
            }
            SciState::Failed => {
                e.flags.pull_pending = false;
                e.flags.gas_zeroed = true;
            }
            _ => {}
        }
        let new = e.contribution();
        let (id, cs) = (e.csci_id.clone(), e.cs_id.clone());
        self.count_transition(from, to);
        events.push(CacheEvent::StateChanged { csci_id: id, from, to, reason });
        if let Some(cs) = cs {
            if old != new {
                self.join(&cs, slot, old.as_ref(), new.as_ref());
            }
            events.push(CacheEvent::SiteChanged { cs_id: cs });
        }
        Some(to)
    }

    /// The next time a TTL or grace timer may be due (a reminder can be early: the engine
    /// then wakes, finds nothing due and sleeps until the re-queued time).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, ..))| *t)
    }

    /// Fires the timers due at `now`: HEALTHY → STALE (pull), STALE → FAILED (withdrawn).
    pub fn expire(&mut self, now: Instant, wall: DateTime<Utc>) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        while let Some(&Reverse((reminder, slot, serial))) = self.timers.peek() {
            if reminder > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.slots.get_mut(slot as usize).and_then(Option::as_mut) else { continue };
            if e.serial != serial {
                continue;
            }
            e.queued = false;
            let Some((at, timer)) = e.due else { continue };
            if at > reminder {
                // A later report moved the timer: remind again then (in order with the rest).
                e.queued = true;
                self.timers.push(Reverse((at, slot, serial)));
                continue;
            }
            e.due = None;
            let input = match timer {
                Timer::Ttl => Input::TtlExpired,
                Timer::Grace => Input::GraceExpired,
            };
            let grace = e.grace;
            let to = self.transition(slot, input, wall, &mut events);
            if to == Some(SciState::Stale) {
                self.schedule(slot, at + grace, Timer::Grace);
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
    async fn seed004_sci_failure_detection_fail_at_once_zeroes_gas_and_voids_timers() {
        let mut c = MetricCache::new(100);
        let (now, wall) = (Instant::now(), Utc::now());
        for id in ["a", "b"] {
            c.register(id, TTL, GRACE, now, wall);
            let r = report(id, "AR1", 1, 400);
            c.accept(&r, r.metrics, Flags::default(), now, wall);
        }
        assert_eq!((c.site("AR1").unwrap().gas, c.healthy_count()), (800, 2));
        // A probe result for a HEALTHY SCI is moot.
        assert!(c.fail("a", Input::ProbeFailed, wall).is_empty());
        // The health monitor fails it before its TTL: GAS 0 at once.
        let ev = c.fail("a", Input::HealthMonitor, wall);
        assert!(ev.contains(&CacheEvent::StateChanged {
            csci_id: "a".into(),
            from: SciState::Healthy,
            to: SciState::Failed,
            reason: Reason::HealthMonitor
        }));
        assert!(ev.contains(&CacheEvent::SiteChanged { cs_id: "AR1".into() }));
        assert_eq!((c.site("AR1").unwrap().gas, c.healthy_count()), (400, 1));
        assert!(c.get("a").unwrap().flags.gas_zeroed);
        // Its TTL timer no longer fires anything for it.
        let ev = c.expire(now + TTL, wall);
        assert!(!ev.iter().any(|e| matches!(e, CacheEvent::StateChanged { csci_id, .. } if csci_id == "a")), "{ev:?}");
        assert_eq!(c.get("a").unwrap().state, SciState::Failed);
        // b went STALE: a probe may fail it now.
        assert_eq!(c.get("b").unwrap().state, SciState::Stale);
        let ev = c.fail("b", Input::ProbeFailed, wall);
        assert!(ev.iter().any(|e| matches!(e, CacheEvent::StateChanged { reason: Reason::ProbeFailed, .. })));
        assert_eq!((c.site("AR1").unwrap().gas, c.healthy_count()), (0, 0));
        // The next accepted report brings it back.
        let r = report("a", "AR1", 2, 300);
        c.accept(&r, r.metrics, Flags::default(), now + TTL, wall);
        assert_eq!(
            (c.get("a").unwrap().state, c.site("AR1").unwrap().gas, c.healthy_count()),
            (SciState::Healthy, 300, 1)
        );
        c.remove("a");
        assert_eq!(c.healthy_count(), 0);
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
        assert!(ev.iter().any(|e| matches!(e, CacheEvent::Evicted { csci_id, cs_id: Some(cs), state: SciState::Healthy, sequence: None, .. } if csci_id == "b" && cs == "AR1")));
        assert_eq!(c.evictions, 1);
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

    #[test]
    fn lru_order_follows_reports_and_survives_slot_reuse() {
        let mut c = MetricCache::new(3);
        let (now, wall) = (Instant::now(), Utc::now());
        let accept = |c: &mut MetricCache, id: &str, seq| {
            let r = report(id, "AR1", seq, 10);
            c.accept(&r, r.metrics, Flags::default(), now, wall)
        };
        for id in ["a", "b", "c"] {
            c.register(id, TTL, GRACE, now, wall);
        }
        accept(&mut c, "a", 1);
        let evicted = |ev: Vec<CacheEvent>| {
            ev.into_iter().find_map(|e| match e {
                CacheEvent::Evicted { csci_id, .. } => Some(csci_id),
                _ => None,
            })
        };
        // Order now (least recent first): b, c, a.
        assert_eq!(evicted(c.register("d", TTL, GRACE, now, wall)).as_deref(), Some("b"));
        accept(&mut c, "c", 1);
        // c, a, d → a, d, c: a goes next.
        assert_eq!(evicted(c.register("e", TTL, GRACE, now, wall)).as_deref(), Some("a"));
        // Removing the middle entry and reusing its slot keeps the list whole.
        c.remove("c");
        c.register("f", TTL, GRACE, now, wall);
        assert_eq!(c.len(), 3);
        assert_eq!(evicted(c.register("g", TTL, GRACE, now, wall)).as_deref(), Some("d"));
        assert_eq!(evicted(c.register("h", TTL, GRACE, now, wall)).as_deref(), Some("e"));
        assert_eq!(evicted(c.register("i", TTL, GRACE, now, wall)).as_deref(), Some("f"));
        let mut left: Vec<_> = c.entries().map(|e| e.csci_id.clone()).collect();
        left.sort();
        assert_eq!(left, ["g", "h", "i"]);
        assert_eq!(c.site("AR1"), None, "evicted members left their service");
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_reminder_per_entry_however_many_reports() {
        let mut c = MetricCache::new(10);
        let (now, wall) = (Instant::now(), Utc::now());
        c.register("a", TTL, GRACE, now, wall);
        for seq in 1..1000 {
            let r = report("a", "AR1", seq, 10);
            c.accept(&r, r.metrics, Flags::default(), now + Duration::from_millis(seq), wall);
        }
        assert_eq!(c.timers.len(), 1);
        // The reminder comes due early, is re-queued for the last report's TTL, then fires.
        assert!(c.expire(now + Duration::from_millis(1) + TTL, wall).is_empty());
        assert_eq!(c.next_deadline(), Some(now + Duration::from_millis(999) + TTL));
        let ev = c.expire(now + Duration::from_millis(999) + TTL, wall);
        assert!(ev.contains(&CacheEvent::PullNeeded { csci_id: "a".into() }));
    }
}
