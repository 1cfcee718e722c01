//! The C-PS stream's wire format (`proto/cats/sma/v1/cps.proto`), pure: the C-SMA's
//! messages built from the REST model (`crate::cps::wire`: the same reports, filtered the
//! same way), and each C-PS message decoded and checked — its MAC and counter, then its
//! body — into a [`CpsEvent`]. The decoder is what `fuzz/fuzz_targets/cps_grpc.rs` drives.

use prost::Message as _;

use super::pb;
use crate::cps::auth::verify_stream;
use crate::cps::wire::{Ack, MetricReport, ReportKind, SciRow, ServiceMetrics};
use crate::engine::model::Health;
use crate::overload::wire::{Olr, Supported, WireError, MAX_SOURCE_ID, MAX_VALIDITY};

/// The one call, and what the JWS / PSK MAC of a C-SMA message bind as method and path.
pub const SESSION_PATH: &str = "/cats.sma.v1.CpsLink/Session";
pub const SIGNED_METHOD: &str = "STREAM";

/// The longest reason / detail text of a C-PS kept (escaped and cut).
const MAX_TEXT: usize = 200;
/// The longest CS-ID (YANG `cs-id`: 1..128).
const MAX_CS_ID: usize = 128;

fn health(h: Health) -> i32 {
    (match h {
        Health::Healthy => pb::MetricHealth::Healthy,
        Health::Degraded => pb::MetricHealth::Degraded,
        Health::Unhealthy => pb::MetricHealth::Unhealthy,
    }) as i32
}

fn service(s: &ServiceMetrics) -> pb::ServiceMetrics {
    pb::ServiceMetrics {
        cs_id: s.cs_id.clone(),
        gas: s.gas,
        computing_time: s.computing_time,
        health: health(s.health),
        cost: s.cost,
        reputation: s.reputation.map(u32::from),
        security_label: s.security_label.map(u32::from),
        sci_count: s.sci_count,
    }
}

fn row(r: &SciRow) -> pb::SciRow {
    pb::SciRow {
        csci_id: r.csci_id.clone(),
        cs_id: r.cs_id.clone(),
        state: r.state.clone(),
        gas: r.gas,
        computing_time: r.computing_time,
        health: health(r.health),
        cost: r.cost,
        reputation: r.reputation.map(u32::from),
        security_label: r.security_label.map(u32::from),
    }
}

/// One report as the stream carries it: the REST report with its per-SCI rows inside.
pub fn report(r: &MetricReport, rows: &[SciRow]) -> pb::MetricReport {
    pb::MetricReport {
        sequence: r.sequence,
        kind: match r.kind {
            ReportKind::Delta => pb::ReportKind::Delta,
            ReportKind::Full => pb::ReportKind::Full,
        } as i32,
        trigger: r.trigger.clone(),
        generated_at: Some(prost_types::Timestamp {
            seconds: r.generated_at.timestamp(),
            nanos: r.generated_at.timestamp_subsec_nanos() as i32,
        }),
        services: r.services.iter().map(service).collect(),
        withdrawn: r.withdrawn.clone(),
        sci_withdrawn: r.sci_withdrawn.clone(),
        scis: rows.iter().map(row).collect(),
    }
}

/// The bytes of one C-SMA body (what its proof covers).
pub fn body(kind: pb::csma_body::Kind) -> Vec<u8> {
    pb::CsmaBody { kind: Some(kind) }.encode_to_vec()
}

/// What the C-PS answers to Hello (REST: the reconciliation `GET /cats/metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    pub acked_sequence: u64,
    pub full_sync_requested: bool,
    pub keepalive: bool,
    pub entry_ttl: Option<u32>,
    pub refresh_interval: Option<u32>,
}

/// The format of a policy update's edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditFormat {
    Xml,
    Json,
}

/// A configuration edit from the C-PS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyUpdate {
    pub update_id: u64,
    pub format: EditFormat,
    pub config: String,
}

