//! Update triggers and their priorities (seed 004, Update Controller: "The UC MUST
//! prioritize triggers. Critical triggers (e.g., health change) take precedence over routine
//! triggers (e.g., metric change)"), and the change thresholds of the Policy Engine's update
//! control, always measured against the values last advertised for the CS-ID.

use super::config::UpdateConfig;
use crate::engine::model::SiteMetrics;

/// How urgent an update is; the order is the precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// The heartbeat snapshot.
    Periodic,
    /// A metric past a threshold, a policy change.
    Routine,
    /// A new service or SCI (SCI Discovery Trigger).
    Membership,
    /// Health changes, failures, withdrawals, explicit resyncs: bypass the minimum interval
    /// and `non-critical` suppression, and are first in line for tokens.
    Critical,
}

impl Priority {
    pub fn is_critical(self) -> bool {
        self == Priority::Critical
    }
}

/// Why an update was sent. An advertisement carries the most urgent trigger among its
/// contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Trigger {
    /// An SCI's or the site's health changed (Health Change Trigger).
    HealthChange,
    /// An SCI went FAILED; its metrics are withdrawn (SCI state machine).
    SciFailure,
    /// An SCI was evicted or deregistered, or a service lost its last SCI.
    Withdrawal,
    /// A full snapshot was asked for (reconciliation).
    Resync,
    /// A new SCI or service (SCI Discovery Trigger).
    Discovery,
    /// A metric crossed its threshold (Metric Change Trigger).
    MetricChange,
    /// Policy re-evaluation moved a metric past its threshold (Policy Change Trigger).
    PolicyChange,
    /// Periodic full snapshot (heartbeat).
    Heartbeat,
}

impl Trigger {
    pub fn priority(self) -> Priority {
        match self {
            Trigger::HealthChange | Trigger::SciFailure | Trigger::Withdrawal | Trigger::Resync => Priority::Critical,
            Trigger::Discovery => Priority::Membership,
            Trigger::MetricChange | Trigger::PolicyChange => Priority::Routine,
            Trigger::Heartbeat => Priority::Periodic,
        }
    }

    /// A stable name for logs, notifications and the adapters.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::HealthChange => "health-change",
            Trigger::SciFailure => "sci-failure",
            Trigger::Withdrawal => "withdrawal",
            Trigger::Resync => "resync",
            Trigger::Discovery => "discovery",
            Trigger::MetricChange => "metric-change",
            Trigger::PolicyChange => "policy-change",
            Trigger::Heartbeat => "heartbeat",
        }
    }

    /// The more urgent of two triggers; on a tie, `self`.
    pub fn max(self, other: Trigger) -> Trigger {
        if other.priority() > self.priority() {
            other
        } else {
            self
        }
    }
}

/// Whether an update with this trigger goes without waiting for its CS-ID's `min-interval`:
/// critical ones, SCI discovery (SCI Discovery Trigger: a full update) and a policy change
/// (an operator's commit takes effect now). Suppression and the token bucket still apply.
pub fn bypasses_min_interval(trigger: Trigger) -> bool {
    trigger.priority().is_critical() || matches!(trigger, Trigger::Discovery | Trigger::PolicyChange)
}

/// Whether `new` differs from the last advertised `old` enough to be sent, and why (seed
/// 004, Policy Engine, update control): health change (critical); GAS delta > percent OR
/// absolute delta > absolute; computing time delta > percent; security label change. Cost and
/// the SCI count are not triggers: the next heartbeat carries them.
pub fn significant(old: &SiteMetrics, new: &SiteMetrics, config: &UpdateConfig) -> Option<Trigger> {
    if old.health != new.health {
        return Some(Trigger::HealthChange);
    }
    let gas = changed_more_than(old.gas, new.gas, config.gas_delta_percent)
        || old.gas.abs_diff(new.gas) > config.gas_delta_absolute;
    let computing_time =
        changed_more_than(old.computing_time_ms, new.computing_time_ms, config.computing_time_delta_percent);
    (gas || computing_time || old.security_label != new.security_label).then_some(Trigger::MetricChange)
}

