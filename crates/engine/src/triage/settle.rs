//! How a triage attempt ended, recorded: done once the ticket is placed;
//! a failed turn is retried with backoff, then the ticket is left open with
//! a note saying why.

use std::sync::Arc;
use std::time::Duration;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    TicketNote, TicketNoteAdded, TriageAttemptFailed, TriageFinished, TurnOutcome,
};

use super::board::{Job, Record, Start};
use super::worker::{Ended, Slot};
use super::{Triage, TriageError, outcome_name};

/// The outcome of a triage turn that completed without a decision.
pub(crate) const INCOMPLETE: &str = "incomplete";

impl Triage {
    /// Record how an attempt ended: done, retried after a backoff, or
    /// failed for good (with a note on the ticket).
    pub(super) async fn settle(self: Arc<Self>, job: Job, ended: Ended, slot: Option<Slot>) {
        let mut ended = ended;
        let mut slot = slot;
        let mut job = job;
        loop {
            let Some(record) = self.own_record(&job.ticket) else {
                return;
            };
            let (phase, attempt) = (record.phase, record.attempt);
            if phase.finished() {
                return; // skipped
            }
            let mut outcome = outcome_name(ended.outcome);
            // A denied action shows in the record, never a silent success.
            match ended.denied {
                0 => {}
                1 => outcome.push_str(", 1 action denied"),
                n => outcome.push_str(&format!(", {n} actions denied")),
            }
            // Whatever the turn's end, a round that placed the ticket is
            // done (an interrupted turn may have routed it before it was
            // cut short): the record says what happened.
            let (classified, placed) = self.decisions(&record).await;
            if placed
                && !self
                    .classification_refused(&job.ticket, &record, classified)
                    .await
            {
                if let Err(e) = self.finish(&job.ticket, "done", &outcome, "").await {
                    // The record stays running; the next start settles it
                    // from the turn's end (the ticket is placed already).
                    crate::error_limited!("triage-finish", ticket = %job.ticket, error = %e, "cannot record a finished triage");
                }
                return;
            }
            let session = record.session;
            if ended.outcome == TurnOutcome::Completed {
                // A completed turn is done only when it decided something:
                // an honest outcome, never "done" for nothing.
                outcome = INCOMPLETE.to_string();
                ended.error = incomplete_reason(classified, placed).into();
            }
            let cancelled = ended.outcome == TurnOutcome::Cancelled;
            if cancelled || attempt >= self.config().max_attempts {
                self.give_up(&job.ticket, cancelled, attempt, &outcome, &ended.error)
                    .await;
                return;
            }
            let Some(delay) = self
                .record_retry(&job.ticket, session, attempt, outcome, &ended.error)
                .await
            else {
                return;
            };
            // The backoff does not hold a slot.
            drop(slot);
            tokio::time::sleep(Duration::from_millis(delay)).await;
            slot = Arc::clone(&self.slots)
                .acquire_owned()
                .await
                .ok()
                .map(Slot::new);
            job = Job {
                ticket: job.ticket,
                start: Start::Fresh,
            };
            match self.attempt(&job, &mut slot).await {
                Some(next) => ended = next,
                None => return,
            }
        }
    }

