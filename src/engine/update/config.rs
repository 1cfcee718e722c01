//! The Update Controller's knobs: container `update-control` of cats-sma-policy.yang (change
//! thresholds, heartbeat and minimum interval, token bucket), with the same defaults, plus
//! the batch delay the YANG lacks. Maintenance windows are evaluated by the policy engine and
//! arrive as suppression events; backoff and buffer-size belong to the C-PS adapters.

use std::time::Duration;

use super::error::ConfigError;

/// YANG `update-control`, typed. Changeable at run time (`UpdateController::reconfigure`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateConfig {
    /// `gas-delta-percent` (default 10): a CS-ID's GAS changed by more than this percentage
    /// of the last advertised value.
    pub gas_delta_percent: u16,
    /// `gas-delta-absolute` (default 50): … or by more than this many slots.
    pub gas_delta_absolute: u32,
    /// `computing-time-delta-percent` (default 20).
    pub computing_time_delta_percent: u16,
    /// `heartbeat-interval` (default 60 s): a full snapshot goes out at least this often.
    pub heartbeat_interval: Duration,
    /// `min-interval` (default 5 s): per CS-ID, non-critical updates closer together than
    /// this are held and coalesced; critical ones are not.
    pub min_interval: Duration,
    /// `token-bucket` (presence container): `None` means no rate limit.
    pub token_bucket: Option<TokenBucketConfig>,
    /// Not in the YANG (a candidate leaf `batch-delay`): changes that become ready within
    /// this time of the first one go out in one advertisement (seed 004, Scalability: the
    /// UC SHOULD batch multiple SCI updates into a single C-PS advertisement). It delays
    /// every update, critical ones included, by at most this much; zero disables batching
    /// across events (one event with several CS-IDs, e.g. a policy change, is still one
    /// advertisement). Default 50 ms.
    pub batch_delay: Duration,
    /// `adaptive-heartbeat` (presence container): the heartbeat follows the C-PSes'
    /// refresh hints within these bounds; `None`: `heartbeat_interval` is fixed.
    pub adaptive_heartbeat: Option<AdaptiveHeartbeat>,
    /// `load-shedding` (presence container): optional metrics are left out of
    /// advertisements while the engine is under high load; `None`: never.
    pub load_shedding: Option<LoadShedding>,
}

/// YANG `adaptive-heartbeat` (seed 004, Update Controller: the heartbeat interval MAY be
/// adjusted dynamically based on network conditions or C-PS load).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveHeartbeat {
    /// `min-interval`: the shortest heartbeat a C-PS's hint can ask for.
    pub min: Duration,
    /// `max-interval`: the longest.
    pub max: Duration,
}

impl AdaptiveHeartbeat {
    /// The YANG defaults: 10 s and 600 s.
    pub const DEFAULT: AdaptiveHeartbeat =
        AdaptiveHeartbeat { min: Duration::from_secs(10), max: Duration::from_secs(600) };
}

/// YANG `load-shedding` (seed 004, Scalability: the PE MAY suppress non-critical metrics
/// during high-load conditions). The load is the engine's accepted SCI reports per second,
/// sampled every second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadShedding {
    /// `report-rate-threshold`: shedding starts when more reports than this were accepted
    /// per second.
    pub threshold: u32,
    /// `clear-percent` (default 80): it ends when the rate is below this percentage of the
    /// threshold (hysteresis).
    pub clear_percent: u8,
}

/// YANG `token-bucket`: `rate` is decimal64 with 3 fraction digits, kept exact as
/// thousandths of an update per second (2.5 updates/s is 2500).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucketConfig {
    /// Refill rate in thousandths of an update per second (YANG range 0.001..100000, so
    /// 1..=100 000 000).
    pub rate_milli: u32,
    /// Bucket depth: the largest burst of advertisements (YANG range 1..max).
    pub burst: u32,
}

impl Default for UpdateConfig {
    fn default() -> Self {
        UpdateConfig {
            gas_delta_percent: 10,
            gas_delta_absolute: 50,
            computing_time_delta_percent: 20,
            heartbeat_interval: Duration::from_secs(60),
            min_interval: Duration::from_secs(5),
            token_bucket: None,
            batch_delay: Duration::from_millis(50),
            adaptive_heartbeat: None,
            load_shedding: None,
        }
    }
}

