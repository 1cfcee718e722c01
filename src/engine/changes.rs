//! The engine's typed change stream: after each batch of work the engine loop publishes
//! what changed in its operational state (an SCI's cache entry, a service's site metrics)
//! as typed records, the feed of YANG-Push on-change subscriptions (RFC 8641) to
//! operational metric data. Nothing is built while nobody listens: the loop checks the
//! receiver count first, so the report path pays one branch.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::broadcast;
use tokio::time::Instant;

use super::core::{Core, EngineEvent};
use crate::datastore::tree::yang_time as time;

/// Change sets kept for a slow listener before it lags (and resynchronises).
pub const CAPACITY: usize = 4096;

/// Leaf name and canonical value, in schema order.
pub type Leaves = Vec<(&'static str, String)>;

/// What changed in one batch of engine work.
#[derive(Debug)]
pub struct ChangeSet {
    /// When the engine started the work that produced the changes (a report entering the
    /// engine); for latency measurements.
    pub started: Instant,
    pub changes: Vec<StateChange>,
}

/// One changed object of the operational state, with its content after the change.
#[derive(Clone, Debug, PartialEq)]
pub enum StateChange {
    /// `/cats-sma/metric-cache/entry[csci-id]`; `None` when the entry is gone.
    Sci { csci_id: String, leaves: Option<Leaves> },
    /// `/cats-sma/services/service[cs-id]`; `None` when the service is gone.
    Service { cs_id: String, leaves: Option<Leaves> },
    /// Any other object of the operational state (the IP-layer metrics, `ipm`): the node at
    /// the schema path `path` (with its keys) with the leaves at the relative paths of
    /// `leaves` after the change; `None` when it is gone.
    Subtree { path: String, leaves: Option<Vec<(String, String)>> },
}

/// The sending half, owned by the engine loop; cheap to clone.
pub type ChangeTap = broadcast::Sender<Arc<ChangeSet>>;

pub fn tap() -> ChangeTap {
    broadcast::channel(CAPACITY).0
}

/// The typed changes behind a batch of engine events (each object once).
pub fn collect(core: &Core, events: &[EngineEvent]) -> Vec<StateChange> {
    let mut scis = HashSet::new();
    let mut services = HashSet::new();
    let mut out = Vec::new();
    for ev in events {
        let csci = match ev {
            EngineEvent::SciUpdated { csci_id }
            | EngineEvent::SciHealthChange { csci_id, .. }
            | EngineEvent::SciStateChange { csci_id, .. }
            | EngineEvent::MetricAnomaly { csci_id, .. }
            | EngineEvent::PullNeeded { csci_id, .. }
            | EngineEvent::Withdrawn { csci_id, .. } => csci_id,
            // Counted in statistics, which are not on-change objects; no cache entry changed.
            EngineEvent::AuthFailure { .. } => continue,
            EngineEvent::SiteChanged { cs_id } => {
                if services.insert(cs_id.as_str()) {
                    out.push(StateChange::Service { cs_id: cs_id.clone(), leaves: service_leaves(core, cs_id) });
                }
                continue;
            }
        };
        if scis.insert(csci.as_str()) {
            out.push(StateChange::Sci { csci_id: csci.clone(), leaves: sci_leaves(core, csci) });
        }
    }
    out
}

/// An SCI's cache entry as YANG leaves. `ttl-remaining` is left out: it changes with every
/// tick of the clock, so it is not an on-change object (RFC 8641 section 3.10).
pub fn sci_leaves(core: &Core, csci_id: &str) -> Option<Leaves> {
    let e = core.cache.get(csci_id)?;
    let mut l: Leaves = Vec::with_capacity(13);
    if let Some(cs) = e.cs_id() {
        l.push(("cs-id", cs.to_owned()));
    }
    if let Some(m) = e.reported {
        l.push(("gas", m.gas.to_string()));
        l.push(("computing-time", m.computing_time_ms.to_string()));
        l.push(("health", m.health.yang().into()));
        if let Some(c) = m.cost {
            l.push(("cost", c.to_string()));
        }
        if let Some(r) = m.reputation {
            l.push(("reputation", r.to_string()));
        }
        if let Some(s) = m.security_label {
            l.push(("security-label", s.to_string()));
        }
    }
    if let Some(t) = e.timestamp() {
        l.push(("timestamp", time(t)));
    }
    if let Some(s) = e.sequence() {
        l.push(("sequence-number", s.to_string()));
    }
    if let Some(d) = core.discovery.get(csci_id) {
        l.push(("discovered-by", d.domain.clone()));
        l.push(("discovery-proof", d.proof.into()));
        l.push(("discovered-at", time(d.since)));
    }
    l.push(("state", e.state.yang().into()));
    let f = e.flags;
    if let Some(bits) = f.yang_bits() {
        l.push(("flags", bits));
    }
    l.push(("last-state-change", time(e.last_state_change)));
    Some(l)
}

/// A service's site metrics as YANG leaves.
pub fn service_leaves(core: &Core, cs_id: &str) -> Option<Leaves> {
    let site = core.cache.site(cs_id)?;
    let healthy = core.cache.healthy_members(cs_id);
    let mut l: Leaves = Vec::with_capacity(14);
    l.push(("site-gas", site.gas.to_string()));
    l.push(("computing-time", site.computing_time_ms.to_string()));
    l.push(("computing-time-function", core.cache.function.yang().into()));
    l.push(("health", site.health.yang().into()));
    l.push(("sci-count", site.sci_count.to_string()));
    l.push(("healthy-sci-count", healthy.to_string()));
    // Cost, reputation and security label beside GAS (seed 004: cost and reputation
    // policies), before policy here and as advertised below.
    let optional = |l: &mut Leaves, names: [&'static str; 3], m: &super::model::SiteMetrics| {
        let values = [m.cost, m.reputation.map(u32::from), m.security_label.map(u32::from)];
        for (name, v) in names.into_iter().zip(values) {
            if let Some(v) = v {
                l.push((name, v.to_string()));
            }
        }
    };
    optional(&mut l, ["cost", "reputation", "security-label"], &site);
    if let Some((r, _)) = core.reported.get(cs_id) {
        l.push(("cats-sma-policy:reported-gas", r.gas.to_string()));
        l.push(("cats-sma-policy:reported-computing-time", r.computing_time_ms.to_string()));
        let names = [
            "cats-sma-policy:reported-cost",
            "cats-sma-policy:reported-reputation",
            "cats-sma-policy:reported-security-label",
        ];
        optional(&mut l, names, r);
    }
    Some(l)
}
