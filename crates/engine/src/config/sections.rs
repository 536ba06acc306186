//! The nested sections of the config file: `providers`, `context`,
//! `autoTriage`. Each returns a problem sentence naming the bad sub-key; the
//! caller adds the file and the section.

use serde_json::{Map, Value};

use super::Compaction;
use crate::model::catalog::{KeyHelperSpec, ProviderSpec, Wire, builtin_wire};

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what} must be an object, got {v}"))
}

fn known_keys(obj: &Map<String, Value>, known: &[&str], at: &str) -> Result<(), String> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "{at}has an unknown key `{k}` (known: {})",
            known.join(", ")
        )),
        None => Ok(()),
    }
}

fn text(obj: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(other) => Err(format!(
            "{at}`{key}` must be a non-empty string, got {other}"
        )),
    }
}

fn number(
    obj: &Map<String, Value>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| range.contains(n))
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "`{key}` must be a whole number from {} to {}, got {v}",
                    range.start(),
                    range.end()
                )
            }),
    }
}

/// `"providers": {"local": {"type": "openai", "baseUrl": "…", "apiKeyEnv": "…"}}`
pub fn providers(v: &Value) -> Result<Vec<ProviderSpec>, String> {
    let mut out = Vec::new();
    for (name, spec) in object(v, "the section")? {
        let at = format!("provider {name:?}: ");
        if name.is_empty() || name.contains('/') || name == "offline" {
            return Err(format!(
                "{at}a provider name must be non-empty, contain no `/` and not be `offline`"
            ));
        }
        let spec = object(spec, &at)?;
        known_keys(
            spec,
            &[
                "type",
                "baseUrl",
                "apiKeyEnv",
                "apiKeyHelper",
                "apiKeyHelperTtlSeconds",
                "apiKeyHelperTimeoutSeconds",
            ],
            &at,
        )?;
        // `type` may be left out when overriding a built-in provider.
        let wire = match (text(spec, "type", &at)?.as_deref(), builtin_wire(name)) {
            (Some("openai"), _) => Wire::OpenAi,
            (Some("anthropic"), _) => Wire::Anthropic,
            (None, Some(wire)) => wire,
            (other, _) => {
                return Err(format!(
                    "{at}`type` must be \"openai\" or \"anthropic\", got {other:?}"
                ));
            }
        };
        let base_url = text(spec, "baseUrl", &at)?;
        if let Some(url) = &base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "{at}`baseUrl` must start with http:// or https://, got {url:?}"
            ));
        }
        let api_key_env = text(spec, "apiKeyEnv", &at)?;
        if let Some(var) = &api_key_env
            && !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "{at}`apiKeyEnv` names an environment variable (the key itself never goes in the config), got {var:?}"
            ));
        }
        out.push(ProviderSpec {
            name: name.clone(),
            wire,
            base_url,
            api_key_env,
            key_helper: key_helper(spec, &at)?,
        });
    }
    Ok(out)
}

/// `"apiKeyHelper": "pass show openai", "apiKeyHelperTtlSeconds": 300,
/// "apiKeyHelperTimeoutSeconds": 10`.
fn key_helper(spec: &Map<String, Value>, at: &str) -> Result<Option<KeyHelperSpec>, String> {
    let Some(command) = text(spec, "apiKeyHelper", at)? else {
        return Ok(None);
    };
    let ttl = number(spec, "apiKeyHelperTtlSeconds", 0..=86_400)
        .map_err(|e| format!("{at}{e}"))?
        .unwrap_or(300);
    let timeout = number(spec, "apiKeyHelperTimeoutSeconds", 1..=120)
        .map_err(|e| format!("{at}{e}"))?
        .unwrap_or(10);
    Ok(Some(KeyHelperSpec {
        command,
        ttl: std::time::Duration::from_secs(ttl),
        timeout: std::time::Duration::from_secs(timeout),
    }))
}

