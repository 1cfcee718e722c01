//! Report integrity in PSK mode (seed 004, Metric Integrity): an HMAC-SHA256 over the
//! request — method, path, C-SMA id, timestamp, nonce and the body as sent — with a
//! monotonically increasing nonce. The verifying side refuses bad signatures, timestamps
//! outside a window (±30 s by default) and nonces it has already seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// A pre-shared key.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk {
    pub key_id: String,
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Psk").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

/// What is signed, besides the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub csma_id: &'a str,
    /// Unix time in milliseconds.
    pub timestamp_ms: i64,
    pub nonce: u64,
}

fn mac(secret: &[u8], s: &Signed<'_>, body: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length.
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(format!("{}\n{}\n{}\n{}\n{}\n", s.method, s.path, s.csma_id, s.timestamp_ms, s.nonce).as_bytes());
    m.update(body);
    m
}

/// The signature header value (lowercase hex).
pub fn sign(secret: &[u8], s: &Signed<'_>, body: &[u8]) -> String {
    hex(&mac(secret, s, body).finalize().into_bytes())
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Nonces for requests: strictly increasing over the process, started at the wall-clock
/// time in microseconds. With a file ([`NonceSource::persistent`]) they also increase across
/// restarts when the clock stepped back: the file holds a ceiling reserved ahead (a block
/// of [`NONCE_BLOCK`]), and a restart starts above it.
pub struct NonceSource {
    next: AtomicU64,
    ceiling: AtomicU64,
    file: Option<(std::path::PathBuf, std::sync::Mutex<()>)>,
}

/// Nonces reserved per write of the ceiling file.
pub const NONCE_BLOCK: u64 = 1 << 20;

impl NonceSource {
    /// Nonces that rise within the process and with the clock across restarts.
    pub fn new() -> NonceSource {
        let start = chrono::Utc::now().timestamp_micros().max(1) as u64;
        NonceSource { next: AtomicU64::new(start), ceiling: AtomicU64::new(u64::MAX), file: None }
    }

    /// Nonces that rise across restarts whatever the clock does, through `path`.
    pub fn persistent(path: &std::path::Path) -> std::io::Result<NonceSource> {
        let stored = match std::fs::read_to_string(path) {
            Ok(s) => s.trim().parse::<u64>().map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let now = chrono::Utc::now().timestamp_micros().max(1) as u64;
        if stored > now {
            tracing::warn!(
                stored,
                now,
                "C-PS nonces: the clock is behind the last reserved nonce; continuing above it"
            );
        }
        let start = now.max(stored);
        let ceiling = start.saturating_add(NONCE_BLOCK);
        crate::datastore::persist::write_atomic(path, ceiling.to_string().as_bytes())?;
        Ok(NonceSource {
            next: AtomicU64::new(start),
            ceiling: AtomicU64::new(ceiling),
            file: Some((path.to_owned(), std::sync::Mutex::new(()))),
        })
    }

    pub fn next(&self) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.ceiling.load(Ordering::Acquire) {
            self.reserve(n);
        }
        n
    }

    /// Moves the ceiling past `n` (rare: once per NONCE_BLOCK nonces).
    fn reserve(&self, n: u64) {
        let Some((path, lock)) = &self.file else { return };
        let _g = lock.lock().unwrap_or_else(|e| e.into_inner());
        if n < self.ceiling.load(Ordering::Acquire) {
            return;
        }
        let ceiling = n.saturating_add(NONCE_BLOCK);
        if let Err(e) = crate::datastore::persist::write_atomic(path, ceiling.to_string().as_bytes()) {
            tracing::error!("C-PS nonces: cannot reserve in {}: {e}", path.display());
        }
        self.ceiling.store(ceiling, Ordering::Release);
    }
}

/// The reply header with the C-PS's HMAC over its reply (PSK mode).
pub const H_REPLY_SIGNATURE: &str = "x-cats-reply-signature";

fn reply_mac(
    secret: &[u8],
    status: u16,
    csma_id: &str,
    request_nonce: u64,
    oc: &ReplyOc<'_>,
    body: &[u8],
) -> HmacSha256 {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(format!("reply\n{status}\n{csma_id}\n{request_nonce}\n").as_bytes());
    // The overload AVPs (seed 003) ride in headers: covered when present, so a report can
    // be neither forged, changed nor removed; a reply without them signs as before.
    if oc.supported.is_some() || oc.olr.is_some() {
        m.update(format!("oc\n{}\n{}\n", oc.supported.unwrap_or(""), oc.olr.unwrap_or("")).as_bytes());
    }
    m.update(body);
    m
}

/// The overload headers of a reply (`x-cats-oc-supported-features`, `x-cats-oc-olr`), as
/// the reply signature covers them.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplyOc<'a> {
    pub supported: Option<&'a str>,
    pub olr: Option<&'a str>,
}

