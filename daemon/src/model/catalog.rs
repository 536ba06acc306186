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
    /// The embedded offline triage policy (no network).
    Offline,
    Remote(Arc<dyn ModelProvider>),
}

impl ModelChoice {
    /// The provider to stream from.
    pub fn provider(&self) -> Arc<dyn ModelProvider> {
        match self {
            Self::Offline => Arc::new(super::offline::OfflineModel),
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

/// OpenAI-compatible providers: (name, base-URL env, default base, key env, key required).
const OPENAI_LIKE: [(&str, &str, &str, &str, bool); 4] = [
    (
        "openai",
        "OPENAI_BASE_URL",
        "https://api.openai.com/v1",
        "OPENAI_API_KEY",
        true,
    ),
    (
        "openrouter",
        "OPENROUTER_BASE_URL",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
        true,
    ),
    (
        "ollama",
        "OLLAMA_BASE_URL",
        "http://localhost:11434/v1",
        "OLLAMA_API_KEY",
        false,
    ),
    (
        "vllm",
        "VLLM_BASE_URL",
        "http://localhost:8000/v1",
        "VLLM_API_KEY",
        false,
    ),
];

/// Resolve a model reference. `env` reads environment variables (injected
/// so tests need not touch the process environment).
pub fn resolve(
    reference: &str,
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
    if provider == "anthropic" {
        let key_env = "ANTHROPIC_API_KEY".to_string();
        let api_key = var(&key_env).ok_or_else(|| ModelError::MissingKey {
            provider: provider.into(),
            env: key_env.clone(),
        })?;
        return Ok(ModelChoice::Remote(Arc::new(AnthropicProvider {
            model: model.into(),
            base_url: var("ANTHROPIC_BASE_URL")
                .unwrap_or_else(|| "https://api.anthropic.com".into()),
            api_key,
            key_env,
            retry,
        })));
    }
    let Some((name, base_env, base_default, key_env, required)) =
        OPENAI_LIKE.iter().find(|(n, ..)| *n == provider)
    else {
        return Err(ModelError::UnknownModel(reference.to_string()));
    };
    let api_key = var(key_env);
    if *required && api_key.is_none() {
        return Err(ModelError::MissingKey {
            provider: (*name).into(),
            env: (*key_env).into(),
        });
    }
    Ok(ModelChoice::Remote(Arc::new(OpenAiProvider {
        provider: (*name).into(),
        model: model.into(),
        base_url: var(base_env).unwrap_or_else(|| (*base_default).into()),
        api_key,
        key_env: (*key_env).into(),
        retry,
    })))
}
