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
    /// What [`StateDir::open`] had to tighten (path, old mode), for the audit trail.
    pub tightened: Vec<(PathBuf, u32)>,
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
    /// Creates the directory (and parents) if needed, private to the agent's user, and
    /// makes sure it stays private: the directory 0700 and every file in it 0600, tightened
    /// (and reported in the log and the audit trail) when someone loosened them. A symlink
    /// in the directory is refused: the agent never writes a secret through one.
    pub fn open(path: &Path) -> io::Result<StateDir> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(path)?;
        let mut dir = StateDir { path: path.to_owned(), tightened: Vec::new() };
        dir.tightened = dir.enforce_modes()?;
        Ok(dir)
    }

    /// Tightens the modes of the directory and its files; returns what it changed.
    pub fn enforce_modes(&self) -> io::Result<Vec<(PathBuf, u32)>> {
        let mut changed = Vec::new();
        let meta = fs::symlink_metadata(&self.path)?;
        if meta.file_type().is_symlink() || !meta.is_dir() {
            return Err(io::Error::other(format!("{} is not a directory", self.path.display())));
        }
        tighten(&self.path, meta.permissions().mode(), 0o700, &mut changed)?;
        for e in fs::read_dir(&self.path)? {
            let e = e?;
            let p = e.path();
            let m = fs::symlink_metadata(&p)?;
            if m.file_type().is_symlink() {
                return Err(io::Error::other(format!(
                    "{} is a symbolic link: the state directory holds secrets and must hold only regular files",
                    p.display()
                )));
            }
            let want = if m.is_dir() { 0o700 } else { 0o600 };
            tighten(&p, m.permissions().mode(), want, &mut changed)?;
        }
        for (p, old) in &changed {
            tracing::warn!("state directory: {} had mode {:o}; tightened", p.display(), old & 0o7777);
        }
        Ok(changed)
    }

    /// Writes what [`StateDir::open`] tightened into the audit trail (once it is open).
    pub fn audit_tightened(&self) {
        for (p, old) in &self.tightened {
            crate::mgmt::audit::event(crate::mgmt::audit::Category::StateFile)
                .outcome("tightened")
                .field("path", p.display().to_string())
                .field("old-mode", format!("{:o}", old & 0o7777))
                .emit();
        }
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
                let hash = crate::mgmt::users::hash_password(&password).map_err(io::Error::other)?;
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
    // write_atomic creates every file 0600.
    write_atomic(path, content)
}

/// Sets `path` to `want` when it grants anything more (group, others, or set-id bits).
fn tighten(path: &Path, mode: u32, want: u32, changed: &mut Vec<(PathBuf, u32)>) -> io::Result<()> {
    if mode & 0o7777 & !want != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & want))?;
        changed.push((path.to_owned(), mode));
    }
    Ok(())
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
    fn loosened_modes_are_tightened_on_open_and_symlinks_refused() {
        let dir = tempfile::tempdir().unwrap();
        let st = dir.path().join("st");
        let s = StateDir::open(&st).unwrap();
        s.host_key().unwrap();
        fs::write(st.join("startup.xml"), "<x/>").unwrap();
        fs::set_permissions(st.join("startup.xml"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(&st, fs::Permissions::from_mode(0o755)).unwrap();
        let reopened = StateDir::open(&st).unwrap();
        assert_eq!(reopened.tightened.len(), 2, "{:?}", reopened.tightened);
        assert!(reopened.enforce_modes().unwrap().is_empty());
        assert_eq!(fs::metadata(st.join("startup.xml")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(&st).unwrap().permissions().mode() & 0o777, 0o700);
        std::os::unix::fs::symlink("/etc/passwd", st.join("credentials.toml")).unwrap();
        assert!(StateDir::open(&st).is_err());
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
            let store = crate::mgmt::users::UserStore::from_entries(&users).unwrap();
            assert!(store.verify_password(ADMIN_USER, &pw));
        }
    }
}
