//! The users of the management interfaces (NETCONF over SSH now, RESTCONF later): argon2
//! password hashes and OpenSSH public keys. Clear-text passwords are never stored.

use std::collections::HashMap;
use std::sync::OnceLock;

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::Argon2;
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
    password_hash: Option<String>,
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
            if e.password_hash.is_some() {
                u.password_hash = e.password_hash.clone();
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

    /// Verifies a password. Unknown users still cost one hash so timing does not reveal
    /// which user names exist.
    pub fn verify_password(&self, user: &str, password: &str) -> bool {
        static DUMMY: OnceLock<String> = OnceLock::new();
        let (hash, known) = match self.users.get(user).and_then(|u| u.password_hash.as_deref()) {
            Some(h) => (h, true),
            None => (DUMMY.get_or_init(|| hash_password("no such user").unwrap_or_default()).as_str(), false),
        };
        let ok = Argon2::default().verify_password(password.as_bytes(), hash).is_ok();
        ok && known
    }

    /// Whether `key` is one of the user's authorized keys.
    pub fn accepts_key(&self, user: &str, key: &PublicKey) -> bool {
        self.users.get(user).is_some_and(|u| u.keys.iter().any(|k| k.key_data() == key.key_data()))
    }
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
