//! The reference C-PS's Computing Service Table: per site (one C-SMA each), the services it
//! advertises, the highest sequence applied and the SCIs it withdrew. Pure state, no I/O.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use super::config::CpsConfig;
use crate::cps::selection::{self, Candidate};
use crate::cps::wire::{Ack, MetricReport, ReportKind, SciRow, SciState, ServiceMetrics, SiteState};
use crate::engine::model::Health;

/// How many applied sequence numbers and withdrawn SCIs a site remembers.
const HISTORY: usize = 100_000;

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SiteEntry {
    pub csma_id: String,
    pub acked_sequence: u64,
    pub services: BTreeMap<String, ServiceMetrics>,
    /// Most recent last.
    pub withdrawn_scis: VecDeque<String>,
    /// Sequence numbers applied, in order (what the tests check for order and duplicates).
    #[serde(skip)]
    pub applied: VecDeque<u64>,
    pub full_snapshots: u64,
    /// Per-SCI rows (`PUT /cats/metrics/{csci-id}`), each at the sequence it was put with.
    pub scis: BTreeMap<String, SciEntry>,
    /// Keepalives that refreshed this site.
    pub keepalives: u64,
    /// Last report, row or keepalive: the entry ages out `entry_ttl` after it.
    #[serde(skip)]
    pub refreshed: Option<std::time::Instant>,
    /// Per service, the advertisement sequence (generation) each field was last set at,
    /// whichever channel set it (REST, gRPC or BGP-LS): seed 004's hybrid model, "the more
    /// recent update takes precedence". Indexed by [`Field`].
    #[serde(skip)]
    pub generations: BTreeMap<String, [u64; FIELDS]>,
    /// Values a channel delivered older than what another one had already set (kept out).
    pub older_than_held: u64,
    /// Per withdrawn service, the sequence of its withdrawal: an older announcement from a
    /// slower channel does not bring it back.
    #[serde(skip)]
    pub withdrawn_at: BTreeMap<String, u64>,
    /// Routing-channel announcements of a service not held that lacked a mandatory metric
    /// (GAS, computing time, health, SCI count): not taken, REST or gRPC brings it.
    pub incomplete_routes: u64,
}

/// The fields of a service that channels may carry separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Gas,
    ComputingTime,
    Health,
    SciCount,
    Cost,
    Reputation,
    SecurityLabel,
}

pub const FIELDS: usize = 7;
/// Every field: what a REST or gRPC report carries.
pub const ALL_FIELDS: u8 = (1 << FIELDS) - 1;

