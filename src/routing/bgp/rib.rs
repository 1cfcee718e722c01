//! The speaker's Adj-RIB-Out, one for every neighbor (pure; time is passed in): what the
//! update controller wants advertised per service, and what is published to the sessions
//! after the minimum advertisement interval and RFC 2439 damping.
//!
//! - Folding: a Full advertisement is the authoritative set (a service absent from it is
//!   withdrawn); a Delta changes the services it names and withdraws its `withdrawn`.
//! - A withdrawal is published at once (never paced: seed 004 wants failures immediate). A
//!   new or changed value waits until `min_interval` after the NLRI's last announcement;
//!   only the latest value goes. A heartbeat that repeats the metrics changes nothing.
//! - Damping: each NLRI's penalty decays by half every `half_life`; a withdrawal adds
//!   `withdrawal_penalty` (a flap), a changed value `change_penalty`. Above `suppress` the
//!   NLRI is withdrawn and held back; below `reuse` it is announced again (RFC 2439 sections
//!   4.2-4.4). The penalty is capped so no suppression outlasts `max_suppress`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use netgauze_bgp_pkt::nlri::BgpLsNlri;
use netgauze_bgp_pkt::path_attribute::BgpLsAttribute;
use tokio::time::Instant;

use super::encode::{attribute, metric_tlvs, nlri, same_carried, CodePoints, Encoding, NlriParams};
use crate::engine::model::{CsId, SiteMetrics};
use crate::engine::update::{Advertisement, AdvertisementKind};

/// RFC 2439 parameters, already checked (`reuse < suppress`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Damping {
    pub half_life: Duration,
    pub reuse: f64,
    pub suppress: f64,
    pub max_suppress: Duration,
    pub withdrawal_penalty: f64,
    pub change_penalty: f64,
}

impl Damping {
    /// The highest penalty: one that decays to `reuse` in `max_suppress`.
    fn ceiling(&self) -> f64 {
        self.reuse * 2f64.powf(self.max_suppress.as_secs_f64() / self.half_life.as_secs_f64())
    }

    fn decay(&self, penalty: f64, elapsed: Duration) -> f64 {
        penalty * 0.5f64.powf(elapsed.as_secs_f64() / self.half_life.as_secs_f64())
    }

    /// When `penalty` (now) will have decayed to `reuse`.
    fn reuse_after(&self, penalty: f64) -> Duration {
        self.time_to(penalty, self.reuse)
    }

    /// When `penalty` (now) will have decayed below `level`.
    fn time_to(&self, penalty: f64, level: f64) -> Duration {
        if penalty <= level {
            return Duration::ZERO;
        }
        let secs = self.half_life.as_secs_f64() * (penalty / level).log2();
        Duration::from_secs_f64(secs.min(86_400.0 * 2.0)) + Duration::from_millis(1)
    }

    /// Whether a penalty can ever pass `suppress` (else damping would do nothing).
    pub fn can_suppress(&self) -> bool {
        self.ceiling() > self.suppress
    }
}

/// Everything that shapes the routes (a configuration change rebuilds the RIB).
#[derive(Clone, Debug, PartialEq)]
pub struct RibParams {
    pub nlri: NlriParams,
    pub code_points: CodePoints,
    pub encoding: Encoding,
    pub min_interval: Duration,
    pub damping: Option<Damping>,
    /// Configured prefixes per CS-ID (YANG `service`).
    pub prefixes: BTreeMap<CsId, IpNet>,
    /// The metrics this channel carries (YANG `metric`, `encode::metric_bit`).
    pub carried: u8,
}

impl RibParams {
    /// A service's prefix: configured, or its CS-ID when that is an address or prefix.
    pub fn prefix_of(&self, cs_id: &str) -> Option<IpNet> {
        if let Some(p) = self.prefixes.get(cs_id) {
            return Some(p.trunc());
        }
        let p = cs_id.parse::<IpNet>().ok().or_else(|| cs_id.parse::<std::net::IpAddr>().ok().map(IpNet::from))?;
        // A CS-ID naming a configured service's prefix belongs to that service.
        (!self.prefixes.values().any(|q| q.trunc() == p.trunc())).then(|| p.trunc())
    }
}

