//! Provider adapters against a local HTTP server (axum) replaying the real
//! recorded streams in ../shared/fixtures/llm-streams. No network.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};

use super::catalog::{ModelChoice, resolve};
use super::*;

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/llm-streams")
            .join(rel),
    )
    .unwrap()
}

const OPENAI_TEXT: &str =
    "openai/83b060bae42eb41c4f1edbb7c1542b954b37d9dfd1910b964ddebc9677e6ae85.bin";
/// A refusal: its text arrives in `delta.refusal`.
const OPENAI_REFUSAL: &str =
    "openai/173417d553406f034f643e5db3f8d591fb691ebac56f5ae39a22cc7d455c5353.bin";
const OPENAI_TOOL: &str =
    "openai/2018feb66ae13fcf5333d61b95849decc68d3f63bd38172889367e1afb1e04f7.bin";
const OPENAI_PARALLEL: &str =
    "openai/f82268f2fefd5cfbc7eeb59c297688be2f6ca0849a6e4f17851b517310841d9b.bin";
const OPENAI_LENGTH: &str =
    "openai/4cc50a6135d254573a502310e6af1246f55edb6ad95fa24059f160996b68866d.bin";

/// One canned reply: status, body, extra headers.
type Reply = (u16, String, Vec<(&'static str, String)>);

#[derive(Clone, Default)]
struct Mock {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

async fn handle(State(mock): State<Mock>, headers: HeaderMap, body: Bytes) -> Response {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    mock.requests.lock().unwrap().push((headers, json));
    let (status, body, extra) = {
        let mut replies = mock.replies.lock().unwrap();
        if replies.len() > 1 {
            replies.pop_front().unwrap()
        } else {
            replies.front().cloned().unwrap()
        }
    };
    let mut response = (StatusCode::from_u16(status).unwrap(), body).into_response();
    let content_type = if status == 200 {
        "text/event-stream"
    } else {
        "application/json"
    };
    response
        .headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    for (k, v) in extra {
        response.headers_mut().insert(k, v.parse().unwrap());
    }
    response
}

/// Serve `replies` in order (the last one repeats); returns the base URL.
async fn serve(replies: Vec<Reply>) -> (String, Mock) {
    let mock = Mock {
        replies: Arc::new(Mutex::new(replies.into())),
        ..Mock::default()
    };
    let app = Router::new()
        .route("/{*path}", post(handle))
        .with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), mock)
}

fn ok(body: String) -> Reply {
    (200, body, vec![])
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

fn provider(kind: &str, base: &str) -> Arc<dyn ModelProvider> {
    let base = base.to_string();
    let env = move |k: &str| match k {
        "OPENAI_BASE_URL" => Some(format!("{base}/v1")),
        "ANTHROPIC_BASE_URL" => Some(base.clone()),
        "OPENAI_API_KEY" => Some("sk-test-secret".into()),
        "ANTHROPIC_API_KEY" => Some("ant-test-secret".into()),
        _ => None,
    };
    match resolve(kind, &[], &env, fast_retry()).unwrap() {
        ModelChoice::Remote(p) => p,
        ModelChoice::Offline => panic!("expected a remote provider"),
    }
}

async fn collect(
    p: &Arc<dyn ModelProvider>,
    req: ModelRequest,
) -> Result<Vec<ModelEvent>, ModelError> {
    let mut stream = p.stream(req);
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item?);
    }
    Ok(out)
}