/// The C-PS's reply signature: an HMAC under the request's key over the status, the C-SMA
/// id, the nonce of the request it answers, the overload headers when present and the
/// reply body. The nonce binds the reply to its request, so an old reply replayed (or one
/// to another request) does not verify.
pub fn sign_reply(secret: &[u8], status: u16, csma_id: &str, request_nonce: u64, body: &[u8]) -> String {
    sign_reply_oc(secret, status, csma_id, request_nonce, &ReplyOc::default(), body)
}

/// [`sign_reply`] of a reply that carries overload headers.
pub fn sign_reply_oc(
    secret: &[u8],
    status: u16,
    csma_id: &str,
    request_nonce: u64,
    oc: &ReplyOc<'_>,
    body: &[u8],
) -> String {
    hex(&reply_mac(secret, status, csma_id, request_nonce, oc, body).finalize().into_bytes())
}

fn stream_mac(secret: &[u8], csma_id: &str, hello_nonce: u64, counter: u64, body: &[u8]) -> HmacSha256 {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(format!("{csma_id}\n{hello_nonce}\n{counter}\n").as_bytes());
    m.update(body);
    m
}

/// The MAC of one C-PS message on the gRPC stream (PSK mode): the C-SMA id, the nonce of
/// the stream's Hello (binds the message to this stream), the message counter (strictly
/// increasing within it: a message replayed is refused) and the body as sent.
pub fn sign_stream(secret: &[u8], csma_id: &str, hello_nonce: u64, counter: u64, body: &[u8]) -> String {
    hex(&stream_mac(secret, csma_id, hello_nonce, counter, body).finalize().into_bytes())
}

/// Checks a C-PS stream message's MAC (constant-time).
pub fn verify_stream(
    secret: &[u8],
    csma_id: &str,
    hello_nonce: u64,
    counter: u64,
    presented: &str,
    body: &[u8],
) -> Result<(), AuthError> {
    let sig = unhex(presented).ok_or(AuthError::MalformedHeader("mac"))?;
    stream_mac(secret, csma_id, hello_nonce, counter, body).verify_slice(&sig).map_err(|_| AuthError::BadSignature)
}

/// Checks a reply's signature (constant-time).
pub fn verify_reply(
    secret: &[u8],
    status: u16,
    csma_id: &str,
    request_nonce: u64,
    presented: Option<&str>,
    oc: &ReplyOc<'_>,
    body: &[u8],
) -> Result<(), AuthError> {
    let sig = unhex(presented.ok_or(AuthError::MissingHeader(H_REPLY_SIGNATURE))?)
        .ok_or(AuthError::MalformedHeader(H_REPLY_SIGNATURE))?;
    reply_mac(secret, status, csma_id, request_nonce, oc, body).verify_slice(&sig).map_err(|_| AuthError::BadSignature)
}

impl Default for NonceSource {
    fn default() -> Self {
        NonceSource::new()
    }
}

/// Why a signed request was refused; each is a distinct counter on the C-PS.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("malformed header {0}")]
    MalformedHeader(&'static str),
    #[error("unknown key id '{0}'")]
    UnknownKey(String),
    #[error("signature does not match")]
    BadSignature,
    #[error("timestamp {skew_ms} ms away from the C-PS clock (window ±{window_ms} ms)")]
    StaleTimestamp { skew_ms: i64, window_ms: i64 },
    #[error("nonce {nonce} not greater than the last accepted {last}: replayed")]
    ReplayedNonce { nonce: u64, last: u64 },
}

