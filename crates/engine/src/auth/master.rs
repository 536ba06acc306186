//! The master key the stored provider keys are encrypted with: the OS
//! keyring's (Secret Service on Linux) when one answers within a short
//! timeout, else a 0600 key file under the state directory. Which one a
//! vault uses is written in the vault, so a keyring that comes or goes
//! later never makes its keys unreadable by choosing another master.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::AuthError;

/// How long the keyring gets to answer (headless machines often have a
/// Secret Service that never does).
pub const KEYRING_TIMEOUT: Duration = Duration::from_secs(3);

/// Where a master key lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterSource {
    /// The OS keyring, entry `tinycode` / the state directory.
    Keyring,
    /// A 0600 file.
    File(PathBuf),
}

impl MasterSource {
    /// `keyring`, `file`: the name kept in the vault.
    pub fn tag(&self) -> &'static str {
        match self {
            Self::Keyring => "keyring",
            Self::File(_) => "file",
        }
    }

    /// `keyring`, `file <path>`: what `auth list` shows.
    pub fn describe(&self) -> String {
        match self {
            Self::Keyring => "keyring (the OS keyring's Secret Service)".into(),
            Self::File(path) => format!("file {}", path.display()),
        }
    }
}

/// A 256-bit key and where it came from.
pub struct MasterKey {
    pub key: [u8; 32],
    pub source: MasterSource,
}

/// The master key file of a state directory.
pub fn key_file(state_dir: &Path) -> PathBuf {
    state_dir.join("master.key")
}

/// The master key a vault written with `tag` needs (`None`: a new vault,
/// which takes the keyring's when it answers, else the file's).
/// `TINYCODE_KEYRING=off` skips the keyring.
pub fn load(state_dir: &Path, tag: Option<&str>) -> Result<MasterKey, AuthError> {
    let keyring_on = std::env::var("TINYCODE_KEYRING").map_or(true, |v| v != "off");
    match tag {
        Some("keyring") => {
            let key = keyring_key(state_dir, false)?.ok_or_else(|| AuthError::Master(
                "the stored keys were encrypted with a master key in the OS keyring, which has no entry for this state directory now; restore the keyring, or remove credentials.json and set the keys again".into(),
            ))?;
            Ok(MasterKey {
                key,
                source: MasterSource::Keyring,
            })
        }
        Some("file") => file_key(state_dir, false),
        Some(other) => Err(AuthError::Master(format!(
            "the vault names an unknown master key source {other:?}"
        ))),
        None if keyring_on => match keyring_key(state_dir, true) {
            Ok(Some(key)) => Ok(MasterKey {
                key,
                source: MasterSource::Keyring,
            }),
            Ok(None) | Err(_) => file_key(state_dir, true),
        },
        None => file_key(state_dir, true),
    }
}

/// The key file's key; a new one is made when `create` and there is none.
fn file_key(state_dir: &Path, create: bool) -> Result<MasterKey, AuthError> {
    let path = key_file(state_dir);
    let source = MasterSource::File(path.clone());
    match std::fs::read(&path) {
        Ok(bytes) => {
            let key = decode(&bytes).ok_or_else(|| {
                AuthError::Master(format!(
                    "{} is not a master key (64 hex digits expected)",
                    path.display()
                ))
            })?;
            Ok(MasterKey { key, source })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let key = fresh();
            tinycode_base::files::replace(
                &path,
                tinycode_base::hex::encode(&key).as_bytes(),
                0o600,
            )
            .and_then(|_| tinycode_base::files::sync_dir(state_dir))
            .map_err(|e| AuthError::Io(format!("{}: {e}", path.display())))?;
            Ok(MasterKey { key, source })
        }
        Err(e) => Err(AuthError::Master(format!(
            "the stored keys need the master key file {}, which cannot be read: {e}",
            path.display()
        ))),
    }
}

/// The keyring's key for this state directory, asked on a thread that is
/// given up after [`KEYRING_TIMEOUT`]; a new one is stored when `create`.
fn keyring_key(state_dir: &Path, create: bool) -> Result<Option<[u8; 32]>, AuthError> {
    let user = state_dir.display().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(keyring_exchange(&user, create));
    });
    rx.recv_timeout(KEYRING_TIMEOUT).unwrap_or_else(|_| {
        Err(AuthError::Master(format!(
            "the OS keyring did not answer within {}s",
            KEYRING_TIMEOUT.as_secs()
        )))
    })
}

fn keyring_exchange(user: &str, create: bool) -> Result<Option<[u8; 32]>, AuthError> {
    let failed = |e: keyring::Error| AuthError::Master(format!("the OS keyring: {e}"));
    let entry = keyring::Entry::new("tinycode", user).map_err(failed)?;
    match entry.get_password() {
        Ok(text) => Ok(decode(text.as_bytes())),
        Err(keyring::Error::NoEntry) if create => {
            let key = fresh();
            entry
                .set_password(&tinycode_base::hex::encode(&key))
                .map_err(failed)?;
            // Read back: a keyring that accepts and forgets is no keyring.
            let back = entry.get_password().map_err(failed)?;
            Ok((decode(back.as_bytes()) == Some(key)).then_some(key))
        }
        Err(keyring::Error::NoEntry) => Ok(None),
        Err(e) => Err(failed(e)),
    }
}

fn fresh() -> [u8; 32] {
    use aes_gcm::aead::{KeyInit, OsRng};
    aes_gcm::Aes256Gcm::generate_key(OsRng).into()
}

fn decode(bytes: &[u8]) -> Option<[u8; 32]> {
    tinycode_base::hex::decode(std::str::from_utf8(bytes).ok()?.trim())?
        .try_into()
        .ok()
}
