//! Validator & Sanitizer (seed 004): every report is checked before it reaches the metric
//! cache — value ranges, duplicate / out-of-order / replayed reports (sequence number and
//! timestamp), anomalous changes (GAS > 50 % within 1 s without a health change, computing
//! time > 100 % within 1 s, > 3 health transitions within 10 s) with the configured action,
//! and metric consistency (computing time > 0 when GAS > 0).

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::model::{Health, Metrics, Report, ReportRef};
use super::report::RawReport;

/// Why a report was not accepted; each is a `cats-sma-types:rejection-reason` identity with
/// its own counter in the operational state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rejection {
    OutOfRange,
    Anomaly,
    Duplicate,
    OutOfOrder,
    Replay,
    Inconsistent,
    Unauthenticated,
    UnauthorizedCsId,
    Malformed,
    UnknownSci,
    RateLimited,
    Quarantined,
    /// Not discovered: max-discovered reached or the cache full (`discovery.rs`).
    DiscoveryLimit,
}

impl Rejection {
    pub const ALL: [Rejection; 13] = [
        Rejection::OutOfRange,
        Rejection::Anomaly,
        Rejection::Duplicate,
        Rejection::OutOfOrder,
        Rejection::Replay,
        Rejection::Inconsistent,
        Rejection::Unauthenticated,
        Rejection::UnauthorizedCsId,
        Rejection::Malformed,
        Rejection::UnknownSci,
        Rejection::RateLimited,
        Rejection::Quarantined,
        Rejection::DiscoveryLimit,
    ];

    /// The identity name in cats-sma-types.
    pub fn identity(self) -> &'static str {
        match self {
            Rejection::OutOfRange => "out-of-range",
            Rejection::Anomaly => "anomaly",
            Rejection::Duplicate => "duplicate",
            Rejection::OutOfOrder => "out-of-order",
            Rejection::Replay => "replay",
            Rejection::Inconsistent => "inconsistent",
            Rejection::Unauthenticated => "unauthenticated",
            Rejection::UnauthorizedCsId => "unauthorized-cs-id",
            Rejection::Malformed => "malformed",
            Rejection::UnknownSci => "unknown-sci",
            Rejection::RateLimited => "rate-limited",
            Rejection::Quarantined => "quarantined",
            Rejection::DiscoveryLimit => "discovery-limit",
        }
    }

    pub fn index(self) -> usize {
        Rejection::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

/// What to do with an anomalous report (YANG validation/anomaly/action).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnomalyAction {
    Reject,
    Quarantine,
    AcceptWithWarning,
}

/// The validation settings (YANG `validation`), with the seed's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidationConfig {
    pub gas_max: u32,
    pub computing_time_max: u32,
    pub cost_max: u32,
    pub reputation_max: u8,
    pub security_label_max: u8,
    pub gas_change_percent: u32,
    pub gas_change_window: Duration,
    pub computing_time_change_percent: u32,
    pub computing_time_change_window: Duration,
    pub health_flap_transitions: u32,
    pub health_flap_window: Duration,
    pub action: AnomalyAction,
    /// Reports whose timestamp is further than this from the agent's clock are replays.
    pub timestamp_window: Duration,
}

impl Default for ValidationConfig {
    fn default() -> Self {
        ValidationConfig {
            gas_max: u32::MAX,
            computing_time_max: 3_600_000,
            cost_max: u32::MAX,
            reputation_max: 10,
            security_label_max: 10,
            gas_change_percent: 50,
            gas_change_window: Duration::from_millis(1000),
            computing_time_change_percent: 100,
            computing_time_change_window: Duration::from_millis(1000),
            health_flap_transitions: 3,
            health_flap_window: Duration::from_millis(10_000),
            action: AnomalyAction::Quarantine,
            timestamp_window: Duration::from_secs(30),
        }
    }
}