fn text(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn calls(events: &[ModelEvent]) -> Vec<&ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn stop(events: &[ModelEvent]) -> Option<&StopReason> {
    events.iter().rev().find_map(|e| match e {
        ModelEvent::Stop(s) => Some(s),
        _ => None,
    })
}

fn usage(events: &[ModelEvent]) -> Option<Usage> {
    events.iter().find_map(|e| match e {
        ModelEvent::Usage(u) => Some(*u),
        _ => None,
    })
}

fn request() -> ModelRequest {
    ModelRequest {
        system: "You triage tickets.".into(),
        messages: vec![Message::User { text: "hi".into() }],
        tools: std::sync::Arc::from(vec![ToolSpec {
            name: "get_ticket".into(),
            description: "Read a ticket".into(),
            parameters: json!({"type": "object"}),
        }]),
        ..ModelRequest::default()
    }
}

#[tokio::test]
async fn openai_text_and_refusal_streams() {
    let (base, mock) = serve(vec![ok(fixture(OPENAI_REFUSAL))]).await;
    let p = provider("openai/gpt-4o", &base);
    let events = collect(&p, request()).await.unwrap();
    assert!(text(&events).starts_with("I'm"), "{}", text(&events));
    assert_eq!(stop(&events), Some(&StopReason::Refusal));
    let u = usage(&events).expect("usage chunk");
    let (base2, _) = serve(vec![ok(fixture(OPENAI_TEXT))]).await;
    let plain = collect(&provider("openai/gpt-4o", &base2), request())
        .await
        .unwrap();
    assert!(!text(&plain).is_empty());
    assert_eq!(stop(&plain), Some(&StopReason::EndTurn));
    assert!(u.input_tokens > 0 && u.output_tokens > 0, "{u:?}");
    // The request: streaming with usage, system first, tools, bearer key.
    let (headers, body) = mock.requests.lock().unwrap()[0].clone();
    assert_eq!(headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["tools"][0]["function"]["name"], "get_ticket");
}

#[tokio::test]
async fn openai_single_and_parallel_tool_calls_parse_their_arguments() {
    let (base, _) = serve(vec![ok(fixture(OPENAI_TOOL))]).await;
    let events = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap();
    let c = calls(&events);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].name, "get_weather");
    assert!(c[0].id.starts_with("call_"));
    assert!(
        c[0].arguments.is_object() && c[0].parse_error.is_none(),
        "{:?}",
        c[0]
    );
    assert_eq!(stop(&events), Some(&StopReason::ToolUse));

    let (base, _) = serve(vec![ok(fixture(OPENAI_PARALLEL))]).await;
    let events = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap();
    let c = calls(&events);
    assert_eq!(c.len(), 2, "{c:#?}");
    assert_ne!(c[0].id, c[1].id);
    assert!(c.iter().all(|c| c.arguments.is_object()));
}

#[tokio::test]
async fn openai_length_stop_and_unknown_chunks() {
    let body = format!(
        "data: {{\"id\":\"x\",\"object\":\"brand.new.thing\",\"choices\":[]}}\n\n{}",
        fixture(OPENAI_LENGTH)
    );
    let (base, _) = serve(vec![ok(body)]).await;
    let events = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap();
    assert_eq!(stop(&events), Some(&StopReason::MaxTokens));
}

#[tokio::test]
async fn a_stream_cut_midway_is_an_error_not_a_silent_end() {
    let full = fixture(OPENAI_TOOL);
    let cut: String = full.split("\n\n").take(4).collect::<Vec<_>>().join("\n\n") + "\n\n";
    let (base, _) = serve(vec![ok(cut)]).await;
    let err = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Stream { .. }), "{err}");
    assert!(err.to_string().contains("closed before"), "{err}");

    let full = fixture("anthropic/tool_use_response.txt");
    let cut = &full[..full.len() / 2];
    let (base, _) = serve(vec![ok(cut.to_string())]).await;
    let err = collect(&provider("anthropic/claude-sonnet-4", &base), request())
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::Stream { .. }), "{err}");
}

