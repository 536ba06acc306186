//! The embedded offline model: a deterministic triage policy that drives
//! the same tools an LLM would, so tinycode works with no key and no
//! network. It reads only what a model reads — the system prompt (business
//! rules, queues, skills) and the tool results — and derives category,
//! priority, escalation and queue from the workspace's data: the categories
//! and SLA rule of TINY.md, the escalation skill's keywords and amounts, the
//! owners of the policy articles. It never looks at ticket ids.
//!
//! Ticket flow, one tool call per step: get_ticket → load_skill (the
//! escalation skill, when listed) → search_knowledge → read_article →
//! classify_ticket → [search_knowledge for the escalation policy →
//! escalate_ticket] → route_ticket → summary. A message without a ticket id
//! is a free question: search_knowledge → read_article → an answer.

use serde_json::{Value, json};

use crate::clock::parse_rfc3339;
use crate::domain::taxonomy::{Category, categories_in};
use crate::learn::tickets::{Field, Learned, TicketLearner};
use crate::model::tokens;
use crate::model::{
    Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, Purpose, StopReason, ToolCall,
    Usage,
};

mod learned;
mod summary;

/// Everything the offline model says starts with this.
pub const MARK: &str = "[offline model]";

/// The offline model, with the desk's learner when it has one (the
/// daemon hands it over at start; without one the rules decide).
#[derive(Default)]
pub struct OfflineModel {
    learner: Option<std::sync::Arc<TicketLearner>>,
}

impl std::fmt::Debug for OfflineModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfflineModel")
            .field("learner", &self.learner.is_some())
            .finish()
    }
}

impl OfflineModel {
    pub fn new(learner: Option<std::sync::Arc<TicketLearner>>) -> Self {
        Self { learner }
    }
}

impl ModelProvider for OfflineModel {
    fn name(&self) -> String {
        "offline".into()
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let learned = self.learner.as_ref().map(|l| l.current());
        let events = respond(&request, learned);
        Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
    }
}

/// Concepts the escalation rules may name, with words that express them.
/// Used only for keywords the workspace's own rules contain.
const LEXICON: &[(&str, &[&str])] = &[
    (
        "支付安全",
        &[
            "风控",
            "冻结",
            "盗刷",
            "盗号",
            "扣款",
            "结算",
            "unauthorized",
            "fraud",
            "hacked",
            "did not place",
            "stolen",
        ],
    ),
    (
        "数据泄露",
        &["泄露", "泄漏", "data leak", "leaked", "breach"],
    ),
    (
        "法律",
        &[
            "律师",
            "律师函",
            "诉讼",
            "起诉",
            "lawyer",
            "lawsuit",
            "legal",
            "court",
        ],
    ),
    (
        "媒体",
        &[
            "记者",
            "曝光",
            "舆情",
            "journalist",
            "reporter",
            "press",
            "publish",
        ],
    ),
    ("VIP", &["vip"]),
    (
        "企业客户",
        &["企业客户", "企业账户", "enterprise", "company account"],
    ),
];

/// What the conversation since the last user message holds.
struct State<'a> {
    user: &'a str,
    results: Vec<(&'a str, &'a str, bool)>, // (tool, content, is_error)
    step: usize,
    /// What the desk's history says now (`None`: the rules decide).
    learned: Option<std::sync::Arc<Learned>>,
}

impl<'a> State<'a> {
    fn of(messages: &'a [Message]) -> Self {
        let start = messages
            .iter()
            .rposition(|m| matches!(m, Message::User { .. }))
            .unwrap_or(0);
        let user = match messages.get(start) {
            // A skill invoked as a command: its steps are this model's own;
            // what the person asked follows the block.
            Some(Message::User { text }) => match text.split_once("\n</skill>\n\n") {
                Some((block, asked)) if block.starts_with("<skill name=") => asked,
                _ => text.as_str(),
            },
            _ => "",
        };
        let results = messages[start..]
            .iter()
            .filter_map(|m| match m {
                Message::ToolResult {
                    name,
                    content,
                    is_error,
                    ..
                } => Some((name.as_str(), content.as_str(), *is_error)),
                _ => None,
            })
            .collect();
        let step = messages[start..]
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        Self {
            user,
            results,
            step,
            learned: None,
        }
    }

