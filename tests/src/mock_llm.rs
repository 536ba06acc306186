//! A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for
//! end-to-end tests of the real provider path: each request gets the next
//! scripted reply, streamed as the real wire format (SSE chunks, tool-call
//! deltas by index, a usage chunk, `[DONE]`), optionally slowly.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One scripted model reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Tool calls: (name, arguments).
    Tools(Vec<(String, Value)>),
    /// Final text, sent in word-sized chunks.
    Text(String),
    /// An HTTP error status (the provider retries 5xx).
    Status(u16),
    /// 401 with the request's credentials echoed in the error message (as
    /// some proxies do): the key must never be stored or printed.
    EchoCredentials,
    /// Never answer (until the client goes away).
    Hang,
    /// This reply, after a pause (other requests are served meanwhile).
    Delayed(Duration, Box<Reply>),
}

/// Computes the reply to a request from its parsed body.
pub type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

pub fn tool(name: &str, args: Value) -> Reply {
    Reply::Tools(vec![(name.to_string(), args)])
}

pub fn text(t: &str) -> Reply {
    Reply::Text(t.to_string())
}

#[derive(Clone)]
struct Script {
    responder: Option<Responder>,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Bytes>>>,
    chunk_delay: Duration,
    keys: Keys,
}

/// The `Authorization` header of every request, and the keys accepted
/// (`None`: any, as a local server).
#[derive(Clone, Default)]
struct Keys {
    seen: Arc<Mutex<Vec<String>>>,
    accepted: Arc<Mutex<Option<Vec<String>>>>,
}

/// The running mock; stops with the test process.
pub struct MockLlm {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Bytes>>>,
    keys: Keys,
}

impl MockLlm {
    /// Serve `replies` in order; `chunk_delay` between streamed chunks.
    pub fn start(replies: Vec<Reply>, chunk_delay: Duration) -> Self {
        Self::serve(None, replies, chunk_delay)
    }

    /// Answer each request with what `responder` computes from it (for
    /// many concurrent sessions, where a fixed order cannot work).
    pub fn respond(responder: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(Some(Arc::new(responder)), Vec::new(), Duration::ZERO)
    }

    /// As [`MockLlm::respond`], each reply streamed with `chunk_delay`
    /// between its chunks.
    pub fn respond_slowly(
        responder: impl Fn(&Value) -> Reply + Send + Sync + 'static,
        chunk_delay: Duration,
    ) -> Self {
        Self::serve(Some(Arc::new(responder)), Vec::new(), chunk_delay)
    }

