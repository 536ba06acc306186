//! The background triage worker: every ticket that becomes `open` and has
//! never been triaged gets one triage session, in arrival order, at most
//! `autoTriage.concurrency` turns at a time (unset: by the model,
//! [`AutoTriage::slots`]); failed turns are retried with
//! backoff; a restart resumes what was queued or running.
//!
//! - [`board`]: the records, a read model of the `triage-<ticket>` streams.
//! - [`intake`]: what queues tickets (ticket events, the `tickets/` poll).
//! - [`worker`]: the dispatcher and one task per running triage.
//! - [`settle`]: how an attempt ended, recorded (done, retried, failed).
//! - [`status`]: the `Triage.GetStatus` view.
//!
//! A ticket's `triage-<ticket>` stream is created by its first
//! `TriageQueued` at expected version "no stream": the store's version check
//! is what makes automatic triage happen at most once per ticket, even when
//! a file drop and a `Tickets.Create` race.
//!
//! Several daemons on one log (PostgreSQL) share the work: every daemon
//! lines up every queued record, and a free slot *claims* one by appending
//! `TriageStarted` (with its daemon id) at the record's version — of
//! daemons claiming at once exactly one wins, the others drop the job. The
//! claimer holds the record while it is alive ([`crate::cluster`]); every
//! later append of the attempt is at the record's version too, so a daemon
//! whose record was taken over stops. When the holder dies, another daemon
//! ([`Triage::watch_leases`]) claims it again after the lease.

mod board;
mod intake;
mod leases;
mod settle;
mod status;
mod worker;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, Event, TriageQueued, TurnOutcome};
use tokio::sync::{Notify, Semaphore, watch};

use crate::cluster::Cluster;
use crate::config::AutoTriage;
use crate::domain::desk::{Desk, DomainError, ticket_id};
use crate::permissions::ApprovalMode;
use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::sessions::{SessionError, Sessions};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use crate::sync::lock;
pub use board::Phase;
use board::{BoardModel, Job, Reader, Record, Start};

/// Stream of one ticket's triage record.
pub fn triage_stream(ticket: &str) -> String {
    format!("triage-{ticket}")
}

#[derive(Debug, thiserror::Error)]
pub enum TriageError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// Another daemon holds (or took over) the ticket's triage.
    #[error("the triage of {0} is held by another daemon")]
    Elsewhere(String),
    #[error("`{field}` {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
}

/// The name the worker records as the author of what it does.
pub fn worker_client() -> ClientRef {
    ClientRef {
        name: "triage-worker".into(),
        uid: 0,
        pid: std::process::id() as i32,
    }
}

pub struct Triage {
    store: EventStore,
    desk: Arc<Desk>,
    sessions: Arc<Sessions>,
    /// Config `autoTriage`, replaced by a reload.
    config: std::sync::RwLock<AutoTriage>,
    /// The daemons sharing the log: whose records are whose.
    cluster: Arc<Cluster>,
    /// Tickets lined up or running here (a ticket is lined up once).
    local: Mutex<HashSet<String>>,
    /// The intake could not queue a ticket: the next sweep queues every
    /// open ticket without a record.
    intake_missed: std::sync::atomic::AtomicBool,
    /// The records (`board.rs`).
    board: ProjectorHandle,
    /// Work waiting for a slot, in order.
    queue: Mutex<VecDeque<Job>>,
    /// ticket → (its attempt's `started_sequence`, the attempt's turn), once
    /// the turn's message is stored: the live side of a running record.
    turns: Mutex<HashMap<String, (u64, u64)>>,
    /// Wakes the dispatcher when work is queued.
    wake: Notify,
    /// Worker slots: one per running turn (a turn waiting for a human
    /// gives its slot back).
    slots: Arc<Semaphore>,
    /// How many slots there are meant to be (`AutoTriage::slots` for the
    /// default model): what the status reports, and what a reload resizes
    /// from. Changed only with `config` held for writing.
    slot_count: Mutex<usize>,
    /// A provider's places while `concurrency` is unset (see
    /// `worker::Slot`).
    provider_places: Arc<Semaphore>,
    /// Bumped on every change of the board, for `Triage.Watch`.
    changed: watch::Receiver<u64>,
    /// Bumped when the live side of a record changes (its turn becomes
    /// known, it starts or stops waiting for a human): not a board change.
    live_changed: watch::Sender<u64>,
}

