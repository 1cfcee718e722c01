//! Bearer tokens of `jwt` credentials (RFC 7519 JWTs, JWS compact form), verified with the
//! jsonwebtoken crate: the signature (HS256 with the credential's key; RS256, ES256 or
//! EdDSA with the JWKS key named by `kid`), `iss`, `aud` and the presence of the
//! registered claims by the crate; the times against the injected clock, the lifetime
//! limit and the body binding here. Each refusal names its [`Refusal`] reason.
//!
//! Claims: `sub` (the CSCI-ID), `iss`, `aud`, `exp`, `iat` (all required), `nbf`
//! (optional) and [`BODY_CLAIM`], the base64url (unpadded) SHA-256 of the exact message
//! body, so a captured token cannot carry other reports. docs/sci-protocol.md has an
//! example an SCI implementer can follow.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64ct::{Base64UrlUnpadded, Encoding as _};
use chrono::{DateTime, Utc};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::jwks::Jwks;
use super::{AuthFailure, AuthTable, CredentialKind};
use crate::engine::report::{check_id, IdKind};

/// The claim binding a token to the message body.
pub const BODY_CLAIM: &str = "body_sha256";

/// Longest token verified (the `Bearer ` value). An HTTP header is bounded by the
/// listener's header limit already; an MQTT user property only by the packet size (1 MiB),
/// so the bound is here, before any decoding.
pub const MAX_TOKEN: usize = 8 * 1024;

/// The algorithms a `jwt` credential may allow (YANG `algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JwtAlg {
    HS256,
    RS256,
    ES256,
    EdDSA,
}

impl JwtAlg {
    pub const ALL: [JwtAlg; 4] = [JwtAlg::HS256, JwtAlg::RS256, JwtAlg::ES256, JwtAlg::EdDSA];

    /// The YANG enum and JOSE `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            JwtAlg::HS256 => "HS256",
            JwtAlg::RS256 => "RS256",
            JwtAlg::ES256 => "ES256",
            JwtAlg::EdDSA => "EdDSA",
        }
    }

    pub fn from_name(s: &str) -> Option<JwtAlg> {
        JwtAlg::ALL.into_iter().find(|a| a.name() == s)
    }

    fn algorithm(self) -> Algorithm {
        match self {
            JwtAlg::HS256 => Algorithm::HS256,
            JwtAlg::RS256 => Algorithm::RS256,
            JwtAlg::ES256 => Algorithm::ES256,
            JwtAlg::EdDSA => Algorithm::EdDSA,
        }
    }

    fn of(a: Algorithm) -> Option<JwtAlg> {
        JwtAlg::ALL.into_iter().find(|j| j.algorithm() == a)
    }
}

/// What a `jwt` credential accepts.
#[derive(Clone, Debug)]
pub struct JwtRules {
    pub algorithms: Vec<JwtAlg>,
    pub issuer: String,
    pub audience: String,
    /// Clock skew allowed for `exp`, `nbf` and `iat`; `None`: the table's window.
    pub leeway: Option<Duration>,
    /// Largest `exp - iat`.
    pub max_lifetime: Duration,
    pub jwks: Option<Arc<Jwks>>,
}

impl Default for JwtRules {
    fn default() -> Self {
        JwtRules {
            algorithms: vec![JwtAlg::HS256],
            issuer: String::new(),
            audience: String::new(),
            leeway: None,
            max_lifetime: DEFAULT_MAX_LIFETIME,
            jwks: None,
        }
    }
}

impl PartialEq for JwtRules {
    fn eq(&self, o: &Self) -> bool {
        let path = |j: &Option<Arc<Jwks>>| j.as_ref().map(|j| j.path().to_owned());
        self.algorithms == o.algorithms
            && self.issuer == o.issuer
            && self.audience == o.audience
            && self.leeway == o.leeway
            && self.max_lifetime == o.max_lifetime
            && path(&self.jwks) == path(&o.jwks)
    }
}
impl Eq for JwtRules {}

/// YANG `max-lifetime` default.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(300);

/// Why a token was refused; its name leads the failure's detail, `JWT refused (<name>)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a JWS compact token, or its header or claims are not the expected JSON.
    Malformed,
    TooLarge,
    MissingClaim,
    /// The `sub` has no `jwt` credential.
    NoCredential,
    AlgNotAllowed,
    UnknownKid,
    BadSignature,
    Expired,
    NotYetValid,
    WrongIssuer,
    WrongAudience,
    LifetimeTooLong,
    BodyHashMismatch,
}

