//! Creating, renaming, forking, deleting and pruning sessions.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::*;

use super::orphans::interrupted_turn;
use super::*;

impl Sessions {
    pub async fn create(
        &self,
        title: &str,
        model: &str,
        approve: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let approve = ApprovalMode::parse(approve)
            .map_err(|problem| SessionError::Invalid {
                field: "approve",
                problem,
            })?
            .unwrap_or(self.defaults().approve);
        let model = if model.trim().is_empty() {
            self.defaults().model.clone()
        } else {
            model.trim().to_string()
        };
        // Fail now, not at the first turn, when the model cannot be used.
        self.usable_model(&model, &self.defaults().providers)
            .map_err(|message| SessionError::Model {
                model: model.clone(),
                message,
            })?;
        let id = self.new_id();
        let title = if title.trim().is_empty() {
            format!("session {id}")
        } else {
            title.trim().chars().take(MAX_NAME).collect()
        };
        let events = self
            .store
            .append(
                &session_stream(&id),
                ExpectedVersion::NoStream,
                vec![Payload::SessionCreated(SessionCreated {
                    title,
                    model,
                    created_by: Some(by),
                    approve: approve.as_str().into(),
                    ..SessionCreated::default()
                })],
            )
            .await?;
        self.read_at(last(&events)).await?;
        self.get(&id)
    }

    pub async fn rename(
        self: &Arc<Self>,
        raw: &str,
        title: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let id = self.get(raw)?.id;
        let title: String = title.trim().chars().take(MAX_NAME).collect();
        if title.is_empty() {
            return Err(SessionError::Invalid {
                field: "title",
                problem: "is empty".into(),
            });
        }
        let renamed = tinycode_shared::proto::SessionRenamed {
            title,
            by: Some(by),
        };
        self.record(&id, vec![Payload::SessionRenamed(renamed)])
            .await?;
        self.get(&id)
    }

    /// The session's next turns use `model` (a running turn keeps its
    /// own); refused when the provider is unknown or has no key.
    pub async fn set_model(
        self: &Arc<Self>,
        raw: &str,
        model: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let state = self.get(raw)?;
        let model = model.trim();
        self.usable_model(model, &self.defaults().providers)
            .map_err(|message| SessionError::Model {
                model: model.to_string(),
                message,
            })?;
        if state.model != model {
            let changed = tinycode_shared::proto::SessionModelChanged {
                model: model.to_string(),
                by: Some(by),
                previous: state.model.clone(),
            };
            self.record(&state.id, vec![Payload::SessionModelChanged(changed)])
                .await?;
        }
        self.get(&state.id)
    }

    /// Cancel the running turn, then mark the session deleted (its events
    /// stay in the log). Returns whether a turn was cancelled.
    pub async fn delete(self: &Arc<Self>, raw: &str, by: ClientRef) -> Result<bool, SessionError> {
        let id = self.get(raw)?.id;
        let cancelled = self.cancel(&id)?;
        // Its workers go with it.
        for child in self.children(&id)? {
            self.stop_worker(&child.id);
            let deleted = tinycode_shared::proto::SessionDeleted {
                by: Some(by.clone()),
            };
            self.record(&child.id, vec![Payload::SessionDeleted(deleted)])
                .await?;
        }
        let deleted = tinycode_shared::proto::SessionDeleted { by: Some(by) };
        self.record(&id, vec![Payload::SessionDeleted(deleted)])
            .await?;
        self.recall.forget(&id);
        // Its artifacts (full tool results) go with it; the events stay.
        if let Some(root) = &self.defaults().artifact_root {
            let dir = root.join(&id);
            if let Err(e) = tokio::fs::remove_dir_all(&dir).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(session = %id, error = %e, "could not remove the session's artifacts");
            }
        }
        Ok(cancelled)
    }

    /// Delete every session idle (no running or queued turn) whose last
    /// event is older than `older_than`; with `dry_run`, only name them.
    pub async fn prune(
        self: &Arc<Self>,
        older_than: Duration,
        dry_run: bool,
        by: ClientRef,
    ) -> Result<Vec<String>, SessionError> {
        let cutoff = crate::clock::now_unix() - older_than.as_secs() as i64;
        let old: Vec<String> = model::newest(self.projector.tree())
            .filter_map(Result::ok)
            .filter(|s| !s.deleted && s.last_at < cutoff)
            .filter(|s| {
                let a = self.activity(&s.id);
                a.running == 0 && a.queued == 0
            })
            .map(|s| s.id)
            .collect();
        if !dry_run {
            for id in &old {
                self.delete(id, by.clone()).await?;
            }
        }
        Ok(old)
    }

    /// A new session with this one's history up to `up_to` (0: all). A turn
    /// the cut leaves unfinished is recorded as interrupted in the fork.
    pub async fn fork(
        self: &Arc<Self>,
        raw: &str,
        up_to: u64,
        title: &str,
        by: ClientRef,
    ) -> Result<SessionState, SessionError> {
        let source = self.get(raw)?;
        let to = if up_to == 0 { u64::MAX } else { up_to };
        let copied = self
            .stored(&source.id, source.created_sequence + 1, to)
            .await?;
        let forked_at = copied
            .last()
            .map_or(source.created_sequence, |e| e.sequence);
        let title = if title.trim().is_empty() {
            format!("fork of {}", source.title)
        } else {
            title.trim().chars().take(MAX_NAME).collect()
        };
        let mut payloads = vec![Payload::SessionCreated(SessionCreated {
            title,
            model: source.model.clone(),
            created_by: Some(by),
            approve: source.approve.as_str().into(),
            forked_from: source.id.clone(),
            forked_at,
            // A fork is a session of its own, even a worker's.
            parent: None,
        })];
        payloads.extend(copied.into_iter().filter_map(|e| match e.payload {
            Some(
                p @ (Payload::UserMessageAdded(_)
                | Payload::TurnStarted(_)
                | Payload::AssistantMessageAdded(_)
                | Payload::ToolCallFinished(_)
                | Payload::TurnCompleted(_)),
            ) => Some(p),
            _ => None,
        }));
        let mut probe = SessionState::default();
        for p in &payloads {
            let event = tinycode_shared::proto::Event {
                payload: Some(p.clone()),
                ..Default::default()
            };
            probe.apply(&event);
        }
        for turn in probe.unfinished() {
            payloads.push(interrupted_turn(
                turn,
                probe.turns.get(&turn),
                format!("the fork was cut at sequence {forked_at}, inside this turn"),
            ));
        }
        let id = self.new_id();
        let events = self
            .store
            .append(&session_stream(&id), ExpectedVersion::NoStream, payloads)
            .await?;
        self.read_at(last(&events)).await?;
        self.get(&id)
    }
}