/// Which anomaly a report showed (for the metric-anomaly notification).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Anomaly {
    GasJump { old: u32, new: u32 },
    ComputingTimeJump { old: u32, new: u32 },
    HealthFlapping { transitions: u32 },
}

/// What the validator remembers of one SCI between reports.
#[derive(Clone, Debug, Default)]
pub struct History {
    pub last_sequence: Option<u64>,
    pub last_timestamp: Option<DateTime<Utc>>,
    /// When the last accepted report arrived, with its metrics.
    pub last: Option<(Instant, Metrics)>,
    /// Arrival times of health transitions within the flap window.
    pub transitions: VecDeque<Instant>,
}

/// What the validator reads of an SCI's past: a [`History`] of its own, or the cache
/// entry, which keeps it in its own fields (`cache.rs`).
pub trait Past {
    fn last_sequence(&self) -> Option<u64>;
    fn last_timestamp(&self) -> Option<DateTime<Utc>>;
    /// When the last accepted report arrived, with its metrics.
    fn last(&self) -> Option<(Instant, Metrics)>;
    /// Health transitions that arrived at or after `start` (all, without one).
    fn transitions_since(&self, start: Option<Instant>) -> u32;
}

impl Past for History {
    fn last_sequence(&self) -> Option<u64> {
        self.last_sequence
    }

    fn last_timestamp(&self) -> Option<DateTime<Utc>> {
        self.last_timestamp
    }

    fn last(&self) -> Option<(Instant, Metrics)> {
        self.last
    }

    fn transitions_since(&self, start: Option<Instant>) -> u32 {
        self.transitions.iter().filter(|t| start.is_none_or(|s| **t >= s)).count() as u32
    }
}

impl History {
    /// No history (a new SCI).
    pub const EMPTY: History =
        History { last_sequence: None, last_timestamp: None, last: None, transitions: VecDeque::new() };
}

/// The verdict on one report.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Accept { report: Report, warning: Option<Anomaly> },
    Quarantine { report: Report, anomaly: Anomaly },
    Reject { reason: Rejection, detail: String, anomaly: Option<Anomaly> },
}

/// Range checks: raw values to typed metrics (seed 004: GAS 0..MAX_UINT32, computing time
/// 0..3600000 ms, cost 0..MAX_UINT32, reputation 0..10, security label 0..10).
pub fn check_ranges(raw: &RawReport, cfg: &ValidationConfig) -> Result<Report, (Rejection, String)> {
    let metrics = check_metrics(raw, cfg)?;
    Ok(Report {
        csci_id: raw.csci_id.clone(),
        cs_id: raw.cs_id.clone(),
        sequence: raw.sequence,
        timestamp: raw.timestamp,
        metrics,
    })
}

/// The range and consistency checks of [`check_ranges`], without copying the identifiers
/// (the report path borrows them from the raw report).
pub fn check_metrics(raw: &RawReport, cfg: &ValidationConfig) -> Result<Metrics, (Rejection, String)> {
    fn range(name: &str, v: i64, max: u64) -> Result<u64, (Rejection, String)> {
        if v < 0 || v as u64 > max {
            Err((Rejection::OutOfRange, format!("{name} {v} is outside 0..={max}")))
        } else {
            Ok(v as u64)
        }
    }
    let health = Health::parse(&raw.health).ok_or_else(|| {
        (Rejection::Malformed, format!("health \"{}\" is not HEALTHY, DEGRADED or UNHEALTHY", raw.health))
    })?;
    if raw.csci_id.is_empty() || raw.cs_id.is_empty() {
        return Err((Rejection::Malformed, "csci-id and cs-id must not be empty".into()));
    }
    let metrics = Metrics {
        gas: range("gas", raw.gas, cfg.gas_max as u64)? as u32,
        computing_time_ms: range("computing-time", raw.computing_time, cfg.computing_time_max as u64)? as u32,
        health,
        cost: raw.cost.map(|c| range("cost", c, cfg.cost_max as u64).map(|v| v as u32)).transpose()?,
        reputation: raw
            .reputation
            .map(|r| range("reputation", r, cfg.reputation_max as u64).map(|v| v as u8))
            .transpose()?,
        security_label: raw
            .security_label
            .map(|s| range("security-label", s, cfg.security_label_max as u64).map(|v| v as u8))
            .transpose()?,
    };
    if metrics.gas > 0 && metrics.computing_time_ms == 0 {
        // seed 004: computing time SHOULD be > 0 if GAS > 0.
        return Err((Rejection::Inconsistent, "computing-time is 0 while gas is positive".into()));
    }
    Ok(metrics)
}