impl Refusal {
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::TooLarge => "too-large",
            Refusal::MissingClaim => "missing-claim",
            Refusal::NoCredential => "no-credential",
            Refusal::AlgNotAllowed => "alg-not-allowed",
            Refusal::UnknownKid => "unknown-kid",
            Refusal::BadSignature => "bad-signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not-yet-valid",
            Refusal::WrongIssuer => "wrong-issuer",
            Refusal::WrongAudience => "wrong-audience",
            Refusal::LifetimeTooLong => "lifetime-too-long",
            Refusal::BodyHashMismatch => "body-hash-mismatch",
        }
    }
}

fn refuse(claimed: Option<&str>, why: Refusal, detail: &str) -> AuthFailure {
    AuthFailure::new(claimed, &format!("JWT refused ({}): {detail}", why.name()))
}

/// The claims this module reads; the registered ones are optional here so that a missing
/// one is reported by name (the crate checks presence), not as a parse error.
#[derive(Deserialize)]
struct Claims {
    exp: Option<f64>,
    nbf: Option<f64>,
    iat: Option<f64>,
    body_sha256: Option<String>,
    /// The other claims: a discovery trust domain's CS-ID claim is read from here.
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

/// The base64url (unpadded) SHA-256 of `body`: the [`BODY_CLAIM`] value.
pub fn body_sha256(body: &[u8]) -> String {
    Base64UrlUnpadded::encode_string(&Sha256::digest(body))
}

/// Most CS-IDs read from a trust domain's claim (the token is at most [`MAX_TOKEN`] bytes
/// anyway).
const MAX_CLAIMED_CS_IDS: usize = 256;

/// The CS-IDs of a trust domain's claim: a string or an array of strings; anything else,
/// and ids that are not CS-IDs, grant nothing.
fn claimed_cs_ids(v: Option<&serde_json::Value>) -> Vec<String> {
    let ok = |s: &&str| check_id(IdKind::CsId, s).is_ok();
    match v {
        Some(serde_json::Value::String(s)) => [s.as_str()].into_iter().filter(ok).map(str::to_owned).collect(),
        Some(serde_json::Value::Array(a)) => {
            a.iter().filter_map(|x| x.as_str()).filter(ok).take(MAX_CLAIMED_CS_IDS).map(str::to_owned).collect()
        }
        _ => Vec::new(),
    }
}

/// Verifies `token` (without `Bearer `) for a message with `body`; returns its `sub` and
/// what a discovery trust domain's token grants: a subject without a credential of its own
/// is verified with the first jwt trust domain that admits it.
pub(super) fn verify_token(
    table: &AuthTable,
    token: &str,
    body: &[u8],
    now: DateTime<Utc>,
) -> Result<super::Proven, AuthFailure> {
    if token.len() > MAX_TOKEN {
        return Err(refuse(
            None,
            Refusal::TooLarge,
            &format!("the token is {} bytes, at most {MAX_TOKEN} are accepted", token.len()),
        ));
    }
    let header = jsonwebtoken::decode_header(token).map_err(|_| header_refusal(token))?;
    // The subject picks the credential before the signature is checked; nothing else of the
    // unverified claims is used, and the signature then proves the subject.
    #[derive(Deserialize)]
    struct Subject {
        sub: Option<serde_json::Value>,
    }
    let sub = match jsonwebtoken::dangerous::insecure_decode_claims::<Subject>(token) {
        Ok(Subject { sub: Some(serde_json::Value::String(s)) }) => s,
        Ok(_) => return Err(refuse(None, Refusal::MissingClaim, "no sub (CSCI-ID) claim of type string")),
        Err(e) => return Err(refuse(None, Refusal::Malformed, &format!("the claims are not a JSON object: {e}"))),
    };
    let claimed = Some(sub.as_str());
    check_id(IdKind::CsciId, &sub).map_err(|e| refuse(claimed, Refusal::Malformed, &format!("JWT sub: {e}")))?;
    // Its own credential first (a configured SCI always wins), else a discovery domain.
    let (name, cred, domain) = match table.credential_of(&sub) {
        Some((name, cred)) => (name, cred, None),
        None => {
            let found = table
                .domain_for(&sub)
                .and_then(|d| table.credentials.get(&d.credential).map(|c| (d.credential.as_str(), c, Some(d))));
            let Some(found) = found else {
                return Err(refuse(claimed, Refusal::NoCredential, &format!("{sub} has no credential configured")));
            };
            found
        }
    };
    if cred.kind != CredentialKind::Jwt {
        return Err(refuse(
            claimed,
            Refusal::NoCredential,
            &format!("credential {name} of {sub} is not a jwt credential"),
        ));
    }
    let rules = &cred.jwt;
    let allowed = || rules.algorithms.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");
    let Some(alg) = JwtAlg::of(header.alg).filter(|a| rules.algorithms.contains(a)) else {
        return Err(refuse(
            claimed,
            Refusal::AlgNotAllowed,
            &format!("alg {:?} is not allowed by credential {name} (allowed: {})", header.alg, allowed()),
        ));
    };
    // The key: HS256 only ever with the credential's secret, the others only with a JWKS
    // key of that algorithm, so one algorithm's key material never verifies another.
    let (key, key_name) = if alg == JwtAlg::HS256 {
        let key = DecodingKey::from_secret(&cred.key)
            .map_err(|_| refuse(claimed, Refusal::AlgNotAllowed, &format!("credential {name} has no HS256 key")))?;
        (key, format!("credential {name}"))
    } else {
        let Some(jwks) = &rules.jwks else {
            return Err(refuse(claimed, Refusal::UnknownKid, &format!("credential {name} has no jwks-file")));
        };
        let Some(kid) = header.kid.as_deref() else {
            return Err(refuse(claimed, Refusal::UnknownKid, &format!("an {} token needs a kid", alg.name())));
        };
        let kid_shown = crate::text::printable(kid, 64);
        let keys = jwks.keys();
        let mut named = keys.iter().filter(|k| k.kid == kid).peekable();
        if named.peek().is_none() {
            return Err(refuse(
                claimed,
                Refusal::UnknownKid,
                &format!("kid {kid_shown:?} is not in {}", jwks.path().display()),
            ));
        }
        let Some(k) = named.find(|k| k.alg == alg.algorithm()) else {
            return Err(refuse(
                claimed,
                Refusal::AlgNotAllowed,
                &format!("key {kid_shown:?} is not an {} key", alg.name()),
            ));
        };
        (k.key.clone(), format!("key {kid_shown:?} of {}", jwks.path().display()))
    };
    let mut v = Validation::new(alg.algorithm());
    // The times are checked below against the injected clock, with the credential's leeway.
    v.validate_exp = false;
    v.validate_nbf = false;
    v.required_spec_claims = ["sub", "iss", "aud", "exp"].into_iter().map(String::from).collect::<HashSet<_>>();
    v.set_issuer(&[&rules.issuer]);
    v.set_audience(&[&rules.audience]);
    let claims = match jsonwebtoken::decode::<Claims>(token, &key, &v) {
        Ok(t) => t.claims,
        Err(e) => {
            let (why, detail) = match e.kind() {
                ErrorKind::InvalidSignature => {
                    (Refusal::BadSignature, format!("the signature does not verify with {key_name}"))
                }
                ErrorKind::InvalidIssuer => (Refusal::WrongIssuer, format!("iss is not {:?}", rules.issuer)),
                ErrorKind::InvalidAudience => {
                    (Refusal::WrongAudience, format!("aud does not contain {:?}", rules.audience))
                }
                ErrorKind::MissingRequiredClaim(c) => (Refusal::MissingClaim, format!("no {c} claim")),
                ErrorKind::InvalidAlgorithm => {
                    (Refusal::AlgNotAllowed, format!("alg {} does not fit {key_name}", alg.name()))
                }
                ErrorKind::InvalidToken => {
                    (Refusal::Malformed, "not header.payload.signature, or an unsupported crit header".into())
                }
                _ => (Refusal::Malformed, e.to_string()),
            };
            return Err(refuse(claimed, why, &detail));
        }
    };
    let now_s = now.timestamp() as f64;
    let leeway = rules.leeway.unwrap_or(table.window).as_secs() as f64;
    let exp = claims.exp.unwrap_or(f64::NEG_INFINITY); // present: the crate checked
    if now_s >= exp + leeway {
        return Err(refuse(
            claimed,
            Refusal::Expired,
            &format!("exp was {:.0} s ago (leeway {leeway:.0} s)", now_s - exp),
        ));
    }
    if let Some(nbf) = claims.nbf.filter(|n| *n > now_s + leeway) {
        return Err(refuse(
            claimed,
            Refusal::NotYetValid,
            &format!("nbf is {:.0} s ahead (leeway {leeway:.0} s)", nbf - now_s),
        ));
    }
    let Some(iat) = claims.iat else {
        return Err(refuse(claimed, Refusal::MissingClaim, "no iat claim (the lifetime limit needs it)"));
    };
    if iat > now_s + leeway {
        return Err(refuse(
            claimed,
            Refusal::NotYetValid,
            &format!("iat is {:.0} s ahead (leeway {leeway:.0} s)", iat - now_s),
        ));
    }
    let max = rules.max_lifetime.as_secs() as f64;
    if exp - iat > max {
        return Err(refuse(
            claimed,
            Refusal::LifetimeTooLong,
            &format!("exp - iat is {:.0} s, more than max-lifetime {max:.0} s", exp - iat),
        ));
    }
    let Some(hash) = claims.body_sha256 else {
        return Err(refuse(claimed, Refusal::MissingClaim, &format!("no {BODY_CLAIM} claim")));
    };
    if hash != body_sha256(body) {
        return Err(refuse(
            claimed,
            Refusal::BodyHashMismatch,
            &format!("{BODY_CLAIM} is not the SHA-256 of this message's body (a token is bound to one body)"),
        ));
    }
    let grant = crate::engine::discovery::Grant {
        credential: name.to_owned(),
        domain: domain.map(|d| d.name.clone()),
        claimed_cs_ids: domain.and_then(|d| d.cs_id_claim.as_ref()).map(|c| claimed_cs_ids(claims.other.get(c))),
    };
    Ok(super::Proven { csci_id: sub, grant: Some(grant) })
}

/// Why a header did not parse: an `alg` we never accept is said by name.
fn header_refusal(token: &str) -> AuthFailure {
    let alg = token
        .split('.')
        .next()
        .and_then(|h| Base64UrlUnpadded::decode_vec(h).ok())
        .and_then(|h| serde_json::from_slice::<serde_json::Value>(&h).ok())
        .and_then(|h| h.get("alg").and_then(|a| a.as_str()).map(|a| crate::text::printable(a, 32)));
    match alg {
        Some(a) if a.eq_ignore_ascii_case("none") => {
            refuse(None, Refusal::AlgNotAllowed, "alg \"none\" (an unsigned token) is never accepted")
        }
        Some(a) if a.parse::<Algorithm>().is_err() => {
            refuse(None, Refusal::AlgNotAllowed, &format!("alg {a:?} is not supported"))
        }
        Some(_) => refuse(None, Refusal::Malformed, "a header member has the wrong type"),
        None => refuse(None, Refusal::Malformed, "the header is not base64url JSON with an alg"),
    }
}

/// A key an SCI signs its tokens with (SCI simulators, tests, examples and benches).
pub struct JwtSigner {
    alg: JwtAlg,
    kid: Option<String>,
    key: EncodingKey,
}

impl JwtSigner {
    /// An HS256 signer with a shared secret (at least 32 bytes for a credential to accept it;
    /// any non-empty secret signs).
    pub fn hs256(secret: &[u8]) -> JwtSigner {
        let key = EncodingKey::from_secret(secret).expect("an HS256 secret is not empty");
        JwtSigner { alg: JwtAlg::HS256, kid: None, key }
    }

