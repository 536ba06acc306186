//! Event → text and event → JSON, shared by the CLI and the TUI so both show
//! the same thing. JSON is the canonical protobuf JSON mapping (camelCase
//! field names, like grpcurl) with 64-bit integers as numbers.

use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};

use crate::proto::{Event, FILE_DESCRIPTOR_SET};

/// The descriptor of the protocol's message `full_name`.
pub fn descriptor(full_name: &str) -> Option<prost_reflect::MessageDescriptor> {
    pool()?.get_message_by_name(full_name)
}

/// The protocol's descriptors, decoded once.
fn pool() -> Option<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(FILE_DESCRIPTOR_SET).ok())
        .as_ref()
}

/// Any generated message as canonical protobuf JSON.
pub fn message_json<M: Message>(full_name: &str, msg: &M) -> serde_json::Value {
    let Some(descriptor) = pool().and_then(|p| p.get_message_by_name(full_name)) else {
        return serde_json::Value::Null;
    };
    let Ok(dynamic) = DynamicMessage::decode(descriptor, msg.encode_to_vec().as_slice()) else {
        return serde_json::Value::Null;
    };
    let options = SerializeOptions::new().stringify_64_bit_integers(false);
    dynamic
        .serialize_with_options(serde_json::value::Serializer, &options)
        .unwrap_or(serde_json::Value::Null)
}

/// An event as canonical protobuf JSON.
pub fn event_json(event: &Event) -> serde_json::Value {
    message_json("tinycode.v1.Event", event)
}

/// One line per event: `#SEQ TIME STREAM@VERSION kind {fields}`.
pub fn event_line(event: &Event) -> String {
    let time = event
        .recorded_at
        .as_ref()
        .map(|t| rfc3339(t.seconds, t.nanos))
        .unwrap_or_else(|| "-".into());
    let json = event_json(event);
    let (kind, fields) = payload_of(&json);
    format!(
        "#{} {} {}@{} {}{}",
        event.sequence, time, event.stream_id, event.stream_version, kind, fields
    )
}

/// The payload's field name (snake_case) and a compact rendering of its body.
fn payload_of(json: &serde_json::Value) -> (String, String) {
    const ENVELOPE: [&str; 4] = ["sequence", "streamId", "streamVersion", "recordedAt"];
    let Some(obj) = json.as_object() else {
        return ("unknown".into(), String::new());
    };
    for (key, value) in obj {
        if ENVELOPE.contains(&key.as_str()) {
            continue;
        }
        let body = match value.as_object() {
            Some(fields) if !fields.is_empty() => {
                let parts: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => format!("{k}={s}"),
                        other => format!("{k}={other}"),
                    })
                    .collect();
                format!(" {}", parts.join(" "))
            }
            _ => String::new(),
        };
        return (snake_case(key), body);
    }
    ("unknown".into(), String::new())
}

fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// UTC RFC 3339 with millisecond precision, without a date-time dependency.
pub fn rfc3339(seconds: i64, nanos: i32) -> String {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        nanos.clamp(0, 999_999_999) / 1_000_000
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The argument a tool line shows: the ticket, article, query or skill.
fn main_argument(arguments_json: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments_json).unwrap_or_default();
    ["ticket_id", "article_id", "query", "name", "queue"]
        .iter()
        .find_map(|k| args.get(*k).and_then(|v| v.as_str()))
        .map(|v| v.chars().take(40).collect())
        .unwrap_or_default()
}

/// How a stored session event reads in a transcript (`None`: not shown).
/// Approval requests carry the commands that answer them.
pub fn session_line(payload: &crate::proto::event::Payload) -> Option<String> {
    use crate::proto::event::Payload as P;
    Some(match payload {
        P::UserMessageAdded(m) => format!("› {}", m.text),
        P::AssistantMessageAdded(m) if !m.text.is_empty() => m.text.clone(),
        P::ToolCallFinished(f) => tool_line(f),
        P::TurnCompleted(c) => turn_line(c),
        P::ApprovalRequested(r) => format!(
            "{}\n{}",
            approval_requested_line(r),
            how_to_answer_request(r)
        ),
        P::ApprovalDecided(d) => approval_decided_line(d),
        P::ApprovalCancelled(c) => format!("– {} cancelled: {}", c.approval_id, c.reason),
        P::SessionCompacted(c) => format!(
            "── {} earlier messages summarised (context {} → {} tokens) ──",
            c.summarized_messages, c.tokens_before, c.tokens_after
        ),
        _ => return None,
    })
}

