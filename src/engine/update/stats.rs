//! Counters of the Update Controller's decisions, for the operational state (what was sent,
//! and what was not and why).

/// Since the controller started. Counters count updates (one per CS-ID change) unless said
/// otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdateStats {
    /// Advertisements emitted (full + delta).
    pub advertisements: u64,
    pub full_snapshots: u64,
    pub deltas: u64,
    /// Full snapshots sent because the heartbeat interval ran out.
    pub heartbeats: u64,
    /// Resync requests received.
    pub resync_requests: u64,
    /// Changes not advertised because they stayed within the thresholds of the last
    /// advertised values (or were back within them when their turn came).
    pub below_threshold: u64,
    /// Changes folded into an update already waiting for the same CS-ID (latest value wins).
    pub coalesced: u64,
    /// Non-critical updates held because the CS-ID was advertised less than min-interval ago.
    pub held: u64,
    /// Updates dropped by a maintenance window or SUPPRESS_UPDATES (the heartbeat never is).
    pub suppressed: u64,
    /// Advertisements that had to wait for a token.
    pub rate_limited: u64,
    /// Sequence number of the last advertisement.
    pub last_seq: Option<u64>,
    /// CS-IDs with an update waiting now (gauge).
    pub pending: u32,
    /// Whole tokens in the bucket now (gauge; `None` without a token bucket).
    pub tokens: Option<u32>,
    /// The heartbeat interval in force (gauge: configured, or adapted to the C-PSes' hints).
    pub heartbeat_interval: std::time::Duration,
    /// SCIs with a per-SCI row (gauge; `None` while no C-PS wants per-SCI metrics).
    pub sci_rows: Option<u32>,
    /// Accepted SCI reports per second in the last load sample (gauge; 0 without
    /// `load-shedding`).
    pub report_rate: u64,
    /// Since when optional metrics are shed under high load (`None`: not now).
    pub load_shedding_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Advertisements from which optional metrics were left out.
    pub shed_advertisements: u64,
}
