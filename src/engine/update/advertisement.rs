//! What the Update Controller emits: one advertisement per decision, for the C-PS adapters
//! (REST now, BGP-LS / GRASP later) and YANG-Push to put on their wire.

use chrono::{DateTime, Utc};

use super::trigger::{Priority, Trigger};
use crate::engine::model::{CsId, CsciId, Metrics, SciState, SiteMetrics};

/// One update towards the C-PSes.
#[derive(Clone, Debug, PartialEq)]
pub struct Advertisement {
    /// Strictly increasing over every advertisement of this controller, whatever its
    /// audience: the freshness indicator of seed 004, Security Considerations (the C-PS
    /// detects stale or out-of-order updates). It starts at the wall-clock time of the
    /// controller's creation in microseconds, so it also increases across restarts as long
    /// as the clock does not step back. Gaps are normal (another peer's snapshot).
    pub seq: u64,
    pub kind: AdvertisementKind,
    pub audience: Audience,
    /// The most urgent trigger among the contents (see [`Advertisement::priority`]).
    pub trigger: Trigger,
    /// Full: every service, the authoritative set (a C-PS replaces what it holds for this
    /// C-SMA; anything absent is gone). Delta: the services that changed. Sorted by the
    /// priority of their trigger, most urgent first, then by CS-ID: an adapter that sends
    /// one request per entry sends critical ones first.
    pub sites: Vec<SiteMetrics>,
    /// Services to withdraw: no contributing SCI left. Listed in a Full too, for protocols
    /// that cannot express replacement (REST DELETE).
    pub withdrawn: Vec<CsId>,
    /// SCIs that failed, were evicted or deregistered: `DELETE /cats/metrics/{csci-id}`,
    /// each with the services it served, so only C-PSes allowed one of them learn of it.
    pub sci_withdrawn: Vec<SciWithdrawal>,
    /// Per-SCI rows, for C-PSes that take metrics per CSCI-ID (`PUT /cats/metrics/{csci-id}`)
    /// as well as or instead of the site aggregate. Empty unless some C-PS asked for them
    /// (`UpdateEvent::SciDetail(true)`). Full: every SCI of the services in `sites` (for a
    /// suppressed service, the rows last advertised); Delta: the SCIs of those services whose
    /// row changed since it was last advertised. Rows ride with their service: a row change
    /// alone sends nothing. Optional metrics are left out under high load.
    pub scis: Vec<SciMetrics>,
    /// Wall time of the decision (the timestamp of seed 004's replay protection).
    pub generated_at: DateTime<Utc>,
}

/// One SCI's row: what it contributes to its service, after SCI-scope policy.
#[derive(Clone, Debug, PartialEq)]
pub struct SciMetrics {
    pub csci_id: CsciId,
    pub cs_id: CsId,
    pub state: SciState,
    /// The SCI's metrics after SCI-scope policy (what its service's aggregate counts).
    pub metrics: Metrics,
}

/// An SCI withdrawn, with the CS-IDs it was withdrawn from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SciWithdrawal {
    pub csci_id: CsciId,
    pub cs_ids: Vec<CsId>,
}

impl SciWithdrawal {
    pub fn new(csci_id: impl Into<CsciId>, cs_ids: impl IntoIterator<Item = CsId>) -> SciWithdrawal {
        SciWithdrawal { csci_id: csci_id.into(), cs_ids: cs_ids.into_iter().collect() }
    }
}

/// Snapshot or change set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdvertisementKind {
    /// Every service this C-SMA advertises (heartbeat, resync).
    Full,
    /// Only what changed since the previous advertisement.
    Delta,
}

/// Who an advertisement is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Audience {
    /// Every C-PS and YANG-Push subscriber.
    All,
    /// One C-PS peer (a targeted resync); everyone else skips it.
    Peer(String),
}

impl Advertisement {
    pub fn priority(&self) -> Priority {
        self.trigger.priority()
    }

    /// Whether the C-PS peer `name` should process this advertisement.
    pub fn is_for(&self, name: &str) -> bool {
        match &self.audience {
            Audience::All => true,
            Audience::Peer(peer) => peer == name,
        }
    }
}