/// `tinycoded is starting: importing the workspace files [#####·····]
/// 12,345 / 50,000 files · 8 s`.
pub fn startup_line(p: &crate::proto::StartupProgress) -> String {
    let count = if p.total > 0 {
        let width = 20;
        let filled = ((p.done.min(p.total) * width) / p.total.max(1)) as usize;
        format!(
            " [{}{}] {} / {} {}",
            "#".repeat(filled),
            "·".repeat(width as usize - filled),
            p.done,
            p.total,
            p.unit
        )
    } else {
        String::new()
    };
    format!(
        "tinycoded is starting: {}{count} · {} s",
        p.stage,
        p.elapsed_ms / 1000
    )
}

/// The commands that answer an approval.
pub fn how_to_answer(id: &str) -> String {
    let tc = crate::hint::program();
    format!(
        "  approve: {tc} approvals approve {id}    deny: {tc} approvals deny {id} --reason \"…\"    details: {tc} approvals show {id}"
    )
}

/// The commands that answer a request: an approval's, or a question's.
pub fn how_to_answer_request(r: &crate::proto::ApprovalRequested) -> String {
    if r.question.is_empty() {
        return how_to_answer(&r.approval_id);
    }
    let tc = crate::hint::program();
    let id = &r.approval_id;
    let example = if r.choices.is_empty() {
        "\"…\"".to_string()
    } else {
        "1".to_string()
    };
    format!(
        "  answer: {tc} approvals answer {id} {example}    decline: {tc} approvals deny {id} --reason \"…\""
    )
}

/// Who did something: `cli (uid 1000, pid 4242)`.
pub fn client_name(c: Option<&crate::proto::ClientRef>) -> String {
    match c {
        Some(c) if c.pid != 0 => format!("{} (uid {}, pid {})", c.name, c.uid, c.pid),
        Some(c) if !c.name.is_empty() => c.name.clone(),
        _ => "someone".into(),
    }
}

/// Who asked: `session S-4` for a session's turn, `caller claude-code`
/// for a direct call (an agent over `tinycode mcp serve`, a script).
pub fn requested_by(r: &crate::proto::ApprovalRequested) -> String {
    if r.session_id.is_empty() && !r.caller.is_empty() {
        format!("caller {}", r.caller)
    } else {
        format!("session {}", r.session_id)
    }
}

/// `⏸ A-3 escalate_ticket T-1003 needs approval: <reason>`; a question:
/// `? A-4 session S-2 asks: Refund 900 €? (1. yes · 2. no)`.
pub fn approval_requested_line(r: &crate::proto::ApprovalRequested) -> String {
    if !r.question.is_empty() {
        let choices = if r.choices.is_empty() {
            String::new()
        } else {
            let offered: Vec<String> = r
                .choices
                .iter()
                .enumerate()
                .map(|(i, c)| format!("{}. {c}", i + 1))
                .collect();
            format!(" ({})", offered.join(" · "))
        };
        return format!(
            "? {} {} asks: {}{choices}",
            r.approval_id,
            requested_by(r),
            r.question
        );
    }
    let call = r.call.clone().unwrap_or_default();
    let arg = main_argument(&call.arguments_json);
    let what = if arg.is_empty() {
        call.name
    } else {
        format!("{} {arg}", call.name)
    };
    let diff = if r.diff.is_empty() {
        String::new()
    } else {
        format!(" (+{} −{})", r.added, r.removed)
    };
    format!(
        "⏸ {} {what}{diff} needs approval: {}",
        r.approval_id, r.reason
    )
}

