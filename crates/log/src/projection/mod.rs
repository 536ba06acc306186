//! Read models that follow the log.
//!
//! A [`Projection`] is the only code that applies events to its read model.
//! Its [`Projector`] task consumes the log in global-sequence order from the
//! projection's checkpoint (a catch-up subscription of the store), folds a
//! batch of events into the projection's sled tree through [`Writes`], and
//! commits the batch's writes together with the new checkpoint in one sled
//! batch: state and checkpoint can never disagree, and a restart resumes from
//! the checkpoint instead of replaying the log.
//!
//! Writers append to the log and, to read their own write, wait until the
//! projector has passed the write's sequence ([`ProjectorHandle::wait_for`]).
//! A projection whose code version differs from the stored one is rebuilt
//! from the log at start; [`ProjectorHandle::rebuild`] does it on demand.

mod writes;

use std::sync::Arc;

use tinycode_shared::proto::Event;
use tokio::sync::{mpsc, oneshot, watch};

use crate::store::{EventStore, StoreError, SubscriptionOptions};
pub use writes::Writes;

/// Keys starting with this byte belong to the runner, not the projection.
const META: u8 = 0;
const CHECKPOINT_KEY: &[u8] = b"\x00checkpoint";
const VERSION_KEY: &[u8] = b"\x00version";
/// A projector writes its checkpoint at least this often, in events, even
/// when none of them changes its model.
pub const CHECKPOINT_EVERY: u64 = 4096;
/// Events folded into one sled batch at most.
const MAX_BATCH: usize = 512;

