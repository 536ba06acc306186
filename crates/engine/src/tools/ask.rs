//! `ask_user(question, [choices])`: the agent asks a person. The question
//! is a durable approval request (stream `approval-<id>`, carrying the
//! question and its choices): every attached client and the approvals inbox
//! show it, whoever answers first answers it — also hours later, or after a
//! restart (the turn resumes at the call). The session's approver turns the
//! answer into the call's result; this tool's own `execute` runs only where
//! nobody can be asked (a headless `auto` run), and says so.

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::permissions::Rule;

pub const ASK_USER: &str = "ask_user";
/// Choices a question may offer.
pub const MAX_CHOICES: usize = 9;

/// The result when nobody can answer (no person in reach: a headless run,
/// `--approve auto|deny`).
pub const NO_ONE: &str = "no one is available to answer (this run has no person in reach); go on without the answer, and say in your reply what a person should decide";

pub struct AskUser;

/// The question and its choices, from the call's arguments.
pub fn question_of(args: &Value) -> (String, Vec<String>) {
    let question = args
        .get("question")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_string();
    let choices = args
        .get("choices")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(Value::as_str)
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    (question, choices)
}

/// What the model reads once a person answered.
pub fn answered(by: &str, answer: &str) -> String {
    format!("{by} answered: {answer}")
}

/// What the model reads when the person declined to answer.
pub fn declined(why: &str) -> String {
    format!("the question was not answered ({why}); go on without the answer")
}

/// What the model reads when nobody can be asked.
pub fn nobody() -> ToolOutput {
    ToolOutput::ok(NO_ONE, json!({ "answer": NO_ONE }))
}

impl Tool for AskUser {
    fn name(&self) -> &str {
        ASK_USER
    }
    fn description(&self) -> &str {
        "Ask a person a question and wait for the answer (a supervisor, the agent on duty). Use it when the desk's rules leave a decision to a person, not for what you can look up. Offer `choices` when the answer is one of a few."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "question": { "type": "string", "minLength": 1, "maxLength": 2000, "description": "The question, complete enough to answer without the transcript" },
                "choices": {
                    "type": "array",
                    "items": { "type": "string", "minLength": 1, "maxLength": 200 },
                    "maxItems": MAX_CHOICES,
                    "description": "The answers to choose from (none: any answer)"
                }
            },
            "required": ["question"],
            "additionalProperties": false
        })
    }
    fn rule(&self) -> Option<Rule> {
        Some(Rule::Ask(
            "the agent asks a person; whoever answers first answers it".into(),
        ))
    }
    /// A question is asked every time: "always" means nothing for it.
    fn review_required(&self) -> bool {
        true
    }
    fn execute<'a>(
        &'a self,
        _args: &'a Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async { Ok(nobody()) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_question_and_its_choices_are_read_trimmed() {
        let (q, c) =
            question_of(&json!({"question": " Refund 900 €? ", "choices": ["yes", " ", "no "]}));
        assert_eq!(q, "Refund 900 €?");
        assert_eq!(c, ["yes", "no"]);
        let (q, c) = question_of(&json!({"question": "Why?"}));
        assert_eq!((q.as_str(), c.len()), ("Why?", 0));
    }

    #[test]
    fn the_tool_asks_every_time_and_alone_says_nobody_can_answer() {
        assert!(matches!(AskUser.rule(), Some(Rule::Ask(_))));
        assert!(AskUser.review_required());
        assert!(nobody().content.starts_with("no one is available"));
        assert_eq!(answered("Ana", "yes"), "Ana answered: yes");
    }
}