    fn serve(responder: Option<Responder>, replies: Vec<Reply>, chunk_delay: Duration) -> Self {
        let script = Script {
            responder,
            replies: Arc::new(Mutex::new(replies.into())),
            requests: Arc::new(Mutex::new(Vec::new())),
            chunk_delay,
            keys: Keys::default(),
        };
        let requests = Arc::clone(&script.requests);
        let keys = script.keys.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                let _ = tx.send(listener.local_addr().expect("addr"));
                let app = Router::new()
                    .route("/v1/chat/completions", post(handle))
                    .route("/v1/models", axum::routing::get(models))
                    .with_state(script);
                let _ = axum::serve(listener, app).await;
            });
        });
        let addr = rx.recv().expect("mock address");
        Self {
            base_url: format!("http://{addr}/v1"),
            requests,
            keys,
        }
    }

    /// From now on only these bearer keys are accepted; any other request
    /// is answered 401, as a provider does.
    pub fn accept_keys(&self, keys: &[&str]) {
        let keys = keys.iter().map(|k| k.to_string()).collect();
        *self.keys.accepted.lock().expect("lock") = Some(keys);
    }

    /// The `Authorization` header of every request so far (`-`: none).
    pub fn authorizations(&self) -> Vec<String> {
        self.keys.seen.lock().expect("lock").clone()
    }

    /// Every request body received so far.
    /// Byte sizes of the request bodies received so far.
    pub fn request_sizes(&self) -> Vec<usize> {
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .map(Bytes::len)
            .collect()
    }

    pub fn requests(&self) -> Vec<Value> {
        // Parsed on demand: the server only keeps the bytes, so a benchmark
        // does not time the mock parsing ever-longer histories.
        self.requests
            .lock()
            .expect("lock")
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap_or(Value::Null))
            .collect()
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({ "id": "mock", "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] });
    format!("data: {body}\n\n")
}

fn frames(reply: &Reply) -> Vec<String> {
    let mut out = Vec::new();
    match reply {
        Reply::Text(t) => {
            out.push(chunk(json!({ "role": "assistant", "content": "" }), None));
            for word in t.split_inclusive(' ') {
                out.push(chunk(json!({ "content": word }), None));
            }
            out.push(chunk(json!({}), Some("stop")));
        }
        Reply::Tools(calls) => {
            for (i, (name, args)) in calls.iter().enumerate() {
                let id = format!("call_{i}_{name}");
                out.push(chunk(json!({ "tool_calls": [{ "index": i, "id": id, "type": "function", "function": { "name": name, "arguments": "" } }] }), None));
                let args = args.to_string();
                let middle = args
                    .char_indices()
                    .map(|(i, _)| i)
                    .find(|i| *i >= args.len() / 2)
                    .unwrap_or(0);
                let (a, b) = args.split_at(middle);
                for part in [a, b] {
                    out.push(chunk(json!({ "tool_calls": [{ "index": i, "function": { "arguments": part } }] }), None));
                }
            }
            out.push(chunk(json!({}), Some("tool_calls")));
        }
        Reply::Status(_) | Reply::Hang | Reply::EchoCredentials | Reply::Delayed(..) => {}
    }
    out.push(format!("data: {}\n\n", json!({ "id": "mock", "choices": [], "usage": { "prompt_tokens": 100, "completion_tokens": 10 } })));
    out.push("data: [DONE]\n\n".into());
    out
}

async fn handle(
    State(script): State<Script>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = check_key(&script.keys, &headers) {
        return refused;
    }
    let reply = match &script.responder {
        Some(responder) => responder(&serde_json::from_slice(&body).unwrap_or(Value::Null)),
        None => script
            .replies
            .lock()
            .expect("lock")
            .pop_front()
            .unwrap_or_else(|| Reply::Text("(the script is over)".into())),
    };
    script.requests.lock().expect("lock").push(body);
    let reply = match reply {
        Reply::Delayed(pause, reply) => {
            tokio::time::sleep(pause).await;
            *reply
        }
        other => other,
    };
    if let Reply::Hang = reply {
        futures::future::pending::<()>().await;
    }
    if let Reply::EchoCredentials = reply {
        let sent = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let body = json!({ "error": { "message": format!("invalid credentials; request had Authorization: {sent}") } });
        return (StatusCode::UNAUTHORIZED, body.to_string()).into_response();
    }
    if let Reply::Status(code) = reply {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (status, r#"{"error":{"message":"scripted failure"}}"#).into_response();
    }
    let delay = script.chunk_delay;
    let frames = frames(&reply);
    let stream = futures::stream::unfold(frames.into_iter(), move |mut it| async move {
        let next = it.next()?;
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(next)), it))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().expect("header"));
    response
}

/// Record the request's key; a 401 when it is not one of those accepted.
fn check_key(keys: &Keys, headers: &axum::http::HeaderMap) -> Option<Response> {
    let sent = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    keys.seen.lock().expect("lock").push(sent.clone());
    let accepted = keys.accepted.lock().expect("lock").clone()?;
    let key = sent.strip_prefix("Bearer ").unwrap_or_default();
    if accepted.iter().any(|k| k == key) {
        return None;
    }
    let body = json!({ "error": { "message": "Incorrect API key provided" } });
    Some((StatusCode::UNAUTHORIZED, body.to_string()).into_response())
}

/// `GET /v1/models`: two models, behind the same key check.
async fn models(State(script): State<Script>, headers: axum::http::HeaderMap) -> Response {
    if let Some(refused) = check_key(&script.keys, &headers) {
        return refused;
    }
    let body = json!({ "object": "list", "data": [{ "id": "gpt-test" }, { "id": "gpt-other" }] });
    (StatusCode::OK, body.to_string()).into_response()
}