    /// A fresh key pair for RS256 (2048 bits), ES256 or EdDSA, named `kid`.
    pub fn generate(alg: JwtAlg, kid: &str) -> JwtSigner {
        use aws_lc_rs::signature::{EcdsaKeyPair, Ed25519KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let key = match alg {
            JwtAlg::HS256 => {
                let mut secret = [0u8; 32];
                aws_lc_rs::rand::SecureRandom::fill(&rng, &mut secret).expect("the system RNG works");
                EncodingKey::from_secret(&secret).expect("32 bytes")
            }
            JwtAlg::RS256 => {
                let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).expect("RSA key generation works");
                EncodingKey::from_rsa_pem(pair.serialize_pem().as_bytes()).expect("rcgen writes PKCS#8 PEM")
            }
            JwtAlg::ES256 => {
                let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .expect("EC key generation works");
                EncodingKey::from_ec_der(doc.as_ref())
            }
            JwtAlg::EdDSA => {
                let doc = Ed25519KeyPair::generate_pkcs8v1(&rng).expect("Ed25519 key generation works");
                EncodingKey::from_ed_der(doc.as_ref())
            }
        };
        JwtSigner { alg, kid: Some(kid.to_owned()), key }
    }

    /// A signer from a PKCS#8 PEM private key (`openssl genpkey`), named `kid`.
    pub fn from_pem(alg: JwtAlg, pem: &[u8], kid: &str) -> Result<JwtSigner, String> {
        let key = match alg {
            JwtAlg::HS256 => return Err("HS256 has no PEM key".into()),
            JwtAlg::RS256 => EncodingKey::from_rsa_pem(pem),
            JwtAlg::ES256 => EncodingKey::from_ec_pem(pem),
            JwtAlg::EdDSA => EncodingKey::from_ed_pem(pem),
        }
        .map_err(|e| e.to_string())?;
        Ok(JwtSigner { alg, kid: Some(kid.to_owned()), key })
    }

