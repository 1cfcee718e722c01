//! gRPC SCI reports on the wire (`proto/cats/sma/v1/sci.proto`): the protobuf `Report` and
//! `ReportBatch` as [`RawReport`]s, so the engine applies the checks every transport gets
//! (identifiers by `check_ids`, ranges, health, sequence and time). Pure: bytes in, reports
//! out, fuzzed by `fuzz/fuzz_targets/sci_grpc.rs`. Like the JSON decoder it accepts any
//! integer, so a value out of its range is `out-of-range`, not `malformed`.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use prost::Message as _;

use super::pb;
use crate::engine::report::{DecodeError, RawReport};

/// The field of `Report` that carries a stream message's own proof.
pub const AUTHORIZATION_FIELD: u32 = 15;

/// Longest `correlation_id` echoed back (bytes).
pub const MAX_CORRELATION_ID: usize = 128;

/// One report of a stream, with what its verdict echoes and what proves it.
#[derive(Debug, PartialEq)]
pub struct StreamReport {
    pub raw: RawReport,
    pub correlation_id: String,
    /// `Report.authorization` (empty: none).
    pub authorization: String,
    /// The bytes the proof covers: the message as received without field 15.
    pub signed: Bytes,
}

/// A report of a batch, with its correlation id.
#[derive(Debug, PartialEq)]
pub struct BatchReport {
    pub raw: RawReport,
    pub correlation_id: String,
}

fn malformed(s: impl Into<String>) -> DecodeError {
    DecodeError(s.into())
}

/// A protobuf `Report` as the engine's [`RawReport`].
fn raw_report(r: pb::Report) -> Result<(RawReport, String, String), DecodeError> {
    let Some(ts) = r.timestamp else { return Err(malformed("timestamp is required")) };
    let nanos = u32::try_from(ts.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| malformed(format!("timestamp nanos {} is outside 0..999999999", ts.nanos)))?;
    let timestamp: DateTime<Utc> = DateTime::from_timestamp(ts.seconds, nanos)
        .ok_or_else(|| malformed(format!("timestamp seconds {} is out of range", ts.seconds)))?;
    if r.correlation_id.len() > MAX_CORRELATION_ID {
        return Err(malformed(format!(
            "correlation_id is {} bytes long (at most {MAX_CORRELATION_ID})",
            r.correlation_id.len()
        )));
    }
    // The names of the JSON report ("HEALTHY", ...); any other value reaches the validator,
    // which refuses it as malformed with the same words as for JSON.
    let health = match pb::Health::try_from(r.health) {
        Ok(h) => h.as_str_name().to_owned(),
        Err(_) => r.health.to_string(),
    };
    let raw = RawReport {
        csci_id: r.csci_id,
        cs_id: r.cs_id,
        sequence: r.sequence,
        timestamp,
        gas: r.gas,
        computing_time: r.computing_time,
        health,
        cost: r.cost,
        reputation: r.reputation,
        security_label: r.security_label,
    };
    Ok((raw, r.correlation_id, r.authorization))
}

/// One `Report` message of a `Stream` call.
pub fn decode_stream_report(bytes: Bytes) -> Result<StreamReport, DecodeError> {
    let r = pb::Report::decode(bytes.clone()).map_err(|e| malformed(e.to_string()))?;
    let signed = if r.authorization.is_empty() { bytes } else { without_field(&bytes, AUTHORIZATION_FIELD)? };
    let (raw, correlation_id, authorization) = raw_report(r)?;
    Ok(StreamReport { raw, correlation_id, authorization, signed })
}

/// A `ReportBatch` message. Its reports carry no proof of their own (the call's metadata
/// proves the whole message): one that does is malformed.
pub fn decode_batch(bytes: &[u8]) -> Result<Vec<BatchReport>, DecodeError> {
    let b = pb::ReportBatch::decode(bytes).map_err(|e| malformed(e.to_string()))?;
    b.reports
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let (raw, correlation_id, authorization) = raw_report(r).map_err(|e| malformed(format!("report {i}: {}", e.0)))?;
            if !authorization.is_empty() {
                return Err(malformed(format!(
                    "report {i}: Report.authorization is for Stream; a Batch is proven by the call's authorization metadata"
                )));
            }
            Ok(BatchReport { raw, correlation_id })
        })
        .collect()
}

