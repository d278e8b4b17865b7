//! `state_dir`: one folder per CA directory (`127.0.0.1_14000_dir`, or
//! `acme-v02.api.letsencrypt.org_directory`), so that a certificate from a staging CA is
//! never served once the directory is the production one. In it the account
//! (`account.json`) and, per name, the certificate chain (`NAME.crt`) and its key
//! (`NAME.key`), all PEM. Every file is written whole to a temporary file created
//! 0600, then renamed over the old one, so a crash never leaves half a key and no
//! other user can read one. The folders are created 0700. `NAME.lock` is the name's
//! lock between processes that share the folder (`storage`).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A certificate read back from `state_dir` (or just obtained).
#[derive(Debug, Clone)]
pub struct Stored {
    pub chain: String,
    pub key: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// Two thirds of the way from not-before to not-after (Let's Encrypt's advice for
    /// a CA without ARI).
    pub renew_at: SystemTime,
}

impl Stored {
    /// The leaf certificate, DER.
    pub fn leaf(&self) -> Option<Vec<u8>> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(self.chain.as_bytes()).ok()?;
        Some(pem.contents)
    }
}

impl Stored {
    /// `chain` and `key` with the validity read from the leaf; `None` when the chain's
    /// first PEM block is not a certificate.
    pub fn new(chain: String, key: String) -> Option<Stored> {
        let (_, pem) = x509_parser::pem::parse_x509_pem(chain.as_bytes()).ok()?;
        let cert = pem.parse_x509().ok()?;
        let validity = cert.validity();
        let at = |t: &x509_parser::time::ASN1Time| {
            UNIX_EPOCH + Duration::from_secs(t.timestamp().max(0) as u64)
        };
        let (not_before, not_after) = (at(&validity.not_before), at(&validity.not_after));
        let lifetime = not_after.duration_since(not_before).unwrap_or_default();
        Some(Stored {
            renew_at: not_before + lifetime * 2 / 3,
            not_before,
            not_after,
            chain,
            key,
        })
    }
}

/// The folder of `directory`'s account and certificates in `state_dir`, created.
pub(crate) fn prepare(state_dir: &Path, directory: &str) -> io::Result<PathBuf> {
    let dir = state_dir.join(ca_folder(directory));
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    // Fails early on a folder this process cannot write.
    write_private(&dir.join(".written"), b"")?;
    Ok(dir)
}

/// The CA directory's name in the storage: `127.0.0.1_14000_dir`.
pub(crate) fn ca_folder(directory: &str) -> String {
    directory
        .trim_start_matches("https://")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `name`'s lock in `dir` (flock(2) on `NAME.lock`), when no other process holds it:
/// held until the file is closed, and released by the kernel when the process dies.
pub(crate) fn try_lock(dir: &Path, name: &str) -> io::Result<Option<fs::File>> {
    use std::os::fd::AsRawFd;
    let file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(dir.join(format!("{name}.lock")))?;
    // SAFETY: flock on a descriptor this function owns, with constant flags.
    match unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
        0 => Ok(Some(file)),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            e => Err(e),
        },
    }
}

fn cert_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.crt"))
}

fn key_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.key"))
}

pub(crate) fn account_path(dir: &Path) -> PathBuf {
    dir.join("account.json")
}

/// `name`'s stored certificate and key, when both are there and read.
pub(crate) fn load(dir: &Path, name: &str) -> Option<Stored> {
    let chain = fs::read_to_string(cert_path(dir, name)).ok()?;
    let key = fs::read_to_string(key_path(dir, name)).ok()?;
    Stored::new(chain, key)
}

/// Stores `name`'s new key, then its certificate (a reader that finds the new
/// certificate finds its key; one that finds the old certificate with the new key
/// refuses the pair and orders again).
pub(crate) fn save(dir: &Path, name: &str, stored: &Stored) -> io::Result<()> {
    write_private(&key_path(dir, name), stored.key.as_bytes())?;
    write_private(&cert_path(dir, name), stored.chain.as_bytes())
}

/// Writes `bytes` to `path` atomically, readable by this user alone.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_files_are_0600_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let state = prepare(&dir.path().join("state"), "https://127.0.0.1:14000/dir").unwrap();
        assert_eq!(state, dir.path().join("state/127.0.0.1_14000_dir"));
        assert_eq!(
            fs::metadata(&state).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let path = state.join("a.test.key");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(!state.join("a.test.key.tmp").exists());
    }

    #[test]
    fn renewal_is_at_two_thirds_of_the_lifetime() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.test".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2026, 1, 1);
        params.not_after = rcgen::date_time_ymd(2026, 4, 1); // 90 days
        let cert = params.self_signed(&key).unwrap();
        let stored = Stored::new(cert.pem(), key.serialize_pem()).unwrap();
        let start = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
        assert_eq!(stored.renew_at, start + Duration::from_secs(60 * 86_400));
        assert_eq!(stored.not_after, start + Duration::from_secs(90 * 86_400));
    }
}