/// `✓ A-3 allowed by cli (uid 1000, pid 4242)` / `✗ A-3 denied by …: reason`.
pub fn approval_decided_line(d: &crate::proto::ApprovalDecided) -> String {
    use crate::proto::ApprovalDecision as D;
    let by = client_name(d.by.as_ref());
    let reason = if d.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", d.reason)
    };
    if !d.answer.is_empty() {
        return format!("✓ {} answered by {by}: {}", d.approval_id, d.answer);
    }
    match D::try_from(d.decision).unwrap_or_default() {
        D::Deny => format!("✗ {} denied by {by}{reason}", d.approval_id),
        D::AlwaysAllow if d.remembered => {
            let scope = if d.workspace_wide {
                "every session"
            } else {
                "this session"
            };
            format!(
                "✓ {} always allowed ({scope}) by {by}{reason}",
                d.approval_id
            )
        }
        // "Always" asked for a tool a person reviews every time: allowed
        // once, and it says so.
        D::AlwaysAllow => format!(
            "✓ {} allowed once by {by}{reason} — this tool is reviewed every time: \"always\" is not remembered, it will ask again next time",
            d.approval_id
        ),
        _ => format!("✓ {} allowed by {by}{reason}", d.approval_id),
    }
}

/// `● classify_ticket T-1001 → ✓ 退款 · P1 → triaged` (or `✗ <error>`).
pub fn tool_line(f: &crate::proto::ToolCallFinished) -> String {
    let call = f.call.clone().unwrap_or_default();
    let arg = main_argument(&call.arguments_json);
    let head = if arg.is_empty() {
        format!("● {}", call.name)
    } else {
        format!("● {} {arg}", call.name)
    };
    if f.is_error {
        let first = f
            .content
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(120)
            .collect::<String>();
        return format!("{head} → ✗ {first}");
    }
    let details: serde_json::Value = serde_json::from_str(&f.details_json).unwrap_or_default();
    if let Some(line) = agent_line(&call.name, &details) {
        return line;
    }
    let summary = tool_summary(&call.name, &details, &f.content);
    let truncated = if f.full_chars > 0 {
        format!(" (truncated from {} chars)", f.full_chars)
    } else {
        String::new()
    };
    format!("{head} → ✓ {summary}{truncated}")
}

/// What a successful call did, by tool: `退款 · P1 → triaged`, `+1 −1`, the
/// hits of a search; otherwise the first line of its content.
fn tool_summary(name: &str, details: &serde_json::Value, content: &str) -> String {
    let ticket = &details["ticket"];
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    match name {
        "classify_ticket" => format!(
            "{} · {} → {}",
            s(&ticket["category"]),
            s(&ticket["priority"]),
            s(&ticket["status"])
        ),
        "route_ticket" => format!("{} → {}", s(&ticket["queue"]), s(&ticket["status"])),
        "escalate_ticket" => format!(
            "L{} → {}",
            ticket["escalateLevel"].as_u64().unwrap_or(0),
            s(&ticket["status"])
        ),
        "propose_knowledge_edit" => format!(
            "+{} −{}",
            details["added"].as_u64().unwrap_or(0),
            details["removed"].as_u64().unwrap_or(0)
        ),
        // The ticket id is in the head; its subject says which it is.
        "get_ticket" if !s(&ticket["subject"]).is_empty() => {
            format!("{:?}", crate::text::clip(&s(&ticket["subject"]), 60))
        }
        "search_knowledge" | "search_tickets" => {
            let hits: Vec<String> = details["hits"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| h.as_str().map(String::from))
                .collect();
            if hits.is_empty() {
                "no matches".into()
            } else {
                hits.join(", ")
            }
        }
        _ => content
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect(),
    }
}