    /// The same key under another `kid` (or none).
    pub fn with_kid(mut self, kid: Option<&str>) -> JwtSigner {
        self.kid = kid.map(str::to_owned);
        self
    }

    pub fn alg(&self) -> JwtAlg {
        self.alg
    }

    /// The public key as a JWKS entry (RFC 7517) with `kid`, `alg` and `use`; `None` for
    /// HS256, whose secret never goes into a JWKS.
    pub fn public_jwk(&self) -> Option<serde_json::Value> {
        if self.alg == JwtAlg::HS256 {
            return None;
        }
        let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&self.key, self.alg.algorithm()).ok()?;
        jwk.common.key_id = self.kid.clone();
        jwk.common.public_key_use = Some(jsonwebtoken::jwk::PublicKeyUse::Signature);
        serde_json::to_value(jwk).ok()
    }

    /// A signed token (compact JWS) with these claims.
    pub fn sign(&self, claims: &serde_json::Value) -> String {
        let mut header = Header::new(self.alg.algorithm());
        header.kid = self.kid.clone();
        jsonwebtoken::encode(&header, claims, &self.key).expect("a generated or parsed key signs")
    }
}

/// The claims of a token for `csci_id` over `body`, issued at `now` (unix seconds) and
/// valid for `lifetime` seconds; tests change fields of the result to make bad ones.
pub fn claims(csci_id: &str, issuer: &str, audience: &str, body: &[u8], now: i64, lifetime: i64) -> serde_json::Value {
    serde_json::json!({
        "sub": csci_id,
        "iss": issuer,
        "aud": audience,
        "iat": now,
        "exp": now.saturating_add(lifetime),
        BODY_CLAIM: body_sha256(body),
    })
}