#[tokio::test]
async fn retries_on_500_and_429_then_succeeds() {
    let (base, mock) = serve(vec![
        (500, r#"{"error":{"message":"boom"}}"#.into(), vec![]),
        (
            429,
            r#"{"error":{"message":"slow down"}}"#.into(),
            vec![("retry-after", "0".into())],
        ),
        ok(fixture(OPENAI_TEXT)),
    ])
    .await;
    let events = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap();
    assert_eq!(stop(&events), Some(&StopReason::EndTurn));
    assert_eq!(mock.requests.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn persistent_overload_gives_up_with_the_status() {
    let (base, mock) = serve(vec![(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        vec![],
    )])
    .await;
    let err = collect(&provider("anthropic/claude-sonnet-4", &base), request())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::Http {
                status: 529,
                attempts: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("Overloaded"), "{err}");
    assert_eq!(mock.requests.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn auth_and_unknown_model_errors_are_clear_and_not_retried() {
    let (base, mock) = serve(vec![(
        401,
        r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
        vec![],
    )])
    .await;
    let err = collect(&provider("openai/gpt-4o", &base), request())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::Auth { status: 401, .. }), "{msg}");
    assert!(
        msg.contains("OPENAI_API_KEY")
            && msg.contains("tinycode auth set openai")
            && msg.contains("Incorrect API key"),
        "{msg}"
    );
    assert!(!msg.contains("sk-test-secret"), "never the key itself");
    assert_eq!(mock.requests.lock().unwrap().len(), 1);

    let (base, _) = serve(vec![(
        404,
        r#"{"error":{"message":"model not found"}}"#.into(),
        vec![],
    )])
    .await;
    let err = collect(&provider("openai/gpt-9", &base), request())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("does not know model \"gpt-9\""),
        "{err}"
    );
}

#[tokio::test]
async fn anthropic_text_and_tool_use() {
    let (base, mock) = serve(vec![ok(fixture("anthropic/tool_use_response.txt"))]).await;
    let p = provider("anthropic/claude-sonnet-4", &base);
    let events = collect(&p, request()).await.unwrap();
    assert!(text(&events).contains("Paris"), "{}", text(&events));
    let c = calls(&events);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].name, "get_weather");
    assert_eq!(c[0].arguments["location"], "Paris");
    assert_eq!(stop(&events), Some(&StopReason::ToolUse));
    assert!(usage(&events).unwrap().input_tokens > 0);
    let (headers, body) = mock.requests.lock().unwrap()[0].clone();
    assert_eq!(headers["x-api-key"], "ant-test-secret");
    assert_eq!(headers["anthropic-version"], super::anthropic::API_VERSION);
    assert_eq!(body["system"], "You triage tickets.");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert!(body["max_tokens"].as_u64().unwrap() > 0);

    let (base, _) = serve(vec![ok(fixture("anthropic/basic_response.txt"))]).await;
    let events = collect(&provider("anthropic/claude-sonnet-4", &base), request())
        .await
        .unwrap();
    assert!(!text(&events).is_empty());
    assert_eq!(stop(&events), Some(&StopReason::EndTurn));
}

#[tokio::test]
async fn anthropic_thinking_is_streamed_and_kept_with_its_signature() {
    let (base, _) = serve(vec![ok(fixture("anthropic/stream-a-refusal.sse"))]).await;
    let events = collect(&provider("anthropic/claude-opus-4", &base), request())
        .await
        .unwrap();
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ThinkingDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let block = events
        .iter()
        .find_map(|e| match e {
            ModelEvent::Thinking(t) => Some(t.clone()),
            _ => None,
        })
        .expect("thinking block");
    assert!(!deltas.is_empty());
    assert_eq!(block.text, deltas, "the block is the streamed thinking");
    assert!(!block.signature.is_empty(), "signature kept");
    assert_eq!(stop(&events), Some(&StopReason::Refusal));

    // Sent back on the next request, before the text.
    let next = ModelRequest {
        messages: vec![
            Message::User { text: "q".into() },
            Message::Assistant {
                text: "a".into(),
                thinking: vec![block.clone()],
                tool_calls: vec![],
            },
            Message::User { text: "q2".into() },
        ],
        ..ModelRequest::default()
    };
    let body = super::anthropic::request_body(&next);
    assert_eq!(body["messages"][1]["content"][0]["type"], "thinking");
    assert_eq!(
        body["messages"][1]["content"][0]["signature"],
        block.signature
    );
}

#[tokio::test]
async fn anthropic_truncated_tool_json_surfaces_as_a_parse_error() {
    let (base, _) = serve(vec![ok(fixture(
        "anthropic/incomplete_partial_json_response.txt",
    ))])
    .await;
    let events = collect(&provider("anthropic/claude-3-7-sonnet", &base), request())
        .await
        .unwrap();
    let c = calls(&events);
    assert_eq!(c.len(), 1);
    assert!(
        c[0].parse_error.is_some() && c[0].arguments.is_null(),
        "{:?}",
        c[0]
    );
    assert!(c[0].raw_arguments.starts_with("{\"filename\""));
    assert_eq!(stop(&events), Some(&StopReason::MaxTokens));
}