const MAX_INTERVAL: Duration = Duration::from_secs(86_400);
const MAX_PERCENT: u16 = 10_000;
const MAX_RATE_MILLI: u32 = 100_000_000;

impl UpdateConfig {
    /// The YANG ranges and `must "min-interval <= heartbeat-interval"`, plus the batch delay
    /// bound. Call it in a configuration consumer's prepare phase.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.heartbeat_interval < Duration::from_secs(1) || self.heartbeat_interval > MAX_INTERVAL {
            return Err(ConfigError::HeartbeatInterval(self.heartbeat_interval));
        }
        if self.min_interval > MAX_INTERVAL {
            return Err(ConfigError::MinInterval(self.min_interval));
        }
        if self.min_interval > self.heartbeat_interval {
            return Err(ConfigError::MinAboveHeartbeat { min: self.min_interval, heartbeat: self.heartbeat_interval });
        }
        for (leaf, value) in [
            ("gas-delta-percent", self.gas_delta_percent),
            ("computing-time-delta-percent", self.computing_time_delta_percent),
        ] {
            if value > MAX_PERCENT {
                return Err(ConfigError::Percent { leaf, value });
            }
        }
        if let Some(tb) = self.token_bucket {
            if tb.rate_milli == 0 || tb.rate_milli > MAX_RATE_MILLI {
                return Err(ConfigError::TokenRate(tb.rate_milli));
            }
            if tb.burst == 0 {
                return Err(ConfigError::TokenBurst);
            }
        }
        if let Some(a) = self.adaptive_heartbeat {
            if a.min < Duration::from_secs(1) || a.max > MAX_INTERVAL || a.min > a.max {
                return Err(ConfigError::AdaptiveBounds { min: a.min, max: a.max });
            }
        }
        if let Some(l) = self.load_shedding {
            if l.threshold == 0 || l.clear_percent == 0 || l.clear_percent > 100 {
                return Err(ConfigError::LoadShedding { threshold: l.threshold, clear_percent: l.clear_percent });
            }
        }
        if self.batch_delay > self.heartbeat_interval {
            return Err(ConfigError::BatchDelay { batch: self.batch_delay, heartbeat: self.heartbeat_interval });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_yang_defaults() {
        // cats-sma-policy.yang update-control: 10 %, 50, 20 %, 60 s, 5 s, no token bucket.
        let c = UpdateConfig::default();
        assert_eq!((c.gas_delta_percent, c.gas_delta_absolute, c.computing_time_delta_percent), (10, 50, 20));
        assert_eq!((c.heartbeat_interval.as_secs(), c.min_interval.as_secs()), (60, 5));
        assert_eq!(c.token_bucket, None);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn yang_constraints_are_enforced() {
        let base = UpdateConfig::default();
        let min_above = UpdateConfig { min_interval: Duration::from_secs(61), ..base.clone() };
        assert!(matches!(min_above.validate(), Err(ConfigError::MinAboveHeartbeat { .. })));
        let zero_hb = UpdateConfig { heartbeat_interval: Duration::ZERO, min_interval: Duration::ZERO, ..base.clone() };
        assert!(matches!(zero_hb.validate(), Err(ConfigError::HeartbeatInterval(_))));
        let pct = UpdateConfig { gas_delta_percent: 10_001, ..base.clone() };
        assert!(matches!(pct.validate(), Err(ConfigError::Percent { leaf: "gas-delta-percent", .. })));
        let rate = UpdateConfig { token_bucket: Some(TokenBucketConfig { rate_milli: 0, burst: 1 }), ..base.clone() };
        assert_eq!(rate.validate(), Err(ConfigError::TokenRate(0)));
        let burst = UpdateConfig { token_bucket: Some(TokenBucketConfig { rate_milli: 1, burst: 0 }), ..base };
        assert_eq!(burst.validate(), Err(ConfigError::TokenBurst));
    }
}
