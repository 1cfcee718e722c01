//! The Metric Cache (seed 004): the latest validated metrics of each SCI with O(1) lookup
//! by CSCI-ID, the SCIs of each CS-ID with their incrementally maintained site aggregate,
//! soft-state aging (TTL → STALE → grace period → FAILED), a maximum size with
//! least-recently-used eviction, and the per-SCI state machine.
//!
//! One slot per SCI (issue 14): the registration (hard state: CS-IDs, authentication,
//! expected interval) and the cache entry (soft state) share it, so a report finds both
//! with one hash lookup, and the CSCI-ID is stored once, in the slot (the index holds slot
//! numbers only). A registered SCI whose entry was evicted keeps its slot with the
//! registration alone; an entry without a registration (the cache on its own, in tests)
//! is as before. CS-IDs are interned (`Arc<str>`, shared by the registrations, the entries
//! and the service table), times are 64-bit nanosecond ticks, and the validator's memory
//! (last sequence, timestamp, metrics and arrival) is the entry's own fields, not a copy.
//!
//! Entries live in a slab (a `Vec` of slots); the LRU order is a doubly linked list of
//! slot numbers kept in its own dense array (moving an entry to the back touches 8-byte
//! links, not three whole entries), and each entry has at most one reminder in the timer
//! heap, so a report allocates nothing here.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use compact_str::CompactString;
use hashbrown::HashTable;
use tokio::time::Instant;

use super::aggregate::{Aggregate, ComputingTimeFunction, Contribution};
use super::core::SciConfig;
use super::model::{CsId, CsciId, Metrics, Report, ReportRef, SiteMetrics};
use super::sci_state::{self, Input, Reason, SciState};
use super::validate::Past;

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

/// Monotonic time as a 64-bit count of nanoseconds from a process-wide origin ten years
/// before the first use (half the size of an `Instant`; exact, and good for centuries).
type Tick = u64;

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(10 * 365 * 86_400)).unwrap_or(now)
    })
}

fn tick(t: Instant) -> Tick {
    u64::try_from(t.saturating_duration_since(origin()).as_nanos()).unwrap_or(u64::MAX)
}

fn instant(t: Tick) -> Instant {
    origin() + Duration::from_nanos(t)
}

fn reported_healthy(m: Option<&Metrics>) -> bool {
    m.is_some_and(|m| m.health == super::model::Health::Healthy)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// An SCI's registration (the hard state of seed 004), as the slot keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// Shared by every SCI with the same list (`MetricCache::lists`).
    cs_ids: Arc<[Arc<str>]>,
    credential_ref: Option<Box<str>>,
    /// The expected interval in nanoseconds (bits 0..63, saturating at 292 years) and
    /// `authentication none` (bit 63): one word, so the slot stays at 216 bytes.
    interval_and_none: u64,
}

const AUTH_NONE: u64 = 1 << 63;

impl Registration {
    /// The CS-IDs it may report for.
    pub fn cs_ids(&self) -> impl Iterator<Item = &str> {
        self.cs_ids.iter().map(|c| &**c)
    }

    pub fn may_report_for(&self, cs_id: &str) -> bool {
        self.cs_ids.iter().any(|c| **c == *cs_id)
    }

    pub fn credential_ref(&self) -> Option<&str> {
        self.credential_ref.as_deref()
    }

    pub fn unauthenticated(&self) -> bool {
        self.interval_and_none & AUTH_NONE != 0
    }

    pub fn expected_interval(&self) -> Duration {
        Duration::from_nanos(self.interval_and_none & !AUTH_NONE)
    }

    /// The YANG `authentication` value (see [`SciConfig::authentication`]).
    pub fn authentication(&self) -> &'static str {
        match (&self.credential_ref, self.unauthenticated()) {
            (_, true) => "none",
            (Some(_), false) => "credential",
            (None, false) => "certificate",
        }
    }

    /// The registration as configured.
    pub fn config(&self) -> SciConfig {
        SciConfig {
            cs_ids: self.cs_ids().map(str::to_owned).collect(),
            credential_ref: self.credential_ref.as_deref().map(str::to_owned),
            unauthenticated: self.unauthenticated(),
            expected_interval: self.expected_interval(),
        }
    }
}

/// What the validator knows of an SCI beyond the entry's last report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Memory {
    /// The entry's last report (sequence, timestamp, metrics, arrival) is the history.
    #[default]
    Own,
    /// A new way of proving itself started a new history: nothing is remembered.
    Cleared,
    /// A new entry given the history its SCI left behind: the entry's `sequence` and
    /// `timestamp` fields hold that history, and the entry shows no report yet.
    Restored,
}

