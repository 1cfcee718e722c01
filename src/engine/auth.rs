//! SCI authentication (seed 004, SCI Authentication): who sent a message, proven with a
//! secret the SCI shares with the C-SMA. Two kinds of credential, both keyed per SCI:
//!
//! - `hmac-sha256`: the message carries `CATS-HMAC-SHA256 ts=<unix seconds>, sig=<hex>`,
//!   where `sig` is HMAC-SHA256(key, "<ts>\n" + body). The timestamp must be within the
//!   configured window of our clock, so an old message cannot be replayed later; a replay
//!   inside the window only repeats reports the sequence-number check already discards.
//! - `jwt-hs256`: the message carries `Bearer <JWT>` (RFC 7519, HS256 only); the subject is
//!   the CSCI-ID, `exp` is required, `nbf` and the configured issuer are checked.
//!
//! The proof travels in the HTTP `Authorization` header, the MQTT v5 user property
//! `authorization`, or the `Authorization` header of a pulled response. Verification runs
//! in the transport's task against a shared [`AuthTable`], so the engine task does no
//! cryptography; the engine then only checks that the proven CSCI-ID is the reporting one.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64ct::{Base64, Base64UrlUnpadded, Encoding as _};
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::report::{check_id, display_id, IdKind};

type HmacSha256 = Hmac<Sha256>;

/// The scheme name of HMAC-signed messages.
pub const HMAC_SCHEME: &str = "CATS-HMAC-SHA256";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    HmacSha256,
    JwtHs256,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub kind: CredentialKind,
    pub key: Vec<u8>,
    pub issuer: Option<String>,
}

/// What the transports verify against (YANG collection/authentication plus each SCI's
/// credential-ref). Replaced as a whole on every commit that touches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthTable {
    pub window: Duration,
    pub credentials: HashMap<String, Credential>,
    /// CSCI-ID → credential name.
    pub scis: HashMap<String, String>,
}

impl Default for AuthTable {
    fn default() -> Self {
        AuthTable { window: Duration::from_secs(30), credentials: HashMap::new(), scis: HashMap::new() }
    }
}

pub type SharedAuth = Arc<RwLock<AuthTable>>;

/// Why a proof was refused; `claimed` is the CSCI-ID the message claimed, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthFailure {
    pub claimed: Option<String>,
    pub detail: String,
}

/// Longest detail an auth failure keeps (it is logged and notified).
pub const MAX_DETAIL: usize = 512;

impl AuthFailure {
    /// A failure as it may be kept: the claimed CSCI-ID escaped and cut to its YANG length,
    /// the detail escaped and cut to [`MAX_DETAIL`] (claimed ids come from unauthenticated
    /// senders and may be 60 KB of anything).
    pub fn new(claimed: Option<&str>, detail: &str) -> AuthFailure {
        AuthFailure {
            claimed: claimed.map(|c| display_id(IdKind::CsciId, c)),
            detail: crate::text::printable(detail, MAX_DETAIL),
        }
    }
}

impl AuthTable {
    /// The credential an SCI must prove its messages with, if it has one.
    pub fn credential_of(&self, csci_id: &str) -> Option<(&str, &Credential)> {
        let name = self.scis.get(csci_id)?;
        self.credentials.get(name).map(|c| (name.as_str(), c))
    }