    fn all(&self, tool: &str) -> Vec<(&'a str, bool)> {
        self.results
            .iter()
            .filter(|r| r.0 == tool)
            .map(|r| (r.1, r.2))
            .collect()
    }

    fn first(&self, tool: &str) -> Option<(&'a str, bool)> {
        self.all(tool).into_iter().next()
    }
}

fn respond(req: &ModelRequest, learned: Option<std::sync::Arc<Learned>>) -> Vec<ModelEvent> {
    let state = State {
        learned,
        ..State::of(&req.messages)
    };
    let (text, call) = if req.purpose == Purpose::Summary {
        (Some(summary::of_transcript(state.user)), None)
    } else {
        resolve_step(req, &state)
    };
    let mut events = Vec::new();
    let output_chars = text.as_ref().map(|t| t.len()).unwrap_or(0)
        + call.as_ref().map(|c| c.raw_arguments.len()).unwrap_or(0);
    if let Some(text) = text {
        events.push(ModelEvent::TextDelta(text));
    }
    let stop = if let Some(mut call) = call {
        call.id = format!("offline-{}-{}", state.step + 1, call.name);
        events.push(ModelEvent::ToolCall(call));
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    events.push(ModelEvent::Usage(Usage {
        input_tokens: tokens::estimate_request(&req.system, req.all_messages()),
        output_tokens: tokens::of_chars(output_chars as u64),
        ..Usage::default()
    }));
    events.push(ModelEvent::Stop(stop));
    events
}

fn tool(name: &str, args: Value) -> ToolCall {
    ToolCall::new(String::new(), name.into(), args.to_string())
}

/// The JSON value a tool result starts with (a shortened result may be
/// followed by a note on where the full text is); `Null` when none.
fn first_json(text: &str) -> Value {
    let value = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    without_marks(value)
}

/// Strings of a shortened result without their `…[+N chars]` marks.
fn without_marks(value: Value) -> Value {
    match value {
        Value::String(s) => Value::String(crate::model::mark::unshortened(&s).to_string()),
        Value::Array(items) => Value::Array(items.into_iter().map(without_marks).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, without_marks(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The entries of a JSON list, dropping a shortened list's `"… N more"`.
fn list_of(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items.into_iter().filter(|v| !v.is_string()).collect(),
        _ => Vec::new(),
    }
}

/// Ticket ids tried per message before the model gives up on finding one.
const MAX_ID_TRIES: usize = 3;

/// Words that say the message asks for a ticket's triage.
const TRIAGE_WORDS: [&str; 5] = ["triage", "ticket", "工单", "分流", "分诊"];

/// What might be a ticket id in the user's message, most likely first:
/// runs of ASCII letters, digits, `-`, `_` and `.` holding a digit (`T-1001`,
/// `ZD-4411`, `12345`, `INC0012345`, `t-9`), the one after "ticket" or
/// "工单" first, each also in upper case when that differs. The desk says
/// which is one: the model asks `get_ticket`.
fn id_candidates(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let part_of_id = c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        match (part_of_id, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let token = text[s..i].trim_end_matches(['.', '-', '_']);
                let valid = token.chars().any(|c| c.is_ascii_digit())
                    && token.len() <= 64
                    && !token.starts_with(['.', '-'])
                    && !token.contains("..");
                if valid {
                    found.push((s, token.to_string()));
                }
                start = None;
            }
            _ => {}
        }
    }
    // After a triage word: first.
    let named = |at: usize| {
        let before = lower[..at].trim_end_matches([' ', ':', '#', '：']);
        TRIAGE_WORDS.iter().any(|w| before.ends_with(w))
    };
    found.sort_by_key(|(at, _)| !named(*at));
    let mut out: Vec<String> = Vec::new();
    for (_, token) in found {
        for id in [token.clone(), token.to_uppercase()] {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    out
}

/// Find the ticket the message means (asking the desk), then triage it;
/// a message naming no ticket is a question.
fn resolve_step(req: &ModelRequest, s: &State<'_>) -> Step {
    let tried = s.all("get_ticket");
    let candidates = id_candidates(s.user);
    if let Some(found) = tried.iter().position(|(_, failed)| !failed) {
        let ticket: Value = first_json(tried[found].0);
        // The id asked for, whatever survived of the result.
        let id = match ticket["id"].as_str() {
            Some(id) if !id.is_empty() => id.to_string(),
            _ => candidates.get(found).cloned().unwrap_or_default(),
        };
        return triage_step(req, s, &id, &ticket);
    }
    if let Some(next) = candidates
        .get(tried.len())
        .filter(|_| tried.len() < MAX_ID_TRIES)
    {
        return (
            Some(format!("{MARK} Looking up ticket {next}.")),
            Some(tool("get_ticket", json!({ "ticket_id": next }))),
        );
    }
    let lower = s.user.to_lowercase();
    if !tried.is_empty() && TRIAGE_WORDS.iter().any(|w| lower.contains(w)) {
        let names = candidates
            .iter()
            .take(MAX_ID_TRIES)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        return (
            Some(format!(
                "{MARK} I found no ticket named {names} on this desk; nothing was changed. Check the id with `tinycode ticket list`."
            )),
            None,
        );
    }
    question_step(s)
}

type Step = (Option<String>, Option<ToolCall>);

fn triage_step(req: &ModelRequest, s: &State<'_>, id: &str, ticket: &Value) -> Step {
    let escalation_skill = skill_named(&req.system, &["escalation", "升级"]);
    if let (Some(skill), None) = (&escalation_skill, s.first("load_skill")) {
        return (None, Some(tool("load_skill", json!({ "name": skill }))));
    }
    let searches = s.all("search_knowledge");
    let Some((hits_text, _)) = searches.first().copied() else {
        return (
            None,
            Some(tool(
                "search_knowledge",
                json!({ "query": ticket_query(ticket), "limit": 3 }),
            )),
        );
    };
    let hits: Vec<Value> = list_of(first_json(hits_text));
    let top = hits
        .first()
        .and_then(|h| h["id"].as_str())
        .map(String::from);
    if let (Some(top), None) = (&top, s.first("read_article")) {
        return (
            None,
            Some(tool("read_article", json!({ "article_id": top }))),
        );
    }
    let article = s
        .first("read_article")
        .map(|(t, _)| parse_article(t))
        .unwrap_or_default();
    let text = ticket_text_of(ticket);
    let rules = s
        .first("load_skill")
        .map(|(body, _)| escalation_rules(body))
        .unwrap_or_default();
    let (level, matched) = escalation_level(&rules, &text);
    // The desk's history decides what it knows well; the rules the rest.
    let mut history = learned::History::of(ticket, s.learned.clone());
    // Only a category the desk has (what classify_ticket accepts): a
    // label of history outside the taxonomy is reported, not proposed.
    let desk_categories = categories_in(&req.system);
    let category = history
        .pick(
            Field::Category,
            "category",
            Some(category(&req.system, ticket, &article)),
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
        queue(&desk_queues, &article, &category),
        |q| desk_queues.iter().any(|d| d == q),
    );
    if s.first("classify_ticket").is_none() {
        let intent = intent(ticket);
        return (
            None,
            Some(tool(
                "classify_ticket",
                json!({
                    "ticket_id": id, "category": category, "priority": priority, "intent": intent,
                    "summary": format!("{} [{}]", first_line(&text, 80), history.note()),
                }),
            )),
        );
    }
    if level > 0 && s.first("escalate_ticket").is_none() {
        // Before a supervisor escalation a worker reads the policy (as
        // TinyCode's root agent does); else, or when it found nothing, one
        // more search.
        let (cite, via) = match policy_from_worker(req, s, level) {
            Worker::Ask(step) => return step,
            Worker::Found { cite, agent } => (cite, format!("（子代理 {agent} 核对）")),
            Worker::Unavailable => {
                let Some((policy_hits, _)) = searches.get(1).copied() else {
                    return (
                        None,
                        Some(tool(
                            "search_knowledge",
                            json!({ "query": POLICY_QUERY, "limit": 3 }),
                        )),
                    );
                };
                let policy: Vec<Value> = list_of(first_json(policy_hits));
                let cite = policy
                    .first()
                    .and_then(|h| h["id"].as_str())
                    .or(top.as_deref())
                    .unwrap_or("escalation-rules")
                    .to_string();
                (cite, String::new())
            }
        };
        {
            let reason = format!(
                "命中升级规则（{}）→ L{level}；依据 {cite}{via}",
                matched.join("、")
            );
            return (
                None,
                Some(tool(
                    "escalate_ticket",
                    json!({ "ticket_id": id, "level": level, "reason": reason }),
                )),
            );
        }
    }
    if s.first("route_ticket").is_none()
        && let Some(queue) = &queue
    {
        let cite = article.id.clone().unwrap_or_else(|| "TINY.md".into());
        let reason = match history.support("queue") {
            Some(n) => format!("{category} 类工单，依据本台历史：同类 {n} 张工单路由到 {queue}"),
            None => format!("{category} 类工单，依据 {cite}"),
        };
        let args = json!({ "ticket_id": id, "queue": queue, "reason": reason });
        return (None, Some(tool("route_ticket", args)));
    }
    (
        Some(summary(
            id,
            &category,
            &priority,
            queue.as_deref(),
            level,
            s,
        )),
        None,
    )
}

/// What the policy search asks for.
const POLICY_QUERY: &str = "升级 政策 escalation policy 主管";

/// A worker's task: the policy query, then the question (no digits, so the
/// worker does not take a word for a ticket id).
fn policy_task() -> String {
    format!(
        "{POLICY_QUERY}: what does the escalation policy require before a supervisor escalation?"
    )
}

enum Worker {
    /// The next call of the exchange with the worker.
    Ask(Step),
    /// The article the worker cited.
    Found { cite: String, agent: String },
    /// No worker here (not offered, not L2, or it found nothing).
    Unavailable,
}

/// Spawn a worker to read the escalation policy, wait for it, and take the
/// article it cites.
fn policy_from_worker(req: &ModelRequest, s: &State<'_>, level: u32) -> Worker {
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

fn summary(
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

fn question_step(s: &State<'_>) -> Step {
    let Some((hits_text, _)) = s.first("search_knowledge") else {
        return (
            None,
            Some(tool(
                "search_knowledge",
                json!({ "query": s.user, "limit": 3 }),
            )),
        );
    };
    let hits: Vec<Value> = list_of(first_json(hits_text));
    let Some(top) = hits.first() else {
        return (
            Some(format!(
                "{MARK} The knowledge base has nothing on that; try other words or ask a colleague."
            )),
            None,
        );
    };
    let id = top["id"].as_str().unwrap_or_default();
    let Some((article, _)) = s.first("read_article") else {
        return (
            None,
            Some(tool("read_article", json!({ "article_id": id }))),
        );
    };
    let parsed = parse_article(article);
    let snippet = top["snippet"].as_str().unwrap_or_default();
    (
        Some(format!(
            "{MARK} From \"{}\" ({id}): {snippet}",
            parsed.title.unwrap_or_default()
        )),
        None,
    )
}

#[derive(Default, Debug)]
struct Article {
    id: Option<String>,
    title: Option<String>,
    tags: Vec<String>,
    owner: Option<String>,
}

fn parse_article(text: &str) -> Article {
    let mut a = Article::default();
    for line in text.lines().take_while(|l| !l.is_empty()) {
        match line.split_once(": ") {
            Some(("id", v)) => a.id = Some(v.trim().into()),
            Some(("title", v)) => a.title = Some(v.trim().into()),
            Some(("owner", v)) => {
                a.owner = Some(v.trim().into()).filter(|o: &String| !o.is_empty())
            }
            Some(("tags", v)) => {
                a.tags = v
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect()
            }
            _ => {}
        }
    }
    a
}

fn ticket_text_of(ticket: &Value) -> String {
    let mut text = format!(
        "{}\n{}",
        ticket["subject"].as_str().unwrap_or(""),
        ticket["customer"].as_str().unwrap_or("")
    );
    for m in ticket["messages"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(m["text"].as_str().unwrap_or(""));
    }
    text
}

/// What to search the knowledge base for: the subject and the first
/// message; never empty (a call with an empty query is invalid).
fn ticket_query(ticket: &Value) -> String {
    let first = ticket["messages"][0]["text"].as_str().unwrap_or("");
    let query = format!(
        "{} {}",
        ticket["subject"].as_str().unwrap_or(""),
        first.chars().take(80).collect::<String>()
    );
    match query.trim() {
        "" => ticket["id"]
            .as_str()
            .unwrap_or("support request")
            .to_string(),
        q => q.to_string(),
    }
}

fn first_line(text: &str, max: usize) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(max)
        .collect()
}

/// A listed skill whose name or description mentions one of `words`.
fn skill_named(system: &str, words: &[&str]) -> Option<String> {
    system
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .find_map(|l| {
            let (name, description) = l.split_once(": ")?;
            let hay = format!("{name} {description}").to_lowercase();
            words
                .iter()
                .any(|w| hay.contains(w))
                .then(|| name.trim().to_string())
        })
}

/// `Queues: a, b` from the system prompt.
fn queues(system: &str) -> Vec<String> {
    system
        .lines()
        .find_map(|l| l.strip_prefix("Queues: "))
        .map(|q| q.split(", ").map(String::from).collect())
        .unwrap_or_default()
}

/// The desk's category (its name, never an alias): the first named — by
/// name or alias — in the subject, then the body; else the one the top
/// article's tags name; else (no taxonomy) the article's first tag.
fn category(system: &str, ticket: &Value, article: &Article) -> String {
    let cats = categories_in(system);
    let subject = ticket["subject"].as_str().unwrap_or("").to_lowercase();
    let body = ticket_text_of(ticket).to_lowercase();
    let words = |c: &Category| {
        std::iter::once(c.name.to_lowercase())
            .chain(c.aliases.iter().map(|a| a.to_lowercase()))
            .collect::<Vec<_>>()
    };
    for hay in [&subject, &body] {
        if let Some(c) = cats
            .iter()
            .find(|c| words(c).iter().any(|w| mentions(hay, w)))
        {
            return c.name.clone();
        }
    }
    let tags: Vec<String> = article.tags.iter().map(|t| t.to_lowercase()).collect();
    if let Some(c) = cats
        .iter()
        .find(|c| words(c).iter().any(|w| tags.contains(w)))
    {
        return c.name.clone();
    }
    match cats.first() {
        Some(first) => first.name.clone(),
        None => article
            .tags
            .first()
            .cloned()
            .unwrap_or_else(|| "general".into()),
    }
}

/// Does `hay` mention `word`: as a whole word when it is ASCII (so `app`
/// is not found in `happy`), anywhere for other scripts.
fn mentions(hay: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    if word.is_ascii() {
        hay.split(|c: char| !c.is_alphanumeric()).any(|w| w == word)
    } else {
        hay.contains(word)
    }
}

/// P0 when a level-2 escalation rule matches (loss or public risk); at
/// least P1 when the first-response SLA has passed (TINY.md); P3 for plain
/// questions; P2 otherwise.
fn priority(system: &str, ticket: &Value, level: u32) -> String {
    if level >= 2 {
        return "P0".into();
    }
    let created = ticket["createdAt"].as_str().and_then(parse_rfc3339);
    let sla = ticket["slaMinutes"].as_i64().unwrap_or(0);
    // The request's clock (the prompt's `Current time:`), as a model has.
    let now = system
        .lines()
        .find_map(|l| l.strip_prefix("Current time: "))
        .and_then(parse_rfc3339)
        .unwrap_or_else(crate::clock::now_unix);
    let overdue = created.is_some_and(|c| c + sla * 60 < now);
    let sla_rule = system.contains("SLA") || system.contains("sla");
    if overdue && sla_rule || level == 1 {
        return "P1".into();
    }
    let text = ticket_text_of(ticket).to_lowercase();
    let question = [
        "how do i",
        "how can i",
        "where is the setting",
        "咨询",
        "请问",
        "怎么设置",
    ]
    .iter()
    .any(|q| text.contains(q));
    if question { "P3".into() } else { "P2".into() }
}

fn intent(ticket: &Value) -> String {
    let subject = ticket["subject"].as_str().unwrap_or("");
    let part = subject
        .split_once(['：', ':'])
        .map(|(_, rest)| rest)
        .unwrap_or(subject);
    let intent: String = part.trim().chars().take(40).collect();
    if intent.is_empty() {
        "unspecified request".into() // never an empty (invalid) argument
    } else {
        intent
    }
}

/// One escalation rule of the skill: keywords or an amount threshold.
#[derive(Debug, Clone, PartialEq, Default)]
struct EscalationRule {
    level: u32,
    keywords: Vec<String>,
    above_amount: Option<f64>,
}

/// Rules read from the escalation skill: lines `… ：<condition> → … L<n>`.
fn escalation_rules(body: &str) -> Vec<EscalationRule> {
    body.lines()
        .filter_map(|line| {
            let level = if line.contains("L2") {
                2
            } else if line.contains("L1") {
                1
            } else {
                return None;
            };
            let (cond, _) = line.split_once('→').or_else(|| line.split_once("->"))?;
            let cond = cond
                .rsplit_once('：')
                .or_else(|| cond.rsplit_once(": "))
                .map(|(_, c)| c)
                .unwrap_or(cond);
            let cond = cond.trim().trim_start_matches("涉及").trim();
            if let Some((_, n)) = cond.split_once('>') {
                let number: String = n
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                return Some(EscalationRule {
                    level,
                    keywords: vec![],
                    above_amount: number.parse().ok(),
                });
            }
            let keywords = cond
                .split(['、', ',', '，', '/', '或'])
                .map(|k| k.split(['且', '的']).next().unwrap_or(k).trim().to_string())
                .filter(|k| !k.is_empty() && k.chars().count() <= 12)
                .collect::<Vec<_>>();
            (!keywords.is_empty()).then_some(EscalationRule {
                level,
                keywords,
                above_amount: None,
            })
        })
        .collect()
}

/// Money amounts mentioned in `text`: numbers next to 元/块/yuan/usd/$/¥.
fn amounts(text: &str) -> Vec<f64> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_digit() || chars[i] == ',' || chars[i] == '.')
            {
                i += 1;
            }
            let number: String = chars[start..i].iter().filter(|c| **c != ',').collect();
            let after: String = chars[i..]
                .iter()
                .take(8)
                .collect::<String>()
                .trim_start()
                .to_lowercase();
            let before = if start > 0 { chars[start - 1] } else { ' ' };
            let money = ["元", "块", "yuan", "rmb", "usd", "dollar", "美元"]
                .iter()
                .any(|u| after.starts_with(u))
                || matches!(before, '$' | '¥' | '￥');
            if let (true, Ok(v)) = (money, number.trim_end_matches('.').parse::<f64>()) {
                out.push(v);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The highest level whose rule matches, and what matched.
fn escalation_level(rules: &[EscalationRule], text: &str) -> (u32, Vec<String>) {
    let lower = text.to_lowercase();
    let money = amounts(text);
    let mut level = 0;
    let mut matched = Vec::new();
    for rule in rules {
        let hit = if let Some(limit) = rule.above_amount {
            money
                .iter()
                .find(|a| **a > limit)
                .map(|a| format!("金额 {a} > {limit}"))
        } else {
            rule.keywords.iter().find_map(|k| {
                let words = LEXICON
                    .iter()
                    .find(|(c, _)| *c == k.as_str())
                    .map(|(_, w)| *w)
                    .unwrap_or(&[]);
                std::iter::once(k.as_str())
                    .chain(words.iter().copied())
                    .find(|w| lower.contains(&w.to_lowercase()))
                    .map(|w| {
                        if w == k {
                            k.clone()
                        } else {
                            format!("{k}（{w}）")
                        }
                    })
            })
        };
        if let Some(h) = hit {
            level = level.max(rule.level);
            matched.push(h);
        }
    }
    (level, matched)
}

/// The queue named like the category; else the policy article's owner when
/// the article is about that category and the owner is a queue; else the
/// first queue.
fn queue(queues: &[String], article: &Article, category: &str) -> Option<String> {
    if let Some(q) = queues.iter().find(|q| q.contains(category)) {
        return Some(q.clone());
    }
    let on_topic = article.tags.iter().any(|t| t == category);
    if let Some(owner) = article
        .owner
        .as_ref()
        .filter(|o| on_topic && queues.contains(o))
    {
        return Some(owner.clone());
    }
    queues.first().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKILL: &str = "# 升级判断规则\n\n- **金额**：涉及金额 > 200 元 → 升级 L2（主管）。\n- **身份**：VIP 或企业客户且诉求未获满足 → 升级 L1（组长）。\n- **风险**：涉及法律、媒体、支付安全、数据泄露 → 一律升级 L2。\n";

    #[test]
    fn rules_come_from_the_skill_text() {
        let rules = escalation_rules(SKILL);
        assert_eq!(rules.len(), 3, "{rules:?}");
        assert_eq!(
            rules[0],
            EscalationRule {
                level: 2,
                keywords: vec![],
                above_amount: Some(200.0)
            }
        );
        assert_eq!(rules[1].keywords, ["VIP", "企业客户"]);
        assert_eq!(
            (rules[2].level, rules[2].keywords.clone()),
            (
                2,
                vec![
                    "法律".to_string(),
                    "媒体".into(),
                    "支付安全".into(),
                    "数据泄露".into()
                ]
            )
        );
    }

    #[test]
    fn escalation_levels_from_amounts_keywords_and_concepts() {
        let rules = escalation_rules(SKILL);
        assert_eq!(escalation_level(&rules, "耳机坏了，金额 159 元").0, 0);
        assert_eq!(escalation_level(&rules, "被扣了两次，共 1,280 元").0, 2);
        assert_eq!(escalation_level(&rules, "A 2,499 USD laptop").0, 2);
        assert_eq!(escalation_level(&rules, "星辰科技（企业客户）").0, 1);
        let (level, why) = escalation_level(&rules, "企业账户被风控冻结，影响结算");
        assert_eq!(level, 2);
        assert!(why.iter().any(|w| w.starts_with("支付安全")), "{why:?}");
        assert_eq!(
            escalation_level(&[], "律师函").0,
            0,
            "no rules, no escalation"
        );
    }

    #[test]
    fn queues_follow_the_category_then_the_on_topic_article_owner() {
        let queues: Vec<String> = ["售后组", "物流组", "账户组"].map(String::from).to_vec();
        let logistics = Article {
            owner: Some("物流组".into()),
            tags: vec!["物流".into()],
            ..Article::default()
        };
        let refunds = Article {
            owner: Some("售后组".into()),
            tags: vec!["退款".into()],
            ..Article::default()
        };
        assert_eq!(
            queue(&queues, &logistics, "账户").as_deref(),
            Some("账户组")
        );
        assert_eq!(queue(&queues, &refunds, "退款").as_deref(), Some("售后组"));
        assert_eq!(
            queue(&queues, &logistics, "退款").as_deref(),
            Some("售后组"),
            "off-topic owner ignored"
        );
        assert_eq!(queue(&[], &refunds, "退款"), None);
    }

    #[test]
    fn categories_and_ticket_ids_are_read_from_text() {
        let system = "x\n- 分类口径：退款 / 物流 / 账户 / 技术 —— 一条工单只归一个主分类。\n";
        let names: Vec<String> = categories_in(system).into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["退款", "物流", "账户", "技术"]);
        assert!(mentions("my app crashed", "app") && !mentions("happy", "app"));
        assert_eq!(
            id_candidates("please triage t-1003 now"),
            ["t-1003", "T-1003"]
        );
        assert_eq!(
            id_candidates("Refund of 45 for ticket ZD-4411."),
            ["ZD-4411", "45"],
            "the one after `ticket` first"
        );
        assert_eq!(id_candidates("工单 INC0012345 的退款"), ["INC0012345"]);
        assert_eq!(id_candidates("triage 12345"), ["12345"]);
        assert!(id_candidates("退款 时效 是多久？").is_empty());
        assert!(id_candidates("see ../etc and -5").is_empty());
        assert_eq!(amounts("$45 and ¥12.5, 3 days"), vec![45.0, 12.5]);
    }
}
