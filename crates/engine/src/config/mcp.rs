//! `mcpServers`, in TinyCode's and Claude's shape:
//!
//! ```json
//! "mcpServers": {
//!   "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"],
//!                   "env": {"K": "v"}, "cwd": "tools", "enabled": true, "timeoutSeconds": 30 }
//! }
//! ```
//!
//! `type` may say `stdio` (the default); a server reached by `url`
//! (`http`, `sse`) is accepted and kept, so a Claude config loads, and is
//! reported as a transport this version does not speak.

use serde_json::{Map, Value};

/// How tinycode reaches one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        /// Workspace-relative or absolute; `None`: the workspace.
        cwd: Option<String>,
    },
    /// A server at a URL (`http` or `sse`), not spoken yet.
    Remote { kind: String, url: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    pub enabled: bool,
    /// Per call; default 30 s.
    pub timeout_seconds: u64,
    /// `allowReadOnlyTools`: tools the server marks `readOnlyHint` (and not
    /// `destructiveHint`) run without asking.
    pub allow_read_only_tools: bool,
}

impl McpServerSpec {
    /// The server's object as it appears under `mcpServers` (defaults
    /// left out).
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                obj.insert("command".into(), command.clone().into());
                if !args.is_empty() {
                    obj.insert("args".into(), args.clone().into());
                }
                if !env.is_empty() {
                    let env = env.iter().map(|(k, v)| (k.clone(), Value::from(v.clone())));
                    obj.insert("env".into(), Value::Object(env.collect()));
                }
                if let Some(cwd) = cwd {
                    obj.insert("cwd".into(), cwd.clone().into());
                }
            }
            McpTransport::Remote { kind, url } => {
                obj.insert("type".into(), kind.clone().into());
                obj.insert("url".into(), url.clone().into());
            }
        }
        if !self.enabled {
            obj.insert("enabled".into(), false.into());
        }
        if self.timeout_seconds != 30 {
            obj.insert("timeoutSeconds".into(), self.timeout_seconds.into());
        }
        if self.allow_read_only_tools {
            obj.insert("allowReadOnlyTools".into(), true.into());
        }
        Value::Object(obj)
    }

    /// One line: the command and its arguments, or the URL.
    pub fn launch(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, args, .. } => std::iter::once(command)
                .chain(args)
                .map(|a| {
                    if a.is_empty() || a.contains(char::is_whitespace) {
                        format!("{a:?}")
                    } else {
                        a.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
            McpTransport::Remote { url, .. } => url.clone(),
        }
    }
}

const KEYS: [&str; 10] = [
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "enabled",
    "timeoutSeconds",
    "headers",
    "allowReadOnlyTools",
];

pub fn servers(v: &Value) -> Result<Vec<McpServerSpec>, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("must be an object of servers by name, got {v}"))?;
    obj.iter().map(|(name, spec)| server(name, spec)).collect()
}

/// An MCP server's name becomes part of its tools' names
/// (`mcp__<server>__<tool>`): 1–64 letters, digits, `-` or `_`, and no
/// `__`, which would make a tool name split in two ways.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        return Ok(());
    }
    Err(format!(
        "server name {} must be 1–64 letters, digits, `-` or `_`, without `__` (it becomes part of tool names: mcp__<server>__<tool>)",
        crate::domain::ids::quoted(name)
    ))
}

