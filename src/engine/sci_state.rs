//! The per-SCI state machine (seed 004, "SCI state machine"): ACTIVE (registered or
//! discovered, no report yet) → HEALTHY (reporting) → STALE (no report within the TTL; the
//! agent pulls) → FAILED (no report within the grace period; metrics withdrawn). A report
//! brings a STALE or FAILED SCI back to HEALTHY. Transitions are the only way state changes,
//! and each one is an event the engine turns into a notification and an update trigger.

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
}

/// Why a transition happened (the YANG sci-state-change reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    FirstReport,
    ReportResumed,
    TtlExpired,
    GracePeriodExpired,
}

impl Reason {
    /// The cats-sma sci-state-change reason enum (a first report is a report received).
    pub fn yang(self) -> &'static str {
        match self {
            Reason::FirstReport | Reason::ReportResumed => "report-received",
            Reason::TtlExpired => "ttl-expired",
            Reason::GracePeriodExpired => "grace-period-expired",
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
        // An SCI that never reported does not age; timers that fire late are ignored.
        (Active | Stale | Failed, TtlExpired) | (Active | Healthy | Failed, GraceExpired) => None,
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
}