    /// Verifies the proof a message carries. `claimed` is the CSCI-ID the message is from
    /// by its content or transport (first report, topic, pull target); a bearer token names
    /// its own. Returns the proven CSCI-ID, or `None` when the message carries no proof
    /// (whether that is acceptable is the engine's decision, per SCI).
    pub fn verify(
        &self,
        proof: Option<&str>,
        claimed: Option<&str>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Option<String>, AuthFailure> {
        let Some(proof) = proof.map(str::trim).filter(|p| !p.is_empty()) else { return Ok(None) };
        let fail = |claimed: Option<&str>, detail: String| AuthFailure::new(claimed, &detail);
        let (scheme, rest) = proof.split_once(' ').unwrap_or((proof, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            let claims = self.verify_jwt(rest.trim(), now)?;
            return Ok(Some(claims));
        }
        if !scheme.eq_ignore_ascii_case(HMAC_SCHEME) {
            return Err(fail(
                claimed,
                format!("unsupported authorization scheme {:?}", crate::text::truncate(scheme, 32)),
            ));
        }
        let Some(csci) = claimed else {
            return Err(fail(None, "an HMAC-signed message must contain at least one report".into()));
        };
        check_id(IdKind::CsciId, csci).map_err(|e| fail(claimed, format!("the claimed {e}")))?;
        let Some((name, cred)) = self.credential_of(csci) else {
            return Err(fail(claimed, format!("{csci} has no credential configured")));
        };
        if cred.kind != CredentialKind::HmacSha256 {
            return Err(fail(claimed, format!("credential {name} of {csci} is not an HMAC credential")));
        }
        let params = auth_params(rest);
        let (Some(ts), Some(sig)) = (params.get("ts"), params.get("sig")) else {
            return Err(fail(claimed, format!("{HMAC_SCHEME} needs ts and sig parameters")));
        };
        let ts_val: i64 = ts
            .parse()
            .map_err(|_| fail(claimed, format!("timestamp {:?} is not unix seconds", crate::text::truncate(ts, 32))))?;
        // Saturating: an unauthenticated sender picks ts (i64::MIN overflowed; fuzz finding).
        let skew = now.timestamp().saturating_sub(ts_val).unsigned_abs();
        if skew > self.window.as_secs() {
            return Err(fail(
                claimed,
                format!("timestamp is {skew} s from the agent's clock (window ±{} s)", self.window.as_secs()),
            ));
        }
        let sig = hex_decode(sig).ok_or_else(|| fail(claimed, "sig is not hexadecimal".into()))?;
        let mut mac = HmacSha256::new_from_slice(&cred.key).map_err(|_| fail(claimed, "unusable key".into()))?;
        mac.update(ts.as_bytes());
        mac.update(b"\n");
        mac.update(body);
        mac.verify_slice(&sig).map_err(|_| fail(claimed, format!("HMAC signature does not verify with {name}")))?;
        Ok(Some(csci.to_owned()))
    }

    fn verify_jwt(&self, token: &str, now: DateTime<Utc>) -> Result<String, AuthFailure> {
        let fail = |claimed: Option<&str>, detail: String| AuthFailure::new(claimed, &detail);
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(fail(None, "bearer token is not a JWT (header.payload.signature)".into()));
        };
        let json = |seg: &str, what: &str| -> Result<serde_json::Value, AuthFailure> {
            let raw =
                Base64UrlUnpadded::decode_vec(seg).map_err(|_| fail(None, format!("JWT {what} is not base64url")))?;
            serde_json::from_slice(&raw).map_err(|_| fail(None, format!("JWT {what} is not JSON")))
        };
        let header = json(h, "header")?;
        if header.get("alg").and_then(|a| a.as_str()) != Some("HS256") {
            return Err(fail(None, "JWT alg must be HS256".into()));
        }
        let claims = json(p, "payload")?;
        let Some(sub) = claims.get("sub").and_then(|v| v.as_str()) else {
            return Err(fail(None, "JWT has no sub (CSCI-ID) claim".into()));
        };
        let claimed = Some(sub);
        check_id(IdKind::CsciId, sub).map_err(|e| fail(claimed, format!("JWT sub: {e}")))?;
        let Some((name, cred)) = self.credential_of(sub) else {
            return Err(fail(claimed, format!("{sub} has no credential configured")));
        };
        if cred.kind != CredentialKind::JwtHs256 {
            return Err(fail(claimed, format!("credential {name} of {sub} is not a JWT credential")));
        }
        let sig =
            Base64UrlUnpadded::decode_vec(s).map_err(|_| fail(claimed, "JWT signature is not base64url".into()))?;
        let mut mac = HmacSha256::new_from_slice(&cred.key).map_err(|_| fail(claimed, "unusable key".into()))?;
        mac.update(h.as_bytes());
        mac.update(b".");
        mac.update(p.as_bytes());
        mac.verify_slice(&sig).map_err(|_| fail(claimed, format!("JWT signature does not verify with {name}")))?;
        let now_s = now.timestamp();
        match claims.get("exp").and_then(|v| v.as_i64()) {
            None => return Err(fail(claimed, "JWT has no exp claim".into())),
            Some(exp) if exp <= now_s => {
                return Err(fail(claimed, format!("JWT expired {} s ago", now_s.saturating_sub(exp))))
            }
            Some(_) => {}
        }
        if let Some(nbf) = claims.get("nbf").and_then(|v| v.as_i64()) {
            if nbf > now_s.saturating_add(self.window.as_secs() as i64) {
                return Err(fail(claimed, "JWT is not valid yet (nbf)".into()));
            }
        }
        if let Some(iss) = &cred.issuer {
            if claims.get("iss").and_then(|v| v.as_str()) != Some(iss.as_str()) {
                return Err(fail(claimed, format!("JWT issuer is not \"{iss}\"")));
            }
        }
        Ok(sub.to_owned())
    }
}

/// `k=v, k="v"` parameters of an authorization value (RFC 9110 auth-param, without
/// escapes inside quotes, which our values never need).
fn auth_params(s: &str) -> HashMap<&str, &str> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let v = v.trim();
            let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
            Some((k.trim(), v))
        })
        .collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decodes a YANG `binary` value (base64).