/// One SCI's slot: its registration and, while it is in the cache, its cache entry.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Inline up to 24 bytes: the index compares it on every lookup, so it sits in the
    /// slot rather than behind a pointer.
    pub csci_id: CompactString,
    /// The CS-ID of the last report.
    cs: Option<Arc<str>>,
    /// Metrics as reported (validated).
    pub reported: Option<Metrics>,
    /// Metrics after SCI-scope policy: what the site aggregate counts.
    pub effective: Option<Metrics>,
    timestamp: Option<DateTime<Utc>>,
    /// The sequence number, valid when `sequenced` (an `Option<u64>` would take 16 bytes).
    sequence: u64,
    sequenced: bool,
    pub state: SciState,
    pub flags: Flags,
    memory: Memory,
    /// Whether the slot holds a cache entry (else only a registration).
    cached: bool,
    /// Whether the timer heap holds this entry's reminder (never more than one).
    queued: bool,
    /// The timer that fires next for this entry (TTL while reporting, grace while STALE).
    due: Option<Timer>,
    due_at: Tick,
    last_update: Tick,
    pub last_state_change: DateTime<Utc>,
    ttl: u64,
    grace: u64,
    /// Tells this entry's reminders from those of an earlier entry in the same slot.
    serial: u32,
    /// Arrival times of health transitions within the flap window (none: no allocation).
    /// Boxed on purpose: 8 bytes in every slot instead of an empty `VecDeque`'s 32, for a
    /// list that exists only while an SCI flaps.
    #[allow(clippy::box_collection)]
    transitions: Option<Box<VecDeque<Tick>>>,
    registration: Option<Registration>,
}

impl Entry {
    fn new(csci_id: &str) -> Entry {
        Entry {
            csci_id: csci_id.into(),
            cs: None,
            reported: None,
            effective: None,
            timestamp: None,
            sequence: 0,
            sequenced: false,
            state: SciState::Active,
            flags: Flags::default(),
            memory: Memory::Own,
            cached: false,
            queued: false,
            due: None,
            due_at: 0,
            last_update: 0,
            last_state_change: DateTime::<Utc>::MIN_UTC,
            ttl: 0,
            grace: 0,
            serial: 0,
            transitions: None,
            registration: None,
        }
    }

    /// Back to an ACTIVE entry with nothing reported (a fresh cache entry).
    fn reset(&mut self, ttl: Duration, grace: Duration, now: Instant, wall: DateTime<Utc>, serial: u32) {
        let (id, registration) = (std::mem::take(&mut self.csci_id), self.registration.take());
        *self = Entry::new("");
        self.csci_id = id;
        self.registration = registration;
        self.cached = true;
        self.last_update = tick(now);
        self.last_state_change = wall;
        self.ttl = nanos(ttl);
        self.grace = nanos(grace);
        self.serial = serial;
    }

    fn contribution(&self) -> Option<Contribution> {
        if !sci_state::contributes(self.state) {
            return None;
        }
        self.effective.as_ref().and_then(Contribution::of)
    }

    /// The CS-ID of the last report.
    pub fn cs_id(&self) -> Option<&str> {
        self.cs.as_deref()
    }

    /// The timestamp of the last accepted report.
    pub fn timestamp(&self) -> Option<DateTime<Utc>> {
        if self.memory == Memory::Restored {
            None
        } else {
            self.timestamp
        }
    }

    /// The sequence number of the last accepted report.
    pub fn sequence(&self) -> Option<u64> {
        if self.memory == Memory::Restored {
            None
        } else {
            self.seq()
        }
    }

    pub fn last_update(&self) -> Instant {
        instant(self.last_update)
    }

    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl)
    }

    pub fn grace(&self) -> Duration {
        Duration::from_nanos(self.grace)
    }

    /// The SCI's registration, if it is registered.
    pub fn registration(&self) -> Option<&Registration> {
        self.registration.as_ref()
    }

    fn seq(&self) -> Option<u64> {
        self.sequenced.then_some(self.sequence)
    }

    fn set_seq(&mut self, s: Option<u64>) {
        (self.sequence, self.sequenced) = (s.unwrap_or(0), s.is_some());
    }

    /// Time left before the entry goes STALE (zero once stale or failed).
    pub fn ttl_remaining(&self, now: Instant) -> Duration {
        match self.state {
            SciState::Healthy => (self.last_update() + self.ttl()).saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// A new way of proving itself starts a new history (`Core::set_sci`).
    pub fn forget_history(&mut self) {
        if self.memory == Memory::Restored {
            self.set_seq(None);
            self.timestamp = None;
        }
        self.memory = Memory::Cleared;
        self.transitions = None;
    }

    /// Gives a new entry the history its SCI left behind (`retained.rs`).
    pub fn restore_history(&mut self, sequence: Option<u64>, timestamp: Option<DateTime<Utc>>) {
        if !self.sequenced && self.timestamp.is_none() && self.memory != Memory::Cleared {
            self.set_seq(sequence);
            self.timestamp = timestamp;
            self.memory = Memory::Restored;
        }
    }

    /// Records the health transition of an accepted report (the validator's flap window):
    /// called before the report is stored.
    pub fn record_transition(&mut self, health: super::model::Health, now: Instant, window: Duration) {
        let changed = self.last().is_some_and(|(_, prev)| prev.health != health);
        if changed {
            self.transitions.get_or_insert_default().push_back(tick(now));
        }
        if let (Some(t), Some(start)) = (&mut self.transitions, now.checked_sub(window)) {
            let start = tick(start);
            while t.front().is_some_and(|x| *x < start) {
                t.pop_front();
            }
            if t.is_empty() {
                self.transitions = None;
            }
        }
    }
}

impl Past for Entry {
    fn last_sequence(&self) -> Option<u64> {
        if self.memory == Memory::Cleared {
            None
        } else {
            self.seq()
        }
    }

    fn last_timestamp(&self) -> Option<DateTime<Utc>> {
        if self.memory == Memory::Cleared {
            None
        } else {
            self.timestamp
        }
    }

    fn last(&self) -> Option<(Instant, Metrics)> {
        match self.memory {
            Memory::Own => self.reported.map(|m| (self.last_update(), m)),
            Memory::Cleared | Memory::Restored => None,
        }
    }

    fn transitions_since(&self, start: Option<Instant>) -> u32 {
        let start = start.map_or(0, tick);
        self.transitions.as_ref().map_or(0, |t| t.iter().filter(|x| **x >= start).count() as u32)
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
    /// Members whose last report said HEALTHY (YANG `healthy-sci-count`), kept as reports
    /// arrive so that reading it (every on-change service update) does not walk the members.
    reported_healthy: u32,
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

static SEED: OnceLock<u64> = OnceLock::new();

impl Default for IdHash {
    fn default() -> Self {
        let seed = *SEED.get_or_init(|| std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64) | 1);
        IdHash { seed }
    }
}

/// Fixes the process's hash seed before any cache exists (replay: the same recording walks
/// its services in the same order on every run). No effect once a cache was built.
pub fn fix_hash_seed(seed: u64) {
    let _ = SEED.set(seed | 1);
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.seed)
    }
}

