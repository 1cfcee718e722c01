//! The C-PS REST wire format (seed 004, Protocol Adapter, centralized model): the bodies of
//! `POST /cats/metrics`, `PUT|DELETE|GET /cats/metrics/{csci-id}`, `GET /cats/metrics` and
//! `POST /cats/keepalive`, their replies, and gzip. The serde model here is encoded as
//! JSON, XML or CBOR by `codec.rs`. Pure; `docs/cps-protocol.md` is the prose version.

use std::io::{Read, Write};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::engine::model::{Health, SiteMetrics};
use crate::engine::update::{Advertisement, AdvertisementKind, SciMetrics};

pub const METRICS_PATH: &str = "/cats/metrics";
/// The lightweight refresh (seed 004, Periodic Synchronization: a keepalive extends the
/// C-PS's cache TTL without retransmitting the metrics).
pub const KEEPALIVE_PATH: &str = "/cats/keepalive";

/// XML root element names of the bodies (see `codec.rs`).
pub const ROOT_BATCH: &str = "metric-batch";
pub const ROOT_SCI: &str = "sci-update";
pub const ROOT_KEEPALIVE: &str = "keepalive";
pub const ROOT_ACK: &str = "ack";
pub const ROOT_SITE: &str = "site-state";
pub const ROOT_SCI_STATE: &str = "sci-state";
pub const ROOT_ERROR: &str = "error";

/// The largest `refresh-interval` / `entry-ttl` the agent believes, seconds (one day): a
/// C-PS announcing more, or 0, is ignored (logged), never acted on.
pub const MAX_HINT_SECS: u32 = 86_400;

/// What a C-PS takes per peer (YANG `peer/granularity`): the site aggregate per CS-ID, the
/// per-SCI rows (`PUT /cats/metrics/{csci-id}`), or both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Granularity {
    #[default]
    Site,
    Sci,
    Both,
}

impl Granularity {
    pub fn parse(s: &str) -> Option<Granularity> {
        match s {
            "site" => Some(Granularity::Site),
            "sci" => Some(Granularity::Sci),
            "both" => Some(Granularity::Both),
            _ => None,
        }
    }
    pub fn site(self) -> bool {
        self != Granularity::Sci
    }
    pub fn sci(self) -> bool {
        self != Granularity::Site
    }
}

/// A C-PS's hint (seconds) as the agent takes it: `Ok(None)` when absent, an error for 0
/// or more than [`MAX_HINT_SECS`] (a hostile or broken C-PS cannot make the agent refresh
/// every millisecond, nor silence it for a year).
pub fn bounded_hint(v: Option<u32>) -> Result<Option<std::time::Duration>, String> {
    match v {
        None => Ok(None),
        Some(s) if (1..=MAX_HINT_SECS).contains(&s) => Ok(Some(std::time::Duration::from_secs(u64::from(s)))),
        Some(s) => Err(format!("{s} s is outside 1..{MAX_HINT_SECS}")),
    }
}

/// Request headers (all requests carry the first; PSK mode adds the others).
pub const H_CSMA_ID: &str = "x-cats-csma-id";
pub const H_SITE_ID: &str = "x-cats-site-id";
/// Freshness sequence of a DELETE (the advertisement that withdrew the SCI).
pub const H_SEQUENCE: &str = "x-cats-sequence";
pub const H_KEY_ID: &str = "x-cats-key-id";
pub const H_TIMESTAMP: &str = "x-cats-timestamp";
pub const H_NONCE: &str = "x-cats-nonce";
pub const H_SIGNATURE: &str = "x-cats-signature";

/// The largest body either side accepts, compressed or not.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

/// One service's row of the Computing Service Table, as the C-SMA advertises it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceMetrics {
    pub cs_id: String,
    pub gas: u32,
    /// Milliseconds per request.
    pub computing_time: u32,
    pub health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    /// 0..=10: the lowest reputation of the contributing SCIs, after policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reputation: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_label: Option<u8>,
    pub sci_count: u32,
}

