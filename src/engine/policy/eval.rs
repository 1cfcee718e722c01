//! Evaluating compiled conditions and actions on one SCI's metrics or one site aggregate.
//! The hot path: no allocation, no string handling, matches on small enums only.

use super::rule::{Action, Cond, Metric, Var, VarKind};
use super::window::{Instant, MaintenanceWindow};
use crate::engine::model::{Health, Metrics, SiteMetrics};

/// What rules read and write: `Metrics` at SCI scope, `SiteMetrics` at site scope.
pub(crate) trait Subject {
    /// `None` when the (optional) metric is absent.
    fn get(&self, metric: Metric) -> Option<u32>;
    /// Stores a value the compiler range-checked for `metric`.
    fn put(&mut self, metric: Metric, value: u32);
    fn health(&self) -> Health;
}

fn label(value: u32) -> u8 {
    // Reputation and Security_Label constants are checked to 0..=10 at compile time.
    value.min(10) as u8
}

impl Subject for Metrics {
    #[inline]
    fn get(&self, metric: Metric) -> Option<u32> {
        match metric {
            Metric::Gas => Some(self.gas),
            Metric::ComputingTime => Some(self.computing_time_ms),
            Metric::Cost => self.cost,
            Metric::Reputation => self.reputation.map(u32::from),
            Metric::SecurityLabel => self.security_label.map(u32::from),
        }
    }

    #[inline]
    fn put(&mut self, metric: Metric, value: u32) {
        match metric {
            Metric::Gas => self.gas = value,
            Metric::ComputingTime => self.computing_time_ms = value,
            Metric::Cost => self.cost = Some(value),
            Metric::Reputation => self.reputation = Some(label(value)),
            Metric::SecurityLabel => self.security_label = Some(label(value)),
        }
    }

    #[inline]
    fn health(&self) -> Health {
        self.health
    }
}

impl Subject for SiteMetrics {
    #[inline]
    fn get(&self, metric: Metric) -> Option<u32> {
        match metric {
            Metric::Gas => Some(self.gas),
            Metric::ComputingTime => Some(self.computing_time_ms),
            Metric::Cost => self.cost,
            Metric::Reputation => self.reputation.map(u32::from),
            Metric::SecurityLabel => self.security_label.map(u32::from),
        }
    }

    #[inline]
    fn put(&mut self, metric: Metric, value: u32) {
        match metric {
            Metric::Gas => self.gas = value,
            Metric::ComputingTime => self.computing_time_ms = value,
            Metric::Cost => self.cost = Some(value),
            Metric::Reputation => self.reputation = Some(label(value)),
            Metric::SecurityLabel => self.security_label = Some(label(value)),
        }
    }

    #[inline]
    fn health(&self) -> Health {
        self.health
    }
}

fn metric_of(var: Var) -> Option<Metric> {
    match var.kind() {
        VarKind::Number(m) => Some(m),
        VarKind::Health | VarKind::Time => None,
    }
}

/// Three-valued (Kleene) evaluation: `None` is "unknown", from a comparison on an absent
/// optional metric. A rule fires only on `Some(true)`.
pub(crate) fn eval<S: Subject>(cond: &Cond, subject: &S, now: &Instant, windows: &[MaintenanceWindow]) -> Option<bool> {
    match cond {
        Cond::Const(b) => Some(*b),
        Cond::Cmp { var, op, value } => {
            let actual = subject.get(metric_of(*var)?)?;
            Some(op.test(actual, *value))
        }
        Cond::Health { equal, value, .. } => Some((subject.health() == *value) == *equal),
        Cond::InAnyWindow => Some(windows.iter().any(|w| w.active_at(now))),
        Cond::InWindow { index, .. } => Some(windows.get(*index as usize).is_some_and(|w| w.active_at(now))),
        Cond::Not(inner) => eval(inner, subject, now, windows).map(|b| !b),
        Cond::All(items) => {
            let mut result = Some(true);
            for item in items.iter() {
                match eval(item, subject, now, windows) {
                    Some(false) => return Some(false),
                    Some(true) => {}
                    None => result = None,
                }
            }
            result
        }
        Cond::Any(items) => {
            let mut result = Some(false);
            for item in items.iter() {
                match eval(item, subject, now, windows) {
                    Some(true) => return Some(true),
                    Some(false) => {}
                    None => result = None,
                }
            }
            result
        }
    }
}

/// Applies `action`; returns whether it asks to suppress updates.
pub(crate) fn apply<S: Subject>(action: &Action, subject: &mut S) -> bool {
    match *action {
        Action::Set { var, value } => {
            if let Some(m) = metric_of(var) {
                subject.put(m, value);
            }
        }
        Action::Reduce { var, milli_percent } => {
            if let Some((m, v)) = metric_of(var).and_then(|m| Some((m, subject.get(m)?))) {
                // Rounded down, like the safety factor: never advertise more than asked.
                let kept = u64::from(v) * u64::from(100_000 - milli_percent.min(100_000)) / 100_000;
                subject.put(m, kept as u32);
            }
        }
        Action::Clamp { var, min, max } => {
            if let Some((m, v)) = metric_of(var).and_then(|m| Some((m, subject.get(m)?))) {
                subject.put(m, v.max(min).min(max));
            }
        }
        Action::SuppressUpdates => return true,
    }
    false
}
