//! The public keys that verify SCI tokens signed with RS256, ES256 or EdDSA: a JWK Set file
//! (RFC 7517) named by a `jwt` credential, each key selected by its `kid`.
//!
//! The file is re-read when it changes (its modification time, size or inode, looked at
//! every [`POLL`] by a watcher thread that lives as long as the keys are in use) and
//! whenever a commit builds a new authentication table. A file that cannot be read or parsed keeps the keys read
//! before and logs an error, so a half-written file never locks the SCIs out. Every table
//! naming the same path shares one [`Jwks`], so a commit that rebuilds the table keeps the
//! keys of the one before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

/// How often the watcher looks at the file's metadata.
pub const POLL: Duration = Duration::from_secs(1);
/// Largest JWKS file read.
pub const MAX_FILE: u64 = 1 << 20;
/// Most keys kept from one file.
pub const MAX_KEYS: usize = 256;

/// One trusted public key: the only algorithm it verifies follows from its key type (RSA:
/// RS256, EC P-256: ES256, OKP Ed25519: EdDSA), so no key serves two algorithms.
#[derive(Clone)]
pub struct TrustedKey {
    pub kid: String,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

impl std::fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedKey").field("kid", &self.kid).field("alg", &self.alg).finish_non_exhaustive()
    }
}

/// What a file was when it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    dev: u64,
    ino: u64,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp { modified: m.modified().ok(), len: m.len(), dev: m.dev(), ino: m.ino() }
    }
}

#[derive(Debug)]
struct State {
    keys: Arc<[TrustedKey]>,
    /// The file as last read successfully or found unreadable (so an unreadable file is
    /// reported once per change, not once per message).
    stamp: Option<Stamp>,
}

/// The keys of one JWKS file.
#[derive(Debug)]
pub struct Jwks {
    path: PathBuf,
    state: RwLock<State>,
}

/// The open files, so that every table naming a path shares its keys.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<Jwks>>>> = Mutex::new(None);

impl Jwks {
    /// The keys of `path`, shared with every other table naming it, re-read now.
    pub fn open(path: &Path) -> Arc<Jwks> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        open.retain(|_, w| w.strong_count() > 0);
        if let Some(j) = open.get(path).and_then(Weak::upgrade) {
            j.reload(true);
            return j;
        }
        let j = Arc::new(Jwks {
            path: path.to_owned(),
            state: RwLock::new(State { keys: Arc::from(Vec::new()), stamp: None }),
        });
        j.reload(true);
        open.insert(path.to_owned(), Arc::downgrade(&j));
        // The watcher holds the keys weakly: it ends once no table uses them.
        let weak = Arc::downgrade(&j);
        let spawned = std::thread::Builder::new().name("jwks-watch".into()).spawn(move || loop {
            std::thread::sleep(POLL);
            match weak.upgrade() {
                Some(j) => j.reload(false),
                None => return,
            }
        });
        if let Err(e) = spawned {
            tracing::error!(file = %path.display(), "JWKS file will be re-read on commit only: no watcher thread: {e}");
        }
        j
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current keys.
    pub fn keys(&self) -> Arc<[TrustedKey]> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).keys.clone()
    }

    /// Re-reads the file if it changed since it was last looked at (or always, when `force`).
    fn reload(&self, force: bool) {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        let shown = self.path.display();
        let meta = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) => {
                if force || st.stamp.is_some() {
                    tracing::error!(file = %shown, "JWKS file unreadable, keeping the {} keys read before: {e}", st.keys.len());
                }
                st.stamp = None;
                return;
            }
        };
        let stamp = Stamp::of(&meta);
        if !force && st.stamp == Some(stamp) {
            return;
        }
        st.stamp = Some(stamp);
        match read(&self.path).and_then(|text| parse(&text)) {
            Ok((keys, skipped)) => {
                for s in &skipped {
                    tracing::warn!(file = %shown, "JWKS key skipped: {s}");
                }
                tracing::info!(file = %shown, keys = keys.len(), "JWKS file read");
                st.keys = Arc::from(keys);
            }
            Err(e) => {
                tracing::error!(file = %shown, "JWKS file not usable, keeping the {} keys read before: {e}", st.keys.len())
            }
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    f.take(MAX_FILE + 1).read_to_end(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_FILE {
        return Err(format!("larger than {MAX_FILE} bytes"));
    }
    Ok(text)
}

/// The usable keys of a JWK Set document, and why each other key was skipped. Fails only
/// when the document is not a JWK Set.
pub fn parse(text: &[u8]) -> Result<(Vec<TrustedKey>, Vec<String>), String> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(text).map_err(|e| format!("not a JWK Set (RFC 7517, 5): {e}"))?;
    let (mut keys, mut skipped) = (Vec::new(), Vec::new());
    for (i, v) in set.keys.into_iter().enumerate() {
        if keys.len() == MAX_KEYS {
            skipped.push(format!("keys after the first {MAX_KEYS} are ignored"));
            break;
        }
        match trusted(v) {
            Ok(k) => keys.push(k),
            Err(e) => skipped.push(format!("key #{i}: {e}")),
        }
    }
    Ok((keys, skipped))
}