impl From<&SiteMetrics> for ServiceMetrics {
    fn from(s: &SiteMetrics) -> Self {
        ServiceMetrics {
            cs_id: s.cs_id.clone(),
            gas: s.gas,
            computing_time: s.computing_time_ms,
            health: s.health,
            cost: s.cost,
            reputation: s.reputation,
            security_label: s.security_label,
            sci_count: s.sci_count,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportKind {
    Delta,
    Full,
}

/// One advertisement as sent to one C-PS (already filtered to its allowed CS-IDs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetricReport {
    /// The freshness indicator: strictly increasing per C-SMA.
    pub sequence: u64,
    pub kind: ReportKind,
    pub trigger: String,
    pub generated_at: DateTime<Utc>,
    #[serde(default)]
    pub services: Vec<ServiceMetrics>,
    /// CS-IDs this site no longer serves.
    #[serde(default)]
    pub withdrawn: Vec<String>,
    /// SCIs withdrawn by this advertisement (also sent as `DELETE /cats/metrics/{csci-id}`).
    #[serde(default)]
    pub sci_withdrawn: Vec<String>,
}

impl MetricReport {
    /// The part of `ad` a C-PS allowed `allowed` may see, at site granularity. `None` when
    /// a delta has nothing for it (a full snapshot is always sent: it is the authoritative
    /// set, even empty).
    pub fn for_peer(ad: &Advertisement, allowed: &dyn Fn(&str) -> bool) -> Option<MetricReport> {
        MetricReport::for_peer_at(ad, allowed, Granularity::Site)
    }

    /// As [`MetricReport::for_peer`] for a peer of granularity `g`: without `site` the
    /// report carries no service rows (the per-SCI rows go as PUTs, [`sci_rows`]), and a
    /// delta whose only news are SCI rows still goes when `g` includes `sci`.
    pub fn for_peer_at(ad: &Advertisement, allowed: &dyn Fn(&str) -> bool, g: Granularity) -> Option<MetricReport> {
        let services: Vec<ServiceMetrics> = if g.site() {
            ad.sites.iter().filter(|s| allowed(&s.cs_id)).map(ServiceMetrics::from).collect()
        } else {
            Vec::new()
        };
        let withdrawn: Vec<String> = ad.withdrawn.iter().filter(|c| allowed(c)).cloned().collect();
        // An SCI's withdrawal names it: only a C-PS allowed one of its services learns it.
        let sci_withdrawn: Vec<String> = ad
            .sci_withdrawn
            .iter()
            .filter(|w| w.cs_ids.iter().any(|c| allowed(c)))
            .map(|w| w.csci_id.clone())
            .collect();
        let kind = match ad.kind {
            AdvertisementKind::Full => ReportKind::Full,
            AdvertisementKind::Delta => ReportKind::Delta,
        };
        let rows = g.sci() && ad.scis.iter().any(|r| allowed(&r.cs_id));
        if kind == ReportKind::Delta && services.is_empty() && withdrawn.is_empty() && sci_withdrawn.is_empty() && !rows
        {
            return None;
        }
        Some(MetricReport {
            sequence: ad.seq,
            kind,
            trigger: ad.trigger.name().to_owned(),
            generated_at: ad.generated_at,
            services,
            withdrawn,
            sci_withdrawn,
        })
    }
}

/// One SCI's row as a C-PS receives it (`PUT /cats/metrics/{csci-id}`, and in the replies
/// of `GET /cats/metrics/{csci-id}` and `GET /cats/metrics`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SciRow {
    pub csci_id: String,
    pub cs_id: String,
    /// The C-SMA's state machine for the SCI: `active`, `healthy`, `stale`, `failed`.
    pub state: String,
    pub gas: u32,
    pub computing_time: u32,
    pub health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reputation: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_label: Option<u8>,
}

impl From<&SciMetrics> for SciRow {
    fn from(r: &SciMetrics) -> Self {
        SciRow {
            csci_id: r.csci_id.clone(),
            cs_id: r.cs_id.clone(),
            state: r.state.yang().to_owned(),
            gas: r.metrics.gas,
            computing_time: r.metrics.computing_time_ms,
            health: r.metrics.health,
            cost: r.metrics.cost,
            reputation: r.metrics.reputation,
            security_label: r.metrics.security_label,
        }
    }
}

/// The per-SCI rows of `ad` a C-PS allowed `allowed` may see.
pub fn sci_rows(ad: &Advertisement, allowed: &dyn Fn(&str) -> bool) -> Vec<SciRow> {
    ad.scis.iter().filter(|r| allowed(&r.cs_id)).map(SciRow::from).collect()
}

/// Body of `PUT /cats/metrics/{csci-id}`: one SCI's row, at the sequence of the
/// advertisement it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SciUpdate {
    pub csma_id: String,
    pub site_id: String,
    pub sequence: u64,
    pub sci: SciRow,
}

