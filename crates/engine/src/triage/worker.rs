//! The dispatcher hands worker slots to queued tickets in arrival order,
//! at-risk tickets (by their SLA) first;
//! each running triage is one task that creates (or reuses) the ticket's
//! session, sends the prompt, and follows the turn to its end. A turn that
//! waits for a human gives its slot back. How an attempt ended is recorded
//! by `settle.rs`.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{TriageStarted, TurnOutcome};
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::broadcast::error::RecvError;

use super::board::{Job, Phase, Record, Start};
use super::{Triage, TriageError, triage_stream, worker_client};
use crate::sessions::LiveUpdate;
use crate::store::ExpectedVersion;
use crate::sync::lock;

/// A running triage's hold on the worker: one of its slots, and, for a
/// turn on a provider's model while `autoTriage.concurrency` is unset, one
/// of the provider's [`crate::config::TRIAGE_CONCURRENCY`] places as well (the desk's
/// offline default gives 16 slots, a turn asked for on another model must
/// not run 16 at once). Dropped while the turn waits for a human.
pub(super) struct Slot {
    _worker: OwnedSemaphorePermit,
    provider: Option<OwnedSemaphorePermit>,
}

impl Slot {
    pub(super) fn new(worker: OwnedSemaphorePermit) -> Self {
        Self {
            _worker: worker,
            provider: None,
        }
    }
}

/// How far into the queue the dispatcher looks for an at-risk ticket.
const AT_RISK_WINDOW: usize = 256;

/// How a turn ended, for the record.
pub(super) struct Ended {
    pub(super) outcome: TurnOutcome,
    pub(super) error: String,
    /// Calls of the turn that were denied.
    pub(super) denied: u32,
}

impl Ended {
    pub(super) fn failed(error: impl ToString) -> Self {
        Self {
            outcome: TurnOutcome::Failed,
            error: error.to_string(),
            denied: 0,
        }
    }
}

