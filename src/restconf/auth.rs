//! Who a request is from (RFC 8040 section 2.5): a verified TLS client certificate mapped
//! to a user, or HTTP Basic credentials checked against the same users (and argon2 hashes)
//! as NETCONF, through the password pool shared with SSH
//! ([`crate::mgmt::auth_limits::PasswordPool`]: bounded workers and queue, per-source
//! back-off, unknown users hashed like known ones). A successful check is remembered for a
//! while (as a salted SHA-256 of user and password, never the password) so that a client
//! sending the same credentials on every request does not pay argon2 each time. The lookup
//! is the same for every user name, known or not, and only right credentials are ever
//! remembered, so the cache answers fast only to someone who already knows the password.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64ct::Encoding as _;
use sha2::{Digest, Sha256};

use crate::mgmt::auth_limits::{Limits, Verdict};
use crate::mgmt::users::UserStore;

/// How long a verified password is remembered.
const REMEMBER: Duration = Duration::from_secs(300);
/// Remembered credentials kept at most (oldest forgotten first when full).
const MAX_REMEMBERED: usize = 1024;

pub struct Authenticator {
    users: UserStore,
    salt: [u8; 16],
    remembered: Mutex<HashMap<String, ([u8; 32], Instant)>>,
    limits: Arc<Limits>,
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
    pub fn new(users: UserStore, limits: Arc<Limits>) -> Authenticator {
        Authenticator { users, salt: rand::random(), remembered: Mutex::new(HashMap::new()), limits }
    }

    fn digest(&self, user: &str, password: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(self.salt);
        h.update((user.len() as u64).to_be_bytes());
        h.update(user.as_bytes());
        h.update(password.as_bytes());
        h.finalize().into()
    }

    /// Checks Basic credentials from `peer`; the user name when they are right.
    pub async fn basic(&self, header: &str, peer: Option<SocketAddr>) -> Option<String> {
        let (user, password) = parse_basic(header)?;
        let digest = self.digest(&user, &password);
        {
            let remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((d, at)) = remembered.get(&user) {
                if constant_time_eq(d, &digest) && at.elapsed() < REMEMBER {
                    return Some(user);
                }
            }
        }
        let verdict = self.limits.passwords.check(&self.users, &user, &password, peer, "restconf").await;
        if verdict != Verdict::Accepted {
            return None;
        }
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.len() >= MAX_REMEMBERED && !remembered.contains_key(&user) {
            if let Some(oldest) = remembered.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone()) {
                remembered.remove(&oldest);
            }
        }
        remembered.insert(user.clone(), (digest, Instant::now()));
        Some(user)
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
        let hash = crate::mgmt::users::hash_password("secret").unwrap();
        let users = UserStore::from_entries(&[crate::config::UserEntry {
            name: "bob".into(),
            password_hash: Some(hash),
            authorized_keys: vec![],
        }])
        .unwrap();
        let limits = Limits::new(Default::default(), &users);
        let a = Authenticator::new(users, limits);
        let good = format!("Basic {}", base64ct::Base64::encode_string(b"bob:secret"));
        let bad = format!("Basic {}", base64ct::Base64::encode_string(b"bob:wrong"));
        assert_eq!(a.basic(&good, None).await.as_deref(), Some("bob"));
        assert_eq!(a.basic(&bad, None).await, None, "a remembered user still needs the right password");
        assert_eq!(a.basic(&good, None).await.as_deref(), Some("bob"));
    }
}
