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
    /// Sequence of the turn's user message.
    pub user_sequence: u64,
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
    /// The summary of every turn before `compacted_before` (last boundary).
    pub summary: Option<String>,
    pub compacted_before: u64,
    /// Messages the summary replaced, for the message count.
    pub compacted_messages: u32,
    /// Context accounting: the last provider-reported size, and characters
    /// added after it (estimated at chars/4).
    pub usage_tokens: u64,
    pub chars_after_usage: u64,
    /// Approvals copied into this session: 1 requested, 2 settled.
    pub approvals: BTreeMap<String, u8>,
}

impl SessionState {
    /// The model's history before `turn`: each earlier turn's user message
    /// and what it added.
    pub fn history_before(&self, turn: u64) -> Vec<Message> {
        let summary = self.summary.as_ref().map(|s| Message::User {
            text: crate::context::compact::wrap(s),
        });
        summary
            .into_iter()
            .chain(self.turns.range(..turn).flat_map(|(_, t)| {
                std::iter::once(Message::User {
                    text: t.user.clone(),
                })
                .chain(t.messages.iter().cloned())
            }))
            .collect()
    }

    /// Approvals of this session still waiting for a human.
    pub fn pending_approvals(&self) -> Vec<String> {
        self.approvals
            .iter()
            .filter(|(_, stage)| **stage == 1)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Tokens the model's context holds: the last usage the provider
    /// reported, plus chars/4 of everything after it.
    pub fn context_tokens(&self) -> u64 {
        self.usage_tokens + self.chars_after_usage.div_ceil(4)
    }

    /// (turn, messages including its user message) of the turns before
    /// `limit` still held verbatim.
    pub fn turn_sizes(&self, limit: u64) -> Vec<(u64, usize)> {
        self.turns
            .range(..limit)
            .map(|(n, t)| (*n, 1 + t.messages.len()))
            .collect()
    }

    pub fn message_count(&self) -> u32 {
        self.compacted_messages
            + self
                .turns
                .values()
                .map(|t| 1 + t.messages.len() as u32)
                .sum::<u32>()
    }

    pub fn next_turn(&self) -> u64 {
        self.turns
            .keys()
            .next_back()
            .map_or(1, |t| t + 1)
            .max(self.compacted_before)
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
                self.chars_after_usage += e.text.chars().count() as u64;
                let turn = self.turns.entry(e.turn).or_default();
                turn.user = e.text.clone();
                turn.user_sequence = event.sequence;
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
                let tool_calls: Vec<ToolCall> = e
                    .tool_calls
                    .iter()
                    .map(|c| ToolCall::new(c.id.clone(), c.name.clone(), c.arguments_json.clone()))
                    .collect();
                match e.usage.as_ref().filter(|u| u.input_tokens > 0) {
                    // The request covered everything before; the answer is
                    // counted in output tokens.
                    Some(u) => {
                        self.usage_tokens = u.input_tokens + u.output_tokens;
                        self.chars_after_usage = 0;
                    }
                    None => {
                        self.chars_after_usage += e.text.chars().count() as u64
                            + tool_calls
                                .iter()
                                .map(|c| c.raw_arguments.chars().count() as u64)
                                .sum::<u64>();
                    }
                }
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
                self.chars_after_usage += e.content.chars().count() as u64;
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
            Payload::ApprovalRequested(a) => {
                self.approvals.entry(a.approval_id.clone()).or_insert(1);
            }
            Payload::ApprovalDecided(a) => {
                self.approvals.insert(a.approval_id.clone(), 2);
            }
            Payload::ApprovalCancelled(a) => {
                self.approvals.insert(a.approval_id.clone(), 2);
            }
            Payload::SessionCompacted(e) => {
                // Load from the boundary: what the summary replaced leaves
                // memory (it stays in the log).
                let kept = self.turns.split_off(&e.first_kept_turn);
                let dropped = std::mem::replace(&mut self.turns, kept);
                self.compacted_messages += dropped
                    .values()
                    .map(|t| 1 + t.messages.len() as u32)
                    .sum::<u32>();
                self.summary = Some(e.summary.clone());
                self.compacted_before = e.first_kept_turn;
                self.usage_tokens = 0;
                self.chars_after_usage = self
                    .history_before(u64::MAX)
                    .iter()
                    .map(|m| m.chars() as u64)
                    .sum();
            }
            _ => {}
        }
    }
}

/// Details JSON of a tool result, parsed (Null when empty).
pub fn details(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}
