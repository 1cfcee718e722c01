//! The Update Controller (seed 004, "Update Controller" and the Policy Engine's update
//! control): decides when and what the C-SMA advertises to the C-PSes — triggers and their
//! priorities, change thresholds, heartbeat snapshots, minimum interval, token bucket,
//! suppression, batching — and emits typed [`Advertisement`]s. Sending them, retrying with
//! backoff and buffering while a C-PS is unreachable is the adapters' job.
//!
//! - `controller.rs`: the decisions, a pure synchronous state machine (`on_event`, `on_tick`,
//!   `next_deadline`), tested with explicit instants.
//! - `tasks.rs`: the thin task that drives it from a channel and `sleep_until`.
//! - `trigger.rs` (priorities, thresholds), `token_bucket.rs`, `config.rs` (YANG
//!   `update-control`), `events.rs` (inputs), `advertisement.rs` (output), `stats.rs`,
//!   `error.rs`.
//!
//! # Delivery: one broadcast channel
//! Advertisements go out on a `tokio::sync::broadcast` channel of `Arc<Advertisement>`:
//! - The controller never waits for a subscriber, so a slow C-PS adapter or YANG-Push
//!   session cannot delay what the others get, nor the decisions. A fan-out of bounded
//!   mpsc channels would have to choose between blocking (one slow peer stalls all) and
//!   dropping (then it must invent a way to tell the peer); broadcast does the latter
//!   already, per receiver.
//! - A receiver that falls more than `capacity` advertisements behind gets
//!   `RecvError::Lagged(n)`: it has missed deltas and its view may be wrong, so it sends
//!   `UpdateEvent::Resync { peer: Some(its name) }` (YANG-Push: `peer: None`, or re-read the
//!   operational state) and carries on; the next Full it is addressed by settles it. An
//!   adapter moves advertisements into its own bounded per-C-PS buffer (YANG
//!   `buffer-size`) at once, so lagging means the adapter task itself is stuck.
//! - Every subscriber sees the same sequence numbers; advertisements with
//!   `Audience::Peer(other)` are skipped by everyone but that peer.
//!
//! # Input: one unbounded queue
//! Events keep their order (a site value never overtakes a newer one) on a single
//! unbounded mpsc queue, so the engine's hot path and the synchronous configuration apply
//! never block. It cannot grow without bound in practice: its producers are the metric
//! engine (at most one event per accepted SCI report, itself rate-limited by collection
//! and validation) and the management plane, and draining it costs O(log n) per event
//! with no I/O.
//!
//! # Semantics where the seed is silent
//! - Thresholds compare with the values last advertised to all peers, not the last seen,
//!   so slow drift is eventually sent. A held update is re-checked when it goes.
//! - Critical: health changes (of an SCI or the site), SCI failure, SCI withdrawal
//!   (eviction, deregistration), a service losing its last SCI, explicit resyncs. The YANG
//!   `suppress` leaf lists withdrawals with the critical triggers, so they are critical
//!   here too (the brief ranked SCI withdrawal with discovery). Membership: new services,
//!   new or recovered SCIs — they bypass the thresholds but not the minimum interval.
//! - The heartbeat is one full snapshot to all every `heartbeat-interval` since the last
//!   one (a resync to all counts); it is exempt from `min-interval` (the YANG `must`), but
//!   not from the token bucket.
//! - A full snapshot to one peer (targeted resync) does not move the heartbeat or the
//!   thresholds' reference: the other peers were not told.

mod advertisement;
mod config;
mod controller;
mod error;
mod events;
mod stats;
mod tasks;
mod token_bucket;
mod trigger;

#[cfg(test)]
mod tests;

pub use advertisement::{Advertisement, AdvertisementKind, Audience, SciMetrics, SciWithdrawal};
pub use config::{TokenBucketConfig, UpdateConfig};
pub use controller::UpdateController;
pub use error::{ConfigError, UpdateError};
pub use events::{SciChange, SciEvent, SuppressLevel, SuppressScope, UpdateEvent};
pub use stats::UpdateStats;
pub use tasks::{spawn, UpdateHandle};
pub use token_bucket::TokenBucket;
pub use trigger::{changed_more_than, significant, Priority, Trigger};
