//! Model providers: one [`ModelProvider`] trait streaming text deltas,
//! thinking, tool calls (with parsed JSON arguments), usage and a stop
//! reason; a thin adapter per wire format (OpenAI-compatible chat
//! completions, Anthropic Messages) over shared HTTP/SSE plumbing; and the
//! catalog that turns `provider/model` plus the environment into a provider.
//! Keys are asked of a [`keys::Keys`] on every request and never logged.

#![forbid(unsafe_code)]

pub mod anthropic;
pub mod catalog;
mod http;
pub mod keys;
pub mod mark;
pub mod openai;
pub mod redact;
pub mod spec;
pub mod tokens;

pub use catalog::list_models;
pub use http::{RetryPolicy, client as http_client};

use std::pin::Pin;

use futures::Stream;
use serde_json::Value;

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User {
        text: String,
    },
    Assistant {
        text: String,
        /// Thinking blocks, kept to be sent back to providers that need them.
        thinking: Vec<Thinking>,
        tool_calls: Vec<ToolCall>,
    },
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
    },
}

impl Message {
    /// Characters of what the message carries to a model (for estimates).
    pub fn chars(&self) -> usize {
        match self {
            Self::User { text } => text.chars().count(),
            Self::Assistant {
                text,
                thinking,
                tool_calls,
            } => {
                text.chars().count()
                    + thinking
                        .iter()
                        .map(|t| t.text.chars().count())
                        .sum::<usize>()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.raw_arguments.chars().count())
                        .sum::<usize>()
            }
            Self::ToolResult { content, .. } => content.chars().count(),
        }
    }
}

/// A complete thinking block (Anthropic: text plus its signature).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Thinking {
    pub text: String,
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Parsed arguments (`Null` when they did not parse).
    pub arguments: Value,
    /// The arguments exactly as the model sent them.
    pub raw_arguments: String,
    /// Why the arguments did not parse (truncated or malformed JSON).
    pub parse_error: Option<String>,
    /// How sure the model was of the fields this call decides (field,
    /// calibrated probability), when it says: the offline model does; a
    /// remote provider's call carries none (unknown).
    pub confidence: Vec<(String, f32)>,
}

impl ToolCall {
    pub fn new(id: String, name: String, raw: String) -> Self {
        let text = if raw.trim().is_empty() {
            "{}"
        } else {
            raw.as_str()
        };
        let (arguments, parse_error) = match serde_json::from_str::<Value>(text) {
            Ok(v) => (v, None),
            Err(e) => (Value::Null, Some(e.to_string())),
        };
        Self {
            id,
            name,
            arguments,
            raw_arguments: raw,
            parse_error,
            confidence: Vec::new(),
        }
    }

    /// The call with the model's confidence per field.
    pub fn with_confidence(mut self, confidence: Vec<(String, f32)>) -> Self {
        self.confidence = confidence;
        self
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the parameters.
    pub parameters: Value,
}

/// What a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Purpose {
    /// A step of a turn: answer the conversation, calling tools.
    #[default]
    Turn,
    /// Compaction: summarise the transcript in the one user message.
    Summary,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub purpose: Purpose,
    /// Earlier turns, shared by every step of a turn (not copied per step).
    pub history: std::sync::Arc<[Message]>,
    /// This turn's messages so far, its user message first.
    pub messages: Vec<Message>,
    /// Shared by every step of a turn.
    pub tools: std::sync::Arc<[ToolSpec]>,
    /// 0: the provider's default.
    pub max_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl ModelRequest {
    /// The whole conversation, oldest first.
    pub fn all_messages(&self) -> impl Iterator<Item = &Message> {
        self.history.iter().chain(&self.messages)
    }
}

impl Usage {
    pub fn add(&mut self, u: &Usage) {
        self.input_tokens += u.input_tokens;
        self.output_tokens += u.output_tokens;
        self.cache_read_tokens += u.cache_read_tokens;
        self.cache_write_tokens += u.cache_write_tokens;
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Refusal,
    Other(String),
}

/// What a model stream yields, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ThinkingDelta(String),
    /// A finished thinking block (with its signature, if any).
    Thinking(Thinking),
    ToolCall(ToolCall),
    Usage(Usage),
    Stop(StopReason),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("{provider}: no API key; {advice}")]
    MissingKey { provider: String, advice: String },
    #[error("{provider} rejected the credentials ({status}): {message}; check the key: {advice}")]
    Auth {
        provider: String,
        status: u16,
        message: String,
        advice: String,
    },
    #[error("{provider}: the key could not be read: {message}")]
    Key { provider: String, message: String },
    #[error("{provider} does not know model {model:?} ({status}): {message}")]
    NotFound {
        provider: String,
        model: String,
        status: u16,
        message: String,
    },
    #[error("{provider} answered HTTP {status} after {attempts} attempt(s): {message}")]
    Http {
        provider: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    #[error("cannot reach {provider} at {url}: {message}")]
    Connect {
        provider: String,
        url: String,
        message: String,
    },
    #[error("{provider} reported an error ({kind}): {message}")]
    Provider {
        provider: String,
        kind: String,
        message: String,
    },
    #[error("{provider} stream broke: {message}")]
    Stream { provider: String, message: String },
    #[error(
        "unknown model {0:?}: use offline, openai/<model>, anthropic/<model>, ollama/<model>, vllm/<model>, openrouter/<model> or <name>/<model> for a provider named in config `providers`"
    )]
    UnknownModel(String),
}

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// A model behind some wire format. `stream` never blocks: the request is
/// made when the stream is first polled; errors arrive as stream items.
/// Dropping the stream cancels the request.
pub trait ModelProvider: Send + Sync + std::fmt::Debug {
    /// `provider/model`, as shown to users (never contains a key).
    fn name(&self) -> String;
    fn stream(&self, request: ModelRequest) -> ModelStream;
}

#[cfg(test)]
mod tests;