/// The authorization value (`Bearer <JWT>`) of a message with `body` from `csci_id`:
/// issued now, valid for 60 s.
pub fn sign_jwt(signer: &JwtSigner, csci_id: &str, issuer: &str, audience: &str, body: &[u8]) -> String {
    let now = Utc::now().timestamp();
    format!("Bearer {}", signer.sign(&claims(csci_id, issuer, audience, body, now, 60)))
}

#[cfg(test)]
mod tests {
    //! seed 004, SCI Authentication: "The SCI includes a signed token (e.g., JWT) in each
    //! report. The C-SMA validates the token signature, expiration, and issuer."
    use super::*;
    use crate::engine::auth::Credential;

    const SECRET: &[u8] = b"an-hs256-secret-of-32-bytes-or-more";
    const BODY: &[u8] = br#"{"csci-id":"sci-1","cs-id":"AR1"}"#;

    fn table(algorithms: &[JwtAlg], jwks: Option<Arc<Jwks>>) -> AuthTable {
        let mut t = AuthTable::default();
        let rules = JwtRules {
            algorithms: algorithms.to_vec(),
            issuer: "site-a".into(),
            audience: "csma-1".into(),
            jwks,
            ..JwtRules::default()
        };
        t.credentials.insert("j".into(), Credential::jwt(SECRET, rules));
        t.scis.insert("sci-1".into(), "j".into());
        t
    }

