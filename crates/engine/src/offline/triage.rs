//! A ticket's triage, one tool call per step: load the escalation skill,
//! search and read the knowledge base, classify, ask a worker what the
//! escalation policy requires (L2), escalate, route, summarise.

use serde_json::{Value, json};

use super::learned;
use super::reading::*;
use super::{MARK, State, Step, first_json, list_of, tool};
use crate::domain::taxonomy::categories_in;
use crate::learn::tickets::Field;
use crate::model::ModelRequest;

/// The next step of a ticket's triage.
pub(super) fn triage_step(req: &ModelRequest, s: &State<'_>, id: &str, ticket: &Value) -> Step {
    let found = match research(req, s, ticket) {
        Ok(found) => found,
        Err(step) => return *step,
    };
    let mut d = decide(req, s, ticket, &found);
    if s.first("classify_ticket").is_none() {
        return (
            None,
            Some(tool(
                "classify_ticket",
                json!({
                    "ticket_id": id, "category": d.category, "priority": d.priority, "intent": intent(ticket),
                    "summary": format!("{} [{}]", first_line(&found.text, 80), d.history.note()),
                }),
            )
            .with_confidence(d.history.confidence(&["category", "priority"]))),
        );
    }
    if d.level > 0 && s.first("escalate_ticket").is_none() {
        return escalate(req, s, id, &d, &found);
    }
    if s.first("route_ticket").is_none()
        && let Some(queue) = &d.queue
    {
        let cite = found.article.id.clone().unwrap_or_else(|| "TINY.md".into());
        let reason = match d.history.support("queue") {
            Some(n) => format!(
                "{} 类工单，依据本台历史：同类 {n} 张工单路由到 {queue}",
                d.category
            ),
            None => format!("{} 类工单，依据 {cite}", d.category),
        };
        let args = json!({ "ticket_id": id, "queue": queue, "reason": reason });
        let call = tool("route_ticket", args).with_confidence(d.history.confidence(&["queue"]));
        return (None, Some(call));
    }
    let queue = d.queue.take();
    (
        Some(summary(
            id,
            &d.category,
            &d.priority,
            queue.as_deref(),
            d.level,
            s,
        )),
        None,
    )
}

/// What the triage read before it decides.
struct Found<'a> {
    /// The knowledge searches' results, in order.
    searches: Vec<(&'a str, bool)>,
    /// The top article's id.
    top: Option<String>,
    article: Article,
    /// The ticket's subject and customer messages.
    text: String,
    rules: Vec<EscalationRule>,
}

/// Load the escalation skill, search the knowledge base, read the top
/// article; `Err` is the step that does the next of these.
fn research<'a>(req: &ModelRequest, s: &State<'a>, ticket: &Value) -> Result<Found<'a>, Box<Step>> {
    let escalation_skill = skill_named(&req.system, &["escalation", "升级"]);
    if let (Some(skill), None) = (&escalation_skill, s.first("load_skill")) {
        return Err(Box::new((
            None,
            Some(tool("load_skill", json!({ "name": skill }))),
        )));
    }
    let searches = s.all("search_knowledge");
    let Some((hits_text, _)) = searches.first().copied() else {
        let query = json!({ "query": ticket_query(ticket), "limit": 3 });
        return Err(Box::new((None, Some(tool("search_knowledge", query)))));
    };
    let hits: Vec<Value> = list_of(first_json(hits_text));
    let top = hits
        .first()
        .and_then(|h| h["id"].as_str())
        .map(String::from);
    if let (Some(top), None) = (&top, s.first("read_article")) {
        let read = json!({ "article_id": top });
        return Err(Box::new((None, Some(tool("read_article", read)))));
    }
    Ok(Found {
        article: s
            .first("read_article")
            .map(|(t, _)| parse_article(t))
            .unwrap_or_default(),
        text: ticket_text_of(ticket),
        rules: s
            .first("load_skill")
            .map(|(body, _)| escalation_rules(body))
            .unwrap_or_default(),
        searches,
        top,
    })
}

/// What the triage decides.
struct Decided {
    level: u32,
    /// The escalation rules the ticket hit.
    matched: Vec<String>,
    category: String,
    priority: String,
    queue: Option<String>,
    /// Which field the history decided, for the note.
    history: learned::History,
}

/// Category, priority, escalation level and queue: the desk's history
/// decides what it knows well, TINY.md's rules the rest.
fn decide(req: &ModelRequest, s: &State<'_>, ticket: &Value, found: &Found<'_>) -> Decided {
    let (level, matched) = escalation_level(&found.rules, &found.text);
    let mut history = learned::History::of(ticket, s.learned.clone());
    // Only a category the desk has (what classify_ticket accepts): a
    // label of history outside the taxonomy is reported, not proposed.
    let desk_categories = categories_in(&req.system);
    let category = history
        .pick(
            Field::Category,
            "category",
            Some(category(&req.system, ticket, &found.article)),
            |c| {
                desk_categories.is_empty()
                    || desk_categories
                        .iter()
                        .any(|d| d.name == c || d.aliases.iter().any(|a| a == c))
            },
        )
        .unwrap_or_default();
    let ruled_priority = priority(&req.system, ticket, level);
    let priority = if level >= 2 {
        ruled_priority // a supervisor escalation is P0 whatever the history says
    } else {
        history
            .pick(Field::Priority, "priority", Some(ruled_priority), |p| {
                ["P0", "P1", "P2", "P3"].contains(&p)
            })
            .unwrap_or_default()
    };
    let desk_queues = queues(&req.system);
    let queue = history.pick(
        Field::Queue,
        "queue",
        queue(&desk_queues, &found.article, &category),
        |q| desk_queues.iter().any(|d| d == q),
    );
    Decided {
        level,
        matched,
        category,
        priority,
        queue,
        history,
    }
}