impl Triage {
    /// Fold the records, line up what a previous run left queued or
    /// running, queue the open tickets never triaged (when `enabled`), and
    /// start the dispatcher, the ticket-event follower and the file poll.
    pub async fn open(
        store: EventStore,
        desk: Arc<Desk>,
        sessions: Arc<Sessions>,
        config: AutoTriage,
        cluster: Arc<Cluster>,
    ) -> Result<Arc<Self>, TriageError> {
        let head = store.last_sequence();
        let (changed_tx, changed) = watch::channel(0);
        let board = Projector::spawn(
            &store,
            Arc::new(BoardModel {
                changed: changed_tx,
            }),
        )?;
        board.wait_for(head).await?;
        let slot_count = config.slots(&sessions.defaults().model);
        let triage = Arc::new(Self {
            store,
            desk,
            sessions,
            slots: Arc::new(Semaphore::new(slot_count)),
            slot_count: Mutex::new(slot_count),
            provider_places: Arc::new(Semaphore::new(crate::config::TRIAGE_CONCURRENCY)),
            config: std::sync::RwLock::new(config),
            cluster,
            local: Mutex::new(HashSet::new()),
            intake_missed: std::sync::atomic::AtomicBool::new(false),
            board,
            queue: Mutex::new(VecDeque::new()),
            turns: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            changed,
            live_changed: watch::channel(0).0,
        });
        let waiting = triage.line_up_after_restart()?;
        if triage.config().enabled {
            triage.queue_untriaged().await?;
        }
        for (ticket, turn) in waiting {
            tokio::spawn(Arc::clone(&triage).wait_resumed(ticket, turn));
        }
        tokio::spawn(Arc::clone(&triage).dispatch());
        tokio::spawn(Arc::clone(&triage).follow_tickets(head + 1));
        tokio::spawn(Arc::clone(&triage).follow_queued(head + 1));
        tokio::spawn(Arc::clone(&triage).watch_leases());
        Ok(triage)
    }

    /// A restart drains: no queued triage starts from now on (the
    /// dispatcher stops; queued records are lined up again at the next
    /// start). Triages already running finish.
    pub fn pause(&self) {
        self.slots.close();
    }

    /// Config `autoTriage` as it is now.
    pub fn config(&self) -> AutoTriage {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Worker slots now (see [`AutoTriage::slots`]).
    pub fn slot_count(&self) -> usize {
        *lock(&self.slot_count)
    }

    /// A reload: the new `autoTriage` (or a new default model) applies at
    /// once — more or fewer worker slots (a running triage keeps its slot
    /// until it ends), the prompt and retry settings for the next attempt;
    /// turned on, the open tickets never triaged are queued. Slots follow
    /// the sessions' default model, which a reload sets first.
    pub async fn set_config(self: &Arc<Self>, new: AutoTriage) -> Result<(), TriageError> {
        let (old, was, now) = {
            // One writer at a time: the config and the slot count change
            // together.
            let mut config = self.config.write().unwrap_or_else(|p| p.into_inner());
            let old = std::mem::replace(&mut *config, new.clone());
            let now = new.slots(&self.sessions.defaults().model);
            let was = std::mem::replace(&mut *lock(&self.slot_count), now);
            (old, was, now)
        };
        if now > was {
            self.slots.add_permits(now - was);
        } else if now < was {
            let slots = Arc::clone(&self.slots);
            // Fewer slots: taken out as running triages give them back.
            tokio::spawn(async move {
                if let Ok(taken) = slots.acquire_many_owned((was - now) as u32).await {
                    taken.forget();
                }
            });
        }
        if new.enabled && !old.enabled {
            self.queue_untriaged().await?;
        }
        self.notify_live();
        Ok(())
    }

    /// The daemons sharing the log.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Changes of the board, and of the records' live side.
    pub fn subscribe(&self) -> (watch::Receiver<u64>, watch::Receiver<u64>) {
        (self.changed.clone(), self.live_changed.subscribe())
    }

    fn notify_live(&self) {
        self.live_changed.send_modify(|n| *n += 1);
    }

    /// The board's projector (status, rebuild).
    pub fn projector(&self) -> &ProjectorHandle {
        &self.board
    }

    fn records(&self) -> Reader<'_> {
        Reader(self.board.tree())
    }

