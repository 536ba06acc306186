//! Provider keys resolved on every request (`Keys`): a key helper's
//! answer first, then a key stored with `tinycode auth set` (encrypted at
//! rest, [`vault`]), then the daemon's environment. Setting, rotating or
//! removing one needs no restart; the log records that a key was set or
//! removed and by whom, never the key.

pub mod helper;
pub mod master;
pub mod models;
pub mod vault;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, CredentialRemoved, CredentialSet};

use crate::model::ModelError;
use crate::model::catalog::{ProviderSpec, endpoint, provider_names};
use crate::model::keys::{KeyFuture, Keys, default_advice};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use helper::Helper;
use vault::Vault;

/// The stream `CredentialSet` / `CredentialRemoved` go to.
pub const STREAM: &str = "credentials";
/// The longest key accepted.
pub const MAX_KEY_BYTES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Master(String),
    #[error("the stored keys could not be written: {0}")]
    Io(String),
    #[error("{provider}: the key helper `{command}` {why}")]
    Helper {
        provider: String,
        command: String,
        why: String,
    },
    #[error(
        "unknown provider {0:?}: use openai, anthropic, openrouter, ollama, vllm or a name from config `providers`"
    )]
    UnknownProvider(String),
    #[error("the key {0}")]
    BadKey(&'static str),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where a provider's next key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Helper,
    Stored,
    Environment,
    None,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Self::Helper => "helper",
            Self::Stored => "stored",
            Self::Environment => "environment",
            Self::None => "none",
        }
    }
}

/// The last request that carried a provider's key.
#[derive(Debug, Clone, Default)]
pub struct LastUse {
    pub ok: bool,
    pub at: String,
    pub error: String,
}

/// One provider as `auth list` shows it.
#[derive(Debug, Clone)]
pub struct ProviderKey {
    pub provider: String,
    pub source: Source,
    pub env: String,
    pub required: bool,
    pub last: Option<LastUse>,
    pub problem: Option<String>,
}

