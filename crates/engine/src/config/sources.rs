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
    /// Chatwoot: its `message_created` / `conversation_created` webhooks,
    /// replies through its messages API.
    Chatwoot,
    /// Zendesk: its `ticket.created` / `ticket.comment_added` event
    /// webhooks, replies as a ticket update.
    Zendesk,
    /// Zammad: its trigger webhook (`X-Hub-Signature`), replies as ticket
    /// articles.
    Zammad,
    /// A mailbox: tickets imported from it (`import mbox|maildir
    /// --source`), replies by SMTP; no webhook.
    Mail,
}

impl SourceKind {
    pub const NAMES: [&str; 5] = ["generic", "chatwoot", "zendesk", "zammad", "mail"];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Chatwoot => "chatwoot",
            Self::Zendesk => "zendesk",
            Self::Zammad => "zammad",
            Self::Mail => "mail",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            Self::Generic,
            Self::Chatwoot,
            Self::Zendesk,
            Self::Zammad,
            Self::Mail,
        ]
        .into_iter()
        .find(|k| k.as_str() == text)
    }
}

/// One configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub name: String,
    pub kind: SourceKind,
    /// The environment variable holding the webhooks' shared secret
    /// (empty for a mail source: it takes no webhook).
    pub secret_env: String,
    /// Where replies and resolutions are sent (the generic receiver, or the
    /// helpdesk's base URL); `None`: nothing goes out.
    pub deliver_url: Option<String>,
    /// The environment variable holding the helpdesk's API token (Chatwoot,
    /// Zendesk, Zammad replies).
    pub api_token_env: Option<String>,
    /// Zendesk: the agent's email the token belongs to.
    pub api_user: Option<String>,
    /// Chatwoot: the account the conversations belong to.
    pub account_id: Option<u64>,
    /// Mail: the address replies are sent from.
    pub from: Option<String>,
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

/// A source's name: the `<source>` of its URL.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(IMPORT_PREFIX)
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(bad(
            name,
            "is not a source name: 1–64 of a-z, 0-9, `-`, `_`, not starting with `import-`",
        ))
    }
}

const KNOWN: [&str; 9] = [
    "type",
    "from",
    "secretEnv",
    "deliverUrl",
    "apiTokenEnv",
    "apiUser",
    "accountId",
    "maxAttempts",
    "retrySeconds",
];

/// One source's object, its values read with messages naming the key.
struct Keys<'a> {
    name: &'a str,
    spec: &'a Map<String, Value>,
}

impl Keys<'_> {
    fn bad(&self, key: &str, problem: impl std::fmt::Display) -> String {
        bad(&format!("{}.{key}", self.name), problem)
    }

    fn text(&self, key: &str) -> Result<Option<String>, String> {
        match self.spec.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            Some(other) => Err(self.bad(key, format!("must be a non-empty string, got {other}"))),
        }
    }

    fn number(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<u64>, String> {
        match self.spec.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| range.contains(n))
                .map(Some)
                .ok_or_else(|| {
                    self.bad(
                        key,
                        format!(
                            "must be a whole number from {} to {}, got {v}",
                            range.start(),
                            range.end()
                        ),
                    )
                }),
        }
    }

    fn kind(&self) -> Result<SourceKind, String> {
        match self.text("type")? {
            None => Ok(SourceKind::Generic),
            Some(t) => SourceKind::parse(&t).ok_or_else(|| {
                self.bad(
                    "type",
                    format!("must be one of {}, got {t:?}", SourceKind::NAMES.join(", ")),
                )
            }),
        }
    }

    fn url(&self, kind: SourceKind) -> Result<Option<String>, String> {
        let url = self.text("deliverUrl")?;
        let schemes: &[&str] = match kind {
            SourceKind::Mail => &["smtp://", "smtp+starttls://", "smtps://"],
            _ => &["http://", "https://"],
        };
        match &url {
            Some(u) if !schemes.iter().any(|s| u.starts_with(s)) => Err(self.bad(
                "deliverUrl",
                format!(
                    "must be a URL starting with {}, got {u:?}",
                    schemes.join(" or ")
                ),
            )),
            _ => Ok(url),
        }
    }
}

fn source(name: &str, spec: &Value) -> Result<SourceSpec, String> {
    check_name(name)?;
    let spec: &Map<String, Value> = spec
        .as_object()
        .ok_or_else(|| bad(name, format!("must be an object, got {spec}")))?;
    if let Some(k) = spec.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(bad(
            &format!("{name}.{k}"),
            format!("is not a known key (known: {})", KNOWN.join(", ")),
        ));
    }
    let keys = Keys { name, spec };
    let kind = keys.kind()?;
    let secret_env = match (keys.text("secretEnv")?, kind) {
        (Some(env), _) => env,
        (None, SourceKind::Mail) => String::new(),
        (None, _) => {
            return Err(keys.bad(
                "secretEnv",
                "is missing: name the environment variable that holds the source's secret",
            ));
        }
    };
    let spec = SourceSpec {
        name: name.to_string(),
        kind,
        secret_env,
        deliver_url: keys.url(kind)?,
        api_token_env: keys.text("apiTokenEnv")?,
        api_user: keys.text("apiUser")?,
        account_id: keys.number("accountId", 1..=u64::from(u32::MAX))?,
        from: keys.text("from")?,
        max_attempts: keys
            .number("maxAttempts", 1..=100)?
            .unwrap_or(u64::from(DEFAULT_MAX_ATTEMPTS)) as u32,
        retry_seconds: keys
            .number("retrySeconds", 1..=86_400)?
            .unwrap_or(DEFAULT_RETRY_SECONDS),
    };
    what_replies_need(&keys, &spec)?;
    Ok(spec)
}

/// What replies to a helpdesk need, asked for by name.
fn what_replies_need(keys: &Keys<'_>, spec: &SourceSpec) -> Result<(), String> {
    if spec.deliver_url.is_none() {
        return Ok(());
    }
    let needs = |key: &str, missing: bool, why: &str| {
        if missing {
            Err(keys.bad(key, format!("is missing: {why}")))
        } else {
            Ok(())
        }
    };
    needs(
        "from",
        spec.kind == SourceKind::Mail && spec.from.is_none(),
        "the address replies are sent from, e.g. \"Support <support@example.com>\"",
    )?;
    needs(
        "apiTokenEnv",
        !matches!(spec.kind, SourceKind::Generic | SourceKind::Mail)
            && spec.api_token_env.is_none(),
        "name the environment variable holding the helpdesk's API token (replies go through its API)",
    )?;
    needs(
        "accountId",
        spec.kind == SourceKind::Chatwoot && spec.account_id.is_none(),
        "the Chatwoot account's number (in its URLs: /app/accounts/<n>/…)",
    )?;
    needs(
        "apiUser",
        spec.kind == SourceKind::Zendesk && spec.api_user.is_none(),
        "the email of the Zendesk agent the API token belongs to",
    )
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
                api_token_env: None,
                api_user: None,
                account_id: None,
                from: None,
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
                json!({"a": {"type": "chatwoot", "secretEnv": "A", "deliverUrl": "http://h", "apiTokenEnv": "T"}}),
                "connectors.a.accountId",
            ),
            (
                json!({"a": {"type": "zendesk", "secretEnv": "A", "deliverUrl": "http://h"}}),
                "connectors.a.apiTokenEnv",
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
