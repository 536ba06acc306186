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

use crate::learn::tickets::{Learned, TicketLearner};
use crate::model::tokens;
use crate::model::{
    Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, Purpose, StopReason, ToolCall,
    Usage,
};

mod learned;
mod reading;
pub use reading::lines as prompt_lines;
mod summary;
mod triage;

use reading::parse_article;
use triage::triage_step;

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

/// What the conversation since the last user message holds.
pub(super) struct State<'a> {
    user: &'a str,
    /// The skill invoked as a command (`/name args`), if one was.
    skill: &'a str,
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
        let (user, skill) = match messages.get(start) {
            // A skill invoked as a command: its steps are this model's own;
            // what the person asked follows the block.
            Some(Message::User { text }) => match text.split_once("\n</skill>\n\n") {
                Some((block, asked)) if block.starts_with("<skill name=\"") => {
                    let name = block["<skill name=\"".len()..].split('"').next();
                    (asked, name.unwrap_or(""))
                }
                _ => (text.as_str(), ""),
            },
            _ => ("", ""),
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
            skill,
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

pub(super) fn tool(name: &str, args: Value) -> ToolCall {
    ToolCall::new(String::new(), name.into(), args.to_string())
}

/// The JSON value a tool result starts with (a shortened result may be
/// followed by a note on where the full text is); `Null` when none.
pub(super) fn first_json(text: &str) -> Value {
    let value = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    without_marks(value)
}

/// Strings of a shortened result without their `…[+N chars]` marks.
pub(super) fn without_marks(value: Value) -> Value {
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
pub(super) fn list_of(value: Value) -> Vec<Value> {
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
    if s.skill == "daily-report" {
        return report_step(s);
    }
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

pub(super) type Step = (Option<String>, Option<ToolCall>);

/// `/daily-report [day]`: `render_report` for the day asked (or
/// yesterday), then its Markdown as the answer — or, when a figure could
/// not be read, that no report was made (never figures of its own).
fn report_step(s: &State<'_>) -> Step {
    match s.first("render_report") {
        None => {
            let day = s
                .user
                .split_whitespace()
                .find(|w| w.len() == 10 && w.chars().all(|c| c.is_ascii_digit() || c == '-'));
            let args = day.map_or_else(|| json!({}), |d| json!({ "day": d }));
            (None, Some(tool("render_report", args)))
        }
        Some((why, true)) => (
            Some(format!("{MARK} 无法生成日报（no report was made）：{why}")),
            None,
        ),
        Some((report, false)) => (Some(format!("{MARK}\n\n{report}")), None),
    }
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

#[cfg(test)]
mod tests {
    use super::reading::*;
    use super::*;
    use crate::domain::taxonomy::categories_in;

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
