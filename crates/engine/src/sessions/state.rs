//! A session's state, folded from `session-<id>` events, in two parts:
//!
//! - [`SessionState`]: the summary the sessions projection stores (title,
//!   model, turns with their outcomes and sizes, context accounting) — small
//!   whatever the session's length;
//! - [`History`]: the messages themselves, read from the session's stream
//!   (from the compaction boundary on) when a turn or a compaction needs
//!   them, and dropped after.
//!
//! [`entry`] is the one place an event becomes a history message; both parts
//! use it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    Event, SessionCompacted, SessionCreated, SubAgentFinished, SubAgentSpawned, TurnOutcome,
};

use crate::model::{Message, Thinking, ToolCall};

/// What the summary keeps of one turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnBrief {
    /// Sequence of the turn's user message.
    pub user_sequence: u64,
    /// Stream version of the turn's user message.
    pub user_version: u64,
    pub started: bool,
    #[serde(with = "outcome_code")]
    pub outcome: Option<TurnOutcome>,
    /// Messages the turn added (its user message not counted).
    pub messages: u32,
    /// Characters of the user message and every message the turn added.
    pub chars: u64,
    /// The daemon running the turn (sent through, then started by; empty
    /// in logs written before daemons shared a log).
    #[serde(default)]
    pub runner: String,
    /// Model steps the turn stored (its assistant messages).
    #[serde(default)]
    pub steps: u32,
    /// Tool calls the turn finished (their results stored).
    #[serde(default)]
    pub tool_calls: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionState {
    pub id: String,
    pub title: String,
    pub model: String,
    pub approve: crate::permissions::ApprovalMode,
    pub created_sequence: u64,
    pub last_sequence: u64,
    pub turns: BTreeMap<u64, TurnBrief>,
    pub deleted: bool,
    pub forked_from: String,
    /// The summary of every turn before `compacted_before` (last boundary).
    pub summary: Option<String>,
    pub compacted_before: u64,
    /// Stream version from which the history after the boundary is read.
    pub history_from: u64,
    /// Messages the summary replaced, for the message count.
    pub compacted_messages: u32,
    /// Context accounting: the last provider-reported size, and characters
    /// added after it (estimated at chars/4).
    pub usage_tokens: u64,
    pub chars_after_usage: u64,
    /// Approvals copied into this session: 1 requested, 2 settled.
    pub approvals: BTreeMap<String, u8>,
    /// When its last event was recorded (Unix seconds).
    #[serde(default)]
    pub last_at: i64,
    /// A worker's link to the call that spawned it (`None`: a root session).
    #[serde(default)]
    pub parent: Option<ParentRef>,
    /// The workers this session spawned, by agent id (`a1`, …).
    #[serde(default)]
    pub agents: BTreeMap<String, AgentBrief>,
    /// Stream version of its last event (appends that must not race go
    /// at this version).
    #[serde(default)]
    pub last_version: u64,
}

/// Where a worker session came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    pub session_id: String,
    pub turn: u64,
    pub call_id: String,
    pub agent_id: String,
}

/// One worker as its parent's state keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentBrief {
    /// Spawn order (1, 2, …).
    pub number: u32,
    pub session_id: String,
    pub task: String,
    pub turn: u64,
    pub call_id: String,
    /// How it ended; `None` while it runs.
    pub end: Option<AgentEnd>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEnd {
    /// A `TurnOutcome` number.
    pub outcome: i32,
    pub steps: u32,
    pub tool_calls: u32,
    pub text: String,
    pub error: String,
}

/// What one event adds to a session's history.
pub enum Entry {
    /// The user's text and the turn's own time limit (seconds, 0: none).
    User(String, u32),
    Message(Message),
}

/// The history entry an event carries, with its turn.
/// What the model reads for a user message: a command message (`/name
/// args`) becomes the skill's body in a `<skill>` block, then the args.
fn model_text(e: &tinycode_shared::proto::UserMessageAdded) -> String {
    if e.skill.is_empty() {
        return e.text.clone();
    }
    let args = crate::skills::split_command(&e.text).map_or("", |(_, args)| args);
    format!(
        "<skill name=\"{}\">\n{}\n</skill>\n\n{}",
        e.skill,
        e.skill_body.trim_end(),
        if args.is_empty() {
            "Follow the skill above."
        } else {
            args
        }
    )
}

