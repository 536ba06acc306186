//! `.tinycode/config.json`, validated once at start. Every key is checked;
//! a bad value stops the daemon with a message naming its key; an unknown
//! top-level key is ignored (as TinyCode does) and reported.
//! A missing file means the defaults.

mod edit;
mod mcp;
mod sections;
pub mod sources;

pub use edit::{ConfigEditError, put_mcp_server, remove_mcp_server};
pub use mcp::{McpServerSpec, McpTransport};
pub use sections::{
    AutoTriage, DEFAULT_TRIAGE_PROMPT, OFFLINE_TRIAGE_CONCURRENCY, TRIAGE_CONCURRENCY,
};

use crate::permissions::ApprovalMode;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::model::catalog::ProviderSpec;

pub const CONFIG_FILE: &str = ".tinycode/config.json";
pub const DEFAULT_MAX_STEPS: u32 = 12;
/// Default `maxToolResultChars`: a tool result longer than this keeps its
/// head and tail (the rest is kept as an artifact).
pub const DEFAULT_MAX_TOOL_RESULT_CHARS: usize = 12_000;
/// How long a daemon sharing the log may go unheard before its work is
/// taken over (`store.leaseSeconds`).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);
const KEYS: [&str; 23] = [
    "knowledgeDir",
    "ticketsDir",
    "queues",
    "categories",
    "maxStepsPerTurn",
    "permissionMode",
    "model",
    "maxToolResultChars",
    "providers",
    "context",
    "approvalTimeoutSeconds",
    "autoTriage",
    "store",
    "mcpServers",
    "compactAboveTokens",
    "keepRecentMessages",
    "turnTimeoutSeconds",
    "subAgents",
    "permissions",
    "sla",
    "reports",
    "connectors",
    "triage",
];

/// What a model's tokens cost: per million input and output tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

/// Both prices are finite (checked when read): equality is total.
impl Eq for Price {}

/// `reports.prices`, by model (`provider/model`).
pub type Prices = std::collections::BTreeMap<String, Price>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Workspace-relative directory of `<id>.md` articles.
    pub knowledge_dir: PathBuf,
    /// Workspace-relative directory of `<id>.json` tickets.
    pub tickets_dir: PathBuf,
    pub queues: Vec<String>,
    /// Categories a classification may name (`"退款 (refund)"` gives an
    /// alias); empty: the ones TINY.md names.
    pub categories: Vec<String>,
    pub max_steps_per_turn: u32,
    pub permission_mode: ApprovalMode,
    /// `provider/model`; empty means offline (unless $TINYCODE_MODEL).
    pub model: String,
    pub max_tool_result_chars: usize,
    /// Custom base URLs and key variables (`providers`).
    pub providers: Vec<ProviderSpec>,
    /// `context.compactAboveTokens` / `context.keepRecentMessages`.
    pub compaction: Compaction,
    /// How long an approval waits for a human before it counts as denied;
    /// `None` (the default) waits forever.
    pub approval_timeout: Option<Duration>,
    pub auto_triage: AutoTriage,
    /// `triage.reviewBelow`: model decisions below these confidences wait
    /// for a person.
    pub review_below: crate::domain::ticket::review::ReviewBelow,
    /// `mcpServers`: MCP servers whose tools join the registry.
    pub mcp_servers: Vec<McpServerSpec>,
    /// `turnTimeoutSeconds`: a turn running longer ends `timed_out`;
    /// `None` (the default): no limit.
    pub turn_timeout: Option<Duration>,
    /// `store.url`: the log in PostgreSQL (`postgres://…`); `None`: the
    /// embedded sled log. `$TINYCODE_STORE_URL` overrides it.
    pub store_url: Option<String>,
    /// `store.leaseSeconds`: a daemon sharing the log that has not been
    /// heard from for this long is taken for dead, and its work is taken
    /// over. `$TINYCODE_LEASE_SECONDS` overrides it.
    pub lease: Duration,
    /// `subAgents`: the read-only workers a session may spawn.
    pub sub_agents: SubAgents,
    /// `permissions.allow`: tools whose calls run without asking although
    /// the rule table asks (`spawn_agent`, `mcp__fs__*`); never a
    /// review-required tool, never what the table denies.
    pub allow: Vec<String>,
    /// `sla`: SLA policies, business hours and the at-risk share.
    pub sla: crate::domain::sla::SlaSettings,
    /// `reports.daily` (`"08:00"`): the minute of the desk's day the
    /// previous day's report is made; `None`: no daily report.
    pub daily_report: Option<u32>,
    /// `reports.prices`: what each model's tokens cost (the report's cost
    /// per ticket).
    pub prices: Prices,
    /// `connectors`: where tickets come from and replies go back to.
    pub connectors: Vec<sources::SourceSpec>,
    /// Keys the file has that tinycode does not know: ignored, as TinyCode
    /// ignores them, and reported (the daemon's log, `tinycode doctor`).
    pub warnings: Vec<String>,
}