/// One C-PS message as the session takes it.
#[derive(Clone, Debug, PartialEq)]
pub enum CpsEvent {
    Welcome(Welcome),
    Ack(Ack),
    /// REST's error status: `reason` "unknown-site" is a 404, "sequence-mismatch" a 409.
    Refusal {
        reason: String,
        detail: String,
    },
    FullSync {
        reason: String,
    },
    Policy(PolicyUpdate),
    /// `cs_id` None: the whole site.
    Query {
        query_id: u64,
        cs_id: Option<String>,
    },
    /// A peer overload report on its own (its content is in [`OcParts`]).
    Overload,
}

/// Why a C-PS message was not taken (the `Rejected.reason` sent back and the counter).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Malformed(String),
    #[error("MAC: {0}")]
    Unauthenticated(String),
    #[error("counter {counter} not above the last accepted {last}")]
    Replayed { counter: u64, last: u64 },
}

impl DecodeError {
    pub fn reason(&self) -> &'static str {
        match self {
            DecodeError::Malformed(_) => "malformed",
            DecodeError::Unauthenticated(_) => "unauthenticated",
            DecodeError::Replayed { .. } => "replayed",
        }
    }
}

/// What a stream's C-PS messages are checked against: the PSK (when the peer has one), the
/// C-SMA id and the stream's Hello nonce the MAC binds, and the last counter accepted.
#[derive(Clone, Debug)]
pub struct Verifier {
    pub psk: Option<Vec<u8>>,
    pub csma_id: String,
    pub hello_nonce: u64,
    pub last_counter: u64,
}

fn hint(v: u32) -> Option<u32> {
    (v != 0).then_some(v)
}

fn text(s: &str) -> String {
    crate::text::printable(s, MAX_TEXT)
}

/// The overload AVPs a C-PS message carried (seed 003), each checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OcParts {
    pub supported: Option<Result<Supported, WireError>>,
    pub olr: Option<Result<Olr, WireError>>,
}

fn source_id(s: &str) -> Result<String, WireError> {
    if s.is_empty() || s.len() > MAX_SOURCE_ID || s.chars().any(char::is_control) {
        return Err(WireError::Value(crate::text::printable(s, 64), "source-id"));
    }
    Ok(s.to_owned())
}

pub fn supported_of(s: &pb::OcSupportedFeatures) -> Result<Supported, WireError> {
    Ok(Supported { feature_vector: s.feature_vector, peer_algo: s.peer_algo, source_id: source_id(&s.source_id)? })
}

pub fn olr_of(o: &pb::OverloadReport) -> Result<Olr, WireError> {
    let reduction = u8::try_from(o.reduction_percentage)
        .ok()
        .filter(|r| *r <= 100)
        .ok_or_else(|| WireError::Value(o.reduction_percentage.to_string(), "reduction"))?;
    if let Some(v) = o.validity_duration.filter(|v| *v > MAX_VALIDITY) {
        return Err(WireError::Value(v.to_string(), "validity"));
    }
    Ok(Olr {
        sequence: o.sequence,
        report_type: o.report_type,
        reduction,
        validity: o.validity_duration,
        source_id: source_id(&o.source_id)?,
    })
}

pub fn pb_supported(s: &Supported) -> pb::OcSupportedFeatures {
    pb::OcSupportedFeatures { feature_vector: s.feature_vector, peer_algo: s.peer_algo, source_id: s.source_id.clone() }
}

pub fn pb_olr(o: &Olr) -> pb::OverloadReport {
    pb::OverloadReport {
        sequence: o.sequence,
        report_type: o.report_type,
        reduction_percentage: u32::from(o.reduction),
        validity_duration: o.validity,
        source_id: o.source_id.clone(),
    }
}