    /// The ticket's triage record, when this daemon holds it (or nobody
    /// does); `None` (logged) when it is missing, unreadable or another
    /// daemon's.
    fn own_record(&self, ticket: &str) -> Option<Record> {
        match self.record(ticket) {
            Ok(Some(r)) if !r.owner.is_empty() && r.owner != self.cluster.id() => {
                tracing::warn!(ticket = %ticket, owner = %r.owner, "another daemon took this triage over");
                None
            }
            Ok(Some(r)) => Some(r),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(ticket = %ticket, error = %e, "cannot read the triage record");
                None
            }
        }
    }

    /// A triage whose classification was refused (a category the desk
    /// does not have) is not done, even if it routed: the ticket has no
    /// category.
    async fn classification_refused(
        &self,
        ticket: &str,
        record: &Record,
        classified: bool,
    ) -> bool {
        !classified
            && self
                .desk
                .get_ticket(ticket)
                .is_ok_and(|t| t.category.is_empty())
            && self.classify_failed(record).await
    }

    /// No attempt is left (or the turn was cancelled): leave a note on the
    /// ticket and record the triage failed.
    async fn give_up(
        &self,
        ticket: &str,
        cancelled: bool,
        attempt: u32,
        outcome: &str,
        error: &str,
    ) {
        let why = if cancelled {
            "its turn was cancelled".to_string()
        } else {
            format!("{attempt} attempts failed; the last: {outcome}: {error}")
        };
        self.note(ticket, &why).await;
        // Dropped: `finish` logs its own failure, and this attempt ends
        // here either way.
        let _ = self.finish(ticket, "failed", outcome, error).await;
    }

    /// Record a failed attempt that is tried again; the backoff before
    /// the next one, in ms (`None`, logged: it could not be recorded).
    async fn record_retry(
        &self,
        ticket: &str,
        session: String,
        attempt: u32,
        outcome: String,
        error: &str,
    ) -> Option<u64> {
        let delay = self
            .config()
            .retry_delay_ms
            .saturating_mul(1 << attempt.saturating_sub(1).min(16));
        tracing::warn!(ticket = %ticket, attempt, %outcome, error = %error, delay_ms = delay, "triage attempt failed; retrying");
        let failed = Payload::TriageAttemptFailed(TriageAttemptFailed {
            ticket_id: ticket.to_string(),
            session_id: session,
            attempt,
            outcome,
            error: error.to_string(),
            retry_in_ms: delay,
        });
        if let Err(e) = self.append(ticket, failed).await {
            crate::error_limited!("triage-record", ticket = %ticket, error = %e, "cannot record a failed triage attempt");
            return None;
        }
        Some(delay)
    }

    /// Record the end of a triage; a record another daemon holds (or
    /// finished first) is [`TriageError::Elsewhere`]. Logged either way.
    pub(super) async fn finish(
        &self,
        ticket: &str,
        result: &str,
        outcome: &str,
        error: &str,
    ) -> Result<(), TriageError> {
        let (session, attempts) = self
            .record(ticket)
            .ok()
            .flatten()
            .map(|r| (r.session, r.attempt))
            .unwrap_or_default();
        let payload = Payload::TriageFinished(TriageFinished {
            ticket_id: ticket.to_string(),
            session_id: session,
            result: result.to_string(),
            outcome: outcome.to_string(),
            error: error.to_string(),
            attempts,
        });
        let appended = self.append(ticket, payload).await;
        match &appended {
            Ok(()) => tracing::info!(ticket, result, outcome, "triage finished"),
            Err(TriageError::Elsewhere(_)) => {
                tracing::info!(ticket, "another daemon settled this triage first")
            }
            Err(e) => {
                crate::error_limited!("triage-record", ticket, error = %e, "cannot record the end of a triage")
            }
        }
        appended
    }

    /// Whether the triage session's tool calls classified the ticket in
    /// this round (since its `TriageQueued`), and whether they routed or
    /// escalated it (judged from the ticket's events they made). A triage
    /// is done only once the ticket is placed.
    pub(super) async fn decisions(&self, record: &Record) -> (bool, bool) {
        let ticket = record.ticket.as_str();
        let session = record.session.as_str();
        if session.is_empty() {
            return (false, false);
        }
        let stream = crate::domain::desk::ticket_stream(ticket);
        let events = match self.store.read_stream(&stream, 1, usize::MAX).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(ticket, error = %e, "cannot read the ticket to judge its triage");
                return (true, true);
            }
        };
        let (mut classified, mut placed) = (false, false);
        for e in events
            .iter()
            .filter(|e| e.sequence > record.queued_sequence)
        {
            let ours = crate::domain::ticket::origin_of(e).is_some_and(|o| o.session_id == session);
            match &e.payload {
                Some(Payload::TicketClassified(_)) if ours => classified = true,
                // Held for a person (`triage.reviewBelow`): the triage is
                // done; the ticket waits in the review queue.
                Some(Payload::DecisionSuggested(_)) if ours => (classified, placed) = (true, true),
                Some(Payload::TicketRouted(_) | Payload::TicketEscalated(_)) if ours => {
                    placed = true
                }
                _ => {}
            }
        }
        (classified, placed)
    }

    /// Whether a `classify_ticket` call of the triage session failed in
    /// this round.
    async fn classify_failed(&self, record: &Record) -> bool {
        let stream = format!("session-{}", record.session);
        let Ok(events) = self.store.read_stream(&stream, 1, usize::MAX).await else {
            return false;
        };
        events
            .iter()
            .filter(|e| e.sequence > record.queued_sequence)
            .any(|e| {
                matches!(&e.payload, Some(Payload::ToolCallFinished(f))
                    if f.is_error && f.call.as_ref().is_some_and(|c| c.name == "classify_ticket"))
            })
    }

    /// Leave the reason on the ticket for the humans.
    async fn note(&self, ticket: &str, why: &str) {
        let text = format!(
            "Auto-triage gave up: {why}. The ticket stays open; triage it by hand (`tinycode triage {ticket}`)."
        );
        let note = Payload::TicketNoteAdded(TicketNoteAdded {
            by: None,
            note: Some(TicketNote {
                text,
                at: crate::domain::desk::now(),
            }),
        });
        if let Err(e) = self
            .desk
            .change_ticket(ticket, |_| Ok(vec![note.clone()]))
            .await
        {
            crate::error_limited!("triage-note", ticket, error = %e, "cannot add the triage failure note");
        }
    }
}

/// Why a completed turn that did not place the ticket is incomplete.
fn incomplete_reason(classified: bool, placed: bool) -> &'static str {
    if placed {
        "the turn routed the ticket but could not classify it (its classification was refused)"
    } else if classified {
        "the turn classified the ticket but neither routed nor escalated it"
    } else {
        "the turn ended without classifying, routing or escalating the ticket"
    }
}