/// `subAgents`: how many workers a session may run at once, and each
/// worker's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAgents {
    /// `max`: running workers per root session.
    pub max: usize,
    /// `maxSteps`: model requests per worker.
    pub max_steps: u32,
    /// `timeoutSeconds`: a worker running longer ends `timed_out`.
    pub timeout: Duration,
    /// `model`: the workers' model; empty: the parent's.
    pub model: String,
}

impl Default for SubAgents {
    fn default() -> Self {
        Self {
            max: 3,
            max_steps: 8,
            timeout: Duration::from_secs(300),
            model: String::new(),
        }
    }
}

/// When and how much of a session's history is summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    pub above_tokens: u64,
    pub keep_recent_messages: usize,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            above_tokens: 100_000,
            keep_recent_messages: 8,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            knowledge_dir: PathBuf::from("knowledge"),
            tickets_dir: PathBuf::from("tickets"),
            queues: Vec::new(),
            categories: Vec::new(),
            max_steps_per_turn: DEFAULT_MAX_STEPS,
            permission_mode: ApprovalMode::Ask,
            model: String::new(),
            max_tool_result_chars: DEFAULT_MAX_TOOL_RESULT_CHARS,
            providers: Vec::new(),
            compaction: Compaction::default(),
            approval_timeout: None,
            auto_triage: AutoTriage::default(),
            review_below: Default::default(),
            store_url: None,
            lease: DEFAULT_LEASE,
            mcp_servers: Vec::new(),
            turn_timeout: None,
            sub_agents: SubAgents::default(),
            allow: Vec::new(),
            sla: Default::default(),
            daily_report: None,
            prices: Prices::new(),
            connectors: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {message}", path.display())]
    Json { path: PathBuf, message: String },
    #[error("{}: unknown key `{key}` (known keys: {known})", path.display(), known = KEYS.join(", "))]
    UnknownKey { path: PathBuf, key: String },
    /// A problem inside a section, naming its key (`sla.policies[0].…`).
    #[error("{}: {problem}", path.display())]
    Section { path: PathBuf, problem: String },
    #[error("{}: `{key}` {problem}", path.display())]
    Invalid {
        path: PathBuf,
        key: &'static str,
        problem: String,
    },
}

impl Config {
    /// What the desk is opened with.
    pub fn desk(&self) -> crate::domain::desk::DeskSettings {
        crate::domain::desk::DeskSettings {
            tickets_dir: self.tickets_dir.clone(),
            knowledge_dir: self.knowledge_dir.clone(),
            categories: self.categories.clone(),
            queues: self.queues.clone(),
            poll_interval: Duration::from_millis(self.auto_triage.poll_interval_ms),
            progress: Default::default(),
            sla: self.sla.clone(),
        }
    }

    /// Load `<workspace>/.tinycode/config.json` (defaults when absent).
    pub fn load(workspace: &Path) -> Result<Self, ConfigError> {
        let path = workspace.join(CONFIG_FILE);
        let text = match crate::files::read_own_text(&path, 4 * 1024 * 1024) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        Self::parse(&path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let obj = top_level(path, text)?;
        let file = File { path, obj: &obj };
        let mut config = Self {
            warnings: file.unknown_keys(),
            ..Self::default()
        };
        // One section after another, in this order: when several keys are
        // bad, the first one met is the one reported.
        file.layout(&mut config)?;
        file.turns(&mut config)?;
        file.context(&mut config)?;
        file.mcp_servers(&mut config)?;
        file.timeouts(&mut config)?;
        file.workers(&mut config)?;
        if let Some(v) = obj.get("reports") {
            (config.daily_report, config.prices) =
                sections::reports(v).map_err(|problem| ConfigError::Section {
                    path: path.to_path_buf(),
                    problem,
                })?;
        }
        if let Some(v) = obj.get("connectors") {
            config.connectors = sources::sources(v).map_err(|problem| ConfigError::Section {
                path: path.to_path_buf(),
                problem,
            })?;
        }
        if let Some(v) = obj.get("sla") {
            config.sla = crate::domain::sla::SlaSettings::from_json(v).map_err(|problem| {
                // The section's own messages name keys inside it: `sla.…`.
                match problem.strip_prefix('`') {
                    Some(rest) => ConfigError::Section {
                        path: path.to_path_buf(),
                        problem: format!("`sla.{rest}"),
                    },
                    None => ConfigError::Invalid {
                        path: path.to_path_buf(),
                        key: "sla",
                        problem,
                    },
                }
            })?;
        }
        Ok(config)
    }
}

/// The text parsed as JSON, which must be an object at the top level.
fn top_level(path: &Path, text: &str) -> Result<Map<String, Value>, ConfigError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let Value::Object(obj) = value else {
        return Err(ConfigError::Json {
            path: path.to_path_buf(),
            message: "the top level must be an object".into(),
        });
    };
    Ok(obj)
}