fn change_percent(old: u32, new: u32) -> u64 {
    if old == 0 {
        return if new == 0 { 0 } else { u64::MAX };
    }
    (old.abs_diff(new) as u64) * 100 / old as u64
}

/// Validates a report against the SCI's history. Does not change the history: the caller
/// records an accepted report with [`record`].
pub fn validate(
    raw: &RawReport,
    history: &History,
    cfg: &ValidationConfig,
    now: Instant,
    wall: DateTime<Utc>,
) -> Verdict {
    let report = |metrics| Report {
        csci_id: raw.csci_id.clone(),
        cs_id: raw.cs_id.clone(),
        sequence: raw.sequence,
        timestamp: raw.timestamp,
        metrics,
    };
    match judge(raw, history, cfg, now, wall) {
        Judgement::Accept { metrics, warning } => Verdict::Accept { report: report(metrics), warning },
        Judgement::Quarantine { metrics, anomaly } => Verdict::Quarantine { report: report(metrics), anomaly },
        Judgement::Reject { reason, detail, anomaly } => Verdict::Reject { reason, detail, anomaly },
    }
}

/// The verdict of [`judge`]: [`Verdict`] with the checked metrics only (the identifiers,
/// sequence number and timestamp are the raw report's).
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    Accept { metrics: Metrics, warning: Option<Anomaly> },
    Quarantine { metrics: Metrics, anomaly: Anomaly },
    Reject { reason: Rejection, detail: String, anomaly: Option<Anomaly> },
}

/// [`validate`] without building an owned [`Report`]: the report path's form, which
/// allocates nothing for a report that passes.
pub fn judge(
    raw: &RawReport,
    history: &impl Past,
    cfg: &ValidationConfig,
    now: Instant,
    wall: DateTime<Utc>,
) -> Judgement {
    let metrics = match check_metrics(raw, cfg) {
        Ok(m) => m,
        Err((reason, detail)) => return Judgement::Reject { reason, detail, anomaly: None },
    };
    let (sequence, timestamp) = (raw.sequence, raw.timestamp);
    // A sequence number never outranks time: a report whose timestamp is newer than the
    // last accepted one may start its sequence again (the SCI restarted), so no sender can
    // lock an SCI out by getting a huge sequence number accepted once. Replays stay
    // refused: a captured report is never newer than the last one accepted.
    let restart = history.last_timestamp().is_some_and(|t| timestamp > t);
    if let Some(last) = history.last_sequence().filter(|_| !restart) {
        if sequence == last {
            return Judgement::Reject {
                reason: Rejection::Duplicate,
                detail: format!("sequence {sequence} already received"),
                anomaly: None,
            };
        }
        if sequence < last {
            return Judgement::Reject {
                reason: Rejection::OutOfOrder,
                detail: format!("sequence {sequence} is older than {last}"),
                anomaly: None,
            };
        }
    }
    if history.last_timestamp().is_some_and(|t| timestamp < t) {
        return Judgement::Reject {
            reason: Rejection::OutOfOrder,
            detail: "timestamp older than the last report".into(),
            anomaly: None,
        };
    }
    let skew = (wall - timestamp).abs().to_std().unwrap_or(Duration::MAX);
    if skew > cfg.timestamp_window {
        return Judgement::Reject {
            reason: Rejection::Replay,
            detail: format!("timestamp {timestamp} is {}s away from the agent's clock", skew.as_secs()),
            anomaly: None,
        };
    }
    let anomaly = detect_anomaly(&metrics, history, cfg, now);
    match (anomaly, cfg.action) {
        (None, _) => Judgement::Accept { metrics, warning: None },
        (Some(a), AnomalyAction::AcceptWithWarning) => Judgement::Accept { metrics, warning: Some(a) },
        (Some(a), AnomalyAction::Quarantine) => Judgement::Quarantine { metrics, anomaly: a },
        (Some(a), AnomalyAction::Reject) => {
            Judgement::Reject { reason: Rejection::Anomaly, detail: format!("{a:?}"), anomaly: Some(a) }
        }
    }
}