    #[test]
    fn seed004_sci_state_machine_discovery_token_of_a_trust_domain() {
        use crate::engine::auth::JwtDomain;
        use crate::engine::discovery::{Grant, Pattern};
        let now = Utc::now();
        let mut t = table(&[JwtAlg::HS256], None);
        let hs = JwtSigner::hs256(SECRET);
        let pod = |sub: &str, cs: serde_json::Value| {
            let mut c = claims(sub, "site-a", "csma-1", BODY, now.timestamp(), 60);
            c["cs_ids"] = cs;
            format!("Bearer {}", hs.sign(&c))
        };
        let tok = pod("pod-7", serde_json::json!(["AR1", "LLM1", "bad\u{7}", ""]));
        // No trust domain: a subject without a credential of its own is refused.
        let e = t.verify_proof(Some(&tok), None, BODY, now).unwrap_err();
        assert!(e.detail.contains("no-credential"), "{}", e.detail);
        t.domains.push(JwtDomain {
            name: "k8s".into(),
            credential: "j".into(),
            pattern: Some(Pattern::new("pod-[0-9]+").unwrap()),
            cs_id_claim: Some("cs_ids".into()),
        });
        let p = t.verify_proof(Some(&tok), None, BODY, now).unwrap().unwrap();
        let grant = Grant {
            credential: "j".into(),
            domain: Some("k8s".into()),
            claimed_cs_ids: Some(vec!["AR1".into(), "LLM1".into()]),
        };
        assert_eq!((p.csci_id.as_str(), p.grant), ("pod-7", Some(grant)));
        // A single string claim, and a missing one (grants nothing).
        let p = t.verify_proof(Some(&pod("pod-8", serde_json::json!("AR2"))), None, BODY, now).unwrap().unwrap();
        assert_eq!(p.grant.unwrap().claimed_cs_ids, Some(vec!["AR2".to_owned()]));
        let p = t.verify_proof(Some(&pod("pod-8", serde_json::json!(7))), None, BODY, now).unwrap().unwrap();
        assert_eq!(p.grant.unwrap().claimed_cs_ids, Some(vec![]));
        // The pattern: another subject is not the domain's.
        let e = t.verify_proof(Some(&pod("db-1", serde_json::json!(["AR1"]))), None, BODY, now).unwrap_err();
        assert!(e.detail.contains("no-credential"), "{}", e.detail);
        // A configured SCI with its own credential is verified with it, never as discovered.
        let own = format!("Bearer {}", hs.sign(&claims("sci-1", "site-a", "csma-1", BODY, now.timestamp(), 60)));
        let own = t.verify_proof(Some(&own), None, BODY, now).unwrap().unwrap().grant;
        assert_eq!(own, Some(Grant { credential: "j".into(), domain: None, claimed_cs_ids: None }));
        // Every other rule holds for domain tokens: a wrong issuer is refused.
        let mut c = claims("pod-7", "elsewhere", "csma-1", BODY, now.timestamp(), 60);
        c["cs_ids"] = serde_json::json!(["AR1"]);
        let e = t.verify_proof(Some(&format!("Bearer {}", hs.sign(&c))), None, BODY, now).unwrap_err();
        assert!(e.detail.contains("wrong-issuer"), "{}", e.detail);
    }

    fn token(s: &JwtSigner, edit: impl FnOnce(&mut serde_json::Value), now: i64) -> String {
        let mut c = claims("sci-1", "site-a", "csma-1", BODY, now, 60);
        edit(&mut c);
        format!("Bearer {}", s.sign(&c))
    }

    fn refusal(t: &AuthTable, proof: &str, body: &[u8], now: DateTime<Utc>) -> String {
        t.verify(Some(proof), None, body, now).expect_err("refused").detail
    }

    fn jwks_file(dir: &tempfile::TempDir, signers: &[&JwtSigner]) -> Arc<Jwks> {
        let path = dir.path().join("jwks.json");
        let keys: Vec<_> = signers.iter().filter_map(|s| s.public_jwk()).collect();
        std::fs::write(&path, serde_json::json!({ "keys": keys }).to_string()).unwrap();
        Jwks::open(&path)
    }

