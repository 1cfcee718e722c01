//! Report signing with the C-SMA's private key (seed 004, Metric Integrity: "each report
//! sent to the C-PS MUST be signed using the C-SMA's private key"): every request to a C-PS
//! carries a detached JWS (RFC 7515 appendix F) in `X-Cats-JWS`, Ed25519 (RFC 8037,
//! `alg` EdDSA), whose protected header binds the method, the path, the C-SMA id, the
//! timestamp and the nonce, and whose payload is the body as sent. The key is generated into
//! the state directory on the first start; its key id is its RFC 7638 JWK thumbprint.
//!
//! The cryptography is aws-lc-rs (already in the tree as rustls' provider); this file only
//! frames the JWS. The verifying side (the reference C-PS) checks the signature, the
//! request binding, the timestamp window and that nonces only rise per key and C-SMA.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use base64ct::{Base64UrlUnpadded, Encoding};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::auth::{Accepted, AuthError, Freshness};

/// The request header carrying the detached JWS.
pub const H_JWS: &str = "x-cats-jws";
/// The file of the private key (PKCS#8 DER) in the state directory.
pub const KEY_FILE: &str = "cps_signing_ed25519.pk8";
/// The longest protected header a verifier decodes.
const MAX_HEADER: usize = 2048;

/// The C-SMA's signing key.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

/// What the protected header binds besides the algorithm and key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RequestBinding {
    pub method: String,
    pub path: String,
    pub csma_id: String,
    /// Unix time in milliseconds.
    pub timestamp: i64,
    pub nonce: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Protected {
    alg: String,
    kid: String,
    crit: Vec<String>,
    #[serde(rename = "cats-req")]
    req: RequestBinding,
}

const CRIT: &str = "cats-req";

impl SigningKey {
    /// Loads the key from the state directory, or generates and keeps one (0600).
    pub fn load_or_generate(dir: &Path) -> io::Result<SigningKey> {
        let path = dir.join(KEY_FILE);
        let der = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
                    .map_err(|_| io::Error::other("cannot generate an Ed25519 key"))?;
                crate::datastore::persist::write_atomic(&path, doc.as_ref())?;
                doc.as_ref().to_vec()
            }
            Err(e) => return Err(e),
        };
        SigningKey::from_pkcs8(&der)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
    }

    /// A key that lives in memory only (tests, and adapters started without a state dir).
    pub fn ephemeral() -> SigningKey {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("Ed25519 key generation");
        SigningKey::from_pkcs8(doc.as_ref()).expect("a key just generated parses")
    }

    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, String> {
        let pair = Ed25519KeyPair::from_pkcs8(der).map_err(|e| format!("not an Ed25519 PKCS#8 key: {e}"))?;
        let kid = thumbprint(pair.public_key().as_ref());
        Ok(SigningKey { pair, kid })
    }

    /// RFC 7638 thumbprint of the public key (base64url SHA-256 of its canonical JWK).
    pub fn key_id(&self) -> &str {
        &self.kid
    }

    /// The raw 32-byte public key.
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// The public key as a JWK (RFC 8037), what a C-PS is configured with.
    pub fn jwk(&self) -> String {
        format!(
            "{{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"{}\",\"kid\":\"{}\",\"alg\":\"EdDSA\",\"use\":\"sig\"}}",
            Base64UrlUnpadded::encode_string(self.public_key()),
            self.kid
        )
    }

    /// The detached compact JWS (`header..signature`) over `body` bound to `req`.
    pub fn sign(&self, req: &RequestBinding, body: &[u8]) -> String {
        let protected =
            Protected { alg: "EdDSA".into(), kid: self.kid.clone(), crit: vec![CRIT.into()], req: req.clone() };
        let header = Base64UrlUnpadded::encode_string(&serde_json::to_vec(&protected).expect("serialises"));
        let input = signing_input(&header, body);
        let sig = self.pair.sign(&input);
        format!("{header}..{}", Base64UrlUnpadded::encode_string(sig.as_ref()))
    }
}