fn detect_anomaly(m: &Metrics, h: &impl Past, cfg: &ValidationConfig, now: Instant) -> Option<Anomaly> {
    let (at, prev) = h.last()?;
    let since = now.saturating_duration_since(at);
    let health_changed = prev.health != m.health;
    if health_changed {
        let window_start = now.checked_sub(cfg.health_flap_window);
        let recent = h.transitions_since(window_start) + 1;
        if recent > cfg.health_flap_transitions {
            return Some(Anomaly::HealthFlapping { transitions: recent });
        }
    }
    if !health_changed
        && since <= cfg.gas_change_window
        && change_percent(prev.gas, m.gas) > cfg.gas_change_percent as u64
    {
        return Some(Anomaly::GasJump { old: prev.gas, new: m.gas });
    }
    if since <= cfg.computing_time_change_window
        && change_percent(prev.computing_time_ms, m.computing_time_ms) > cfg.computing_time_change_percent as u64
    {
        return Some(Anomaly::ComputingTimeJump { old: prev.computing_time_ms, new: m.computing_time_ms });
    }
    None
}

/// Records an accepted report in the SCI's history.
pub fn record(h: &mut History, r: ReportRef<'_>, cfg: &ValidationConfig, now: Instant) {
    if let Some((_, prev)) = h.last {
        if prev.health != r.metrics.health {
            h.transitions.push_back(now);
        }
    }
    if let Some(start) = now.checked_sub(cfg.health_flap_window) {
        while h.transitions.front().is_some_and(|t| *t < start) {
            h.transitions.pop_front();
        }
    }
    h.last_sequence = Some(r.sequence);
    h.last_timestamp = Some(r.timestamp);
    h.last = Some((now, r.metrics));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(seq: u64, gas: i64, ct: i64, health: &str, wall: DateTime<Utc>) -> RawReport {
        RawReport {
            csci_id: "188.3.67.3:67".into(),
            cs_id: "AR1".into(),
            sequence: seq,
            timestamp: wall,
            gas,
            computing_time: ct,
            health: health.into(),
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    fn accept(v: Verdict) -> Report {
        match v {
            Verdict::Accept { report, warning: None } => report,
            other => panic!("expected a plain accept, got {other:?}"),
        }
    }

    fn rejected(v: Verdict) -> Rejection {
        match v {
            Verdict::Reject { reason, .. } => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn seed_ranges() {
        // seed 004 Validator & Sanitizer: GAS 0..MAX_UINT32, computing time 0..3600000 ms,
        // cost 0..MAX_UINT32, reputation 0..10, security label 0..10.
        let cfg = ValidationConfig::default();
        let w = Utc::now();
        assert!(check_ranges(&raw(1, u32::MAX as i64, 1, "HEALTHY", w), &cfg).is_ok());
        assert_eq!(
            check_ranges(&raw(1, u32::MAX as i64 + 1, 1, "HEALTHY", w), &cfg).unwrap_err().0,
            Rejection::OutOfRange
        );
        assert_eq!(check_ranges(&raw(1, -1, 1, "HEALTHY", w), &cfg).unwrap_err().0, Rejection::OutOfRange);
        assert!(check_ranges(&raw(1, 1, 3_600_000, "HEALTHY", w), &cfg).is_ok());
        assert_eq!(check_ranges(&raw(1, 1, 3_600_001, "HEALTHY", w), &cfg).unwrap_err().0, Rejection::OutOfRange);
        let mut r = raw(1, 1, 1, "HEALTHY", w);
        r.reputation = Some(10);
        r.security_label = Some(10);
        r.cost = Some(u32::MAX as i64);
        assert!(check_ranges(&r, &cfg).is_ok());
        r.reputation = Some(11);
        assert_eq!(check_ranges(&r, &cfg).unwrap_err().0, Rejection::OutOfRange);
        r.reputation = None;
        r.security_label = Some(11);
        assert_eq!(check_ranges(&r, &cfg).unwrap_err().0, Rejection::OutOfRange);
        assert_eq!(check_ranges(&raw(1, 1, 1, "SICK", w), &cfg).unwrap_err().0, Rejection::Malformed);
    }

    #[test]
    fn seed_consistency_computing_time_positive_when_gas_positive() {
        let cfg = ValidationConfig::default();
        assert_eq!(check_ranges(&raw(1, 5, 0, "HEALTHY", Utc::now()), &cfg).unwrap_err().0, Rejection::Inconsistent);
        assert!(check_ranges(&raw(1, 0, 0, "UNHEALTHY", Utc::now()), &cfg).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn seed_004_metric_integrity_a_huge_sequence_number_cannot_lock_an_sci_out() {
        // seq 2^64-1 accepted once (say, from a sender of an 'authentication none' SCI)
        // does not hold the SCI back: its next report, timestamped later, starts again.
        let cfg = ValidationConfig::default();
        let wall = Utc::now();
        let mut h = History::default();
        let r = accept(validate(&raw(u64::MAX, 100, 5, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
        record(&mut h, r.view(), &cfg, Instant::now());
        let later = wall + chrono::Duration::milliseconds(500);
        let r = accept(validate(&raw(7, 100, 5, "HEALTHY", later), &h, &cfg, Instant::now(), later));
        assert_eq!(r.sequence, 7);
        record(&mut h, r.view(), &cfg, Instant::now());
        // A replay of the poisoned report (older timestamp) stays refused, and so does a
        // replay of the last one (same sequence, same time).
        assert_eq!(
            rejected(validate(&raw(u64::MAX, 100, 5, "HEALTHY", wall), &h, &cfg, Instant::now(), later)),
            Rejection::OutOfOrder
        );
        assert_eq!(
            rejected(validate(&raw(7, 100, 5, "HEALTHY", later), &h, &cfg, Instant::now(), later)),
            Rejection::Duplicate
        );
    }

    #[tokio::test(start_paused = true)]
    async fn seed_duplicates_out_of_order_and_replays_are_discarded() {
        let cfg = ValidationConfig::default();
        let wall = Utc::now();
        let mut h = History::default();
        let r = accept(validate(&raw(5, 100, 5, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
        record(&mut h, r.view(), &cfg, Instant::now());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            rejected(validate(&raw(5, 100, 5, "HEALTHY", wall), &h, &cfg, Instant::now(), wall)),
            Rejection::Duplicate
        );
        assert_eq!(
            rejected(validate(&raw(4, 100, 5, "HEALTHY", wall), &h, &cfg, Instant::now(), wall)),
            Rejection::OutOfOrder
        );
        let old = wall - chrono::Duration::seconds(1);
        assert_eq!(
            rejected(validate(&raw(6, 100, 5, "HEALTHY", old), &h, &cfg, Instant::now(), wall)),
            Rejection::OutOfOrder
        );
        let stale = wall - chrono::Duration::seconds(31);
        let fresh = History::default();
        assert_eq!(
            rejected(validate(&raw(1, 100, 5, "HEALTHY", stale), &fresh, &cfg, Instant::now(), wall)),
            Rejection::Replay
        );
        let future = wall + chrono::Duration::seconds(31);
        assert_eq!(
            rejected(validate(&raw(1, 100, 5, "HEALTHY", future), &fresh, &cfg, Instant::now(), wall)),
            Rejection::Replay
        );
    }

    #[tokio::test(start_paused = true)]
    async fn seed_anomalies_and_actions() {
        let wall = Utc::now();
        for action in [AnomalyAction::Reject, AnomalyAction::Quarantine, AnomalyAction::AcceptWithWarning] {
            let cfg = ValidationConfig { action, ..Default::default() };
            let mut h = History::default();
            let r = accept(validate(&raw(1, 100, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
            record(&mut h, r.view(), &cfg, Instant::now());
            tokio::time::advance(Duration::from_millis(500)).await;
            // GAS +60 % within 1 s without a health change.
            let v = validate(&raw(2, 160, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall);
            let expect = Anomaly::GasJump { old: 100, new: 160 };
            match (action, v) {
                (AnomalyAction::Reject, Verdict::Reject { reason: Rejection::Anomaly, anomaly, .. }) => {
                    assert_eq!(anomaly, Some(expect))
                }
                (AnomalyAction::Quarantine, Verdict::Quarantine { anomaly, .. }) => assert_eq!(anomaly, expect),
                (AnomalyAction::AcceptWithWarning, Verdict::Accept { warning, .. }) => {
                    assert_eq!(warning, Some(expect))
                }
                (a, v) => panic!("{a:?}: {v:?}"),
            }
            // +50 % exactly is not an anomaly; the same jump after more than 1 s is fine.
            accept(validate(&raw(2, 150, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
            tokio::time::advance(Duration::from_millis(600)).await;
            accept(validate(&raw(2, 160, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
        }
        // GAS jump with a health change is not an anomaly (seed: "without corresponding
        // health change").
        let cfg = ValidationConfig::default();
        let mut h = History::default();
        let r = accept(validate(&raw(1, 100, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
        record(&mut h, r.view(), &cfg, Instant::now());
        tokio::time::advance(Duration::from_millis(100)).await;
        accept(validate(&raw(2, 10, 10, "DEGRADED", wall), &h, &cfg, Instant::now(), wall));
        // Computing time +150 % within 1 s.
        match validate(&raw(2, 100, 25, "HEALTHY", wall), &h, &cfg, Instant::now(), wall) {
            Verdict::Quarantine { anomaly: Anomaly::ComputingTimeJump { old: 10, new: 25 }, .. } => {}
            v => panic!("{v:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn seed_health_flapping_more_than_three_transitions_in_ten_seconds() {
        let wall = Utc::now();
        let cfg = ValidationConfig::default();
        let mut h = History::default();
        let healths = ["HEALTHY", "DEGRADED", "HEALTHY", "DEGRADED", "HEALTHY"];
        for (i, hl) in healths.iter().enumerate() {
            let v = validate(&raw(i as u64 + 1, 100, 10, hl, wall), &h, &cfg, Instant::now(), wall);
            if i < 4 {
                let r = accept(v);
                record(&mut h, r.view(), &cfg, Instant::now());
            } else {
                // The fourth transition within 10 s.
                assert!(
                    matches!(v, Verdict::Quarantine { anomaly: Anomaly::HealthFlapping { transitions: 4 }, .. }),
                    "{v:?}"
                );
            }
            tokio::time::advance(Duration::from_secs(2)).await;
        }
        // Once the window has passed, transitions are fine again.
        tokio::time::advance(Duration::from_secs(10)).await;
        accept(validate(&raw(6, 100, 10, "HEALTHY", wall), &h, &cfg, Instant::now(), wall));
    }
}
