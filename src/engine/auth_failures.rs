//! Auth-failure flood control (seed 004: every authentication failure is logged; issue 11:
//! without letting a flood of them cost unbounded notifications, log lines or memory). Per
//! source address and transport, the first failure is notified at once; further failures
//! within the window are only counted, and when the window ends one summary carries their
//! number and the last of them. The table of sources is bounded: failures from sources
//! beyond it are summed in one overflow entry per transport. Counters are never skipped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::model::CsciId;
use super::validate::Rejection;

/// Whom a failure is charged to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    pub address: Option<IpAddr>,
    pub transport: &'static str,
    /// The overflow entry of the sources beyond the table (address None).
    pub overflow: bool,
}

impl Source {
    pub fn new(address: Option<IpAddr>, transport: &'static str) -> Source {
        Source { address, transport, overflow: false }
    }
}

/// One failure as notified.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    pub address: Option<IpAddr>,
    pub claimed: Option<CsciId>,
    pub reason: Rejection,
    pub detail: String,
}

struct Pending {
    until: Instant,
    /// Failures since the last notification for this source.
    count: u64,
    last: Option<Failure>,
}

/// What to do with a failure now.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Notify and log it now.
    Notify,
    /// Counted into the source's next summary.
    Aggregated,
}

pub struct Aggregator {
    window: Duration,
    max_sources: usize,
    table: HashMap<Source, Pending>,
}

impl Aggregator {
    pub fn new(window: Duration, max_sources: usize) -> Aggregator {
        Aggregator {
            window: window.max(Duration::from_millis(1)),
            max_sources: max_sources.max(1),
            table: HashMap::new(),
        }
    }

    /// Records a failure from `source` at `now`.
    pub fn record(&mut self, source: Source, failure: Failure, now: Instant) -> Verdict {
        let key = if self.table.contains_key(&source) || self.table.len() < self.max_sources {
            source
        } else {
            Source { address: None, transport: source.transport, overflow: true }
        };
        match self.table.get_mut(&key) {
            Some(p) => {
                p.count += 1;
                p.last = Some(failure);
                Verdict::Aggregated
            }
            None if key.overflow => {
                // The overflow entry starts aggregated: its sources were never seen alone.
                self.table.insert(key, Pending { until: now + self.window, count: 1, last: Some(failure) });
                Verdict::Aggregated
            }
            None => {
                self.table.insert(key, Pending { until: now + self.window, count: 0, last: None });
                Verdict::Notify
            }
        }
    }

    /// The summaries of the windows that ended by `now`: (source, number of failures, the
    /// last one). A source that failed again gets a new window; a quiet one is forgotten.
    pub fn due(&mut self, now: Instant) -> Vec<(Source, u64, Failure)> {
        let mut out = Vec::new();
        let window = self.window;
        self.table.retain(|src, p| {
            if p.until > now {
                return true;
            }
            match p.last.take() {
                Some(last) if p.count > 0 => {
                    out.push((src.clone(), p.count, last));
                    p.count = 0;
                    p.until = now + window;
                    true
                }
                _ => false,
            }
        });
        // The table is a hash map: summaries due together go out in one order every time.
        out.sort_by(|a, b| (a.0.transport, a.0.address, a.0.overflow).cmp(&(b.0.transport, b.0.address, b.0.overflow)));
        out
    }

    /// When the next window ends.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.table.values().map(|p| p.until).min()
    }

    pub fn sources(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: u8) -> Failure {
        Failure {
            address: Some(IpAddr::from([10, 0, 0, n])),
            claimed: None,
            reason: Rejection::Unauthenticated,
            detail: format!("d{n}"),
        }
    }

    fn src(n: u8) -> Source {
        Source::new(Some(IpAddr::from([10, 0, 0, n])), "http")
    }

    #[test]
    fn first_failure_at_once_then_one_summary_per_window() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(Duration::from_secs(10), 4);
        assert_eq!(a.record(src(1), f(1), t0), Verdict::Notify);
        for _ in 0..2999 {
            assert_eq!(a.record(src(1), f(1), t0), Verdict::Aggregated);
        }
        assert!(a.due(t0 + Duration::from_secs(9)).is_empty());
        let s = a.due(t0 + Duration::from_secs(10));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].1, 2999);
        // Quiet for a window: forgotten, and the next failure is notified at once again.
        assert!(a.due(t0 + Duration::from_secs(20)).is_empty());
        assert_eq!(a.sources(), 0);
        assert_eq!(a.record(src(1), f(1), t0 + Duration::from_secs(21)), Verdict::Notify);
    }

    #[test]
    fn the_table_is_bounded_and_overflow_is_summed() {
        let t0 = Instant::now();
        let mut a = Aggregator::new(Duration::from_secs(10), 2);
        assert_eq!(a.record(src(1), f(1), t0), Verdict::Notify);
        assert_eq!(a.record(src(2), f(2), t0), Verdict::Notify);
        for n in 3..200 {
            assert_eq!(a.record(src(n), f(n), t0), Verdict::Aggregated);
        }
        assert_eq!(a.sources(), 3);
        let s = a.due(t0 + Duration::from_secs(10));
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].0.overflow, s[0].1), (true, 197));
        assert_eq!(s[0].2.address, Some(IpAddr::from([10, 0, 0, 199])));
    }
}
