//! `provider/model` → a provider, with base URLs from config and the
//! environment. Keys are asked of a [`Keys`] by the adapter on every
//! request; they never reach the log or the store.

use std::sync::Arc;

use super::anthropic::AnthropicProvider;
use super::http::{AuthHeader, Endpoint, RetryPolicy, client, error_message};
use super::keys::{Keys, Snapshot};
use super::openai::OpenAiProvider;
use super::redact::redact;
pub use super::spec::{KeyHelperSpec, ProviderEndpoint, ProviderSpec, Wire};
use super::{ModelError, ModelProvider};
use serde_json::Value;
use std::time::Duration;

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
/// `providers` (which win), with the key the environment holds now. `env`
/// reads environment variables (injected so tests need not touch the
/// process environment).
pub fn resolve(
    reference: &str,
    providers: &[ProviderSpec],
    env: &dyn Fn(&str) -> Option<String>,
    retry: RetryPolicy,
) -> Result<ModelChoice, ModelError> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let key = endpoint(reference, providers, env)?
        .and_then(|e| (!e.key_env.is_empty()).then(|| var(&e.key_env)).flatten());
    resolve_with(reference, providers, env, Arc::new(Snapshot(key)), retry)
}

/// Resolve a model reference whose key is asked of `keys` on every request
/// (the daemon's stored keys, helpers and environment).
pub fn resolve_with(
    reference: &str,
    providers: &[ProviderSpec],
    env: &dyn Fn(&str) -> Option<String>,
    keys: Arc<dyn Keys>,
    retry: RetryPolicy,
) -> Result<ModelChoice, ModelError> {
    let Some(e) = endpoint(reference, providers, env)? else {
        return Ok(ModelChoice::Offline);
    };
    if e.required && !e.helper && !keys.configured(&e.provider, &e.key_env) {
        return Err(ModelError::MissingKey {
            advice: keys.advice(&e.provider, &e.key_env),
            provider: e.provider,
        });
    }
    Ok(ModelChoice::Remote(match e.wire {
        Wire::Anthropic => Arc::new(AnthropicProvider {
            provider: e.provider,
            model: e.model,
            base_url: e.base_url,
            keys,
            key_env: e.key_env,
            key_required: e.required,
            retry,
        }),
        Wire::OpenAi => Arc::new(OpenAiProvider {
            provider: e.provider,
            model: e.model,
            base_url: e.base_url,
            keys,
            key_env: e.key_env,
            key_required: e.required,
            retry,
        }),
    }))
}

/// Whether a model reference names the offline model (empty, `offline`,
/// or `offline/…`).
pub fn is_offline(reference: &str) -> bool {
    let reference = reference.trim();
    reference.is_empty() || reference == "offline" || reference.starts_with("offline/")
}

/// The provider a reference names (`None`: the offline model).
pub fn endpoint(
    reference: &str,
    providers: &[ProviderSpec],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<ProviderEndpoint>, ModelError> {
    if is_offline(reference) {
        return Ok(None);
    }
    let reference = reference.trim();
    let Some((provider, model)) = reference.split_once('/').filter(|(_, m)| !m.is_empty()) else {
        return Err(ModelError::UnknownModel(reference.to_string()));
    };
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let builtin = BUILTINS.iter().find(|b| b.name == provider);
    let custom = providers.iter().find(|p| p.name == provider);
    let helper = custom.is_some_and(|c| c.key_helper.is_some());
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
    Ok(Some(ProviderEndpoint {
        provider: provider.to_string(),
        model: model.to_string(),
        wire,
        base_url,
        key_env: key_env.unwrap_or_default(),
        required,
        helper,
    }))
}

/// Every provider name the catalog knows: the built-in ones and config
/// `providers`, each once, in that order.
pub fn provider_names(providers: &[ProviderSpec]) -> Vec<String> {
    let mut names: Vec<String> = BUILTINS.iter().map(|b| b.name.to_string()).collect();
    for p in providers {
        if !names.contains(&p.name) {
            names.push(p.name.clone());
        }
    }
    names
}

/// The models a provider serves (`GET …/models`, OpenAI's and Anthropic's
/// list), with the key asked of `keys` now; sorted, each once.
pub async fn list_models(
    at: &ProviderEndpoint,
    keys: Arc<dyn Keys>,
) -> Result<Vec<String>, ModelError> {
    let base = at.base_url.trim_end_matches('/');
    let (url, auth, headers) = match at.wire {
        Wire::OpenAi => (format!("{base}/models"), AuthHeader::Bearer, vec![]),
        Wire::Anthropic => (
            format!("{base}/v1/models"),
            AuthHeader::Named("x-api-key"),
            vec![(
                "anthropic-version".to_string(),
                super::anthropic::API_VERSION.to_string(),
            )],
        ),
    };
    let ep = Endpoint {
        provider: at.provider.clone(),
        model: String::new(),
        url,
        headers,
        keys,
        key_env: at.key_env.clone(),
        key_required: at.required,
        auth,
    };
    let credentials = ep.credentials().await?;
    let mut request = client().get(&ep.url).timeout(Duration::from_secs(15));
    for (k, v) in ep.headers.iter().chain(credentials.iter()) {
        request = request.header(k.as_str(), v.as_str());
    }
    let connect = |message: String| ModelError::Connect {
        provider: ep.provider.clone(),
        url: ep.url.clone(),
        message,
    };
    let response = request.send().await.map_err(|e| connect(e.to_string()))?;
    let status = response.status().as_u16();
    let body = response.text().await.map_err(|e| connect(e.to_string()))?;
    let secret = credentials
        .as_ref()
        .map(|(_, v)| v.strip_prefix("Bearer ").unwrap_or(v).to_string());
    let message = || {
        redact(
            &error_message(&body),
            &secret.as_deref().into_iter().collect::<Vec<_>>(),
        )
    };
    match status {
        200..=299 => ep.keys.outcome(&ep.provider, Ok(())),
        401 | 403 => return Err(ep.refused(status, message())),
        _ => {
            return Err(ModelError::Http {
                provider: ep.provider.clone(),
                status,
                attempts: 1,
                message: message(),
            });
        }
    }
    model_ids(&ep.provider, &body)
}

/// The ids of a model list (`data[].id`, or `models[].name`), sorted.
fn model_ids(provider: &str, body: &str) -> Result<Vec<String>, ModelError> {
    let parsed: Value = serde_json::from_str(body).map_err(|e| ModelError::Stream {
        provider: provider.to_string(),
        message: format!("the model list is not JSON: {e}"),
    })?;
    let mut ids: Vec<String> = parsed
        .get("data")
        .or_else(|| parsed.get("models"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            m.get("id")
                .or_else(|| m.get("name"))
                .and_then(Value::as_str)
        })
        .map(str::to_string)
        .collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}