pub fn entry(payload: &Payload) -> Option<(u64, Entry)> {
    match payload {
        Payload::UserMessageAdded(e) => {
            Some((e.turn, Entry::User(model_text(e), e.timeout_seconds)))
        }
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
                .map(|c| {
                    let confidence = c.confidence.iter().map(|f| (f.field.clone(), f.value));
                    ToolCall::new(c.id.clone(), c.name.clone(), c.arguments_json.clone())
                        .with_confidence(confidence.collect())
                })
                .collect();
            Some((
                e.turn,
                Entry::Message(Message::Assistant {
                    text: e.text.clone(),
                    thinking,
                    tool_calls,
                }),
            ))
        }
        Payload::ToolCallFinished(e) => {
            let call = e.call.clone().unwrap_or_default();
            Some((
                e.turn,
                Entry::Message(Message::ToolResult {
                    call_id: call.id,
                    name: call.name,
                    content: e.content.clone(),
                    is_error: e.is_error,
                }),
            ))
        }
        _ => None,
    }
}

/// One turn's messages.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnMessages {
    pub user: String,
    /// The time limit the message asked for (else the daemon's).
    pub timeout: Option<std::time::Duration>,
    /// Assistant messages and tool results of this turn, in order.
    pub messages: Vec<Message>,
}

/// A session's history after its compaction boundary, read from its stream.
/// The turns are shared with the session's recall (`recall.rs`), which
/// extends them in place when no turn still holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub summary: Option<String>,
    pub turns: Arc<BTreeMap<u64, TurnMessages>>,
}

impl History {
    /// Fold `events` (the stream from `state.history_from` on), keeping the
    /// turns the summary did not replace.
    pub fn of(state: &SessionState, events: &[Event]) -> Self {
        let mut turns = BTreeMap::new();
        Self::fold(&mut turns, state.compacted_before, events);
        Self {
            summary: state.summary.clone(),
            turns: Arc::new(turns),
        }
    }

    /// Add `events` (the next ones of the stream) to `turns`, leaving out
    /// the turns before `compacted_before`.
    pub(crate) fn fold(
        turns: &mut BTreeMap<u64, TurnMessages>,
        compacted_before: u64,
        events: &[Event],
    ) {
        for (turn, entry) in events.iter().filter_map(|e| entry(e.payload.as_ref()?)) {
            if turn < compacted_before {
                continue;
            }
            let record = turns.entry(turn).or_default();
            match entry {
                Entry::User(text, seconds) => {
                    record.user = text;
                    record.timeout =
                        (seconds > 0).then(|| std::time::Duration::from_secs(u64::from(seconds)));
                }
                Entry::Message(m) => record.messages.push(m),
            }
        }
    }

    /// The model's history before `turn`: the summary, then each earlier
    /// turn's user message and what it added.
    pub fn before(&self, turn: u64) -> Vec<Message> {
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

    /// One turn's messages (empty when it has none).
    pub fn turn(&self, turn: u64) -> TurnMessages {
        self.turns.get(&turn).cloned().unwrap_or_default()
    }
}

impl SessionState {
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
            .map(|(n, t)| (*n, 1 + t.messages as usize))
            .collect()
    }

