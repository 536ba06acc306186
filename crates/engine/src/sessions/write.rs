//! Storing a session's events and finding its model: what the actor, the
//! compaction and the turn all use.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, TurnCompleted, TurnOutcome as Outcome};

use super::{Live, SessionError, Sessions, session_stream};
use crate::agent::TurnOutcome;
use crate::model::catalog::resolve_with;
use crate::model::{ModelProvider, RetryPolicy};
use crate::store::ExpectedVersion;

/// Store one event of the session and publish it; returns its sequence.
pub(super) async fn append(
    sessions: &Sessions,
    live: &Live,
    id: &str,
    p: Payload,
) -> Result<u64, SessionError> {
    append_all(sessions, live, id, vec![p]).await
}

/// Store the end of turn `turn` (`end`) even across an outage of the
/// store: a transient failure is tried again with backoff (0.2 s … 5 s)
/// until it is stored or the store closes — whoever waits for the turn's
/// end (a triage, a client) is not left waiting by a database that came
/// back. An append whose answer was lost may have been stored: the log is
/// read before each retry, and before the first one after a failed write
/// of the turn (`after_failure`: the writer's append that carried the end
/// may have been stored), so an end is never stored twice; while the log
/// cannot be read, nothing is appended. An end found stored that way was
/// never published: its last events are, from the log.
pub(super) async fn append_end(
    sessions: &Sessions,
    live: &Live,
    id: &str,
    turn: u64,
    end: Payload,
    after_failure: bool,
) {
    let mut wait = std::time::Duration::from_millis(200);
    let mut closing = sessions.store.closing();
    let mut look = after_failure;
    loop {
        if look {
            match end_stored(sessions, id, turn).await {
                Some(true) => return republish(sessions, live, id).await,
                Some(false) => {}
                None => {
                    if !pause(&mut closing, &mut wait).await {
                        return;
                    }
                    continue;
                }
            }
        }
        match append(sessions, live, id, end.clone()).await {
            Err(SessionError::Store(e)) if e.transient() => {}
            // Stored, or logged by `append`: the next start finds the
            // turn unfinished and marks it interrupted.
            _ => return,
        }
        if !pause(&mut closing, &mut wait).await {
            return;
        }
        look = true;
    }
}

/// Wait `wait`, then double it (up to 5 s); `false` when the store closes.
async fn pause(
    closing: &mut tokio::sync::watch::Receiver<bool>,
    wait: &mut std::time::Duration,
) -> bool {
    tokio::select! {
        () = tokio::time::sleep(*wait) => {}
        _ = closing.wait_for(|c| *c) => return false,
    }
    *wait = (*wait * 2).min(std::time::Duration::from_secs(5));
    true
}

/// Whether the log (read now) has an end of `turn`; `None` when it cannot
/// be read.
async fn end_stored(sessions: &Sessions, id: &str, turn: u64) -> Option<bool> {
    let head = sessions.store.latest().await.ok()?;
    sessions.read_at(head).await.ok()?;
    Some(sessions.turn_outcome(id, turn).is_some())
}

/// Publish the session's last events as the log has them: an append whose
/// answer was lost was stored but never published (a follower drops the
/// repeats and the triage waiting for the end sees it).
async fn republish(sessions: &Sessions, live: &Live, id: &str) {
    let Ok(Some(state)) = sessions.stored_state(id) else {
        return;
    };
    let batch = super::jobs::WRITE_BATCH as u64;
    let from = state.last_version.saturating_sub(batch).max(1);
    match sessions
        .stored_versions(id, from, super::jobs::WRITE_BATCH + 1)
        .await
    {
        Ok(events) => live.publish(&events.into_iter().map(Arc::new).collect::<Vec<_>>()),
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "could not publish the turn's stored end")
        }
    }
}

/// Store events of the session in one append (one durable point) and
/// publish them; returns the last one's sequence.
pub(super) async fn append_all(
    sessions: &Sessions,
    live: &Live,
    id: &str,
    payloads: Vec<Payload>,
) -> Result<u64, SessionError> {
    let events = append_unpublished(sessions, id, payloads).await?;
    live.publish(&events);
    Ok(events.last().map_or(0, |e| e.sequence))
}

/// Store events of the session in one append; the caller publishes them.
pub(super) async fn append_unpublished(
    sessions: &Sessions,
    id: &str,
    payloads: Vec<Payload>,
) -> Result<Vec<Arc<Event>>, SessionError> {
    Ok(sessions
        .store
        .append(&session_stream(id), ExpectedVersion::Any, payloads)
        .await
        .inspect_err(
            |e| tracing::error!(session = %id, error = %e, "could not store session events"),
        )?)
}

/// The provider of `model` (`offline`: the daemon's offline model).
pub(super) fn provider_for(
    sessions: &Sessions,
    model: &str,
) -> Result<Arc<dyn ModelProvider>, SessionError> {
    resolve_with(
        model,
        &sessions.defaults().providers,
        &|k| std::env::var(k).ok(),
        Arc::clone(&sessions.keys),
        RetryPolicy::default(),
    )
    .map(|c| c.provider(&sessions.offline))
    .map_err(|e| SessionError::Model {
        model: model.to_string(),
        message: e.to_string(),
    })
}

/// `TurnCompleted{FAILED}` with why.
pub(super) fn failed(turn: u64, error: String) -> Payload {
    Payload::TurnCompleted(TurnCompleted {
        turn,
        outcome: Outcome::Failed as i32,
        error,
        ..TurnCompleted::default()
    })
}

/// The loop's outcome as stored, with its error (no credential ever).
pub(super) fn outcome_of(outcome: &TurnOutcome) -> (Outcome, String) {
    match outcome {
        TurnOutcome::Completed => (Outcome::Completed, String::new()),
        TurnOutcome::EmptyResponse => (Outcome::EmptyResponse, String::new()),
        TurnOutcome::MaxSteps => (Outcome::MaxSteps, String::new()),
        TurnOutcome::Cancelled => (Outcome::Cancelled, String::new()),
        TurnOutcome::TimedOut => (Outcome::TimedOut, String::new()),
        // Whatever a provider said, no credential is stored.
        TurnOutcome::Failed(e) => (Outcome::Failed, crate::model::redact::redact(e, &[])),
        // Never stored by this daemon (the taker records the end).
        TurnOutcome::HandedOver(why) | TurnOutcome::Paused(why) => {
            (Outcome::Interrupted, why.clone())
        }
    }
}
