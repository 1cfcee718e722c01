//! The users of the management interfaces (NETCONF over SSH now, RESTCONF later): argon2
//! password hashes and OpenSSH public keys. Clear-text passwords are never stored.

use std::collections::HashMap;
use std::sync::Arc;

use argon2::password_hash::{CustomizedPasswordHasher, PasswordHasher, PasswordVerifier};
use argon2::{Argon2, PasswordHash};
use russh::keys::PublicKey;

use crate::config::UserEntry;

/// Hashes a password into a PHC string (argon2id, random salt).
pub fn hash_password(password: &str) -> Result<String, String> {
    Argon2::default().hash_password(password.as_bytes()).map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// Checks that a string is a PHC hash argon2 can verify against.
pub fn check_hash(hash: &str) -> Result<(), String> {
    if !hash.starts_with("$argon2") {
        return Err("not an argon2 PHC string (use `cats-sma hash-password`)".into());
    }
    // Verifying any password parses the hash; a parse failure is reported differently from
    // a mismatch.
    match Argon2::default().verify_password(b"", hash) {
        Ok(()) | Err(argon2::password_hash::Error::PasswordInvalid) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `password` matches the PHC `hash` (argon2 with the hash's own parameters).
pub fn verify_hash(password: &str, hash: &str) -> bool {
    Argon2::default().verify_password(password.as_bytes(), hash).is_ok()
}

/// A hash of a password nobody knows, with the algorithm and parameters of `like`, so
/// verifying against it costs what verifying against `like` costs.
fn dummy_like(like: &str) -> Option<String> {
    let ph = PasswordHash::new(like).ok()?;
    let params = argon2::Params::try_from(&ph).ok()?;
    let salt: [u8; 16] = rand::random();
    let secret: [u8; 32] = rand::random();
    Argon2::default()
        .hash_password_customized(&secret, &salt, Some(ph.algorithm.as_str()), ph.version, params)
        .ok()
        .map(|h| h.to_string())
}

/// Parses one authorized_keys-style line: `type base64 [comment]`.
pub fn parse_authorized_key(line: &str) -> Result<PublicKey, String> {
    let mut parts = line.split_whitespace();
    let (Some(_kind), Some(b64)) = (parts.next(), parts.next()) else {
        return Err("expected \"<type> <base64> [comment]\"".into());
    };
    russh::keys::parse_public_key_base64(b64).map_err(|e| e.to_string())
}

#[derive(Clone, Debug, Default)]
struct User {
    password_hash: Option<Arc<str>>,
    keys: Vec<PublicKey>,
}

/// Who may log in, and how.
#[derive(Clone, Debug, Default)]
pub struct UserStore {
    users: HashMap<String, User>,
}

impl UserStore {
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a UserEntry>) -> Result<UserStore, String> {
        let mut users = HashMap::new();
        for e in entries {
            let keys = e.authorized_keys.iter().map(|k| parse_authorized_key(k)).collect::<Result<Vec<_>, _>>()?;
            if let Some(h) = &e.password_hash {
                check_hash(h)?;
            }
            let u: &mut User = users.entry(e.name.clone()).or_default();
            if let Some(h) = &e.password_hash {
                u.password_hash = Some(h.as_str().into());
            }
            u.keys.extend(keys);
        }
        Ok(UserStore { users })
    }

    pub fn contains(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.users.keys().map(String::as_str)
    }

    /// The user's password hash, if the user exists and has a password.
    pub fn password_hash(&self, user: &str) -> Option<Arc<str>> {
        self.users.get(user).and_then(|u| u.password_hash.clone())
    }

    /// The hash an unknown user's password is checked against: made with the parameters
    /// most configured hashes use (the generated admin's at least), so unknown and known
    /// users cost the same argon2 run.
    pub fn dummy_hash(&self) -> String {
        let mut by_params: HashMap<String, (usize, &str)> = HashMap::new();
        for h in self.users.values().filter_map(|u| u.password_hash.as_deref()) {
            let params = h.rsplitn(3, '$').nth(2).unwrap_or(h).to_owned();
            by_params.entry(params).or_insert((0, h)).0 += 1;
        }
        let mut most: Vec<(usize, &str)> = by_params.into_values().collect();
        most.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        most.first()
            .and_then(|(_, h)| dummy_like(h))
            .unwrap_or_else(|| hash_password(&hex(&rand::random::<[u8; 32]>())).unwrap_or_default())
    }

    /// Verifies a password right here (blocking; the listeners go through
    /// [`crate::mgmt::auth_limits::PasswordPool`] instead). Unknown users still cost one hash.
    pub fn verify_password(&self, user: &str, password: &str) -> bool {
        match self.password_hash(user) {
            Some(h) => verify_hash(password, &h),
            None => {
                verify_hash(password, &self.dummy_hash());
                false
            }
        }
    }

    /// Whether `key` is one of the user's authorized keys.
    pub fn accepts_key(&self, user: &str, key: &PublicKey) -> bool {
        self.users.get(user).is_some_and(|u| u.keys.iter().any(|k| k.key_data() == key.key_data()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_round_trip_and_unknown_user() {
        let h = hash_password("s3cret").unwrap();
        check_hash(&h).unwrap();
        let store = UserStore::from_entries(&[UserEntry {
            name: "admin".into(),
            password_hash: Some(h),
            authorized_keys: vec![],
        }])
        .unwrap();
        assert!(store.verify_password("admin", "s3cret"));
        assert!(!store.verify_password("admin", "wrong"));
        assert!(!store.verify_password("nobody", "s3cret"));
    }

    #[test]
    fn the_dummy_hash_has_the_parameters_of_the_configured_ones() {
        let cheap = Argon2::new(
            argon2::Algorithm::Argon2id,
            argon2::Version::V0x13,
            argon2::Params::new(8, 1, 1, None).unwrap(),
        );
        let h = cheap.hash_password(b"pw").unwrap().to_string();
        let store = UserStore::from_entries(&[UserEntry {
            name: "a".into(),
            password_hash: Some(h.clone()),
            authorized_keys: vec![],
        }])
        .unwrap();
        let d = store.dummy_hash();
        assert!(d.starts_with("$argon2id$v=19$m=8,t=1,p=1$"), "{d} like {h}");
        assert_ne!(d, h);
        assert!(!verify_hash("pw", &d));
    }

    #[test]
    fn authorized_keys_are_parsed_and_matched() {
        let key = russh::keys::PrivateKey::random(&mut rand::rng(), russh::keys::Algorithm::Ed25519).unwrap();
        let line = key.public_key().to_openssh().unwrap();
        let store = UserStore::from_entries(&[UserEntry {
            name: "ops".into(),
            password_hash: None,
            authorized_keys: vec![format!("{line} ops@example")],
        }])
        .unwrap();
        assert!(store.accepts_key("ops", key.public_key()));
        assert!(!store.accepts_key("admin", key.public_key()));
        assert!(parse_authorized_key("garbage").is_err());
    }
}
