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
//!   `update-control`), `events.rs` (inputs), `advertisement.rs` (output), `rows.rs`
//!   (per-SCI rows), `load.rs` (high-load detection), `stats.rs`, `error.rs`.
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
//!   here too. Membership: new services, new or recovered SCIs — they bypass the thresholds.
//! - SCI Discovery Trigger: an SCI discovered (its first report, or back from FAILED) or
//!   withdrawn (evicted, deregistered) gets a *full* snapshot to all, once the batch window
//!   of the first such event closes, not held by `min-interval`. A failure (→ FAILED) stays
//!   an immediate critical delta with its DELETE.
//! - Policy Change Trigger: `PolicyChanged` (the engine sends it after every commit under
//!   `/cats-sma/policy`, update-control included) sends every service whose values differ
//!   in any field from what was advertised, trigger `policy-change`, not held by
//!   `min-interval`; suppression and the token bucket still apply. A change of the
//!   thresholds alone (`reconfigure`) re-evaluates against the new thresholds, also as
//!   `policy-change` and not held.
//! - The heartbeat is one full snapshot to all every heartbeat interval since the last
//!   full snapshot to all (a resync or a discovery's full snapshot counts); it is exempt
//!   from `min-interval` (the YANG `must`) and from suppression, not from the token bucket.
//!   With `adaptive-heartbeat` the interval is the shortest `RefreshHint` of the C-PSes that
//!   gave one, clamped to the bounds; the configured interval without hints.
//! - Suppression (maintenance windows, SUPPRESS_UPDATES) drops non-critical updates but
//!   not the soft-state refresh: a full snapshot carries, for a suppressed service, what
//!   the C-PSes were last told (`non-critical`: unless a critical update of it may go out),
//!   so its changes stay unrevealed and the C-PSes keep its entries. When a suppression ends,
//!   what is past the thresholds (or new, or gone) is raised as it would have been outside
//!   it (a routine change still minds `min-interval`), and an SCI discovery or withdrawal it
//!   kept back gets its full snapshot; the rest rides on the next heartbeat.
//! - A full snapshot to one peer (targeted resync) does not move the heartbeat or the
//!   thresholds' reference: the other peers were not told.
//! - Per-SCI rows (`SciDetail`, `SciRows`, `rows.rs`) ride with their service's updates: a
//!   row change alone triggers nothing (the state changes that matter already do).
//! - Load shedding (`load.rs`): while the engine's accepted-report rate is high, cost and
//!   reputation are left out of every advertisement (sites and rows); what the C-PSes were
//!   told is still compared with the full values, so the optional metrics return with each
//!   service's next update after the load drops, and with the next heartbeat at the latest.

mod advertisement;
mod config;
mod controller;
mod error;
mod events;
mod load;
mod rows;
mod stats;
mod tasks;
mod token_bucket;
mod trigger;

#[cfg(test)]
mod tests;

pub use advertisement::{Advertisement, AdvertisementKind, Audience, SciMetrics, SciWithdrawal};
pub use config::{AdaptiveHeartbeat, LoadShedding, TokenBucketConfig, UpdateConfig};
pub use controller::UpdateController;
pub use error::{ConfigError, UpdateError};
pub use events::{SciChange, SciEvent, SuppressLevel, SuppressScope, UpdateEvent};
pub use stats::UpdateStats;
pub use tasks::{spawn, UpdateHandle};
pub use token_bucket::TokenBucket;
pub use trigger::{bypasses_min_interval, changed_more_than, significant, Priority, Trigger};
