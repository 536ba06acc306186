//! What clients do with a session's turns: send a message (its turn runs
//! on the session's actor, here or on the daemon running the session),
//! compact, cancel, attach.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::*;

use super::*;

impl Sessions {
    /// Store the user message and queue its turn. Returns (sequence, turn, queued).
    pub async fn send(
        self: &Arc<Self>,
        raw: &str,
        text: &str,
        from: ClientRef,
    ) -> Result<Sent, SessionError> {
        self.send_timed(raw, text, from, 0).await
    }

    /// [`Self::send`], with the turn's own time limit in seconds (0: the
    /// daemon's `turnTimeoutSeconds`).
    pub async fn send_timed(
        self: &Arc<Self>,
        raw: &str,
        text: &str,
        from: ClientRef,
        timeout_seconds: u32,
    ) -> Result<Sent, SessionError> {
        let id = Self::checked_id(raw)?;
        if self.draining.load(Ordering::Acquire) {
            return Err(SessionError::Draining);
        }
        let (skill, skill_body) = self.checked_message(text, timeout_seconds)?;
        // Turn and runner are filled in when the message is appended.
        let message = UserMessageAdded {
            text: text.into(),
            from: Some(from),
            turn: 0,
            timeout_seconds,
            skill,
            skill_body,
            daemon_id: String::new(),
        };
        // Turns are numbered one at a time: each send waits for the model
        // to have its message before the next reads the next number.
        let numbering = self.send_locks.lock(&id).await;
        let me = self.cluster.id().to_string();
        let (events, turn, runner) = self.append_message(&id, &message, &me).await?;
        self.publish(&id, &events);
        self.read_at(last(&events)).await?;
        drop(numbering);
        let queued = if runner == me {
            self.submit(&id, Job::Turn(turn))?
        } else {
            tracing::info!(session = %id, turn, runner = %runner, "the turn runs on the daemon running this session");
            true
        };
        Ok(Sent {
            sequence: events.first().map(|e| e.sequence).unwrap_or(0),
            turn,
            queued,
        })
    }

    /// Check a message and its time limit; the skill its `/command` names
    /// (name and body; empty: none).
    fn checked_message(
        &self,
        text: &str,
        timeout_seconds: u32,
    ) -> Result<(String, String), SessionError> {
        let skills = self.skills.current();
        let (skill, skill_body) = match skills.command(text) {
            Ok(Some((skill, _))) => (skill.name.clone(), skill.body.clone()),
            Ok(None) => (String::new(), String::new()),
            Err(problem) => {
                return Err(SessionError::Invalid {
                    field: "text",
                    problem,
                });
            }
        };
        if timeout_seconds > 86_400 {
            return Err(SessionError::Invalid {
                field: "timeout_seconds",
                problem: format!("must be at most 86400 (a day), got {timeout_seconds}"),
            });
        }
        if text.trim().is_empty() {
            return Err(SessionError::Invalid {
                field: "text",
                problem: "is empty".into(),
            });
        }
        Ok((skill, skill_body))
    }

    /// Append the user message as the session's next turn; the events,
    /// the turn and the daemon that runs it.
    ///
    /// Several daemons on one log: the message is appended at the
    /// session's version (so two daemons never number one turn twice),
    /// and a session with a turn on another live daemon gets its next turn
    /// there, behind that one (that daemon sees the message in the log and
    /// runs it).
    async fn append_message(
        &self,
        id: &str,
        message: &UserMessageAdded,
        me: &str,
    ) -> Result<(Vec<Arc<Event>>, u64, String), SessionError> {
        let shared = self.store.shared();
        let mut conflicts = 0;
        loop {
            if shared {
                self.caught_up().await?;
            }
            let state = self.get(id)?;
            let turn = state.next_turn();
            let busy_on = state
                .turns
                .values()
                .rev()
                .find(|t| t.outcome.is_none())
                .map(|t| t.runner.clone())
                .filter(|r| shared && !r.is_empty() && *r != me);
            let runner = match busy_on {
                Some(r) if self.cluster.alive(&r).await.unwrap_or(true) => r,
                _ => me.to_string(),
            };
            let expected = if shared {
                ExpectedVersion::Exact(state.last_version)
            } else {
                ExpectedVersion::Any
            };
            let message = Payload::UserMessageAdded(UserMessageAdded {
                turn,
                daemon_id: runner.clone(),
                ..message.clone()
            });
            match self
                .store
                .append(&session_stream(id), expected, vec![message])
                .await
            {
                Ok(events) => return Ok((events, turn, runner)),
                Err(StoreError::Conflict { .. }) if conflicts < 100 => {
                    conflicts += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Summarise the older turns now, behind a running turn if there is one.
    pub async fn compact(
        self: &Arc<Self>,
        raw: &str,
        by: ClientRef,
    ) -> Result<Compacted, SessionError> {
        let id = self.get(raw)?.id;
        let (reply, done) = tokio::sync::oneshot::channel();
        self.submit(&id, Job::Compact { by, reply })?;
        done.await.map_err(|_| SessionError::Invalid {
            field: "session_id",
            problem: "names a session whose worker stopped".into(),
        })?
    }

    /// Cancel the running turn; `false` when none runs.
    /// Cancel the session's running turn wherever it runs: here at once;
    /// on another daemon sharing the log, by recording a
    /// `TurnCancelRequested` that daemon follows. Whether a turn was running.
    pub async fn cancel_anywhere(
        self: &Arc<Self>,
        raw: &str,
        by: tinycode_shared::proto::ClientRef,
    ) -> Result<bool, SessionError> {
        if self.cancel(raw)? {
            return Ok(true);
        }
        let state = self.get(raw)?;
        let me = self.cluster.id();
        let running = state
            .turns
            .iter()
            .rev()
            .find(|(_, t)| t.started && t.outcome.is_none() && t.runner != me)
            .map(|(turn, _)| *turn);
        let Some(turn) = running else {
            return Ok(false);
        };
        let asked = tinycode_shared::proto::TurnCancelRequested { turn, by: Some(by) };
        self.record(&state.id, vec![Payload::TurnCancelRequested(asked)])
            .await?;
        Ok(true)
    }

    pub fn cancel(&self, raw: &str) -> Result<bool, SessionError> {
        let id = Self::checked_id(raw)?;
        self.get(&id)?;
        let live = lock(&self.live).get(&id).cloned();
        Ok(match live {
            Some(l) if l.running.load(Ordering::Acquire) != 0 => {
                l.cancel.send_replace(true);
                true
            }
            _ => false,
        })
    }

    /// For attaching: a receiver of every later update, the text of the
    /// running step so far, and the last durable sequence, taken under one
    /// lock. Replaying the store up to that sequence, then the text so far,
    /// then the receiver (deduplicating events by sequence) has no gap and
    /// no duplicate.
    pub fn attach(
        self: &Arc<Self>,
        raw: &str,
    ) -> Result<(broadcast::Receiver<LiveUpdate>, Option<Delta>, u64), SessionError> {
        let id = Self::checked_id(raw)?;
        self.with_live(&id, |live| {
            let partial = lock(&live.partial);
            let rx = live.updates.subscribe();
            let head = self.store.last_sequence();
            let running = live.running.load(Ordering::Acquire);
            let so_far =
                (running != 0 && partial.0 == running && !partial.1.is_empty()).then(|| Delta {
                    turn: partial.0,
                    kind: live::DeltaKind::Text.as_str().into(),
                    text: partial.1.clone(),
                });
            (rx, so_far, head)
        })
    }
}