/// Decodes and checks one C-PS message. The counter moves only for a message whose MAC
/// verified, so a forged message cannot push the genuine ones out.
pub fn decode(bytes: &[u8], v: &mut Verifier) -> Result<CpsEvent, DecodeError> {
    decode_with_oc(bytes, v).map(|(e, _)| e)
}

/// [`decode`], with the overload AVPs the message carried.
pub fn decode_with_oc(bytes: &[u8], v: &mut Verifier) -> Result<(CpsEvent, OcParts), DecodeError> {
    let m = pb::CpsMessage::decode(bytes).map_err(|e| DecodeError::Malformed(format!("CpsMessage: {e}")))?;
    if m.counter <= v.last_counter {
        return Err(DecodeError::Replayed { counter: m.counter, last: v.last_counter });
    }
    if let Some(secret) = &v.psk {
        if m.mac.is_empty() {
            return Err(DecodeError::Unauthenticated("missing (the peer has a PSK)".into()));
        }
        verify_stream(secret, &v.csma_id, v.hello_nonce, m.counter, &m.mac, &m.body)
            .map_err(|e| DecodeError::Unauthenticated(e.to_string()))?;
    }
    v.last_counter = m.counter;
    let b = pb::CpsBody::decode(m.body.as_slice()).map_err(|e| DecodeError::Malformed(format!("CpsBody: {e}")))?;
    use pb::cps_body::Kind;
    let mut oc = OcParts::default();
    let event = match b.kind.ok_or_else(|| DecodeError::Malformed("CpsBody without a kind".into()))? {
        Kind::Overload(o) => {
            oc.olr = Some(olr_of(&o));
            CpsEvent::Overload
        }
        Kind::Welcome(w) => CpsEvent::Welcome({
            oc.supported = w.oc_supported.as_ref().map(supported_of);
            oc.olr = w.olr.as_ref().map(olr_of);
            Welcome {
                acked_sequence: w.acked_sequence,
                full_sync_requested: w.full_sync_requested,
                keepalive: w.keepalive,
                entry_ttl: hint(w.entry_ttl),
                refresh_interval: hint(w.refresh_interval),
            }
        }),
        Kind::Ack(a) => CpsEvent::Ack({
            oc.olr = a.olr.as_ref().map(olr_of);
            Ack {
                acked_sequence: a.acked_sequence,
                applied: a.applied,
                stale: a.stale,
                full_sync_requested: a.full_sync_requested,
                keepalive: a.keepalive,
                entry_ttl: hint(a.entry_ttl),
                refresh_interval: hint(a.refresh_interval),
            }
        }),
        Kind::Refusal(r) => {
            if r.reason.is_empty() {
                return Err(DecodeError::Malformed("Refusal without a reason".into()));
            }
            CpsEvent::Refusal { reason: text(&r.reason), detail: text(&r.detail) }
        }
        Kind::FullSync(f) => CpsEvent::FullSync { reason: text(&f.reason) },
        Kind::Policy(p) => {
            let format = match pb::EditFormat::try_from(p.format) {
                Ok(pb::EditFormat::Xml) => EditFormat::Xml,
                Ok(pb::EditFormat::Json) => EditFormat::Json,
                _ => {
                    return Err(DecodeError::Malformed(format!("PolicyUpdate.format {} is not XML or JSON", p.format)))
                }
            };
            if p.config.trim().is_empty() {
                return Err(DecodeError::Malformed("PolicyUpdate.config is empty".into()));
            }
            CpsEvent::Policy(PolicyUpdate { update_id: p.update_id, format, config: p.config })
        }
        Kind::Query(q) => {
            let cs_id = if q.cs_id.is_empty() {
                None
            } else if q.cs_id.len() > MAX_CS_ID || q.cs_id.chars().any(|c| c.is_control()) {
                return Err(DecodeError::Malformed("Query.cs_id is not a CS-ID (1..128 printable characters)".into()));
            } else {
                Some(q.cs_id)
            };
            CpsEvent::Query { query_id: q.query_id, cs_id }
        }
    };
    Ok((event, oc))
}