/// `"context": {"compactAboveTokens": 100000, "keepRecentMessages": 8}`
pub fn compaction(v: &Value) -> Result<Compaction, String> {
    let obj = object(v, "the section")?;
    known_keys(obj, &["compactAboveTokens", "keepRecentMessages"], "")?;
    let mut c = Compaction::default();
    if let Some(n) = number(obj, "compactAboveTokens", 1_000..=10_000_000)? {
        c.above_tokens = n;
    }
    if let Some(n) = number(obj, "keepRecentMessages", 0..=1_000)? {
        c.keep_recent_messages = n as usize;
    }
    Ok(c)
}

/// The background triage worker (`autoTriage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoTriage {
    pub enabled: bool,
    /// Turns at a time; `None` (not set): [`AutoTriage::slots`] decides by
    /// the model.
    pub concurrency: Option<usize>,
    /// The message each triage session starts with; `{id}` is the ticket id.
    pub prompt: String,
    /// Attempts per ticket before it is left open with a note.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubled for each later one.
    pub retry_delay_ms: u64,
    /// How often `tickets/` is scanned for new or edited files.
    pub poll_interval_ms: u64,
}

pub const DEFAULT_TRIAGE_PROMPT: &str = "Triage ticket {id}: read it, search the knowledge base, classify it, escalate it if the escalation rules say so, route it to a queue, and summarise what you did.";

/// Triage turns at a time against a provider's model when
/// `autoTriage.concurrency` is not set: a provider's rate limits are
/// unknown.
pub const TRIAGE_CONCURRENCY: usize = 2;

/// Triage turns at a time with the offline model when
/// `autoTriage.concurrency` is not set. It runs inside the daemon and has no
/// rate limit, and a triage spends most of its time waiting for its appends
/// to be durable: more at once share the log's flushes (5,000 tickets:
/// 147 tickets/s and 8.6 ms of daemon CPU a ticket at 2, 212 and 6.0 at 8,
/// 231 and 5.4 at 16; docs/BENCHMARKS.md, thirteenth sitting).
pub const OFFLINE_TRIAGE_CONCURRENCY: usize = 16;

impl AutoTriage {
    /// Worker slots when new turns use `model` (the desk's default): the
    /// configured `concurrency`, else [`OFFLINE_TRIAGE_CONCURRENCY`] for
    /// the offline model and [`TRIAGE_CONCURRENCY`] for any other.
    pub fn slots(&self, model: &str) -> usize {
        let default = if crate::model::catalog::is_offline(model) {
            OFFLINE_TRIAGE_CONCURRENCY
        } else {
            TRIAGE_CONCURRENCY
        };
        self.concurrency.unwrap_or(default).max(1)
    }
}

impl Default for AutoTriage {
    fn default() -> Self {
        Self {
            enabled: false,
            concurrency: None,
            prompt: DEFAULT_TRIAGE_PROMPT.into(),
            max_attempts: 3,
            retry_delay_ms: 2_000,
            poll_interval_ms: 500,
        }
    }
}

/// `"autoTriage": {"enabled": true, "concurrency": 2, "prompt": "…{id}…",
/// "maxAttempts": 3, "retryDelayMs": 2000, "pollIntervalMs": 500}`
pub fn auto_triage(v: &Value) -> Result<AutoTriage, String> {
    let obj = object(v, "the section")?;
    known_keys(
        obj,
        &[
            "enabled",
            "concurrency",
            "prompt",
            "maxAttempts",
            "retryDelayMs",
            "pollIntervalMs",
        ],
        "",
    )?;
    let mut t = AutoTriage::default();
    match obj.get("enabled") {
        None => {}
        Some(Value::Bool(b)) => t.enabled = *b,
        Some(other) => return Err(format!("`enabled` must be true or false, got {other}")),
    }
    if let Some(n) = number(obj, "concurrency", 1..=64)? {
        t.concurrency = Some(n as usize);
    }
    if let Some(n) = number(obj, "maxAttempts", 1..=10)? {
        t.max_attempts = n as u32;
    }
    if let Some(n) = number(obj, "retryDelayMs", 0..=3_600_000)? {
        t.retry_delay_ms = n;
    }
    if let Some(n) = number(obj, "pollIntervalMs", 50..=3_600_000)? {
        t.poll_interval_ms = n;
    }
    if let Some(prompt) = text(obj, "prompt", "")? {
        if !prompt.contains("{id}") {
            return Err("`prompt` must contain {id}, where the ticket id goes".into());
        }
        t.prompt = prompt;
    }
    Ok(t)
}

