//! The site as the C-SMA last advertised it (every advertisement of the update controller
//! folded in by the dispatcher: a full one replaces it, a delta changes it), so a C-PS's
//! query (gRPC stream, `Query`) is answered with the C-SMA's authoritative view without
//! asking the engine.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::wire::{Granularity, MetricReport, ReportKind, SciRow, ServiceMetrics};
use crate::engine::update::{Advertisement, AdvertisementKind};

#[derive(Clone, Debug, Default)]
pub struct SiteView {
    /// The last advertisement folded in (0: none yet).
    pub sequence: u64,
    pub generated_at: Option<DateTime<Utc>>,
    services: BTreeMap<String, ServiceMetrics>,
    scis: BTreeMap<String, SciRow>,
}

/// Why a query has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// The CS-ID is not among the peer's allowed-cs-id.
    NotAuthorized,
    /// The site does not serve the CS-ID.
    UnknownCsId,
}

impl QueryError {
    pub fn reason(self) -> &'static str {
        match self {
            QueryError::NotAuthorized => "not-authorized",
            QueryError::UnknownCsId => "unknown-cs-id",
        }
    }
}

impl SiteView {
    pub fn fold(&mut self, ad: &Advertisement) {
        if ad.kind == AdvertisementKind::Full {
            self.services.clear();
            self.scis.clear();
        }
        for s in &ad.sites {
            self.services.insert(s.cs_id.to_string(), ServiceMetrics::from(s));
        }
        for w in &ad.withdrawn {
            self.services.remove(w.as_str());
            self.scis.retain(|_, r| r.cs_id != w.as_str());
        }
        for w in &ad.sci_withdrawn {
            self.scis.remove(w.csci_id.as_str());
        }
        for r in &ad.scis {
            self.scis.insert(r.csci_id.to_string(), SciRow::from(r));
        }
        self.sequence = self.sequence.max(ad.seq);
        self.generated_at = Some(ad.generated_at);
    }

    /// The state a peer allowed `allowed` with granularity `g` may see, as a full report
    /// with its SCI rows; limited to `cs_id` when given.
    pub fn answer(
        &self,
        allowed: &dyn Fn(&str) -> bool,
        g: Granularity,
        cs_id: Option<&str>,
    ) -> Result<(MetricReport, Vec<SciRow>), QueryError> {
        if let Some(c) = cs_id {
            if !allowed(c) {
                return Err(QueryError::NotAuthorized);
            }
            if !self.services.contains_key(c) && !self.scis.values().any(|r| r.cs_id == c) {
                return Err(QueryError::UnknownCsId);
            }
        }
        let wanted = |c: &str| allowed(c) && cs_id.is_none_or(|q| q == c);
        let services =
            if g.site() { self.services.values().filter(|s| wanted(&s.cs_id)).cloned().collect() } else { Vec::new() };
        let rows =
            if g.sci() { self.scis.values().filter(|r| wanted(&r.cs_id)).cloned().collect() } else { Vec::new() };
        let report = MetricReport {
            sequence: self.sequence,
            kind: ReportKind::Full,
            trigger: "query".into(),
            generated_at: self.generated_at.unwrap_or_else(Utc::now),
            services,
            withdrawn: Vec::new(),
            sci_withdrawn: Vec::new(),
        };
        Ok((report, rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cps::wire::tests::site;
    use crate::engine::model::{Health, Metrics, SciState, SiteMetrics};
    use crate::engine::update::{Audience, SciMetrics, SciWithdrawal, Trigger};

    fn row(csci: &str, cs: &str) -> SciMetrics {
        SciMetrics {
            csci_id: csci.into(),
            cs_id: cs.into(),
            state: SciState::Healthy,
            metrics: Metrics {
                gas: 1,
                computing_time_ms: 5,
                health: Health::Healthy,
                cost: None,
                reputation: None,
                security_label: None,
            },
        }
    }

    fn ad(seq: u64, kind: AdvertisementKind, sites: Vec<SiteMetrics>, withdrawn: &[&str]) -> Advertisement {
        Advertisement {
            seq,
            kind,
            audience: Audience::All,
            trigger: Trigger::MetricChange,
            sites,
            withdrawn: withdrawn.iter().map(|w| (*w).into()).collect(),
            sci_withdrawn: vec![],
            scis: vec![],
            generated_at: Utc::now(),
        }
    }

    // Seed 004, Protocol Adapter (gRPC: queries from the C-PS): the answer is the site as
    // last advertised, for the CS-IDs and the granularity the asking C-PS may see.
    #[test]
    fn seed004_protocol_adapter_query_answers_are_the_site_as_last_advertised() {
        let mut v = SiteView::default();
        let mut full = ad(1, AdvertisementKind::Full, vec![site("AR1", 10), site("AR2", 20)], &[]);
        full.scis = vec![row("s1", "AR1"), row("s2", "AR2")];
        v.fold(&full);
        v.fold(&ad(2, AdvertisementKind::Delta, vec![site("AR1", 11)], &["AR2"]));
        let mut gone = ad(3, AdvertisementKind::Delta, vec![], &[]);
        gone.sci_withdrawn = vec![SciWithdrawal::new("s1", ["AR1".to_string()])];
        v.fold(&gone);
        let all = |_: &str| true;
        let (r, rows) = v.answer(&all, Granularity::Both, None).unwrap();
        assert_eq!((r.sequence, r.kind), (3, ReportKind::Full));
        assert_eq!(r.services.iter().map(|s| (s.cs_id.as_str(), s.gas)).collect::<Vec<_>>(), [("AR1", 11)]);
        assert!(rows.is_empty(), "s1 withdrawn, s2 gone with AR2");
        let only_ar2 = |c: &str| c == "AR2";
        assert_eq!(v.answer(&only_ar2, Granularity::Site, Some("AR1")).unwrap_err(), QueryError::NotAuthorized);
        assert_eq!(v.answer(&all, Granularity::Site, Some("AR2")).unwrap_err(), QueryError::UnknownCsId);
        let (r, _) = v.answer(&all, Granularity::Sci, Some("AR1")).unwrap();
        assert!(r.services.is_empty(), "granularity sci: no service rows");
        v.fold(&ad(4, AdvertisementKind::Full, vec![site("AR3", 1)], &[]));
        let (r, _) = v.answer(&all, Granularity::Site, None).unwrap();
        assert_eq!(r.services.iter().map(|s| s.cs_id.as_str()).collect::<Vec<_>>(), ["AR3"], "a full one replaces");
    }
}