/// Seals a C-PS body the way a C-PS does (the reference C-PS and tests).
pub fn seal_cps(kind: pb::cps_body::Kind, counter: u64, psk: Option<(&[u8], &str, u64)>) -> pb::CpsMessage {
    let body = pb::CpsBody { kind: Some(kind) }.encode_to_vec();
    let mac = psk
        .map(|(secret, csma_id, nonce)| crate::cps::auth::sign_stream(secret, csma_id, nonce, counter, &body))
        .unwrap_or_default();
    pb::CpsMessage { body, counter, mac }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier(psk: bool) -> Verifier {
        Verifier { psk: psk.then(|| b"k".to_vec()), csma_id: "c".into(), hello_nonce: 7, last_counter: 0 }
    }

    fn query(cs: &str) -> pb::cps_body::Kind {
        pb::cps_body::Kind::Query(pb::Query { query_id: 3, cs_id: cs.into() })
    }

    // Seed 004, C-PS Authentication and Metric Integrity: in PSK mode every C-PS message
    // proves itself, bound to the stream's Hello and counted, so a forged, moved or
    // replayed message is refused and does not advance the counter.
    #[test]
    fn seed004_cps_authentication_stream_messages_are_macd_counted_and_checked() {
        let mut v = verifier(true);
        let good = seal_cps(query("AR1"), 1, Some((b"k", "c", 7))).encode_to_vec();
        assert_eq!(decode(&good, &mut v), Ok(CpsEvent::Query { query_id: 3, cs_id: Some("AR1".into()) }));
        assert_eq!(decode(&good, &mut v).unwrap_err().reason(), "replayed");
        let other_stream = seal_cps(query("AR1"), 2, Some((b"k", "c", 8))).encode_to_vec();
        assert_eq!(decode(&other_stream, &mut v).unwrap_err().reason(), "unauthenticated");
        let unsigned = seal_cps(query("AR1"), 2, None).encode_to_vec();
        assert_eq!(decode(&unsigned, &mut v).unwrap_err().reason(), "unauthenticated");
        assert_eq!(v.last_counter, 1, "refused messages do not move the counter");
        let next = seal_cps(query(""), 2, Some((b"k", "c", 7))).encode_to_vec();
        assert_eq!(decode(&next, &mut v), Ok(CpsEvent::Query { query_id: 3, cs_id: None }));
    }

    #[test]
    fn seed004_protocol_adapter_malformed_cps_messages_are_refused_with_a_reason() {
        let mut v = verifier(false);
        assert_eq!(decode(b"\xff\xff\xff", &mut v).unwrap_err().reason(), "malformed");
        let empty = pb::CpsMessage { body: vec![], counter: 1, mac: String::new() }.encode_to_vec();
        assert!(matches!(decode(&empty, &mut v), Err(DecodeError::Malformed(m)) if m.contains("kind")));
        let policy = |format: i32, config: &str| {
            pb::cps_body::Kind::Policy(pb::PolicyUpdate { update_id: 1, format, config: config.into() })
        };
        let bad = seal_cps(policy(0, "<x/>"), 2, None).encode_to_vec();
        assert_eq!(decode(&bad, &mut v).unwrap_err().reason(), "malformed");
        let blank = seal_cps(policy(1, "  "), 3, None).encode_to_vec();
        assert_eq!(decode(&blank, &mut v).unwrap_err().reason(), "malformed");
        let long = seal_cps(query(&"x".repeat(129)), 4, None).encode_to_vec();
        assert_eq!(decode(&long, &mut v).unwrap_err().reason(), "malformed");
        let ok = seal_cps(policy(2, "{}"), 5, None).encode_to_vec();
        assert!(matches!(decode(&ok, &mut v), Ok(CpsEvent::Policy(p)) if p.format == EditFormat::Json));
    }
}