impl AuthError {
    /// The `error` member of the reply and the counter name.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::MissingHeader(_) | AuthError::MalformedHeader(_) => "malformed-auth",
            AuthError::UnknownKey(_) => "unknown-key",
            AuthError::BadSignature => "bad-signature",
            AuthError::StaleTimestamp { .. } => "stale-timestamp",
            AuthError::ReplayedNonce { .. } => "replayed-nonce",
        }
    }
}

/// The freshness rules every proof of a request shares (the PSK MAC, the C-SMA's JWS): a
/// timestamp within the window of the verifier's clock, and nonces that only rise per
/// (key, C-SMA), recorded apart from the check so a forged request burns nothing.
pub struct Freshness {
    window_ms: i64,
    last_nonce: HashMap<(String, String), u64>,
}

impl Freshness {
    pub fn new(window_ms: i64) -> Freshness {
        Freshness { window_ms, last_nonce: HashMap::new() }
    }

    /// Checks a verified proof's timestamp and nonce at `now_ms`, recording nothing.
    pub fn check(&self, key_id: &str, csma_id: &str, ts: i64, nonce: u64, now_ms: i64) -> Result<Accepted, AuthError> {
        // Saturating: a signed timestamp near i64::MIN/MAX must not overflow the difference.
        let skew = ts.saturating_sub(now_ms);
        if skew.saturating_abs() > self.window_ms {
            return Err(AuthError::StaleTimestamp { skew_ms: skew, window_ms: self.window_ms });
        }
        let last = self.last_nonce.get(&(key_id.to_owned(), csma_id.to_owned())).copied().unwrap_or(0);
        if nonce <= last {
            return Err(AuthError::ReplayedNonce { nonce, last });
        }
        Ok(Accepted { key_id: key_id.to_owned(), csma_id: csma_id.to_owned(), nonce })
    }

    /// Records the nonce of a request whose proofs all passed.
    pub fn accept(&mut self, a: Accepted) {
        let last = self.last_nonce.entry((a.key_id, a.csma_id)).or_insert(0);
        *last = (*last).max(a.nonce);
    }
}

/// The verifying side of the PSK MAC: keys and the freshness rules.
pub struct Verifier {
    keys: HashMap<String, Vec<u8>>,
    fresh: Freshness,
}

/// The authentication headers of one request, as received.
pub struct Presented<'a> {
    pub key_id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub nonce: Option<&'a str>,
    pub signature: Option<&'a str>,
}

impl Verifier {
    pub fn new(keys: impl IntoIterator<Item = Psk>, window_ms: i64) -> Verifier {
        Verifier { keys: keys.into_iter().map(|k| (k.key_id, k.secret)).collect(), fresh: Freshness::new(window_ms) }
    }

    /// Checks one request at `now_ms`; records its nonce only when every check passed, so a
    /// forged request cannot burn nonces.
    pub fn verify(
        &mut self,
        method: &str,
        path: &str,
        csma_id: &str,
        p: &Presented<'_>,
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), AuthError> {
        let accepted = self.check(method, path, csma_id, p, body, now_ms)?;
        self.accept(accepted);
        Ok(())
    }

    /// Records the nonce of a request [`Verifier::check`] passed. Kept apart so that a
    /// request carrying several proofs burns its nonce only once all of them passed.
    pub fn accept(&mut self, a: Accepted) {
        self.fresh.accept(a);
    }

