//! The triage board: every ticket's triage record, folded from its
//! `triage-<ticket>` stream, and the queue of work waiting for a slot.

use std::collections::{HashMap, VecDeque};

use tinycode_shared::proto::Event;
use tinycode_shared::proto::event::Payload;

/// Where a ticket's triage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The running attempt's turn (known once its message is stored; not
    /// stored itself: a restart finds it through `started_sequence`).
    pub turn: u64,
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
            turn: 0,
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
                self.outcome.clear();
                self.error.clear();
                self.queued_sequence = event.sequence;
                self.turn = 0;
            }
            Some(Payload::TriageStarted(e)) => {
                self.phase = Phase::Running;
                self.session = e.session_id.clone();
                self.attempt = e.attempt;
                self.started_sequence = event.sequence;
                self.turn = 0;
            }
            Some(Payload::TriageAttemptFailed(e)) => {
                self.phase = Phase::Retrying;
                self.outcome = e.outcome.clone();
                self.error = e.error.clone();
                self.turn = 0;
            }
            Some(Payload::TriageFinished(e)) => {
                self.phase = match e.result.as_str() {
                    "done" => Phase::Done,
                    "skipped" => Phase::Skipped,
                    _ => Phase::Failed,
                };
                self.outcome = e.outcome.clone();
                self.error = e.error.clone();
                self.turn = 0;
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

/// Every record, and the queue.
#[derive(Debug, Default)]
pub struct Board {
    pub records: HashMap<String, Record>,
    pub queue: VecDeque<Job>,
}

impl Board {
    /// Fold a `triage-<ticket>` event; returns the ticket id.
    pub fn apply(&mut self, event: &Event) -> Option<String> {
        let ticket = event.stream_id.strip_prefix("triage-")?;
        self.records
            .entry(ticket.to_string())
            .or_insert_with(|| Record::new(ticket))
            .apply(event);
        Some(ticket.to_string())
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
        let mut board = Board::default();
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
        assert_eq!(board.apply(&queued).as_deref(), Some("T-1"));
        board.apply(&started);
        board.apply(&queued); // a replayed event changes nothing
        let r = &board.records["T-1"];
        assert_eq!(
            (r.phase, r.attempt, r.session.as_str()),
            (Phase::Running, 1, "s1")
        );
        assert_eq!((r.queued_sequence, r.started_sequence), (10, 12));
        board.apply(&finished);
        assert_eq!(board.records["T-1"].phase, Phase::Done);
        // A second round starts from zero attempts, same session kept.
        let again = event(
            4,
            30,
            Payload::TriageQueued(TriageQueued {
                source: "request".into(),
                ..TriageQueued::default()
            }),
        );
        board.apply(&again);
        let r = &board.records["T-1"];
        assert_eq!(
            (r.phase, r.attempt, r.queued_sequence),
            (Phase::Queued, 0, 30)
        );
        assert_eq!(r.session, "s1");
        assert!(!r.phase.finished());
    }
}
