//! A session's projection, folded from `session-<id>` events: title, model,
//! and its turns with the messages each one added (the model's history).

use std::collections::BTreeMap;

use serde_json::Value;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, TurnOutcome};

use crate::model::{Message, Thinking, ToolCall};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnRecord {
    pub user: String,
    /// Assistant messages and tool results of this turn, in order.
    pub messages: Vec<Message>,
    pub started: bool,
    pub outcome: Option<TurnOutcome>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionState {
    pub id: String,
    pub title: String,
    pub model: String,
    pub approve: String,
    pub created_sequence: u64,
    pub last_sequence: u64,
    pub turns: BTreeMap<u64, TurnRecord>,
    pub deleted: bool,
    pub forked_from: String,
}

impl SessionState {
    /// The model's history before `turn`: each earlier turn's user message
    /// and what it added.
    pub fn history_before(&self, turn: u64) -> Vec<Message> {
        self.turns
            .range(..turn)
            .flat_map(|(_, t)| {
                std::iter::once(Message::User {
                    text: t.user.clone(),
                })
                .chain(t.messages.iter().cloned())
            })
            .collect()
    }

    pub fn message_count(&self) -> u32 {
        self.turns
            .values()
            .map(|t| 1 + t.messages.len() as u32)
            .sum()
    }

    pub fn next_turn(&self) -> u64 {
        self.turns.keys().next_back().map_or(1, |t| t + 1)
    }

    /// Turns started or queued that have no outcome.
    pub fn unfinished(&self) -> Vec<u64> {
        self.turns
            .iter()
            .filter(|(_, t)| t.outcome.is_none())
            .map(|(n, _)| *n)
            .collect()
    }

    pub fn apply(&mut self, event: &Event) {
        self.last_sequence = event.sequence;
        let Some(payload) = &event.payload else {
            return;
        };
        match payload {
            Payload::SessionCreated(e) => {
                self.id = event.stream_id.trim_start_matches("session-").to_string();
                self.title = e.title.clone();
                self.model = e.model.clone();
                self.approve = e.approve.clone();
                self.created_sequence = event.sequence;
                self.forked_from = e.forked_from.clone();
            }
            Payload::SessionRenamed(e) => self.title = e.title.clone(),
            Payload::SessionDeleted(_) => self.deleted = true,
            Payload::UserMessageAdded(e) => {
                self.turns.entry(e.turn).or_default().user = e.text.clone();
            }
            Payload::TurnStarted(e) => self.turns.entry(e.turn).or_default().started = true,
            Payload::AssistantMessageAdded(e) => {
                let thinking = e
                    .thinking
                    .iter()
                    .zip(
                        e.thinking_signatures
                            .iter()
                            .chain(std::iter::repeat(&String::new())),
                    )
                    .map(|(text, signature)| Thinking {
                        text: text.clone(),
                        signature: signature.clone(),
                    })
                    .collect();
                let tool_calls = e
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall::new(c.id.clone(), c.name.clone(), c.arguments_json.clone()))
                    .collect();
                self.turns
                    .entry(e.turn)
                    .or_default()
                    .messages
                    .push(Message::Assistant {
                        text: e.text.clone(),
                        thinking,
                        tool_calls,
                    });
            }
            Payload::ToolCallFinished(e) => {
                let call = e.call.clone().unwrap_or_default();
                self.turns
                    .entry(e.turn)
                    .or_default()
                    .messages
                    .push(Message::ToolResult {
                        call_id: call.id,
                        name: call.name,
                        content: e.content.clone(),
                        is_error: e.is_error,
                    });
            }
            Payload::TurnCompleted(e) => {
                self.turns.entry(e.turn).or_default().outcome =
                    Some(TurnOutcome::try_from(e.outcome).unwrap_or(TurnOutcome::Unspecified));
            }
            _ => {}
        }
    }
}

/// Details JSON of a tool result, parsed (Null when empty).
pub fn details(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}