    /// Every check of [`Verifier::verify`], recording nothing.
    pub fn check(
        &self,
        method: &str,
        path: &str,
        csma_id: &str,
        p: &Presented<'_>,
        body: &[u8],
        now_ms: i64,
    ) -> Result<Accepted, AuthError> {
        let key_id = p.key_id.ok_or(AuthError::MissingHeader("x-cats-key-id"))?;
        let ts: i64 = p
            .timestamp
            .ok_or(AuthError::MissingHeader("x-cats-timestamp"))?
            .parse()
            .map_err(|_| AuthError::MalformedHeader("x-cats-timestamp"))?;
        let nonce: u64 = p
            .nonce
            .ok_or(AuthError::MissingHeader("x-cats-nonce"))?
            .parse()
            .map_err(|_| AuthError::MalformedHeader("x-cats-nonce"))?;
        let sig = unhex(p.signature.ok_or(AuthError::MissingHeader("x-cats-signature"))?)
            .ok_or(AuthError::MalformedHeader("x-cats-signature"))?;
        let secret = self.keys.get(key_id).ok_or_else(|| AuthError::UnknownKey(key_id.to_owned()))?;
        let signed = Signed { method, path, csma_id, timestamp_ms: ts, nonce };
        // Constant-time comparison.
        mac(secret, &signed, body).verify_slice(&sig).map_err(|_| AuthError::BadSignature)?;
        self.fresh.check(key_id, csma_id, ts, nonce, now_ms)
    }
}

