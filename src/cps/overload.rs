//! The C-SMA as DOIC reacting node towards its C-PSes (seed 003; RFC 8581 sections 5.1.1,
//! 5.2.3, 5.2.5): the announcement in every request, the answer and reports taken from
//! authenticated replies (REST headers, gRPC Welcome / Ack / OverloadReport), and the loss
//! algorithm with divert-before-throttle in the dispatcher.

use std::sync::Arc;

use tokio::time::Instant;

use super::session::{abatable, lock, Peer, Registry};
use crate::engine::update::Advertisement;
use crate::overload::react::{Outcome, PeerOverload};
use crate::overload::wire::{Olr, Supported, WireError};
use crate::overload::{Direction, Transition};

/// The OC-Supported-Features this C-SMA puts in every request while it takes the reacting
/// role (RFC 8581 section 5.1.1: the peer report and the algorithms it supports, with its
/// own identity as SourceID); None otherwise.
pub fn announcement(registry: &Registry) -> Option<Supported> {
    let cfg = registry.overload.settings();
    cfg.reacting().then(|| Supported::announce(cfg.algorithms, &registry.identity().csma_id))
}

/// Takes the OC AVPs of an authenticated reply (or stream message) from `peer`.
pub fn take(
    peer: &Peer,
    registry: &Registry,
    supported: Option<Result<Supported, WireError>>,
    olr: Option<Result<Olr, WireError>>,
) {
    let cfg = registry.overload.settings();
    if !cfg.reacting() || (supported.is_none() && olr.is_none()) {
        return;
    }
    let expected = peer.settings.source_id();
    // The C-PS's identity is a host name or address: compared without regard to case.
    let same_case = |mut id: String| {
        if id.eq_ignore_ascii_case(&expected) {
            id.clone_from(&expected);
        }
        id
    };
    let supported = supported.map(|r| r.map(|s| Supported { source_id: same_case(s.source_id), ..s }));
    let olr = olr.map(|r| r.map(|o| Olr { source_id: same_case(o.source_id), ..o }));
    let name = &peer.settings.name;
    let now = Instant::now();
    let mut transition = None;
    let mut changed = false;
    let expired;
    {
        let mut o = lock(&peer.overload);
        // A report that ran out before the expiry task saw it ends here, with its
        // notification, before anything in this reply is taken.
        expired = expire_one(&mut o, name, now);
        changed |= expired.is_some();
        match supported {
            Some(Ok(s)) => match o.answered(&s, &expected, &cfg) {
                Err(_) if o.counters.ignored_source.is_power_of_two() => {
                    tracing::warn!(c_ps = %name, source_id = %s.source_id, expected = %expected,
                        "C-PS answered the overload announcement with another node's SourceID; ignored");
                }
                // It no longer supports the peer report: its report in force ends with it.
                Ok(Some(ended)) => {
                    changed = true;
                    transition = Some(from_cps(name, false, "ended", ended.sequence, 0));
                }
                _ => {}
            },
            Some(Err(e)) => {
                o.counters.malformed += 1;
                tracing::debug!(c_ps = %name, "malformed OC-Supported-Features from the C-PS: {e}");
            }
            None => {}
        }
        match olr {
            Some(Ok(r)) => {
                let before = o.reduction(now);
                let outcome = o.receive(&r, &expected, &cfg, now);
                let after = o.reduction(now);
                changed |= before != after;
                match outcome {
                    Outcome::Started | Outcome::Ended => {
                        transition =
                            Some(from_cps(name, outcome == Outcome::Started, outcome.name(), r.sequence, after))
                    }
                    Outcome::SourceMismatch if o.counters.ignored_source.is_power_of_two() => {
                        tracing::warn!(c_ps = %name, source_id = %r.source_id, expected = %expected,
                            "peer overload report from a node that is not the adjacent C-PS; ignored (seed 003, agent chains)");
                    }
                    Outcome::NotNegotiated | Outcome::NotPeerReport | Outcome::Stale => {
                        tracing::debug!(c_ps = %name, outcome = outcome.name(), "peer overload report ignored");
                    }
                    _ => {}
                }
            }
            Some(Err(e)) => {
                o.counters.malformed += 1;
                tracing::debug!(c_ps = %name, "malformed OC-OLR from the C-PS: {e}");
            }
            None => {}
        }
    }
    for t in [expired, transition].into_iter().flatten() {
        registry.overload.transition(t);
    }
    if changed {
        registry.bump();
    }
}

/// Removes the reports whose validity ran out (RFC 7683 section 5.5.2), with their
/// notifications; the adapters call it every second.
pub fn expire(registry: &Registry) {
    let now = Instant::now();
    let mut any = false;
    for p in registry.peers() {
        let expired = expire_one(&mut lock(&p.overload), &p.settings.name, now);
        if let Some(t) = expired {
            any = true;
            registry.overload.transition(t);
        }
    }
    if any {
        registry.bump();
    }
}

/// Removes `o`'s report if its validity ran out, and gives the `expired` notification of it
/// (the expiry task and a reply arriving after the expiry both end a report this way).
fn expire_one(o: &mut PeerOverload, name: &str, now: Instant) -> Option<Transition> {
    let sequence = o.report.as_ref().map_or(0, |r| r.sequence);
    o.expire(now).then(|| from_cps(name, false, "expired", sequence, 0))
}

/// An overload transition of the C-PS peer `name` (direction `from-c-ps`).
fn from_cps(name: &str, overloaded: bool, cause: &'static str, sequence: u64, reduction: u8) -> Transition {
    Transition { direction: Direction::FromCps, peer: name.to_owned(), overloaded, cause, sequence, reduction }
}

/// The dispatcher's step for one advertisement (RFC 8581 section 5.2.5 with the loss
/// algorithm): every peer gets it unless it is overloaded and the loss algorithm picks this
/// update; a picked update goes to the divert target (the first fallback neither overloaded
/// nor down, seed 003 section 3.1.2) or, with none, is dropped. Updates that are never
/// abated ([`abatable`]) go to every peer as before.
pub fn dispatch_one(registry: &Registry, ad: &Arc<Advertisement>) {
    let peers = registry.peers();
    let cfg = registry.overload.settings();
    if !cfg.reacting() || !abatable(ad) {
        for p in &peers {
            p.offer(ad);
        }
        return;
    }
    let now = Instant::now();
    let mut queued: Vec<&str> = Vec::new();
    let mut divert_from: Vec<&Arc<Peer>> = Vec::new();
    for p in &peers {
        // Only an update the peer would get counts against its reduction.
        let overloaded = lock(&p.overload).overloaded(now);
        if overloaded && p.would_take(ad) && lock(&p.overload).abate(now) {
            divert_from.push(p);
            continue;
        }
        if p.offer(ad) {
            queued.push(&p.settings.name);
        }
    }
    if divert_from.is_empty() {
        return;
    }
    let target = registry.divert_target(now);
    if let Some(t) = &target {
        // A target that took the update anyway (it serves as failover too) needs no copy.
        if !queued.contains(&t.settings.name.as_str()) {
            t.offer_diverted(ad);
        }
    }
    for p in divert_from {
        let mut o = lock(&p.overload);
        match &target {
            Some(_) => o.counters.diverted += 1,
            None => o.counters.throttled += 1,
        }
    }
}
