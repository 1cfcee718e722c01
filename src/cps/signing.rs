//! Report signing with the C-SMA's private key (seed 004, Metric Integrity: "each report
//! sent to the C-PS MUST be signed using the C-SMA's private key"): every request to a C-PS
//! carries a detached JWS (RFC 7515 appendix F) in `X-Cats-JWS`, Ed25519 (RFC 8037, `alg`
//! EdDSA, the default) or ECDSA P-256 (RFC 7518, `alg` ES256, bootstrap
//! `[cps] signing_algorithm = "ecdsa-p256"`), whose protected header binds the method, the
//! path, the C-SMA id, the timestamp and the nonce, and whose payload is the body as sent.
//! The key is generated into the state directory on the first start; its key id is its
//! RFC 7638 JWK thumbprint.
//!
//! The cryptography is aws-lc-rs (already in the tree as rustls' provider); this file only
//! frames the JWS. The verifying side (the reference C-PS) checks the signature, the
//! request binding, the timestamp window and that nonces only rise per key and C-SMA.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    EcdsaKeyPair, Ed25519KeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING,
    ED25519,
};
use base64ct::{Base64UrlUnpadded, Encoding};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::auth::{Accepted, AuthError, Freshness};

/// The request header carrying the detached JWS.
pub const H_JWS: &str = "x-cats-jws";
/// The file of the Ed25519 private key (PKCS#8 DER) in the state directory.
pub const KEY_FILE: &str = "cps_signing_ed25519.pk8";
/// The file of the ECDSA P-256 private key (PKCS#8 DER) in the state directory.
pub const KEY_FILE_P256: &str = "cps_signing_p256.pk8";

/// The signature algorithm of the C-SMA's key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Ed25519 (RFC 8037), JWS `alg` EdDSA.
    #[default]
    Ed25519,
    /// ECDSA with P-256 and SHA-256 (RFC 7518 section 3.4), JWS `alg` ES256.
    EcdsaP256,
}

impl Algorithm {
    /// The JWS `alg` value.
    pub fn jws_alg(self) -> &'static str {
        match self {
            Algorithm::Ed25519 => "EdDSA",
            Algorithm::EcdsaP256 => "ES256",
        }
    }

    fn key_file(self) -> &'static str {
        match self {
            Algorithm::Ed25519 => KEY_FILE,
            Algorithm::EcdsaP256 => KEY_FILE_P256,
        }
    }
}

enum Pair {
    Ed(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}
/// The longest protected header a verifier decodes.
const MAX_HEADER: usize = 2048;

/// The C-SMA's signing key.
pub struct SigningKey {
    pair: Pair,
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
    /// Loads the Ed25519 key from the state directory, or generates and keeps one (0600).
    pub fn load_or_generate(dir: &Path) -> io::Result<SigningKey> {
        SigningKey::load_or_generate_with(dir, Algorithm::Ed25519)
    }

    /// Loads the key of `alg` from the state directory, or generates and keeps one (0600).
    /// Each algorithm has its own file, so switching back finds the old key again.
    pub fn load_or_generate_with(dir: &Path, alg: Algorithm) -> io::Result<SigningKey> {
        let path = dir.join(alg.key_file());
        let der = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let doc = generate(alg)?;
                crate::datastore::persist::write_atomic(&path, &doc)?;
                doc
            }
            Err(e) => return Err(e),
        };
        SigningKey::from_pkcs8_with(alg, &der)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
    }

    /// An Ed25519 key that lives in memory only (tests, and adapters started without a
    /// state dir).
    pub fn ephemeral() -> SigningKey {
        SigningKey::ephemeral_with(Algorithm::Ed25519)
    }

    pub fn ephemeral_with(alg: Algorithm) -> SigningKey {
        let doc = generate(alg).expect("key generation");
        SigningKey::from_pkcs8_with(alg, &doc).expect("a key just generated parses")
    }

    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, String> {
        SigningKey::from_pkcs8_with(Algorithm::Ed25519, der)
    }

    pub fn from_pkcs8_with(alg: Algorithm, der: &[u8]) -> Result<SigningKey, String> {
        let pair = match alg {
            Algorithm::Ed25519 => {
                Pair::Ed(Ed25519KeyPair::from_pkcs8(der).map_err(|e| format!("not an Ed25519 PKCS#8 key: {e}"))?)
            }
            Algorithm::EcdsaP256 => Pair::P256(
                EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
                    .map_err(|e| format!("not a P-256 PKCS#8 key: {e}"))?,
            ),
        };
        let public = match &pair {
            Pair::Ed(p) => p.public_key().as_ref().to_vec(),
            Pair::P256(p) => p.public_key().as_ref().to_vec(),
        };
        let kid = thumbprint(&public_jwk_members(alg, &public).ok_or("unusable public key")?);
        Ok(SigningKey { pair, kid })
    }

    pub fn algorithm(&self) -> Algorithm {
        match self.pair {
            Pair::Ed(_) => Algorithm::Ed25519,
            Pair::P256(_) => Algorithm::EcdsaP256,
        }
    }

    /// RFC 7638 thumbprint of the public key (base64url SHA-256 of its canonical JWK).
    pub fn key_id(&self) -> &str {
        &self.kid
    }

    /// The public key: 32 raw bytes for Ed25519, the 65-byte uncompressed point for P-256.
    pub fn public_key(&self) -> &[u8] {
        match &self.pair {
            Pair::Ed(p) => p.public_key().as_ref(),
            Pair::P256(p) => p.public_key().as_ref(),
        }
    }

    /// The public key as a JWK (RFC 7517; RFC 8037 for Ed25519), what a C-PS is configured
    /// with.
    pub fn jwk(&self) -> String {
        let alg = self.algorithm();
        let members = public_jwk_members(alg, self.public_key()).expect("our own key");
        // The canonical members plus kid, alg and use.
        format!(
            "{},\"kid\":\"{}\",\"alg\":\"{}\",\"use\":\"sig\"}}",
            members.trim_end_matches('}'),
            self.kid,
            alg.jws_alg()
        )
    }

    /// The detached compact JWS (`header..signature`) over `body` bound to `req`.
    pub fn sign(&self, req: &RequestBinding, body: &[u8]) -> String {
        let protected = Protected {
            alg: self.algorithm().jws_alg().into(),
            kid: self.kid.clone(),
            crit: vec![CRIT.into()],
            req: req.clone(),
        };
        let header = Base64UrlUnpadded::encode_string(&serde_json::to_vec(&protected).expect("serialises"));
        let input = signing_input(&header, body);
        let sig = match &self.pair {
            Pair::Ed(p) => p.sign(&input).as_ref().to_vec(),
            // FIXED: r || s, 64 bytes, as JWS ES256 requires (RFC 7518 section 3.4).
            Pair::P256(p) => p.sign(&SystemRandom::new(), &input).expect("ECDSA signing").as_ref().to_vec(),
        };
        format!("{header}..{}", Base64UrlUnpadded::encode_string(&sig))
    }
}

