//! SCI reports on the wire (documented in `docs/sci-protocol.md`): one report or a batch,
//! as JSON or CBOR, with the same field names. Decoding is separate from validation: the
//! decoder accepts any integer so that out-of-range values are reported as out-of-range
//! (seed 004, Validator & Sanitizer), not as malformed.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A report as received, before the range checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RawReport {
    pub csci_id: String,
    pub cs_id: String,
    #[serde(alias = "seq")]
    pub sequence: u64,
    pub timestamp: DateTime<Utc>,
    pub gas: i64,
    pub computing_time: i64,
    pub health: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reputation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_label: Option<i64>,
}

impl RawReport {
    /// Checks the identifiers against their YANG types (cats-sma-types `csci-id`, `cs-id`)
    /// before anything stores, logs or notifies them; the reason never repeats the value.
    pub fn check_ids(&self) -> Result<(), String> {
        check_id(IdKind::CsciId, &self.csci_id)?;
        check_id(IdKind::CsId, &self.cs_id)
    }
}

/// The identifier types of cats-sma-types that peers send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    CsciId,
    CsId,
    SiteId,
}

impl IdKind {
    pub fn name(self) -> &'static str {
        match self {
            IdKind::CsciId => "csci-id",
            IdKind::CsId => "cs-id",
            IdKind::SiteId => "site-id",
        }
    }

    /// The YANG `length` maximum, in characters.
    pub fn max_len(self) -> usize {
        match self {
            IdKind::CsciId => 255,
            IdKind::CsId | IdKind::SiteId => 128,
        }
    }
}

/// An identifier's YANG type, as code: `length "1..max"` (characters) and `pattern
/// '[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]+'` — no control, format (bidi, zero-width) or line /
/// paragraph separator characters, which could change the shape of a log line, an SSE
/// event or an XML document.
pub fn check_id(kind: IdKind, s: &str) -> Result<(), String> {
    let name = kind.name();
    if s.is_empty() {
        return Err(format!("{name} is empty"));
    }
    // Printable ASCII (U+0020..U+007E) has no hostile character and one byte per
    // character: the common case, checked without decoding.
    if s.len() <= kind.max_len() && s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Ok(());
    }
    let mut n = 0;
    for c in s.chars() {
        n += 1;
        if crate::text::is_hostile(c) {
            return Err(format!(
                "{name} contains U+{:04X} at character {n} (control, format and line separator characters are not allowed)",
                c as u32
            ));
        }
    }
    if n > kind.max_len() {
        return Err(format!("{name} is {n} characters long (at most {})", kind.max_len()));
    }
    Ok(())
}

/// The form in which an identifier that failed [`check_id`] may still be kept, logged or
/// notified (as the claimed CSCI-ID of an auth-failure): hostile characters escaped, cut
/// to the type's length.
pub fn display_id(kind: IdKind, s: &str) -> String {
    // Printable ASCII within the length is shown as it is (what `printable` would build
    // character by character): one copy, as every echoed id of an HTTP batch takes it.
    if s.len() <= kind.max_len() && s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return s.to_owned();
    }
    crate::text::printable(s, kind.max_len())
}

/// A batch: `{"reports": [...]}`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    reports: Vec<RawReport>,
}

/// Wire encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Json,
    Cbor,
}

impl Encoding {
    /// From an HTTP Content-Type (parameters ignored); None when unsupported.
    pub fn from_content_type(ct: &str) -> Option<Encoding> {
        match ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
            "application/json" | "" => Some(Encoding::Json),
            "application/cbor" => Some(Encoding::Cbor),
            _ => None,
        }
    }
}

/// Why a message could not be decoded at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed report: {0}")]
pub struct DecodeError(pub String);

/// Decodes one report, a JSON array of reports, or `{"reports": [...]}`.
pub fn decode(body: &[u8], enc: Encoding) -> Result<Vec<RawReport>, DecodeError> {
    match enc {
        Encoding::Json => {
            if let Some(reports) = decode_json_typed(body) {
                return Ok(reports);
            }
            let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| DecodeError(e.to_string()))?;
            from_value(v, |v| serde_json::from_value(v).map_err(|e| DecodeError(e.to_string())))
        }
        Encoding::Cbor => {
            let v: ciborium::Value = ciborium::from_reader(body).map_err(|e| DecodeError(e.to_string()))?;
            let json = cbor_to_json(v)?;
            from_value(json, |v| serde_json::from_value(v).map_err(|e| DecodeError(e.to_string())))
        }
    }
}