/// Body of `POST /cats/keepalive`: "nothing changed since `sequence`, keep my entries".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Keepalive {
    pub csma_id: String,
    pub site_id: String,
    /// The last sequence the C-PS acknowledged for the site; it must still be its
    /// `acked-sequence` (409 otherwise: the agent then sends the full set).
    pub sequence: u64,
}

/// Reply to `GET /cats/metrics/{csci-id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SciState {
    pub site_id: String,
    pub sequence: u64,
    pub sci: SciRow,
}

/// Body of `POST /cats/metrics`: a batch of delta reports, oldest first, or one full
/// report alone (the site's complete set).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetricBatch {
    pub csma_id: String,
    pub site_id: String,
    pub reports: Vec<MetricReport>,
}

/// Reply to POST, PUT and DELETE.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Ack {
    /// The highest sequence the C-PS has applied for this site.
    pub acked_sequence: u64,
    /// Reports applied by this request.
    #[serde(default)]
    pub applied: u32,
    /// Reports skipped because their sequence was not newer than what the C-PS had.
    #[serde(default)]
    pub stale: u32,
    /// The C-PS asks for a full snapshot (seed 004: a C-PS MAY request a full sync).
    #[serde(default)]
    pub full_sync_requested: bool,
    /// The C-PS takes `POST /cats/keepalive`.
    #[serde(default)]
    pub keepalive: bool,
    /// Seconds after which the C-PS ages out this site's entries without a refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_ttl: Option<u32>,
    /// How often the C-PS wants a refresh, seconds (its load hint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_interval: Option<u32>,
}

/// Reply to `GET /cats/metrics` (reconciliation): what the C-PS holds for the requesting
/// C-SMA's site.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SiteState {
    pub site_id: String,
    pub csma_id: String,
    pub acked_sequence: u64,
    #[serde(default)]
    pub full_sync_requested: bool,
    #[serde(default)]
    pub services: Vec<ServiceMetrics>,
    #[serde(default)]
    pub scis: Vec<SciRow>,
    #[serde(default)]
    pub keepalive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_ttl: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_interval: Option<u32>,
}

/// An error reply: `{"error": "<reason>", "detail": "..."}` with a 4xx/5xx status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default)]
    pub detail: String,
}

