//! The per-SCI state machine (seed 004, "SCI state machine"): ACTIVE (registered or
//! discovered, no report yet) → HEALTHY (reporting) → STALE (no report within the TTL; the
//! agent pulls) → FAILED (no report within the grace period; metrics withdrawn). A report
//! brings a STALE or FAILED SCI back to HEALTHY. Failure detection can skip the wait: an
//! active probe that finds a STALE SCI dead (`probe.rs`) or an external health monitor
//! (the `report-sci-failure` RPC) moves it to FAILED at once. Transitions are the only way
//! state changes, and each one is an event the engine turns into a notification and an
//! update trigger.

pub use super::model::SciState;

/// What moves an SCI between states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// An accepted report.
    Report,
    /// No report within the TTL.
    TtlExpired,
    /// No report within the grace period after going STALE.
    GraceExpired,
    /// An active probe of a STALE SCI found it failed (not a partition).
    ProbeFailed,
    /// An external health monitor reported the SCI failed.
    HealthMonitor,
}

/// Why a transition happened (the YANG sci-state-change reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    FirstReport,
    ReportResumed,
    TtlExpired,
    GracePeriodExpired,
    ProbeFailed,
    HealthMonitor,
    /// The entry left the cache (not a transition of the machine: the entry is gone; the
    /// notification reports the new state `failed`, its metrics being withdrawn).
    Evicted,
    Deregistered,
}

impl Reason {
    /// The cats-sma sci-state-change reason enum (a first report is a report received).
    pub fn yang(self) -> &'static str {
        match self {
            Reason::FirstReport | Reason::ReportResumed => "report-received",
            Reason::TtlExpired => "ttl-expired",
            Reason::GracePeriodExpired => "grace-period-expired",
            Reason::ProbeFailed => "probe-failed",
            Reason::HealthMonitor => "health-monitor",
            Reason::Evicted => "evicted",
            Reason::Deregistered => "deregistered",
        }
    }
}

/// The next state, or None when the input does not change the state.
pub fn next(state: SciState, input: Input) -> Option<(SciState, Reason)> {
    use Input::*;
    use SciState::*;
    match (state, input) {
        (Active, Report) => Some((Healthy, Reason::FirstReport)),
        (Stale | Failed, Report) => Some((Healthy, Reason::ReportResumed)),
        (Healthy, Report) => None,
        (Healthy, TtlExpired) => Some((Stale, Reason::TtlExpired)),
        (Stale, GraceExpired) => Some((Failed, Reason::GracePeriodExpired)),
        // Only a STALE SCI is probed; a result that arrives after it reported is moot.
        (Stale, ProbeFailed) => Some((Failed, Reason::ProbeFailed)),
        // The monitor may know before the TTL does, and before the first report.
        (Active | Healthy | Stale, HealthMonitor) => Some((Failed, Reason::HealthMonitor)),
        // An SCI that never reported does not age; timers that fire late are ignored.
        (Active | Stale | Failed, TtlExpired)
        | (Active | Healthy | Failed, GraceExpired)
        | (Active | Healthy | Failed, ProbeFailed)
        | (Failed, HealthMonitor) => None,
    }
}

/// Whether an SCI in this state contributes its metrics to the site (seed 004: a FAILED
/// SCI's GAS contribution is 0; a STALE one still counts while the agent tries to recover).
pub fn contributes(state: SciState) -> bool {
    matches!(state, SciState::Healthy | SciState::Stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_lifecycle() {
        use Input::*;
        use SciState::*;
        assert_eq!(next(Active, Report), Some((Healthy, Reason::FirstReport)));
        assert_eq!(next(Healthy, TtlExpired), Some((Stale, Reason::TtlExpired)));
        assert_eq!(next(Stale, GraceExpired), Some((Failed, Reason::GracePeriodExpired)));
        assert_eq!(next(Failed, Report), Some((Healthy, Reason::ReportResumed)));
        assert_eq!(next(Stale, Report), Some((Healthy, Reason::ReportResumed)));
        assert_eq!(next(Healthy, Report), None);
        assert_eq!(next(Active, TtlExpired), None);
        assert!(contributes(Healthy) && contributes(Stale));
        assert!(!contributes(Active) && !contributes(Failed));
    }

    #[test]
    fn seed004_sci_failure_detection_probe_and_health_monitor_transitions() {
        use Input::*;
        use SciState::*;
        // Active probes act on STALE SCIs only (a late result for a reporting SCI is moot).
        assert_eq!(next(Stale, ProbeFailed), Some((Failed, Reason::ProbeFailed)));
        for s in [Active, Healthy, Failed] {
            assert_eq!(next(s, ProbeFailed), None, "{s:?}");
        }
        // The external monitor is faster than the TTL: any live state goes FAILED at once.
        for s in [Active, Healthy, Stale] {
            assert_eq!(next(s, HealthMonitor), Some((Failed, Reason::HealthMonitor)), "{s:?}");
        }
        assert_eq!(next(Failed, HealthMonitor), None);
        // Recovery is the next accepted report, as after the grace period.
        assert_eq!(next(Failed, Report), Some((Healthy, Reason::ReportResumed)));
        assert_eq!(Reason::ProbeFailed.yang(), "probe-failed");
        assert_eq!(Reason::HealthMonitor.yang(), "health-monitor");
        assert_eq!(Reason::Evicted.yang(), "evicted");
        assert_eq!(Reason::Deregistered.yang(), "deregistered");
    }
}
