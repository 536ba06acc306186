//! Turns nobody runs: this daemon's own from a previous run, found at
//! start, and those of a daemon sharing the log that stopped being heard
//! from. Each is marked interrupted, or — waiting for an approval —
//! resumed here.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::*;

use super::*;

/// `TurnCompleted` of a turn that will not go on, and why, with the steps
/// and tool calls it stored before it stopped.
pub(super) fn interrupted_turn(
    turn: u64,
    brief: Option<&state::TurnBrief>,
    error: String,
) -> Payload {
    Payload::TurnCompleted(TurnCompleted {
        turn,
        outcome: TurnOutcome::Interrupted as i32,
        error,
        steps: brief.map_or(0, |b| b.steps),
        tool_calls: brief.map_or(0, |b| b.tool_calls),
        ..TurnCompleted::default()
    })
}

impl Sessions {
    /// Unfinished turns nobody runs: this daemon's from a previous run
    /// (`at_start`), or those of a daemon sharing the log that stopped being
    /// heard from. Each is marked interrupted, or — waiting for an
    /// approval — resumed here; on another daemon's turn the first append
    /// is at the session's version, so one daemon takes it.
    pub(super) async fn settle_orphans(
        self: &Arc<Self>,
        at_start: bool,
    ) -> Result<(), SessionError> {
        let me = self.cluster.id().to_string();
        // Asked of the store at the first other daemon's turn; not knowing
        // is not dead (look again next round).
        let mut live: Option<Option<std::collections::HashSet<String>>> = None;
        let mut resume = Vec::new();
        for state in model::with_unfinished_turns(self.projector.tree())? {
            let (interrupted, foreign) = self
                .orphans_of(&state, at_start, &me, &mut live, &mut resume)
                .await?;
            if interrupted.is_empty() {
                continue;
            }
            self.record_interrupted(&state, interrupted, foreign)
                .await?;
        }
        self.caught_up().await?;
        for (id, turn, foreign, version) in resume {
            self.resume_orphan(&id, turn, foreign, version, &me).await?;
        }
        Ok(())
    }

    /// The orphaned turns of one session: the `TurnCompleted` of each to
    /// mark interrupted, and whether any is another daemon's; a turn
    /// waiting for an approval goes on `resume` (session, turn, foreign,
    /// the session's version) instead. `live` is filled at the first other
    /// daemon's turn.
    async fn orphans_of(
        &self,
        state: &SessionState,
        at_start: bool,
        me: &str,
        live: &mut Option<Option<std::collections::HashSet<String>>>,
        resume: &mut Vec<(String, u64, bool, u64)>,
    ) -> Result<(Vec<Payload>, bool), SessionError> {
        let id = state.id.clone();
        let mut interrupted = Vec::new();
        let mut foreign = false;
        for turn in state.unfinished() {
            let runner = state
                .turns
                .get(&turn)
                .map(|t| t.runner.clone())
                .unwrap_or_default();
            let mine = runner.is_empty() || runner == me;
            if mine && !at_start {
                continue; // running here
            }
            if !mine {
                if live.is_none() {
                    *live = Some(self.cluster.live_ids().await.ok());
                }
                let is_dead = matches!(&live, Some(Some(l)) if !l.contains(&runner));
                if !is_dead {
                    continue;
                }
                foreign = true;
            }
            if self.approvals.pending_of_turn(&id, turn)?.is_empty() {
                interrupted.push(interrupted_turn(
                    turn,
                    state.turns.get(&turn),
                    if mine {
                        "the daemon stopped while this turn was running or queued".into()
                    } else {
                        format!("daemon {runner} stopped being heard from while this turn was running or queued")
                    },
                ));
                tracing::warn!(session = %id, turn, runner = %runner, "marked an interrupted turn");
            } else {
                resume.push((id.clone(), turn, foreign, state.last_version));
            }
        }
        Ok((interrupted, foreign))
    }