/// The fast path of JSON decoding: straight into the typed reports, without building a
/// `serde_json::Value` tree first (which allocated a map and a string per field). It only
/// says yes: whatever it does not decode (a duplicate key, an unknown field, a wrong
/// type) goes the general way, which gives the same reports or the same error as before.
fn decode_json_typed(body: &[u8]) -> Option<Vec<RawReport>> {
    match body.iter().find(|b| !b.is_ascii_whitespace())? {
        b'[' => serde_json::from_slice::<Vec<RawReport>>(body).ok(),
        b'{' => serde_json::from_slice::<Batch>(body)
            .map(|b| b.reports)
            .or_else(|_| serde_json::from_slice::<RawReport>(body).map(|r| vec![r]))
            .ok(),
        _ => None,
    }
}

fn from_value(
    v: serde_json::Value,
    one: impl Fn(serde_json::Value) -> Result<RawReport, DecodeError>,
) -> Result<Vec<RawReport>, DecodeError> {
    match v {
        serde_json::Value::Array(items) => items.into_iter().map(one).collect(),
        serde_json::Value::Object(ref m) if m.contains_key("reports") => {
            let b: Batch = serde_json::from_value(v).map_err(|e| DecodeError(e.to_string()))?;
            Ok(b.reports)
        }
        other => Ok(vec![one(other)?]),
    }
}

/// CBOR maps with text keys become JSON objects; a tag-0/1 date or a text date works for
/// the timestamp.
fn cbor_to_json(v: ciborium::Value) -> Result<serde_json::Value, DecodeError> {
    use ciborium::Value as C;
    use serde_json::Value as J;
    Ok(match v {
        C::Integer(i) => {
            let i: i128 = i.into();
            match i64::try_from(i) {
                Ok(n) => J::from(n),
                Err(_) => match u64::try_from(i) {
                    Ok(n) => J::from(n),
                    Err(_) => return Err(DecodeError("integer out of the 64-bit range".into())),
                },
            }
        }
        C::Text(s) => J::String(s),
        C::Bool(b) => J::Bool(b),
        C::Null => J::Null,
        C::Float(f) => serde_json::Number::from_f64(f).map(J::Number).unwrap_or(J::Null),
        C::Array(a) => J::Array(a.into_iter().map(cbor_to_json).collect::<Result<_, _>>()?),
        C::Map(m) => {
            let mut o = serde_json::Map::new();
            for (k, v) in m {
                let C::Text(k) = k else { return Err(DecodeError("CBOR map keys must be text".into())) };
                o.insert(k, cbor_to_json(v)?);
            }
            J::Object(o)
        }
        C::Tag(0, inner) => cbor_to_json(*inner)?,
        C::Tag(1, inner) => match *inner {
            C::Integer(i) => {
                let secs: i128 = i.into();
                let t = DateTime::<Utc>::from_timestamp(secs as i64, 0)
                    .ok_or_else(|| DecodeError("epoch timestamp out of range".into()))?;
                J::String(t.to_rfc3339())
            }
            other => cbor_to_json(other)?,
        },
        C::Bytes(_) | C::Tag(..) => return Err(DecodeError("unsupported CBOR item".into())),
        _ => return Err(DecodeError("unsupported CBOR item".into())),
    })
}