/// One published route: what a session announces for a service.
#[derive(Debug, PartialEq)]
pub struct Route {
    pub cs_id: CsId,
    pub prefix: IpNet,
    pub nlri: BgpLsNlri,
    pub attribute: BgpLsAttribute,
    /// The advertisement sequence of the value.
    pub generation: u64,
}

/// What the sessions advertise: every published route by CS-ID.
pub type Published = BTreeMap<CsId, Arc<Route>>;

#[derive(Clone, Debug, PartialEq)]
struct Desired {
    metrics: SiteMetrics,
    site_id: String,
    generation: u64,
}

#[derive(Debug, Default)]
struct Entry {
    desired: Option<Desired>,
    /// The value of the published route (for the "same metrics" check).
    published: Option<Desired>,
    last_announced: Option<Instant>,
    penalty: f64,
    penalty_at: Option<Instant>,
    suppressed: bool,
    flaps: u32,
    /// When this entry must be looked at again (pacing or reuse).
    deadline: Option<Instant>,
    /// Rebuild the route now (new parameters).
    force: bool,
    /// Whether the controller wanted it advertised at the last look (flaps are counted on
    /// this, advertised or not).
    was_up: bool,
    /// Another service advertises the same prefix.
    conflict: bool,
    /// The prefix a conflict was last logged for (once per conflict).
    conflict_logged: Option<IpNet>,
}

fn penalize(e: &mut Entry, damping: &Option<Damping>, p: f64, cs: &str) {
    if let Some(d) = damping {
        e.penalty = (e.penalty + p).min(d.ceiling());
        if !e.suppressed && e.penalty > d.suppress {
            e.suppressed = true;
            tracing::warn!(cs_id = %cs, penalty = e.penalty, "BGP-LS: service flaps, damping suppresses it");
        }
    }
}

/// Where an NLRI stands (YANG `advertisements/nlri/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Advertised,
    Pending,
    Suppressed,
    Withdrawn,
    Conflict,
}

impl Status {
    pub fn yang(self) -> &'static str {
        match self {
            Status::Advertised => "advertised",
            Status::Pending => "pending",
            Status::Suppressed => "suppressed",
            Status::Withdrawn => "withdrawn",
            Status::Conflict => "conflict",
        }
    }
}

/// One row of the advertisements state.
#[derive(Clone, Debug, PartialEq)]
pub struct NlriState {
    pub cs_id: CsId,
    pub prefix: IpNet,
    pub status: Status,
    pub penalty: u32,
    pub flaps: u32,
    pub generation: Option<u64>,
}

pub struct Rib {
    params: RibParams,
    entries: BTreeMap<CsId, Entry>,
    published: Published,
    dirty: BTreeSet<CsId>,
    timers: BTreeSet<(Instant, CsId)>,
    /// Which service advertises each prefix (two services never share an NLRI).
    owners: BTreeMap<IpNet, CsId>,
    /// Services the controller advertises that have no prefix.
    unmapped: BTreeSet<CsId>,
}

impl Rib {
    pub fn new(params: RibParams) -> Rib {
        Rib {
            params,
            entries: BTreeMap::new(),
            published: BTreeMap::new(),
            dirty: BTreeSet::new(),
            timers: BTreeSet::new(),
            owners: BTreeMap::new(),
            unmapped: BTreeSet::new(),
        }
    }

    pub fn published(&self) -> &Published {
        &self.published
    }

    pub fn unmapped(&self) -> usize {
        self.unmapped.len()
    }

    /// Takes in one advertisement of the update controller.
    pub fn fold(&mut self, ad: &Advertisement, site_id: &str) {
        let generation = ad.seq;
        if ad.kind == AdvertisementKind::Full {
            let present: BTreeSet<&str> = ad.sites.iter().map(|s| s.cs_id.as_str()).collect();
            let gone: Vec<CsId> = self.entries.keys().filter(|k| !present.contains(k.as_str())).cloned().collect();
            for cs in gone {
                self.set(&cs, None);
            }
            self.unmapped.retain(|k| present.contains(k.as_str()));
        }
        for s in &ad.sites {
            if self.params.prefix_of(&s.cs_id).is_none() && self.unmapped.insert(s.cs_id.clone()) {
                tracing::warn!(cs_id = %s.cs_id, "BGP-LS: service has no prefix (routing/bgp-ls/service): not advertised");
            }
            let d = Desired { metrics: s.clone(), site_id: site_id.to_owned(), generation };
            self.set(&s.cs_id, Some(d));
        }
        for cs in &ad.withdrawn {
            self.unmapped.remove(cs);
            self.set(cs, None);
        }
    }

