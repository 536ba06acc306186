//! Changes to `.tinycode/config.json` made by the daemon itself (`tinycode
//! mcp add|remove`): the file is read as it is now (hand edits included),
//! one key changed, the whole result validated like a start-up load, and
//! written with a temp file and a rename — a config that would not load is
//! never written. Key order and every other key are kept.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{CONFIG_FILE, Config, ConfigError};

#[derive(Debug, thiserror::Error)]
pub enum ConfigEditError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("no MCP server named {name} in {} (known: {known})", path.display())]
    NoSuchServer {
        name: String,
        path: PathBuf,
        known: String,
    },
    #[error("an MCP server named `{name}` is already in {}; remove it first, or add with --replace", path.display())]
    ServerExists { name: String, path: PathBuf },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Add (or with `replace`, replace) the MCP server `name` with `spec` (its
/// object as it appears under `mcpServers`); returns the new config.
pub fn put_mcp_server(
    workspace: &Path,
    name: &str,
    spec: Value,
    replace: bool,
) -> Result<Config, ConfigEditError> {
    edit(workspace, |path, servers| {
        if servers.contains_key(name) && !replace {
            return Err(ConfigEditError::ServerExists {
                name: name.to_string(),
                path: path.to_path_buf(),
            });
        }
        servers.insert(name.to_string(), spec);
        Ok(())
    })
}

/// Remove the MCP server `name`; returns the new config.
pub fn remove_mcp_server(workspace: &Path, name: &str) -> Result<Config, ConfigEditError> {
    edit(workspace, |path, servers| {
        if servers.shift_remove(name).is_none() {
            return Err(ConfigEditError::NoSuchServer {
                name: crate::domain::ids::quoted(name),
                path: path.to_path_buf(),
                known: if servers.is_empty() {
                    "none".into()
                } else {
                    servers.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            });
        }
        Ok(())
    })
}

fn edit(
    workspace: &Path,
    change: impl FnOnce(&Path, &mut Map<String, Value>) -> Result<(), ConfigEditError>,
) -> Result<Config, ConfigEditError> {
    let path = workspace.join(CONFIG_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "{}".into(),
        Err(source) => return Err(ConfigError::Read { path, source }.into()),
    };
    let json = |message: String| ConfigError::Json {
        path: path.clone(),
        message,
    };
    let mut root: Value = serde_json::from_str(&text).map_err(|e| json(e.to_string()))?;
    let obj = root
        .as_object_mut()
        .ok_or_else(|| json("the top level must be an object".into()))?;
    let servers = obj
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| json("`mcpServers` must be an object of servers by name".into()))?;
    change(&path, servers)?;
    let mut text = serde_json::to_string_pretty(&root).map_err(|e| json(e.to_string()))?;
    text.push('\n');
    let config = Config::parse(&path, &text)?;
    let dir = path.parent().unwrap_or(workspace);
    crate::files::replace(&path, text.as_bytes(), 0o644)
        .and_then(|_| crate::files::sync_dir(dir))
        .map_err(|source| ConfigEditError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".tinycode")).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), config).unwrap();
        dir
    }

    #[test]
    fn a_server_is_added_and_removed_keeping_every_other_key() {
        let ws = workspace(
            r#"{"model": "offline", "mcpServers": {"a": {"command": "x"}}, "maxStepsPerTurn": 9}"#,
        );
        let config = put_mcp_server(
            ws.path(),
            "b",
            serde_json::json!({"command": "y", "args": ["1"]}),
            false,
        )
        .unwrap();
        assert_eq!(config.mcp_servers.len(), 2);
        let text = std::fs::read_to_string(ws.path().join(CONFIG_FILE)).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["model", "mcpServers", "maxStepsPerTurn"]
        );
        assert_eq!(v["mcpServers"]["b"]["args"][0], "1");
        let err =
            put_mcp_server(ws.path(), "b", serde_json::json!({"command": "z"}), false).unwrap_err();
        assert!(err.to_string().contains("already"), "{err}");
        put_mcp_server(ws.path(), "b", serde_json::json!({"command": "z"}), true).unwrap();
        let config = remove_mcp_server(ws.path(), "a").unwrap();
        assert_eq!(config.mcp_servers.len(), 1);
        assert_eq!(config.max_steps_per_turn, 9);
        let err = remove_mcp_server(ws.path(), "a").unwrap_err();
        assert!(err.to_string().contains("known: b"), "{err}");
    }

    #[test]
    fn a_change_that_would_not_load_is_never_written() {
        let before = r#"{"mcpServers": {}}"#;
        let ws = workspace(before);
        let err = put_mcp_server(
            ws.path(),
            "bad name",
            serde_json::json!({"command": "x"}),
            false,
        )
        .unwrap_err();
        assert!(err.to_string().contains("bad name"), "{err}");
        let err =
            put_mcp_server(ws.path(), "x", serde_json::json!({"args": []}), false).unwrap_err();
        assert!(err.to_string().contains("`command` is missing"), "{err}");
        assert_eq!(
            std::fs::read_to_string(ws.path().join(CONFIG_FILE)).unwrap(),
            before
        );
    }

    #[test]
    fn a_workspace_without_a_config_gets_one() {
        let dir = tempfile::tempdir().unwrap();
        let config =
            put_mcp_server(dir.path(), "e", serde_json::json!({"command": "x"}), false).unwrap();
        assert_eq!(config.mcp_servers[0].name, "e");
        assert!(dir.path().join(CONFIG_FILE).is_file());
    }
}
