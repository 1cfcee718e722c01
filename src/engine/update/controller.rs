//! The Update Controller's decisions as a pure, synchronous state machine: events and ticks
//! in, advertisements out, time passed in by the caller. It keeps the current view of every
//! service, what the C-PSes were last told, and one pending update per CS-ID.
//!
//! Rules (seed 004, Update Controller and Policy Engine update control):
//! - A change is compared with the values last *advertised* for its CS-ID; below the
//!   thresholds it is not sent (the heartbeat carries it).
//! - Non-critical updates of a CS-ID advertised less than `min-interval` ago are held, and
//!   sent with the latest value when the interval ends. Critical ones are not held.
//! - Updates that are ready within `batch_delay` of each other share one advertisement.
//! - Every advertisement costs a token; without one it waits, still coalescing, and when a
//!   token returns everything ready goes in one advertisement, most urgent entries first.
//! - A full snapshot goes out `heartbeat-interval` (or the adaptive interval) after the
//!   previous one; it carries every service and settles everything pending.
//! - An SCI discovered or withdrawn (evicted, deregistered) gets a full snapshot to all
//!   (SCI Discovery Trigger), after the batch window and not held by `min-interval`.
//! - A policy change sends every service whose values differ in any field from what was
//!   advertised, not held by `min-interval` (Policy Change Trigger).
//! - Suppression drops non-critical updates; the heartbeat keeps going, carrying what the
//!   C-PSes were last told for the suppressed services. When a suppression ends, what it
//!   kept back and what is past the thresholds goes out. Critical updates go out under
//!   `non-critical` and are held under `all`.
//! - Under high engine load optional metrics (cost, reputation) are left out.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tokio::time::Instant;

use std::time::Duration;

use super::advertisement::{Advertisement, AdvertisementKind, Audience, SciMetrics};
use super::config::UpdateConfig;
use super::error::ConfigError;
use super::events::{SciChange, SciEvent, SuppressLevel, SuppressScope, UpdateEvent};
use super::load::{Edge, LoadMeter};
use super::rows::Rows;
use super::stats::UpdateStats;
use super::token_bucket::TokenBucket;
use super::trigger::{bypasses_min_interval, significant, Priority, Trigger};
use crate::engine::clock::Clock;
use crate::engine::model::{CsId, CsciId, SciState, SiteMetrics};

/// What the C-PSes were last told about a service.
#[derive(Clone, Debug)]
struct Advertised {
    site: SiteMetrics,
    at: Instant,
}

/// An update waiting for its CS-ID: the value sent is whatever is current when it goes.
#[derive(Clone, Debug)]
struct Pending {
    trigger: Trigger,
    /// When it was raised (or became critical): the start of its batch window.
    since: Instant,
    sci_withdrawn: BTreeSet<CsciId>,
}

#[derive(Clone, Debug)]
struct ResyncRequest {
    audience: Audience,
    since: Instant,
}

/// A full snapshot to all asked for by an SCI discovery or withdrawal; it goes when the
/// batch window of the first one closes.
#[derive(Clone, Copy, Debug)]
struct MembershipFull {
    trigger: Trigger,
    since: Instant,
}

/// At most this many C-PS refresh hints are kept (one per configured peer in practice).
const MAX_HINTS: usize = 4096;

#[derive(Clone, Debug, Default)]
struct Suppression {
    global: Option<SuppressLevel>,
    services: HashMap<CsId, SuppressLevel>,
}

impl Suppression {
    fn level(&self, cs_id: &str) -> Option<SuppressLevel> {
        self.global.max(self.services.get(cs_id).copied())
    }
}

/// Whether `level` keeps an update of `priority` from going out now.
fn blocks(level: Option<SuppressLevel>, priority: Priority) -> bool {
    match level {
        None => false,
        Some(SuppressLevel::NonCritical) => !priority.is_critical(),
        Some(SuppressLevel::All) => true,
    }
}

/// What a ready update puts into a delta.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    Site,
    Withdraw,
    Nothing,
}

