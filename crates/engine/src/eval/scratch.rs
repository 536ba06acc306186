//! A scratch desk for an evaluation: a workspace under the state dir with a
//! copy of the desk's rules, knowledge, skills and config (no tickets, no
//! MCP servers, no shared store, auto-triage off, approvals `auto`), the
//! labelled rows as open tickets, and a `tinycoded` of its own. Tickets are
//! triaged through its sessions exactly as the triage worker does it, and
//! read back. The live desk is never touched.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinycode_shared::client::{ClientName, DaemonChannel};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AttachRequest, CreateSessionRequest, GetTicketRequest, SendMessageRequest, Ticket, TurnOutcome,
    session_update::Update,
};

use super::EvalError;
use super::labels::Labelled;

/// How long the scratch daemon may take to answer.
const START_WAIT: Duration = Duration::from_secs(30);

pub struct Scratch {
    dir: PathBuf,
    child: tokio::process::Child,
    channel: DaemonChannel,
    prompt: String,
}

/// One ticket's triage.
pub struct Triaged {
    pub ticket: Ticket,
    pub completed: bool,
    pub millis: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

fn io(what: &str, path: &Path, e: impl std::fmt::Display) -> EvalError {
    EvalError::Scratch(format!("{what} {}: {e}", path.display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), EvalError> {
    if !from.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(to).map_err(|e| io("cannot create", to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| io("cannot read", from, e))? {
        let entry = entry.map_err(|e| io("cannot read", from, e))?;
        let kind = entry.file_type().map_err(|e| io("cannot read", from, e))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).map_err(|e| io("cannot copy", &target, e))?;
        }
    }
    Ok(())
}

/// The scratch ticket id of row `n` in run `run` (both from 1).
pub fn ticket_id(run: u32, n: usize) -> String {
    format!("E{run}-{n:05}")
}

/// Copy the live desk's rules, knowledge and skills into the scratch
/// workspace `ws`.
fn copy_desk(live: &Path, config: &crate::config::Config, ws: &Path) -> Result<(), EvalError> {
    std::fs::create_dir_all(ws.join(".tinycode")).map_err(|e| io("cannot create", ws, e))?;
    for file in ["TINY.md", "AGENTS.md", "CLAUDE.md"] {
        let from = live.join(file);
        if from.is_file() {
            std::fs::copy(&from, ws.join(file)).map_err(|e| io("cannot copy", &from, e))?;
        }
    }
    copy_tree(&live.join(&config.knowledge_dir), &ws.join("knowledge"))?;
    copy_tree(&live.join(".tinycode/skills"), &ws.join(".tinycode/skills"))?;
    copy_tree(&live.join(".claude/skills"), &ws.join(".claude/skills"))?;
    Ok(())
}

/// The live config without what reaches outside the scratch desk, with
/// approvals `auto`.
fn write_config(live: &Path, ws: &Path) -> Result<(), EvalError> {
    let mut settings: Value = std::fs::read_to_string(live.join(crate::config::CONFIG_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({}));
    if let Some(obj) = settings.as_object_mut() {
        // Its own log, its own files; nothing outside it runs.
        for key in [
            "store",
            "mcpServers",
            "autoTriage",
            // Every decision is measured, none held for review.
            "triage",
            "knowledgeDir",
            "ticketsDir",
        ] {
            obj.remove(key);
        }
        obj.insert("permissionMode".into(), "auto".into());
    }
    let config_path = ws.join(crate::config::CONFIG_FILE);
    std::fs::write(&config_path, settings.to_string())
        .map_err(|e| io("cannot write", &config_path, e))
}

/// Each labelled row, once per run, as an open ticket file.
fn write_tickets(ws: &Path, rows: &[Labelled], runs: u32) -> Result<(), EvalError> {
    let tickets = ws.join("tickets");
    std::fs::create_dir_all(&tickets).map_err(|e| io("cannot create", &tickets, e))?;
    let at = crate::clock::now_rfc3339();
    for run in 1..=runs {
        for (i, row) in rows.iter().enumerate() {
            let id = ticket_id(run, i + 1);
            let file = json!({
                "id": id, "subject": row.subject, "customer": "eval", "channel": "web",
                "createdAt": at, "slaMinutes": 1440, "status": "open",
                "messages": [{"from": "customer", "text": if row.body.is_empty() { &row.subject } else { &row.body }, "at": at}]
            });
            let path = tickets.join(format!("{id}.json"));
            std::fs::write(&path, file.to_string()).map_err(|e| io("cannot write", &path, e))?;
        }
    }
    Ok(())
}

/// Start this binary as the scratch desk's daemon (killed when dropped);
/// with `frozen`, its offline model is that kept model, never retrained.
fn spawn_daemon(
    ws: &Path,
    model: &str,
    frozen: Option<&Path>,
) -> Result<tokio::process::Child, EvalError> {
    let exe = std::env::current_exe().map_err(|e| EvalError::Scratch(e.to_string()))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("--workspace")
        .arg(ws)
        .env_remove("TINYCODE_HOME")
        .env_remove("TINYCODE_STORE_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if !model.is_empty() {
        cmd.env("TINYCODE_MODEL", model);
    }
    match frozen {
        Some(path) => cmd.env(crate::learn::tickets::FROZEN_MODEL_ENV, path),
        None => cmd.env_remove(crate::learn::tickets::FROZEN_MODEL_ENV),
    };
    cmd.spawn()
        .map_err(|e| EvalError::Scratch(format!("cannot start the scratch daemon: {e}")))
}

/// Connect to the scratch daemon, trying again until it answers or
/// `START_WAIT` has passed.
async fn connect(ws: &Path) -> Result<DaemonChannel, EvalError> {
    let layout = tinycode_shared::paths::Layout::resolve(
        Some(ws),
        ws,
        None,
        &tinycode_shared::paths::runtime_dir(),
    )
    .map_err(|e| EvalError::Scratch(e.to_string()))?;
    let name = ClientName::new("tinycoded-eval").map_err(|e| EvalError::Scratch(e.to_string()))?;
    let started = Instant::now();
    loop {
        match tinycode_shared::client::connect(&layout.socket, &name).await {
            Ok(channel) => return Ok(channel),
            Err(_) if started.elapsed() < START_WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(EvalError::Scratch(format!(
                    "the scratch daemon did not answer within {} s ({e}); its log: {}",
                    START_WAIT.as_secs(),
                    layout.log_path().display()
                )));
            }
        }
    }
}

impl Scratch {
    /// Build the scratch workspace under `root` and start its daemon;
    /// `history`: the live desk's kept offline model, copied in and used
    /// frozen (`eval --with-history`).
    pub async fn start(
        live: &Path,
        config: &crate::config::Config,
        root: &Path,
        model: &str,
        (rows, runs): (&[Labelled], u32),
        history: Option<&Path>,
    ) -> Result<Self, EvalError> {
        let ws = root.join("workspace");
        copy_desk(live, config, &ws)?;
        write_config(live, &ws)?;
        write_tickets(&ws, rows, runs)?;
        let frozen = match history {
            Some(kept) => {
                let copy = root.join("frozen-model.bin");
                std::fs::copy(kept, &copy).map_err(|e| {
                    io("cannot copy the desk's learned model (has the daemon trained one? `tinycode daemon status`)", kept, e)
                })?;
                Some(copy)
            }
            None => None,
        };
        let child = spawn_daemon(&ws, model, frozen.as_deref())?;
        let channel = connect(&ws).await?;
        Ok(Self {
            dir: root.to_path_buf(),
            child,
            channel,
            prompt: config.auto_triage.prompt.clone(),
        })
    }

    /// Triage one scratch ticket in a session of its own, as the triage
    /// worker does, and read it back.
    pub async fn triage(&self, id: &str) -> Result<Triaged, EvalError> {
        let rpc =
            |e: tonic::Status| EvalError::Scratch(format!("the scratch daemon: {}", e.message()));
        let started = Instant::now();
        let mut sessions = SessionsClient::new(self.channel.clone());
        let session = sessions
            .create(CreateSessionRequest {
                title: format!("eval {id}"),
                approve: "auto".into(),
                ..CreateSessionRequest::default()
            })
            .await
            .map_err(rpc)?
            .into_inner();
        let mut updates = sessions
            .attach(AttachRequest {
                session_id: session.id.clone(),
                from_sequence: session.created_sequence,
            })
            .await
            .map_err(rpc)?
            .into_inner();
        sessions
            .send_message(SendMessageRequest {
                session_id: session.id.clone(),
                text: self.prompt.replace("{id}", id),
                ..SendMessageRequest::default()
            })
            .await
            .map_err(rpc)?;
        let mut outcome = None;
        while let Some(update) = updates.message().await.map_err(rpc)? {
            if let Some(Update::Event(e)) = update.update
                && let Some(Payload::TurnCompleted(done)) = e.payload
            {
                outcome = Some(done);
                break;
            }
        }
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        let ticket = TicketsClient::new(self.channel.clone())
            .get(GetTicketRequest {
                id: id.to_string(),
                ..GetTicketRequest::default()
            })
            .await
            .map_err(rpc)?
            .into_inner();
        let usage = outcome.as_ref().and_then(|o| o.usage).unwrap_or_default();
        Ok(Triaged {
            ticket,
            completed: outcome.is_some_and(|o| o.outcome == TurnOutcome::Completed as i32),
            millis,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        })
    }

    /// Stop the scratch daemon and remove its workspace.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove an evaluation's scratch desk");
        }
    }
}