    pub fn message_count(&self) -> u32 {
        self.compacted_messages + self.turns.values().map(|t| 1 + t.messages).sum::<u32>()
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

    /// The newest turn whose user message came after `sequence`.
    pub fn last_turn_after(&self, sequence: u64) -> Option<(u64, Option<TurnOutcome>)> {
        self.turns
            .iter()
            .rev()
            .find(|(_, t)| t.user_sequence > sequence)
            .map(|(n, t)| (*n, t.outcome))
    }

    /// The one fold of a session's events.
    pub fn apply(&mut self, event: &Event) {
        self.last_sequence = event.sequence;
        self.last_version = event.stream_version;
        if let Some(at) = event.recorded_at {
            self.last_at = at.seconds;
        }
        let Some(payload) = &event.payload else {
            return;
        };
        if let Some((turn, entry)) = entry(payload) {
            self.add(turn, entry, event);
        }
        match payload {
            Payload::SessionCreated(e) => self.created(e, event),
            Payload::SubAgentSpawned(e) => self.agent_spawned(e),
            Payload::SubAgentFinished(e) => self.agent_finished(e),
            Payload::SessionRenamed(e) => self.title = e.title.clone(),
            Payload::SessionModelChanged(e) => self.model = e.model.clone(),
            Payload::SessionDeleted(_) => self.deleted = true,
            Payload::TurnStarted(e) => {
                let t = self.turns.entry(e.turn).or_default();
                t.started = true;
                t.runner = e.daemon_id.clone();
            }
            Payload::UserMessageAdded(e) => {
                self.turns.entry(e.turn).or_default().runner = e.daemon_id.clone();
            }
            Payload::AssistantMessageAdded(e) => {
                // The request covered everything before; the answer is
                // counted in output tokens.
                if let Some(u) = e.usage.as_ref().filter(|u| u.input_tokens > 0) {
                    self.usage_tokens = u.input_tokens + u.output_tokens;
                    self.chars_after_usage = 0;
                }
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
            Payload::SessionCompacted(e) => self.compacted(e, event),
            _ => {}
        }
    }

    /// `SessionCreated`: the session's identity and settings.
    fn created(&mut self, e: &SessionCreated, event: &Event) {
        self.id = event.stream_id.trim_start_matches("session-").to_string();
        self.title = e.title.clone();
        self.model = e.model.clone();
        self.approve = crate::permissions::ApprovalMode::of_stored(&e.approve);
        self.created_sequence = event.sequence;
        self.forked_from = e.forked_from.clone();
        self.history_from = 1;
        self.parent = e.parent.as_ref().map(|p| ParentRef {
            session_id: p.session_id.clone(),
            turn: p.turn,
            call_id: p.call_id.clone(),
            agent_id: p.agent_id.clone(),
        });
    }

    /// `SubAgentSpawned`: a worker joins (once, whatever the repeats).
    fn agent_spawned(&mut self, e: &SubAgentSpawned) {
        let number = self.agents.len() as u32 + 1;
        self.agents
            .entry(e.agent_id.clone())
            .or_insert_with(|| AgentBrief {
                number,
                session_id: e.session_id.clone(),
                task: e.task.clone(),
                turn: e.turn,
                call_id: e.call_id.clone(),
                end: None,
            });
    }

    /// `SubAgentFinished`: how a worker ended.
    fn agent_finished(&mut self, e: &SubAgentFinished) {
        // The first finish counts (one recorded again after a crash
        // changes nothing).
        if let Some(agent) = self
            .agents
            .get_mut(&e.agent_id)
            .filter(|a| a.end.is_none() && a.session_id == e.session_id)
        {
            agent.end = Some(AgentEnd {
                outcome: e.outcome,
                steps: e.steps,
                tool_calls: e.tool_calls,
                text: e.summary.clone(),
                error: e.error.clone(),
            });
        }
    }

    /// `SessionCompacted`: what the summary replaced leaves the summary (it
    /// stays in the log); the history is read from the first kept turn.
    fn compacted(&mut self, e: &SessionCompacted, event: &Event) {
        let kept = self.turns.split_off(&e.first_kept_turn);
        let dropped = std::mem::replace(&mut self.turns, kept);
        self.compacted_messages += dropped.values().map(|t| 1 + t.messages).sum::<u32>();
        self.history_from = self
            .turns
            .values()
            .map(|t| t.user_version)
            .filter(|v| *v > 0)
            .min()
            .unwrap_or(event.stream_version + 1);
        let wrapped = crate::context::compact::wrap(&e.summary).chars().count() as u64;
        self.summary = Some(e.summary.clone());
        self.compacted_before = e.first_kept_turn;
        self.usage_tokens = 0;
        self.chars_after_usage = wrapped + self.turns.values().map(|t| t.chars).sum::<u64>();
    }

    /// Account for one history entry.
    fn add(&mut self, turn: u64, entry: Entry, event: &Event) {
        let brief = self.turns.entry(turn).or_default();
        match entry {
            Entry::User(text, _) => {
                let chars = text.chars().count() as u64;
                brief.user_sequence = event.sequence;
                brief.user_version = event.stream_version;
                brief.chars += chars;
                self.chars_after_usage += chars;
            }
            Entry::Message(m) => {
                brief.messages += 1;
                match &m {
                    Message::Assistant { .. } => brief.steps += 1,
                    Message::ToolResult { .. } => brief.tool_calls += 1,
                    Message::User { .. } => {}
                }
                brief.chars += m.chars() as u64;
                self.chars_after_usage += match &m {
                    Message::Assistant {
                        text, tool_calls, ..
                    } => {
                        text.chars().count() as u64
                            + tool_calls
                                .iter()
                                .map(|c| c.raw_arguments.chars().count() as u64)
                                .sum::<u64>()
                    }
                    Message::ToolResult { content, .. } => content.chars().count() as u64,
                    Message::User { text } => text.chars().count() as u64,
                };
            }
        }
    }
}

/// `Option<TurnOutcome>` stored as its protobuf number.
mod outcome_code {
    use serde::{Deserialize, Deserializer, Serializer};
    use tinycode_shared::proto::TurnOutcome;

    pub fn serialize<S: Serializer>(v: &Option<TurnOutcome>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(o) => s.serialize_some(&(*o as i32)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TurnOutcome>, D::Error> {
        Ok(Option::<i32>::deserialize(d)?
            .map(|n| TurnOutcome::try_from(n).unwrap_or(TurnOutcome::Unspecified)))
    }
}

/// Details JSON of a tool result, parsed (Null when empty).
pub fn details(json: &str) -> Value {
    serde_json::from_str(json).unwrap_or(Value::Null)
}
