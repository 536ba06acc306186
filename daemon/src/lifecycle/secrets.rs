//! The secrets a daemon knows, registered by value so that nothing stored
//! or logged shows them.

use crate::config::Config;

use super::store_url;

/// Every secret this daemon knows, by value, before anything is stored or
/// logged: provider keys in the environment, MCP servers' secret-looking
/// environment values, the store URL's password.
pub(super) fn register_secrets(config: &Config) {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    crate::model::catalog::register_secrets(&config.providers, &env);
    for server in &config.mcp_servers {
        if let crate::config::McpTransport::Stdio { env, .. } = &server.transport {
            for (name, value) in env {
                if looks_secret(name) {
                    tinycode_shared::secrets::register(value);
                }
            }
        }
    }
    if let Some(url) = store_url(config)
        && let Some(password) = url_password(&url)
    {
        tinycode_shared::secrets::register(&password);
    }
}

/// A variable name that usually holds a credential.
fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "AUTH",
        "CREDENTIAL",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// The password of a `scheme://user:password@host/…` URL, if it has one.
fn url_password(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then(|| password.to_string())
}