    #[test]
    fn seed004_sci_authentication_jwt_hs256_claims_checked_with_reasons() {
        let t = table(&[JwtAlg::HS256], None);
        let now = Utc::now();
        let n = now.timestamp();
        let hs = JwtSigner::hs256(SECRET);
        assert_eq!(t.verify(Some(&token(&hs, |_| {}, n)), None, BODY, now), Ok(Some("sci-1".into())));
        // aud may be an array naming us among others.
        let multi = token(&hs, |c| c["aud"] = serde_json::json!(["other", "csma-1"]), n);
        assert_eq!(t.verify(Some(&multi), None, BODY, now), Ok(Some("sci-1".into())));
        let cases: Vec<(String, &[u8], &str)> = vec![
            (token(&hs, |_| {}, n - 100), BODY, "(expired)"),
            (token(&hs, |c| c["nbf"] = (n + 100).into(), n), BODY, "(not-yet-valid)"),
            (token(&hs, |c| c["iat"] = (n + 100).into(), n), BODY, "(not-yet-valid)"),
            (token(&hs, |c| c["aud"] = "csma-2".into(), n), BODY, "(wrong-audience)"),
            (token(&hs, |c| c["iss"] = "site-b".into(), n), BODY, "(wrong-issuer)"),
            (token(&hs, |c| c["exp"] = (n + 3600).into(), n), BODY, "(lifetime-too-long)"),
            (token(&hs, |_| {}, n), br#"{"csci-id":"sci-1","cs-id":"AR1","gas":1}"#, "(body-hash-mismatch)"),
            (token(&JwtSigner::hs256(b"another-secret-of-thirty-two-bytes"), |_| {}, n), BODY, "(bad-signature)"),
            (token(&hs, |c| drop(c.as_object_mut().unwrap().remove("iat")), n), BODY, "no iat"),
            (token(&hs, |c| drop(c.as_object_mut().unwrap().remove("aud")), n), BODY, "no aud"),
            (token(&hs, |c| drop(c.as_object_mut().unwrap().remove("iss")), n), BODY, "no iss"),
            (token(&hs, |c| drop(c.as_object_mut().unwrap().remove("exp")), n), BODY, "no exp"),
            (token(&hs, |c| drop(c.as_object_mut().unwrap().remove(BODY_CLAIM)), n), BODY, "no body_sha256"),
            (token(&hs, |c| c["exp"] = "soon".into(), n), BODY, "(malformed)"),
            (token(&hs, |c| c["sub"] = "sci-2".into(), n), BODY, "(no-credential)"),
            (format!("Bearer {}", "a".repeat(MAX_TOKEN + 1)), BODY, "(too-large)"),
            ("Bearer x.y".into(), BODY, "(malformed)"),
        ];
        for (proof, body, want) in cases {
            let got = refusal(&t, &proof, body, now);
            assert!(got.contains(want), "{want}: {got}");
        }
        // Inside the leeway (the timestamp window, 30 s): accepted.
        let late = token(&hs, |_| {}, n - 80);
        assert!(t.verify(Some(&late), None, BODY, now).is_ok());
    }

    #[test]
    fn seed004_sci_authentication_jwt_asymmetric_keys_from_a_jwks_by_kid() {
        let dir = tempfile::tempdir().unwrap();
        let rs = JwtSigner::generate(JwtAlg::RS256, "rsa-1");
        let es = JwtSigner::generate(JwtAlg::ES256, "ec-1");
        let ed = JwtSigner::generate(JwtAlg::EdDSA, "ed-1");
        let jwks = jwks_file(&dir, &[&rs, &es, &ed]);
        let t = table(&[JwtAlg::RS256, JwtAlg::ES256, JwtAlg::EdDSA], Some(jwks));
        let now = Utc::now();
        let n = now.timestamp();
        for s in [&rs, &es, &ed] {
            assert_eq!(
                t.verify(Some(&token(s, |_| {}, n)), None, BODY, now),
                Ok(Some("sci-1".into())),
                "{:?}",
                s.alg()
            );
        }
        // A key the file does not have; a known kid of another key type; no kid.
        let stranger = JwtSigner::generate(JwtAlg::ES256, "ec-2");
        assert!(refusal(&t, &token(&stranger, |_| {}, n), BODY, now).contains("(unknown-kid)"));
        let swapped = JwtSigner::generate(JwtAlg::ES256, "x").with_kid(Some("ed-1"));
        assert!(refusal(&t, &token(&swapped, |_| {}, n), BODY, now).contains("(alg-not-allowed)"));
        let impostor = JwtSigner::generate(JwtAlg::EdDSA, "x").with_kid(Some("ed-1"));
        assert!(refusal(&t, &token(&impostor, |_| {}, n), BODY, now).contains("(bad-signature)"));
        let anon = JwtSigner::generate(JwtAlg::EdDSA, "x").with_kid(None);
        assert!(refusal(&t, &token(&anon, |_| {}, n), BODY, now).contains("needs a kid"));
        // HS256 is not allowed here, even signed with our secret.
        let hs = JwtSigner::hs256(SECRET);
        assert!(refusal(&t, &token(&hs, |_| {}, n), BODY, now).contains("(alg-not-allowed)"));
    }

    #[test]
    fn seed004_sci_authentication_jwt_alg_none_and_alg_confusion_refused() {
        let dir = tempfile::tempdir().unwrap();
        let rs = JwtSigner::generate(JwtAlg::RS256, "rsa-1");
        let jwk = rs.public_jwk().unwrap();
        let jwks = jwks_file(&dir, &[&rs]);
        let now = Utc::now();
        let n = now.timestamp();
        let b64 = |v: &serde_json::Value| Base64UrlUnpadded::encode_string(v.to_string().as_bytes());
        let c = claims("sci-1", "site-a", "csma-1", BODY, n, 60);
        let tables = [
            (table(&[JwtAlg::RS256], Some(jwks.clone())), "(alg-not-allowed)"),
            (table(&[JwtAlg::HS256, JwtAlg::RS256], Some(jwks)), "(bad-signature)"),
        ];
        for (t, confused) in tables {
            // alg none, any spelling.
            for alg in ["none", "None", "NONE"] {
                let none = format!("Bearer {}.{}.", b64(&serde_json::json!({"alg": alg})), b64(&c));
                let got = refusal(&t, &none, BODY, now);
                assert!(got.contains("(alg-not-allowed)") && got.contains("never accepted"), "{got}");
            }
            // HS256 keyed with the RSA public key (its modulus, or the whole JWK text), as
            // an attacker who read the JWKS would: never verified with JWKS material.
            let n_bytes = Base64UrlUnpadded::decode_vec(jwk["n"].as_str().unwrap()).unwrap();
            for material in [n_bytes, jwk.to_string().into_bytes()] {
                let forged = JwtSigner::hs256(&material).with_kid(Some("rsa-1"));
                let got = refusal(&t, &token(&forged, |_| {}, n), BODY, now);
                assert!(got.contains(confused), "{got}");
            }
            // A token whose header carries its own key (jwk) is verified with ours only.
            let other = JwtSigner::generate(JwtAlg::RS256, "rsa-1");
            let mut h = Header::new(Algorithm::RS256);
            h.kid = Some("rsa-1".into());
            h.jwk = other.public_jwk().map(|j| serde_json::from_value(j).unwrap());
            let tok = jsonwebtoken::encode(&h, &c, &other.key).unwrap();
            let got = refusal(&t, &format!("Bearer {tok}"), BODY, now);
            assert!(got.contains("(bad-signature)"), "{got}");
            // Unknown algorithms by name.
            let hs512 = format!("Bearer {}.{}.AAAA", b64(&serde_json::json!({"alg": "HS512"})), b64(&c));
            assert!(refusal(&t, &hs512, BODY, now).contains("(alg-not-allowed)"));
            let odd = format!("Bearer {}.{}.AAAA", b64(&serde_json::json!({"alg": "XY1"})), b64(&c));
            assert!(refusal(&t, &odd, BODY, now).contains("(alg-not-allowed)"));
            let bad_kid = format!("Bearer {}.{}.AAAA", b64(&serde_json::json!({"alg": "RS256", "kid": 7})), b64(&c));
            assert!(refusal(&t, &bad_kid, BODY, now).contains("(malformed)"));
        }
    }

    #[test]
    fn seed004_sci_authentication_jwt_unknown_critical_header_refused() {
        let t = table(&[JwtAlg::HS256], None);
        let now = Utc::now();
        let mut h = Header::new(Algorithm::HS256);
        h.crit = Some(vec!["exp-ext".into()]);
        let key = EncodingKey::from_secret(SECRET).unwrap();
        let tok =
            jsonwebtoken::encode(&h, &claims("sci-1", "site-a", "csma-1", BODY, now.timestamp(), 60), &key).unwrap();
        let got = refusal(&t, &format!("Bearer {tok}"), BODY, now);
        assert!(got.contains("(malformed)") && got.contains("crit"), "{got}");
    }

    #[test]
    fn the_body_hash_is_base64url_sha256_of_the_exact_bytes() {
        // SHA-256("") = e3b0c442…b855.
        assert_eq!(body_sha256(b""), "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU");
        assert_ne!(body_sha256(b"{}"), body_sha256(b"{} "));
    }
}
