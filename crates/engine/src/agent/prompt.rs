//! The system prompt: the role, the workspace's business rules (TINY.md,
//! and AGENTS.md / CLAUDE.md when present) and the skills summary (names
//! and descriptions only; bodies load on demand with `load_skill`).

use std::path::Path;

use crate::skills::SkillRegistry;

const ROLE: &str = "You are tinycode, a customer-support triage agent. For each ticket: read it \
(get_ticket), find the relevant policy (search_knowledge, then read_article), record the \
category, priority and intent (classify_ticket), escalate when the escalation rules say so \
(escalate_ticket, citing the policy article id), and route it to a queue (route_ticket, citing \
the article). Never promise refunds or deadlines the policy does not give. Changes to the \
knowledge base go through propose_knowledge_edit and are reviewed by a human. To check what a \
policy says without filling your own context, spawn_agent starts a read-only worker; collect its \
answer with wait_agent.";

const WORKER_ROLE: &str = "You are a read-only research worker for a customer-support desk. \
Another agent gave you one task. Use the read tools (search_knowledge, read_article, get_ticket, \
list_tickets, search_tickets, load_skill) to find the answer, then reply with it in a few \
sentences, citing the article or ticket ids you used. You cannot change anything.";

/// A worker's system prompt: its role, the business rules and the skills
/// summary (no queues: it routes nothing).
use crate::offline::prompt_lines as lines;

pub fn worker_prompt(workspace: &Path, skills: &SkillRegistry) -> String {
    let mut prompt = String::from(WORKER_ROLE);
    append_context(&mut prompt, workspace, skills);
    prompt
}

pub fn system_prompt(workspace: &Path, skills: &SkillRegistry, queues: &[String]) -> String {
    let mut prompt = String::from(ROLE);
    // To the minute: the steps of a turn share one prompt.
    let now = crate::clock::now_unix();
    prompt.push_str(&format!(
        "\n\n{}{}",
        lines::CURRENT_TIME,
        tinycode_shared::render::rfc3339(now - now.rem_euclid(60), 0)
    ));
    if !queues.is_empty() {
        prompt.push_str(&format!(
            "\n\n{}{}",
            lines::QUEUES,
            queues.join(lines::QUEUE_SEPARATOR)
        ));
    }
    append_context(&mut prompt, workspace, skills);
    prompt
}

/// The workspace's business rules and skills summary.
fn append_context(prompt: &mut String, workspace: &Path, skills: &SkillRegistry) {
    for (file, text) in crate::domain::rules::read(workspace) {
        prompt.push_str(&format!(
            "\n\n<business-rules file=\"{file}\">\n{}\n</business-rules>",
            text.trim()
        ));
    }
    let summary = skills.summary();
    if !summary.is_empty() {
        prompt.push_str(&format!(
            "\n\nSkills (load one with load_skill when relevant):\n{summary}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_holds_rules_queues_and_skill_summaries_only() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk");
        let (skills, _) = SkillRegistry::discover(&ws);
        let p = system_prompt(&ws, &skills, &["售后组".into(), "物流组".into()]);
        assert!(p.starts_with("You are tinycode"));
        assert!(p.contains("Queues: 售后组, 物流组"));
        assert!(
            p.contains("<business-rules file=\"TINY.md\">")
                && p.contains("退款 / 物流 / 账户 / 技术")
        );
        assert!(p.contains("- escalation-rules: 工单升级判断规则"));
        assert!(
            !p.contains("一律升级 L2"),
            "skill bodies are not in the prompt"
        );
    }
}