/// The Update Controller's state machine.
pub struct UpdateController {
    config: UpdateConfig,
    clock: Clock,
    next_seq: u64,
    /// What the engine last said about each service.
    current: BTreeMap<CsId, SiteMetrics>,
    /// What every C-PS was last told (advertisements to all only).
    advertised: BTreeMap<CsId, Advertised>,
    pending: BTreeMap<CsId, Pending>,
    resync: Option<ResyncRequest>,
    /// The last full snapshot to all; the heartbeat is due `heartbeat()` later.
    last_full: Instant,
    /// A full snapshot to all for an SCI discovery or withdrawal.
    membership: Option<MembershipFull>,
    /// An SCI discovery or withdrawal was kept back by a suppression: its full snapshot goes
    /// when the global suppression ends.
    membership_suppressed: Option<Trigger>,
    suppression: Suppression,
    /// The C-PSes' refresh hints (adaptive heartbeat).
    hints: BTreeMap<String, Duration>,
    /// The heartbeat interval in force (configured, or adapted to the hints).
    heartbeat: Duration,
    /// Per-SCI rows, while some C-PS wants them.
    rows: Option<Rows>,
    /// Detail was switched on and its first rows have not come yet.
    rows_awaited: bool,
    load: LoadMeter,
    bucket: Option<TokenBucket>,
    /// An advertisement is waiting for a token (already counted as rate-limited).
    waiting_for_token: bool,
    stats: UpdateStats,
}

impl UpdateController {
    /// A controller with nothing advertised yet; the first heartbeat is due
    /// `heartbeat_interval` after `now`. Adapters ask for a resync when they connect.
    pub fn new(config: UpdateConfig, clock: Clock, now: Instant) -> Result<UpdateController, ConfigError> {
        config.validate()?;
        let first_seq = u64::try_from(clock.wall_at(now).timestamp_micros()).unwrap_or(0).max(1);
        Ok(UpdateController {
            bucket: config.token_bucket.map(|tb| TokenBucket::new(tb, now)),
            heartbeat: config.heartbeat_interval,
            config,
            clock,
            next_seq: first_seq,
            current: BTreeMap::new(),
            advertised: BTreeMap::new(),
            pending: BTreeMap::new(),
            resync: None,
            last_full: now,
            membership: None,
            membership_suppressed: None,
            suppression: Suppression::default(),
            hints: BTreeMap::new(),
            rows: None,
            rows_awaited: false,
            load: LoadMeter::default(),
            waiting_for_token: false,
            stats: UpdateStats::default(),
        })
    }

    pub fn config(&self) -> &UpdateConfig {
        &self.config
    }

    /// The counters, with the gauges filled in.
    pub fn stats(&self) -> UpdateStats {
        UpdateStats {
            pending: u32::try_from(self.pending.len()).unwrap_or(u32::MAX),
            tokens: self.bucket.as_ref().map(TokenBucket::tokens),
            heartbeat_interval: self.heartbeat,
            sci_rows: self.rows.as_ref().map(|r| u32::try_from(r.len()).unwrap_or(u32::MAX)),
            report_rate: self.load.rate,
            load_shedding_since: self.load.active_since,
            shed_advertisements: self.load.shed,
            ..self.stats.clone()
        }
    }