#[tokio::test]
async fn anthropic_error_events_and_unknown_types() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: surprise\ndata: {\"type\":\"brand_new_event\",\"x\":1}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (base, _) = serve(vec![ok(body.into())]).await;
    let err = collect(&provider("anthropic/claude-sonnet-4", &base), request())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ModelError::Provider {
            provider: "anthropic".into(),
            kind: "overloaded_error".into(),
            message: "Overloaded".into()
        }
    );
}

#[test]
fn tool_results_merge_into_one_user_turn_for_anthropic() {
    let call = |id: &str| {
        ToolCall::new(
            id.into(),
            "get_ticket".into(),
            r#"{"ticket_id":"T-1"}"#.into(),
        )
    };
    let req = ModelRequest {
        messages: vec![
            Message::User { text: "go".into() },
            Message::Assistant {
                text: String::new(),
                thinking: vec![],
                tool_calls: vec![call("a"), call("b")],
            },
            Message::ToolResult {
                call_id: "a".into(),
                name: "get_ticket".into(),
                content: "A".into(),
                is_error: false,
            },
            Message::ToolResult {
                call_id: "b".into(),
                name: "get_ticket".into(),
                content: "B".into(),
                is_error: true,
            },
        ],
        ..ModelRequest::default()
    };
    let body = super::anthropic::request_body(&req);
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["content"][0]["input"]["ticket_id"], "T-1");
    assert_eq!(msgs[2]["content"].as_array().unwrap().len(), 2);
    assert_eq!(msgs[2]["content"][1]["is_error"], true);
    let openai: serde_json::Value =
        serde_json::from_slice(&super::openai::request_body(&req)).unwrap();
    assert_eq!(openai["messages"][1]["tool_calls"][1]["id"], "b");
    assert_eq!(openai["messages"][3]["role"], "tool");
}

#[test]
fn config_providers_set_base_urls_and_key_variables() {
    use super::catalog::{ProviderSpec, Wire};
    let providers = [
        ProviderSpec {
            name: "local".into(),
            wire: Wire::OpenAi,
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: None,
            key_helper: None,
        },
        ProviderSpec {
            name: "corp".into(),
            wire: Wire::Anthropic,
            base_url: Some("http://127.0.0.1:9".into()),
            api_key_env: Some("CORP_KEY".into()),
            key_helper: None,
        },
        ProviderSpec {
            name: "openai".into(),
            wire: Wire::OpenAi,
            base_url: Some("http://proxy.internal/v1".into()),
            api_key_env: Some("PROXY_KEY".into()),
            key_helper: None,
        },
    ];
    let none = |_: &str| None;
    let local = resolve("local/qwen", &providers, &none, fast_retry())
        .ok()
        .unwrap();
    assert_eq!(local.name(), "local/qwen");
    let ModelChoice::Remote(p) = local else {
        panic!()
    };
    assert!(format!("{p:?}").contains("http://127.0.0.1:9/v1"));
    // A key variable named in config is required, and named in the error.
    let err = resolve("corp/claude", &providers, &none, fast_retry())
        .err()
        .unwrap();
    assert!(err.to_string().contains("CORP_KEY"), "{err}");
    let corp_key = |k: &str| (k == "CORP_KEY").then(|| "k".to_string());
    let corp = resolve("corp/claude", &providers, &corp_key, fast_retry())
        .ok()
        .unwrap();
    assert_eq!(corp.name(), "corp/claude");
    // Overriding a built-in: the config's base URL and key variable win.
    let openai_key = |k: &str| (k == "OPENAI_API_KEY").then(|| "k".to_string());
    let err = resolve("openai/gpt-4o", &providers, &openai_key, fast_retry())
        .err()
        .unwrap();
    assert!(err.to_string().contains("PROXY_KEY"), "{err}");
    let proxy_key = |k: &str| (k == "PROXY_KEY").then(|| "k".to_string());
    let ModelChoice::Remote(p) = resolve("openai/gpt-4o", &providers, &proxy_key, fast_retry())
        .ok()
        .unwrap()
    else {
        panic!()
    };
    assert!(format!("{p:?}").contains("http://proxy.internal/v1"));
}

