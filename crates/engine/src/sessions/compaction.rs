//! Compaction: the turns before a user-message boundary replaced by a
//! summary, asked for before a turn, between turns (the Compact RPC) or by
//! a turn whose context outgrew the limit between two model requests.

use std::sync::atomic::Ordering;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, SessionCompacted};

use super::jobs::Compacted;
use super::write::{append, provider_for};
use super::{Live, SessionError, Sessions};
use crate::context::compact;
use crate::model::Message;

/// Replace the turns before a user-message boundary with a summary. `turn`
/// is the turn about to run (automatic compaction), `None` for a manual one
/// between turns. Returns what was done (`compacted: false` when no turn
/// is old enough).
pub(super) async fn compact(
    sessions: &Sessions,
    id: &str,
    live: &Live,
    turn: Option<u64>,
    by: Option<ClientRef>,
) -> Result<Compacted, SessionError> {
    sessions.caught_up().await?;
    let state = sessions.get(id)?;
    let limit = turn.unwrap_or_else(|| state.next_turn());
    let Some(first_kept) = cut_point(sessions, &state, limit) else {
        return Ok(Compacted::default());
    };
    let replaced = sessions.history(&state).await?.before(first_kept);
    let provider = provider_for(sessions, &state.model)?;
    let summary = compact::summarize(provider.as_ref(), &replaced)
        .await
        .map_err(|e| SessionError::Model {
            model: state.model.clone(),
            message: format!("compaction failed, the history was kept: {e}"),
        })?;
    let tokens_before = state.context_tokens();
    let mut probe = state.clone();
    let compacted = SessionCompacted {
        summary,
        first_kept_turn: first_kept,
        summarized_messages: replaced.len() as u32,
        tokens_before,
        tokens_after: 0,
        manual: by.is_some(),
        by,
    };
    probe.apply(&tinycode_shared::proto::Event {
        payload: Some(Payload::SessionCompacted(compacted.clone())),
        ..Default::default()
    });
    let compacted = SessionCompacted {
        tokens_after: probe.context_tokens(),
        ..compacted
    };
    let report = Compacted {
        compacted: true,
        summarized_messages: compacted.summarized_messages,
        tokens_before,
        tokens_after: compacted.tokens_after,
        first_kept_turn: first_kept,
        sequence: 0,
    };
    let sequence = append(sessions, live, id, Payload::SessionCompacted(compacted)).await?;
    tracing::info!(session = %id, first_kept, tokens_before, tokens_after = report.tokens_after, "compacted");
    Ok(Compacted { sequence, ..report })
}

/// The first turn kept when the turns before `limit` are summarised
/// (`None`: none is old enough).
fn cut_point(sessions: &Sessions, state: &super::SessionState, limit: u64) -> Option<u64> {
    let keep = sessions.defaults().compaction.keep_recent_messages;
    compact::cut_point(&state.turn_sizes(limit), limit, keep)
}

/// The session's compaction, asked for by a turn whose context outgrew
/// `compactAboveTokens` between two model requests: earlier turns are
/// summarised and recorded as before a turn; the turn goes on with the
/// shorter history.
pub(super) struct MidTurn<'a> {
    pub(super) sessions: &'a Sessions,
    pub(super) id: &'a str,
    pub(super) live: &'a Live,
    pub(super) turn: u64,
    /// The turn's writer: what it holds is stored before the compaction's
    /// own event, so the log keeps the turn's order.
    pub(super) writer: &'a tokio::sync::mpsc::UnboundedSender<super::jobs::Write>,
    /// A failed compaction is not retried at every step.
    pub(super) failed: std::sync::atomic::AtomicBool,
}

impl crate::agent::Compactor for MidTurn<'_> {
    fn compact(&self) -> futures::future::BoxFuture<'_, Option<Vec<Message>>> {
        Box::pin(async move {
            if self.failed.load(Ordering::Relaxed) {
                return None;
            }
            // Only earlier turns are cut, and they are stored already:
            // with none old enough, the writer keeps what it holds.
            let state = self.sessions.get(self.id).ok()?;
            cut_point(self.sessions, &state, self.turn)?;
            // A writer that cannot store fails the turn anyway.
            super::writer::acknowledged(self.writer, super::jobs::Write::Flush)
                .await
                .ok()?;
            match compact(self.sessions, self.id, self.live, Some(self.turn), None).await {
                Ok(done) if done.compacted => {
                    let state = self.sessions.get(self.id).ok()?;
                    let history = self.sessions.history(&state).await.ok()?;
                    Some(history.before(self.turn))
                }
                Ok(_) => None,
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    tracing::warn!(session = %self.id, error = %e, "compaction during a turn failed; the turn goes on with the full history");
                    None
                }
            }
        })
    }
}