impl Triage {
    /// Hand a slot to each queued job, in order, forever.
    pub(super) async fn dispatch(self: Arc<Self>) {
        loop {
            let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
                return;
            };
            let job = loop {
                if let Some(job) = self.next_job() {
                    break job;
                }
                self.wake.notified().await;
            };
            // A fenced daemon claims nothing new until its lease is renewed.
            self.cluster.hold().await;
            tokio::spawn(Arc::clone(&self).run(job, Some(Slot::new(slot))));
        }
    }

    /// The next job: the most urgent at-risk ticket among the first
    /// [`AT_RISK_WINDOW`] queued (its SLA alert soonest), else the first
    /// queued. Looks only at the desk's SLA schedule, never at a ticket.
    fn next_job(&self) -> Option<Job> {
        let mut queue = lock(&self.queue);
        let urgent = queue
            .iter()
            .take(AT_RISK_WINDOW)
            .enumerate()
            .filter_map(|(i, job)| self.desk.sla_at_risk(&job.ticket).map(|at| (at, i)))
            .min();
        match urgent {
            Some((_, i)) => queue.remove(i),
            None => queue.pop_front(),
        }
    }

    /// A turn that waits for an approval after a restart: await its end
    /// (without a slot), then finish the record like any other attempt.
    pub(super) async fn wait_resumed(self: Arc<Self>, ticket: String, turn: u64) {
        let session = self.record_session(&ticket);
        self.set_turn(&ticket, turn);
        let mut slot = None;
        let ended = match self.sessions.attach(&session) {
            Ok((rx, _, _)) => self.follow_turn(&session, turn, rx, &mut slot).await,
            Err(e) => Ended::failed(e),
        };
        self.settle(
            Job {
                ticket,
                start: Start::Fresh,
            },
            ended,
            slot,
        )
        .await;
    }

    fn record_session(&self, ticket: &str) -> String {
        self.record(ticket)
            .ok()
            .flatten()
            .map(|r| r.session)
            .unwrap_or_default()
    }

    /// The running attempt of `ticket` runs as `turn` (known once its
    /// message is stored).
    fn set_turn(&self, ticket: &str, turn: u64) {
        let started = self
            .record(ticket)
            .ok()
            .flatten()
            .map_or(0, |r| r.started_sequence);
        lock(&self.turns).insert(ticket.to_string(), (started, turn));
        self.notify_live();
    }

    /// The turn of the attempt `record` runs, when known.
    pub(super) fn turn_of(&self, record: &Record) -> Option<u64> {
        match lock(&self.turns).get(&record.ticket) {
            Some((started, turn)) if *started == record.started_sequence => Some(*turn),
            _ => None,
        }
    }

    /// Append to a record this daemon holds (or one nobody holds yet), at
    /// its version: a record another daemon took over is
    /// [`TriageError::Elsewhere`].
    pub(super) async fn append(&self, ticket: &str, payload: Payload) -> Result<(), TriageError> {
        let expected = match self.record(ticket)? {
            Some(r) if !r.owner.is_empty() && r.owner != self.cluster.id() => {
                return Err(TriageError::Elsewhere(ticket.to_string()));
            }
            Some(r) => ExpectedVersion::Exact(r.version),
            None => ExpectedVersion::NoStream,
        };
        self.append_at(ticket, payload, expected).await
    }

    async fn append_at(
        &self,
        ticket: &str,
        payload: Payload,
        expected: ExpectedVersion,
    ) -> Result<(), TriageError> {
        let events = match self
            .store
            .append(&triage_stream(ticket), expected, vec![payload])
            .await
        {
            Ok(events) => events,
            Err(crate::store::StoreError::Conflict { .. }) => {
                return Err(TriageError::Elsewhere(ticket.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        if !matches!(
            events.last().and_then(|e| e.payload.as_ref()),
            Some(Payload::TriageStarted(_))
        ) {
            lock(&self.turns).remove(ticket);
        }
        self.folded(&events).await
    }

    /// One triage: attempts until one completes or none are left (or
    /// another daemon holds it).
    async fn run(self: Arc<Self>, job: Job, slot: Option<Slot>) {
        let mut slot = slot;
        let ticket = job.ticket.clone();
        if let Some(ended) = self.attempt(&job, &mut slot).await {
            Arc::clone(&self).settle(job, ended, slot).await;
        }
        self.let_go(&ticket);
        // Queued again while this job ran (its `line_up` found the ticket
        // taken here): line it up now.
        if let Ok(Some(r)) = self.record(&ticket)
            && r.phase == Phase::Queued
        {
            self.line_up(Job {
                ticket,
                start: Start::Fresh,
            });
        }
    }

    /// Start (or restart) an attempt and follow its turn; an error ends it
    /// as failed; `None` when another daemon holds the ticket. `slot` is
    /// given back while the turn waits for a human.
    pub(super) async fn attempt(&self, job: &Job, slot: &mut Option<Slot>) -> Option<Ended> {
        match self.try_attempt(job, slot).await {
            Ok(ended) => Some(ended),
            Err(TriageError::Elsewhere(_)) => None,
            Err(e) => Some(Ended::failed(e)),
        }
    }

    async fn try_attempt(&self, job: &Job, slot: &mut Option<Slot>) -> Result<Ended, TriageError> {
        // Every claim stored so far is on the board before judging.
        self.board.wait_for(self.store.last_sequence()).await?;
        let Some(record) = self.record(&job.ticket)? else {
            return Ok(Ended::failed("the triage record is missing"));
        };
        if record.phase.finished() {
            return Err(TriageError::Elsewhere(job.ticket.clone()));
        }
        if record.phase != Phase::Queued
            && !record.owner.is_empty()
            && record.owner != self.cluster.id()
        {
            if self.cluster.alive(&record.owner).await? {
                return Err(TriageError::Elsewhere(job.ticket.clone()));
            }
            return self.take_over(job, &record, slot).await;
        }
        if job.start == Start::Again {
            // After a restart: did the interrupted attempt's turn end?
            match self
                .sessions
                .last_turn_after(&record.session, record.started_sequence)
            {
                Some((_, Some(TurnOutcome::Interrupted))) | None => {}
                Some((_, Some(outcome))) => {
                    let error = "the turn ended before the daemon restarted".to_string();
                    return Ok(Ended {
                        outcome,
                        error,
                        denied: 0,
                    });
                }
                Some((_, None)) => {}
            }
        }
        // An attempt of this round that placed the ticket before it was cut
        // short (a crash between the route and the turn's end): done, as
        // it happened — never skipped because the ticket moved on.
        if job.start == Start::Again && record.attempt > 0 && self.decisions(&record).await.1 {
            return Ok(Ended {
                outcome: TurnOutcome::Completed,
                error: String::new(),
                denied: 0,
            });
        }
        // Automatic triage is for open tickets; a ticket someone already
        // handled before any attempt is skipped. (A request triages
        // whatever it names; a round whose attempt started — and perhaps
        // classified the ticket — carries on until it is placed.) The
        // projection is read once it has every event stored so far.
        if record.source != "request"
            && record.attempt == 0
            && !self.is_open(&job.ticket, self.store.last_sequence()).await
        {
            let why = "the ticket is no longer open".to_string();
            // Recorded as skipped; `settle` sees the record finished.
            self.finish(&job.ticket, "skipped", "", &why).await?;
            return Ok(Ended::failed(why));
        }
        let session = self.session_of(job, &record).await?;
        self.hold_provider_place(&session, slot).await;
        let attempt = match job.start {
            Start::Fresh => record.attempt + 1,
            Start::Again => record.attempt.max(1),
        };
        self.claim(job, &record, &session, attempt).await?;
        self.send_and_follow(job, &session, slot).await
    }

    /// The record's session, or a new one for its first attempt.
    async fn session_of(&self, job: &Job, record: &Record) -> Result<String, TriageError> {
        if let Ok(s) = self.sessions.get(&record.session) {
            return Ok(s.id);
        }
        let title = format!("triage {}", job.ticket);
        let created = self
            .sessions
            .create(&title, &record.model, &record.approve, worker_client())
            .await?;
        Ok(created.id)
    }

    /// The claim: `TriageStarted` by this daemon at the version `record`
    /// was judged at, so of daemons claiming at once one wins (the others
    /// get [`TriageError::Elsewhere`]).
    async fn claim(
        &self,
        job: &Job,
        record: &Record,
        session: &str,
        attempt: u32,
    ) -> Result<(), TriageError> {
        let started = Payload::TriageStarted(TriageStarted {
            ticket_id: job.ticket.clone(),
            session_id: session.to_string(),
            attempt,
            daemon_id: self.cluster.id().to_string(),
        });
        self.append_at(&job.ticket, started, ExpectedVersion::Exact(record.version))
            .await
    }

    /// Claim the record of a daemon that stopped being heard from: its
    /// turn is recorded as interrupted; a ticket it already placed is done;
    /// otherwise the session is asked again.
    async fn take_over(
        &self,
        job: &Job,
        record: &Record,
        slot: &mut Option<Slot>,
    ) -> Result<Ended, TriageError> {
        let session = self.session_of(job, record).await?;
        self.hold_provider_place(&session, slot).await;
        self.claim(job, record, &session, record.attempt.max(1))
            .await?;
        tracing::warn!(ticket = %job.ticket, from = %record.owner, "took over the triage of a daemon that stopped being heard from");
        if let Some((turn, None)) = self
            .sessions
            .last_turn_after(&session, record.started_sequence)
        {
            // A turn waiting for an approval is resumed by whichever daemon
            // claims it (the sessions' takeover), and one whose runner is
            // alive goes on there: follow it to its end, never run another.
            let runner = self.sessions.turn_runner(&session, turn);
            let runs_elsewhere = !runner.is_empty()
                && runner != self.cluster.id()
                && self.cluster.alive(&runner).await.unwrap_or(true);
            let waiting = !self
                .sessions
                .approvals()
                .pending_of_turn(&session, turn)
                .map_err(crate::sessions::SessionError::from)?
                .is_empty();
            if runs_elsewhere || waiting {
                let (rx, _, _) = self.sessions.attach(&session)?;
                self.set_turn(&job.ticket, turn);
                return Ok(self.follow_turn(&session, turn, rx, slot).await);
            }
            let why = format!(
                "daemon {} stopped being heard from while this turn ran; daemon {} took the ticket over",
                record.owner,
                self.cluster.id()
            );
            self.sessions.interrupt(&session, turn, &why).await?;
        }
        let record = Record {
            session: session.clone(),
            ..record.clone()
        };
        if self.decisions(&record).await.1 {
            let error = String::new();
            return Ok(Ended {
                outcome: TurnOutcome::Completed,
                error,
                denied: 0,
            });
        }
        self.send_and_follow(job, &session, slot).await
    }

    /// Send the triage prompt to `session` and follow the turn.
    async fn send_and_follow(
        &self,
        job: &Job,
        session: &str,
        slot: &mut Option<Slot>,
    ) -> Result<Ended, TriageError> {
        let session = session.to_string();
        // Subscribe before sending: the turn's end cannot be missed.
        let (rx, _, _) = self.sessions.attach(&session)?;
        let prompt = self.config().prompt.replace("{id}", &job.ticket);
        let turn = self
            .sessions
            .send(&session, &prompt, worker_client())
            .await?
            .turn;
        self.set_turn(&job.ticket, turn);
        Ok(self.follow_turn(&session, turn, rx, slot).await)
    }

    /// A turn on a provider's model while `concurrency` is unset also
    /// takes one of the provider's places (see [`Slot`]) before its claim,
    /// so the record reads queued meanwhile; a set `concurrency` is the
    /// only limit.
    async fn hold_provider_place(&self, session: &str, slot: &mut Option<Slot>) {
        let Some(slot) = slot.as_mut() else { return };
        if self.config().concurrency.is_some() {
            return;
        }
        let model = match self.sessions.get(session) {
            Ok(s) => s.model,
            Err(_) => self.sessions.defaults().model.clone(),
        };
        if !crate::model::catalog::is_offline(&model) {
            slot.provider = Arc::clone(&self.provider_places).acquire_owned().await.ok();
        }
    }

    /// Follow a turn to its end; give the slot back while it waits for a
    /// human.
    async fn follow_turn(
        &self,
        session: &str,
        turn: u64,
        mut rx: tokio::sync::broadcast::Receiver<LiveUpdate>,
        slot: &mut Option<Slot>,
    ) -> Ended {
        let ended = |outcome, error| Ended {
            outcome,
            error,
            denied: 0,
        };
        if let Some(outcome) = self.sessions.turn_outcome(session, turn) {
            return ended(outcome, String::new());
        }
        loop {
            match rx.recv().await {
                Ok(LiveUpdate::Event(e)) => match &e.payload {
                    Some(Payload::TurnCompleted(c)) if c.turn == turn => {
                        let outcome =
                            TurnOutcome::try_from(c.outcome).unwrap_or(TurnOutcome::Failed);
                        return Ended {
                            denied: c.denied,
                            ..ended(outcome, c.error.clone())
                        };
                    }
                    Some(Payload::ApprovalRequested(r)) if r.turn == turn => {
                        *slot = None;
                        self.notify_live();
                    }
                    Some(Payload::ApprovalDecided(_) | Payload::ApprovalCancelled(_)) => {
                        self.notify_live();
                    }
                    _ => {}
                },
                Ok(LiveUpdate::Delta(_)) => {}
                Err(RecvError::Lagged(_)) => {
                    if let Some(outcome) = self.sessions.turn_outcome(session, turn) {
                        return ended(outcome, String::new());
                    }
                }
                Err(RecvError::Closed) => {
                    return Ended::failed("the session's worker stopped");
                }
            }
        }
    }
}