/// `subAgents`: `{"max": 3, "maxSteps": 8, "timeoutSeconds": 300, "model": ""}`.
pub fn sub_agents(v: &Value) -> Result<super::SubAgents, String> {
    let obj = object(v, "the section")?;
    known_keys(obj, &["max", "maxSteps", "timeoutSeconds", "model"], "")?;
    let mut a = super::SubAgents::default();
    if let Some(n) = number(obj, "max", 0..=16)? {
        a.max = n as usize;
    }
    if let Some(n) = number(obj, "maxSteps", 1..=100)? {
        a.max_steps = n as u32;
    }
    if let Some(n) = number(obj, "timeoutSeconds", 1..=86_400)? {
        a.timeout = std::time::Duration::from_secs(n);
    }
    if let Some(model) = text(obj, "model", "")? {
        a.model = model;
    }
    Ok(a)
}

/// `store`: `{"url": "postgres://user@host:port/db"}`; an empty or absent
/// url means the embedded log.
pub fn store_url(v: &Value) -> Result<Option<String>, String> {
    let obj = object(v, "the section")?;
    known_keys(obj, &["url", "leaseSeconds"], "")?;
    match obj.get("url") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(url)) if url.trim().is_empty() => Ok(None),
        Some(Value::String(url)) => {
            let url = url.trim();
            if url.starts_with("postgres://") || url.starts_with("postgresql://") {
                Ok(Some(url.to_string()))
            } else {
                Err(
                    "`url` must start with postgres:// (the only store besides the embedded one)"
                        .into(),
                )
            }
        }
        Some(other) => Err(format!("`url` must be a string, got {other}")),
    }
}

/// `store.leaseSeconds`: how long a daemon sharing the log may go unheard
/// before another takes over its work (1..=600; default 15).
pub fn store_lease(v: &Value) -> Result<Option<std::time::Duration>, String> {
    let obj = object(v, "the section")?;
    Ok(number(obj, "leaseSeconds", 1..=600)?.map(std::time::Duration::from_secs))
}

/// `permissions`: `{"allow": ["spawn_agent", "mcp__fs__*", …]}` — tools
/// whose calls run without asking. A name ending in `*` allows every tool
/// it begins. Review-required tools are reviewed every time and cannot be
/// allowed.
pub(super) fn permissions(v: &Value) -> Result<Vec<String>, String> {
    let obj = v.as_object().ok_or_else(|| {
        format!("must be an object like {{\"allow\": [\"spawn_agent\"]}}, got {v}")
    })?;
    if let Some(k) = obj.keys().find(|k| k.as_str() != "allow") {
        return Err(format!("has an unknown key `{k}` (known: allow)"));
    }
    let Some(allow) = obj.get("allow") else {
        return Ok(Vec::new());
    };
    let items = allow
        .as_array()
        .ok_or_else(|| format!("`allow` must be a list of tool names, got {allow}"))?;
    items
        .iter()
        .map(|item| {
            let name = item
                .as_str()
                .map(str::trim)
                .filter(|n| !n.is_empty() && n.len() <= crate::domain::limits::MAX_NAME)
                .ok_or_else(|| format!("`allow` holds {item}, not a tool name"))?;
            if crate::permissions::REVIEW_REQUIRED.contains(&name) {
                return Err(format!(
                    "`allow` names {name}, which a person reviews every time; it cannot be allowed"
                ));
            }
            Ok(name.to_string())
        })
        .collect()
}