fn signing_input(header_b64: &str, body: &[u8]) -> Vec<u8> {
    let payload = Base64UrlUnpadded::encode_string(body);
    let mut input = Vec::with_capacity(header_b64.len() + 1 + payload.len());
    input.extend_from_slice(header_b64.as_bytes());
    input.push(b'.');
    input.extend_from_slice(payload.as_bytes());
    input
}

/// RFC 7638: the members crv, kty, x in lexicographic order, no whitespace.
fn thumbprint(public: &[u8]) -> String {
    let canonical =
        format!("{{\"crv\":\"Ed25519\",\"kty\":\"OKP\",\"x\":\"{}\"}}", Base64UrlUnpadded::encode_string(public));
    Base64UrlUnpadded::encode_string(&Sha256::digest(canonical.as_bytes()))
}

/// A trusted public key, from the raw key in base64url (a JWK's `x`).
pub fn trusted_key(x_b64url: &str) -> Result<(String, Vec<u8>), String> {
    let raw = Base64UrlUnpadded::decode_vec(x_b64url.trim()).map_err(|_| "public key: not base64url".to_owned())?;
    if raw.len() != 32 {
        return Err(format!("public key: {} bytes, an Ed25519 key has 32", raw.len()));
    }
    Ok((thumbprint(&raw), raw))
}

/// The verifying side: trusted keys by key id and the freshness rules.
pub struct JwsVerifier {
    keys: HashMap<String, Vec<u8>>,
    fresh: Freshness,
}

