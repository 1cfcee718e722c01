//! What the validator remembers of SCIs that left the metric cache (evicted from a full
//! cache, deregistered, or moved to another CS-ID): their last accepted sequence number and
//! timestamp, so a report replayed after the SCI comes back is still refused as a
//! `duplicate` / `out-of-order` (seed 004, Validator & Sanitizer: "old reports are
//! discarded"), together with how the SCI proved itself, since a changed authentication
//! method starts a new history (`Core::set_sci`).
//!
//! Bounded in time and in count. In time: a captured report carries a timestamp no later
//! than the last accepted one, and once the agent's clock is more than the timestamp window
//! past that timestamp, the window check refuses such a report as a `replay` without any
//! history, so a record is needed only until then. In count: at most [`CAPACITY`] records;
//! when more SCIs leave within one window, the oldest record is dropped early and counted
//! (`cache/state/retained-histories-dropped`). A record costs its CSCI-ID (1..255 bytes) and
//! credential name plus about 100 bytes, so the bound is at most ~40 MiB and typically a few.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::model::CsciId;

/// Records kept at most (removals within one timestamp window).
pub const CAPACITY: usize = 65_536;

/// How an SCI proved itself when its history was recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthMethod {
    pub credential_ref: Option<String>,
    pub unauthenticated: bool,
}

/// One remembered history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub sequence: Option<u64>,
    pub timestamp: Option<DateTime<Utc>>,
    pub auth: Option<AuthMethod>,
    /// Removal order, to tell a record from an older one of the same SCI in the queue.
    serial: u64,
}

/// The bounded memory.
#[derive(Default)]
pub struct Retained {
    records: HashMap<CsciId, Record>,
    /// (CSCI-ID, serial) in removal order: the oldest first.
    order: VecDeque<(CsciId, u64)>,
    serial: u64,
    /// Records dropped before their time because the memory was full.
    pub dropped: u64,
}

impl Retained {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Remembers an SCI's history as it leaves the cache; a history with nothing accepted
    /// is not worth a record. `window` is the validator's timestamp window now.
    pub fn keep(
        &mut self,
        csci_id: &str,
        sequence: Option<u64>,
        timestamp: Option<DateTime<Utc>>,
        auth: Option<AuthMethod>,
        window: Duration,
        wall: DateTime<Utc>,
    ) {
        self.prune(window, wall);
        if sequence.is_none() && timestamp.is_none() {
            return;
        }
        while self.records.len() >= CAPACITY && !self.records.contains_key(csci_id) {
            let Some((id, serial)) = self.order.pop_front() else { break };
            if self.records.get(&id).is_some_and(|r| r.serial == serial) {
                self.records.remove(&id);
                self.dropped += 1;
            }
        }
        self.serial += 1;
        self.records.insert(csci_id.to_owned(), Record { sequence, timestamp, auth, serial: self.serial });
        self.order.push_back((csci_id.to_owned(), self.serial));
        // Re-keeping an SCI leaves its old queue slot behind: compact when those dominate.
        if self.order.len() > 2 * self.records.len() + 64 {
            let records = &self.records;
            self.order.retain(|(id, s)| records.get(id).is_some_and(|r| r.serial == *s));
        }
    }

    /// The records kept, in no order (`restart.rs` saves them).
    pub fn records(&self) -> impl Iterator<Item = (&str, &Record)> {
        self.records.iter().map(|(id, r)| (id.as_str(), r))
    }

    /// Takes the record of an SCI that is back, if there is one.
    pub fn take(&mut self, csci_id: &str, window: Duration, wall: DateTime<Utc>) -> Option<Record> {
        self.prune(window, wall);
        self.records.remove(csci_id)
    }

    /// Drops the records at the front whose timestamp the window check now covers on its own.
    fn prune(&mut self, window: Duration, wall: DateTime<Utc>) {
        while let Some((id, serial)) = self.order.front() {
            let Some(r) = self.records.get(id).filter(|r| r.serial == *serial) else {
                self.order.pop_front();
                continue;
            };
            if !covered(r.timestamp, window, wall) {
                break;
            }
            let id = id.clone();
            self.records.remove(&id);
            self.order.pop_front();
        }
    }
}

/// Whether the timestamp window alone now refuses a report timestamped `t` or earlier (no
/// timestamp: nothing to remember), so no history of it is needed any more.
pub fn covered(t: Option<DateTime<Utc>>, window: Duration, wall: DateTime<Utc>) -> bool {
    let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    t.is_none_or(|t| t.checked_add_signed(window).is_some_and(|end| end < wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Duration = Duration::from_secs(30);

    #[test]
    fn seed004_validator_histories_outlive_the_entry_within_the_window_only() {
        let mut r = Retained::default();
        let t0 = Utc::now();
        r.keep("a", Some(7), Some(t0), None, W, t0);
        r.keep("b", Some(9), Some(t0), None, W, t0);
        r.keep("c", None, None, None, W, t0);
        assert_eq!(r.len(), 2, "nothing accepted, nothing kept");
        let got = r.take("a", W, t0 + chrono::Duration::seconds(10)).unwrap();
        assert_eq!((got.sequence, got.timestamp), (Some(7), Some(t0)));
        assert!(r.take("a", W, t0).is_none(), "taken once");
        // Past the window the timestamp check refuses a replay by itself: the record goes.
        assert!(r.take("b", W, t0 + chrono::Duration::seconds(31)).is_none());
        assert!(r.is_empty());
    }

    #[test]
    fn the_memory_is_bounded_and_counts_what_it_drops() {
        let mut r = Retained::default();
        let t0 = Utc::now();
        for i in 0..CAPACITY + 3 {
            r.keep(&format!("sci-{i}"), Some(i as u64), Some(t0), None, W, t0);
        }
        assert_eq!((r.len(), r.dropped), (CAPACITY, 3));
        assert!(r.take("sci-0", W, t0).is_none());
        assert!(r.take(&format!("sci-{}", CAPACITY + 2), W, t0).is_some());
        // Keeping the same SCI over and over does not grow the queue without bound.
        for i in 0..10_000u64 {
            r.keep("again", Some(i), Some(t0), None, W, t0);
        }
        assert!(r.order.len() <= 2 * r.records.len() + 65, "{}", r.order.len());
        assert_eq!(r.take("again", W, t0).unwrap().sequence, Some(9_999));
    }
}