pub struct IdHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Prefetches every cache line of a slot (x86-64; elsewhere nothing).
#[inline]
fn prefetch_lines(e: &Option<Entry>) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = std::ptr::from_ref(e).cast::<i8>();
        for off in (0..std::mem::size_of::<Option<Entry>>()).step_by(64) {
            // SAFETY: SSE is part of the x86-64 baseline, and a prefetch is a hint that
            // reads nothing the program sees and cannot fault whatever the address;
            // `wrapping_add` keeps the address arithmetic defined. std has no stable safe
            // prefetch (`core::intrinsics::prefetch_read_data` is unstable).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = e;
}

/// The first eight bytes of `b` (at least eight), little-endian.
#[inline]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}

/// The first four bytes of `b` (at least four), little-endian.
#[inline]
fn half(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

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
        let n = bytes.len();
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(word(c));
        }
        let rest = chunks.remainder().len();
        // The tail is read with fixed-size loads, never copied byte by byte into a buffer
        // (a variable-length copy stalls the load that follows it): past 8 bytes, the last
        // eight (overlapping the last whole word); below, two overlapping halves.
        let tail = match (rest, n) {
            (0, _) => return,
            (_, 8..) => word(&bytes[n - 8..]),
            (4.., _) => u64::from(half(bytes)) | (u64::from(half(&bytes[n - 4..])) << 32),
            _ => u64::from(bytes[0]) | (u64::from(bytes[n / 2]) << 16) | (u64::from(bytes[n - 1]) << 32),
        };
        self.mix(tail ^ ((rest as u64) << 59));
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
    /// CSCI-ID → slot; the key is the slot's own `csci_id`.
    index: HashTable<Slot>,
    hash: IdHash,
    slots: Vec<Option<Entry>>,
    free: Vec<Slot>,
    /// Slots holding a cache entry (the others hold a registration only).
    cached: usize,
    /// Slots holding a registration.
    registered: usize,
    /// The CS-IDs in use, each stored once.
    names: HashSet<Arc<str>, IdHash>,
    /// The registrations' CS-ID lists, each stored once (many SCIs serve the same services).
    lists: HashSet<Arc<[Arc<str>]>, IdHash>,
    services: HashMap<Arc<str>, Service, IdHash>,
    /// LRU links per slot: [towards least recently used, towards most recently used].
    lru: Vec<[Slot; 2]>,
    /// Least and most recently used ends of the LRU list.
    lru_head: Slot,
    lru_tail: Slot,
    /// One reminder per entry at most: (when, slot, serial). A reminder may be earlier than
    /// the entry's timer (a report pushed the TTL back); it is then re-queued.
    timers: BinaryHeap<Reverse<(Tick, Slot, u32)>>,
    serial: u32,
    pub max_entries: usize,
    pub function: ComputingTimeFunction,
    /// Entries in state HEALTHY (kept on every transition, so failure detection can ask
    /// "do other SCIs still report?" without a scan).
    healthy: usize,
    /// Entries in state STALE and FAILED, kept the same way (ACTIVE is the rest).
    stale: usize,
    failed: usize,
    /// Entries evicted to make room since start (YANG cache/state/evictions).
    pub evictions: u64,
}