/// `"reports": {"daily": "08:00", "prices": {"openai/gpt-4o": {"input":
/// 2.5, "output": 10}}}`: the minute of the desk's day the daily report is
/// made, and what each model costs per million input and output tokens.
/// Each problem names its key (`reports.daily`, `reports.prices.…`).
pub fn reports(v: &Value) -> Result<(Option<u32>, super::Prices), String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("`reports` must be an object, got {v}"))?;
    if let Some(k) = obj
        .keys()
        .find(|k| !["daily", "prices"].contains(&k.as_str()))
    {
        return Err(format!(
            "`reports` has an unknown key `{k}` (known: daily, prices)"
        ));
    }
    let prices = match obj.get("prices") {
        None | Some(Value::Null) => super::Prices::new(),
        Some(v) => prices(v)?,
    };
    let bad =
        |got: String| format!("`reports.daily` must be a time of day such as \"08:00\", got {got}");
    let daily = match obj.get("daily") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => s
            .trim()
            .split_once(':')
            .and_then(|(h, m)| {
                let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
                (h < 24 && m < 60).then_some(h * 60 + m)
            })
            .map(Some)
            .ok_or_else(|| bad(format!("{s:?}")))?,
        Some(other) => return Err(bad(other.to_string())),
    };
    Ok((daily, prices))
}

/// `reports.prices`: per model (`provider/model`), the price of a million
/// input and output tokens, in the desk's currency.
fn prices(v: &Value) -> Result<super::Prices, String> {
    let obj = v.as_object().ok_or_else(|| {
        format!("`reports.prices` must be an object of models, such as {{\"openai/gpt-4o\": {{\"input\": 2.5, \"output\": 10}}}}, got {v}")
    })?;
    obj.iter()
        .map(|(model, p)| {
            let key = format!("reports.prices.{model}");
            let fields = p
                .as_object()
                .ok_or_else(|| format!("`{key}` must be {{\"input\": …, \"output\": …}}, got {p}"))?;
            if let Some(k) = fields.keys().find(|k| !["input", "output"].contains(&k.as_str())) {
                return Err(format!("`{key}` has an unknown key `{k}` (known: input, output)"));
            }
            let price = |name: &str| {
                let got = fields.get(name).cloned().unwrap_or(Value::Null);
                got.as_f64()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        format!("`{key}.{name}` must be a price per million tokens (a number ≥ 0), got {got}")
                    })
            };
            Ok((
                model.clone(),
                super::Price {
                    input: price("input")?,
                    output: price("output")?,
                },
            ))
        })
        .collect()
}

/// `"triage": {"reviewBelow": 0.8}` (every field) or `{"reviewBelow":
/// {"category": 0.8, "queue": 0.7}}`: thresholds from 0 to 1.
pub fn review_below(v: &Value) -> Result<crate::domain::ticket::review::ReviewBelow, String> {
    use crate::domain::ticket::review::{FIELDS, ReviewBelow};
    let obj = object(v, "the section")?;
    known_keys(obj, &["reviewBelow"], "")?;
    let threshold = |at: &str, v: &Value| {
        v.as_f64()
            .filter(|t| (0.0..=1.0).contains(t))
            .map(|t| t as f32)
            .ok_or_else(|| format!("`reviewBelow{at}` must be a number from 0 to 1, got {v}"))
    };
    let mut review = ReviewBelow::default();
    match obj.get("reviewBelow") {
        None => {}
        Some(Value::Object(fields)) => {
            for (field, v) in fields {
                if !FIELDS.contains(&field.as_str()) {
                    return Err(format!(
                        "`reviewBelow` names {field:?}; the fields with a confidence are {}",
                        FIELDS.join(", ")
                    ));
                }
                let t = threshold(&format!(".{field}"), v)?;
                review.thresholds.insert(field.clone(), t);
            }
        }
        Some(v) => {
            let t = threshold("", v)?;
            for field in FIELDS {
                review.thresholds.insert(field.to_string(), t);
            }
        }
    }
    Ok(review)
}
