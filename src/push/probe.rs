//! An opt-in latency probe for benchmarks (`examples/push_load.rs`): the time from a report
//! entering the engine (`ChangeSet::started`) to the push-change-update carrying its change
//! being queued for the session's SSH writer. Off unless enabled; when off a push costs one
//! atomic load.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

static PROBE: OnceLock<mpsc::UnboundedSender<Duration>> = OnceLock::new();

/// Starts recording; the receiver gets one duration per push-change-update (measured from
/// the oldest change it carries). Only the first call in a process gets a receiver.
pub fn enable() -> Option<mpsc::UnboundedReceiver<Duration>> {
    let (tx, rx) = mpsc::unbounded_channel();
    PROBE.set(tx).ok().map(|_| rx)
}

pub(crate) fn record(started: Instant) {
    if let Some(tx) = PROBE.get() {
        let _ = tx.send(started.elapsed());
    }
}
