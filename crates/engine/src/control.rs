//! The daemon's own controls while it runs.
//!
//! - **Reload** (`tinycode daemon reload`, `Daemon.Reload`, SIGHUP): the
//!   config is read again and validated whole, exactly as at start; a config
//!   that would not start the daemon changes nothing. What can change live
//!   is applied — new turns get the new model, providers, permission mode
//!   and rules, limits, context and sub-agent settings (a running turn keeps
//!   what it started with); auto-triage gets its new concurrency and prompt
//!   at once (an unset concurrency follows a new default model); MCP
//!   servers that changed are restarted; skills are read again.
//!   What the open desk or the log was built from (the workspace folders,
//!   queues, categories, the store, `sla`) is reported as needing a restart.
//! - **Drain** (`tinycode daemon restart`): before a stop, no new turn
//!   starts and the running ones reach a safe point — completed, or waiting
//!   for a person (an approval is durable: its turn resumes after the
//!   restart).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, ConfigError};
use crate::mcp::McpHub;
use crate::sessions::{Sessions, TurnDefaults};
use crate::skills::Skills;
use crate::triage::Triage;

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// Keys whose new value is in force now.
    pub applied: Vec<String>,
    /// Keys that changed but wait for a restart, each with why.
    pub needs_restart: Vec<String>,
    /// Unknown keys, unreadable skills.
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("{0}; nothing was changed")]
    Config(#[from] ConfigError),
    #[error("{0}; nothing was changed")]
    Model(String),
    #[error("the config could not be read: {0}")]
    Blocking(String),
}

pub struct Control {
    workspace: PathBuf,
    artifact_root: PathBuf,
    /// The config in force: what the daemon started with, changed by each
    /// reload (keys that need a restart keep their started value).
    in_force: tokio::sync::Mutex<Config>,
    /// Keys changed since the start that wait for a restart.
    pending_restart: std::sync::Mutex<Vec<String>>,
    sessions: Arc<Sessions>,
    triage: Arc<Triage>,
    mcp: Arc<McpHub>,
    /// The connectors' sources follow a reload.
    connectors: Arc<crate::connectors::Connectors>,
    skills: Arc<Skills>,
}

/// The keys a reload applies to new turns.
fn turn_keys(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let mut changed = |key, differs: bool| {
        if differs {
            keys.push(key);
        }
    };
    changed("model", old.model != new.model);
    changed("providers", old.providers != new.providers);
    changed("permissionMode", old.permission_mode != new.permission_mode);
    changed("permissions", old.allow != new.allow);
    changed(
        "maxStepsPerTurn",
        old.max_steps_per_turn != new.max_steps_per_turn,
    );
    changed(
        "maxToolResultChars",
        old.max_tool_result_chars != new.max_tool_result_chars,
    );
    changed("context", old.compaction != new.compaction);
    changed(
        "approvalTimeoutSeconds",
        old.approval_timeout != new.approval_timeout,
    );
    changed("turnTimeoutSeconds", old.turn_timeout != new.turn_timeout);
    changed("subAgents", old.sub_agents != new.sub_agents);
    keys
}

/// The keys that changed but need a restart, with why.
fn restart_keys(old: &Config, new: &Config) -> Vec<String> {
    let mut keys = Vec::new();
    let mut changed = |key: &str, differs: bool, why: &str| {
        if differs {
            keys.push(format!("{key} ({why})"));
        }
    };
    changed(
        "knowledgeDir",
        old.knowledge_dir != new.knowledge_dir,
        "the desk reads and writes its files there",
    );
    changed(
        "ticketsDir",
        old.tickets_dir != new.tickets_dir,
        "the desk reads and writes its files there",
    );
    changed(
        "queues",
        old.queues != new.queues,
        "the desk's taxonomy is built at start",
    );
    changed(
        "categories",
        old.categories != new.categories,
        "the desk's taxonomy is built at start",
    );
    changed(
        "store",
        old.store_url != new.store_url || old.lease != new.lease,
        "the log is opened at start",
    );
    changed(
        "sla",
        old.sla != new.sla,
        "the SLA schedule is made with the policies the desk opened with",
    );
    changed(
        "reports",
        old.daily_report != new.daily_report || old.prices != new.prices,
        "the daily report's schedule and the models' prices are read at start",
    );
    keys
}

impl Control {
    pub fn new(
        config: Config,
        artifact_root: PathBuf,
        sessions: Arc<Sessions>,
        triage: Arc<Triage>,
        (mcp, connectors): (Arc<McpHub>, Arc<crate::connectors::Connectors>),
        skills: Arc<Skills>,
    ) -> Arc<Self> {
        Arc::new(Self {
            workspace: sessions.workspace.clone(),
            artifact_root,
            in_force: tokio::sync::Mutex::new(config),
            pending_restart: std::sync::Mutex::new(Vec::new()),
            sessions,
            triage,
            mcp,
            connectors,
            skills,
        })
    }