/// One read model.
pub trait Projection: Send + Sync + 'static {
    /// Short name: the sled tree is `proj-<name>`.
    fn name(&self) -> &'static str;
    /// Bump when [`Projection::apply`] changes meaning: stored state of
    /// another version is discarded and rebuilt from the log.
    fn version(&self) -> u32;
    /// Fold one event. Reads through `writes` see this batch's earlier
    /// writes. Events of other models are ignored.
    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError>;
    /// After the batch's events are applied, before it is committed:
    /// derived entries written once per batch (a search index).
    fn finish(&self, _writes: &mut Writes<'_>) -> Result<(), ProjectionError> {
        Ok(())
    }
    /// Once at start, after the state is opened (or reset), before any
    /// event is applied: load in-memory indexes from `tree`.
    fn opened(&self, _tree: &sled::Tree) -> Result<(), ProjectionError> {
        Ok(())
    }
    /// After a batch is committed (derived in-memory indexes).
    fn committed(&self, _writes: &Writes<'_>) {}
    /// After the tree was cleared for a rebuild (in-memory caches).
    fn reset(&self) {}
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProjectionError {
    #[error("the {name} projection stopped: {reason}")]
    Stopped { name: &'static str, reason: String },
    #[error("stored projection state is unreadable: {0}")]
    Corrupt(String),
    #[error("projection storage failed: {0}")]
    Storage(String),
}

impl From<sled::Error> for ProjectionError {
    fn from(e: sled::Error) -> Self {
        Self::Storage(e.to_string())
    }
}

impl From<StoreError> for ProjectionError {
    fn from(e: StoreError) -> Self {
        Self::Storage(e.to_string())
    }
}

/// Where a projector is.
#[derive(Debug, Clone, Default)]
struct Progress {
    /// Every event up to this sequence is applied and committed.
    applied: u64,
    /// Every event up to this sequence has also passed the `committed`
    /// hook (in-memory indexes such as search).
    indexed: u64,
    /// Set when the projector stopped on an error; waiters get it.
    failed: Option<String>,
}

enum Command {
    Rebuild(oneshot::Sender<Result<u64, ProjectionError>>),
}

/// Handle to a running projector; cheap to clone.
#[derive(Clone)]
pub struct ProjectorHandle {
    name: &'static str,
    tree: sled::Tree,
    progress: watch::Receiver<Progress>,
    commands: mpsc::Sender<Command>,
}

impl ProjectorHandle {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The projection's tree, for its readers.
    pub fn tree(&self) -> &sled::Tree {
        &self.tree
    }

    /// Last sequence applied.
    pub fn applied(&self) -> u64 {
        self.progress.borrow().applied
    }

    /// Last sequence in the in-memory indexes too (search).
    pub fn indexed(&self) -> u64 {
        self.progress.borrow().indexed
    }

    /// Wait until every event up to `sequence` is applied.
    pub async fn wait_for(&self, sequence: u64) -> Result<(), ProjectionError> {
        self.wait(|p| p.applied >= sequence).await
    }

    /// Wait until every event up to `sequence` is applied and in the
    /// projection's in-memory indexes too (search).
    pub async fn wait_indexed(&self, sequence: u64) -> Result<(), ProjectionError> {
        self.wait(|p| p.indexed >= sequence).await
    }

    async fn wait(&self, done: impl Fn(&Progress) -> bool) -> Result<(), ProjectionError> {
        let mut progress = self.progress.clone();
        let result = progress
            .wait_for(|p| done(p) || p.failed.is_some())
            .await
            .map(|p| p.failed.clone());
        match result {
            Ok(None) => Ok(()),
            Ok(Some(reason)) => Err(ProjectionError::Stopped {
                name: self.name,
                reason,
            }),
            Err(_) => Err(ProjectionError::Stopped {
                name: self.name,
                reason: "the daemon is stopping".into(),
            }),
        }
    }

    /// Clear the projection and fold the whole log again; returns the
    /// sequence it caught up to. Reads during a rebuild may see a partial
    /// model.
    pub async fn rebuild(&self) -> Result<u64, ProjectionError> {
        let stopped = || ProjectionError::Stopped {
            name: self.name,
            reason: "the projector is not running".into(),
        };
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Rebuild(reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// Open `proj-<name>` for a model of code version `version`: discard what is
/// stored when its version differs; returns the tree and its checkpoint.
pub fn open_state(
    store: &EventStore,
    name: &'static str,
    version: u32,
) -> Result<(sled::Tree, u64, bool), ProjectionError> {
    let tree = store.projection_tree(&format!("proj-{name}"))?;
    let stored_version = tree
        .get(VERSION_KEY)?
        .map(|v| decode_u64(&v))
        .unwrap_or(u64::MAX);
    let reset = stored_version != u64::from(version);
    if reset {
        if stored_version != u64::MAX {
            tracing::info!(
                projection = name,
                stored_version,
                version,
                "projection code changed; rebuilding it from the log"
            );
        }
        reset_tree(&tree, version)?;
    }
    let checkpoint = tree
        .get(CHECKPOINT_KEY)?
        .map(|v| decode_u64(&v))
        .unwrap_or(0);
    Ok((tree, checkpoint, reset))
}

/// The projector's side of a [`ProjectorHandle`]: reports progress, takes
/// commands.
pub struct Reporter {
    progress: watch::Sender<Progress>,
    commands: mpsc::Receiver<Command>,
}

impl Reporter {
    /// The model has every event up to `sequence` (and, for a projection
    /// without in-memory indexes, so have they).
    pub fn applied(&self, sequence: u64) {
        self.progress.send_modify(|p| {
            p.applied = sequence;
            p.indexed = sequence;
        });
    }

    /// The model has every event up to `sequence`; its in-memory indexes
    /// follow (`indexed`).
    fn stored(&self, sequence: u64) {
        self.progress.send_modify(|p| p.applied = sequence);
    }

    fn indexed(&self, sequence: u64) {
        self.progress.send_modify(|p| p.indexed = sequence);
    }

    pub fn failed(&self, reason: String) {
        self.progress.send_modify(|p| p.failed = Some(reason));
    }

    /// The next rebuild request (`None`: every handle is gone).
    pub async fn rebuild_requested(&mut self) -> Option<RebuildReply> {
        self.commands
            .recv()
            .await
            .map(|Command::Rebuild(reply)| RebuildReply(reply))
    }
}

/// Answer to a rebuild request.
pub struct RebuildReply(oneshot::Sender<Result<u64, ProjectionError>>);

impl RebuildReply {
    pub fn send(self, result: Result<u64, ProjectionError>) {
        let _ = self.0.send(result);
    }
}

/// A rebuild in progress: answered once the checkpoint reaches the log's
/// head as it was when the rebuild was asked for (not "the head", which may
/// never be still).
#[derive(Default)]
pub struct PendingRebuild(Option<(RebuildReply, u64)>);

impl PendingRebuild {
    /// A new rebuild up to `target`; an earlier one still waiting is told.
    pub fn start(&mut self, reply: RebuildReply, target: u64, name: &'static str) {
        if let Some((earlier, _)) = self.0.take() {
            earlier.send(Err(ProjectionError::Stopped {
                name,
                reason: "a newer rebuild started".into(),
            }));
        }
        self.0 = Some((reply, target));
    }

    /// Answer the rebuild once `checkpoint` has reached its target.
    pub fn progress(&mut self, checkpoint: u64) {
        if self
            .0
            .as_ref()
            .is_some_and(|(_, target)| checkpoint >= *target)
            && let Some((reply, _)) = self.0.take()
        {
            reply.send(Ok(checkpoint));
        }
    }

    pub fn fail(&mut self, error: ProjectionError) {
        if let Some((reply, _)) = self.0.take() {
            reply.send(Err(error));
        }
    }
}

/// Every event after `checkpoint`, then live: what a projector follows.
pub fn follow(store: &EventStore, checkpoint: u64) -> crate::store::Subscription {
    store.subscribe(SubscriptionOptions {
        from_sequence: checkpoint + 1,
        stream_prefix: String::new(),
        follow: true,
    })
}

/// Add to `batch` the events `sub` already holds, until it has `max`.
pub fn take_queued(
    sub: &mut crate::store::Subscription,
    batch: &mut Vec<Result<Arc<Event>, StoreError>>,
    max: usize,
) {
    while batch.len() < max {
        match sub.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
}

/// A handle and its reporter, for a projector that starts at `checkpoint`.
pub fn channel(
    name: &'static str,
    tree: sled::Tree,
    checkpoint: u64,
) -> (ProjectorHandle, Reporter) {
    let (progress_tx, progress) = watch::channel(Progress {
        applied: checkpoint,
        indexed: checkpoint,
        failed: None,
    });
    let (commands, command_rx) = mpsc::channel(4);
    (
        ProjectorHandle {
            name,
            tree,
            progress,
            commands,
        },
        Reporter {
            progress: progress_tx,
            commands: command_rx,
        },
    )
}

/// Runs one [`Projection`].
pub struct Projector;

impl Projector {
    /// Open the projection's state and start following the log from its
    /// checkpoint. Returns at once; use [`ProjectorHandle::wait_for`] to
    /// wait for catch-up.
    pub fn spawn<P: Projection>(
        store: &EventStore,
        projection: Arc<P>,
    ) -> Result<ProjectorHandle, ProjectionError> {
        let (tree, checkpoint, reset) = open_state(store, projection.name(), projection.version())?;
        if reset {
            projection.reset();
        }
        projection.opened(&tree)?;
        let (handle, reporter) = channel(projection.name(), tree.clone(), checkpoint);
        let runner = Runner {
            store: store.clone(),
            projection,
            tree,
            reporter,
            persisted: checkpoint,
        };
        tokio::spawn(runner.run(checkpoint));
        Ok(handle)
    }
}

struct Runner<P> {
    store: EventStore,
    projection: Arc<P>,
    tree: sled::Tree,
    reporter: Reporter,
    /// The checkpoint last written to the tree.
    persisted: u64,
}

impl<P: Projection> Runner<P> {
    async fn run(mut self, mut checkpoint: u64) {
        let name = self.projection.name();
        let mut pending = PendingRebuild::default();
        'follow: loop {
            let mut sub = follow(&self.store, checkpoint);
            loop {
                pending.progress(checkpoint);
                let first = tokio::select! {
                    first = sub.recv() => first,
                    command = self.reporter.rebuild_requested() => match command {
                        Some(reply) => {
                            if let Err(e) = reset_tree(&self.tree, self.projection.version()) {
                                reply.send(Err(e));
                                continue;
                            }
                            self.projection.reset();
                            checkpoint = 0;
                            self.persisted = 0;
                            // Waiters wait for the rebuilt model.
                            self.reporter.applied(0);
                            tracing::info!(projection = name, "rebuilding from the log");
                            pending.start(reply, self.store.last_sequence(), name);
                            continue 'follow;
                        }
                        None => return,
                    },
                };
                let Some(first) = first else { return }; // store closed
                let mut batch = vec![first];
                take_queued(&mut sub, &mut batch, MAX_BATCH);
                match self.apply_batch(batch) {
                    Ok(Some((last, writes))) => {
                        checkpoint = last;
                        // Readers of the model go on at once; the in-memory
                        // indexes (search) follow a moment later.
                        self.reporter.stored(last);
                        self.projection
                            .committed(&Writes::from_changes(&self.tree, writes));
                        self.reporter.indexed(last);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(projection = name, error = %e, "projection stopped");
                        pending.fail(e.clone());
                        self.reporter.failed(e.to_string());
                        return;
                    }
                }
            }
        }
    }

    /// Fold `batch` and commit it with its checkpoint; the last sequence
    /// and the batch's writes. A batch that changes nothing (other models'
    /// events) writes nothing either, until the checkpoint lags by
    /// [`CHECKPOINT_EVERY`] events: replaying those after a restart is
    /// free, writing a checkpoint per event is not.
    fn apply_batch(
        &mut self,
        batch: Vec<Result<Arc<Event>, StoreError>>,
    ) -> Result<Option<(u64, writes::Changes)>, ProjectionError> {
        let mut writes = Writes::new(&self.tree);
        let mut last = None;
        for event in batch {
            let event = event?;
            self.projection.apply(&mut writes, &event)?;
            last = Some(event.sequence);
        }
        let Some(last) = last else { return Ok(None) };
        self.projection.finish(&mut writes)?;
        if !writes.is_empty() || last - self.persisted >= CHECKPOINT_EVERY {
            writes.commit(last)?;
            self.persisted = last;
        }
        Ok(Some((last, writes.into_changes())))
    }
}

pub fn reset_tree(tree: &sled::Tree, version: u32) -> Result<(), ProjectionError> {
    tree.clear()?;
    let mut batch = sled::Batch::default();
    batch.insert(VERSION_KEY, &u64::from(version).to_be_bytes());
    batch.insert(CHECKPOINT_KEY, &0u64.to_be_bytes());
    tree.apply_batch(batch)?;
    Ok(())
}

/// The big-endian u64 of up to 8 bytes.
pub fn decode_u64(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[8 - n..].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(buf)
}

/// Is `key` one of the runner's own keys?
pub fn is_meta(key: &[u8]) -> bool {
    key.first() == Some(&META)
}

/// A model's rows, its runner's keys left out (tests compare models).
#[doc(hidden)]
pub fn rows(tree: &sled::Tree) -> Vec<(Vec<u8>, Vec<u8>)> {
    tree.iter()
        .filter_map(Result::ok)
        .filter(|(k, _)| !is_meta(k))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests;
