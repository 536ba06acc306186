//! `provider/model` → a provider, with base URLs and keys from the
//! environment. Keys are read here and handed to the adapter; they never
//! reach the log or the store.

use std::sync::Arc;

use super::anthropic::AnthropicProvider;
use super::http::RetryPolicy;
use super::openai::OpenAiProvider;
use super::{ModelError, ModelProvider};

/// What `--model` / `TINYCODE_MODEL` / config `model` selected.
#[derive(Clone)]
pub enum ModelChoice {
    /// The embedded offline triage policy (no network). It knows the desk,
    /// so it lives above this crate: the daemon hands its instance to
    /// whoever streams ([`ModelChoice::provider`]).
    Offline,
    Remote(Arc<dyn ModelProvider>),
}

impl ModelChoice {
    /// The provider to stream from; `offline` is the daemon's offline model.
    pub fn provider(&self, offline: &Arc<dyn ModelProvider>) -> Arc<dyn ModelProvider> {
        match self {
            Self::Offline => Arc::clone(offline),
            Self::Remote(p) => Arc::clone(p),
        }
    }
}

impl ModelChoice {
    pub fn name(&self) -> String {
        match self {
            Self::Offline => "offline".into(),
            Self::Remote(p) => p.name(),
        }
    }
}

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, OpenRouter…).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// A provider from config `providers`: a custom base URL and key variable,
/// for a new name (`"local": {"type": "openai", "baseUrl": …}`) or to
/// override a built-in one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    pub wire: Wire,
    pub base_url: Option<String>,
    /// The environment variable holding the key; when set, the key is required.
    pub api_key_env: Option<String>,
}

struct Builtin {
    name: &'static str,
    wire: Wire,
    base_env: &'static str,
    base_default: &'static str,
    key_env: &'static str,
    key_required: bool,
}

const BUILTINS: [Builtin; 5] = [
    Builtin {
        name: "openai",
        wire: Wire::OpenAi,
        base_env: "OPENAI_BASE_URL",
        base_default: "https://api.openai.com/v1",
        key_env: "OPENAI_API_KEY",
        key_required: true,
    },
    Builtin {
        name: "anthropic",
        wire: Wire::Anthropic,
        base_env: "ANTHROPIC_BASE_URL",
        base_default: "https://api.anthropic.com",
        key_env: "ANTHROPIC_API_KEY",
        key_required: true,
    },
    Builtin {
        name: "openrouter",
        wire: Wire::OpenAi,
        base_env: "OPENROUTER_BASE_URL",
        base_default: "https://openrouter.ai/api/v1",
        key_env: "OPENROUTER_API_KEY",
        key_required: true,
    },
    Builtin {
        name: "ollama",
        wire: Wire::OpenAi,
        base_env: "OLLAMA_BASE_URL",
        base_default: "http://localhost:11434/v1",
        key_env: "OLLAMA_API_KEY",
        key_required: false,
    },
    Builtin {
        name: "vllm",
        wire: Wire::OpenAi,
        base_env: "VLLM_BASE_URL",
        base_default: "http://localhost:8000/v1",
        key_env: "VLLM_API_KEY",
        key_required: false,
    },
];

/// The wire format of a built-in provider name.
pub fn builtin_wire(name: &str) -> Option<Wire> {
    BUILTINS.iter().find(|b| b.name == name).map(|b| b.wire)
}

/// Remember every provider key the environment holds now (built-in and
/// config `providers`) as a secret, so that it is redacted by value from
/// anything stored or logged, whatever its shape.
pub fn register_secrets(providers: &[ProviderSpec], env: &dyn Fn(&str) -> Option<String>) {
    let names = BUILTINS
        .iter()
        .map(|b| b.key_env.to_string())
        .chain(providers.iter().filter_map(|p| p.api_key_env.clone()));
    for name in names {
        if let Some(key) = env(&name) {
            tinycode_shared::secrets::register(&key);
        }
    }
}

/// Resolve a model reference against the built-in providers and config
/// `providers` (which win). `env` reads environment variables (injected so
/// tests need not touch the process environment).
pub fn resolve(
    reference: &str,
    providers: &[ProviderSpec],
    env: &dyn Fn(&str) -> Option<String>,
    retry: RetryPolicy,
) -> Result<ModelChoice, ModelError> {
    let reference = reference.trim();
    if reference.is_empty() || reference == "offline" || reference.starts_with("offline/") {
        return Ok(ModelChoice::Offline);
    }
    let Some((provider, model)) = reference.split_once('/').filter(|(_, m)| !m.is_empty()) else {
        return Err(ModelError::UnknownModel(reference.to_string()));
    };
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let builtin = BUILTINS.iter().find(|b| b.name == provider);
    let custom = providers.iter().find(|p| p.name == provider);
    let (wire, base_url, key_env, required) = match (custom, builtin) {
        (Some(spec), _) => {
            let base = spec
                .base_url
                .clone()
                .or_else(|| builtin.and_then(|b| var(b.base_env)))
                .or_else(|| builtin.map(|b| b.base_default.to_string()))
                .ok_or_else(|| {
                    ModelError::UnknownModel(format!(
                        "{reference} (config provider {provider:?} has no baseUrl)"
                    ))
                })?;
            let key_env = spec
                .api_key_env
                .clone()
                .or_else(|| builtin.map(|b| b.key_env.to_string()));
            let required = spec.api_key_env.is_some() || builtin.is_some_and(|b| b.key_required);
            (spec.wire, base, key_env, required)
        }
        (None, Some(b)) => (
            b.wire,
            var(b.base_env).unwrap_or_else(|| b.base_default.to_string()),
            Some(b.key_env.to_string()),
            b.key_required,
        ),
        (None, None) => return Err(ModelError::UnknownModel(reference.to_string())),
    };
    let api_key = key_env.as_deref().and_then(var);
    if let Some(key) = &api_key {
        tinycode_shared::secrets::register(key);
    }
    if required && api_key.is_none() {
        return Err(ModelError::MissingKey {
            provider: provider.into(),
            env: key_env.unwrap_or_default(),
        });
    }
    let key_env = key_env.unwrap_or_default();
    Ok(ModelChoice::Remote(match wire {
        Wire::Anthropic => Arc::new(AnthropicProvider {
            provider: provider.into(),
            model: model.into(),
            base_url,
            api_key: api_key.unwrap_or_default(),
            key_env,
            retry,
        }),
        Wire::OpenAi => Arc::new(OpenAiProvider {
            provider: provider.into(),
            model: model.into(),
            base_url,
            api_key,
            key_env,
            retry,
        }),
    }))
}
