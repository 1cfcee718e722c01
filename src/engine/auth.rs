//! SCI authentication (seed 004, SCI Authentication): who sent a message, proven with a
//! secret the SCI shares with the C-SMA. Two kinds of credential, both keyed per SCI:
//!
//! - `hmac-sha256`: the message carries `CATS-HMAC-SHA256 ts=<unix seconds>, sig=<hex>`,
//!   where `sig` is HMAC-SHA256(key, "<ts>\n" + body). The timestamp must be within the
//!   configured window of our clock, so an old message cannot be replayed later; a replay
//!   inside the window only repeats reports the sequence-number check already discards.
//! - `jwt`: the message carries `Bearer <JWT>` (RFC 7519), signed with HS256 and the
//!   credential's key or with RS256, ES256 or EdDSA and a public key of the credential's
//!   JWKS file; the subject is the CSCI-ID, issuer, audience, expiry, issue time and a
//!   lifetime limit are checked, and the token is bound to the message body by its SHA-256
//!   (see [`jwt`]).
//!
//! The proof travels in the HTTP `Authorization` header, the MQTT v5 user property
//! `authorization`, or the `Authorization` header of a pulled response. Verification runs
//! in the transport's task against a shared [`AuthTable`], so the engine task does no
//! cryptography; the engine then only checks that the proven CSCI-ID is the reporting one.

pub mod jwks;
pub mod jwt;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64ct::{Base64, Encoding as _};
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::report::{check_id, display_id, IdKind};

pub use jwt::{sign_jwt, JwtAlg, JwtRules, JwtSigner};

type HmacSha256 = Hmac<Sha256>;

/// The scheme name of HMAC-signed messages.
pub const HMAC_SCHEME: &str = "CATS-HMAC-SHA256";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialKind {
    HmacSha256,
    Jwt,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub kind: CredentialKind,
    /// The HMAC key, or a `jwt` credential's HS256 secret (empty when it has none).
    pub key: Vec<u8>,
    /// What a `jwt` credential accepts (unused for HMAC).
    pub jwt: JwtRules,
}

impl Credential {
    /// An `hmac-sha256` credential.
    pub fn hmac(key: &[u8]) -> Credential {
        Credential { kind: CredentialKind::HmacSha256, key: key.to_vec(), jwt: JwtRules::default() }
    }

    /// A `jwt` credential with these rules and HS256 secret (empty: none).
    pub fn jwt(key: &[u8], rules: JwtRules) -> Credential {
        Credential { kind: CredentialKind::Jwt, key: key.to_vec(), jwt: rules }
    }
}

/// What the transports verify against (YANG collection/authentication plus each SCI's
/// credential-ref). Replaced as a whole on every commit that touches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthTable {
    pub window: Duration,
    pub credentials: HashMap<String, Credential>,
    /// CSCI-ID → credential name.
    pub scis: HashMap<String, String>,
    /// The jwt trust domains of SCI discovery, in order (empty while discovery is off):
    /// they verify the tokens of subjects that have no credential of their own.
    pub domains: Vec<JwtDomain>,
}

/// A jwt trust domain of SCI discovery (`scis/discovery/trust-domain`, proof jwt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtDomain {
    pub name: String,
    /// The `jwt` credential that verifies its tokens.
    pub credential: String,
    /// The subjects it admits (absent: any).
    pub pattern: Option<super::discovery::Pattern>,
    /// The claim listing the CS-IDs a token grants.
    pub cs_id_claim: Option<String>,
}

/// Who a verified proof proves, with which credential, and what a trust domain's token
/// grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proven {
    pub csci_id: String,
    /// The credential that verified the proof (always set by [`AuthTable::verify_proof`]),
    /// with the trust domain and its grant when a discovery domain's credential did.
    pub grant: Option<super::discovery::Grant>,
}

impl Default for AuthTable {
    fn default() -> Self {
        AuthTable {
            window: Duration::from_secs(30),
            credentials: HashMap::new(),
            scis: HashMap::new(),
            domains: Vec::new(),
        }
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
        self.verify_proof(proof, claimed, body, now).map(|p| p.map(|p| p.csci_id))
    }

    /// The jwt trust domain that verifies the tokens of `sub`, when it has no credential of
    /// its own: the first whose pattern admits it.
    pub fn domain_for(&self, sub: &str) -> Option<&JwtDomain> {
        self.domains.iter().find(|d| d.pattern.as_ref().is_none_or(|p| p.matches(sub)))
    }