pub fn decode_key(b64: &str) -> Option<Vec<u8>> {
    let clean: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
    Base64::decode_vec(&clean).ok()
}

/// The proof an SCI attaches to an HMAC-signed message (used by SCI simulators, tests and
/// examples; the format is documented in docs/sci-protocol.md).
pub fn sign_hmac(key: &[u8], ts_unix: i64, body: &[u8]) -> String {
    let ts = ts_unix.to_string();
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(ts.as_bytes());
    mac.update(b"\n");
    mac.update(body);
    format!("{HMAC_SCHEME} ts={ts}, sig={}", hex_encode(&mac.finalize().into_bytes()))
}

/// A `Bearer` proof: an HS256 JWT for `csci_id`, valid until `exp_unix`.
pub fn sign_jwt(key: &[u8], csci_id: &str, issuer: Option<&str>, exp_unix: i64) -> String {
    let header = Base64UrlUnpadded::encode_string(br#"{"alg":"HS256","typ":"JWT"}"#);
    let mut claims = serde_json::json!({"sub": csci_id, "exp": exp_unix});
    if let Some(i) = issuer {
        claims["iss"] = serde_json::Value::from(i);
    }
    let payload = Base64UrlUnpadded::encode_string(claims.to_string().as_bytes());
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(payload.as_bytes());
    let sig = Base64UrlUnpadded::encode_string(&mac.finalize().into_bytes());
    format!("Bearer {header}.{payload}.{sig}")
}

/// The collection/authentication settings and the SCIs' credential-refs in a
/// configuration tree.
pub fn table(t: &yang2::data::DataTree<'static>) -> AuthTable {
    use crate::engine::northbound::{leaf_u64, ROOT};
    use yang2::data::Data;
    let base = format!("{ROOT}/collection/authentication");
    let mut out = AuthTable {
        window: Duration::from_secs(leaf_u64(t, &format!("{base}/timestamp-window")).unwrap_or(30)),
        ..AuthTable::default()
    };
    if let Ok(set) = t.find_xpath(&format!("{base}/credential")) {
        for n in set {
            let mut name = None;
            let mut cred = Credential { kind: CredentialKind::HmacSha256, key: Vec::new(), issuer: None };
            for c in n.children() {
                let v = c.value_canonical();
                match (c.schema().name(), v) {
                    ("name", Some(v)) => name = Some(v),
                    ("type", Some(v)) if v == "jwt-hs256" => cred.kind = CredentialKind::JwtHs256,
                    ("key", Some(v)) => cred.key = decode_key(&v).unwrap_or_default(),
                    ("issuer", Some(v)) => cred.issuer = Some(v),
                    _ => {}
                }
            }
            if let Some(name) = name {
                out.credentials.insert(name, cred);
            }
        }
    }
    if let Ok(set) = t.find_xpath(&format!("{ROOT}/scis/sci[credential-ref]")) {
        for n in set {
            let (mut id, mut cred) = (None, None);
            for c in n.children() {
                match c.schema().name() {
                    "csci-id" => id = c.value_canonical(),
                    "credential-ref" => cred = c.value_canonical(),
                    _ => {}
                }
            }
            if let (Some(i), Some(c)) = (id, cred) {
                out.scis.insert(i, c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(kind: CredentialKind, issuer: Option<&str>) -> AuthTable {
        let mut t = AuthTable::default();
        t.credentials.insert(
            "k1".into(),
            Credential { kind, key: b"0123456789abcdef".to_vec(), issuer: issuer.map(str::to_owned) },
        );
        t.scis.insert("sci-1".into(), "k1".into());
        t
    }

    #[test]
    fn hmac_proof_verifies_and_tampering_fails() {
        let t = table_with(CredentialKind::HmacSha256, None);
        let now = Utc::now();
        let body = br#"{"csci-id":"sci-1"}"#;
        let proof = sign_hmac(b"0123456789abcdef", now.timestamp(), body);
        assert_eq!(t.verify(Some(&proof), Some("sci-1"), body, now), Ok(Some("sci-1".into())));
        // Another body, another SCI, an old timestamp, a wrong key: all refused.
        assert!(t.verify(Some(&proof), Some("sci-1"), b"{}", now).is_err());
        assert!(t.verify(Some(&proof), Some("sci-2"), body, now).is_err());
        let old = sign_hmac(b"0123456789abcdef", now.timestamp() - 31, body);
        let e = t.verify(Some(&old), Some("sci-1"), body, now).unwrap_err();
        assert!(e.detail.contains("window"), "{}", e.detail);
        let wrong = sign_hmac(b"fedcba9876543210", now.timestamp(), body);
        assert!(t.verify(Some(&wrong), Some("sci-1"), body, now).is_err());
        // No proof is not a failure here: the engine decides per SCI.
        assert_eq!(t.verify(None, Some("sci-1"), body, now), Ok(None));
        assert!(t.verify(Some("Digest x"), Some("sci-1"), body, now).is_err());
    }

    #[test]
    fn jwt_proof_checks_signature_expiry_and_issuer() {
        let t = table_with(CredentialKind::JwtHs256, Some("site-a"));
        let now = Utc::now();
        let good = sign_jwt(b"0123456789abcdef", "sci-1", Some("site-a"), now.timestamp() + 60);
        assert_eq!(t.verify(Some(&good), None, b"", now), Ok(Some("sci-1".into())));
        let expired = sign_jwt(b"0123456789abcdef", "sci-1", Some("site-a"), now.timestamp() - 1);
        assert!(t.verify(Some(&expired), None, b"", now).unwrap_err().detail.contains("expired"));
        let other_iss = sign_jwt(b"0123456789abcdef", "sci-1", Some("site-b"), now.timestamp() + 60);
        assert!(t.verify(Some(&other_iss), None, b"", now).unwrap_err().detail.contains("issuer"));
        let forged = sign_jwt(b"not-the-right-key", "sci-1", Some("site-a"), now.timestamp() + 60);
        assert!(t.verify(Some(&forged), None, b"", now).is_err());
        // alg none is never accepted.
        let none = format!(
            "Bearer {}.{}.",
            Base64UrlUnpadded::encode_string(br#"{"alg":"none"}"#),
            Base64UrlUnpadded::encode_string(br#"{"sub":"sci-1","exp":9999999999}"#)
        );
        assert!(t.verify(Some(&none), None, b"", now).is_err());
        // An HMAC proof for a JWT credential is refused.
        let h = sign_hmac(b"0123456789abcdef", now.timestamp(), b"x");
        assert!(t.verify(Some(&h), Some("sci-1"), b"x", now).is_err());
    }
}
