//! High-load detection for shedding optional metrics (seed 004, Scalability: "The PE MAY
//! suppress non-critical metrics (e.g., optional extension metrics) during high-load
//! conditions"). The load is the engine's rate of accepted SCI reports: the engine loop
//! publishes its running total after every batch of work, the controller samples it once a
//! second. Shedding starts when a sample is above the threshold and ends when one is below
//! `clear-percent` of it, so a rate hovering at the threshold does not flap.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::config::LoadShedding;

/// How often the rate is sampled.
pub const SAMPLE: Duration = Duration::from_secs(1);

/// The detector's state.
#[derive(Clone, Debug, Default)]
pub struct LoadMeter {
    /// The last sample: when, and the running total then.
    last: Option<(Instant, u64)>,
    /// Accepted reports per second in the last complete sample.
    pub rate: u64,
    /// Since when shedding is on (wall time), `None` when off.
    pub active_since: Option<DateTime<Utc>>,
    /// Advertisements from which optional metrics were left out.
    pub shed: u64,
}

/// A change of the shedding state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    Started,
    Ended,
}

impl LoadMeter {
    /// When the next sample is due (`None`: shedding is not configured, or the first
    /// sample, which starts the clock, is yet to be taken).
    pub fn next_sample(&self, config: Option<LoadShedding>) -> Option<Instant> {
        config?;
        self.last.map(|(at, _)| at + SAMPLE)
    }

    /// Takes a sample if one is due; returns the edge it crossed, if any.
    pub fn observe(
        &mut self,
        config: Option<LoadShedding>,
        total: u64,
        now: Instant,
        wall: DateTime<Utc>,
    ) -> Option<Edge> {
        let Some(config) = config else {
            self.last = None;
            self.rate = 0;
            return self.active_since.take().map(|_| Edge::Ended);
        };
        let Some((at, before)) = self.last else {
            self.last = Some((now, total));
            return None;
        };
        if now < at + SAMPLE {
            return None;
        }
        let elapsed = now.duration_since(at).as_millis().max(1);
        self.rate = u64::try_from(u128::from(total.saturating_sub(before)) * 1000 / elapsed).unwrap_or(u64::MAX);
        self.last = Some((now, total));
        let threshold = u64::from(config.threshold);
        match self.active_since {
            None if self.rate > threshold => {
                self.active_since = Some(wall);
                Some(Edge::Started)
            }
            Some(_) if self.rate * 100 < threshold * u64::from(config.clear_percent) => {
                self.active_since = None;
                Some(Edge::Ended)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed004_scalability_high_load_starts_above_the_threshold_and_ends_below_the_clear_level() {
        let config = Some(LoadShedding { threshold: 100, clear_percent: 80 });
        let (t0, wall) = (Instant::now(), DateTime::<Utc>::UNIX_EPOCH);
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut m = LoadMeter::default();
        assert_eq!(m.observe(config, 0, at(0), wall), None);
        assert_eq!(m.observe(config, 100, at(1), wall), None, "exactly the threshold is not above it");
        assert_eq!(m.observe(config, 150, at(1) + Duration::from_millis(500), wall), None, "not a full sample yet");
        assert_eq!(m.observe(config, 201, at(2), wall), Some(Edge::Started));
        assert_eq!(m.rate, 101);
        // Hysteresis: 80 per second is not below 80 % of 100.
        assert_eq!(m.observe(config, 281, at(3), wall), None);
        assert_eq!(m.observe(config, 360, at(4), wall), Some(Edge::Ended));
        assert_eq!(m.next_sample(config), Some(at(5)));
        assert_eq!(m.next_sample(None), None);
        // Unconfigured while active: it ends.
        m.observe(config, 10_000, at(5), wall);
        assert!(m.active_since.is_some());
        assert_eq!(m.observe(None, 10_000, at(6), wall), Some(Edge::Ended));
    }
}