    /// The heartbeat interval in force.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat
    }

    /// The engine's running total of accepted SCI reports, the load measure of load
    /// shedding: sampled once a second while `load-shedding` is configured (the task calls
    /// this before every step; it is one comparison when no sample is due).
    pub fn observe_load(&mut self, accepted_total: u64, now: Instant) {
        let config = self.config.load_shedding;
        match self.load.observe(config, accepted_total, now, self.clock.wall_at(now)) {
            Some(Edge::Started) => tracing::warn!(
                rate = self.load.rate,
                threshold = config.map_or(0, |c| c.threshold),
                "high load: optional metrics (cost, reputation) are left out of advertisements"
            ),
            Some(Edge::Ended) => tracing::info!(
                rate = self.load.rate,
                shed = self.load.shed,
                "load back to normal: optional metrics are advertised again"
            ),
            None => {}
        }
    }

    /// The effective heartbeat: with `adaptive-heartbeat`, the shortest hint of the C-PSes
    /// that gave one, within the bounds; otherwise (or without any hint) the configured one.
    fn update_heartbeat(&mut self) {
        let effective = match (self.config.adaptive_heartbeat, self.hints.values().min()) {
            (Some(a), Some(hint)) => (*hint).clamp(a.min, a.max),
            _ => self.config.heartbeat_interval,
        };
        if effective != self.heartbeat {
            tracing::info!(from = ?self.heartbeat, to = ?effective, "heartbeat interval adjusted");
            self.heartbeat = effective;
        }
    }

    /// Applies an event, then sends whatever is due at `now`.
    pub fn on_event(&mut self, event: UpdateEvent, now: Instant) -> Vec<Advertisement> {
        match event {
            UpdateEvent::Site(site) => {
                let cs_id = site.cs_id.clone();
                self.update_service(cs_id, Some(site), None, Trigger::MetricChange, None, now);
            }
            UpdateEvent::Sci(sci) => self.sci_changed(sci, now),
            UpdateEvent::PolicyChanged(sites) => {
                let listed: HashSet<&str> = sites.iter().map(|s| s.cs_id.as_str()).collect();
                let gone: Vec<CsId> = self.current.keys().filter(|cs| !listed.contains(cs.as_str())).cloned().collect();
                for site in sites {
                    let cs_id = site.cs_id.clone();
                    // Any difference from what was advertised, not only past a threshold.
                    let differs = self.advertised.get(&cs_id).is_some_and(|a| a.site != site);
                    let trigger = differs.then_some(Trigger::PolicyChange);
                    self.update_service(cs_id, Some(site), trigger, Trigger::PolicyChange, None, now);
                }
                for cs_id in gone {
                    self.update_service(cs_id, None, None, Trigger::PolicyChange, None, now);
                }
            }
            UpdateEvent::Resync { peer } => {
                self.stats.resync_requests += 1;
                let audience = peer.map_or(Audience::All, Audience::Peer);
                self.resync = Some(match self.resync.take() {
                    None => ResyncRequest { audience, since: now },
                    // Two different peers, or one and everyone: one snapshot for all.
                    Some(r) if r.audience == audience => r,
                    Some(r) => ResyncRequest { audience: Audience::All, since: r.since },
                });
            }
            UpdateEvent::Suppress { scope, level } => self.set_suppression(scope, level, now),
            UpdateEvent::RefreshHint { peer, interval } => {
                match interval {
                    Some(i) if self.hints.len() < MAX_HINTS || self.hints.contains_key(&peer) => {
                        self.hints.insert(peer, i);
                    }
                    Some(_) => tracing::warn!(peer = %peer, "too many C-PS refresh hints: ignored"),
                    None => {
                        self.hints.remove(&peer);
                    }
                }
                self.update_heartbeat();
            }
            UpdateEvent::SciDetail(on) => match (on, self.rows.is_some()) {
                (true, false) => {
                    self.rows = Some(Rows::default());
                    self.rows_awaited = true;
                }
                (false, true) => {
                    self.rows = None;
                    self.rows_awaited = false;
                }
                _ => {}
            },
            // Rows that arrive after detail went off are for nobody.
            UpdateEvent::SciRows(rows) => {
                if let Some(r) = self.rows.as_mut() {
                    let first = !rows.is_empty() && std::mem::take(&mut self.rows_awaited);
                    r.apply(rows);
                    // The first rows of a new detail epoch: a C-PS that takes them had a
                    // snapshot without rows (and may have dropped the site's older ones), so
                    // every C-PS gets a full snapshot with them when the batch window closes
                    // (after the site changes of the same engine step), not at the heartbeat.
                    if first {
                        self.membership = Some(match self.membership {
                            None => MembershipFull { trigger: Trigger::Resync, since: now },
                            Some(m) => MembershipFull { trigger: m.trigger.max(Trigger::Resync), since: m.since },
                        });
                    }
                }
            }
        }
        self.poll(now)
    }

    /// Sends whatever is due at `now` (call it at `next_deadline`).
    pub fn on_tick(&mut self, now: Instant) -> Vec<Advertisement> {
        self.poll(now)
    }

    /// Replaces the configuration. New thresholds re-evaluate every service against what
    /// was last advertised (as a policy change would); intervals, batch delay and the token
    /// bucket apply from now on, measured from the last advertisements already made.
    pub fn reconfigure(&mut self, config: UpdateConfig, now: Instant) -> Result<Vec<Advertisement>, ConfigError> {
        config.validate()?;
        match (self.bucket.as_mut(), config.token_bucket) {
            (Some(bucket), Some(tb)) => bucket.reconfigure(tb, now),
            (None, Some(tb)) => self.bucket = Some(TokenBucket::new(tb, now)),
            (_, None) => {
                self.bucket = None;
                self.waiting_for_token = false;
            }
        }
        self.config = config;
        self.update_heartbeat();
        let newly_significant: Vec<(CsId, Trigger)> = self
            .current
            .iter()
            .filter(|(cs, _)| !self.pending.contains_key(*cs))
            .filter_map(|(cs, site)| {
                let adv = self.advertised.get(cs)?;
                let trigger = significant(&adv.site, site, &self.config)?;
                Some((cs.clone(), if trigger == Trigger::MetricChange { Trigger::PolicyChange } else { trigger }))
            })
            .collect();
        for (cs_id, trigger) in newly_significant {
            self.raise(cs_id, trigger, None, now);
        }
        Ok(self.poll(now))
    }

    /// When `on_tick` next has something to do: a batch closing, a held update's interval
    /// ending, the heartbeat, a token returning. `None`: nothing until the next event.
    pub fn next_deadline(&self) -> Option<Instant> {
        let mut next = Some(self.last_full + self.heartbeat);
        if let Some(r) = &self.resync {
            next = min_instant(next, r.since);
        }
        if let Some(m) = &self.membership {
            next = min_instant(next, m.since + self.config.batch_delay);
        }
        for (cs_id, p) in &self.pending {
            if let Some(at) = self.flush_at(cs_id, p) {
                next = min_instant(next, at);
            }
        }
        let next = match (&self.bucket, next) {
            (Some(bucket), Some(at)) => Some(at.max(bucket.available_at())),
            (_, next) => next,
        };
        // The load sample needs no token.
        let sample = self.load.next_sample(self.config.load_shedding);
        match (next, sample) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn sci_changed(&mut self, sci: SciEvent, now: Instant) {
        let SciEvent { csci_id, cs_id, change, site } = sci;
        let (trigger, withdraw) = match change {
            SciChange::State { from: Some(from), to } if from == to => (None, false),
            SciChange::State { to: SciState::Failed, .. } => (Some(Trigger::SciFailure), true),
            SciChange::State { from: None | Some(SciState::Failed), .. }
            | SciChange::State { from: Some(SciState::Active), to: SciState::Healthy } => {
                (Some(Trigger::Discovery), false)
            }
            // HEALTHY <-> STALE and the like: only the thresholds on the site metrics count.
            SciChange::State { .. } => (None, false),
            SciChange::Health { from, to } => ((from != to).then_some(Trigger::HealthChange), false),
            SciChange::Removed => (Some(Trigger::Withdrawal), true),
        };
        if trigger == Some(Trigger::Discovery) {
            // Back before its withdrawal went out: there is nothing to withdraw.
            if let Some(p) = self.pending.get_mut(&cs_id) {
                p.sci_withdrawn.remove(&csci_id);
            }
        }
        // A failed SCI's metrics are withdrawn (seed 004, SCI Failure Trigger): its row
        // leaves with it and comes back with its recovery.
        if withdraw {
            if let Some(rows) = self.rows.as_mut() {
                rows.remove(&csci_id);
            }
        }
        let membership = matches!(trigger, Some(Trigger::Discovery | Trigger::Withdrawal));
        let service = membership.then(|| cs_id.clone());
        self.update_service(cs_id, site, trigger, Trigger::MetricChange, withdraw.then_some(csci_id), now);
        if let (Some(cs_id), Some(trigger)) = (service, trigger) {
            self.request_membership_full(&cs_id, trigger, now);
        }
    }

    /// SCI Discovery Trigger: a full snapshot to all when the batch window closes, unless a
    /// suppression keeps the change back (then it goes when the suppression ends).
    fn request_membership_full(&mut self, cs_id: &str, trigger: Trigger, now: Instant) {
        if blocks(self.suppression.level(cs_id), trigger.priority()) {
            self.membership_suppressed = Some(self.membership_suppressed.map_or(trigger, |t| t.max(trigger)));
            return;
        }
        self.membership = Some(match self.membership {
            None => MembershipFull { trigger, since: now },
            Some(m) => MembershipFull { trigger: m.trigger.max(trigger), since: m.since },
        });
    }

    /// Records the service's new state and raises an update if it is worth one: `trigger`
    /// from the event itself, or from comparing with what was advertised (`routine` names a
    /// threshold crossing).
    fn update_service(
        &mut self,
        cs_id: CsId,
        site: Option<SiteMetrics>,
        trigger: Option<Trigger>,
        routine: Trigger,
        sci_withdrawn: Option<CsciId>,
        now: Instant,
    ) {
        let by_value = match (&site, self.advertised.get(&cs_id)) {
            (Some(new), Some(adv)) => {
                significant(&adv.site, new, &self.config).map(|t| if t == Trigger::MetricChange { routine } else { t })
            }
            (Some(_), None) => Some(Trigger::Discovery),
            (None, Some(_)) => Some(Trigger::Withdrawal),
            (None, None) => None,
        };
        let trigger = match (trigger, by_value) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        match site {
            Some(site) => self.current.insert(cs_id.clone(), site),
            None => self.current.remove(&cs_id),
        };
        match trigger {
            Some(trigger) => self.raise(cs_id, trigger, sci_withdrawn, now),
            // The pending update will carry the new value.
            None if self.pending.contains_key(&cs_id) => self.stats.coalesced += 1,
            None => self.stats.below_threshold += 1,
        }
    }

    fn raise(&mut self, cs_id: CsId, trigger: Trigger, sci_withdrawn: Option<CsciId>, now: Instant) {
        let priority = trigger.priority();
        let level = self.suppression.level(&cs_id);
        if blocks(level, priority) && !priority.is_critical() {
            self.stats.suppressed += 1;
            return;
        }
        if let Some(p) = self.pending.get_mut(&cs_id) {
            self.stats.coalesced += 1;
            // A policy change outranks a metric change of the same priority: it is not held
            // and is sent on any difference.
            let upgrade = trigger == Trigger::PolicyChange && p.trigger == Trigger::MetricChange;
            if priority > p.trigger.priority() || upgrade {
                if bypasses_min_interval(trigger) && !bypasses_min_interval(p.trigger) || priority.is_critical() {
                    // A fresh batch window, so simultaneous critical events share it.
                    p.since = now;
                }
                p.trigger = trigger;
            }
            p.sci_withdrawn.extend(sci_withdrawn);
            return;
        }
        let held = !bypasses_min_interval(trigger)
            && self.advertised.get(&cs_id).is_some_and(|a| a.at + self.config.min_interval > now);
        if held {
            self.stats.held += 1;
        }
        self.pending.insert(cs_id, Pending { trigger, since: now, sci_withdrawn: sci_withdrawn.into_iter().collect() });
    }

    fn set_suppression(&mut self, scope: SuppressScope, level: Option<SuppressLevel>, now: Instant) {
        let affected: Vec<CsId> = match &scope {
            SuppressScope::Global => self.current.keys().chain(self.advertised.keys()).cloned().collect(),
            SuppressScope::Service(cs_id) => vec![cs_id.clone()],
        };
        let before: Vec<Option<SuppressLevel>> = affected.iter().map(|cs| self.suppression.level(cs)).collect();
        match (scope, level) {
            (SuppressScope::Global, level) => self.suppression.global = level,
            (SuppressScope::Service(cs_id), Some(level)) => {
                self.suppression.services.insert(cs_id, level);
            }
            (SuppressScope::Service(cs_id), None) => {
                self.suppression.services.remove(&cs_id);
            }
        }
        // Non-critical updates waiting now are dropped, not queued for after the window.
        let suppression = &self.suppression;
        let before_len = self.pending.len();
        self.pending.retain(|cs_id, p| {
            !blocks(suppression.level(cs_id), p.trigger.priority()) || p.trigger.priority().is_critical()
        });
        self.stats.suppressed += (before_len - self.pending.len()) as u64;
        if let Some(m) = self.membership {
            if blocks(self.suppression.global, m.trigger.priority()) {
                self.membership = None;
                self.membership_suppressed = Some(self.membership_suppressed.map_or(m.trigger, |t| t.max(m.trigger)));
            }
        }
        // Released: what the suppression kept back goes out now if it is past the
        // thresholds (or new, or gone); what is not waits for the heartbeat.
        for (cs_id, was) in affected.into_iter().zip(before) {
            let level = self.suppression.level(&cs_id);
            if level >= was || self.pending.contains_key(&cs_id) {
                continue;
            }
            let trigger = match (self.current.get(&cs_id), self.advertised.get(&cs_id)) {
                (Some(cur), Some(adv)) => significant(&adv.site, cur, &self.config),
                (Some(_), None) => Some(Trigger::Discovery),
                (None, Some(_)) => Some(Trigger::Withdrawal),
                (None, None) => None,
            };
            if let Some(trigger) = trigger.filter(|t| !blocks(level, t.priority())) {
                self.raise(cs_id, trigger, None, now);
            }
        }
        if self.suppression.global.is_none() {
            if let Some(trigger) = self.membership_suppressed.take() {
                self.membership = Some(MembershipFull { trigger, since: now });
            }
        }
    }

    /// When an update may go: never while suppressed; critical at once; otherwise once the
    /// CS-ID's minimum interval since its last advertisement has passed.
    fn ready_at(&self, cs_id: &str, p: &Pending) -> Option<Instant> {
        let priority = p.trigger.priority();
        if blocks(self.suppression.level(cs_id), priority) {
            return None;
        }
        if bypasses_min_interval(p.trigger) {
            return Some(p.since);
        }
        let hold_until = self.advertised.get(cs_id).map(|a| a.at + self.config.min_interval);
        Some(hold_until.map_or(p.since, |h| h.max(p.since)))
    }

    /// When the update's batch closes: ready, and `batch_delay` after it was raised.
    fn flush_at(&self, cs_id: &str, p: &Pending) -> Option<Instant> {
        self.ready_at(cs_id, p).map(|ready| ready.max(p.since + self.config.batch_delay))
    }

    fn take_token(&mut self) -> bool {
        let ok = self.bucket.as_mut().is_none_or(TokenBucket::try_take);
        if ok {
            self.waiting_for_token = false;
        } else if !self.waiting_for_token {
            self.waiting_for_token = true;
            self.stats.rate_limited += 1;
        }
        ok
    }

    fn poll(&mut self, now: Instant) -> Vec<Advertisement> {
        if let Some(bucket) = self.bucket.as_mut() {
            bucket.refill(now);
        }
        let mut out = Vec::new();
        // A full snapshot to everyone settles everything else. The heartbeat goes whatever
        // the suppression: a C-PS that ages out entries must not drop the site during
        // maintenance; it carries what the C-PSes were last told for suppressed services.
        let heartbeat_due = now >= self.last_full + self.heartbeat;
        let resync_all = self.resync.as_ref().is_some_and(|r| r.audience == Audience::All);
        let membership = self.membership.filter(|m| m.since + self.config.batch_delay <= now);
        let full = if resync_all {
            Some(Trigger::Resync)
        } else if let Some(m) = membership {
            Some(m.trigger)
        } else if heartbeat_due {
            // A peer's resync waiting: the full settles it, and must not pass for a
            // heartbeat (an adapter may answer a heartbeat with a keepalive).
            Some(if self.resync.is_some() { Trigger::Resync } else { Trigger::Heartbeat })
        } else {
            None
        };
        if let Some(base) = full {
            if self.take_token() {
                if base == Trigger::Heartbeat {
                    self.stats.heartbeats += 1;
                }
                out.push(self.full(Audience::All, base, now));
            }
            return out;
        }

        match self.delta(now) {
            Err(Blocked) => return out,
            Ok(Some(adv)) => out.push(adv),
            Ok(None) => {}
        }

        if let Some(ResyncRequest { audience: Audience::Peer(peer), .. }) = self.resync.clone() {
            if self.take_token() {
                out.push(self.full(Audience::Peer(peer), Trigger::Resync, now));
            }
        }
        out
    }

    /// The delta of every ready update, if a batch has closed and a token is there.
    fn delta(&mut self, now: Instant) -> Result<Option<Advertisement>, Blocked> {
        let mut ready = Vec::new();
        let mut batch_closed = false;
        for (cs_id, p) in &self.pending {
            if let Some(at) = self.ready_at(cs_id, p).filter(|at| *at <= now) {
                ready.push(cs_id.clone());
                batch_closed |= at.max(p.since + self.config.batch_delay) <= now;
            }
        }
        if !batch_closed {
            return Ok(None);
        }

        let mut items = Vec::new();
        for cs_id in ready {
            let p = &self.pending[&cs_id];
            let priority = p.trigger.priority();
            let content = match (self.current.get(&cs_id), self.advertised.get(&cs_id)) {
                // Re-checked now: a routine change may be back within its thresholds; a policy
                // change counts any difference.
                (Some(cur), Some(adv))
                    if (priority >= Priority::Membership || p.trigger == Trigger::PolicyChange) && *cur != adv.site =>
                {
                    Content::Site
                }
                (Some(cur), Some(adv))
                    if priority < Priority::Membership
                        && p.trigger != Trigger::PolicyChange
                        && significant(&adv.site, cur, &self.config).is_some() =>
                {
                    Content::Site
                }
                (Some(_), Some(_)) => Content::Nothing,
                (Some(_), None) => Content::Site,
                (None, Some(_)) => Content::Withdraw,
                (None, None) => Content::Nothing,
            };
            if content == Content::Nothing && p.sci_withdrawn.is_empty() {
                self.pending.remove(&cs_id);
                self.stats.below_threshold += 1;
                continue;
            }
            items.push((priority, cs_id, content));
        }
        if items.is_empty() {
            return Ok(None);
        }
        if !self.take_token() {
            return Err(Blocked);
        }

        items.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        // Heartbeat is the least urgent trigger: the first item's replaces it.
        let mut body = Body::new(Trigger::Heartbeat);
        for (_, cs_id, content) in items {
            let Some(p) = self.pending.remove(&cs_id) else { continue };
            body.settle(&cs_id, &p);
            match content {
                Content::Site => {
                    if let Some(site) = self.current.get(&cs_id) {
                        if let Some(rows) = self.rows.as_mut() {
                            rows.changed(&cs_id, &mut body.scis);
                        }
                        body.sites.push(site.clone());
                        self.advertised.insert(cs_id, Advertised { site: site.clone(), at: now });
                    }
                }
                Content::Withdraw => {
                    self.advertised.remove(&cs_id);
                    body.withdrawn.push(cs_id);
                }
                Content::Nothing => {}
            }
        }
        Ok(Some(self.emit(AdvertisementKind::Delta, Audience::All, body, now)))
    }

    /// A full snapshot. A service under suppression keeps its last advertised values (the
    /// C-PS must not age it out, nor learn what is suppressed), unless a critical update of
    /// it may go out. To all, it becomes the new advertised state and settles what it
    /// carries; to one peer, it changes nothing else.
    fn full(&mut self, audience: Audience, base: Trigger, now: Instant) -> Advertisement {
        let to_all = audience == Audience::All;
        let keys: BTreeSet<CsId> =
            self.current.keys().chain(self.advertised.keys()).chain(self.pending.keys()).cloned().collect();
        let mut body = Body::new(base);
        let mut advertised = BTreeMap::new();
        let mut settled = Vec::new();
        for cs_id in keys {
            let pending = self.pending.get(&cs_id);
            let critical = pending.is_some_and(|p| p.trigger.priority().is_critical());
            let frozen = match self.suppression.level(&cs_id) {
                None => false,
                Some(SuppressLevel::NonCritical) => !critical,
                Some(SuppressLevel::All) => true,
            };
            let site = if frozen { self.advertised.get(&cs_id).map(|a| &a.site) } else { self.current.get(&cs_id) };
            match site {
                Some(site) => {
                    if let Some(rows) = self.rows.as_mut() {
                        rows.full(&cs_id, frozen, to_all, &mut body.scis);
                    }
                    body.sites.push(site.clone());
                    advertised.insert(cs_id.clone(), Advertised { site: site.clone(), at: now });
                }
                None if !frozen && self.advertised.contains_key(&cs_id) => body.withdrawn.push(cs_id.clone()),
                None => {}
            }
            if let (false, Some(p)) = (frozen, pending) {
                body.settle(&cs_id, p);
                settled.push(cs_id);
            }
        }
        // Most urgent first, as in a delta.
        let urgency = |cs: &str| self.pending.get(cs).map(|p| p.trigger.priority());
        body.sites.sort_by(|a, b| urgency(&b.cs_id).cmp(&urgency(&a.cs_id)).then_with(|| a.cs_id.cmp(&b.cs_id)));
        if to_all {
            for cs_id in settled {
                self.pending.remove(&cs_id);
            }
            self.advertised = advertised;
            self.last_full = now;
            self.membership = None;
        }
        self.resync = None;
        self.emit(AdvertisementKind::Full, audience, body, now)
    }

    fn emit(&mut self, kind: AdvertisementKind, audience: Audience, mut body: Body, now: Instant) -> Advertisement {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.stats.advertisements += 1;
        match kind {
            AdvertisementKind::Full => self.stats.full_snapshots += 1,
            AdvertisementKind::Delta => self.stats.deltas += 1,
        }
        self.stats.last_seq = Some(seq);
        if self.load.active_since.is_some() && body.shed_optional_metrics() {
            self.load.shed += 1;
        }
        Advertisement {
            seq,
            kind,
            audience,
            trigger: body.trigger,
            sites: body.sites,
            withdrawn: body.withdrawn,
            sci_withdrawn: body
                .sci_withdrawn
                .into_iter()
                .map(|(csci_id, cs_ids)| super::advertisement::SciWithdrawal::new(csci_id, cs_ids))
                .collect(),
            scis: body.scis,
            generated_at: self.clock.wall_at(now),
        }
    }
}

