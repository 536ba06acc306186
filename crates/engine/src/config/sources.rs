//! `connectors`: the sources tickets come from and replies go back to.
//!
//! ```json
//! "connectors": {
//!   "acme": {"type": "generic", "secretEnv": "ACME_HOOK_SECRET",
//!            "deliverUrl": "https://helpdesk.example/tinycode", "maxAttempts": 5,
//!            "retrySeconds": 30}
//! }
//! ```
//!
//! A secret is never in the file: `secretEnv` names the environment
//! variable the daemon reads it from, when a delivery arrives or leaves.

use serde_json::{Map, Value};

/// How a source's webhooks are read and its replies written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// tinycode's own documented JSON, signed with HMAC-SHA256.
    Generic,
}

/// One configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub name: String,
    pub kind: SourceKind,
    /// The environment variable holding the shared secret.
    pub secret_env: String,
    /// Where replies and resolutions are sent; `None`: nothing goes out.
    pub deliver_url: Option<String>,
    /// Attempts of one delivery before it is parked as failed.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; doubled after each.
    pub retry_seconds: u64,
}

pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub const DEFAULT_RETRY_SECONDS: u64 = 30;
/// Names a source may not take: the importers' own.
pub const IMPORT_PREFIX: &str = "import-";

fn bad(at: &str, problem: impl std::fmt::Display) -> String {
    format!("`connectors.{at}` {problem}")
}

/// The `connectors` object.
pub fn sources(v: &Value) -> Result<Vec<SourceSpec>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("`connectors` must be an object, got {v}"))?;
    obj.iter().map(|(name, spec)| source(name, spec)).collect()
}

fn source(name: &str, spec: &Value) -> Result<SourceSpec, String> {
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(IMPORT_PREFIX)
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !name_ok {
        return Err(bad(
            name,
            "is not a source name: 1–64 of a-z, 0-9, `-`, `_`, not starting with `import-`",
        ));
    }
    let spec: &Map<String, Value> = spec
        .as_object()
        .ok_or_else(|| bad(name, format!("must be an object, got {spec}")))?;
    const KNOWN: [&str; 5] = [
        "type",
        "secretEnv",
        "deliverUrl",
        "maxAttempts",
        "retrySeconds",
    ];
    if let Some(k) = spec.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(bad(
            &format!("{name}.{k}"),
            format!("is not a known key (known: {})", KNOWN.join(", ")),
        ));
    }
    let text = |key: &str| -> Result<Option<String>, String> {
        match spec.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(other) => Err(bad(
                &format!("{name}.{key}"),
                format!("must be a non-empty string, got {other}"),
            )),
        }
    };
    let kind = match text("type")?.as_deref() {
        None | Some("generic") => SourceKind::Generic,
        Some(other) => {
            return Err(bad(
                &format!("{name}.type"),
                format!("must be \"generic\", got {other:?}"),
            ));
        }
    };
    let secret_env = text("secretEnv")?.ok_or_else(|| {
        bad(
            &format!("{name}.secretEnv"),
            "is missing: name the environment variable that holds the source's secret",
        )
    })?;
    let deliver_url = text("deliverUrl")?;
    if let Some(url) = &deliver_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(bad(
            &format!("{name}.deliverUrl"),
            format!("must be an http:// or https:// URL, got {url:?}"),
        ));
    }
    let number = |key: &str, range: std::ops::RangeInclusive<u64>, default: u64| match spec.get(key)
    {
        None => Ok(default),
        Some(v) => v.as_u64().filter(|n| range.contains(n)).ok_or_else(|| {
            bad(
                &format!("{name}.{key}"),
                format!(
                    "must be a whole number from {} to {}, got {v}",
                    range.start(),
                    range.end()
                ),
            )
        }),
    };
    Ok(SourceSpec {
        name: name.to_string(),
        kind,
        secret_env,
        deliver_url,
        max_attempts: number("maxAttempts", 1..=100, u64::from(DEFAULT_MAX_ATTEMPTS))? as u32,
        retry_seconds: number("retrySeconds", 1..=86_400, DEFAULT_RETRY_SECONDS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_source_reads_with_its_defaults() {
        let got =
            sources(&json!({"acme": {"secretEnv": "ACME", "deliverUrl": "http://127.0.0.1:1/x"}}))
                .unwrap();
        assert_eq!(
            got,
            vec![SourceSpec {
                name: "acme".into(),
                kind: SourceKind::Generic,
                secret_env: "ACME".into(),
                deliver_url: Some("http://127.0.0.1:1/x".into()),
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                retry_seconds: DEFAULT_RETRY_SECONDS,
            }]
        );
    }

    #[test]
    fn each_bad_source_names_its_key() {
        for (v, named) in [
            (json!({"Acme": {"secretEnv": "A"}}), "connectors.Acme"),
            (
                json!({"import-x": {"secretEnv": "A"}}),
                "connectors.import-x",
            ),
            (json!({"a": {}}), "connectors.a.secretEnv"),
            (
                json!({"a": {"secretEnv": "A", "secret": "x"}}),
                "connectors.a.secret",
            ),
            (
                json!({"a": {"secretEnv": "A", "type": "zendesk2"}}),
                "connectors.a.type",
            ),
            (
                json!({"a": {"secretEnv": "A", "deliverUrl": "ftp://x"}}),
                "connectors.a.deliverUrl",
            ),
            (
                json!({"a": {"secretEnv": "A", "maxAttempts": 0}}),
                "connectors.a.maxAttempts",
            ),
        ] {
            let e = sources(&v).unwrap_err();
            assert!(e.starts_with(&format!("`{named}`")), "{e}");
        }
    }
}
