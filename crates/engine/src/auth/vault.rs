//! The stored provider keys: `<state>/credentials.json` (0600), each key
//! sealed with AES-256-GCM under the master key, a fresh 96-bit nonce per
//! record and the provider's name as associated data (a record copied onto
//! another provider does not open). A check record sealed the same way
//! tells a wrong master key from a damaged record before anything is
//! written, so a wrong master key is named and changes nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::{Deserialize, Serialize};
use tinycode_base::hex;

use super::AuthError;
use super::master::{self, MasterKey};

const CHECK_TEXT: &[u8] = b"tinycode master key check";
const CHECK_AAD: &[u8] = b"\0check";

#[derive(Serialize, Deserialize, Clone)]
struct Sealed {
    nonce: String,
    data: String,
}

#[derive(Serialize, Deserialize)]
struct VaultFile {
    version: u32,
    /// `keyring` or `file`: where the master key is.
    master: String,
    check: Sealed,
    records: BTreeMap<String, Sealed>,
}

/// The open vault of one state directory.
pub struct Vault {
    state_dir: PathBuf,
    path: PathBuf,
    file: Option<VaultFile>,
    master: Option<MasterKey>,
    /// Why the stored keys cannot be read (set: nothing is written).
    problem: Option<String>,
}

impl Vault {
    /// The vault file of a state directory.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("credentials.json")
    }

    /// Read the vault (none yet is an empty vault). A vault that cannot be
    /// read or whose master key is wrong opens with a problem: its keys
    /// are not used and nothing is written until a person mends it.
    pub fn open(state_dir: &Path) -> Self {
        let path = Self::path(state_dir);
        let mut vault = Self {
            state_dir: state_dir.to_path_buf(),
            path: path.clone(),
            file: None,
            master: None,
            problem: None,
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return vault,
            Err(e) => {
                vault.problem = Some(format!("{} cannot be read: {e}", path.display()));
                return vault;
            }
        };
        let file: VaultFile = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => {
                vault.problem = Some(format!("{} is damaged: {e}", path.display()));
                return vault;
            }
        };
        match master::load(state_dir, Some(&file.master)) {
            Ok(key) if open(&key, &file.check, CHECK_AAD).as_deref() == Some(CHECK_TEXT) => {
                vault.master = Some(key);
            }
            Ok(key) => {
                vault.problem = Some(format!(
                    "the master key ({}) is not the one the keys in {} were stored with; restore it, or remove the file and set the keys again",
                    key.source.describe(),
                    path.display()
                ));
            }
            Err(e) => vault.problem = Some(e.to_string()),
        }
        vault.file = Some(file);
        vault
    }

    /// The providers a state directory's vault holds keys for, read
    /// without the master key (`doctor`).
    pub fn stored(state_dir: &Path) -> Vec<String> {
        std::fs::read(Self::path(state_dir))
            .ok()
            .and_then(|b| serde_json::from_slice::<VaultFile>(&b).ok())
            .map(|f| f.records.into_keys().collect())
            .unwrap_or_default()
    }

    /// Why the stored keys cannot be used, if they cannot.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// Where the master key is (`None`: nothing stored yet).
    pub fn master(&self) -> Option<String> {
        self.master.as_ref().map(|m| m.source.describe())
    }

    /// Providers with a stored key.
    pub fn providers(&self) -> Vec<String> {
        self.file
            .as_ref()
            .map(|f| f.records.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn has(&self, provider: &str) -> bool {
        self.file
            .as_ref()
            .is_some_and(|f| f.records.contains_key(provider))
    }

    /// The stored key of `provider`.
    pub fn get(&self, provider: &str) -> Result<Option<String>, AuthError> {
        let Some(record) = self.file.as_ref().and_then(|f| f.records.get(provider)) else {
            return Ok(None);
        };
        let (Some(master), None) = (&self.master, &self.problem) else {
            return Err(AuthError::Master(self.problem.clone().unwrap_or_default()));
        };
        let plain = open(master, record, provider.as_bytes()).ok_or_else(|| {
            AuthError::Master(format!(
                "the stored key of {provider} in {} does not open (damaged); set it again",
                self.path.display()
            ))
        })?;
        String::from_utf8(plain)
            .map(Some)
            .map_err(|_| AuthError::Master(format!("the stored key of {provider} is not text")))
    }

    /// Store (or replace) the key of `provider`, durably.
    pub fn set(&mut self, provider: &str, key: &str) -> Result<(), AuthError> {
        self.writable()?;
        if self.master.is_none() {
            self.master = Some(master::load(&self.state_dir, None)?);
        }
        let master = self
            .master
            .as_ref()
            .ok_or(AuthError::Io("no master key".into()))?;
        let sealed = seal(master, key.as_bytes(), provider.as_bytes())?;
        let mut file = match self.file.take() {
            Some(f) => f,
            None => VaultFile {
                version: 1,
                master: master.source.tag().to_string(),
                check: seal(master, CHECK_TEXT, CHECK_AAD)?,
                records: BTreeMap::new(),
            },
        };
        let before = file.records.insert(provider.to_string(), sealed);
        let written = self.write(&file);
        if written.is_err() {
            // What is on disk is still the truth.
            match before {
                Some(old) => file.records.insert(provider.to_string(), old),
                None => file.records.remove(provider),
            };
        }
        self.file = Some(file);
        written
    }

    /// Forget the key of `provider`; whether there was one.
    pub fn remove(&mut self, provider: &str) -> Result<bool, AuthError> {
        if !self.has(provider) {
            return Ok(false);
        }
        self.writable()?;
        let Some(mut file) = self.file.take() else {
            return Ok(false);
        };
        let old = file.records.remove(provider);
        let written = self.write(&file);
        if written.is_err()
            && let Some(old) = old
        {
            file.records.insert(provider.to_string(), old);
        }
        self.file = Some(file);
        written.map(|()| true)
    }

    fn writable(&self) -> Result<(), AuthError> {
        match &self.problem {
            Some(p) => Err(AuthError::Master(format!("nothing was changed: {p}"))),
            None => Ok(()),
        }
    }

    fn write(&self, file: &VaultFile) -> Result<(), AuthError> {
        let text = serde_json::to_vec_pretty(file).map_err(|e| AuthError::Io(e.to_string()))?;
        tinycode_base::files::replace(&self.path, &text, 0o600)
            .and_then(|_| tinycode_base::files::sync_dir(&self.state_dir))
            .map(|_| ())
            .map_err(|e| AuthError::Io(format!("{}: {e}", self.path.display())))
    }
}

fn seal(master: &MasterKey, plain: &[u8], aad: &[u8]) -> Result<Sealed, AuthError> {
    let cipher = Aes256Gcm::new(&master.key.into());
    let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
    let data = cipher
        .encrypt(&nonce, Payload { msg: plain, aad })
        .map_err(|_| AuthError::Io("AES-256-GCM refused to seal the key".into()))?;
    Ok(Sealed {
        nonce: hex::encode(&nonce),
        data: hex::encode(&data),
    })
}

fn open(master: &MasterKey, sealed: &Sealed, aad: &[u8]) -> Option<Vec<u8>> {
    let cipher = Aes256Gcm::new(&master.key.into());
    let nonce: [u8; 12] = hex::decode(&sealed.nonce)?.try_into().ok()?;
    let data = hex::decode(&sealed.data)?;
    cipher
        .decrypt(Nonce::from_slice(&nonce), Payload { msg: &data, aad })
        .ok()
}

/// Whether a key is configured, for a check that cannot open the vault:
/// stored (by provider name) or in the environment.
pub struct StoredOrEnv(pub Vec<String>);

impl crate::model::keys::Keys for StoredOrEnv {
    fn key<'a>(&'a self, provider: &'a str, env: &'a str) -> crate::model::keys::KeyFuture<'a> {
        crate::model::keys::Environment.key(provider, env)
    }

    fn configured(&self, provider: &str, env: &str) -> bool {
        self.0.iter().any(|p| p == provider)
            || crate::model::keys::Environment.configured(provider, env)
    }
}