    /// New parameters (prefixes, code points, encoding, pacing, damping): every route is
    /// rebuilt at the next step, without waiting for the minimum interval; damping state
    /// is kept.
    pub fn reconfigure(&mut self, params: RibParams) {
        self.params = params;
        let cs: Vec<CsId> = self.entries.keys().cloned().collect();
        self.unmapped.clear();
        for c in cs {
            let e = self.entries.get_mut(&c).expect("key just listed");
            e.force = true;
            if e.desired.is_some() && self.params.prefix_of(&c).is_none() {
                self.unmapped.insert(c.clone());
            }
            self.dirty.insert(c);
        }
    }

    fn set(&mut self, cs: &str, d: Option<Desired>) {
        if d.is_none() && !self.entries.contains_key(cs) {
            return;
        }
        let e = self.entries.entry(cs.into()).or_default();
        e.desired = d;
        self.dirty.insert(cs.into());
    }

    /// Brings the published routes up to date at `now`; returns whether they changed and
    /// when to call again.
    pub fn step(&mut self, now: Instant) -> (bool, Option<Instant>) {
        while let Some(first) = self.timers.first().cloned() {
            if first.0 > now {
                break;
            }
            self.timers.pop_first();
            self.dirty.insert(first.1);
        }
        let mut changed = false;
        // A release may dirty services that were kept out by a conflict: they go in the
        // same step. Each pass hands a prefix to at most one of them, so this ends.
        while !self.dirty.is_empty() {
            for cs in std::mem::take(&mut self.dirty) {
                changed |= self.update(&cs, now);
            }
        }
        (changed, self.timers.first().map(|(t, _)| *t))
    }