    /// [`AuthTable::verify`], with what a discovery trust domain's token grants.
    pub fn verify_proof(
        &self,
        proof: Option<&str>,
        claimed: Option<&str>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<Option<Proven>, AuthFailure> {
        let Some(proof) = proof.map(str::trim).filter(|p| !p.is_empty()) else { return Ok(None) };
        let fail = |claimed: Option<&str>, detail: String| AuthFailure::new(claimed, &detail);
        let (scheme, rest) = proof.split_once(' ').unwrap_or((proof, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            return jwt::verify_token(self, rest.trim(), body, now).map(Some);
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
        let grant = super::discovery::Grant { credential: name.to_owned(), ..Default::default() };
        Ok(Some(Proven { csci_id: csci.to_owned(), grant: Some(grant) }))
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
    if !s.len().is_multiple_of(2) {
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

/// What the schema cannot say about the credentials of a configuration tree: an HS256
/// secret has at least 32 bytes (RFC 7518, 3.2). Checked when a commit is prepared.
pub fn check(t: &yang2::data::DataTree<'static>) -> Result<(), String> {
    use crate::engine::northbound::ROOT;
    use yang2::data::Data;
    let Ok(auth) = t.find_path(&format!("{ROOT}/collection/authentication")) else {
        return Ok(());
    };
    for n in auth.children().filter(|n| n.schema().name() == "credential") {
        let (mut name, mut len, mut hs256) = (String::new(), 0, false);
        for c in n.children() {
            match (c.schema().name(), c.value_canonical()) {
                ("name", Some(v)) => name = v,
                ("key", Some(v)) => len = decode_key(&v).map_or(0, |k| k.len()),
                ("algorithm", Some(v)) if v == "HS256" => hs256 = true,
                _ => {}
            }
        }
        if hs256 && len < 32 {
            return Err(format!(
                "credential {name}: an HS256 key must be at least 32 bytes (RFC 7518, 3.2), this one has {len}"
            ));
        }
    }
    Ok(())
}

/// The collection/authentication settings and the SCIs' credential-refs in a
/// configuration tree. Reads the JWKS files the credentials name (see [`jwks`]).
pub fn table(t: &yang2::data::DataTree<'static>) -> AuthTable {
    use crate::engine::northbound::{leaf_u64, ROOT};
    use yang2::data::Data;
    let base = format!("{ROOT}/collection/authentication");
    let mut out = AuthTable {
        window: Duration::from_secs(leaf_u64(t, &format!("{base}/timestamp-window")).unwrap_or(30)),
        ..AuthTable::default()
    };
    // Walks, not find_xpath: yang2 0.18 never frees an XPath result set.
    if let Ok(auth) = t.find_path(&base) {
        for n in auth.children().filter(|n| n.schema().name() == "credential") {
            let mut name = None;
            let mut cred = Credential::hmac(b"");
            cred.jwt.algorithms.clear();
            for c in n.children() {
                let v = c.value_canonical();
                match (c.schema().name(), v) {
                    ("name", Some(v)) => name = Some(v),
                    ("type", Some(v)) if v == "jwt" => cred.kind = CredentialKind::Jwt,
                    ("key", Some(v)) => cred.key = decode_key(&v).unwrap_or_default(),
                    ("algorithm", Some(v)) => cred.jwt.algorithms.extend(JwtAlg::from_name(&v)),
                    ("jwks-file", Some(v)) => cred.jwt.jwks = Some(jwks::Jwks::open(std::path::Path::new(&v))),
                    ("issuer", Some(v)) => cred.jwt.issuer = v,
                    ("audience", Some(v)) => cred.jwt.audience = v,
                    ("leeway", Some(v)) => cred.jwt.leeway = v.parse().ok().map(Duration::from_secs),
                    ("max-lifetime", Some(v)) => {
                        cred.jwt.max_lifetime = v.parse().map(Duration::from_secs).unwrap_or(jwt::DEFAULT_MAX_LIFETIME)
                    }
                    _ => {}
                }
            }
            if let Some(name) = name {
                out.credentials.insert(name, cred);
            }
        }
    }
    if let Ok(scis) = t.find_path(&format!("{ROOT}/scis")) {
        for n in scis.children().filter(|n| n.schema().name() == "sci") {
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
    // SCI discovery: the jwt trust domains, only while discovery is on (an unusable
    // setting is refused at commit; in running it leaves discovery off).
    if let Some(d) = super::discovery::settings(t).ok().filter(|d| d.enabled) {
        for dom in d.domains {
            if let super::discovery::DomainProof::Jwt { credential } = dom.proof {
                out.domains.push(JwtDomain {
                    name: dom.name,
                    credential,
                    pattern: dom.pattern,
                    cs_id_claim: dom.cs_id_claim,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_proof_verifies_and_tampering_fails() {
        let mut t = AuthTable::default();
        t.credentials.insert("k1".into(), Credential::hmac(b"0123456789abcdef"));
        t.scis.insert("sci-1".into(), "k1".into());
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
        // A bearer token for an HMAC credential is refused.
        let token = sign_jwt(&JwtSigner::hs256(b"0123456789abcdef"), "sci-1", "i", "a", body);
        let e = t.verify(Some(&token), None, body, now).unwrap_err();
        assert!(e.detail.contains("not a jwt credential"), "{}", e.detail);
    }
}
