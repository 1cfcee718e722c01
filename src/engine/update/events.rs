//! What the engine tells the Update Controller: typed events, one per thing that happened.
//! Every event that changes a service carries the service's site metrics *after* the change
//! (after policy and transforms), so the controller never asks back and never sees a
//! half-applied state.

use crate::engine::model::{CsId, CsciId, Health, SciState, SiteMetrics};

/// An input of the Update Controller.
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateEvent {
    /// The site metrics of a CS-ID changed (a report was aggregated and policy applied).
    /// Advertised only past the thresholds (seed 004, Metric Change Trigger), a health
    /// change (Health Change Trigger), or when the C-PSes do not know the service yet.
    Site(SiteMetrics),
    /// An SCI changed state or health, or left the cache.
    Sci(SciEvent),
    /// A local policy changed (seed 004, Policy Change Trigger): the complete current set of
    /// services, one entry per CS-ID, sent by the engine loop after every policy commit. Each
    /// one that differs in any field from what was last advertised is sent at once (trigger
    /// `policy-change`, not held by `min-interval`); a CS-ID missing from the set is
    /// withdrawn.
    PolicyChanged(Vec<SiteMetrics>),
    /// Send a full snapshot now (the `resync` RPC, a C-PS's synchronization request, an
    /// adapter that reconnected or a subscriber that lagged). `peer: None` means every
    /// C-PS; a named peer gets a snapshot addressed to it only.
    Resync { peer: Option<String> },
    /// The policy engine's `SUPPRESS_UPDATES` outcome or a maintenance window opened
    /// (`level: Some`) or closed (`level: None`) for one service or globally. Each event
    /// replaces the previous level of its scope; the effective level of a CS-ID is the
    /// stronger of the global and its own. Send edges only, and send a service's edge
    /// before the `Site` event of the same evaluation, so that change is judged under it. A
    /// `SUPPRESS_UPDATES` rule means `NonCritical`; a window brings its own `suppress` mode.
    Suppress { scope: SuppressScope, level: Option<SuppressLevel> },
    /// A C-PS said how often it wants its soft state refreshed (`refresh-interval` in its
    /// replies; `None`: it stopped saying, or the peer is gone). Input of the adaptive
    /// heartbeat (seed 004, Update Controller: the heartbeat interval MAY be adjusted based
    /// on C-PS load).
    RefreshHint { peer: String, interval: Option<std::time::Duration> },
    /// Whether any C-PS takes per-SCI metrics: with `true` the controller fills
    /// `Advertisement::scis`; `SciRows` events carry the rows. Send it through
    /// `UpdateHandle::send`, which also tells the engine loop to send rows (all of them
    /// once after each switch on); `false` drops every row.
    SciDetail(bool),
    /// The rows of the SCIs whose cache entry changed in one engine step (the engine loop
    /// sends them only while `SciDetail(true)` is on, before the step's other events). An
    /// SCI that left the cache has no row: its `SciChange::Removed` drops it.
    SciRows(Vec<super::advertisement::SciMetrics>),
}

/// One SCI's change, with its service's resulting site metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct SciEvent {
    pub csci_id: CsciId,
    pub cs_id: CsId,
    pub change: SciChange,
    /// The CS-ID's site metrics after the change; `None` when no SCI of the service is left
    /// (the last one failed or was removed): the service is withdrawn.
    pub site: Option<SiteMetrics>,
}

/// What happened to the SCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SciChange {
    /// A lifecycle transition (YANG notification `sci-state-change`; `from: None` for a newly
    /// discovered SCI). New, ACTIVE → HEALTHY and FAILED → anything are discovery
    /// (SCI Discovery Trigger); → FAILED is a failure (critical, the SCI is withdrawn);
    /// HEALTHY ↔ STALE only counts through the thresholds on the site metrics.
    State { from: Option<SciState>, to: SciState },
    /// The SCI reported a different health (seed 004, Health Change Trigger: HEALTHY →
    /// DEGRADED, DEGRADED → UNHEALTHY, …). Critical even when the site's own health stays
    /// the same (site health is the best of its SCIs).
    Health { from: Health, to: Health },
    /// The SCI was evicted from the full cache or deregistered (seed 004: eviction triggers
    /// a withdrawal advertisement).
    Removed,
}

/// Where a suppression applies.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SuppressScope {
    /// Every service (a maintenance window, a rule on site-wide conditions).
    Global,
    /// One service (a rule on that service's metrics).
    Service(CsId),
}

/// Which updates are suppressed (YANG `maintenance-window/suppress`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SuppressLevel {
    /// Routine updates and periodic snapshots; critical triggers (health changes, failures,
    /// withdrawals) still go out.
    NonCritical,
    /// Every update. Critical ones are held (one per CS-ID, latest value) and sent when the
    /// suppression ends; routine ones are dropped.
    All,
}
