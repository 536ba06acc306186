//! The triage board (tree `proj-triage`), a [`Projection`] of the
//! `triage-<ticket>` streams and the only code that folds them:
//!
//! - `r/<ticket>` → the ticket's triage [`Record`] (JSON);
//! - `u/<ticket>` → `()` while the record is unfinished, so a start lines up
//!   what a previous run left without reading every record.
//!
//! After each committed batch that changed a record, `Triage.Watch`
//! watchers are woken.

use serde::{Deserialize, Serialize};
use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;
use tokio::sync::watch;

use crate::projection::{Projection, ProjectionError, Writes};

/// Where a ticket's triage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Queued,
    Running,
    Retrying,
    Done,
    Failed,
    Skipped,
}

impl Phase {
    pub fn finished(self) -> bool {
        matches!(self, Phase::Done | Phase::Failed | Phase::Skipped)
    }
}

/// One ticket's triage record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub ticket: String,
    pub phase: Phase,
    pub source: String,
    pub approve: String,
    pub model: String,
    /// The triage session (empty until the first attempt).
    pub session: String,
    /// Attempts started in this round.
    pub attempt: u32,
    pub outcome: String,
    pub error: String,
    /// Version of the `triage-<ticket>` stream.
    pub version: u64,
    /// Sequence of the record's last event.
    pub sequence: u64,
    /// Sequence of the round's `TriageQueued`: the queue order.
    pub queued_sequence: u64,
    /// Sequence of the last `TriageStarted`.
    pub started_sequence: u64,
    /// The daemon that started the last attempt (it holds the record
    /// while it is alive); empty while queued, and in records written
    /// before leases.
    #[serde(default)]
    pub owner: String,
}

impl Record {
    fn new(ticket: &str) -> Self {
        Self {
            ticket: ticket.to_string(),
            phase: Phase::Queued,
            source: String::new(),
            approve: String::new(),
            model: String::new(),
            session: String::new(),
            attempt: 0,
            outcome: String::new(),
            error: String::new(),
            version: 0,
            sequence: 0,
            queued_sequence: 0,
            started_sequence: 0,
            owner: String::new(),
        }
    }

    /// Fold one event of the record's stream (idempotent by version).
    pub fn apply(&mut self, event: &Event) {
        if event.stream_version <= self.version {
            return;
        }
        self.version = event.stream_version;
        self.sequence = event.sequence;
        match &event.payload {
            Some(Payload::TriageQueued(e)) => {
                self.phase = Phase::Queued;
                self.source = e.source.clone();
                self.approve = e.approve.clone();
                self.model = e.model.clone();
                self.attempt = 0;
                self.owner.clear();
                self.outcome.clear();
                self.error.clear();
                self.queued_sequence = event.sequence;
            }
            Some(Payload::TriageStarted(e)) => {
                self.phase = Phase::Running;
                self.session = e.session_id.clone();
                self.attempt = e.attempt;
                self.started_sequence = event.sequence;
                self.owner = e.daemon_id.clone();
            }
            Some(Payload::TriageAttemptFailed(e)) => {
                self.phase = Phase::Retrying;
                self.outcome = e.outcome.clone();
                self.error = e.error.clone();
            }
            Some(Payload::TriageFinished(e)) => {
                self.phase = match e.result.as_str() {
                    "done" => Phase::Done,
                    "skipped" => Phase::Skipped,
                    _ => Phase::Failed,
                };
                self.outcome = e.outcome.clone();
                self.error = e.error.clone();
            }
            _ => {}
        }
    }
}

/// How a queued job begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A new attempt.
    Fresh,
    /// Send the prompt again in the same attempt (its turn was interrupted
    /// by a restart, or its message never got stored).
    Again,
}

/// Work for the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub ticket: String,
    pub start: Start,
}

const RECORD: &[u8] = b"r/";
const UNFINISHED: &[u8] = b"u/";

fn key(prefix: &[u8], ticket: &str) -> Vec<u8> {
    [prefix, ticket.as_bytes()].concat()
}

fn decode(bytes: &[u8]) -> Result<Record, ProjectionError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ProjectionError::Corrupt(format!("a stored triage record: {e}")))
}

/// Reads of the board.
pub struct Reader<'a>(pub &'a sled::Tree);