impl JwsVerifier {
    pub fn new(keys: impl IntoIterator<Item = (String, Vec<u8>)>, window_ms: i64) -> JwsVerifier {
        JwsVerifier { keys: keys.into_iter().collect(), fresh: Freshness::new(window_ms) }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Checks one request at `now_ms`. The nonce is recorded only when everything passed,
    /// so a forged request cannot burn nonces.
    pub fn verify(
        &mut self,
        method: &str,
        path: &str,
        csma_id: &str,
        jws: Option<&str>,
        body: &[u8],
        now_ms: i64,
    ) -> Result<(), AuthError> {
        let a = self.check(method, path, csma_id, jws, body, now_ms)?;
        self.accept(a);
        Ok(())
    }

    /// Records the nonce of a request [`JwsVerifier::check`] passed.
    pub fn accept(&mut self, a: Accepted) {
        self.fresh.accept(a);
    }

    /// Every check of [`JwsVerifier::verify`], recording nothing.
    pub fn check(
        &self,
        method: &str,
        path: &str,
        csma_id: &str,
        jws: Option<&str>,
        body: &[u8],
        now_ms: i64,
    ) -> Result<Accepted, AuthError> {
        let jws = jws.ok_or(AuthError::MissingHeader(H_JWS))?;
        let (header, sig) = jws.split_once("..").ok_or(AuthError::MalformedHeader(H_JWS))?;
        if header.len() > MAX_HEADER || sig.contains('.') {
            return Err(AuthError::MalformedHeader(H_JWS));
        }
        let json = Base64UrlUnpadded::decode_vec(header).map_err(|_| AuthError::MalformedHeader(H_JWS))?;
        let p: Protected = serde_json::from_slice(&json).map_err(|_| AuthError::MalformedHeader(H_JWS))?;
        if p.alg != "EdDSA" || p.crit != [CRIT] {
            return Err(AuthError::MalformedHeader(H_JWS));
        }
        let sig = Base64UrlUnpadded::decode_vec(sig).map_err(|_| AuthError::MalformedHeader(H_JWS))?;
        let key = self.keys.get(&p.kid).ok_or_else(|| AuthError::UnknownKey(p.kid.clone()))?;
        UnparsedPublicKey::new(&ED25519, key)
            .verify(&signing_input(header, body), &sig)
            .map_err(|_| AuthError::BadSignature)?;
        // The signature is good: now what it says must be this request.
        let r = &p.req;
        if r.method != method || r.path != path || r.csma_id != csma_id {
            return Err(AuthError::BadSignature);
        }
        self.fresh.check(&p.kid, csma_id, r.timestamp, r.nonce, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(nonce: u64, ts: i64) -> RequestBinding {
        RequestBinding {
            method: "POST".into(),
            path: "/cats/metrics".into(),
            csma_id: "c1".into(),
            timestamp: ts,
            nonce,
        }
    }

    fn verifier(k: &SigningKey) -> JwsVerifier {
        let x = Base64UrlUnpadded::encode_string(k.public_key());
        JwsVerifier::new([trusted_key(&x).unwrap()], 30_000)
    }

    #[test]
    fn seed_metric_integrity_signed_tampered_rebound_stale_replayed() {
        let k = SigningKey::ephemeral();
        let mut v = verifier(&k);
        let now = 1_700_000_000_000;
        let jws = k.sign(&binding(5, now), b"{\"a\":1}");
        let check = |v: &mut JwsVerifier, jws: &str, body: &[u8], path: &str| {
            v.verify("POST", path, "c1", Some(jws), body, now)
        };
        assert_eq!(check(&mut v, &jws, b"{\"a\":2}", "/cats/metrics"), Err(AuthError::BadSignature), "tampered body");
        assert_eq!(check(&mut v, &jws, b"{\"a\":1}", "/cats/metrics/x"), Err(AuthError::BadSignature), "other path");
        assert_eq!(check(&mut v, &jws, b"{\"a\":1}", "/cats/metrics"), Ok(()));
        assert!(matches!(check(&mut v, &jws, b"{\"a\":1}", "/cats/metrics"), Err(AuthError::ReplayedNonce { .. })));
        let stale = k.sign(&binding(6, now - 31_000), b"");
        assert!(matches!(check(&mut v, &stale, b"", "/cats/metrics"), Err(AuthError::StaleTimestamp { .. })));
        // Another key, even with a valid-looking header, is unknown.
        let other = SigningKey::ephemeral().sign(&binding(7, now), b"");
        assert!(matches!(check(&mut v, &other, b"", "/cats/metrics"), Err(AuthError::UnknownKey(_))));
        // A header re-encoded with another kid but the old signature does not verify.
        let (h, s) = jws.split_once("..").unwrap();
        let mut p: serde_json::Value = serde_json::from_slice(&Base64UrlUnpadded::decode_vec(h).unwrap()).unwrap();
        p["cats-req"]["nonce"] = 99.into();
        let forged = format!("{}..{s}", Base64UrlUnpadded::encode_string(p.to_string().as_bytes()));
        assert_eq!(check(&mut v, &forged, b"{\"a\":1}", "/cats/metrics"), Err(AuthError::BadSignature));
        for junk in ["", "..", "a.b.c", "e30..", &"A".repeat(5000)] {
            assert!(matches!(check(&mut v, junk, b"", "/cats/metrics"), Err(AuthError::MalformedHeader(_))), "{junk}");
        }
    }

    #[test]
    fn the_key_is_generated_once_private_and_its_id_is_the_jwk_thumbprint() {
        let dir = tempfile::tempdir().unwrap();
        let a = SigningKey::load_or_generate(dir.path()).unwrap();
        let b = SigningKey::load_or_generate(dir.path()).unwrap();
        assert_eq!(a.key_id(), b.key_id());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let jwk: serde_json::Value = serde_json::from_str(&a.jwk()).unwrap();
        assert_eq!(trusted_key(jwk["x"].as_str().unwrap()).unwrap().0, a.key_id());
        // RFC 7638 section 3.1's shape: 43 base64url characters of SHA-256.
        assert_eq!(a.key_id().len(), 43);
    }
}