/// The message with every occurrence of field `field` removed, walking the protobuf wire
/// format (varint, 64-bit, length-delimited, 32-bit; groups are refused, proto3 has none).
pub fn without_field(msg: &[u8], field: u32) -> Result<Bytes, DecodeError> {
    let mut out = Vec::with_capacity(msg.len());
    let mut at = 0;
    while at < msg.len() {
        let start = at;
        let key = varint(msg, &mut at)?;
        let (number, wire_type) = (key >> 3, key & 7);
        match wire_type {
            0 => {
                varint(msg, &mut at)?;
            }
            1 => at = skip(msg, at, 8)?,
            2 => {
                let len = varint(msg, &mut at)?;
                let len = usize::try_from(len).map_err(|_| malformed("length-delimited field too long"))?;
                at = skip(msg, at, len)?;
            }
            5 => at = skip(msg, at, 4)?,
            t => return Err(malformed(format!("wire type {t} is not used by proto3 messages"))),
        }
        if number != u64::from(field) {
            out.extend_from_slice(&msg[start..at]);
        }
    }
    Ok(Bytes::from(out))
}

fn skip(msg: &[u8], at: usize, n: usize) -> Result<usize, DecodeError> {
    at.checked_add(n).filter(|end| *end <= msg.len()).ok_or_else(|| malformed("a field runs past the message's end"))
}

fn varint(msg: &[u8], at: &mut usize) -> Result<u64, DecodeError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = msg.get(*at) else { return Err(malformed("a varint runs past the message's end")) };
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(malformed("a varint is longer than 10 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(csci: &str) -> pb::Report {
        pb::Report {
            csci_id: csci.into(),
            cs_id: "AR1".into(),
            sequence: 9,
            timestamp: Some(prost_types::Timestamp { seconds: 1_795_860_000, nanos: 5 }),
            gas: 400,
            computing_time: 5,
            health: pb::Health::Healthy as i32,
            cost: None,
            reputation: Some(8),
            security_label: None,
            correlation_id: "c-1".into(),
            authorization: String::new(),
        }
    }

    #[test]
    fn seed004_sci_collection_grpc_report_is_the_json_report() {
        // seed 004, Metric Cache Structure, first row, as protobuf.
        let s = decode_stream_report(report("188.3.67.3:67").encode_to_vec().into()).unwrap();
        assert_eq!(s.raw.csci_id, "188.3.67.3:67");
        assert_eq!((s.raw.gas, s.raw.computing_time, s.raw.health.as_str()), (400, 5, "HEALTHY"));
        assert_eq!(s.raw.timestamp.timestamp_subsec_nanos(), 5);
        assert_eq!((s.raw.reputation, s.raw.cost), (Some(8), None));
        assert_eq!(s.correlation_id, "c-1");
        let mut unset = report("a");
        unset.health = 0;
        assert_eq!(decode_stream_report(unset.encode_to_vec().into()).unwrap().raw.health, "HEALTH_UNSPECIFIED");
        let mut negative = report("a");
        negative.gas = -5;
        assert_eq!(
            decode_stream_report(negative.encode_to_vec().into()).unwrap().raw.gas,
            -5,
            "out-of-range, not malformed"
        );
    }

    #[test]
    fn seed004_sci_collection_grpc_proof_covers_the_report_without_its_authorization() {
        let plain = report("a").encode_to_vec();
        let mut signed = report("a");
        signed.authorization = "CATS-HMAC-SHA256 ts=1, sig=00".into();
        let s = decode_stream_report(signed.encode_to_vec().into()).unwrap();
        assert_eq!(s.authorization, "CATS-HMAC-SHA256 ts=1, sig=00");
        assert_eq!(&s.signed[..], &plain[..]);
        // Field 15 first (any order is valid protobuf): still the same bytes once removed.
        let mut first = signed.encode_to_vec()[plain.len()..].to_vec();
        first.extend_from_slice(&plain);
        assert_eq!(&decode_stream_report(first.into()).unwrap().signed[..], &plain[..]);
    }

    #[test]
    fn seed004_sci_collection_grpc_malformed_messages_are_errors_not_panics() {
        let mut no_ts = report("a");
        no_ts.timestamp = None;
        let mut bad_nanos = report("a");
        bad_nanos.timestamp = Some(prost_types::Timestamp { seconds: 0, nanos: -1 });
        let mut far = report("a");
        far.timestamp = Some(prost_types::Timestamp { seconds: i64::MAX, nanos: 0 });
        let mut long = report("a");
        long.correlation_id = "x".repeat(MAX_CORRELATION_ID + 1);
        for m in [no_ts, bad_nanos, far, long] {
            assert!(decode_stream_report(m.encode_to_vec().into()).is_err());
        }
        for bad in [
            &[0x0a, 0x05, b'a'][..],
            &[0xff; 11],
            &[0x0b],
            &[0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
        ] {
            assert!(decode_stream_report(Bytes::copy_from_slice(bad)).is_err());
            assert!(decode_batch(bad).is_err());
            let _ = without_field(bad, 15);
        }
        let mut proved = report("a");
        proved.authorization = "Bearer x".into();
        let batch = pb::ReportBatch { reports: vec![report("a"), proved] };
        assert!(decode_batch(&batch.encode_to_vec()).unwrap_err().0.contains("report 1"));
    }
}