/// |new − old| > percent % of old, in exact integers. From 0 any change is more than any
/// percentage: capacity appearing where there was none is news.
pub fn changed_more_than(old: u32, new: u32, percent: u16) -> bool {
    u64::from(old.abs_diff(new)) * 100 > u64::from(percent) * u64::from(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::Health;

    fn site(gas: u32, ct: u32) -> SiteMetrics {
        SiteMetrics {
            cs_id: "AR1".into(),
            gas,
            computing_time_ms: ct,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
            sci_count: 1,
        }
    }

    #[test]
    fn seed_gas_delta_more_than_10_percent() {
        // Seed 004, Policy Engine, update control: "GAS delta > 10%". 10 % of 200 is 20.
        let c = UpdateConfig::default();
        assert_eq!(significant(&site(200, 100), &site(220, 100), &c), None, "exactly 10 % is not more");
        assert_eq!(significant(&site(200, 100), &site(180, 100), &c), None);
        assert_eq!(significant(&site(200, 100), &site(221, 100), &c), Some(Trigger::MetricChange));
        assert_eq!(significant(&site(200, 100), &site(179, 100), &c), Some(Trigger::MetricChange));
    }

    #[test]
    fn seed_gas_absolute_delta_more_than_50() {
        // Seed 004: "or absolute delta > 50". From 1000, 50 and 51 slots are 5 % and 5.1 %.
        let c = UpdateConfig::default();
        assert_eq!(significant(&site(1000, 100), &site(1050, 100), &c), None);
        assert_eq!(significant(&site(1000, 100), &site(1051, 100), &c), Some(Trigger::MetricChange));
        assert_eq!(significant(&site(1000, 100), &site(949, 100), &c), Some(Trigger::MetricChange));
    }

    #[test]
    fn seed_computing_time_delta_more_than_20_percent() {
        // Seed 004: "Computing Time delta > 20%". 20 % of 100 ms is 20 ms.
        let c = UpdateConfig::default();
        assert_eq!(significant(&site(500, 100), &site(500, 120), &c), None);
        assert_eq!(significant(&site(500, 100), &site(500, 80), &c), None);
        assert_eq!(significant(&site(500, 100), &site(500, 121), &c), Some(Trigger::MetricChange));
        assert_eq!(significant(&site(500, 100), &site(500, 79), &c), Some(Trigger::MetricChange));
    }

    #[test]
    fn seed_health_and_security_label_changes_always_count() {
        // Seed 004: "Health status change; Security label change".
        let c = UpdateConfig::default();
        let degraded = SiteMetrics { health: Health::Degraded, ..site(500, 100) };
        assert_eq!(significant(&site(500, 100), &degraded, &c), Some(Trigger::HealthChange));
        let labelled = SiteMetrics { reputation: None, security_label: Some(5), ..site(500, 100) };
        assert_eq!(significant(&site(500, 100), &labelled, &c), Some(Trigger::MetricChange));
        // Cost and SCI count are not triggers.
        let other = SiteMetrics { cost: Some(7), sci_count: 3, ..site(500, 100) };
        assert_eq!(significant(&site(500, 100), &other, &c), None);
    }

    #[test]
    fn from_zero_any_change_counts_and_large_values_do_not_overflow() {
        assert!(changed_more_than(0, 1, 10_000));
        assert!(!changed_more_than(0, 0, 0));
        assert!(changed_more_than(u32::MAX, u32::MAX - 1, 0), "0 % means any change");
        assert!(changed_more_than(u32::MAX, 0, 99));
        assert!(!changed_more_than(u32::MAX, 0, 100));
    }

    #[test]
    fn seed_critical_triggers_take_precedence() {
        // Seed 004, Update Controller: critical triggers take precedence over routine ones.
        assert!(Trigger::HealthChange.priority() > Trigger::Discovery.priority());
        assert!(Trigger::Discovery.priority() > Trigger::MetricChange.priority());
        assert!(Trigger::MetricChange.priority() > Trigger::Heartbeat.priority());
        assert_eq!(Trigger::MetricChange.max(Trigger::SciFailure), Trigger::SciFailure);
        assert_eq!(Trigger::SciFailure.max(Trigger::Withdrawal), Trigger::SciFailure);
    }
}
