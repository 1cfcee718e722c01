//! The DOIC AVPs of a peer report as this agent carries them (seed 003; RFC 8581 section 6,
//! RFC 7683 section 7): one text form for HTTP headers, gRPC metadata and MQTT user
//! properties, and the same fields as protobuf messages on the gRPC streams.
//!
//! ```text
//! x-cats-oc-supported-features: feature-vector=17;peer-algo=1;source-id=csma-1
//! x-cats-oc-olr: sequence=1764806400000;report-type=2;reduction=30;validity=30;source-id=cps-1
//! ```
//!
//! `feature-vector` is OC-Feature-Vector (bit 0x1 OLR_DEFAULT_ALGO, the loss algorithm;
//! bit 0x10 OLR_PEER_REPORT), `peer-algo` is OC-Peer-Algo (in an announcement the
//! algorithms supported, in the answer the one selected), `source-id` is SourceID (the
//! identity of the node that put the AVP in, percent-encoded). Unknown keys are ignored (a
//! later extension may add some); a key twice, a value out of range or a header over
//! [`MAX_TEXT`] bytes is malformed.

use std::fmt;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};

/// HTTP header / gRPC metadata key / MQTT user property of OC-Supported-Features.
pub const H_OC_SUPPORTED: &str = "x-cats-oc-supported-features";
/// HTTP header / gRPC metadata key / MQTT user property of OC-OLR.
pub const H_OC_OLR: &str = "x-cats-oc-olr";

/// OC-Feature-Vector and OC-Peer-Algo bit of the loss algorithm (RFC 7683 section 7.2).
pub const OLR_DEFAULT_ALGO: u64 = 0x1;
/// OC-Feature-Vector bit of the peer report (RFC 8581 section 6.1.1).
pub const OLR_PEER_REPORT: u64 = 0x10;
/// OC-Report-Type of a peer report (RFC 8581 section 6.2.1; 0 host, 1 realm).
pub const PEER_REPORT: u32 = 2;
/// The longest OC-Validity-Duration (RFC 7683 section 7.5).
pub const MAX_VALIDITY: u32 = 86_400;
/// The validity of a report that carries none (RFC 7683 section 7.5).
pub const DEFAULT_VALIDITY: u32 = 30;
/// The longest header value taken.
pub const MAX_TEXT: usize = 1024;
/// The longest SourceID, in bytes once decoded.
pub const MAX_SOURCE_ID: usize = 255;

/// What is percent-encoded in a SourceID: controls, space, the separators and non-ASCII.
const SOURCE_ID_ESCAPE: &AsciiSet = &CONTROLS.add(b' ').add(b'%').add(b';').add(b'=').add(b',').add(b'"');

/// OC-Supported-Features with its OC-Peer-Algo and the SourceID of the node that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Supported {
    pub feature_vector: u64,
    pub peer_algo: u64,
    pub source_id: String,
}

/// OC-OLR of a peer report, with its SourceID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Olr {
    pub sequence: u64,
    pub report_type: u32,
    /// OC-Reduction-Percentage, 0..=100 (required with the loss algorithm).
    pub reduction: u8,
    /// OC-Validity-Duration, seconds; None when absent (then [`DEFAULT_VALIDITY`]).
    pub validity: Option<u32>,
    pub source_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("longer than {MAX_TEXT} bytes")]
    TooLong,
    #[error("'{0}' given twice")]
    Duplicate(String),
    #[error("'{0}' missing")]
    Missing(&'static str),
    #[error("'{0}' is not a valid value of {1}")]
    Value(String, &'static str),
    #[error("'{0}' is not key=value")]
    Syntax(String),
}

impl Supported {
    /// What this node announces: the peer report and the algorithms in `algorithms`.
    pub fn announce(algorithms: u64, source_id: &str) -> Supported {
        Supported {
            feature_vector: algorithms | OLR_PEER_REPORT,
            peer_algo: algorithms,
            source_id: source_id.to_owned(),
        }
    }

    pub fn peer_report(&self) -> bool {
        self.feature_vector & OLR_PEER_REPORT != 0
    }

    pub fn decode(s: &str) -> Result<Supported, WireError> {
        let f = Fields::parse(s, &["feature-vector", "peer-algo", "source-id"])?;
        Ok(Supported {
            feature_vector: f.u64("feature-vector")?,
            peer_algo: f.opt_u64("peer-algo")?.unwrap_or(0),
            source_id: f.source_id()?,
        })
    }
}

impl fmt::Display for Supported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "feature-vector={};peer-algo={};source-id={}",
            self.feature_vector,
            self.peer_algo,
            utf8_percent_encode(&self.source_id, SOURCE_ID_ESCAPE)
        )
    }
}