    /// Keys changed since the start that wait for a restart.
    pub fn needs_restart(&self) -> Vec<String> {
        crate::sync::lock(&self.pending_restart).clone()
    }

    /// Read the config again and apply it (see the module's doc). One
    /// reload at a time.
    pub async fn reload(&self) -> Result<Reloaded, ReloadError> {
        let mut in_force = self.in_force.lock().await;
        let workspace = self.workspace.clone();
        let new = tokio::task::spawn_blocking(move || Config::load(&workspace))
            .await
            .map_err(|e| ReloadError::Blocking(e.to_string()))??;
        let defaults = TurnDefaults::from_config(&new, Some(self.artifact_root.clone()));
        // A model that cannot be used is refused now, not at the next turn.
        self.sessions
            .usable_model(&defaults.model, &defaults.providers)
            .map_err(ReloadError::Model)?;
        let mut done = Reloaded {
            warnings: new.warnings.clone(),
            ..Reloaded::default()
        };
        let turn = turn_keys(&in_force, &new);
        let model_changed = self.sessions.defaults().model != defaults.model;
        if !turn.is_empty() || model_changed {
            self.sessions.set_defaults(defaults);
        }
        done.applied.extend(turn.into_iter().map(String::from));
        // An unset `autoTriage.concurrency` follows the default model.
        let slots = self.triage.slot_count();
        if in_force.auto_triage != new.auto_triage || model_changed {
            self.triage
                .set_config(new.auto_triage.clone())
                .await
                .map_err(|e| ReloadError::Blocking(e.to_string()))?;
        }
        if in_force.auto_triage != new.auto_triage {
            done.applied.push("autoTriage".into());
        } else if self.triage.slot_count() != slots {
            done.applied.push(format!(
                "autoTriage slots ({slots} -> {}, by the model)",
                self.triage.slot_count()
            ));
        }
        if in_force.mcp_servers != new.mcp_servers {
            self.mcp.reconfigure(&new.mcp_servers).await;
            done.applied.push("mcpServers".into());
        }
        if in_force.connectors != new.connectors {
            self.connectors.set_sources(new.connectors.clone());
            done.applied.push("connectors".into());
        }
        let before: Vec<String> = skill_names(&self.skills);
        done.warnings.extend(self.skills.reload());
        if skill_names(&self.skills) != before {
            done.applied.push("skills".into());
        }
        done.needs_restart = restart_keys(&in_force, &new);
        *crate::sync::lock(&self.pending_restart) = done.needs_restart.clone();
        // What needs a restart keeps its started value: `in_force` says
        // what the daemon runs with.
        let kept = Config {
            knowledge_dir: in_force.knowledge_dir.clone(),
            tickets_dir: in_force.tickets_dir.clone(),
            queues: in_force.queues.clone(),
            categories: in_force.categories.clone(),
            store_url: in_force.store_url.clone(),
            lease: in_force.lease,
            ..new
        };
        *in_force = kept;
        tracing::info!(
            applied = ?done.applied,
            needs_restart = ?done.needs_restart,
            "config reloaded"
        );
        for w in &done.warnings {
            tracing::warn!("{w}");
        }
        Ok(done)
    }

    /// Before a restart: no new turn starts and running turns reach a safe
    /// point, for at most `limit`. Returns the turns still running then.
    pub async fn drain(&self, limit: Duration) -> Vec<String> {
        self.sessions.begin_drain();
        self.triage.pause();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let busy = self.sessions.busy_turns();
            if busy.is_empty() || tokio::time::Instant::now() >= deadline {
                if !busy.is_empty() {
                    tracing::warn!(
                        ?busy,
                        "turns still running after the drain; they will be marked interrupted"
                    );
                }
                return busy;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn skill_names(skills: &Skills) -> Vec<String> {
    skills
        .current()
        .all()
        .map(|s| format!("{}\u{0}{}", s.name, s.body.len()))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_sorted_into_live_and_restart() {
        let old = Config::default();
        let new = Config {
            model: "openai/gpt-4o".into(),
            permission_mode: crate::permissions::ApprovalMode::Auto,
            queues: vec!["VIP".into()],
            max_steps_per_turn: 3,
            ..Config::default()
        };
        assert_eq!(
            turn_keys(&old, &new),
            ["model", "permissionMode", "maxStepsPerTurn"]
        );
        let restart = restart_keys(&old, &new);
        assert_eq!(restart.len(), 1);
        assert!(restart[0].starts_with("queues ("), "{restart:?}");
        assert!(turn_keys(&old, &old).is_empty() && restart_keys(&old, &old).is_empty());
    }
}
