//! Managing extensions while the daemon runs: MCP servers in
//! `.tinycode/config.json` (the hub reconnects what changed) and skill
//! folders in `.tinycode/skills/` (reloaded for the next turn). One change
//! at a time; file work on blocking threads.
//!
//! Decision: these are workspace files, as in TinyCode (a person may edit
//! them by hand too), not events in the log; the log records what the
//! tools did, not which tools were configured.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::config::{ConfigEditError, McpServerSpec};
use crate::mcp::{McpHub, ServerStatus};
use crate::skills::{Skill, SkillInstallError, Skills};

#[derive(Debug, thiserror::Error)]
pub enum ExtensionError {
    #[error(transparent)]
    Config(#[from] ConfigEditError),
    #[error(transparent)]
    Skill(#[from] SkillInstallError),
    #[error("{0}")]
    Invalid(String),
    #[error("the daemon is stopping")]
    Stopping,
}

pub struct Extensions {
    workspace: PathBuf,
    mcp: Arc<McpHub>,
    skills: Arc<Skills>,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl Extensions {
    pub fn new(workspace: &Path, mcp: Arc<McpHub>, skills: Arc<Skills>) -> Arc<Self> {
        Arc::new(Self {
            workspace: workspace.to_path_buf(),
            mcp,
            skills,
            one_at_a_time: tokio::sync::Mutex::new(()),
        })
    }

    /// The configured servers and their state, in config order.
    pub fn mcp_servers(&self) -> Vec<(McpServerSpec, ServerStatus)> {
        self.mcp.servers()
    }

    /// Add (or replace) a server in the config and connect it; returns it
    /// (usually still `connecting`).
    pub async fn add_mcp_server(
        &self,
        name: &str,
        spec_json: &str,
        replace: bool,
    ) -> Result<(McpServerSpec, ServerStatus), ExtensionError> {
        let spec: Value = serde_json::from_str(spec_json)
            .map_err(|e| ExtensionError::Invalid(format!("the server's spec is not JSON: {e}")))?;
        let _turn = self.one_at_a_time.lock().await;
        let (workspace, name_owned) = (self.workspace.clone(), name.to_string());
        let config =
            blocking(move || crate::config::put_mcp_server(&workspace, &name_owned, spec, replace))
                .await??;
        self.mcp.reconfigure(&config.mcp_servers).await;
        self.mcp
            .servers()
            .into_iter()
            .find(|(spec, _)| spec.name == name)
            .ok_or_else(|| ExtensionError::Invalid(format!("server `{name}` was not kept")))
    }

    /// Remove a server from the config; its process stops, its tools go.
    pub async fn remove_mcp_server(&self, name: &str) -> Result<(), ExtensionError> {
        let _turn = self.one_at_a_time.lock().await;
        let (workspace, name) = (self.workspace.clone(), name.to_string());
        let config =
            blocking(move || crate::config::remove_mcp_server(&workspace, &name)).await??;
        self.mcp.reconfigure(&config.mcp_servers).await;
        Ok(())
    }

    /// Install the skill at `path` (absolute); the next turn sees it.
    pub async fn install_skill(&self, path: &str, replace: bool) -> Result<Skill, ExtensionError> {
        let from = PathBuf::from(path);
        if !from.is_absolute() {
            return Err(ExtensionError::Invalid(format!(
                "the skill's path must be absolute (the daemon's working directory is not yours), got {path:?}"
            )));
        }
        let _turn = self.one_at_a_time.lock().await;
        let workspace = self.workspace.clone();
        let skill = blocking(move || crate::skills::install(&workspace, &from, replace)).await??;
        self.reload_skills();
        Ok(skill)
    }

    /// Remove an installed skill; the next turn no longer sees it.
    pub async fn remove_skill(&self, name: &str) -> Result<(), ExtensionError> {
        let _turn = self.one_at_a_time.lock().await;
        let (workspace, name) = (self.workspace.clone(), name.to_string());
        blocking(move || crate::skills::remove(&workspace, &name)).await??;
        self.reload_skills();
        Ok(())
    }

    fn reload_skills(&self) {
        for warning in self.skills.reload() {
            tracing::warn!("{warning}");
        }
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ExtensionError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ExtensionError::Stopping)
}
