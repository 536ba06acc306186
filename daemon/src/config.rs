//! `.tinycode/config.json`, validated once at start. Every key is checked;
//! an unknown key or a bad value stops the daemon with a message naming it.
//! A missing file means the defaults.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

pub const CONFIG_FILE: &str = ".tinycode/config.json";
pub const DEFAULT_MAX_STEPS: u32 = 12;
const KEYS: [&str; 7] = [
    "knowledgeDir",
    "ticketsDir",
    "queues",
    "maxStepsPerTurn",
    "permissionMode",
    "model",
    "maxToolResultChars",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionMode {
    /// Ask a human for tools whose rule says ask.
    Ask,
    /// Allow what would be asked (deny rules still deny).
    Auto,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Workspace-relative directory of `<id>.md` articles.
    pub knowledge_dir: PathBuf,
    /// Workspace-relative directory of `<id>.json` tickets.
    pub tickets_dir: PathBuf,
    pub queues: Vec<String>,
    pub max_steps_per_turn: u32,
    pub permission_mode: PermissionMode,
    /// `provider/model`; empty means offline (unless $TINYCODE_MODEL).
    pub model: String,
    pub max_tool_result_chars: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            knowledge_dir: PathBuf::from("knowledge"),
            tickets_dir: PathBuf::from("tickets"),
            queues: Vec::new(),
            max_steps_per_turn: DEFAULT_MAX_STEPS,
            permission_mode: PermissionMode::Ask,
            model: String::new(),
            max_tool_result_chars: crate::context::DEFAULT_MAX_TOOL_RESULT_CHARS,
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
    #[error("{}: `{key}` {problem}", path.display())]
    Invalid {
        path: PathBuf,
        key: &'static str,
        problem: String,
    },
}

impl Config {
    /// Load `<workspace>/.tinycode/config.json` (defaults when absent).
    pub fn load(workspace: &Path) -> Result<Self, ConfigError> {
        let path = workspace.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        Self::parse(&path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
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
        if let Some(key) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: key.clone(),
            });
        }
        let bad = |key: &'static str, problem: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            key,
            problem,
        };
        let mut config = Self::default();
        if let Some(dir) = string(&obj, "knowledgeDir").map_err(|p| bad("knowledgeDir", p))? {
            config.knowledge_dir = inside_workspace(&dir).map_err(|p| bad("knowledgeDir", p))?;
        }
        if let Some(dir) = string(&obj, "ticketsDir").map_err(|p| bad("ticketsDir", p))? {
            config.tickets_dir = inside_workspace(&dir).map_err(|p| bad("ticketsDir", p))?;
        }
        if let Some(v) = obj.get("queues") {
            let items = v
                .as_array()
                .ok_or_else(|| bad("queues", format!("must be a list of queue names, got {v}")))?;
            for item in items {
                let name = item
                    .as_str()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| {
                        bad("queues", format!("must hold non-empty names, got {item}"))
                    })?;
                if config.queues.iter().any(|q| q == name) {
                    return Err(bad("queues", format!("lists {name:?} twice")));
                }
                config.queues.push(name.to_string());
            }
        }
        if let Some(v) = obj.get("maxStepsPerTurn") {
            config.max_steps_per_turn = v
                .as_u64()
                .filter(|n| (1..=200).contains(n))
                .map(|n| n as u32)
                .ok_or_else(|| {
                    bad(
                        "maxStepsPerTurn",
                        format!("must be a whole number from 1 to 200, got {v}"),
                    )
                })?;
        }
        if let Some(model) = string(&obj, "model").map_err(|p| bad("model", p))? {
            config.model = model.trim().to_string();
        }
        if let Some(v) = obj.get("maxToolResultChars") {
            config.max_tool_result_chars = v
                .as_u64()
                .filter(|n| (200..=1_000_000).contains(n))
                .map(|n| n as usize)
                .ok_or_else(|| {
                    bad(
                        "maxToolResultChars",
                        format!("must be a whole number from 200 to 1000000, got {v}"),
                    )
                })?;
        }
        if let Some(mode) = string(&obj, "permissionMode").map_err(|p| bad("permissionMode", p))? {
            config.permission_mode = match mode.as_str() {
                "ask" => PermissionMode::Ask,
                "auto" => PermissionMode::Auto,
                other => {
                    return Err(bad(
                        "permissionMode",
                        format!("must be \"ask\" or \"auto\", got {other:?}"),
                    ));
                }
            };
        }
        Ok(config)
    }
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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("c.json"), text)
    }

    #[test]
    fn the_fixture_config_loads() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/tinycode-support-desk");
        let c = Config::load(&ws).unwrap();
        assert_eq!(c.queues, ["售后组", "物流组", "技术支持"]);
        assert_eq!(c.max_steps_per_turn, 12);
        assert_eq!(c.permission_mode, PermissionMode::Ask);
        assert_eq!(c.tickets_dir, PathBuf::from("tickets"));
    }

    #[test]
    fn missing_file_means_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(Config::load(tmp.path()).unwrap(), Config::default());
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        let cases = [
            (r#"{"colour": 1}"#, "unknown key `colour`"),
            (
                r#"{"maxStepsPerTurn": 0}"#,
                "`maxStepsPerTurn` must be a whole number from 1 to 200",
            ),
            (r#"{"maxStepsPerTurn": "12"}"#, "`maxStepsPerTurn`"),
            (
                r#"{"permissionMode": "yolo"}"#,
                "`permissionMode` must be \"ask\" or \"auto\"",
            ),
            (r#"{"queues": "售后组"}"#, "`queues` must be a list"),
            (r#"{"queues": ["a", "a"]}"#, "lists \"a\" twice"),
            (r#"{"queues": [""]}"#, "`queues` must hold non-empty names"),
            (
                r#"{"ticketsDir": "../elsewhere"}"#,
                "`ticketsDir` must be a relative path inside the workspace",
            ),
            (
                r#"{"knowledgeDir": "/etc"}"#,
                "`knowledgeDir` must be a relative path",
            ),
            ("[1]", "the top level must be an object"),
            ("{", "not valid JSON"),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.starts_with("c.json"), "names the file: {err}");
        }
    }
}
