//! Injected time (DESIGN decision 4): every timer-driven rule reads time from here, and
//! tests run under tokio's paused time, so aging, rate limits, EMA, anomaly windows,
//! backoff and maintenance windows are exercised without sleeps.

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Monotonic time (tokio's, pausable) and wall time derived from it, so both advance
/// together under paused time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start_instant: Instant,
    start_wall: DateTime<Utc>,
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock { start_instant: Instant::now(), start_wall: Utc::now() }
    }

    /// A clock whose wall time starts at `wall` (tests).
    pub fn starting_at(wall: DateTime<Utc>) -> Clock {
        Clock { start_instant: Instant::now(), start_wall: wall }
    }

    pub fn now(&self) -> Instant {
        Instant::now()
    }

    pub fn wall(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.start_instant);
        self.start_wall + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
    }

    /// The wall time of a monotonic instant.
    pub fn wall_at(&self, t: Instant) -> DateTime<Utc> {
        let elapsed = t.saturating_duration_since(self.start_instant);
        self.start_wall + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wall_time_follows_paused_time() {
        let c = Clock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(c.wall().to_rfc3339(), "2026-01-01T00:01:30+00:00");
    }
}