/// One JWK as a trusted key, if it is a public signature key we can use.
fn trusted(v: serde_json::Value) -> Result<TrustedKey, String> {
    let jwk: Jwk = serde_json::from_value(v).map_err(|e| format!("not a JWK: {e}"))?;
    let kid = jwk.common.key_id.clone().filter(|k| !k.is_empty()).ok_or("no kid")?;
    let kid_shown = crate::text::printable(&kid, 64);
    if matches!(&jwk.common.public_key_use, Some(u) if *u != PublicKeyUse::Signature) {
        return Err(format!("{kid_shown}: \"use\" is not \"sig\""));
    }
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => Algorithm::EdDSA,
        AlgorithmParameters::OctetKey(_) => {
            return Err(format!(
                "{kid_shown}: symmetric (oct) keys are not taken from a JWKS; HS256 uses the credential's key"
            ))
        }
        _ => return Err(format!("{kid_shown}: not an RSA, EC P-256 or Ed25519 key")),
    };
    let declared = jwk.common.key_algorithm;
    let fits = match declared {
        None => true,
        Some(KeyAlgorithm::RS256) => alg == Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => alg == Algorithm::ES256,
        Some(KeyAlgorithm::EdDSA) => alg == Algorithm::EdDSA,
        Some(_) => false,
    };
    if !fits {
        return Err(format!(
            "{kid_shown}: \"alg\" {declared:?} is not {alg:?}, the only algorithm of its key type here"
        ));
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("{kid_shown}: {e}"))?;
    Ok(TrustedKey { kid, alg, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_typed_by_their_key_type_and_bad_ones_skipped() {
        let text = br#"{"keys":[
            {"kty":"EC","crv":"P-256","kid":"ec1","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"OKP","crv":"Ed25519","kid":"ed1","alg":"EdDSA","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"oct","kid":"sym","k":"c2VjcmV0"},
            {"kty":"EC","crv":"P-256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"OKP","crv":"Ed25519","kid":"ed2","alg":"RS256","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"OKP","crv":"Ed25519","kid":"enc","use":"enc","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"XYZ","kid":"odd"}
        ]}"#;
        let (keys, skipped) = parse(text).unwrap();
        let got: Vec<(&str, Algorithm)> = keys.iter().map(|k| (k.kid.as_str(), k.alg)).collect();
        assert_eq!(got, [("ec1", Algorithm::ES256), ("ed1", Algorithm::EdDSA)]);
        assert_eq!(skipped.len(), 5, "{skipped:?}");
        assert!(skipped[0].contains("symmetric"), "{skipped:?}");
        assert!(parse(b"[]").is_err());
        assert!(parse(b"{\"keys\":[]}").unwrap().0.is_empty());
    }

    #[test]
    fn a_changed_file_is_reread_and_an_unreadable_one_keeps_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let one =
            r#"{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#;
        std::fs::write(&path, one).unwrap();
        let j = Jwks::open(&path);
        assert_eq!(j.keys().len(), 1);
        // Garbage: the keys read before stay.
        std::fs::write(&path, "{not json").unwrap();
        let again = Jwks::open(&path);
        assert!(Arc::ptr_eq(&j, &again), "one Jwks per path");
        assert_eq!(j.keys()[0].kid, "a");
        // Gone: still the same keys.
        std::fs::remove_file(&path).unwrap();
        j.reload(true);
        assert_eq!(j.keys()[0].kid, "a");
        // A new key set replaces them: on commit (forced), or when the watcher sees the
        // file change (the same reload behind a metadata check).
        std::fs::write(&path, one.replace("\"a\"", "\"b\"")).unwrap();
        j.reload(false);
        assert_eq!(j.keys()[0].kid, "b");
        std::fs::write(&path, one.replace("\"a\"", "\"c\"")).unwrap();
        j.reload(true);
        assert_eq!(j.keys()[0].kid, "c");
    }
}