    fn update(&mut self, cs: &CsId, now: Instant) -> bool {
        let damping = self.params.damping;
        let prefix = self.params.prefix_of(cs);
        let Some(e) = self.entries.get_mut(cs) else { return false };
        if let Some(old) = e.deadline.take() {
            self.timers.remove(&(old, cs.clone()));
        }
        let force = std::mem::take(&mut e.force);
        match &damping {
            Some(d) => {
                if let Some(at) = e.penalty_at {
                    e.penalty = d.decay(e.penalty, now.saturating_duration_since(at));
                }
                e.penalty_at = Some(now);
                if e.suppressed && e.penalty < d.reuse {
                    e.suppressed = false;
                    tracing::info!(cs_id = %cs, "BGP-LS: damping released the service");
                }
            }
            None => {
                // Damping off (or switched off): nothing is held back.
                e.suppressed = false;
                e.penalty = 0.0;
                e.penalty_at = None;
            }
        }
        // RFC 2439 counts the flaps of the route itself, advertised or held back: each
        // withdrawal adds to the penalty, whether or not it reached the wire.
        let up = e.desired.is_some();
        if e.was_up && !up {
            e.flaps = e.flaps.saturating_add(1);
            penalize(e, &damping, damping.map_or(0.0, |d| d.withdrawal_penalty), cs);
        }
        e.was_up = up;
        let published = self.published.get(cs).cloned();
        let mut publish = None;
        let mut unpublish = false;
        e.conflict = false;
        match (e.desired.clone(), prefix) {
            (Some(want), Some(prefix)) if !e.suppressed => {
                let same = published.as_ref().is_some_and(|r| r.prefix == prefix)
                    && e.published.as_ref().is_some_and(|h| {
                        same_carried(&h.metrics, &want.metrics, self.params.carried) && h.site_id == want.site_id
                    });
                let owner = self.owners.get(&prefix).filter(|o| *o != cs);
                if owner.is_some() {
                    if e.conflict_logged.replace(prefix) != Some(prefix) {
                        tracing::warn!(cs_id = %cs, %prefix, owner = %owner.map_or("", |o| o.as_str()),
                            "BGP-LS: another service already advertises this prefix: not advertised");
                    }
                    e.conflict = true;
                    unpublish = published.is_some();
                } else if same && !force {
                } else {
                    let due = if force { now } else { e.last_announced.map_or(now, |t| t + self.params.min_interval) };
                    if due > now {
                        e.deadline = Some(due);
                    } else {
                        if published.is_some() && e.published.is_some() {
                            penalize(e, &damping, damping.map_or(0.0, |d| d.change_penalty), cs);
                        }
                        if e.suppressed {
                            unpublish = published.is_some();
                        } else {
                            let p = &self.params;
                            publish = Some(Route {
                                cs_id: cs.clone(),
                                prefix,
                                nlri: nlri(&p.nlri, prefix),
                                attribute: attribute(
                                    p.encoding,
                                    metric_tlvs(
                                        &p.code_points,
                                        &want.site_id,
                                        &want.metrics,
                                        want.generation,
                                        p.carried,
                                    ),
                                ),
                                generation: want.generation,
                            });
                            e.published = Some(want);
                            e.last_announced = Some(now);
                        }
                    }
                }
            }
            _ => unpublish = published.is_some(),
        }
        if unpublish {
            e.published = None;
        }
        // When to look again: the reuse time of a suppressed route; for a route that is
        // gone, when its penalty no longer matters (it is forgotten then).
        let gone = e.desired.is_none() && !e.suppressed;
        let forget_below = damping.map_or(1.0, |d| d.reuse / 2.0);
        if let Some(d) = &damping {
            if e.suppressed {
                e.deadline = Some(now + d.reuse_after(e.penalty));
            } else if gone && e.penalty >= forget_below {
                e.deadline = Some(now + d.time_to(e.penalty, forget_below));
            }
        }
        if let Some(t) = e.deadline {
            self.timers.insert((t, cs.clone()));
        }
        let forget = gone && e.penalty < forget_below;
        let mut changed = false;
        if unpublish || publish.is_some() {
            changed = true;
            if let Some(old) = self.published.remove(cs) {
                self.release(&old.prefix, cs);
            }
        }
        if let Some(r) = publish {
            self.owners.insert(r.prefix, cs.clone());
            self.published.insert(cs.clone(), Arc::new(r));
        }
        if forget {
            self.entries.remove(cs);
        }
        changed
    }

    /// `cs` no longer advertises `prefix`: a service kept out by the conflict may take it.
    fn release(&mut self, prefix: &IpNet, cs: &CsId) {
        if self.owners.get(prefix) == Some(cs) {
            self.owners.remove(prefix);
            for (other, e) in &self.entries {
                if e.conflict && other != cs {
                    self.dirty.insert(other.clone());
                }
            }
        }
    }