#[test]
fn the_catalog_resolves_references_and_names_the_missing_key() {
    let none = |_: &str| None;
    assert!(matches!(
        resolve("offline", &[], &none, fast_retry()),
        Ok(ModelChoice::Offline)
    ));
    assert!(matches!(
        resolve("", &[], &none, fast_retry()),
        Ok(ModelChoice::Offline)
    ));
    let err = resolve("openai/gpt-4o", &[], &none, fast_retry())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "openai: no API key; set it with `tinycode auth set openai` or OPENAI_API_KEY in the daemon's environment"
    );
    assert!(resolve("anthropic/claude", &[], &none, fast_retry()).is_err());
    // Local servers need no key; the model name may contain slashes.
    let ollama = resolve("ollama/qwen2.5:7b", &[], &none, fast_retry())
        .ok()
        .unwrap();
    assert_eq!(ollama.name(), "ollama/qwen2.5:7b");
    let key = |k: &str| (k == "OPENROUTER_API_KEY").then(|| "or-secret".to_string());
    let or = resolve("openrouter/anthropic/claude-3.5", &[], &key, fast_retry())
        .ok()
        .unwrap();
    assert_eq!(or.name(), "openrouter/anthropic/claude-3.5");
    let ModelChoice::Remote(p) = or else { panic!() };
    let debug = format!("{p:?}");
    assert!(
        debug.contains("OPENROUTER_API_KEY") && !debug.contains("or-secret"),
        "{debug}"
    );
    assert!(matches!(
        resolve("gemini/x", &[], &none, fast_retry()),
        Err(ModelError::UnknownModel(_))
    ));
    assert!(matches!(
        resolve("openai", &[], &none, fast_retry()),
        Err(ModelError::UnknownModel(_))
    ));
}

/// A key that changes while the provider lives, as `tinycode auth set` does.
struct Rotating(Mutex<Option<String>>, Mutex<Vec<bool>>);

impl super::keys::Keys for Rotating {
    fn key<'a>(&'a self, _provider: &'a str, _env: &'a str) -> super::keys::KeyFuture<'a> {
        let key = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(key) })
    }
    fn configured(&self, _provider: &str, _env: &str) -> bool {
        true
    }
    fn outcome(&self, _provider: &str, result: Result<(), &str>) {
        self.1.lock().unwrap().push(result.is_ok());
    }
}

#[tokio::test]
async fn every_request_asks_for_the_key_so_a_rotated_key_is_used_at_once() {
    let (base, mock) = serve(vec![ok(fixture(OPENAI_TEXT))]).await;
    let keys = Arc::new(Rotating(
        Mutex::new(Some("sk-first".into())),
        Mutex::default(),
    ));
    let env = |k: &str| (k == "OPENAI_BASE_URL").then(|| format!("{base}/v1"));
    let ModelChoice::Remote(p) =
        super::catalog::resolve_with("openai/gpt-4o", &[], &env, keys.clone(), fast_retry())
            .unwrap()
    else {
        panic!()
    };
    collect(&p, request()).await.unwrap();
    *keys.0.lock().unwrap() = Some("sk-second".into());
    collect(&p, request()).await.unwrap();
    let seen: Vec<String> = mock
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(h, _)| h["authorization"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, ["Bearer sk-first", "Bearer sk-second"]);
    assert_eq!(*keys.1.lock().unwrap(), [true, true]);
    // A key removed while the provider lives: the next request is refused
    // before it is sent, naming how to set one.
    *keys.0.lock().unwrap() = None;
    let err = collect(&p, request()).await.unwrap_err();
    assert!(matches!(err, ModelError::MissingKey { .. }), "{err}");
    assert!(
        err.to_string().contains("tinycode auth set openai"),
        "{err}"
    );
    assert_eq!(mock.requests.lock().unwrap().len(), 2);
}
