//! What a provider is, as config and the catalog describe it: its wire
//! format, base URL, key variable and key helper. Plain data, imported by
//! the catalog, the keys and the HTTP plumbing alike.

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
    /// A command that prints the key (`apiKeyHelper`), run again once its
    /// answer is older than `ttl`.
    pub key_helper: Option<KeyHelperSpec>,
}

/// `apiKeyHelper`: a command printing a (rotating) key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyHelperSpec {
    /// Run with `sh -c`.
    pub command: String,
    /// How long a key it printed is used before it runs again.
    pub ttl: std::time::Duration,
    /// A helper running longer is stopped and the request fails.
    pub timeout: std::time::Duration,
}

/// Where a provider is and how it is keyed.
pub struct ProviderEndpoint {
    pub provider: String,
    pub model: String,
    pub wire: Wire,
    pub base_url: String,
    /// The variable the key may come from (empty: none named).
    pub key_env: String,
    /// A request without a key is refused.
    pub required: bool,
    /// Config names a key helper for it.
    pub helper: bool,
}
