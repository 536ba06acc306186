//! Anthropic Messages: streaming text, `input_json_delta` tool input,
//! thinking + signature blocks (kept and sent back on the next request),
//! usage. Events are dispatched on the JSON `type` (some recordings carry no
//! `event:` lines); `ping` and unknown types are ignored.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::http::{AuthHeader, Decoder, Endpoint, RetryPolicy, drive};
use super::keys::Keys;
use super::{
    Message, ModelError, ModelEvent, ModelProvider, ModelRequest, ModelStream, StopReason,
    Thinking, ToolCall, Usage,
};

pub const API_VERSION: &str = "2023-06-01";
const DEFAULT_MAX_TOKENS: u32 = 4096;

pub struct AnthropicProvider {
    /// `anthropic`, or the name of a config provider speaking this wire.
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) base_url: String,
    pub(crate) keys: std::sync::Arc<dyn Keys>,
    pub(crate) key_env: String,
    pub(crate) key_required: bool,
    pub(crate) retry: RetryPolicy,
}

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("key_env", &self.key_env)
            .finish()
    }
}

impl ModelProvider for AnthropicProvider {
    fn name(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    fn stream(&self, mut request: ModelRequest) -> ModelStream {
        request.model = self.model.clone();
        let endpoint = Endpoint {
            provider: self.provider.clone(),
            model: self.model.clone(),
            url: format!("{}/v1/messages", self.base_url.trim_end_matches('/')),
            headers: vec![("anthropic-version".into(), API_VERSION.into())],
            keys: std::sync::Arc::clone(&self.keys),
            key_env: self.key_env.clone(),
            key_required: self.key_required,
            auth: AuthHeader::Named("x-api-key"),
        };
        drive(
            endpoint,
            serde_json::to_vec(&request_body(&request)).unwrap_or_default(),
            self.retry,
            AnthropicDecoder::default(),
        )
    }
}

/// The JSON body of a streamed Messages request. Consecutive tool results
/// go into one user message (the API wants alternating roles).
pub fn request_body(req: &ModelRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    for m in req.all_messages() {
        match m {
            Message::User { text } => messages.push(json!({
                "role": "user",
                "content": [{ "type": "text", "text": text }],
            })),
            Message::Assistant {
                text,
                thinking,
                tool_calls,
            } => {
                let mut content: Vec<Value> = thinking
                    .iter()
                    .map(|t| json!({ "type": "thinking", "thinking": t.text, "signature": t.signature }))
                    .collect();
                if !text.is_empty() {
                    content.push(json!({ "type": "text", "text": text }));
                }
                for c in tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    content.push(
                        json!({ "type": "tool_use", "id": c.id, "name": c.name, "input": input }),
                    );
                }
                messages.push(json!({ "role": "assistant", "content": content }));
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": is_error,
                });
                let merged = messages.last_mut().and_then(|last| {
                    let is_results = last["role"] == "user"
                        && last["content"]
                            .as_array()
                            .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result"));
                    is_results.then_some(last)
                });
                match merged.and_then(|last| last["content"].as_array_mut()) {
                    Some(blocks) => blocks.push(block),
                    None => messages.push(json!({ "role": "user", "content": [block] })),
                }
            }
        }
    }
    let mut body = json!({
        "model": req.model,
        "max_tokens": if req.max_tokens == 0 { DEFAULT_MAX_TOKENS } else { req.max_tokens },
        "stream": true,
        "messages": messages,
    });
    if !req.system.is_empty() {
        body["system"] = req.system.clone().into();
    }
    if !req.tools.is_empty() {
        body["tools"] = req
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
    }
    body
}

enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Thinking(Thinking),
    Other,
}

/// Decodes Messages stream events.
#[derive(Default)]
pub struct AnthropicDecoder {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop: Option<StopReason>,
    done: bool,
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "refusal" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

impl AnthropicDecoder {
    fn close_block(&mut self, index: u64) -> Option<ModelEvent> {
        match self.blocks.remove(&index)? {
            Block::ToolUse { id, name, json } => {
                Some(ModelEvent::ToolCall(ToolCall::new(id, name, json)))
            }
            Block::Thinking(t) => Some(ModelEvent::Thinking(t)),
            Block::Text | Block::Other => None,
        }
    }