/// gzip-compresses a body.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 4 + 64), flate2::Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// Decompresses a gzip body, refusing output larger than `limit` (a gzip bomb).
pub fn gunzip(data: &[u8], limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut dec = flate2::read::GzDecoder::new(data).take(limit as u64 + 1);
    dec.read_to_end(&mut out).map_err(|e| format!("gzip: {e}"))?;
    if out.len() > limit {
        return Err(format!("decompressed body larger than {limit} bytes"));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::update::{Audience, Trigger};

    /// A healthy site row (the unit tests of `wire.rs` and `current.rs`).
    pub(crate) fn site(cs: &str, gas: u32) -> SiteMetrics {
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

    fn ad(kind: AdvertisementKind, sites: Vec<SiteMetrics>) -> Advertisement {
        Advertisement {
            seq: 7,
            kind,
            audience: Audience::All,
            trigger: Trigger::MetricChange,
            sites,
            withdrawn: vec!["OLD".into()],
            sci_withdrawn: vec![],
            scis: vec![],
            generated_at: Utc::now(),
        }
    }

    #[test]
    fn only_allowed_cs_ids_reach_a_peer() {
        // seed 004, C-PS Authentication: only authorized CS-IDs are sent.
        let a = ad(AdvertisementKind::Delta, vec![site("AR1", 10), site("LLM1", 20)]);
        let r = MetricReport::for_peer(&a, &|c| c == "AR1").unwrap();
        assert_eq!(r.services.len(), 1);
        assert_eq!(r.services[0].cs_id, "AR1");
        assert!(r.withdrawn.is_empty());
        let none = MetricReport::for_peer(&ad(AdvertisementKind::Delta, vec![site("LLM1", 1)]), &|c| c == "AR1");
        assert!(none.is_none(), "a delta with nothing allowed is not sent");
        let full = MetricReport::for_peer(&ad(AdvertisementKind::Full, vec![site("LLM1", 1)]), &|c| c == "AR1");
        assert_eq!(full.unwrap().kind, ReportKind::Full, "a full snapshot always goes, even empty");
    }

    #[test]
    fn an_sci_withdrawal_reaches_only_peers_allowed_one_of_its_services() {
        // seed 004, C-PS Authentication: a C-PS learns nothing of CS-IDs it is not allowed,
        // the CSCI-IDs serving them included.
        use crate::engine::update::SciWithdrawal;
        let mut a = ad(AdvertisementKind::Delta, vec![]);
        a.withdrawn.clear();
        a.sci_withdrawn = vec![
            SciWithdrawal::new("llm-sci", ["LLM1".to_string()]),
            SciWithdrawal::new("both-sci", ["AR1".to_string(), "LLM1".to_string()]),
        ];
        let ar = MetricReport::for_peer(&a, &|c| c == "AR1").unwrap();
        assert_eq!(ar.sci_withdrawn, ["both-sci"]);
        let llm = MetricReport::for_peer(&a, &|c| c == "LLM1").unwrap();
        assert_eq!(llm.sci_withdrawn, ["llm-sci", "both-sci"]);
        a.sci_withdrawn.remove(1);
        assert!(MetricReport::for_peer(&a, &|c| c == "AR1").is_none(), "nothing for AR1: no request at all");
    }

    #[test]
    fn json_uses_kebab_case_and_round_trips() {
        let r = MetricReport::for_peer(&ad(AdvertisementKind::Delta, vec![site("AR1", 10)]), &|_| true).unwrap();
        let b = MetricBatch { csma_id: "c".into(), site_id: "s".into(), reports: vec![r] };
        let j = serde_json::to_string(&b).unwrap();
        assert!(j.contains("\"computing-time\":5") && j.contains("\"sci-withdrawn\"") && j.contains("\"HEALTHY\""));
        assert_eq!(serde_json::from_str::<MetricBatch>(&j).unwrap(), b);
    }

    #[test]
    fn seed004_protocol_adapter_every_body_round_trips_in_json_xml_and_cbor_with_reputation_and_cost() {
        use crate::cps::codec::Encoding;
        let mut s = site("AR1", 10);
        s.cost = Some(99);
        s.reputation = Some(7);
        s.security_label = Some(4);
        let mut a = ad(AdvertisementKind::Delta, vec![s, site("LLM1", 3)]);
        a.sci_withdrawn = vec![crate::engine::update::SciWithdrawal::new("188.3.67.4:70", ["AR1".to_string()])];
        let r = MetricReport::for_peer(&a, &|_| true).unwrap();
        let b = MetricBatch { csma_id: "c".into(), site_id: "s".into(), reports: vec![r.clone(), r] };
        let row = SciRow {
            csci_id: "188.3.67.3:67".into(),
            cs_id: "AR1".into(),
            state: "healthy".into(),
            gas: 400,
            computing_time: 5,
            health: Health::Degraded,
            cost: Some(1),
            reputation: Some(10),
            security_label: None,
        };
        let u = SciUpdate { csma_id: "c".into(), site_id: "s".into(), sequence: 9, sci: row.clone() };
        let k = Keepalive { csma_id: "c".into(), site_id: "s".into(), sequence: u64::MAX };
        let ack = Ack {
            acked_sequence: 5,
            applied: 1,
            stale: 0,
            full_sync_requested: true,
            keepalive: true,
            entry_ttl: Some(180),
            refresh_interval: Some(45),
        };
        let st = SiteState {
            site_id: "s".into(),
            csma_id: "c".into(),
            acked_sequence: 5,
            services: b.reports[0].services.clone(),
            scis: vec![row.clone()],
            keepalive: true,
            ..SiteState::default()
        };
        let one = SciState { site_id: "s".into(), sequence: 9, sci: row };
        let err = ErrorBody { error: "malformed".into(), detail: "a <b> & \"c\"".into() };
        for enc in [Encoding::Json, Encoding::Xml, Encoding::Cbor] {
            let rt = |root: &str, bytes: Vec<u8>| (root.to_owned(), bytes);
            let (r, bytes) = rt(ROOT_BATCH, enc.encode(ROOT_BATCH, &b).unwrap());
            assert_eq!(enc.decode::<MetricBatch>(&r, &bytes).unwrap(), b, "{enc:?}");
            assert_eq!(enc.decode::<SciUpdate>(ROOT_SCI, &enc.encode(ROOT_SCI, &u).unwrap()).unwrap(), u);
            assert_eq!(enc.decode::<Keepalive>(ROOT_KEEPALIVE, &enc.encode(ROOT_KEEPALIVE, &k).unwrap()).unwrap(), k);
            assert_eq!(enc.decode::<Ack>(ROOT_ACK, &enc.encode(ROOT_ACK, &ack).unwrap()).unwrap(), ack);
            assert_eq!(enc.decode::<SiteState>(ROOT_SITE, &enc.encode(ROOT_SITE, &st).unwrap()).unwrap(), st);
            let x = enc.encode(ROOT_SCI_STATE, &one).unwrap();
            assert_eq!(enc.decode::<SciState>(ROOT_SCI_STATE, &x).unwrap(), one);
            assert_eq!(enc.decode::<ErrorBody>(ROOT_ERROR, &enc.encode(ROOT_ERROR, &err).unwrap()).unwrap(), err);
        }
        let xml = String::from_utf8(Encoding::Xml.encode(ROOT_BATCH, &b).unwrap()).unwrap();
        assert!(xml.starts_with("<metric-batch xmlns=\"urn:cats-sma:cps:1\"><csma-id>c</csma-id>"), "{xml}");
        assert!(xml.contains("<cost>99</cost>") && xml.contains("<reputation>7</reputation>"), "{xml}");
    }

    #[test]
    fn seed004_periodic_sync_hints_are_bounded() {
        assert_eq!(bounded_hint(None), Ok(None));
        assert_eq!(bounded_hint(Some(30)), Ok(Some(std::time::Duration::from_secs(30))));
        assert_eq!(bounded_hint(Some(MAX_HINT_SECS)).unwrap().unwrap().as_secs(), 86_400);
        assert!(bounded_hint(Some(0)).is_err(), "no refresh every millisecond");
        assert!(bounded_hint(Some(MAX_HINT_SECS + 1)).is_err());
    }

    #[test]
    fn gzip_round_trip_and_bomb_limit() {
        let data = vec![b'x'; 100_000];
        let z = gzip(&data);
        assert!(z.len() < 1000);
        assert_eq!(gunzip(&z, 100_000).unwrap(), data);
        assert!(gunzip(&z, 99_999).is_err());
        assert!(gunzip(b"not gzip", 10).is_err());
    }
}
