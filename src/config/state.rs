//! The state directory: created on first start (mode 0700), it keeps the SSH host key
//! (generated once), the generated admin credential and the startup datastore.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::RngExt;
use russh::keys::{Algorithm, PrivateKey};
use serde::{Deserialize, Serialize};

use super::UserEntry;
use crate::datastore::persist::write_atomic;

/// Environment variable holding the initial admin password for unattended starts.
pub const ADMIN_PASSWORD_ENV: &str = "CATS_SMA_ADMIN_PASSWORD";
pub const ADMIN_USER: &str = "admin";

pub struct StateDir {
    pub path: PathBuf,
}

/// What the first start created, to tell the operator.
pub struct FirstStart {
    /// The generated password, when none came from the environment.
    pub generated_password: Option<String>,
}

#[derive(Serialize, Deserialize, Default)]
struct CredentialsFile {
    #[serde(default)]
    users: Vec<StoredUser>,
}

#[derive(Serialize, Deserialize)]
struct StoredUser {
    name: String,
    password_hash: Option<String>,
    #[serde(default)]
    authorized_keys: Vec<String>,
}

impl StateDir {
    /// Creates the directory (and parents) if needed, private to the agent's user.
    pub fn open(path: &Path) -> io::Result<StateDir> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(path)?;
        Ok(StateDir { path: path.to_owned() })
    }

    pub fn startup_file(&self) -> PathBuf {
        self.path.join("startup.xml")
    }

    pub fn host_key_file(&self) -> PathBuf {
        self.path.join("ssh_host_ed25519_key")
    }

    fn credentials_file(&self) -> PathBuf {
        self.path.join("credentials.toml")
    }

    /// The SSH host key: loaded, or generated once and kept (clients pin it).
    pub fn host_key(&self) -> io::Result<PrivateKey> {
        let path = self.host_key_file();
        match fs::read_to_string(&path) {
            Ok(text) => PrivateKey::from_openssh(text.as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519)
                    .map_err(|e| io::Error::other(e.to_string()))?;
                let text = key
                    .to_openssh(russh::keys::ssh_key::LineEnding::LF)
                    .map_err(|e| io::Error::other(e.to_string()))?;
                write_private(&path, text.as_bytes())?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
    }

    /// The stored users; on the very first start, creates `admin` with the password from
    /// [`ADMIN_PASSWORD_ENV`] or a random one (returned so it can be shown once).
    pub fn credentials(&self) -> io::Result<(Vec<UserEntry>, Option<FirstStart>)> {
        let path = self.credentials_file();
        let (file, first) = match fs::read_to_string(&path) {
            Ok(text) => {
                let f: CredentialsFile = toml::from_str(&text)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
                (f, None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let (password, generated) = match std::env::var(ADMIN_PASSWORD_ENV) {
                    Ok(p) if !p.is_empty() => (p, false),
                    _ => (random_password(), true),
                };
                let hash = crate::users::hash_password(&password).map_err(io::Error::other)?;
                let f = CredentialsFile {
                    users: vec![StoredUser {
                        name: ADMIN_USER.into(),
                        password_hash: Some(hash),
                        authorized_keys: vec![],
                    }],
                };
                let text = toml::to_string(&f).map_err(|e| io::Error::other(e.to_string()))?;
                write_private(&path, text.as_bytes())?;
                (f, Some(FirstStart { generated_password: generated.then_some(password) }))
            }
            Err(e) => return Err(e),
        };
        let users = file
            .users
            .into_iter()
            .map(|u| UserEntry { name: u.name, password_hash: u.password_hash, authorized_keys: u.authorized_keys })
            .collect();
        Ok((users, first))
    }
}

pub(crate) fn write_private(path: &Path, content: &[u8]) -> io::Result<()> {
    write_atomic(path, content)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
}

/// 20 characters from an unambiguous alphabet (~115 bits).
fn random_password() -> String {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let mut rng = rand::rng();
    (0..20).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_key_is_generated_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateDir::open(&dir.path().join("st")).unwrap();
        let k1 = s.host_key().unwrap();
        let k2 = s.host_key().unwrap();
        assert_eq!(k1.public_key(), k2.public_key());
        let mode = fs::metadata(s.host_key_file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(fs::metadata(&s.path).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn first_start_creates_admin_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = StateDir::open(dir.path()).unwrap();
        let (users, first) = s.credentials().unwrap();
        assert_eq!(users.len(), 1);
        assert_eq!(users[0].name, ADMIN_USER);
        let first = first.expect("first start");
        let (users2, again) = s.credentials().unwrap();
        assert!(again.is_none());
        assert_eq!(users, users2);
        if let Some(pw) = first.generated_password {
            let store = crate::users::UserStore::from_entries(&users).unwrap();
            assert!(store.verify_password(ADMIN_USER, &pw));
        }
    }
}