    /// The advertisements state at `now`.
    pub fn states(&self, now: Instant) -> Vec<NlriState> {
        let mut out = Vec::new();
        for (cs, e) in &self.entries {
            let Some(prefix) = self.params.prefix_of(cs) else { continue };
            let penalty = match (&self.params.damping, e.penalty_at) {
                (Some(d), Some(at)) => d.decay(e.penalty, now.saturating_duration_since(at)),
                _ => e.penalty,
            };
            let status = if e.suppressed {
                Status::Suppressed
            } else if e.conflict {
                Status::Conflict
            } else if e.desired.is_none() {
                Status::Withdrawn
            } else if matches!((&e.published, &e.desired), (Some(p), Some(d))
                if same_carried(&p.metrics, &d.metrics, self.params.carried) && p.site_id == d.site_id)
            {
                Status::Advertised
            } else {
                Status::Pending
            };
            out.push(NlriState {
                cs_id: cs.clone(),
                prefix,
                status,
                penalty: penalty.round().min(u32::MAX as f64) as u32,
                flaps: e.flaps,
                generation: self.published.get(cs).map(|r| r.generation),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::Health;
    use crate::engine::update::{Audience, Trigger};
    use netgauze_bgp_pkt::iana::BgpLsProtocolId;

    fn params(min_ms: u64, damping: Option<Damping>) -> RibParams {
        RibParams {
            nlri: NlriParams {
                protocol: BgpLsProtocolId::StaticConfiguration,
                identifier: 0,
                local_as: 65000,
                router_id: "192.0.2.1".parse().unwrap(),
            },
            code_points: CodePoints::default(),
            encoding: Encoding::PrivateTlvs,
            min_interval: Duration::from_millis(min_ms),
            damping,
            prefixes: [("AR1".into(), "203.0.113.1/32".parse().unwrap())].into_iter().collect(),
            carried: super::super::encode::ALL_METRICS,
        }
    }

    fn site(cs: &str, gas: u32) -> SiteMetrics {
        SiteMetrics {
            cs_id: cs.into(),
            gas,
            computing_time_ms: 5,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
            sci_count: 1,
        }
    }

    fn ad(seq: u64, kind: AdvertisementKind, sites: Vec<SiteMetrics>, withdrawn: Vec<&str>) -> Advertisement {
        Advertisement {
            seq,
            kind,
            audience: Audience::All,
            trigger: Trigger::Heartbeat,
            sites,
            withdrawn: withdrawn.into_iter().map(Into::into).collect(),
            sci_withdrawn: vec![],
            scis: vec![],
            generated_at: chrono::Utc::now(),
        }
    }

    /// Half-life 10 s, reuse 750, suppress 2000, 1000 per withdrawal.
    fn damping() -> Damping {
        Damping {
            half_life: Duration::from_secs(10),
            reuse: 750.0,
            suppress: 2000.0,
            max_suppress: Duration::from_secs(60),
            withdrawal_penalty: 1000.0,
            change_penalty: 0.0,
        }
    }

    fn gen(r: &Rib, cs: &str) -> Option<u64> {
        r.published().get(cs).map(|r| r.generation)
    }

    #[test]
    fn seed004_routing_full_is_authoritative_and_unmapped_services_are_counted() {
        let mut r = Rib::new(params(0, None));
        let t = Instant::now();
        r.fold(
            &ad(1, AdvertisementKind::Full, vec![site("AR1", 5), site("10.1.0.0/16", 6), site("LLM", 1)], vec![]),
            "s",
        );
        assert!(r.step(t).0);
        assert_eq!(r.published().keys().collect::<Vec<_>>(), ["10.1.0.0/16", "AR1"]);
        assert_eq!(r.unmapped(), 1);
        r.fold(&ad(2, AdvertisementKind::Full, vec![site("AR1", 5)], vec![]), "s");
        assert!(r.step(t).0);
        assert_eq!(r.published().keys().collect::<Vec<_>>(), ["AR1"]);
        assert_eq!(gen(&r, "AR1"), Some(1), "a heartbeat repeating the metrics is not a new announcement");
        assert_eq!(r.unmapped(), 0);
    }

    #[test]
    fn rfc4271_9_2_1_1_min_interval_paces_changes_but_not_withdrawals() {
        let mut r = Rib::new(params(5000, None));
        let t = Instant::now();
        r.fold(&ad(1, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
        r.step(t);
        r.fold(&ad(2, AdvertisementKind::Delta, vec![site("AR1", 6)], vec![]), "s");
        r.fold(&ad(3, AdvertisementKind::Delta, vec![site("AR1", 7)], vec![]), "s");
        let (changed, next) = r.step(t + Duration::from_secs(1));
        assert!(!changed);
        assert_eq!(next, Some(t + Duration::from_secs(5)));
        assert_eq!(r.states(t)[0].status, Status::Pending);
        assert!(r.step(t + Duration::from_secs(5)).0);
        assert_eq!(gen(&r, "AR1"), Some(3), "only the latest value goes");
        r.fold(&ad(4, AdvertisementKind::Delta, vec![], vec!["AR1"]), "s");
        assert!(r.step(t + Duration::from_secs(6)).0, "a withdrawal is never paced");
        assert!(r.published().is_empty());
    }

    #[test]
    fn rfc2439_flapping_service_is_suppressed_then_reused() {
        let d = damping();
        let mut r = Rib::new(params(0, Some(d)));
        let t = Instant::now();
        let mut seq = 0;
        let mut flap = |r: &mut Rib, at: Instant| {
            seq += 2;
            r.fold(&ad(seq, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
            r.step(at);
            r.fold(&ad(seq + 1, AdvertisementKind::Delta, vec![], vec!["AR1"]), "s");
            r.step(at);
        };
        flap(&mut r, t);
        flap(&mut r, t);
        flap(&mut r, t);
        // Penalty 3000 > 2000: the next announcement is held back.
        r.fold(&ad(100, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
        let (_, next) = r.step(t);
        assert!(r.published().is_empty());
        let st = &r.states(t)[0];
        assert_eq!((st.status, st.penalty, st.flaps), (Status::Suppressed, 3000, 3));
        // 3000 -> 750 takes two half-lives.
        let reuse = next.unwrap();
        assert!(reuse >= t + Duration::from_secs(20) && reuse < t + Duration::from_millis(20_100), "{:?}", reuse - t);
        assert!(!r.step(t + Duration::from_secs(19)).0);
        assert!(r.step(reuse).0);
        assert_eq!(gen(&r, "AR1"), Some(100));
    }

    #[test]
    fn rfc2439_withdrawn_routes_are_forgotten_and_switching_damping_off_releases() {
        let d = damping();
        let mut r = Rib::new(params(0, Some(d)));
        let t = Instant::now();
        r.fold(&ad(1, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
        r.step(t);
        r.fold(&ad(2, AdvertisementKind::Delta, vec![], vec!["AR1"]), "s");
        let (_, next) = r.step(t);
        // 1000 decays below reuse/2 = 375 in log2(1000/375) half-lives: then it is forgotten.
        let forget = next.expect("a forget timer");
        assert!(forget > t + Duration::from_secs(14) && forget < t + Duration::from_secs(15), "{:?}", forget - t);
        assert_eq!(r.states(t).len(), 1);
        r.step(forget);
        assert!(r.states(forget).is_empty(), "the withdrawn service is forgotten");

        // Suppressed, then damping switched off: advertised at once.
        for seq in 0..3 {
            r.fold(&ad(10 + 2 * seq, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
            r.step(forget);
            r.fold(&ad(11 + 2 * seq, AdvertisementKind::Delta, vec![], vec!["AR1"]), "s");
            r.step(forget);
        }
        r.fold(&ad(20, AdvertisementKind::Delta, vec![site("AR1", 5)], vec![]), "s");
        r.step(forget);
        assert_eq!(r.states(forget)[0].status, Status::Suppressed);
        r.reconfigure(params(0, None));
        assert!(r.step(forget).0);
        assert_eq!(gen(&r, "AR1"), Some(20));
    }

    #[test]
    fn rfc9552_one_nlri_per_prefix_conflicting_service_waits_for_it() {
        let mut r = Rib::new(params(0, None));
        let t = Instant::now();
        // "10.1.0.0/16" and "10.1.2.3/16" are one prefix.
        r.fold(&ad(1, AdvertisementKind::Delta, vec![site("10.1.0.0/16", 5), site("10.1.2.3/16", 6)], vec![]), "s");
        r.step(t);
        assert_eq!(r.published().len(), 1);
        let st = r.states(t);
        assert_eq!(st.iter().filter(|s| s.status == Status::Conflict).count(), 1, "{st:?}");
        let owner = r.published().keys().next().unwrap().clone();
        r.fold(&ad(2, AdvertisementKind::Delta, vec![], vec![owner.as_str()]), "s");
        r.step(t);
        assert_eq!(r.published().len(), 1, "the other service takes the prefix over");
        assert_ne!(r.published().keys().next().unwrap(), &owner);
        // A CS-ID naming a configured service's prefix is not advertised on its own.
        r.fold(&ad(3, AdvertisementKind::Delta, vec![site("203.0.113.1", 1)], vec![]), "s");
        r.step(t);
        assert_eq!(r.unmapped(), 1);
    }
}