type Env = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Every provider's key, asked per request.
pub struct Credentials {
    store: EventStore,
    vault: Mutex<Vault>,
    providers: RwLock<Vec<ProviderSpec>>,
    helpers: RwLock<BTreeMap<String, Arc<Helper>>>,
    env: Box<Env>,
    last: Mutex<BTreeMap<String, LastUse>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Credentials {
    /// Open the vault of `state_dir`; `providers` from config (helpers
    /// included); `env` reads the daemon's environment.
    pub fn open(
        store: EventStore,
        state_dir: &std::path::Path,
        providers: Vec<ProviderSpec>,
        env: Box<Env>,
    ) -> Arc<Self> {
        let vault = Vault::open(state_dir);
        if let Some(problem) = vault.problem() {
            tracing::error!(%problem, "the stored provider keys cannot be used");
        }
        let me = Arc::new(Self {
            store,
            vault: Mutex::new(vault),
            providers: RwLock::new(Vec::new()),
            helpers: RwLock::new(BTreeMap::new()),
            env,
            last: Mutex::default(),
        });
        me.set_providers(providers);
        me
    }

    /// Config `providers` changed (a reload): helpers are kept when their
    /// spec did not change, so their cached key stays.
    pub fn set_providers(&self, providers: Vec<ProviderSpec>) {
        let mut helpers = self.helpers.write().unwrap_or_else(|p| p.into_inner());
        let old = std::mem::take(&mut *helpers);
        for p in &providers {
            if let Some(spec) = &p.key_helper {
                let helper = match old.get(&p.name) {
                    Some(h) if &h.spec == spec => Arc::clone(h),
                    _ => Arc::new(Helper::new(spec.clone())),
                };
                helpers.insert(p.name.clone(), helper);
            }
        }
        *self.providers.write().unwrap_or_else(|p| p.into_inner()) = providers;
    }

    fn helper(&self, provider: &str) -> Option<Arc<Helper>> {
        let helpers = self.helpers.read().unwrap_or_else(|p| p.into_inner());
        helpers.get(provider).cloned()
    }

    fn env_key(&self, env: &str) -> Option<String> {
        (!env.is_empty())
            .then(|| (self.env)(env))
            .flatten()
            .filter(|v| !v.trim().is_empty())
    }

    /// Where `provider`'s next key comes from.
    pub fn source(&self, provider: &str, env: &str) -> Source {
        if self.helper(provider).is_some() {
            Source::Helper
        } else if lock(&self.vault).has(provider) {
            Source::Stored
        } else if self.env_key(env).is_some() {
            Source::Environment
        } else {
            Source::None
        }
    }

    /// A provider the catalog knows (built-in or config), and its key's
    /// environment variable and whether it needs a key.
    fn known(&self, provider: &str) -> Result<(String, bool), AuthError> {
        let providers = self.providers.read().unwrap_or_else(|p| p.into_inner());
        let reference = format!("{provider}/-");
        match endpoint(&reference, &providers, &|k| (self.env)(k)) {
            Ok(Some(e)) => Ok((e.key_env, e.required)),
            _ => Err(AuthError::UnknownProvider(provider.to_string())),
        }
    }

    /// Store `key` for `provider` and record that it was set.
    pub async fn set(&self, provider: &str, key: &str, by: ClientRef) -> Result<u64, AuthError> {
        self.known(provider)?;
        let key = key.trim();
        if key.is_empty() {
            return Err(AuthError::BadKey("is empty"));
        }
        if key.len() > MAX_KEY_BYTES || key.chars().any(char::is_control) {
            return Err(AuthError::BadKey(
                "has control characters or is longer than 4096 bytes",
            ));
        }
        tinycode_shared::secrets::register(key);
        lock(&self.vault).set(provider, key)?;
        let event = Payload::CredentialSet(CredentialSet {
            provider: provider.to_string(),
            by: Some(by),
            store: "stored".into(),
        });
        self.record(event).await
    }

    /// Forget `provider`'s stored key; `None` when it had none.
    pub async fn remove(&self, provider: &str, by: ClientRef) -> Result<Option<u64>, AuthError> {
        self.known(provider)?;
        if !lock(&self.vault).remove(provider)? {
            return Ok(None);
        }
        let event = Payload::CredentialRemoved(CredentialRemoved {
            provider: provider.to_string(),
            by: Some(by),
        });
        self.record(event).await.map(Some)
    }

    async fn record(&self, event: Payload) -> Result<u64, AuthError> {
        let stored = self
            .store
            .append(STREAM, ExpectedVersion::Any, vec![event])
            .await?;
        Ok(stored.last().map_or(0, |e| e.sequence))
    }

    /// Every known provider (built-in, config, stored), with where its key
    /// comes from and how its last request went.
    pub fn list(&self) -> (Vec<ProviderKey>, Option<String>) {
        let names = {
            let providers = self.providers.read().unwrap_or_else(|p| p.into_inner());
            provider_names(&providers)
        };
        let vault = lock(&self.vault);
        let problem = vault.problem().map(str::to_string);
        let master = vault.master();
        let stored = vault.providers();
        drop(vault);
        let last = lock(&self.last).clone();
        let list = names
            .into_iter()
            .chain(stored)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter_map(|provider| {
                let (env, required) = self.known(&provider).ok()?;
                let source = self.source(&provider, &env);
                Some(ProviderKey {
                    last: last.get(&provider).cloned(),
                    problem: (source == Source::Stored)
                        .then(|| problem.clone())
                        .flatten(),
                    provider,
                    source,
                    env,
                    required,
                })
            })
            .collect();
        (list, master)
    }
}

impl Keys for Credentials {
    fn key<'a>(&'a self, provider: &'a str, env: &'a str) -> KeyFuture<'a> {
        Box::pin(async move {
            let failed = |e: AuthError| ModelError::Key {
                provider: provider.to_string(),
                message: e.to_string(),
            };
            if let Some(helper) = self.helper(provider) {
                return helper.key(provider).await.map(Some).map_err(failed);
            }
            if let Some(key) = lock(&self.vault).get(provider).map_err(failed)? {
                return Ok(Some(key));
            }
            Ok(self.env_key(env))
        })
    }

    fn configured(&self, provider: &str, env: &str) -> bool {
        self.source(provider, env) != Source::None
    }

    fn advice(&self, provider: &str, env: &str) -> String {
        match self.source(provider, env) {
            Source::Helper => format!("its key comes from the config's apiKeyHelper of {provider}"),
            Source::Stored => {
                format!("its key was stored with `tinycode auth set {provider}`; set it again")
            }
            _ => default_advice(provider, env),
        }
    }

    fn set_providers(&self, providers: &[ProviderSpec]) {
        Credentials::set_providers(self, providers.to_vec());
    }

    fn outcome(&self, provider: &str, result: Result<(), &str>) {
        let use_ = LastUse {
            ok: result.is_ok(),
            at: tinycode_base::clock::now_rfc3339(),
            error: result.err().unwrap_or_default().to_string(),
        };
        lock(&self.last).insert(provider.to_string(), use_);
    }
}
