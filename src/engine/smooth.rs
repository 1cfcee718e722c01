//! Optional smoothing of per-SCI metrics before they enter the cache (seed 004, Validator
//! & Sanitizer: "MAY apply smoothing filters (e.g., moving average) to reduce noise in
//! frequently fluctuating metrics"): a simple moving average of GAS and computing time
//! over each SCI's last `window` accepted reports. Health, cost, reputation and security
//! label pass through unchanged. The state exists only while smoothing is enabled, so it
//! costs nothing per SCI otherwise.

use std::collections::{HashMap, VecDeque};

use super::model::{CsciId, Metrics};

#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<(u32, u32)>,
    gas_sum: u64,
    ct_sum: u64,
}

/// Moving averages per SCI.
#[derive(Debug)]
pub struct Smoother {
    window: usize,
    per_sci: HashMap<CsciId, Window>,
}

impl Smoother {
    pub fn new(window: usize) -> Smoother {
        Smoother { window: window.max(1), per_sci: HashMap::new() }
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Feeds an accepted report's metrics; returns them with GAS and computing time
    /// replaced by the averages over the window (rounded half up).
    pub fn feed(&mut self, csci_id: &str, m: Metrics) -> Metrics {
        let w = match self.per_sci.get_mut(csci_id) {
            Some(w) => w,
            None => self.per_sci.entry(csci_id.to_owned()).or_default(),
        };
        if w.samples.len() == self.window {
            if let Some((g, c)) = w.samples.pop_front() {
                w.gas_sum -= u64::from(g);
                w.ct_sum -= u64::from(c);
            }
        }
        w.samples.push_back((m.gas, m.computing_time_ms));
        w.gas_sum += u64::from(m.gas);
        w.ct_sum += u64::from(m.computing_time_ms);
        let n = w.samples.len() as u64;
        let avg = |sum: u64| ((sum + n / 2) / n) as u32;
        Metrics { gas: avg(w.gas_sum), computing_time_ms: avg(w.ct_sum), ..m }
    }

    /// Forgets an SCI (removed, evicted or failed: its next report starts a new average).
    pub fn forget(&mut self, csci_id: &str) {
        self.per_sci.remove(csci_id);
    }
}

/// The validation/smoothing settings: the window when enabled.
pub fn settings(t: &yang2::data::DataTree<'static>) -> Option<usize> {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let enabled = leaf(t, &format!("{ROOT}/validation/smoothing/enabled")).as_deref() == Some("true");
    enabled.then(|| leaf_u64(t, &format!("{ROOT}/validation/smoothing/window")).unwrap_or(5) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Clock;
    use crate::engine::core::{Core, SciConfig};
    use crate::engine::model::Health;
    use crate::engine::report::RawReport;
    use std::time::Duration;

    fn m(gas: u32, ct: u32) -> Metrics {
        Metrics {
            gas,
            computing_time_ms: ct,
            health: Health::Healthy,
            cost: Some(3),
            reputation: None,
            security_label: None,
        }
    }

    #[test]
    fn moving_average_over_the_window() {
        let mut s = Smoother::new(3);
        assert_eq!(s.feed("a", m(100, 10)).gas, 100);
        assert_eq!(s.feed("a", m(200, 20)).gas, 150);
        let out = s.feed("a", m(601, 31));
        assert_eq!((out.gas, out.computing_time_ms, out.cost), (300, 20, Some(3)), "(100+200+601)/3 = 300.3");
        // The oldest sample leaves the window.
        assert_eq!(s.feed("a", m(0, 0)).gas, 267, "(200+601+0)/3 = 267");
        // Per SCI, and forgetting restarts the average.
        assert_eq!(s.feed("b", m(7, 7)).gas, 7);
        s.forget("a");
        assert_eq!(s.feed("a", m(50, 5)).gas, 50);
    }

    #[tokio::test(start_paused = true)]
    async fn seed_004_validator_sanitizer_smoothing_filters_reported_noise() {
        // seed 004, Validator & Sanitizer: "MAY apply smoothing filters (e.g., moving
        // average)". The cache keeps the raw report; the site aggregate counts the average.
        let mut core = Core::new(Clock::new());
        core.set_sci(
            "sci-1",
            SciConfig {
                cs_ids: vec!["AR1".into()],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: Duration::from_secs(5),
            },
        );
        core.set_smoothing(Some(2));
        core.validation.gas_change_percent = 10_000; // no anomaly verdicts in this test
        for (seq, gas) in [(1u64, 400u32), (2, 600), (3, 1000)] {
            tokio::time::advance(Duration::from_secs(2)).await;
            let raw = RawReport {
                csci_id: "sci-1".into(),
                cs_id: "AR1".into(),
                sequence: seq,
                timestamp: core.clock.wall(),
                gas: i64::from(gas),
                computing_time: 10,
                health: "HEALTHY".into(),
                cost: None,
                reputation: None,
                security_label: None,
            };
            core.ingest(&raw, None).unwrap();
        }
        let e = core.cache.get("sci-1").unwrap();
        assert_eq!(e.reported.unwrap().gas, 1000, "the raw report is kept");
        assert_eq!(e.effective.unwrap().gas, 800, "(600 + 1000) / 2");
        assert!(e.flags.smoothed);
        core.settle();
        assert_eq!(core.cache.site("AR1").unwrap().gas, 800);
    }
}