impl Reader<'_> {
    pub fn get(&self, ticket: &str) -> Result<Option<Record>, ProjectionError> {
        self.0
            .get(key(RECORD, ticket))?
            .map(|v| decode(&v))
            .transpose()
    }

    pub fn contains(&self, ticket: &str) -> Result<bool, ProjectionError> {
        Ok(self.0.contains_key(key(RECORD, ticket))?)
    }

    /// Every record, by ticket id.
    pub fn all(&self) -> Result<Vec<Record>, ProjectionError> {
        self.0
            .scan_prefix(RECORD)
            .map(|row| decode(&row?.1))
            .collect()
    }

    /// Records not finished (queued, running, retrying).
    pub fn unfinished(&self) -> Result<Vec<Record>, ProjectionError> {
        let mut out = Vec::new();
        for row in self.0.scan_prefix(UNFINISHED) {
            let (k, _) = row?;
            if let Some(r) = self.get(&String::from_utf8_lossy(&k[UNFINISHED.len()..]))? {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// The board's read model.
pub struct BoardModel {
    /// Bumped after each committed batch that changed a record.
    pub changed: watch::Sender<u64>,
}

impl Projection for BoardModel {
    fn name(&self) -> &'static str {
        "triage"
    }

    fn version(&self) -> u32 {
        1
    }

    fn apply(&self, writes: &mut Writes<'_>, event: &Event) -> Result<(), ProjectionError> {
        let Some(ticket) = event.stream_id.strip_prefix("triage-") else {
            return Ok(());
        };
        let k = key(RECORD, ticket);
        let mut record = match writes.get(&k)? {
            Some(bytes) => decode(&bytes)?,
            None => Record::new(ticket),
        };
        record.apply(event);
        if record.phase.finished() {
            writes.remove(key(UNFINISHED, ticket));
        } else {
            writes.put(key(UNFINISHED, ticket), Vec::new());
        }
        let bytes =
            serde_json::to_vec(&record).map_err(|e| ProjectionError::Storage(e.to_string()))?;
        writes.put(k, bytes);
        Ok(())
    }

    fn committed(&self, writes: &Writes<'_>) {
        if !writes.is_empty() {
            self.changed.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tinycode_shared::proto::{TriageFinished, TriageQueued, TriageStarted};

    fn event(version: u64, sequence: u64, payload: Payload) -> Event {
        Event {
            sequence,
            stream_id: "triage-T-1".into(),
            stream_version: version,
            payload: Some(payload),
            ..Event::default()
        }
    }

    #[test]
    fn a_record_follows_its_rounds_and_folds_each_event_once() {
        let mut r = Record::new("T-1");
        let queued = event(
            1,
            10,
            Payload::TriageQueued(TriageQueued {
                ticket_id: "T-1".into(),
                source: "file".into(),
                ..TriageQueued::default()
            }),
        );
        let started = event(
            2,
            12,
            Payload::TriageStarted(TriageStarted {
                ticket_id: "T-1".into(),
                session_id: "s1".into(),
                attempt: 1,
                daemon_id: "d1".into(),
            }),
        );
        let finished = event(
            3,
            20,
            Payload::TriageFinished(TriageFinished {
                result: "done".into(),
                outcome: "completed".into(),
                attempts: 1,
                ..TriageFinished::default()
            }),
        );
        r.apply(&queued);
        r.apply(&started);
        r.apply(&queued); // a replayed event changes nothing
        assert_eq!(
            (r.phase, r.attempt, r.session.as_str()),
            (Phase::Running, 1, "s1")
        );
        assert_eq!((r.queued_sequence, r.started_sequence), (10, 12));
        assert_eq!(r.owner, "d1", "the daemon that started it holds it");
        r.apply(&finished);
        assert_eq!(r.phase, Phase::Done);
        // A second round starts from zero attempts, same session kept.
        let again = event(
            4,
            30,
            Payload::TriageQueued(TriageQueued {
                source: "request".into(),
                ..TriageQueued::default()
            }),
        );
        r.apply(&again);
        assert_eq!(
            (r.phase, r.attempt, r.queued_sequence),
            (Phase::Queued, 0, 30)
        );
        assert_eq!(r.session, "s1");
        assert_eq!(r.owner, "", "a new round is nobody's until started");
        assert!(!r.phase.finished());
    }
}