/// The config file being parsed: where it is (for the messages) and its
/// top-level object. Each method reads one group of keys into the config.
struct File<'a> {
    path: &'a Path,
    obj: &'a Map<String, Value>,
}

impl File<'_> {
    /// `key` has a bad value: the error naming the file and the key.
    fn bad(&self, key: &'static str, problem: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            key,
            problem,
        }
    }

    /// One warning per top-level key tinycode does not know.
    fn unknown_keys(&self) -> Vec<String> {
        self.obj
            .keys()
            .filter(|k| !KEYS.contains(&k.as_str()))
            .map(|key| {
                ConfigError::UnknownKey {
                    path: self.path.to_path_buf(),
                    key: key.clone(),
                }
                .to_string()
                    + "; ignored"
            })
            .collect()
    }

    /// `permissions`, `knowledgeDir`, `ticketsDir`, `queues`, `categories`.
    fn layout(&self, config: &mut Config) -> Result<(), ConfigError> {
        let obj = self.obj;
        if let Some(v) = obj.get("permissions") {
            config.allow = sections::permissions(v).map_err(|p| self.bad("permissions", p))?;
        }
        if let Some(dir) = string(obj, "knowledgeDir").map_err(|p| self.bad("knowledgeDir", p))? {
            config.knowledge_dir =
                inside_workspace(&dir).map_err(|p| self.bad("knowledgeDir", p))?;
        }
        if let Some(dir) = string(obj, "ticketsDir").map_err(|p| self.bad("ticketsDir", p))? {
            config.tickets_dir = inside_workspace(&dir).map_err(|p| self.bad("ticketsDir", p))?;
        }
        if let Some(v) = obj.get("queues") {
            config.queues = names(v).map_err(|p| self.bad("queues", p))?;
        }
        if let Some(v) = obj.get("categories") {
            config.categories = names(v).map_err(|p| self.bad("categories", p))?;
        }
        Ok(())
    }

    /// How a turn runs: `maxStepsPerTurn`, `model`, `maxToolResultChars`,
    /// `permissionMode`, `providers`.
    fn turns(&self, config: &mut Config) -> Result<(), ConfigError> {
        let obj = self.obj;
        if let Some(v) = obj.get("maxStepsPerTurn") {
            config.max_steps_per_turn = v
                .as_u64()
                .filter(|n| (1..=200).contains(n))
                .map(|n| n as u32)
                .ok_or_else(|| {
                    self.bad(
                        "maxStepsPerTurn",
                        format!("must be a whole number from 1 to 200, got {v}"),
                    )
                })?;
        }
        if let Some(model) = string(obj, "model").map_err(|p| self.bad("model", p))? {
            config.model = model.trim().to_string();
        }
        if let Some(v) = obj.get("maxToolResultChars") {
            config.max_tool_result_chars = v
                .as_u64()
                .filter(|n| (200..=1_000_000).contains(n))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    self.bad(
                        "maxToolResultChars",
                        format!("must be a whole number from 200 to 1000000, got {v}"),
                    )
                })?;
        }
        if let Some(mode) =
            string(obj, "permissionMode").map_err(|p| self.bad("permissionMode", p))?
        {
            config.permission_mode = match mode.as_str() {
                "ask" => ApprovalMode::Ask,
                "auto" => ApprovalMode::Auto,
                other => {
                    return Err(self.bad(
                        "permissionMode",
                        format!("must be \"ask\" or \"auto\", got {other:?}"),
                    ));
                }
            };
        }
        if let Some(v) = obj.get("providers") {
            config.providers = sections::providers(v).map_err(|p| self.bad("providers", p))?;
        }
        Ok(())
    }

    /// `context`, and the top-level `compactAboveTokens` /
    /// `keepRecentMessages` TinyCode writes.
    fn context(&self, config: &mut Config) -> Result<(), ConfigError> {
        let obj = self.obj;
        if let Some(v) = obj.get("context") {
            config.compaction = sections::compaction(v).map_err(|p| self.bad("context", p))?;
        }
        // TinyCode writes these two at the top level; `context` wins when
        // both name one.
        let in_context = |key: &str| {
            obj.get("context")
                .and_then(Value::as_object)
                .is_some_and(|c| c.contains_key(key))
        };
        for key in ["compactAboveTokens", "keepRecentMessages"] {
            let Some(v) = obj.get(key).filter(|_| !in_context(key)) else {
                continue;
            };
            let mut one = Map::new();
            one.insert(key.to_string(), v.clone());
            let parsed = sections::compaction(&Value::Object(one)).map_err(|p| self.bad(key, p))?;
            if key == "compactAboveTokens" {
                config.compaction.above_tokens = parsed.above_tokens;
            } else {
                config.compaction.keep_recent_messages = parsed.keep_recent_messages;
            }
        }
        Ok(())
    }

    /// `mcpServers`.
    fn mcp_servers(&self, config: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = self.obj.get("mcpServers") {
            config.mcp_servers = mcp::servers(v).map_err(|p| self.bad("mcpServers", p))?;
        }
        Ok(())
    }

    /// `turnTimeoutSeconds`, `approvalTimeoutSeconds`.
    fn timeouts(&self, config: &mut Config) -> Result<(), ConfigError> {
        if let Some(v) = self.obj.get("turnTimeoutSeconds") {
            config.turn_timeout = Some(
                v.as_u64()
                    .filter(|n| (1..=24 * 3600).contains(n))
                    .map(Duration::from_secs)
                    .ok_or_else(|| {
                        self.bad(
                            "turnTimeoutSeconds",
                            format!("must be a whole number of seconds from 1 to 86400, got {v}"),
                        )
                    })?,
            );
        }
        if let Some(v) = self.obj.get("approvalTimeoutSeconds") {
            config.approval_timeout = Some(
                v.as_u64()
                    .filter(|n| (1..=7 * 24 * 3600).contains(n))
                    .map(Duration::from_secs)
                    .ok_or_else(|| {
                        self.bad(
                            "approvalTimeoutSeconds",
                            format!("must be a whole number of seconds from 1 to 604800, got {v}"),
                        )
                    })?,
            );
        }
        Ok(())
    }

    /// The background work and the log: `autoTriage`, `subAgents`, `store`.
    fn workers(&self, config: &mut Config) -> Result<(), ConfigError> {
        let obj = self.obj;
        if let Some(v) = obj.get("autoTriage") {
            config.auto_triage = sections::auto_triage(v).map_err(|p| self.bad("autoTriage", p))?;
        }
        if let Some(v) = obj.get("triage") {
            config.review_below = sections::review_below(v).map_err(|p| self.bad("triage", p))?;
        }
        if let Some(v) = obj.get("subAgents") {
            config.sub_agents = sections::sub_agents(v).map_err(|p| self.bad("subAgents", p))?;
        }
        if let Some(v) = obj.get("store") {
            config.store_url = sections::store_url(v).map_err(|p| self.bad("store", p))?;
            if let Some(lease) = sections::store_lease(v).map_err(|p| self.bad("store", p))? {
                config.lease = lease;
            }
        }
        Ok(())
    }
}

/// A list of distinct, non-empty names (`queues`, `categories`).
fn names(v: &Value) -> Result<Vec<String>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("must be a list of names, got {v}"))?;
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let name = item
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("must hold non-empty names, got {item}"))?;
        if out.iter().any(|q| q == name) {
            return Err(format!("lists {name:?} twice"));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

fn string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("must be a string, got {other}")),
    }
}

/// A relative path that stays inside the workspace.
fn inside_workspace(dir: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(dir);
    let ok = !dir.trim().is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if ok {
        Ok(path)
    } else {
        Err(format!(
            "must be a relative path inside the workspace, got {dir:?}"
        ))
    }
}

#[cfg(test)]
mod tests;