/// What an advertisement carries, while it is being assembled.
struct Body {
    trigger: Trigger,
    sites: Vec<SiteMetrics>,
    withdrawn: Vec<CsId>,
    /// Each withdrawn SCI with the services it was withdrawn from.
    sci_withdrawn: std::collections::BTreeMap<CsciId, BTreeSet<CsId>>,
    scis: Vec<SciMetrics>,
}

impl Body {
    fn new(trigger: Trigger) -> Body {
        Body { trigger, sites: Vec::new(), withdrawn: Vec::new(), sci_withdrawn: Default::default(), scis: Vec::new() }
    }

    /// Leaves out the optional metrics (cost, reputation; never GAS, computing time,
    /// health or the security label). Whether there was any.
    fn shed_optional_metrics(&mut self) -> bool {
        let mut shed = false;
        for (cost, reputation) in self
            .sites
            .iter_mut()
            .map(|s| (&mut s.cost, &mut s.reputation))
            .chain(self.scis.iter_mut().map(|r| (&mut r.metrics.cost, &mut r.metrics.reputation)))
        {
            shed |= cost.take().is_some() | reputation.take().is_some();
        }
        shed
    }

    fn settle(&mut self, cs_id: &CsId, p: &Pending) {
        self.trigger = self.trigger.max(p.trigger);
        for csci in &p.sci_withdrawn {
            self.sci_withdrawn.entry(csci.clone()).or_default().insert(cs_id.clone());
        }
    }
}

/// A ready delta is waiting for a token.
struct Blocked;

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}
