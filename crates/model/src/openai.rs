//! OpenAI-compatible chat completions (OpenAI, Ollama, vLLM, OpenRouter):
//! streaming SSE, `tool_calls` deltas accumulated by index,
//! `stream_options.include_usage`, `[DONE]`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::http::{AuthHeader, Decoder, Endpoint, RetryPolicy, drive};
use super::keys::Keys;
use super::{
    Message, ModelError, ModelEvent, ModelProvider, ModelRequest, ModelStream, StopReason,
    ToolCall, Usage,
};

/// A chat-completions endpoint. `base_url` ends before `/chat/completions`.
pub struct OpenAiProvider {
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) base_url: String,
    pub(crate) keys: std::sync::Arc<dyn Keys>,
    pub(crate) key_env: String,
    pub(crate) key_required: bool,
    pub(crate) retry: RetryPolicy,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("key_env", &self.key_env)
            .finish()
    }
}

impl ModelProvider for OpenAiProvider {
    fn name(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    fn stream(&self, mut request: ModelRequest) -> ModelStream {
        request.model = self.model.clone();
        let endpoint = Endpoint {
            provider: self.provider.clone(),
            model: self.model.clone(),
            url: format!("{}/chat/completions", self.base_url.trim_end_matches('/')),
            headers: Vec::new(),
            keys: std::sync::Arc::clone(&self.keys),
            key_env: self.key_env.clone(),
            key_required: self.key_required,
            auth: AuthHeader::Bearer,
        };
        drive(
            endpoint,
            request_body(&request),
            self.retry,
            OpenAiDecoder::new(&self.provider),
        )
    }
}

/// The JSON body of a streamed chat-completions request, serialised
/// straight from the request (no intermediate JSON tree: long histories
/// are the common case).
pub fn request_body(req: &ModelRequest) -> Vec<u8> {
    let system = (!req.system.is_empty()).then(|| Msg::System {
        content: &req.system,
    });
    let messages = system
        .into_iter()
        .chain(req.all_messages().map(|m| {
            match m {
                Message::User { text } => Msg::User { content: text },
                Message::Assistant {
                    text, tool_calls, ..
                } => Msg::Assistant {
                    content: (!text.is_empty()).then_some(text.as_str()),
                    tool_calls: tool_calls
                        .iter()
                        .map(|c| CallJson {
                            id: &c.id,
                            kind: "function",
                            function: FunctionJson {
                                name: &c.name,
                                arguments: &c.raw_arguments,
                            },
                        })
                        .collect(),
                },
                Message::ToolResult {
                    call_id, content, ..
                } => Msg::Tool {
                    tool_call_id: call_id,
                    content,
                },
            }
        }))
        .collect();
    let body = Body {
        model: &req.model,
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        messages,
        tools: req
            .tools
            .iter()
            .map(|t| ToolJson {
                kind: "function",
                function: ToolFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect(),
        max_tokens: (req.max_tokens > 0).then_some(req.max_tokens),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    stream: bool,
    stream_options: StreamOptions,
    messages: Vec<Msg<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolJson<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Msg<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<CallJson<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct CallJson<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionJson<'a>,
}

#[derive(Serialize)]
struct FunctionJson<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ToolJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes `chat.completion.chunk` events.
pub struct OpenAiDecoder {
    provider: String,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<StopReason>,
    refused: bool,
    done: bool,
    flushed: bool,
}

impl OpenAiDecoder {
    pub fn new(provider: &str) -> Self {
        Self {
            provider: provider.to_string(),
            calls: BTreeMap::new(),
            finish: None,
            refused: false,
            done: false,
            flushed: false,
        }
    }

    /// Tool calls and the stop reason, once, at the end.
    fn flush(&mut self) -> Vec<ModelEvent> {
        if self.flushed {
            return Vec::new();
        }
        self.flushed = true;
        let mut out: Vec<ModelEvent> = std::mem::take(&mut self.calls)
            .into_values()
            .map(|c| ModelEvent::ToolCall(ToolCall::new(c.id, c.name, c.arguments)))
            .collect();
        let stop = match self.finish.clone() {
            _ if self.refused => StopReason::Refusal,
            Some(reason) => reason,
            None => StopReason::EndTurn,
        };
        out.push(ModelEvent::Stop(stop));
        out
    }

    /// The `error` a chunk carries instead of choices.
    fn provider_error(&self, err: &Value) -> ModelError {
        ModelError::Provider {
            provider: self.provider.clone(),
            kind: err
                .get("type")
                .or_else(|| err.get("code"))
                .map(|v| v.to_string().trim_matches('"').to_string())
                .unwrap_or_else(|| "error".into()),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_string(),
        }
    }

    /// One choice of a chunk: its reasoning, text and refusal go out as
    /// deltas; its tool-call parts and finish reason are kept for the end.
    fn read_choice(&mut self, choice: &Value, out: &mut Vec<ModelEvent>) {
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        for key in ["reasoning_content", "reasoning"] {
            if let Some(t) = delta
                .get(key)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                out.push(ModelEvent::ThinkingDelta(t.to_string()));
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(ModelEvent::TextDelta(t.to_string()));
        }
        // A refusal arrives as its own text; show it and say so.
        if let Some(t) = delta
            .get("refusal")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.refused = true;
            out.push(ModelEvent::TextDelta(t.to_string()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.add_call_part(call);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(stop_reason(reason));
        }
    }

    /// A part of a streamed tool call: its id, or more of its name and
    /// arguments.
    fn add_call_part(&mut self, call: &Value) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let partial = self.calls.entry(index).or_default();
        if let Some(id) = call.get("id").and_then(Value::as_str) {
            partial.id = id.to_string();
        }
        if let Some(f) = call.get("function") {
            if let Some(n) = f.get("name").and_then(Value::as_str) {
                partial.name.push_str(n);
            }
            if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                partial.arguments.push_str(a);
            }
        }
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        "content_filter" => StopReason::Refusal,
        other => StopReason::Other(other.to_string()),
    }
}

impl Decoder for OpenAiDecoder {
    fn event(&mut self, _name: &str, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            self.done = true;
            return Ok(self.flush());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| ModelError::Stream {
            provider: self.provider.clone(),
            message: format!("undecodable chunk ({e})"),
        })?;
        if let Some(err) = chunk.get("error") {
            return Err(self.provider_error(err));
        }
        let mut out = Vec::new();
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.read_choice(choice, &mut out);
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            out.push(ModelEvent::Usage(Usage {
                input_tokens: n("/prompt_tokens"),
                output_tokens: n("/completion_tokens"),
                cache_read_tokens: n("/prompt_tokens_details/cached_tokens"),
                cache_write_tokens: 0,
            }));
        }
        Ok(out)
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done || self.finish.is_some() {
            // Some servers omit `[DONE]` after a finish reason.
            return Ok(self.flush());
        }
        Err(ModelError::Stream {
            provider: self.provider.clone(),
            message:
                "the connection closed before the response finished (no finish_reason, no [DONE])"
                    .into(),
        })
    }
}
