//! `[peer_limits]`: what a peer (an SCI, the MQTT broker, a pull target, a C-PS) can cost
//! the agent, before or without authentication: how much of the replay log its events may
//! take, how auth-failure floods are aggregated, and how much may queue or be read from it.
//! Every knob has a default; `docs/security.md` (collectors) explains each bound.

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PeerLimits {
    /// Replay-log budget of the management events (RFC 6470 session start/end, config
    /// change, confirmed commit), in bytes. A flood of peer events never takes from it.
    pub replay_management_bytes: usize,
    /// Replay-log budget of the events peers cause (auth-failure, metric-anomaly,
    /// sci-state-change, c-ps-unreachable), in bytes.
    pub replay_peer_bytes: usize,
    /// Most events of each class kept for replay.
    pub replay_events: usize,
    /// Per source and transport, the first SCI authentication failure is notified at once
    /// and the further ones within this many seconds are summed into one notification.
    pub auth_failure_window_secs: u64,
    /// Sources tracked for that aggregation; failures from further sources are summed
    /// together into one overflow entry.
    pub auth_failure_sources: usize,
    /// Messages from collectors (HTTP, pull, MQTT) queued for the engine at once; a sender
    /// waits for a slot.
    pub collector_queue: usize,
    /// Bytes of MQTT payload handed to the engine before the MQTT collector waits for it.
    pub mqtt_backlog_bytes: usize,
    /// MQTT reports the broker may have sent and the agent not yet acknowledged (the MQTT v5
    /// Receive Maximum); the collector reads the next one only once the engine has a slot
    /// for the last, so a flood waits at the broker.
    pub mqtt_inflight: u16,
    /// Largest pulled response body, in bytes.
    pub pull_response_bytes: usize,
    /// Largest C-PS reply body, in bytes.
    pub cps_reply_bytes: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            replay_management_bytes: 8 * 1024 * 1024,
            replay_peer_bytes: 4 * 1024 * 1024,
            replay_events: 10_000,
            auth_failure_window_secs: 10,
            auth_failure_sources: 1024,
            collector_queue: 1024,
            mqtt_backlog_bytes: 4 * 1024 * 1024,
            mqtt_inflight: 64,
            pull_response_bytes: 1024 * 1024,
            cps_reply_bytes: 1024 * 1024,
        }
    }
}

impl PeerLimits {
    pub fn check(&self) -> Result<(), String> {
        let at_least = |name: &str, v: usize, min: usize| {
            if v < min {
                Err(format!("peer_limits.{name} must be at least {min}"))
            } else {
                Ok(())
            }
        };
        at_least("replay_management_bytes", self.replay_management_bytes, 64 * 1024)?;
        at_least("replay_peer_bytes", self.replay_peer_bytes, 64 * 1024)?;
        at_least("replay_events", self.replay_events, 16)?;
        at_least("auth_failure_window_secs", self.auth_failure_window_secs as usize, 1)?;
        at_least("auth_failure_sources", self.auth_failure_sources, 1)?;
        at_least("collector_queue", self.collector_queue, 1)?;
        at_least("mqtt_backlog_bytes", self.mqtt_backlog_bytes, 64 * 1024)?;
        at_least("mqtt_inflight", self.mqtt_inflight as usize, 1)?;
        at_least("pull_response_bytes", self.pull_response_bytes, 4096)?;
        at_least("cps_reply_bytes", self.cps_reply_bytes, 4096)
    }
}