    /// A ticket's record as the board has it.
    fn record(&self, ticket: &str) -> Result<Option<Record>, TriageError> {
        Ok(self.records().get(ticket)?)
    }

    /// Wait until the board has `events`.
    async fn folded(&self, events: &[Arc<Event>]) -> Result<(), TriageError> {
        let last = events.last().map_or(0, |e| e.sequence);
        Ok(self.board.wait_for(last).await?)
    }

    /// Records a previous run left queued or running: queued ones keep
    /// their order; running ones go first — again in their session, or (a
    /// turn waiting for an approval, resumed by the sessions) awaited.
    /// Returns the (ticket, turn) pairs to await.
    fn line_up_after_restart(&self) -> Result<Vec<(String, u64)>, TriageError> {
        let mut open = self.records().unfinished()?;
        open.sort_by_key(|r| (r.phase != Phase::Running, r.queued_sequence));
        let mut waiting = Vec::new();
        let mut lined_up = 0;
        for r in open {
            // Another daemon's: `watch_leases` claims it if that one died.
            if !r.owner.is_empty() && r.owner != self.cluster.id() {
                continue;
            }
            let ticket = r.ticket.clone();
            let start = match r.phase {
                Phase::Queued | Phase::Retrying => Start::Fresh,
                _ => {
                    match self
                        .sessions
                        .last_turn_after(&r.session, r.started_sequence)
                    {
                        // Waiting for a human: the sessions resumed it.
                        Some((turn, None)) => {
                            waiting.push((ticket, turn));
                            continue;
                        }
                        // It ran to an end the record missed, or it was
                        // interrupted: the worker judges it, or sends again.
                        _ => Start::Again,
                    }
                }
            };
            if self.line_up(Job { ticket, start }) {
                lined_up += 1;
            }
        }
        if lined_up > 0 {
            tracing::info!(
                jobs = lined_up,
                waiting = waiting.len(),
                "triage resumes what the previous run left"
            );
        }
        Ok(waiting)
    }

    /// Ids of the desk's open tickets.
    fn open_ticket_ids(&self) -> Result<Vec<String>, TriageError> {
        Ok(self.desk.open_ticket_ids()?)
    }

    /// Queue every open ticket that has no triage record, in arrival order.
    async fn queue_untriaged(&self) -> Result<(), TriageError> {
        let open = self.open_ticket_ids()?;
        let records = self.records();
        let mut fresh: Vec<(u64, String)> = Vec::new();
        for id in open {
            if records.contains(&id).unwrap_or(true) {
                continue;
            }
            let arrived = self
                .store
                .read_stream(&crate::domain::desk::ticket_stream(&id), 1, 1)
                .await
                .ok()
                .and_then(|e| e.first().map(|e| e.sequence))
                .unwrap_or(u64::MAX);
            fresh.push((arrived, id));
        }
        fresh.sort();
        for (_, id) in fresh {
            self.queue(
                &id,
                "startup",
                "",
                "",
                worker_client(),
                ExpectedVersion::NoStream,
            )
            .await?;
        }
        Ok(())
    }

