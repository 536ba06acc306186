//! Where a provider's key comes from. The adapters ask a [`Keys`] on every
//! request, so a key set, rotated or removed while the daemon runs is what
//! the next request of every session carries — a running turn's included.
//! The daemon's implementation (stored, helper, environment) lives above
//! this crate; [`Snapshot`] is the key the environment held when a model was
//! resolved (tests, `doctor`).

use std::future::Future;
use std::pin::Pin;

use super::ModelError;

/// A key lookup in flight (a helper command may run).
pub type KeyFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<String>, ModelError>> + Send + 'a>>;

/// The keys of every provider, asked per request.
pub trait Keys: Send + Sync {
    /// The key `provider` gets on its next request; `env` is the variable
    /// the catalog names for it. `None`: no key anywhere.
    fn key<'a>(&'a self, provider: &'a str, env: &'a str) -> KeyFuture<'a>;

    /// Whether a key is configured for `provider`, without running a
    /// helper (checking a model before it is used).
    fn configured(&self, provider: &str, env: &str) -> bool;

    /// How a person sets the key (named in missing-key and 401/403 errors).
    fn advice(&self, provider: &str, env: &str) -> String {
        default_advice(provider, env)
    }

    /// What the provider answered a request that carried the key: `Ok`, or
    /// why it failed (never the key).
    fn outcome(&self, _provider: &str, _result: Result<(), &str>) {}

    /// Config `providers` changed (a reload): helpers follow.
    fn set_providers(&self, _providers: &[super::spec::ProviderSpec]) {}
}

/// `tinycode auth set <provider>`, or the environment variable.
pub fn default_advice(provider: &str, env: &str) -> String {
    if env.is_empty() {
        format!("set it with `tinycode auth set {provider}`")
    } else {
        format!("set it with `tinycode auth set {provider}` or {env} in the daemon's environment")
    }
}

/// The key the environment held when the model was resolved.
pub struct Snapshot(pub Option<String>);

impl Keys for Snapshot {
    fn key<'a>(&'a self, _provider: &'a str, _env: &'a str) -> KeyFuture<'a> {
        let key = self.0.clone();
        Box::pin(async move { Ok(key) })
    }

    fn configured(&self, _provider: &str, _env: &str) -> bool {
        self.0.is_some()
    }
}

/// The daemon's environment, read on every request.
pub struct Environment;

impl Keys for Environment {
    fn key<'a>(&'a self, _provider: &'a str, env: &'a str) -> KeyFuture<'a> {
        let key = std::env::var(env).ok().filter(|k| !k.trim().is_empty());
        Box::pin(async move { Ok(key) })
    }

    fn configured(&self, _provider: &str, env: &str) -> bool {
        std::env::var(env).is_ok_and(|k| !k.trim().is_empty())
    }
}