/// Encodes reports (a single one stays an object; several become a batch).
pub fn encode(reports: &[RawReport], enc: Encoding) -> Vec<u8> {
    let value = match reports {
        [one] => serde_json::to_value(one),
        many => serde_json::to_value(Batch { reports: many.to_vec() }),
    }
    .unwrap_or(serde_json::Value::Null);
    match enc {
        Encoding::Json => serde_json::to_vec(&value).unwrap_or_default(),
        Encoding::Cbor => {
            let mut out = Vec::new();
            let _ = ciborium::into_writer(&value, &mut out);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RawReport {
        RawReport {
            csci_id: "188.3.67.3:67".into(),
            cs_id: "AR1".into(),
            sequence: 1,
            timestamp: "2026-11-30T10:00:00Z".parse().unwrap(),
            gas: 400,
            computing_time: 5,
            health: "HEALTHY".into(),
            cost: None,
            reputation: Some(8),
            security_label: None,
        }
    }

    #[test]
    fn json_and_cbor_round_trip_single_and_batch() {
        for enc in [Encoding::Json, Encoding::Cbor] {
            let one = vec![sample()];
            assert_eq!(decode(&encode(&one, enc), enc).unwrap(), one);
            let mut b = sample();
            b.csci_id = "188.3.67.4:69".into();
            let two = vec![sample(), b];
            assert_eq!(decode(&encode(&two, enc), enc).unwrap(), two);
        }
    }

    #[test]
    fn seed_table_row_as_json() {
        // seed 004, Metric Cache Structure, first row.
        let body = br#"{"csci-id":"188.3.67.3:67","cs-id":"AR1","seq":9,"timestamp":"2026-11-30T10:00:00Z","gas":400,"computing-time":5,"health":"HEALTHY"}"#;
        let r = decode(body, Encoding::Json).unwrap();
        assert_eq!(r[0].gas, 400);
        assert_eq!(r[0].sequence, 9);
        // A JSON array is a batch too.
        let arr = format!("[{}]", std::str::from_utf8(body).unwrap());
        assert_eq!(decode(arr.as_bytes(), Encoding::Json).unwrap().len(), 1);
    }

    /// The general JSON path (a `Value` tree first), as decoding was before issue 14.
    fn decode_general(body: &[u8]) -> Result<Vec<RawReport>, DecodeError> {
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| DecodeError(e.to_string()))?;
        from_value(v, |v| serde_json::from_value(v).map_err(|e| DecodeError(e.to_string())))
    }

    #[test]
    fn issue14_engine_typed_json_fast_path_decodes_as_the_general_path() {
        let one = r#"{"csci-id":"a","cs-id":"b","seq":1,"timestamp":"2026-11-30T10:00:00Z","gas":1,"computing-time":1,"health":"HEALTHY"}"#;
        let bodies = [
            one.to_owned(),
            format!(" \n[{one},{one}]"),
            format!(r#"{{"reports":[{one}]}}"#),
            // A duplicate key: the typed path refuses it, the general one takes the last.
            one.replace(r#""gas":1"#, r#""gas":1,"gas":2"#),
            one.replace(r#""gas":1"#, r#""gas":1.5"#),
            format!(r#"{{"reports":[{one}],"extra":1}}"#),
            "[]".to_owned(),
            "{}".to_owned(),
        ];
        for b in &bodies {
            let (fast, general) = (decode(b.as_bytes(), Encoding::Json), decode_general(b.as_bytes()));
            assert_eq!(fast, general, "{b}");
        }
        assert_eq!(decode(bodies[3].as_bytes(), Encoding::Json).unwrap()[0].gas, 2);
    }

    #[test]
    fn malformed_inputs_are_decode_errors_not_panics() {
        for bad in [&b""[..], b"{", b"[1,2]", b"{\"csci-id\":1}", b"{\"reports\":5}", b"null", &[0xff, 0x00, 0x13]] {
            assert!(decode(bad, Encoding::Json).is_err());
            assert!(decode(bad, Encoding::Cbor).is_err());
        }
        let unknown = br#"{"csci-id":"a","cs-id":"b","seq":1,"timestamp":"2026-11-30T10:00:00Z","gas":1,"computing-time":1,"health":"HEALTHY","extra":1}"#;
        assert!(decode(unknown, Encoding::Json).is_err(), "unknown fields are refused");
    }

    #[test]
    fn identifiers_follow_their_yang_types() {
        assert!(check_id(IdKind::CsciId, "188.3.67.3:67").is_ok());
        assert!(check_id(IdKind::CsId, "LLM1").is_ok());
        for bad in ["", "a\rb", "a\nb", "a\0b", "a\u{1b}[31m", "x\u{202e}y", "l\u{2028}s", "\u{85}"] {
            let e = check_id(IdKind::CsciId, bad).unwrap_err();
            assert!(!e.contains(bad) || bad.is_empty(), "{e}");
        }
        assert!(check_id(IdKind::CsciId, &"é".repeat(255)).is_ok());
        assert!(check_id(IdKind::CsciId, &"é".repeat(256)).unwrap_err().contains("256 characters"));
        assert!(check_id(IdKind::CsId, &"a".repeat(129)).is_err());
        let shown = display_id(IdKind::CsciId, &format!("a\r\n{}", "x".repeat(60_000)));
        assert!(check_id(IdKind::CsciId, &shown).is_ok(), "{shown}");
    }

    #[test]
    fn out_of_range_integers_still_decode() {
        let body = br#"{"csci-id":"a","cs-id":"b","seq":1,"timestamp":"2026-11-30T10:00:00Z","gas":-5,"computing-time":99999999,"health":"HEALTHY"}"#;
        let r = decode(body, Encoding::Json).unwrap();
        assert_eq!((r[0].gas, r[0].computing_time), (-5, 99_999_999));
    }
}