impl Field {
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The fields without which a service cannot be taken in.
const MANDATORY: u8 = Field::Gas.bit() | Field::ComputingTime.bit() | Field::Health.bit() | Field::SciCount.bit();

/// Sets the fields of `s` named in `fields` that are not newer in `held` (newest wins, by
/// generation). A service not held yet is taken whole, unless its withdrawal is newer or
/// (from a routing channel) a mandatory field is missing.
fn merge(e: &mut SiteEntry, s: &ServiceMetrics, generation: u64, fields: u8) {
    if !e.services.contains_key(&s.cs_id) {
        if e.withdrawn_at.get(&s.cs_id).is_some_and(|w| *w > generation) {
            e.older_than_held += 1;
            return;
        }
        if fields & MANDATORY != MANDATORY {
            e.incomplete_routes += 1;
            return;
        }
        e.withdrawn_at.remove(&s.cs_id);
    }
    let gens = e.generations.entry(s.cs_id.clone()).or_default();
    let Some(cur) = e.services.get_mut(&s.cs_id) else {
        e.services.insert(s.cs_id.clone(), s.clone());
        for (i, g) in gens.iter_mut().enumerate() {
            *g = if fields & (1 << i) != 0 { generation } else { 0 };
        }
        return;
    };
    let mut kept_out = false;
    for (i, g) in gens.iter_mut().enumerate() {
        if fields & (1 << i) == 0 {
            continue;
        }
        if generation < *g {
            kept_out = true;
            continue;
        }
        *g = generation;
        match i {
            0 => cur.gas = s.gas,
            1 => cur.computing_time = s.computing_time,
            2 => cur.health = s.health,
            3 => cur.sci_count = s.sci_count,
            4 => cur.cost = s.cost,
            5 => cur.reputation = s.reputation,
            _ => cur.security_label = s.security_label,
        }
    }
    if kept_out {
        e.older_than_held += 1;
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SciEntry {
    pub sequence: u64,
    #[serde(flatten)]
    pub row: SciRow,
}

/// Why a request was refused by the table (beyond authentication).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CstError {
    #[error("site '{site}' is reported by C-SMA '{owner}', not '{csma}'")]
    WrongOwner { site: String, owner: String, csma: String },
    #[error("report kind '{0}' is not allowed here")]
    WrongKind(&'static str),
    #[error("SCI '{csci}' belongs to site '{site}'")]
    SciOfOtherSite { csci: String, site: String },
    #[error("no state for site '{0}'")]
    UnknownSite(String),
    #[error("sequence {got} is not the acknowledged sequence {acked}")]
    SequenceMismatch { got: u64, acked: u64 },
}

#[derive(Debug, Default)]
pub struct Cst {
    pub sites: BTreeMap<String, SiteEntry>,
    full_sync: BTreeSet<String>,
    /// Sites aged out for want of a refresh.
    pub expired: u64,
    /// Keepalives accepted, every site.
    pub keepalives: u64,
}

fn remember<T>(q: &mut VecDeque<T>, v: T) {
    if q.len() == HISTORY {
        q.pop_front();
    }
    q.push_back(v);
}

impl Cst {
    fn entry(&mut self, site: &str, csma: &str) -> Result<&mut SiteEntry, CstError> {
        let e = self
            .sites
            .entry(site.to_owned())
            .or_insert_with(|| SiteEntry { csma_id: csma.to_owned(), ..Default::default() });
        if e.csma_id != csma {
            return Err(CstError::WrongOwner { site: site.into(), owner: e.csma_id.clone(), csma: csma.into() });
        }
        e.refreshed = Some(std::time::Instant::now());
        Ok(e)
    }

    /// Soft state (seed 004, Periodic Synchronization): every site not refreshed (report,
    /// SCI row or keepalive) within `ttl` is forgotten, its SCI rows with it. `None` never
    /// ages anything out.
    pub fn expire(&mut self, now: std::time::Instant, ttl: Option<std::time::Duration>) {
        let Some(ttl) = ttl else { return };
        let before = self.sites.len();
        self.sites.retain(|_, e| e.refreshed.is_none_or(|t| now.saturating_duration_since(t) <= ttl));
        let gone = before - self.sites.len();
        if gone > 0 {
            tracing::info!(sites = gone, "reference C-PS: entries aged out without a refresh");
            self.expired += gone as u64;
        }
    }

    /// `POST /cats/keepalive`: the site's entries live on when `seq` is still what the
    /// C-PS acknowledged (nothing was missed); otherwise the C-SMA must send the full set.
    pub fn keepalive(&mut self, site: &str, csma: &str, seq: u64) -> Result<Ack, CstError> {
        let Some(e) = self.sites.get(site) else { return Err(CstError::UnknownSite(site.into())) };
        if e.csma_id != csma {
            return Err(CstError::WrongOwner { site: site.into(), owner: e.csma_id.clone(), csma: csma.into() });
        }
        if e.acked_sequence != seq {
            return Err(CstError::SequenceMismatch { got: seq, acked: e.acked_sequence });
        }
        let e = self.entry(site, csma)?;
        e.keepalives += 1;
        self.keepalives += 1;
        Ok(self.ack(site, 0, 0))
    }

    /// `PUT /cats/metrics/{csci-id}`: one SCI's row, for the site of the C-SMA that owns
    /// it; an SCI held for another site is refused. A row older than the one held is
    /// stale; one at the same sequence is applied again (idempotent).
    pub fn put_sci(&mut self, site: &str, csma: &str, seq: u64, row: &SciRow) -> Result<Ack, CstError> {
        if let Some((other, _)) =
            self.sites.iter().find(|(s, e)| s.as_str() != site && e.scis.contains_key(&row.csci_id))
        {
            return Err(CstError::SciOfOtherSite { csci: row.csci_id.clone(), site: other.clone() });
        }
        if !self.sites.contains_key(site) {
            self.full_sync.insert(site.to_owned());
        }
        let e = self.entry(site, csma)?;
        if e.scis.get(&row.csci_id).is_some_and(|x| x.sequence > seq) {
            return Ok(self.ack(site, 0, 1));
        }
        e.scis.insert(row.csci_id.clone(), SciEntry { sequence: seq, row: row.clone() });
        Ok(self.ack(site, 1, 0))
    }

    /// `GET /cats/metrics/{csci-id}`: the row and the site holding it.
    pub fn sci_state(&self, csci: &str) -> Option<(String, SciState)> {
        self.sites.iter().find_map(|(site, e)| {
            e.scis.get(csci).map(|x| {
                (e.csma_id.clone(), SciState { site_id: site.clone(), sequence: x.sequence, sci: x.row.clone() })
            })
        })
    }

    fn ack(&self, site: &str, applied: u32, stale: u32) -> Ack {
        Ack {
            acked_sequence: self.sites.get(site).map_or(0, |e| e.acked_sequence),
            applied,
            stale,
            full_sync_requested: self.full_sync.contains(site),
            ..Ack::default()
        }
    }

    /// POST: delta reports in order; one not newer than what was applied is skipped as
    /// stale (seed 004: the freshness indicator detects stale or out-of-order updates).
    pub fn apply_batch(&mut self, site: &str, csma: &str, reports: &[MetricReport]) -> Result<Ack, CstError> {
        if reports.iter().any(|r| r.kind == ReportKind::Full) {
            return Err(CstError::WrongKind("full (a full report goes alone)"));
        }
        if !self.sites.contains_key(site) {
            // Deltas for a site this C-PS holds nothing of (it restarted and lost its
            // state): apply them, and ask for the complete set.
            self.full_sync.insert(site.to_owned());
        }
        let e = self.entry(site, csma)?;
        let (mut applied, mut stale) = (0, 0);
        for r in reports {
            if r.sequence <= e.acked_sequence {
                stale += 1;
                continue;
            }
            for s in &r.services {
                merge(e, s, r.sequence, ALL_FIELDS);
            }
            for w in &r.withdrawn {
                e.services.remove(w);
                e.generations.remove(w);
                e.withdrawn_at.insert(w.clone(), r.sequence);
                e.scis.retain(|_, x| x.row.cs_id != *w);
            }
            for c in &r.sci_withdrawn {
                if e.withdrawn_scis.back() != Some(c) {
                    remember(&mut e.withdrawn_scis, c.clone());
                }
            }
            e.acked_sequence = r.sequence;
            remember(&mut e.applied, r.sequence);
            applied += 1;
        }
        Ok(self.ack(site, applied, stale))
    }

    /// PUT: the site's complete set replaces what was held (the C-SMA's view wins). A
    /// snapshot older than what was applied is stale; one at the same sequence is applied
    /// again (idempotent).
    pub fn apply_snapshot(&mut self, site: &str, csma: &str, r: &MetricReport) -> Result<Ack, CstError> {
        if r.kind != ReportKind::Full {
            return Err(CstError::WrongKind("delta (a full report alone)"));
        }
        let e = self.entry(site, csma)?;
        if r.sequence < e.acked_sequence {
            return Ok(self.ack(site, 0, 1));
        }
        // The complete set: services it does not name are gone; the others merge, so a
        // field another channel set from a newer advertisement stays.
        let names: BTreeSet<&str> = r.services.iter().map(|s| s.cs_id.as_str()).collect();
        for gone in e.services.keys().filter(|k| !names.contains(k.as_str())) {
            e.withdrawn_at.insert(gone.clone(), r.sequence);
        }
        e.services.retain(|k, _| names.contains(k.as_str()));
        e.generations.retain(|k, _| names.contains(k.as_str()));
        for s in &r.services {
            merge(e, s, r.sequence, ALL_FIELDS);
        }
        // The rows of this snapshot were put at its sequence just before it; older ones
        // belong to SCIs the complete set no longer has.
        e.scis.retain(|_, x| x.sequence >= r.sequence);
        if r.sequence > e.acked_sequence {
            remember(&mut e.applied, r.sequence);
        }
        e.acked_sequence = r.sequence;
        e.full_snapshots += 1;
        self.full_sync.remove(site);
        Ok(self.ack(site, 1, 0))
    }

    /// A service as a routing channel (BGP-LS) carries it: the `fields` it has, at
    /// `generation`; newest wins field by field against what REST or gRPC set.
    pub fn apply_routed(
        &mut self,
        site: &str,
        csma: &str,
        s: &ServiceMetrics,
        fields: u8,
        generation: u64,
    ) -> Result<(), CstError> {
        if !self.sites.contains_key(site) {
            // A site only the routing channel knows of: ask its C-SMA for the complete set.
            self.full_sync.insert(site.to_owned());
        }
        let e = self.entry(site, csma)?;
        merge(e, s, generation, fields);
        Ok(())
    }

    /// A routing channel withdrew the service whose route it last had at `generation`: it
    /// goes unless another channel set any of its fields from a newer advertisement.
    pub fn withdraw_routed(&mut self, site: &str, csma: &str, cs_id: &str, generation: u64) -> Result<(), CstError> {
        if !self.sites.contains_key(site) {
            return Ok(());
        }
        let e = self.entry(site, csma)?;
        if e.generations.get(cs_id).is_some_and(|g| g.iter().any(|x| *x > generation)) {
            e.older_than_held += 1;
            return Ok(());
        }
        e.services.remove(cs_id);
        e.generations.remove(cs_id);
        e.withdrawn_at.insert(cs_id.to_owned(), generation);
        Ok(())
    }

    /// DELETE: the SCI is gone. `Ok(false)` when the site is unknown. A withdrawal older
    /// than what was applied is ignored (a newer report already describes the site).
    pub fn withdraw_sci(&mut self, site: &str, csma: &str, csci: &str, seq: u64) -> Result<Option<Ack>, CstError> {
        if !self.sites.contains_key(site) {
            return Ok(None);
        }
        let e = self.entry(site, csma)?;
        if seq <= e.acked_sequence {
            return Ok(Some(self.ack(site, 0, 1)));
        }
        remember(&mut e.withdrawn_scis, csci.to_owned());
        e.scis.remove(csci);
        Ok(Some(self.ack(site, 1, 0)))
    }

    /// GET: what is held for the site, for the C-SMA's reconciliation.
    pub fn site_state(&self, site: &str) -> Option<SiteState> {
        let e = self.sites.get(site)?;
        Some(SiteState {
            site_id: site.to_owned(),
            csma_id: e.csma_id.clone(),
            acked_sequence: e.acked_sequence,
            full_sync_requested: self.full_sync.contains(site),
            services: e.services.values().cloned().collect(),
            scis: e.scis.values().map(|x| x.row.clone()).collect(),
            keepalive: false,
            entry_ttl: None,
            refresh_interval: None,
        })
    }

    /// The C-PS asks for a full sync of `site` (answered with the next reply to it).
    pub fn request_full_sync(&mut self, site: &str) {
        self.full_sync.insert(site.to_owned());
    }

    /// "Which site for CS-ID `cs_id` from ingress `ingress`" (seed 000 section 4).
    pub fn select(&self, cfg: &CpsConfig, cs_id: &str, ingress: &str) -> Selection {
        let mut candidates = Vec::new();
        let mut excluded = Vec::new();
        for (site, e) in &self.sites {
            let Some(s) = e.services.get(cs_id) else { continue };
            let why = if s.gas == 0 {
                Some("no available slots (GAS 0)")
            } else if s.health == Health::Unhealthy {
                Some("unhealthy")
            } else {
                None
            };
            let delay = cfg.delay(ingress, site);
            match (why, delay) {
                (Some(w), _) => excluded.push((site.clone(), w.to_owned())),
                (None, None) => excluded.push((site.clone(), format!("no delay configured from ingress '{ingress}'"))),
                (None, Some(d)) => {
                    let (capacity, preference) = cfg.indexes(site);
                    candidates.push(Candidate {
                        site: site.clone(),
                        gas: s.gas,
                        computing_time_ms: s.computing_time,
                        capacity,
                        preference,
                        delay_ms: d,
                    })
                }
            }
        }
        let choice = selection::choose(&candidates, cfg.weight);
        Selection {
            cs_id: cs_id.to_owned(),
            ingress: ingress.to_owned(),
            site: choice.as_ref().map(|c| c.site.clone()),
            candidates: candidates
                .iter()
                .map(|c| CandidateView {
                    site: c.site.clone(),
                    cost: choice.as_ref().and_then(|ch| ch.costs.iter().find(|x| x.0 == c.site)).map_or(1.0, |x| x.1),
                    load: c.load(),
                    gas: c.gas,
                    computing_time: c.computing_time_ms,
                    capacity: c.capacity,
                    preference: c.preference,
                    delay_ms: c.delay_ms,
                })
                .collect(),
            excluded: excluded.into_iter().map(|(site, reason)| Excluded { site, reason }).collect(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Selection {
    pub cs_id: String,
    pub ingress: String,
    /// None: no eligible site.
    pub site: Option<String>,
    pub candidates: Vec<CandidateView>,
    pub excluded: Vec<Excluded>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct CandidateView {
    pub site: String,
    pub cost: f64,
    pub load: f64,
    pub gas: u32,
    pub computing_time: u32,
    pub capacity: f64,
    pub preference: f64,
    pub delay_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Excluded {
    pub site: String,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(csci: &str) -> SciRow {
        SciRow {
            csci_id: csci.into(),
            cs_id: "AR1".into(),
            state: "healthy".into(),
            gas: 1,
            computing_time: 1,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
        }
    }

    #[test]
    fn seed004_protocol_adapter_sci_rows_belong_to_one_site_and_are_stale_when_older() {
        let mut c = Cst::default();
        assert_eq!(c.put_sci("a", "csma-a", 5, &row("x")).unwrap().applied, 1);
        assert!(matches!(c.put_sci("b", "csma-b", 6, &row("x")), Err(CstError::SciOfOtherSite { .. })));
        assert!(matches!(c.put_sci("a", "csma-b", 6, &row("y")), Err(CstError::WrongOwner { .. })));
        assert_eq!(c.put_sci("a", "csma-a", 4, &row("x")).unwrap().stale, 1, "older than the held row");
        assert_eq!(c.put_sci("a", "csma-a", 5, &row("x")).unwrap().applied, 1, "same sequence: idempotent");
        assert_eq!(
            c.sci_state("x").map(|(csma, s)| (csma, s.site_id, s.sequence)),
            Some(("csma-a".into(), "a".into(), 5))
        );
    }

    #[test]
    fn seed004_periodic_sync_entries_age_out_and_a_keepalive_names_the_acked_sequence() {
        use std::time::{Duration, Instant};
        let mut c = Cst::default();
        let full = MetricReport {
            sequence: 10,
            kind: ReportKind::Full,
            trigger: "resync".into(),
            generated_at: chrono::Utc::now(),
            services: vec![],
            withdrawn: vec![],
            sci_withdrawn: vec![],
        };
        c.apply_snapshot("a", "csma-a", &full).unwrap();
        assert!(matches!(c.keepalive("a", "csma-a", 9), Err(CstError::SequenceMismatch { acked: 10, .. })));
        assert!(matches!(c.keepalive("a", "csma-b", 10), Err(CstError::WrongOwner { .. })));
        assert!(c.keepalive("a", "csma-a", 10).is_ok());
        let t = c.sites["a"].refreshed.unwrap();
        c.expire(t + Duration::from_secs(5), Some(Duration::from_secs(5)));
        assert!(c.sites.contains_key("a"), "within the TTL");
        c.expire(t + Duration::from_secs(6), None);
        assert!(c.sites.contains_key("a"), "no TTL: kept forever");
        c.expire(t + Duration::from_secs(6), Some(Duration::from_secs(5)));
        assert!(c.sites.is_empty());
        assert_eq!(c.expired, 1);
        assert!(matches!(c.keepalive("a", "csma-a", 10), Err(CstError::UnknownSite(_))));
        let _ = Instant::now();
    }
}

#[cfg(test)]
mod hybrid_tests {
    use super::*;

    fn svc(gas: u32) -> ServiceMetrics {
        ServiceMetrics {
            cs_id: "AR1".into(),
            gas,
            computing_time: 5,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: Some(3),
            sci_count: 1,
        }
    }

    fn report(seq: u64, gas: u32) -> MetricReport {
        MetricReport {
            kind: ReportKind::Delta,
            sequence: seq,
            trigger: "metric-change".into(),
            generated_at: chrono::Utc::now(),
            services: vec![svc(gas)],
            withdrawn: vec![],
            sci_withdrawn: vec![],
        }
    }

    fn gas(c: &Cst) -> u32 {
        c.sites["s"].services["AR1"].gas
    }

    #[test]
    fn seed004_hybrid_newest_wins_whichever_channel_delivers_last() {
        let mut c = Cst::default();
        // REST says 400 at generation 20; BGP-LS then delivers 500 from generation 10.
        c.apply_batch("s", "m", &[report(20, 400)]).unwrap();
        c.apply_routed("s", "m", &svc(500), Field::Gas.bit(), 10).unwrap();
        assert_eq!(gas(&c), 400, "the older BGP-LS value arrived later and lost");
        assert_eq!(c.sites["s"].older_than_held, 1);
        // BGP-LS says 600 at generation 30: newer than REST's, it wins.
        c.apply_routed("s", "m", &svc(600), Field::Gas.bit(), 30).unwrap();
        assert_eq!(gas(&c), 600);
        // REST delivers generation 25 late: kept out for the gas it carries.
        c.apply_batch("s", "m", &[report(25, 450)]).unwrap();
        assert_eq!(gas(&c), 600);
        // A field BGP-LS does not carry (security label) follows REST alone.
        let mut s = svc(700);
        s.security_label = Some(9);
        c.apply_batch("s", "m", &[MetricReport { services: vec![s], ..report(40, 700) }]).unwrap();
        assert_eq!((gas(&c), c.sites["s"].services["AR1"].security_label), (700, Some(9)));
        // A BGP-LS withdrawal of a route older than REST's last word is kept out.
        c.withdraw_routed("s", "m", "AR1", 30).unwrap();
        assert_eq!(gas(&c), 700);
        // REST withdraws at 50; a late BGP-LS announcement from 45 does not bring it back.
        c.apply_batch("s", "m", &[MetricReport { services: vec![], withdrawn: vec!["AR1".into()], ..report(50, 0) }])
            .unwrap();
        c.apply_routed("s", "m", &svc(1), ALL_FIELDS, 45).unwrap();
        assert!(c.sites["s"].services.is_empty());
        // A route carrying only some metrics does not create a service with made-up ones.
        c.apply_routed("s", "m", &svc(2), Field::SecurityLabel.bit(), 60).unwrap();
        assert!(c.sites["s"].services.is_empty());
        assert_eq!(c.sites["s"].incomplete_routes, 1);
        c.apply_routed("s", "m", &svc(3), ALL_FIELDS, 61).unwrap();
        assert_eq!(gas(&c), 3);
    }
}
