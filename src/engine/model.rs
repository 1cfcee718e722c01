//! The C-SMA's data, as typed values (seed 004, "Metric Cache" and "SCI Collection
//! Interface"): what an SCI reports, the health and lifecycle states, the site metrics the
//! agent advertises. No libyang, no XML: this is the hot path's vocabulary.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// CATS Service Contact Instance identifier (e.g. `188.3.67.3:67`).
pub type CsciId = String;
/// CATS Service identifier (e.g. `AR1`).
pub type CsId = String;

/// SCI health as reported (seed 004: HEALTHY / DEGRADED / UNHEALTHY).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Health {
    Healthy,
    Degraded,
    Unhealthy,
}

impl Health {
    /// The YANG enum value (cats-sma-types:health-status).
    pub fn yang(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Unhealthy => "unhealthy",
        }
    }

    /// Case-insensitive, without allocating (it runs for every report).
    pub fn parse(s: &str) -> Option<Health> {
        [(Health::Healthy, "HEALTHY"), (Health::Degraded, "DEGRADED"), (Health::Unhealthy, "UNHEALTHY")]
            .into_iter()
            .find(|(_, name)| s.eq_ignore_ascii_case(name))
            .map(|(h, _)| h)
    }
}

/// The SCI lifecycle (seed 004, "SCI state machine").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SciState {
    /// Discovered, not yet confirmed healthy.
    Active,
    /// Reporting normally.
    Healthy,
    /// No report within the TTL; recovery (pull) in progress.
    Stale,
    /// Unreachable: its metrics are withdrawn, GAS contribution 0.
    Failed,
}

impl SciState {
    pub fn yang(self) -> &'static str {
        match self {
            SciState::Active => "active",
            SciState::Healthy => "healthy",
            SciState::Stale => "stale",
            SciState::Failed => "failed",
        }
    }
}

/// The metrics of one report (seed 004 ranges are enforced by the validator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metrics {
    /// Global Available Slots: concurrent requests the SCI can take now.
    pub gas: u32,
    /// Time to serve one request, milliseconds (0..=3 600 000).
    pub computing_time_ms: u32,
    pub health: Health,
    pub cost: Option<u32>,
    /// 0..=10
    pub reputation: Option<u8>,
    /// 0..=10
    pub security_label: Option<u8>,
}

/// One SCI report (seed 004, "SCI Report").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub csci_id: CsciId,
    pub cs_id: CsId,
    /// Monotonically increasing per SCI; duplicates and older ones are discarded.
    pub sequence: u64,
    /// When the SCI measured the metrics.
    pub timestamp: DateTime<Utc>,
    pub metrics: Metrics,
}

/// A report whose identifiers are borrowed (from the raw report on the report path, which
/// then copies nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportRef<'a> {
    pub csci_id: &'a str,
    pub cs_id: &'a str,
    pub sequence: u64,
    pub timestamp: DateTime<Utc>,
    pub metrics: Metrics,
}

impl Report {
    pub fn view(&self) -> ReportRef<'_> {
        ReportRef {
            csci_id: &self.csci_id,
            cs_id: &self.cs_id,
            sequence: self.sequence,
            timestamp: self.timestamp,
            metrics: self.metrics,
        }
    }
}

/// What the agent advertises for one service at this site (the Computing Service Table
/// row a C-PS keeps per CS-ID and site).
#[derive(Clone, Debug, PartialEq)]
pub struct SiteMetrics {
    pub cs_id: CsId,
    /// Reported GAS after policy (safety factor, rules, bounds).
    pub gas: u32,
    pub computing_time_ms: u32,
    pub health: Health,
    /// The lowest cost of the contributing SCIs (after policy).
    pub cost: Option<u32>,
    /// The lowest reputation (0..=10) of the contributing SCIs: the site is as reputable as
    /// its least reputable instance.
    pub reputation: Option<u8>,
    /// The lowest security label (0..=10) of the contributing SCIs.
    pub security_label: Option<u8>,
    /// SCIs contributing (HEALTHY or DEGRADED and not FAILED).
    pub sci_count: u32,
}