impl MetricCache {
    pub fn new(max_entries: usize) -> Self {
        MetricCache {
            index: HashTable::new(),
            hash: IdHash::default(),
            slots: Vec::new(),
            free: Vec::new(),
            cached: 0,
            registered: 0,
            names: HashSet::default(),
            lists: HashSet::default(),
            services: HashMap::default(),
            lru: Vec::new(),
            lru_head: NIL,
            lru_tail: NIL,
            timers: BinaryHeap::new(),
            serial: 0,
            max_entries: max_entries.max(1),
            function: ComputingTimeFunction::default(),
            healthy: 0,
            stale: 0,
            failed: 0,
            evictions: 0,
        }
    }

    /// Entries in the cache.
    pub fn len(&self) -> usize {
        self.cached
    }

    pub fn is_empty(&self) -> bool {
        self.cached == 0
    }

    /// How many entries are HEALTHY (reporting within their TTL).
    pub fn healthy_count(&self) -> usize {
        self.healthy
    }

    /// Entries per SCI state, without a scan.
    pub fn state_counts(&self) -> [(SciState, usize); 4] {
        let active = self.cached.saturating_sub(self.healthy + self.stale + self.failed);
        [
            (SciState::Active, active),
            (SciState::Healthy, self.healthy),
            (SciState::Stale, self.stale),
            (SciState::Failed, self.failed),
        ]
    }

    fn count_transition(&mut self, from: SciState, to: SciState) {
        match from {
            SciState::Healthy => self.healthy = self.healthy.saturating_sub(1),
            SciState::Stale => self.stale = self.stale.saturating_sub(1),
            SciState::Failed => self.failed = self.failed.saturating_sub(1),
            SciState::Active => {}
        }
        match to {
            SciState::Healthy => self.healthy += 1,
            SciState::Stale => self.stale += 1,
            SciState::Failed => self.failed += 1,
            SciState::Active => {}
        }
    }