    /// Append `TriageQueued` at `expected` and line the ticket up. `false`
    /// when another writer got there first (the ticket is queued already).
    async fn queue(
        &self,
        ticket: &str,
        source: &str,
        approve: &str,
        model: &str,
        by: ClientRef,
        expected: ExpectedVersion,
    ) -> Result<bool, TriageError> {
        let payload = Payload::TriageQueued(TriageQueued {
            ticket_id: ticket.to_string(),
            source: source.to_string(),
            approve: approve.to_string(),
            model: model.to_string(),
            requested_by: Some(by),
        });
        let events = match self
            .store
            .append(&triage_stream(ticket), expected, vec![payload])
            .await
        {
            Ok(events) => events,
            Err(StoreError::Conflict { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        self.folded(&events).await?;
        self.line_up(Job {
            ticket: ticket.to_string(),
            start: Start::Fresh,
        });
        tracing::info!(ticket, source, "queued for triage");
        Ok(true)
    }

    /// Line a job up for a slot here, unless its ticket is lined up or
    /// running here already. Returns whether it was.
    fn line_up(&self, job: Job) -> bool {
        if !lock(&self.local).insert(job.ticket.clone()) {
            return false;
        }
        lock(&self.queue).push_back(job);
        self.wake.notify_one();
        true
    }

    /// Whether `ticket` is lined up or running here.
    fn is_local(&self, ticket: &str) -> bool {
        lock(&self.local).contains(ticket)
    }

    /// The job of `ticket` left this daemon (done, or held elsewhere).
    fn let_go(&self, ticket: &str) {
        lock(&self.local).remove(ticket);
    }

    /// Records each daemon holds (unfinished ones), by daemon id.
    pub fn leases(&self) -> HashMap<String, u32> {
        let mut held = HashMap::new();
        for r in self.records().unfinished().unwrap_or_default() {
            if !r.owner.is_empty() {
                *held.entry(r.owner).or_insert(0) += 1;
            }
        }
        held
    }

    /// Queue tickets on request (`Triage.Enqueue`): returns (queued,
    /// already queued or running).
    pub async fn enqueue(
        &self,
        ids: &[String],
        all_open: bool,
        approve: &str,
        model: &str,
        by: ClientRef,
    ) -> Result<(Vec<String>, Vec<String>), TriageError> {
        let approve = match ApprovalMode::parse(approve) {
            Ok(mode) => mode.map_or("", ApprovalMode::as_str),
            Err(problem) => {
                return Err(TriageError::Invalid {
                    field: "approve",
                    problem,
                });
            }
        };
        let mut wanted = Vec::new();
        for raw in ids {
            let id = ticket_id(raw)?;
            self.desk.get_ticket(&id)?; // it must exist
            if !wanted.contains(&id) {
                wanted.push(id);
            }
        }
        if all_open {
            let open = self.open_ticket_ids()?;
            // Never triaged (queued now), or in progress (followed).
            let named: std::collections::HashSet<String> = wanted.iter().cloned().collect();
            for id in open {
                let finished = self.record(&id)?.is_some_and(|r| r.phase.finished());
                if !named.contains(&id) && !finished {
                    wanted.push(id);
                }
            }
        }
        let (mut queued, mut already) = (Vec::new(), Vec::new());
        for id in wanted {
            let expected = match self.record(&id)? {
                None => ExpectedVersion::NoStream,
                Some(r) if r.phase.finished() => ExpectedVersion::Exact(r.version),
                Some(_) => {
                    already.push(id);
                    continue;
                }
            };
            if self
                .queue(&id, "request", approve, model.trim(), by.clone(), expected)
                .await?
            {
                queued.push(id);
            } else {
                already.push(id);
            }
        }
        Ok((queued, already))
    }
}

/// The outcome name a triage record stores.
fn outcome_name(outcome: TurnOutcome) -> String {
    tinycode_shared::render::outcome_name(outcome as i32).to_string()
}

#[cfg(test)]
mod tests;
