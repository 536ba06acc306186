//! Redaction by value (issue 29): a provider that echoes the API key inside
//! an HTTP-200 stream's error event, on the OpenAI and the Anthropic wire,
//! with a key of no known shape — the key is found nowhere in the state
//! dir, the logs, the events or the workspace files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use serde_json::json;
use tinycode_tests::{Desk, wait_until};

/// A key shaped like nothing a pattern would catch.
const KEY: &str = "Zq8PlainLookingValue0123456789xyz";

/// A provider that answers 200 with a stream whose only event is an error
/// that quotes the credentials it was sent.
fn echoing_provider() -> String {
    async fn openai(headers: HeaderMap, _body: Bytes) -> Response {
        let sent = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        // The bare key, without the `Bearer ` a pattern would catch.
        let key = sent.trim_start_matches("Bearer ").to_string();
        let event = json!({"error": {"message": format!("upstream refused the request made with key={key}"), "type": "server_error"}});
        stream(format!("data: {event}\n\n"))
    }
    async fn anthropic(headers: HeaderMap, _body: Bytes) -> Response {
        let sent = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let event = json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("key {sent} is over its quota")}});
        stream(format!("event: error\ndata: {event}\n\n"))
    }
    fn stream(body: String) -> Response {
        let mut r = Response::new(Body::from(body));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            let app = Router::new()
                .route("/v1/chat/completions", post(openai))
                .route("/v1/messages", post(anthropic));
            let _ = axum::serve(listener, app).await;
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

/// Every file under `dir` that holds `needle` (binary files included).
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn a_key_echoed_in_a_stream_error_is_stored_nowhere_on_either_wire() {
    let base = echoing_provider();
    for (model, env_base, env_key, base_url) in [
        (
            "openai/gpt-test",
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            format!("{base}/v1"),
        ),
        (
            "anthropic/claude-test",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY",
            base.clone(),
        ),
    ] {
        let desk = Desk::fixture()
            .with_env(env_base, &base_url)
            .with_env(env_key, KEY)
            .with_env("TINYCODE_MODEL", model);
        desk.edit_config(|c| {
            c["autoTriage"] = json!({"enabled": true, "maxAttempts": 1, "pollIntervalMs": 100});
        });
        // A turn of its own, and the triage worker giving up with a note.
        let out = desk.run(&["run", "--approve", "deny", "hello"]);
        assert_ne!(out.code, 0, "{model}: {out:?}");
        assert!(
            !out.stdout.contains(KEY) && !out.stderr.contains(KEY),
            "{model}: {out:?}"
        );
        assert!(
            out.stdout.contains("[redacted]") || out.stderr.contains("[redacted]"),
            "{model}: the error is shown, redacted: {out:?}"
        );
        let gave_up = wait_until(Duration::from_secs(60), || {
            desk.ok(&["--json", "triage", "status"])
                .contains("\"failed\": 3")
        });
        assert!(gave_up, "{model}: {}", desk.ok(&["triage", "status"]));
        let note = desk.ok(&["ticket", "show", "T-1001"]);
        assert!(note.contains("Auto-triage gave up"), "{model}: {note}");
        let events = desk.ok(&["--json", "events"]);
        assert!(!events.contains(KEY), "{model}: the key is in the events");
        assert!(
            events.contains("[redacted]"),
            "{model}: the error was stored, redacted"
        );
        desk.mirror_settled();
        desk.stop();
        let leaks = files_holding(&desk.workspace(), KEY.as_bytes());
        assert!(leaks.is_empty(), "{model}: the key is stored in {leaks:?}");
        let leaks = files_holding(&desk.state_dir(), KEY.as_bytes());
        assert!(leaks.is_empty(), "{model}: the key is stored in {leaks:?}");
    }
}
