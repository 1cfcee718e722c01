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

use super::encode::{attribute, metric_tlvs, nlri, CodePoints, Encoding, NlriParams};
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
        if penalty <= self.reuse {
            return Duration::ZERO;
        }
        let secs = self.half_life.as_secs_f64() * (penalty / self.reuse).log2();
        Duration::from_secs_f64(secs.min(86_400.0 * 2.0)) + Duration::from_millis(1)
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
}

impl RibParams {
    /// A service's prefix: configured, or its CS-ID when that is an address or prefix.
    pub fn prefix_of(&self, cs_id: &str) -> Option<IpNet> {
        if let Some(p) = self.prefixes.get(cs_id) {
            return Some(*p);
        }
        cs_id.parse::<IpNet>().ok().or_else(|| cs_id.parse::<std::net::IpAddr>().ok().map(IpNet::from))
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
}

/// Where an NLRI stands (YANG `advertisements/nlri/status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Advertised,
    Pending,
    Suppressed,
    Withdrawn,
}

impl Status {
    pub fn yang(self) -> &'static str {
        match self {
            Status::Advertised => "advertised",
            Status::Pending => "pending",
            Status::Suppressed => "suppressed",
            Status::Withdrawn => "withdrawn",
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
        for cs in std::mem::take(&mut self.dirty) {
            changed |= self.update(&cs, now);
        }
        (changed, self.timers.first().map(|(t, _)| *t))
    }

    fn update(&mut self, cs: &CsId, now: Instant) -> bool {
        let params = &self.params;
        let Some(e) = self.entries.get_mut(cs) else { return false };
        if let Some(old) = e.deadline.take() {
            self.timers.remove(&(old, cs.clone()));
        }
        let damping = params.damping;
        if let Some(d) = &damping {
            if let Some(at) = e.penalty_at {
                e.penalty = d.decay(e.penalty, now.saturating_duration_since(at));
            }
            e.penalty_at = Some(now);
            if e.suppressed && e.penalty < d.reuse {
                e.suppressed = false;
                tracing::info!(cs_id = %cs, "BGP-LS: damping released the service");
            }
        }
        let mut changed = false;
        let force = std::mem::take(&mut e.force);
        let prefix = params.prefix_of(cs);
        if prefix.is_none() || force {
            // No prefix (any more), or one to rebuild: what was published goes.
            if e.published.take().is_some() && prefix.is_none() {
                self.published.remove(cs);
                changed = true;
            }
        }
        let penalize = |e: &mut Entry, p: f64| {
            if let Some(d) = &damping {
                e.penalty = (e.penalty + p).min(d.ceiling());
                if !e.suppressed && e.penalty > d.suppress {
                    e.suppressed = true;
                    tracing::warn!(cs_id = %cs, penalty = e.penalty, "BGP-LS: service flaps, damping suppresses it");
                }
            }
        };
        match (&e.desired, &e.published) {
            (None, Some(_)) => {
                e.published = None;
                self.published.remove(cs);
                changed = true;
                e.flaps = e.flaps.saturating_add(1);
                penalize(e, damping.map_or(0.0, |d| d.withdrawal_penalty));
            }
            (None, None) => {}
            (Some(_), _) if e.suppressed => {
                if e.published.take().is_some() {
                    self.published.remove(cs);
                    changed = true;
                }
            }
            (Some(want), Some(have)) if want.metrics == have.metrics && want.site_id == have.site_id => {}
            (Some(_), _) if prefix.is_none() => {}
            (Some(want), have) => {
                let due = if force { now } else { e.last_announced.map_or(now, |t| t + params.min_interval) };
                if due > now {
                    e.deadline = Some(due);
                } else {
                    let was_up = have.is_some();
                    let want = want.clone();
                    if let Some(prefix) = params.prefix_of(cs) {
                        let route = Route {
                            cs_id: cs.clone(),
                            prefix,
                            nlri: nlri(&params.nlri, prefix),
                            attribute: attribute(
                                params.encoding,
                                metric_tlvs(&params.code_points, &want.site_id, &want.metrics, want.generation),
                            ),
                            generation: want.generation,
                        };
                        self.published.insert(cs.clone(), Arc::new(route));
                        e.published = Some(want);
                        e.last_announced = Some(now);
                        changed = true;
                        if was_up {
                            penalize(e, damping.map_or(0.0, |d| d.change_penalty));
                            if e.suppressed {
                                e.published = None;
                                self.published.remove(cs);
                            }
                        }
                    }
                }
            }
        }
        if e.suppressed {
            if let Some(d) = &damping {
                e.deadline = Some(now + d.reuse_after(e.penalty));
            }
        }
        if let Some(t) = e.deadline {
            self.timers.insert((t, cs.clone()));
        }
        // Forget a service that is gone and no longer carries a penalty worth keeping.
        if e.desired.is_none() && e.published.is_none() && !e.suppressed && e.penalty < 1.0 {
            self.entries.remove(cs);
        }
        changed
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
            } else if e.desired.is_none() {
                Status::Withdrawn
            } else if e.published.as_ref().map(|p| (&p.metrics, &p.site_id))
                == e.desired.as_ref().map(|d| (&d.metrics, &d.site_id))
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
        let d = Damping {
            half_life: Duration::from_secs(10),
            reuse: 750.0,
            suppress: 2000.0,
            max_suppress: Duration::from_secs(60),
            withdrawal_penalty: 1000.0,
            change_penalty: 0.0,
        };
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
}