impl Olr {
    pub fn decode(s: &str) -> Result<Olr, WireError> {
        let f = Fields::parse(s, &["sequence", "report-type", "reduction", "validity", "source-id"])?;
        let reduction = f.u64("reduction")?;
        if reduction > 100 {
            return Err(WireError::Value(reduction.to_string(), "reduction"));
        }
        let validity = match f.opt_u64("validity")? {
            Some(v) if v > u64::from(MAX_VALIDITY) => return Err(WireError::Value(v.to_string(), "validity")),
            v => v.map(|v| v as u32),
        };
        let report_type = f.u64("report-type")?;
        Ok(Olr {
            sequence: f.u64("sequence")?,
            report_type: u32::try_from(report_type)
                .map_err(|_| WireError::Value(report_type.to_string(), "report-type"))?,
            reduction: reduction as u8,
            validity,
            source_id: f.source_id()?,
        })
    }

    /// The validity in force: as received, or the default.
    pub fn validity_or_default(&self) -> u32 {
        self.validity.unwrap_or(DEFAULT_VALIDITY)
    }

    /// Whether this report ends an overload (RFC 7683 section 5.5.1: validity 0; for the
    /// loss algorithm a reduction of 0 asks for nothing either).
    pub fn ends(&self) -> bool {
        self.validity == Some(0) || self.reduction == 0
    }
}

impl fmt::Display for Olr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sequence={};report-type={};reduction={}", self.sequence, self.report_type, self.reduction)?;
        if let Some(v) = self.validity {
            write!(f, ";validity={v}")?;
        }
        write!(f, ";source-id={}", utf8_percent_encode(&self.source_id, SOURCE_ID_ESCAPE))
    }
}

/// The `key=value;…` pairs of one header, each known key at most once.
struct Fields<'a> {
    values: Vec<(&'static str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(s: &'a str, known: &[&'static str]) -> Result<Fields<'a>, WireError> {
        if s.len() > MAX_TEXT {
            return Err(WireError::TooLong);
        }
        let mut values: Vec<(&'static str, &'a str)> = Vec::new();
        for part in s.split(';') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, v) = part.split_once('=').ok_or_else(|| WireError::Syntax(clip(part)))?;
            let (k, v) = (k.trim(), v.trim());
            let Some(key) = known.iter().find(|n| n.eq_ignore_ascii_case(k)) else { continue };
            if values.iter().any(|(n, _)| n == key) {
                return Err(WireError::Duplicate((*key).to_owned()));
            }
            values.push((key, v));
        }
        Ok(Fields { values })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.values.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn opt_u64(&self, key: &'static str) -> Result<Option<u64>, WireError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v.parse().ok(),
            None => None,
        };
        parsed.map(Some).ok_or_else(|| WireError::Value(clip(v), key))
    }

    fn u64(&self, key: &'static str) -> Result<u64, WireError> {
        self.opt_u64(key)?.ok_or(WireError::Missing(key))
    }

    fn source_id(&self) -> Result<String, WireError> {
        let raw = self.get("source-id").ok_or(WireError::Missing("source-id"))?;
        let s = percent_decode_str(raw).decode_utf8().map_err(|_| WireError::Value(clip(raw), "source-id"))?;
        if s.is_empty() || s.len() > MAX_SOURCE_ID || s.chars().any(char::is_control) {
            return Err(WireError::Value(clip(raw), "source-id"));
        }
        Ok(s.into_owned())
    }
}

/// At most 64 characters of hostile input, for an error message.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8581_6_supported_features_round_trip() {
        let s = Supported::announce(OLR_DEFAULT_ALGO, "csma; 1=é");
        assert_eq!(s.feature_vector, 0x11);
        let text = s.to_string();
        assert_eq!(text, "feature-vector=17;peer-algo=1;source-id=csma%3B%201%3D%C3%A9");
        assert_eq!(Supported::decode(&text).unwrap(), s);
        assert!(Supported::decode("feature-vector=0x10; source-id=x; future=1").unwrap().peer_report());
    }

    #[test]
    fn rfc8581_6_2_olr_round_trip_and_bounds() {
        let o = Olr { sequence: 7, report_type: PEER_REPORT, reduction: 30, validity: None, source_id: "cps-1".into() };
        assert_eq!(Olr::decode(&o.to_string()).unwrap(), o);
        assert_eq!(o.validity_or_default(), 30);
        assert!(!o.ends());
        let bad = [
            "sequence=1;report-type=2;reduction=101;source-id=a",
            "sequence=1;report-type=2;reduction=1;validity=86401;source-id=a",
            "sequence=1;sequence=2;report-type=2;reduction=1;source-id=a",
            "sequence=-1;report-type=2;reduction=1;source-id=a",
            "sequence=1;report-type=2;reduction=1",
            "sequence=1;report-type=2;reduction=1;source-id=",
            "sequence=1;report-type=2;reduction=1;source-id=%0a",
            "sequence=1;report-type=2;reduction=1;source-id=%ff",
            "sequence=1;report-type=4294967296;reduction=1;source-id=a",
            "sequence",
        ];
        for b in bad {
            assert!(Olr::decode(b).is_err(), "{b}");
        }
        assert_eq!(Olr::decode(&"x".repeat(MAX_TEXT + 1)), Err(WireError::TooLong));
        let end = Olr::decode("sequence=2;report-type=2;reduction=30;validity=0;source-id=a").unwrap();
        assert!(end.ends());
    }
}
