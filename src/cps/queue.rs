//! The bounded per-C-PS buffer (seed 004, C-PS Failure Handling: updates are buffered in a
//! local queue with a maximum size; when it is full the oldest are dropped). Every update
//! that leaves the queue other than by delivery is counted: dropped (overflow) or
//! superseded (a full snapshot replaced it, or the C-PS already had it).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::engine::update::{Advertisement, AdvertisementKind};

#[derive(Debug)]
pub struct Queue {
    items: VecDeque<Arc<Advertisement>>,
    capacity: usize,
    pub dropped: u64,
    pub superseded: u64,
    /// Dropped since the C-PS last acknowledged: the deltas it will get have a gap.
    pub gap: bool,
}

impl Queue {
    pub fn new(capacity: usize) -> Queue {
        Queue { items: VecDeque::new(), capacity: capacity.max(1), dropped: 0, superseded: 0, gap: false }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity.max(1);
        while self.items.len() > self.capacity {
            self.items.pop_front();
            self.dropped += 1;
            self.gap = true;
        }
    }

    /// Queues an update. A full snapshot replaces everything older; when the queue is full
    /// the oldest update is dropped.
    pub fn push(&mut self, ad: Arc<Advertisement>) {
        if ad.kind == AdvertisementKind::Full {
            self.superseded += self.items.len() as u64;
            self.items.clear();
            // The snapshot closes any gap.
            self.gap = false;
        } else if self.items.len() == self.capacity {
            self.items.pop_front();
            self.dropped += 1;
            self.gap = true;
        }
        self.items.push_back(ad);
    }

    /// The next updates to send: a full snapshot alone, or up to `max` deltas (stopping
    /// before a full snapshot).
    pub fn peek_batch(&self, max: usize) -> Vec<Arc<Advertisement>> {
        let mut out = Vec::new();
        for ad in &self.items {
            if ad.kind == AdvertisementKind::Full {
                if out.is_empty() {
                    out.push(ad.clone());
                }
                break;
            }
            if out.len() == max {
                break;
            }
            out.push(ad.clone());
        }
        out
    }

    pub fn front_is_full(&self) -> bool {
        self.items.front().is_some_and(|a| a.kind == AdvertisementKind::Full)
    }

    /// Removes delivered updates: everything with a sequence up to `seq`.
    pub fn delivered(&mut self, seq: u64) -> usize {
        let mut n = 0;
        while self.items.front().is_some_and(|a| a.seq <= seq) {
            self.items.pop_front();
            n += 1;
        }
        n
    }

    /// After reconnecting: the C-PS already had everything up to `acked` (the reply to an
    /// earlier send was lost); those are superseded, not sent twice. True when a full
    /// snapshot was among them (it did arrive).
    pub fn already_acked(&mut self, acked: u64) -> bool {
        let mut full = false;
        while let Some(a) = self.items.front().filter(|a| a.seq <= acked) {
            full |= a.kind == AdvertisementKind::Full;
            self.items.pop_front();
            self.superseded += 1;
        }
        if full {
            self.gap = false;
        }
        full
    }

    /// Empties the queue (a fallback peer going to standby); counted as superseded.
    pub fn clear(&mut self) {
        self.superseded += self.items.len() as u64;
        self.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::update::{Audience, Trigger};

    fn ad(seq: u64, kind: AdvertisementKind) -> Arc<Advertisement> {
        Arc::new(Advertisement {
            seq,
            kind,
            audience: Audience::All,
            trigger: Trigger::MetricChange,
            sites: vec![],
            withdrawn: vec![],
            sci_withdrawn: vec![],
            scis: vec![],
            generated_at: chrono::Utc::now(),
        })
    }

    #[test]
    fn overflow_drops_the_oldest_and_counts() {
        let mut q = Queue::new(3);
        for s in 1..=5 {
            q.push(ad(s, AdvertisementKind::Delta));
        }
        assert_eq!(q.dropped, 2);
        assert!(q.gap);
        let seqs: Vec<u64> = q.peek_batch(10).iter().map(|a| a.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
    }

    #[test]
    fn a_full_snapshot_supersedes_and_batches_stop_before_it() {
        let mut q = Queue::new(10);
        q.push(ad(1, AdvertisementKind::Delta));
        q.push(ad(2, AdvertisementKind::Delta));
        q.push(ad(3, AdvertisementKind::Full));
        assert_eq!((q.len(), q.superseded), (1, 2));
        q.push(ad(4, AdvertisementKind::Delta));
        assert_eq!(q.peek_batch(10).len(), 1, "the full one goes alone");
        assert_eq!(q.delivered(3), 1);
        q.push(ad(5, AdvertisementKind::Delta));
        q.push(ad(6, AdvertisementKind::Full));
        assert_eq!(q.peek_batch(1).iter().map(|a| a.seq).collect::<Vec<_>>(), [6]);
        q.push(ad(7, AdvertisementKind::Delta));
        q.push(ad(8, AdvertisementKind::Delta));
        assert!(q.already_acked(7), "the full one at 6 had arrived");
        assert_eq!(q.peek_batch(10).iter().map(|a| a.seq).collect::<Vec<_>>(), [8]);
        assert_eq!(q.superseded, 2 + 2 + 2);
    }
}
