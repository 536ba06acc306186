//! What the offline model reads, as any model would: the system prompt's
//! lines (queues, skills, the clock, the business rules' categories and
//! escalation rules) and the tool results (a ticket, an article).

use serde_json::Value;

/// The system prompt's lines this model reads — the one definition both
/// sides use: `agent/prompt.rs` writes them, `reading.rs` reads them.
pub mod lines {
    /// `Current time: 2026-12-03T08:00:00Z`: the clock a turn runs by.
    pub const CURRENT_TIME: &str = "Current time: ";
    /// `Queues: a, b`: the desk's queues, `, ` between.
    pub const QUEUES: &str = "Queues: ";
    /// `, ` between queues.
    pub const QUEUE_SEPARATOR: &str = ", ";
    /// `- name: description`: one skill of the skills summary (as
    /// `SkillRegistry::summary` writes it).
    pub const SKILL_ITEM: &str = "- ";
}

use crate::clock::parse_rfc3339;
use crate::domain::taxonomy::{Category, categories_in};

/// Concepts the escalation rules may name, with words that express them.
/// Used only for keywords the workspace's own rules contain.
pub(super) const LEXICON: &[(&str, &[&str])] = &[
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

#[derive(Default, Debug)]
pub(super) struct Article {
    pub(super) id: Option<String>,
    pub(super) title: Option<String>,
    pub(super) tags: Vec<String>,
    pub(super) owner: Option<String>,
}

pub(super) fn parse_article(text: &str) -> Article {
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

pub(super) fn ticket_text_of(ticket: &Value) -> String {
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
pub(super) fn ticket_query(ticket: &Value) -> String {
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

pub(super) fn first_line(text: &str, max: usize) -> String {
    text.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(max)
        .collect()
}

/// A listed skill whose name or description mentions one of `words`.
pub(super) fn skill_named(system: &str, words: &[&str]) -> Option<String> {
    let skills: Vec<(&str, String)> = system
        .lines()
        .filter_map(|l| l.strip_prefix(lines::SKILL_ITEM))
        .filter_map(|l| {
            let (name, description) = l.split_once(": ")?;
            Some((name.trim(), description.to_lowercase()))
        })
        .collect();
    let has = |hay: &str| words.iter().any(|w| hay.contains(w));
    // A skill named for it first (the daily report's description mentions
    // escalations too), then one whose description says it.
    skills
        .iter()
        .find(|(name, _)| has(&name.to_lowercase()))
        .or_else(|| skills.iter().find(|(_, description)| has(description)))
        .map(|(name, _)| name.to_string())
}

/// `Queues: a, b` from the system prompt.
pub(super) fn queues(system: &str) -> Vec<String> {
    system
        .lines()
        .find_map(|l| l.strip_prefix(lines::QUEUES))
        .map(|q| q.split(lines::QUEUE_SEPARATOR).map(String::from).collect())
        .unwrap_or_default()
}

/// The desk's category (its name, never an alias): the first named — by
/// name or alias — in the subject, then the body; else the one the top
/// article's tags name; else (no taxonomy) the article's first tag.
pub(super) fn category(system: &str, ticket: &Value, article: &Article) -> String {
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
pub(super) fn mentions(hay: &str, word: &str) -> bool {
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
pub(super) fn priority(system: &str, ticket: &Value, level: u32) -> String {
    if level >= 2 {
        return "P0".into();
    }
    let created = ticket["createdAt"].as_str().and_then(parse_rfc3339);
    let sla = ticket["slaMinutes"].as_i64().unwrap_or(0);
    // The request's clock (the prompt's `Current time:`), as a model has.
    let now = system
        .lines()
        .find_map(|l| l.strip_prefix(lines::CURRENT_TIME))
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

pub(super) fn intent(ticket: &Value) -> String {
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
pub(super) struct EscalationRule {
    pub(super) level: u32,
    pub(super) keywords: Vec<String>,
    pub(super) above_amount: Option<f64>,
}

/// Rules read from the escalation skill: lines `… ：<condition> → … L<n>`.
pub(super) fn escalation_rules(body: &str) -> Vec<EscalationRule> {
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
pub(super) fn amounts(text: &str) -> Vec<f64> {
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
pub(super) fn escalation_level(rules: &[EscalationRule], text: &str) -> (u32, Vec<String>) {
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
pub(super) fn queue(queues: &[String], article: &Article, category: &str) -> Option<String> {
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
    use super::skill_named;

    #[test]
    fn a_skill_named_for_it_wins_over_one_that_mentions_it() {
        let system = "Skills:\n- daily-report: 每日报告：SLA、升级、审批\n- escalation-rules: 工单升级判断规则\n";
        assert_eq!(
            skill_named(system, &["escalation", "升级"]).as_deref(),
            Some("escalation-rules")
        );
        let only_described = "- rules: 工单升级判断规则\n";
        assert_eq!(
            skill_named(only_described, &["escalation", "升级"]).as_deref(),
            Some("rules")
        );
        assert_eq!(skill_named("- triage-sop: 分流\n", &["升级"]), None);
    }
}
