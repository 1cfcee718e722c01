//! Durable files: write to a temporary file in the same directory, fsync it, rename it over
//! the old one, fsync the directory. A crash (kill -9, power loss after the fsyncs) at any
//! moment leaves either the old or the new content, never a torn file. Every file is private
//! (0600: the startup datastore holds SCI keys and C-PS PSKs), and the temporary is created
//! exclusively under an unpredictable name without following symlinks, so nobody who can
//! write the directory can make the agent write through a planted link.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rand::RngExt;

/// O_NOFOLLOW (std has no constant for it; its value differs per architecture).
pub const O_NOFOLLOW: i32 = libc::O_NOFOLLOW;

/// Rotates a numbered log: `PATH.keep` is dropped, `PATH.k` becomes `PATH.k+1`, `PATH`
/// becomes `PATH.1`; with `keep` 0 `PATH` is removed. The audit trail and recordings.
pub fn rotate_numbered(path: &Path, keep: u32) -> io::Result<()> {
    let name = |k: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{k}"));
        std::path::PathBuf::from(p)
    };
    if keep == 0 {
        return fs::remove_file(path);
    }
    let _ = fs::remove_file(name(keep));
    for k in (1..keep).rev() {
        if name(k).exists() {
            fs::rename(name(k), name(k + 1))?;
        }
    }
    fs::rename(path, name(1))
}

/// Atomically replaces `path` with `content`, mode 0600.
pub fn write_atomic(path: &Path, content: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let nonce: u64 = rand::rng().random();
    let tmp = dir.join(format!(".{}.tmp.{}.{nonce:016x}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        // create_new = O_CREAT|O_EXCL: never an existing file, never through a symlink.
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(O_NOFOLLOW).open(&tmp)?;
        f.write_all(content)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes temporary files a crashed writer left behind (they are never read).
pub fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp.", name.to_string_lossy());
    if let Ok(entries) = fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("startup.xml");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("startup.xml");
        write_atomic(&p, b"secret").unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