fn generate(alg: Algorithm) -> io::Result<Vec<u8>> {
    let rng = SystemRandom::new();
    match alg {
        Algorithm::Ed25519 => Ed25519KeyPair::generate_pkcs8(&rng)
            .map(|d| d.as_ref().to_vec())
            .map_err(|_| io::Error::other("cannot generate an Ed25519 key")),
        Algorithm::EcdsaP256 => EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map(|d| d.as_ref().to_vec())
            .map_err(|_| io::Error::other("cannot generate a P-256 key")),
    }
}

/// The RFC 7638 required members of the public JWK, in lexicographic order, no whitespace.
fn public_jwk_members(alg: Algorithm, public: &[u8]) -> Option<String> {
    let b64 = Base64UrlUnpadded::encode_string;
    match alg {
        Algorithm::Ed25519 => {
            (public.len() == 32).then(|| format!("{{\"crv\":\"Ed25519\",\"kty\":\"OKP\",\"x\":\"{}\"}}", b64(public)))
        }
        Algorithm::EcdsaP256 => {
            if public.len() != 65 || public[0] != 4 {
                return None;
            }
            Some(format!(
                "{{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"{}\",\"y\":\"{}\"}}",
                b64(&public[1..33]),
                b64(&public[33..])
            ))
        }
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

/// RFC 7638: base64url SHA-256 of the canonical members.
fn thumbprint(canonical: &str) -> String {
    Base64UrlUnpadded::encode_string(&Sha256::digest(canonical.as_bytes()))
}

/// A public key a verifier trusts: its algorithm and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedKey {
    pub algorithm: Algorithm,
    pub public: Vec<u8>,
}

/// A trusted public key, by its key id: either the raw Ed25519 key in base64url (a JWK's
/// `x`), or a whole public JWK (`{"kty":"OKP","crv":"Ed25519","x":…}` or
/// `{"kty":"EC","crv":"P-256","x":…,"y":…}`, as `c-ps/signing-key/jwk` shows it).
pub fn trusted_key(text: &str) -> Result<(String, TrustedKey), String> {
    let text = text.trim();
    let decode = |v: Option<&serde_json::Value>, what: &str| -> Result<Vec<u8>, String> {
        let s = v.and_then(|v| v.as_str()).ok_or_else(|| format!("public key: the JWK has no {what}"))?;
        Base64UrlUnpadded::decode_vec(s).map_err(|_| format!("public key: {what} is not base64url"))
    };
    let (algorithm, public) = if text.starts_with('{') {
        let jwk: serde_json::Value = serde_json::from_str(text).map_err(|_| "public key: not a JWK".to_owned())?;
        if jwk.get("d").is_some() {
            return Err("public key: the JWK holds a private key".into());
        }
        match (jwk.get("kty").and_then(|v| v.as_str()), jwk.get("crv").and_then(|v| v.as_str())) {
            (Some("OKP"), Some("Ed25519")) => (Algorithm::Ed25519, decode(jwk.get("x"), "x")?),
            (Some("EC"), Some("P-256")) => {
                let (x, y) = (decode(jwk.get("x"), "x")?, decode(jwk.get("y"), "y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err("public key: a P-256 JWK has 32-byte x and y".into());
                }
                (Algorithm::EcdsaP256, [&[4u8][..], &x, &y].concat())
            }
            _ => return Err("public key: only Ed25519 (OKP) and P-256 (EC) JWKs are supported".into()),
        }
    } else {
        let raw = Base64UrlUnpadded::decode_vec(text).map_err(|_| "public key: not base64url".to_owned())?;
        (Algorithm::Ed25519, raw)
    };
    let members = public_jwk_members(algorithm, &public).ok_or_else(|| match algorithm {
        Algorithm::Ed25519 => format!("public key: {} bytes, an Ed25519 key has 32", public.len()),
        Algorithm::EcdsaP256 => "public key: not an uncompressed P-256 point".to_owned(),
    })?;
    if algorithm == Algorithm::EcdsaP256 {
        aws_lc_rs::signature::ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public)
            .map_err(|_| "public key: not a point on P-256".to_owned())?;
    }
    Ok((thumbprint(&members), TrustedKey { algorithm, public }))
}

/// The verifying side: trusted keys by key id and the freshness rules.
pub struct JwsVerifier {
    keys: HashMap<String, TrustedKey>,
    fresh: Freshness,
}

impl JwsVerifier {
    pub fn new(keys: impl IntoIterator<Item = (String, TrustedKey)>, window_ms: i64) -> JwsVerifier {
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
        if !matches!(p.alg.as_str(), "EdDSA" | "ES256") || p.crit != [CRIT] {
            return Err(AuthError::MalformedHeader(H_JWS));
        }
        let sig = Base64UrlUnpadded::decode_vec(sig).map_err(|_| AuthError::MalformedHeader(H_JWS))?;
        let key = self.keys.get(&p.kid).ok_or_else(|| AuthError::UnknownKey(p.kid.clone()))?;
        // The key decides the algorithm; a header naming another one does not verify.
        if p.alg != key.algorithm.jws_alg() {
            return Err(AuthError::BadSignature);
        }
        let input = signing_input(header, body);
        let ok = match key.algorithm {
            Algorithm::Ed25519 => UnparsedPublicKey::new(&ED25519, &key.public).verify(&input, &sig),
            Algorithm::EcdsaP256 => UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &key.public).verify(&input, &sig),
        };
        ok.map_err(|_| AuthError::BadSignature)?;
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
    fn seed_metric_integrity_es256_signed_verified_and_the_key_fixes_the_algorithm() {
        let k = SigningKey::ephemeral_with(Algorithm::EcdsaP256);
        assert_eq!(k.public_key().len(), 65);
        let jwk: serde_json::Value = serde_json::from_str(&k.jwk()).unwrap();
        assert_eq!(
            (jwk["kty"].as_str(), jwk["crv"].as_str(), jwk["alg"].as_str()),
            (Some("EC"), Some("P-256"), Some("ES256"))
        );
        // The C-PS is configured with the whole JWK, as the agent shows it.
        let (kid, trusted) = trusted_key(&k.jwk()).unwrap();
        assert_eq!(kid, k.key_id());
        assert_eq!(trusted.algorithm, Algorithm::EcdsaP256);
        let mut v = JwsVerifier::new([(kid, trusted)], 30_000);
        let now = 1_700_000_000_000;
        let jws = k.sign(&binding(1, now), b"{}");
        // Raw r || s, 64 bytes (RFC 7518 section 3.4), not DER.
        let sig = Base64UrlUnpadded::decode_vec(jws.split_once("..").unwrap().1).unwrap();
        assert_eq!(sig.len(), 64);
        assert_eq!(v.verify("POST", "/cats/metrics", "c1", Some(&jws), b"{ }", now), Err(AuthError::BadSignature));
        assert_eq!(v.verify("POST", "/cats/metrics", "c1", Some(&jws), b"{}", now), Ok(()));
        // A header that names EdDSA for this key id never verifies (no algorithm switch).
        let (h, s) = jws.split_once("..").unwrap();
        let mut p: serde_json::Value = serde_json::from_slice(&Base64UrlUnpadded::decode_vec(h).unwrap()).unwrap();
        p["alg"] = "EdDSA".into();
        p["cats-req"]["nonce"] = 2.into();
        let switched = format!("{}..{s}", Base64UrlUnpadded::encode_string(p.to_string().as_bytes()));
        assert_eq!(v.verify("POST", "/cats/metrics", "c1", Some(&switched), b"{}", now), Err(AuthError::BadSignature));
        // Keys a C-PS must not accept: a private JWK, another curve, a point off the curve.
        let mut private = jwk.clone();
        private["d"] = "AAAA".into();
        assert!(trusted_key(&private.to_string()).unwrap_err().contains("private"));
        let mut p384 = jwk.clone();
        p384["crv"] = "P-384".into();
        assert!(trusted_key(&p384.to_string()).is_err());
        let mut off = jwk.clone();
        off["y"] = Base64UrlUnpadded::encode_string(&[7u8; 32]).into();
        assert!(trusted_key(&off.to_string()).unwrap_err().contains("P-256"));
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