    fn read_usage(&mut self, u: &Value) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(v) = n("input_tokens") {
            self.usage.input_tokens = v;
        }
        if let Some(v) = n("output_tokens") {
            self.usage.output_tokens = v;
        }
        if let Some(v) = n("cache_read_input_tokens") {
            self.usage.cache_read_tokens = v;
        }
        if let Some(v) = n("cache_creation_input_tokens") {
            self.usage.cache_write_tokens = v;
        }
    }

    /// `content_block_start`: open block `index` (a text block's first
    /// text is a delta already).
    fn start_block(&mut self, ev: &Value, index: u64, out: &mut Vec<ModelEvent>) {
        let block = ev.get("content_block").unwrap_or(&Value::Null);
        let s = |k: &str| {
            block
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let b = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = s("text");
                if !text.is_empty() {
                    out.push(ModelEvent::TextDelta(text));
                }
                Block::Text
            }
            Some("tool_use") => Block::ToolUse {
                id: s("id"),
                name: s("name"),
                json: String::new(),
            },
            Some("thinking") => Block::Thinking(Thinking {
                text: s("thinking"),
                signature: s("signature"),
            }),
            _ => Block::Other,
        };
        self.blocks.insert(index, b);
    }

    /// `content_block_delta`: text and thinking go out as deltas; a tool
    /// call's JSON and a thinking signature grow in their block.
    fn block_delta(&mut self, ev: &Value, index: u64, out: &mut Vec<ModelEvent>) {
        let delta = ev.get("delta").unwrap_or(&Value::Null);
        let s = |k: &str| {
            delta
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match (
            delta.get("type").and_then(Value::as_str),
            self.blocks.get_mut(&index),
        ) {
            (Some("text_delta"), _) => out.push(ModelEvent::TextDelta(s("text"))),
            (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                json.push_str(&s("partial_json"))
            }
            (Some("thinking_delta"), Some(Block::Thinking(t))) => {
                let d = s("thinking");
                t.text.push_str(&d);
                out.push(ModelEvent::ThinkingDelta(d));
            }
            (Some("signature_delta"), Some(Block::Thinking(t))) => {
                t.signature.push_str(&s("signature"))
            }
            _ => {}
        }
    }

    /// `message_stop`: the end of the answer, with its usage and why it
    /// stopped.
    fn stop_message(&mut self, out: &mut Vec<ModelEvent>) {
        self.done = true;
        // Blocks never closed (cut by max_tokens) still surface,
        // a tool call with the JSON it had so far.
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        for i in open {
            out.extend(self.close_block(i));
        }
        out.push(ModelEvent::Usage(self.usage));
        out.push(ModelEvent::Stop(
            self.stop.clone().unwrap_or(StopReason::EndTurn),
        ));
    }
}

impl Decoder for AnthropicDecoder {
    fn event(&mut self, _name: &str, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let ev: Value = serde_json::from_str(data).map_err(|e| ModelError::Stream {
            provider: "anthropic".into(),
            message: format!("undecodable event ({e})"),
        })?;
        let index = ev.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut out = Vec::new();
        match ev.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(u) = ev.pointer("/message/usage") {
                    self.read_usage(u);
                }
            }
            "content_block_start" => self.start_block(&ev, index, &mut out),
            "content_block_delta" => self.block_delta(&ev, index, &mut out),
            "content_block_stop" => out.extend(self.close_block(index)),
            "message_delta" => {
                if let Some(r) = ev.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(stop_reason(r));
                }
                if let Some(u) = ev.get("usage") {
                    self.read_usage(u);
                }
            }
            "message_stop" => self.stop_message(&mut out),
            "error" => {
                let s = |p: &str| {
                    ev.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                return Err(ModelError::Provider {
                    provider: "anthropic".into(),
                    kind: s("/error/type"),
                    message: s("/error/message"),
                });
            }
            _ => {} // ping and event types this adapter does not know
        }
        Ok(out)
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        Err(ModelError::Stream {
            provider: "anthropic".into(),
            message: "the connection closed before message_stop".into(),
        })
    }
}
