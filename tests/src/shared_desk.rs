//! Several daemons on one PostgreSQL log, for the scale-out tests and
//! benchmark: a latency-bound mock model that routes, a member daemon of
//! the shared desk, and ticket files to drop.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Desk;
use crate::mock_llm::{MockLlm, Reply, text, tool};
use crate::pg::Schema;

/// The reply of a mock that routes whatever ticket its session triages:
/// `route_ticket` first, then a final text.
pub fn route_reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last_user = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(0);
    let prompt = messages[last_user]["content"].to_string();
    let ticket = prompt
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("T-"))
        .unwrap_or("T-0")
        .to_string();
    if messages[last_user..].iter().any(|m| m["role"] == "tool") {
        text(&format!("{ticket} routed."))
    } else {
        tool(
            "route_ticket",
            json!({"ticket_id": ticket, "queue": "物流组", "reason": "parcel"}),
        )
    }
}

/// A mock that routes whatever ticket its session triages, after `delay`
/// per request (the work is latency-bound, as with a real model).
pub fn router(delay: Duration) -> MockLlm {
    MockLlm::respond(move |request| Reply::Delayed(delay, Box::new(route_reply(request))))
}

/// A daemon of the shared desk: its own workspace copy and state, the
/// shared log, auto-triage on.
pub fn member(schema: &Schema, mock: &MockLlm, concurrency: u32) -> Desk {
    member_at(&schema.url(), mock, concurrency)
}

/// A daemon of the shared desk whose log is at `url`.
pub fn member_at(url: &str, mock: &MockLlm, concurrency: u32) -> Desk {
    let desk = Desk::fixture()
        .with_env("TINYCODE_STORE_URL", url)
        .with_env("TINYCODE_LEASE_SECONDS", "3")
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    desk.edit_config(|c| {
        c["autoTriage"] =
            json!({"enabled": true, "concurrency": concurrency, "pollIntervalMs": 100});
    });
    desk
}

pub fn ticket_file(id: &str) -> String {
    json!({
        "id": id, "subject": "parcel late", "customer": "Dropped Customer", "channel": "email",
        "createdAt": "2026-11-30T08:00:00Z", "slaMinutes": 480, "status": "open",
        "messages": [{"from": "customer", "text": "快递 物流 一直 没有 更新", "at": "2026-11-30T08:00:00Z"}]
    })
    .to_string()
}