fn server(name: &str, v: &Value) -> Result<McpServerSpec, String> {
    check_server_name(name)?;
    let at = format!("server `{name}`: ");
    let obj = v
        .as_object()
        .ok_or_else(|| format!("{at}must be an object, got {v}"))?;
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "{at}unknown key `{k}` (known: {})",
            KEYS.join(", ")
        ));
    }
    let kind = string(obj, "type", &at)?.unwrap_or_else(|| {
        if obj.contains_key("url") {
            "http".into()
        } else {
            "stdio".into()
        }
    });
    let transport = match kind.as_str() {
        "stdio" => McpTransport::Stdio {
            command: string(obj, "command", &at)?
                .ok_or_else(|| format!("{at}`command` is missing"))?,
            args: strings(obj, "args", &at)?,
            env: match obj.get("env") {
                None => Vec::new(),
                Some(Value::Object(env)) => env
                    .iter()
                    .map(|(k, v)| match v {
                        Value::String(s) => Ok((k.clone(), s.clone())),
                        other => Err(format!("{at}`env.{k}` must be a string, got {other}")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(other) => return Err(format!("{at}`env` must be an object, got {other}")),
            },
            cwd: string(obj, "cwd", &at)?,
        },
        "http" | "sse" | "streamable-http" => McpTransport::Remote {
            url: string(obj, "url", &at)?.ok_or_else(|| format!("{at}`url` is missing"))?,
            kind,
        },
        other => {
            return Err(format!(
                "{at}`type` must be stdio, http or sse, got {other:?}"
            ));
        }
    };
    let enabled = match obj.get("enabled") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("{at}`enabled` must be true or false, got {other}")),
    };
    let allow_read_only_tools = match obj.get("allowReadOnlyTools") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "{at}`allowReadOnlyTools` must be true or false, got {other}"
            ));
        }
    };
    let timeout_seconds = match obj.get("timeoutSeconds") {
        None => 30,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=3600).contains(n))
            .ok_or_else(|| {
                format!("{at}`timeoutSeconds` must be a whole number from 1 to 3600, got {v}")
            })?,
    };
    Ok(McpServerSpec {
        name: name.to_string(),
        transport,
        enabled,
        timeout_seconds,
        allow_read_only_tools,
    })
}

fn string(obj: &Map<String, Value>, key: &str, at: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "{at}`{key}` must be a non-empty string, got {other}"
        )),
    }
}

fn strings(obj: &Map<String, Value>, key: &str, at: &str) -> Result<Vec<String>, String> {
    match obj.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("{at}`{key}` must hold strings, got {i}"))
            })
            .collect(),
        Some(other) => Err(format!(
            "{at}`{key}` must be a list of strings, got {other}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tinycode_and_claude_shapes_parse() {
        let v = serde_json::json!({
            "everything": { "command": "npx", "args": ["-y", "server-everything"], "env": {"A": "1"} },
            "remote": { "type": "http", "url": "https://mcp.example/x" },
            "off": { "command": "x", "enabled": false, "timeoutSeconds": 5 }
        });
        let s = servers(&v).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0].transport,
            McpTransport::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "server-everything".into()],
                env: vec![("A".into(), "1".into())],
                cwd: None
            }
        );
        assert!(s[0].enabled && s[0].timeout_seconds == 30);
        assert!(matches!(&s[1].transport, McpTransport::Remote { kind, .. } if kind == "http"));
        assert!(!s[2].enabled && s[2].timeout_seconds == 5);
        for spec in &s {
            let again = servers(&serde_json::json!({ spec.name.clone(): spec.to_json() })).unwrap();
            assert_eq!(&again[0], spec, "to_json round-trips");
        }
        assert_eq!(s[0].launch(), "npx -y server-everything");
    }

    #[test]
    fn bad_servers_are_named() {
        for (v, expected) in [
            (
                serde_json::json!({"a b": {"command": "x"}}),
                "server name \"a b\"",
            ),
            (
                serde_json::json!({"x": {"args": []}}),
                "server `x`: `command` is missing",
            ),
            (
                serde_json::json!({"x": {"command": "c", "colour": 1}}),
                "unknown key `colour`",
            ),
            (
                serde_json::json!({"x": {"command": "c", "args": "y"}}),
                "`args` must be a list",
            ),
            (
                serde_json::json!({"x": {"type": "ws", "url": "u"}}),
                "`type` must be stdio",
            ),
        ] {
            let err = servers(&v).unwrap_err();
            assert!(err.contains(expected), "{v}: {err}");
        }
    }
}