    /// Append a session's interrupted turns; a worker's parent learns the
    /// worker ended. Another daemon's turns are appended at the version
    /// judged: when another daemon settled them first, nothing is done.
    async fn record_interrupted(
        self: &Arc<Self>,
        state: &SessionState,
        interrupted: Vec<Payload>,
        foreign: bool,
    ) -> Result<(), SessionError> {
        let id = &state.id;
        let end = agents::WorkerEnd {
            outcome: TurnOutcome::Interrupted,
            text: String::new(),
            steps: 0,
            tool_calls: 0,
            usage: Default::default(),
            error: "the daemon stopped while this worker ran".into(),
        };
        if foreign {
            // Another daemon's turns: the append (at the version judged)
            // decides who settles them; then a worker's parent learns.
            let appended = self
                .store
                .append(
                    &session_stream(id),
                    ExpectedVersion::Exact(state.last_version),
                    interrupted,
                )
                .await;
            match appended {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            if state.parent.is_some() {
                self.worker_finished(state, end).await?;
            }
        } else {
            // A worker's parent learns first (its wait returns).
            if state.parent.is_some() {
                self.worker_finished(state, end).await?;
            }
            self.store
                .append(&session_stream(id), ExpectedVersion::Any, interrupted)
                .await?;
        }
        Ok(())
    }

    /// Resume a turn that waits for an approval. Another daemon's turn is
    /// claimed first, at the session's `version`: when another daemon
    /// claimed it first, nothing is done.
    async fn resume_orphan(
        self: &Arc<Self>,
        id: &str,
        turn: u64,
        foreign: bool,
        version: u64,
        me: &str,
    ) -> Result<(), SessionError> {
        if foreign {
            // Take the turn over: one daemon's `TurnStarted` lands.
            let claim = Payload::TurnStarted(TurnStarted {
                turn,
                daemon_id: me.to_string(),
            });
            let claimed = self
                .store
                .append(
                    &session_stream(id),
                    ExpectedVersion::Exact(version),
                    vec![claim],
                )
                .await;
            match claimed {
                Ok(events) => self.read_at(last(&events)).await?,
                Err(StoreError::Conflict { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        tracing::info!(session = %id, turn, "resuming a turn that waits for an approval");
        self.submit(id, Job::Resume(turn))?;
        Ok(())
    }

    /// Every half lease: settle the turns of daemons not heard from.
    pub(super) async fn watch_orphans(self: Arc<Self>) {
        let mut closing = self.store.closing();
        while self.cluster.half_lease(&mut closing).await {
            if let Err(e) = self.settle_orphans(false).await {
                tracing::warn!(error = %e, "cannot settle the turns of dead daemons");
            }
        }
    }

    /// Record `turn` of `session` as interrupted: the daemon that ran it
    /// died, and this one took its work over. At the session's version, so
    /// a turn another daemon settled meanwhile is left as it ended.
    pub(crate) async fn interrupt(
        &self,
        session: &str,
        turn: u64,
        why: &str,
    ) -> Result<(), SessionError> {
        for _ in 0..20 {
            self.caught_up().await?;
            let state = self.get(session)?;
            if state.turns.get(&turn).is_none_or(|t| t.outcome.is_some()) {
                return Ok(());
            }
            let ended = interrupted_turn(turn, state.turns.get(&turn), why.to_string());
            match self
                .store
                .append(
                    &session_stream(session),
                    ExpectedVersion::Exact(state.last_version),
                    vec![ended],
                )
                .await
            {
                Ok(events) => {
                    tracing::warn!(session, turn, "marked a turn of a dead daemon interrupted");
                    return self.read_at(last(&events)).await;
                }
                // Someone wrote first: look again once it is here.
                Err(StoreError::Conflict { .. }) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(SessionError::Invalid {
            field: "session_id",
            problem: format!(
                "names a session whose turn {turn} keeps changing; it is not abandoned"
            ),
        })
    }
}
