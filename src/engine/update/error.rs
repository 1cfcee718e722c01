//! Why the Update Controller refuses a configuration or a request: one variant per cause, so
//! the northbound can map each to its NETCONF error and the operator reads what to fix.

use std::time::Duration;

use thiserror::Error;

/// An update-control configuration the controller cannot run with. The YANG ranges and the
/// `must` on `update-control` already exclude all of these for configuration coming through
/// the datastores; the check is repeated so a programmatic caller cannot start a busy loop.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("heartbeat-interval must be 1..86400 s, got {0:?}")]
    HeartbeatInterval(Duration),
    #[error("min-interval must be at most 86400 s, got {0:?}")]
    MinInterval(Duration),
    #[error("min-interval ({min:?}) must not exceed heartbeat-interval ({heartbeat:?})")]
    MinAboveHeartbeat { min: Duration, heartbeat: Duration },
    #[error("{leaf} must be 0..10000 percent, got {value}")]
    Percent { leaf: &'static str, value: u16 },
    #[error("token-bucket rate must be 0.001..100000 updates/s, got {0} thousandths")]
    TokenRate(u32),
    #[error("token-bucket burst must be at least 1")]
    TokenBurst,
    #[error("adaptive-heartbeat bounds must be 1..86400 s with min-interval <= max-interval, got {min:?}..{max:?}")]
    AdaptiveBounds { min: Duration, max: Duration },
    #[error("load-shedding needs a report-rate-threshold of at least 1 and a clear-percent of 1..100, got {threshold} and {clear_percent}")]
    LoadShedding { threshold: u32, clear_percent: u8 },
    #[error("batch delay ({batch:?}) must not exceed heartbeat-interval ({heartbeat:?})")]
    BatchDelay { batch: Duration, heartbeat: Duration },
}

/// A request to the running controller that did not take effect.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum UpdateError {
    #[error("invalid update-control configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("the update controller has stopped")]
    Stopped,
}