/// A request that passed its checks, whose nonce is recorded on [`Verifier::accept`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub key_id: String,
    pub csma_id: String,
    pub nonce: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verifier() -> Verifier {
        Verifier::new([Psk { key_id: "k1".into(), secret: b"0123456789abcdef".to_vec() }], 30_000)
    }

    fn signed_request(ts: i64, nonce: u64, body: &[u8]) -> (String, String, String) {
        let s = Signed { method: "POST", path: "/cats/metrics", csma_id: "c1", timestamp_ms: ts, nonce };
        (ts.to_string(), nonce.to_string(), sign(b"0123456789abcdef", &s, body))
    }

    fn check(v: &mut Verifier, t: &(String, String, String), body: &[u8], now: i64) -> Result<(), AuthError> {
        let p = Presented { key_id: Some("k1"), timestamp: Some(&t.0), nonce: Some(&t.1), signature: Some(&t.2) };
        v.verify("POST", "/cats/metrics", "c1", &p, body, now)
    }

    #[test]
    fn good_tampered_stale_replayed() {
        // seed 004, Metric Integrity.
        let mut v = verifier();
        let now = 1_700_000_000_000;
        let t = signed_request(now, 5, b"{}");
        assert_eq!(check(&mut v, &t, b"{}", now + 29_000), Ok(()));
        assert_eq!(check(&mut v, &t, b"{}", now), Err(AuthError::ReplayedNonce { nonce: 5, last: 5 }));
        let t2 = signed_request(now, 6, b"{}");
        assert_eq!(check(&mut v, &t2, b"{ }", now), Err(AuthError::BadSignature), "tampered body");
        let stale = signed_request(now - 31_000, 7, b"{}");
        assert!(matches!(check(&mut v, &stale, b"{}", now), Err(AuthError::StaleTimestamp { .. })));
        let future = signed_request(now + 31_000, 8, b"{}");
        assert!(matches!(check(&mut v, &future, b"{}", now), Err(AuthError::StaleTimestamp { .. })));
        // The refused ones did not burn their nonces.
        assert_eq!(check(&mut v, &t2, b"{}", now), Ok(()));
        let older = signed_request(now, 4, b"{}");
        assert_eq!(check(&mut v, &older, b"{}", now), Err(AuthError::ReplayedNonce { nonce: 4, last: 6 }));
    }

    #[test]
    fn extreme_signed_timestamps_are_stale_not_overflows() {
        // Found by the cps_wire fuzz target (fuzz/artifacts/cps_wire/signed-ts-overflow).
        let mut v = verifier();
        let now = 1_700_000_000_000;
        for ts in [i64::MIN, i64::MIN + 1, i64::MAX] {
            let t = signed_request(ts, 9, b"{}");
            assert!(matches!(check(&mut v, &t, b"{}", now), Err(AuthError::StaleTimestamp { .. })), "{ts}");
        }
    }

    #[test]
    fn unknown_key_and_malformed_headers() {
        let mut v = verifier();
        let p = Presented { key_id: Some("nope"), timestamp: Some("1"), nonce: Some("1"), signature: Some("00") };
        assert_eq!(v.verify("GET", "/", "c", &p, b"", 1), Err(AuthError::UnknownKey("nope".into())));
        let p = Presented { key_id: Some("k1"), timestamp: Some("x"), nonce: Some("1"), signature: Some("00") };
        assert_eq!(v.verify("GET", "/", "c", &p, b"", 1), Err(AuthError::MalformedHeader("x-cats-timestamp")));
        let p = Presented { key_id: None, timestamp: None, nonce: None, signature: None };
        assert_eq!(v.verify("GET", "/", "c", &p, b"", 1).unwrap_err().reason(), "malformed-auth");
    }

    #[test]
    fn persisted_nonces_rise_across_restarts_even_when_the_clock_steps_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nonce");
        // A previous run reserved far in the future (a clock that was ahead, then fixed).
        let future = chrono::Utc::now().timestamp_micros() as u64 + 3_600_000_000;
        std::fs::write(&path, future.to_string()).unwrap();
        let n = NonceSource::persistent(&path).unwrap();
        let a = n.next();
        assert!(a > future);
        let reserved: u64 = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        assert!(reserved > a);
        drop(n);
        let again = NonceSource::persistent(&path).unwrap();
        assert!(again.next() > a, "a restart continues above what was handed out");
        // Crossing a block reserves the next one first.
        for _ in 0..NONCE_BLOCK + 1 {
            again.next();
        }
        let reserved2: u64 = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        assert!(reserved2 > reserved);
    }

    #[test]
    fn seed_cps_authentication_replies_are_bound_to_their_request() {
        let k = b"0123456789abcdef";
        let sig = sign_reply(k, 200, "c1", 42, b"{\"acked-sequence\":9}");
        assert_eq!(verify_reply(k, 200, "c1", 42, Some(&sig), &ReplyOc::default(), b"{\"acked-sequence\":9}"), Ok(()));
        assert_eq!(
            verify_reply(k, 200, "c1", 43, Some(&sig), &ReplyOc::default(), b"{\"acked-sequence\":9}"),
            Err(AuthError::BadSignature),
            "another request's reply"
        );
        assert_eq!(
            verify_reply(k, 200, "c1", 42, Some(&sig), &ReplyOc::default(), b"{\"acked-sequence\":99}"),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            verify_reply(k, 404, "c1", 42, Some(&sig), &ReplyOc::default(), b"{\"acked-sequence\":9}"),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            verify_reply(
                b"another-key-here",
                200,
                "c1",
                42,
                Some(&sig),
                &ReplyOc::default(),
                b"{\"acked-sequence\":9}"
            ),
            Err(AuthError::BadSignature)
        );
        assert!(matches!(
            verify_reply(k, 200, "c1", 42, None, &ReplyOc::default(), b""),
            Err(AuthError::MissingHeader(_))
        ));
        // Seed 003: the overload headers are covered; a reply stripped of them, or with one
        // added or changed, does not verify.
        let oc = ReplyOc {
            supported: Some("feature-vector=17;peer-algo=1;source-id=cps"),
            olr: Some("sequence=1;report-type=2;reduction=50;source-id=cps"),
        };
        let sig = sign_reply_oc(k, 200, "c1", 42, &oc, b"{}");
        assert_eq!(verify_reply(k, 200, "c1", 42, Some(&sig), &oc, b"{}"), Ok(()));
        assert!(verify_reply(k, 200, "c1", 42, Some(&sig), &ReplyOc::default(), b"{}").is_err());
        let changed = ReplyOc { olr: Some("sequence=1;report-type=2;reduction=90;source-id=cps"), ..oc };
        assert!(verify_reply(k, 200, "c1", 42, Some(&sig), &changed, b"{}").is_err());
    }

    #[test]
    fn nonces_increase_and_hex_round_trips() {
        let n = NonceSource::new();
        let a = n.next();
        assert!(n.next() > a);
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