    /// The CS-ID's shared copy.
    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(a) = self.names.get(name) {
            return a.clone();
        }
        let a: Arc<str> = name.into();
        self.names.insert(a.clone());
        a
    }

    /// Drops a holder of a CS-ID; the last one out takes it from the table.
    fn release(&mut self, name: Arc<str>) {
        // The table's own reference and this one.
        if Arc::strong_count(&name) == 2 {
            self.names.remove(&*name);
        }
    }

    /// A hint, with no effect on any result: starts loading into the CPU's cache the slot
    /// the CSCI-ID probably has (the first index entry whose hash tag matches; the key is
    /// not compared, since comparing would wait for the very load this starts).
    #[inline]
    pub fn prefetch(&self, csci_id: &str) {
        let h = self.hash.hash_one(csci_id);
        if let Some(e) = self.index.find(h, |_| true).and_then(|&s| self.slots.get(s as usize)) {
            prefetch_lines(e);
        }
    }

    /// The slot of a CSCI-ID, with or without a cache entry.
    fn find(&self, csci_id: &str) -> Option<Slot> {
        let h = self.hash.hash_one(csci_id);
        let slots = &self.slots;
        self.index
            .find(h, |&s| slots.get(s as usize).and_then(Option::as_ref).is_some_and(|e| *e.csci_id == *csci_id))
            .copied()
    }

    /// A new slot for a CSCI-ID that has none.
    fn insert(&mut self, csci_id: &str) -> Slot {
        let entry = Entry::new(csci_id);
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
        let (hash, slots) = (self.hash, &self.slots);
        let rehash = |s: &Slot| slots[*s as usize].as_ref().map_or(0, |e| hash.hash_one(&*e.csci_id));
        self.index.insert_unique(hash.hash_one(csci_id), slot, rehash);
        slot
    }

    /// Frees a slot that holds neither a registration nor a cache entry.
    fn free_if_empty(&mut self, slot: Slot) {
        let Some(e) = self.slot_ref(slot) else { return };
        if e.cached || e.registration.is_some() {
            return;
        }
        let h = self.hash.hash_one(&*e.csci_id);
        if let Ok(found) = self.index.find_entry(h, |&s| s == slot) {
            found.remove();
        }
        self.slots[slot as usize] = None;
        self.free.push(slot);
    }

    fn slot_ref(&self, slot: Slot) -> Option<&Entry> {
        self.slots.get(slot as usize).and_then(Option::as_ref)
    }

    fn slot_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    fn slot(&self, csci_id: &str) -> Option<Slot> {
        self.find(csci_id).filter(|&s| self.at(s).is_some())
    }

    /// The slot of an SCI, registered or cached: the report path looks the CSCI-ID up
    /// once and works on the slot from then on (valid until the SCI is removed).
    pub fn lookup(&self, csci_id: &str) -> Option<Slot> {
        self.find(csci_id)
    }

    /// The cache entry in a slot.
    pub fn at(&self, slot: Slot) -> Option<&Entry> {
        self.slot_ref(slot).filter(|e| e.cached)
    }

    pub fn at_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slot_mut(slot).filter(|e| e.cached)
    }

    /// The registration in a slot.
    pub fn registration_at(&self, slot: Slot) -> Option<&Registration> {
        self.slot_ref(slot).and_then(|e| e.registration.as_ref())
    }

    /// The mark of a service's last `SiteChanged` in the engine's event list.
    pub(crate) fn site_mark(&mut self, cs_id: &str) -> Option<&mut u32> {
        self.services.get_mut(cs_id).map(|s| &mut s.event_at)
    }

    pub fn get(&self, csci_id: &str) -> Option<&Entry> {
        self.find(csci_id).and_then(|s| self.at(s))
    }

    pub fn get_mut(&mut self, csci_id: &str) -> Option<&mut Entry> {
        self.find(csci_id).and_then(|s| self.at_mut(s))
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().filter_map(Option::as_ref).filter(|e| e.cached)
    }

    // ---- the registry (hard state) ----

    /// An SCI's registration.
    pub fn registration(&self, csci_id: &str) -> Option<&Registration> {
        self.find(csci_id).and_then(|s| self.registration_at(s))
    }

    /// Every registered SCI.
    pub fn registrations(&self) -> impl Iterator<Item = (&str, &Registration)> {
        self.slots.iter().filter_map(Option::as_ref).filter_map(|e| Some((&*e.csci_id, e.registration.as_ref()?)))
    }

    /// How many SCIs are registered.
    pub fn registered(&self) -> usize {
        self.registered
    }

    /// Registers an SCI or replaces its registration; returns the one replaced (without
    /// its CS-IDs).
    pub fn set_registration(&mut self, csci_id: &str, sci: &SciConfig) -> Option<Registration> {
        let cs_ids = self.intern_list(&sci.cs_ids);
        let reg = Registration {
            cs_ids,
            credential_ref: sci.credential_ref.as_deref().map(Into::into),
            interval_and_none: nanos(sci.expected_interval).min(!AUTH_NONE)
                | if sci.unauthenticated { AUTH_NONE } else { 0 },
        };
        let slot = self.find(csci_id).unwrap_or_else(|| self.insert(csci_id));
        let e = self.slot_mut(slot)?;
        let old = e.registration.replace(reg);
        if old.is_none() {
            self.registered += 1;
        }
        old.map(|o| self.release_registration(o))
    }

    /// Deregisters an SCI (its cache entry, if any, stays until removed); returns the
    /// registration (without its CS-IDs).
    pub fn remove_registration(&mut self, csci_id: &str) -> Option<Registration> {
        let slot = self.find(csci_id)?;
        let old = self.slot_mut(slot)?.registration.take()?;
        self.registered -= 1;
        self.free_if_empty(slot);
        Some(self.release_registration(old))
    }

    /// The shared copy of a CS-ID list.
    fn intern_list(&mut self, cs_ids: &[CsId]) -> Arc<[Arc<str>]> {
        let names: Vec<Arc<str>> = cs_ids.iter().map(|c| self.intern(c)).collect();
        if let Some(l) = self.lists.get(&names[..]) {
            return l.clone();
        }
        let l: Arc<[Arc<str>]> = names.into();
        self.lists.insert(l.clone());
        l
    }

    /// Releases a registration's CS-ID list (the last holder takes it and its names from
    /// the tables); returns the registration without it.
    fn release_registration(&mut self, mut r: Registration) -> Registration {
        let list = std::mem::replace(&mut r.cs_ids, Arc::from(Vec::new()));
        if Arc::strong_count(&list) == 2 {
            self.lists.remove(&list);
            let names = list.to_vec();
            drop(list);
            for c in names {
                self.release(c);
            }
        }
        r
    }

    /// The SCIs currently counted for a CS-ID (no scan of the whole cache).
    pub fn members(&self, cs_id: &str) -> impl Iterator<Item = &Entry> {
        self.services.get(cs_id).into_iter().flat_map(|s| s.members.iter().filter_map(|&slot| self.at(slot)))
    }

    pub fn services(&self) -> impl Iterator<Item = &str> {
        self.services.keys().map(|k| &**k)
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
    fn schedule(&mut self, slot: Slot, at: Tick, timer: Timer) {
        let Some(e) = self.at_mut(slot) else { return };
        e.due = Some(timer);
        e.due_at = at;
        if !e.queued {
            e.queued = true;
            let serial = e.serial;
            self.timers.push(Reverse((at, slot, serial)));
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
            e.ttl = nanos(ttl);
            e.grace = nanos(grace);
            return events;
        }
        if self.len() >= self.max_entries {
            events.extend(self.evict_lru(csci_id));
        }
        self.serial = self.serial.wrapping_add(1);
        let serial = self.serial;
        let slot = self.find(csci_id).unwrap_or_else(|| self.insert(csci_id));
        if let Some(e) = self.slot_mut(slot) {
            e.reset(ttl, grace, now, wall, serial);
        }
        self.cached += 1;
        self.push_back(slot);
        events
    }

    fn evict_lru(&mut self, keep: &str) -> Vec<CacheEvent> {
        let mut slot = self.lru_head;
        while slot != NIL {
            if let Some(e) = self.at(slot).filter(|e| *e.csci_id != *keep) {
                let (id, cs_id, state) = (e.csci_id.to_string(), e.cs_id().map(str::to_owned), e.state);
                let (sequence, timestamp) = (e.last_sequence(), e.last_timestamp());
                let mut events = self.remove(&id);
                self.evictions += 1;
                events.push(CacheEvent::Evicted { csci_id: id, cs_id, state, sequence, timestamp });
                return events;
            }
            slot = self.lru[slot as usize][1];
        }
        Vec::new()
    }

    /// Removes an SCI's cache entry (deregistered or evicted); a registration stays.
    pub fn remove(&mut self, csci_id: &str) -> Vec<CacheEvent> {
        let Some(slot) = self.slot(csci_id) else { return Vec::new() };
        self.unlink(slot);
        let Some(e) = self.at_mut(slot) else { return Vec::new() };
        let (state, contribution, cs) = (e.state, e.contribution(), e.cs.take());
        let healthy = reported_healthy(e.reported.as_ref());
        e.cached = false;
        e.due = None;
        e.transitions = None;
        self.cached -= 1;
        self.count_transition(state, SciState::Active);
        let mut events = Vec::new();
        if let Some(cs) = cs {
            self.count_healthy(&cs, healthy, false);
            self.leave(&cs, slot, contribution.as_ref());
            events.push(CacheEvent::SiteChanged { cs_id: cs.to_string() });
            self.release(cs);
        }
        self.free_if_empty(slot);
        events
    }

    fn leave(&mut self, cs_id: &str, slot: Slot, contribution: Option<&Contribution>) {
        if let Some(s) = self.services.get_mut(cs_id) {
            s.aggregate.update(contribution, None);
            s.members.remove(&slot);
            if s.members.is_empty() {
                if let Some((k, _)) = self.services.remove_entry(cs_id) {
                    self.release(k);
                }
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
        let same_cs = match self.at(slot) {
            None => return false,
            Some(e) => e.cs.as_deref() == Some(report.cs_id),
        };
        // The CS-ID is only replaced (looked up in the names) when it changes.
        let new_cs = (!same_cs).then(|| self.intern(report.cs_id));
        let Some(e) = self.at_mut(slot) else { return false };
        let old_contribution = e.contribution();
        let old_state = e.state;
        let old_cs = new_cs.map(|cs| e.cs.replace(cs));
        let was_healthy = reported_healthy(e.reported.as_ref());
        let is_healthy = report.metrics.health == super::model::Health::Healthy;
        e.reported = Some(report.metrics);
        e.effective = Some(effective);
        e.timestamp = Some(report.timestamp);
        e.set_seq(Some(report.sequence));
        e.memory = Memory::Own;
        e.flags = Flags { pull_pending: false, gas_zeroed: false, ..flags };
        e.last_update = tick(now);
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
                if was_healthy != is_healthy {
                    self.count_healthy(report.cs_id, true, is_healthy);
                }
            }
            Some(Some(cs)) => {
                self.count_healthy(&cs, was_healthy, false);
                self.leave(&cs, slot, old_contribution.as_ref());
                events.push(CacheEvent::SiteChanged { cs_id: cs.to_string() });
                self.release(cs);
                self.join(report.cs_id, slot, None, new_contribution.as_ref());
                self.count_healthy(report.cs_id, is_healthy, true);
            }
            Some(None) => {
                self.join(report.cs_id, slot, old_contribution.as_ref(), new_contribution.as_ref());
                self.count_healthy(report.cs_id, is_healthy, true);
            }
        }
        self.touch(slot);
        self.schedule(slot, tick(now).saturating_add(ttl), Timer::Ttl);
        true
    }

    /// Counts a member of `cs_id` whose reported health is HEALTHY in (`add`) or out; no-op
    /// unless `healthy`.
    fn count_healthy(&mut self, cs_id: &str, healthy: bool, add: bool) {
        if !healthy {
            return;
        }
        if let Some(s) = self.services.get_mut(cs_id) {
            if add {
                s.reported_healthy += 1;
            } else {
                s.reported_healthy = s.reported_healthy.saturating_sub(1);
            }
        }
    }

    /// How many members of the service last reported HEALTHY (YANG `healthy-sci-count`).
    pub fn healthy_members(&self, cs_id: &str) -> u32 {
        self.services.get(cs_id).map_or(0, |s| s.reported_healthy)
    }

    fn join(&mut self, cs_id: &str, slot: Slot, old: Option<&Contribution>, new: Option<&Contribution>) {
        if !self.services.contains_key(cs_id) {
            let key = self.intern(cs_id);
            self.services.insert(key, Service::default());
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
            let (Some(reported), Some(cs)) = (e.reported, e.cs.clone()) else { continue };
            let old = e.contribution();
            e.effective = Some(f(&reported));
            let new = e.contribution();
            if old != new {
                self.join(&cs, slot, old.as_ref(), new.as_ref());
                changed.insert(cs.to_string());
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
                events.push(CacheEvent::PullNeeded { csci_id: e.csci_id.to_string() });
            }
            SciState::Failed => {
                e.flags.pull_pending = false;
                e.flags.gas_zeroed = true;
            }
            _ => {}
        }
        let new = e.contribution();
        let (id, cs) = (e.csci_id.to_string(), e.cs.clone());
        self.count_transition(from, to);
        events.push(CacheEvent::StateChanged { csci_id: id, from, to, reason });
        if let Some(cs) = cs {
            if old != new {
                self.join(&cs, slot, old.as_ref(), new.as_ref());
            }
            events.push(CacheEvent::SiteChanged { cs_id: cs.to_string() });
        }
        Some(to)
    }

    /// The next time a TTL or grace timer may be due (a reminder can be early: the engine
    /// then wakes, finds nothing due and sleeps until the re-queued time).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, ..))| instant(*t))
    }

    /// Fires the timers due at `now`: HEALTHY → STALE (pull), STALE → FAILED (withdrawn).
    pub fn expire(&mut self, now: Instant, wall: DateTime<Utc>) -> Vec<CacheEvent> {
        let mut events = Vec::new();
        let now = tick(now);
        while let Some(&Reverse((reminder, slot, serial))) = self.timers.peek() {
            if reminder > now {
                break;
            }
            self.timers.pop();
            let Some(e) = self.at_mut(slot) else { continue };
            if e.serial != serial {
                continue;
            }
            e.queued = false;
            let Some(timer) = e.due else { continue };
            let at = e.due_at;
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
                self.schedule(slot, at.saturating_add(grace), Timer::Grace);
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

    /// `healthy-sci-count` is kept as reports arrive (an on-change service update reads it
    /// at every change): it equals a walk of the members through health changes, a move to
    /// another CS-ID and removals.
    #[test]
    fn issue20_healthy_sci_count_is_kept_not_walked() {
        let mut c = MetricCache::new(100);
        let (now, wall) = (Instant::now(), Utc::now());
        let walk = |c: &MetricCache, cs: &str| {
            c.members(cs).filter(|e| e.reported.is_some_and(|m| m.health == Health::Healthy)).count() as u32
        };
        let check = |c: &MetricCache| {
            for cs in ["A", "B"] {
                assert_eq!(c.healthy_members(cs), walk(c, cs), "{cs}");
            }
        };
        for id in ["a", "b", "c"] {
            c.register(id, TTL, GRACE, now, wall);
        }
        let accept = |c: &mut MetricCache, id: &str, cs: &str, seq: u64, health: Health| {
            let mut r = report(id, cs, seq, 10);
            r.metrics.health = health;
            c.accept(&r, r.metrics, Flags::default(), now, wall);
        };
        accept(&mut c, "a", "A", 1, Health::Healthy);
        accept(&mut c, "b", "A", 1, Health::Degraded);
        accept(&mut c, "c", "A", 1, Health::Healthy);
        check(&c);
        assert_eq!(c.healthy_members("A"), 2);
        accept(&mut c, "b", "A", 2, Health::Healthy);
        accept(&mut c, "a", "A", 2, Health::Unhealthy);
        check(&c);
        // c moves to B, healthy; then b to B, degraded.
        accept(&mut c, "c", "B", 2, Health::Healthy);
        accept(&mut c, "b", "B", 3, Health::Degraded);
        check(&c);
        assert_eq!((c.healthy_members("A"), c.healthy_members("B")), (0, 1));
        c.remove("c");
        check(&c);
        assert_eq!(c.healthy_members("B"), 0);
    }

    #[test]
    fn issue21_entries_per_state_are_kept_not_walked() {
        let mut c = MetricCache::new(100);
        let (now, wall) = (Instant::now(), Utc::now());
        let check = |c: &MetricCache| {
            for (state, n) in c.state_counts() {
                assert_eq!(n, c.entries().filter(|e| e.state == state).count(), "{state:?}");
            }
        };
        for id in ["a", "b", "c", "d"] {
            c.register(id, TTL, GRACE, now, wall);
        }
        check(&c);
        for id in ["a", "b", "c"] {
            let r = report(id, "A", 1, 10);
            c.accept(&r, r.metrics, Flags::default(), now, wall);
        }
        check(&c);
        c.fail("b", Input::HealthMonitor, wall);
        check(&c);
        // Past the TTL: a and c go STALE, then past the grace FAILED; d (never reported) too.
        c.expire(now + TTL + Duration::from_millis(1), wall);
        check(&c);
        c.expire(now + TTL + GRACE + Duration::from_millis(2), wall);
        check(&c);
        c.remove("a");
        check(&c);
        let r = report("c", "A", 2, 10);
        c.accept(&r, r.metrics, Flags::default(), now + TTL + GRACE + Duration::from_millis(3), wall);
        check(&c);
        assert_eq!(c.state_counts().iter().map(|(_, n)| n).sum::<usize>(), c.len());
    }

    /// The index hash reads every byte of a key whatever its length (the tail loads
    /// overlap): keys differing in one byte, at any position, or in length only, hash apart.
    #[test]
    fn issue14_id_hash_covers_every_byte_of_short_and_long_keys() {
        let h = IdHash::default();
        let mut seen = HashMap::new();
        for len in 0..=40usize {
            let base: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut keys = vec![base.clone()];
            for pos in 0..len {
                let mut k = base.clone();
                k[pos] = b'#';
                keys.push(k);
            }
            for k in keys {
                let key = String::from_utf8(k).unwrap();
                if let Some(other) = seen.insert(h.hash_one(key.as_str()), key.clone()) {
                    panic!("{key:?} and {other:?} hash alike");
                }
            }
        }
        // Address-style IDs as SCIs use them, all distinct.
        for i in 0..100_000u32 {
            let key = format!("10.{}.{}.{}:8080", i >> 16, (i >> 8) & 255, i & 255);
            if let Some(other) = seen.insert(h.hash_one(key.as_str()), key.clone()) {
                panic!("{key:?} and {other:?} hash alike");
            }
        }
    }

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
        // The validator's memory (kept beyond the entry) is the entry's last report.
        assert!(ev.iter().any(|e| matches!(e, CacheEvent::Evicted { csci_id, cs_id: Some(cs), state: SciState::Healthy, sequence: Some(1), .. } if csci_id == "b" && cs == "AR1")));
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
        let mut ar1: Vec<_> = c.members("AR1").map(|e| e.csci_id.to_string()).collect();
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
        let mut left: Vec<_> = c.entries().map(|e| e.csci_id.to_string()).collect();
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

    fn sci(cs: &[&str]) -> SciConfig {
        SciConfig {
            cs_ids: cs.iter().map(|c| (*c).to_owned()).collect(),
            credential_ref: Some("cred".into()),
            unauthenticated: false,
            expected_interval: Duration::from_millis(2500),
        }
    }

    #[test]
    fn issue14_engine_registration_and_entry_share_one_slot_and_its_names() {
        let mut c = MetricCache::new(1);
        let (now, wall) = (Instant::now(), Utc::now());
        assert_eq!(c.set_registration("a", &sci(&["AR1", "AR2"])), None);
        c.set_registration("b", &sci(&["AR1", "AR2"]));
        // The same CS-ID list is stored once.
        assert_eq!((c.lists.len(), c.names.len(), c.registered()), (1, 2, 2));
        assert_eq!(c.registration("a").unwrap().config(), sci(&["AR1", "AR2"]));
        assert!(c.get("a").is_none(), "registered, not cached");
        c.register("a", TTL, GRACE, now, wall);
        let slot = c.lookup("a").unwrap();
        assert!(c.at(slot).is_some() && c.registration_at(slot).is_some());
        let r = report("a", "AR1", 1, 10);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        // Evicted to make room: the registration keeps the slot.
        let ev = c.register("b", TTL, GRACE, now, wall);
        assert!(ev.iter().any(|e| matches!(e, CacheEvent::Evicted { csci_id, .. } if csci_id == "a")));
        assert_eq!(c.lookup("a"), Some(slot));
        assert!(c.get("a").is_none() && c.registration("a").is_some() && c.len() == 1);
        // Deregistered and not cached: the slot and, with the last holder, the names go.
        assert!(c.remove_registration("a").is_some_and(|r| r.credential_ref() == Some("cred")));
        assert_eq!(c.lookup("a"), None);
        c.remove("b");
        c.remove_registration("b");
        assert_eq!((c.lists.len(), c.names.len(), c.registered(), c.len()), (0, 0, 0, 0));
        assert!(c.services.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn issue14_engine_entry_keeps_the_validator_memory_in_its_own_fields() {
        let mut c = MetricCache::new(10);
        let (now, wall) = (Instant::now(), Utc::now());
        c.register("a", TTL, GRACE, now, wall);
        let e = c.get_mut("a").unwrap();
        e.restore_history(Some(7), Some(wall));
        // Restored history: the validator sees it, the entry shows no report yet.
        assert_eq!((e.last_sequence(), e.sequence(), e.last()), (Some(7), None, None));
        let r = report("a", "AR1", 8, 10);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        let e = c.get_mut("a").unwrap();
        assert_eq!((e.last_sequence(), e.sequence()), (Some(8), Some(8)));
        assert_eq!(e.last(), Some((now, r.metrics)));
        assert_eq!(e.last_update(), now, "ticks round-trip exactly");
        // A new authentication method: the validator forgets, the entry still shows it.
        e.forget_history();
        assert_eq!((e.last_sequence(), e.last_timestamp(), e.last(), e.sequence()), (None, None, None, Some(8)));
        // Health transitions live in the entry only while there are any.
        let r = report("a", "AR1", 9, 10);
        c.accept(&r, r.metrics, Flags::default(), now, wall);
        let e = c.get_mut("a").unwrap();
        e.record_transition(Health::Degraded, now, Duration::from_secs(10));
        assert_eq!(e.transitions_since(None), 1);
        e.record_transition(Health::Healthy, now + Duration::from_secs(11), Duration::from_secs(10));
        assert!(e.transitions.is_none(), "the old transition left the window");
    }
}
