//! Compaction: older turns are replaced by a model-written summary wrapped
//! in `<conversation-summary>`. The cut falls on a user-message boundary and
//! keeps at least the newest `keepRecentMessages` messages verbatim.

use futures::StreamExt;

use crate::model::{Message, ModelError, ModelEvent, ModelProvider, ModelRequest, Purpose};

/// The system prompt of a summary request. The offline model recognises
/// it by this opening.
pub const SUMMARY_SYSTEM: &str = "Summarise the support-desk conversation below for the agent that continues it. Keep: the customer's problems and ticket ids, what was looked up (articles, tickets), every classification, routing, escalation, reply and knowledge edit made or refused, decisions pending, and open questions. Be concise and factual; output only the summary.";

/// How a summary sits in the model's history.
pub fn wrap(summary: &str) -> String {
    format!("<conversation-summary>\n{summary}\n</conversation-summary>")
}

/// The first turn to keep verbatim, given `(turn, messages)` of the turns
/// held now (oldest first) and the turn about to run (`limit`): the newest
/// user-message boundary that keeps at least `keep_recent` messages. `None`
/// when no turn would be summarised.
pub fn cut_point(turns: &[(u64, usize)], limit: u64, keep_recent: usize) -> Option<u64> {
    let mut kept = 0usize;
    let mut first_kept = limit;
    for (turn, messages) in turns.iter().rev() {
        if kept >= keep_recent {
            break;
        }
        kept += messages;
        first_kept = *turn;
    }
    let oldest = turns.first()?.0;
    (first_kept > oldest).then_some(first_kept)
}

/// The conversation as plain text, one block per message.
pub fn transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        match m {
            Message::User { text } => out.push_str(&format!("User: {text}\n\n")),
            Message::Assistant {
                text, tool_calls, ..
            } => {
                if !text.trim().is_empty() {
                    out.push_str(&format!("Assistant: {text}\n\n"));
                }
                for c in tool_calls {
                    out.push_str(&format!("Tool call: {} {}\n\n", c.name, c.raw_arguments));
                }
            }
            Message::ToolResult {
                name,
                content,
                is_error,
                ..
            } => {
                let kind = if *is_error {
                    "Tool error"
                } else {
                    "Tool result"
                };
                out.push_str(&format!("{kind} ({name}): {content}\n\n"));
            }
        }
    }
    out
}

/// Ask `provider` for a summary of `messages`.
pub async fn summarize(
    provider: &dyn ModelProvider,
    messages: &[Message],
) -> Result<String, ModelError> {
    let request = ModelRequest {
        system: SUMMARY_SYSTEM.into(),
        purpose: Purpose::Summary,
        messages: vec![Message::User {
            text: transcript(messages),
        }],
        ..ModelRequest::default()
    };
    let mut stream = provider.stream(request);
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        if let ModelEvent::TextDelta(t) = event? {
            text.push_str(&t);
        }
    }
    let text = text.trim().to_string();
    if text.is_empty() {
        return Err(ModelError::Provider {
            provider: provider.name(),
            kind: "empty_summary".into(),
            message: "the model returned an empty summary; the history was left as it was".into(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_falls_on_a_user_boundary_keeping_the_recent_messages() {
        let turns = [(1, 5), (2, 3), (3, 4)];
        // Keep ≥ 4: turn 3 alone has 4 messages.
        assert_eq!(cut_point(&turns, 4, 4), Some(3));
        // Keep ≥ 5: turn 3 is not enough, so turn 2 is kept too.
        assert_eq!(cut_point(&turns, 4, 5), Some(2));
        // Keep everything there is: nothing to summarise.
        assert_eq!(cut_point(&turns, 4, 12), None);
        assert_eq!(cut_point(&turns, 4, 100), None);
        // Keep nothing: every held turn is summarised.
        assert_eq!(cut_point(&turns, 4, 0), Some(4));
        assert_eq!(cut_point(&[], 1, 0), None);
    }
}