/// The sub-agent tools' lines: `● spawn_agent → a1 "task"`,
/// `● wait_agent a1 → ✓ 3 steps` (`✗ cancelled after 2 steps`,
/// `… still running`).
fn agent_line(tool: &str, details: &serde_json::Value) -> Option<String> {
    let id = details["agentId"].as_str()?;
    let steps = details["steps"].as_u64().unwrap_or(0);
    let ended = match details["outcome"].as_str() {
        None => "… still running".to_string(),
        Some("completed") => format!("✓ {steps} steps"),
        Some(other) => format!("✗ {other} after {steps} steps"),
    };
    match tool {
        "spawn_agent" => {
            let task: String = details["task"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(60)
                .collect();
            Some(format!("● spawn_agent → {id} {task:?}"))
        }
        "wait_agent" | "close_agent" => Some(format!("● {tool} {id} → {ended}")),
        _ => None,
    }
}

/// `completed`, `max_steps`, … for a stored turn outcome.
pub fn outcome_name(outcome: i32) -> &'static str {
    use crate::proto::TurnOutcome as O;
    match O::try_from(outcome).unwrap_or(O::Unspecified) {
        O::Completed => "completed",
        O::EmptyResponse => "empty_response",
        O::MaxSteps => "max_steps",
        O::Cancelled => "cancelled",
        O::TimedOut => "timed_out",
        O::Failed => "failed",
        O::Interrupted => "interrupted",
        O::Unspecified => "unknown",
    }
}

/// The name of a triage state, as the CLI and the TUI show it.
pub fn triage_state_name(state: i32) -> &'static str {
    use crate::proto::TriageState as S;
    match S::try_from(state).unwrap_or(S::Unspecified) {
        S::Queued => "queued",
        S::Running => "running",
        S::WaitingForApproval => "waiting for approval",
        S::Retrying => "retrying",
        S::Done => "done",
        S::Failed => "failed",
        S::Skipped => "skipped",
        S::Unspecified => "unknown",
    }
}

/// `triage: 3 queued · 2 running · 1 waiting for approval · 20 done` (zero
/// counts left out, except `done`).
pub fn triage_counts(s: &crate::proto::TriageStatus) -> String {
    let counts = [
        (s.queued, "queued"),
        (s.running, "running"),
        (s.waiting_for_approval, "waiting for approval"),
        (s.retrying, "retrying"),
        (s.done, "done"),
        (s.failed, "failed"),
        (s.skipped, "skipped"),
        (s.incomplete, "incomplete (no decision)"),
    ];
    let parts: Vec<String> = counts
        .iter()
        .filter(|(n, name)| *n > 0 || *name == "done")
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
    format!("triage: {}", parts.join(" · "))
}

/// `— turn 1 completed · 7 steps · 6 tool calls · 1234 in / 56 out tokens`.
pub fn turn_line(c: &crate::proto::TurnCompleted) -> String {
    let usage = c.usage.unwrap_or_default();
    let denied = match c.denied {
        0 => String::new(),
        1 => ", 1 action denied".into(),
        n => format!(", {n} actions denied"),
    };
    let mut line = format!(
        "— turn {} {}{denied} · {} steps · {} tool calls · {} in / {} out tokens",
        c.turn,
        outcome_name(c.outcome),
        c.steps,
        c.tool_calls,
        usage.input_tokens,
        usage.output_tokens
    );
    if !c.error.is_empty() {
        line.push_str(&format!(": {}", c.error));
    }
    line
}

pub mod sla;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tool_line_tests;

/// A confidence in words: high from 0.9, medium from 0.6, else low.
pub fn confidence_level(value: f32) -> &'static str {
    if value >= 0.9 {
        "high"
    } else if value >= 0.6 {
        "medium"
    } else {
        "low"
    }
}

/// `category high 0.97, queue low 0.41` (empty: none known).
pub fn confidence(fields: &[crate::proto::FieldConfidence]) -> String {
    fields
        .iter()
        .map(|c| format!("{} {} {:.2}", c.field, confidence_level(c.value), c.value))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A decision held for review, in one line: `suggested 账户 · P2 → 技术支持
/// (category low 0.55, queue high 0.93; below: category)`.
pub fn suggestion(s: &crate::proto::DecisionSuggested) -> String {
    let mut what = Vec::new();
    if !s.category.is_empty() {
        what.push(format!("{} · {}", s.category, s.priority));
    }
    if !s.queue.is_empty() {
        what.push(format!("→ {}", s.queue));
    }
    let mut why = confidence(&s.confidence);
    if !s.below.is_empty() {
        why = format!("{why}; below: {}", s.below.join(", "));
    }
    format!("suggested {} ({why})", what.join(" "))
}