/// Escalate, citing the policy: before a supervisor escalation a worker
/// reads it (as TinyCode's root agent does); else, or when it found
/// nothing, one more search.
fn escalate(req: &ModelRequest, s: &State<'_>, id: &str, d: &Decided, found: &Found<'_>) -> Step {
    let level = d.level;
    let (cite, via) = match policy_from_worker(req, s, level) {
        Worker::Ask(step) => return step,
        Worker::Found { cite, agent } => (cite, format!("（子代理 {agent} 核对）")),
        Worker::Unavailable => {
            let Some((policy_hits, _)) = found.searches.get(1).copied() else {
                let query = json!({ "query": POLICY_QUERY, "limit": 3 });
                return (None, Some(tool("search_knowledge", query)));
            };
            let policy: Vec<Value> = list_of(first_json(policy_hits));
            let cite = policy
                .first()
                .and_then(|h| h["id"].as_str())
                .or(found.top.as_deref())
                .unwrap_or("escalation-rules")
                .to_string();
            (cite, String::new())
        }
    };
    let reason = format!(
        "命中升级规则（{}）→ L{level}；依据 {cite}{via}",
        d.matched.join("、")
    );
    let args = json!({ "ticket_id": id, "level": level, "reason": reason });
    (None, Some(tool("escalate_ticket", args)))
}

/// What the policy search asks for.
pub(super) const POLICY_QUERY: &str = "升级 政策 escalation policy 主管";

/// A worker's task: the policy query, then the question (no digits, so the
/// worker does not take a word for a ticket id).
pub(super) fn policy_task() -> String {
    format!(
        "{POLICY_QUERY}: what does the escalation policy require before a supervisor escalation?"
    )
}

pub(super) enum Worker {
    /// The next call of the exchange with the worker.
    Ask(Step),
    /// The article the worker cited.
    Found { cite: String, agent: String },
    /// No worker here (not offered, not L2, or it found nothing).
    Unavailable,
}

/// Spawn a worker to read the escalation policy, wait for it, and take the
/// article it cites.
pub(super) fn policy_from_worker(req: &ModelRequest, s: &State<'_>, level: u32) -> Worker {
    let offered = |name: &str| req.tools.iter().any(|t| t.name == name);
    if level < 2 || !offered("spawn_agent") || !offered("wait_agent") {
        return Worker::Unavailable;
    }
    let Some((started, failed)) = s.first("spawn_agent") else {
        return Worker::Ask((
            Some(format!(
                "{MARK} Asking a worker what the escalation policy requires."
            )),
            Some(tool("spawn_agent", json!({ "task": policy_task() }))),
        ));
    };
    // "Started worker a1 on: …"
    let agent = started
        .strip_prefix("Started worker ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    if failed || agent.is_empty() {
        return Worker::Unavailable;
    }
    let Some((answer, failed)) = s.first("wait_agent") else {
        return Worker::Ask((
            None,
            Some(tool(
                "wait_agent",
                json!({ "agent_id": agent, "timeout_seconds": 120 }),
            )),
        ));
    };
    // The worker answers `From "<title>" (<id>): …`.
    let cite = answer
        .split_once("From \"")
        .and_then(|(_, rest)| rest.split_once("\" ("))
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(id, _)| id.trim().to_string())
        .filter(|id| !id.is_empty() && !failed && answer.contains(" completed after "));
    match cite {
        Some(cite) => Worker::Found { cite, agent },
        None => Worker::Unavailable,
    }
}

pub(super) fn summary(
    id: &str,
    category: &str,
    priority: &str,
    queue: Option<&str>,
    level: u32,
    s: &State<'_>,
) -> String {
    let mut out = format!("{MARK} {id}: {category} · {priority}");
    if let Some(q) = queue {
        out.push_str(&format!(" → {q}"));
    }
    if level > 0 {
        match s.first("escalate_ticket") {
            Some((_, false)) => out.push_str(&format!("; escalated to L{level}")),
            Some((why, true)) => out.push_str(&format!("; L{level} escalation not done: {why}")),
            None => {}
        }
    }
    let errors: Vec<&str> = s
        .results
        .iter()
        .filter(|r| r.2 && r.0 != "escalate_ticket")
        .map(|r| r.1)
        .collect();
    if !errors.is_empty() {
        out.push_str(&format!(". Problems: {}", errors.join(" | ")));
    }
    out.push('.');
    out
}
