//! Who a request is from (RFC 8040 section 2.5): a verified TLS client certificate mapped
//! to a user, or HTTP Basic credentials checked against the same users (and argon2 hashes)
//! as NETCONF. argon2 is deliberately slow, so at most one check per core runs at a time,
//! and a successful check is remembered for a while (as a salted SHA-256 of the password,
//! never the password) so that a client sending the same credentials on every request
//! does not pay argon2 each time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64ct::Encoding as _;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::users::UserStore;

/// How long a verified password is remembered.
const REMEMBER: Duration = Duration::from_secs(300);
/// Remembered credentials kept at most (oldest forgotten first when full).
const MAX_REMEMBERED: usize = 1024;

pub struct Authenticator {
    users: UserStore,
    salt: [u8; 16],
    remembered: Mutex<HashMap<String, ([u8; 32], Instant)>>,
    argon2_slots: Arc<Semaphore>,
}

/// The user and password of an `Authorization: Basic` header.
pub fn parse_basic(header: &str) -> Option<(String, String)> {
    let (scheme, rest) = header.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64ct::Base64::decode_vec(rest.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

impl Authenticator {
    pub fn new(users: UserStore) -> Authenticator {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Authenticator {
            users,
            salt: rand::random(),
            remembered: Mutex::new(HashMap::new()),
            argon2_slots: Arc::new(Semaphore::new(cores)),
        }
    }

    fn digest(&self, password: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.salt);
        h.update(password.as_bytes());
        h.finalize().into()
    }

    /// Checks Basic credentials; the user name when they are right.
    pub async fn basic(&self, header: &str) -> Option<String> {
        let (user, password) = parse_basic(header)?;
        if !self.users.contains(&user) {
            return None;
        }
        let digest = self.digest(&password);
        {
            let remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((d, at)) = remembered.get(&user) {
                if *d == digest && at.elapsed() < REMEMBER {
                    return Some(user);
                }
            }
        }
        let permit = self.argon2_slots.clone().acquire_owned().await.ok()?;
        let users = self.users.clone();
        let (u, p) = (user.clone(), password);
        let ok = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            users.verify_password(&u, &p)
        })
        .await
        .unwrap_or(false);
        if !ok {
            return None;
        }
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.len() >= MAX_REMEMBERED {
            if let Some(oldest) = remembered.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone()) {
                remembered.remove(&oldest);
            }
        }
        remembered.insert(user.clone(), (digest, Instant::now()));
        Some(user)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_header() {
        assert_eq!(parse_basic("Basic YWRtaW46cHc6eA=="), Some(("admin".into(), "pw:x".into())));
        assert_eq!(parse_basic("Bearer abc"), None);
        assert_eq!(parse_basic("Basic !!!"), None);
    }

    #[tokio::test]
    async fn password_checked_and_remembered_only_when_right() {
        let hash = crate::users::hash_password("secret").unwrap();
        let users = UserStore::from_entries(&[crate::config::UserEntry {
            name: "bob".into(),
            password_hash: Some(hash),
            authorized_keys: vec![],
        }])
        .unwrap();
        let a = Authenticator::new(users);
        let good = format!("Basic {}", base64ct::Base64::encode_string(b"bob:secret"));
        let bad = format!("Basic {}", base64ct::Base64::encode_string(b"bob:wrong"));
        assert_eq!(a.basic(&good).await.as_deref(), Some("bob"));
        assert_eq!(a.basic(&bad).await, None, "a remembered user still needs the right password");
        assert_eq!(a.basic(&good).await.as_deref(), Some("bob"));
    }
}
