//! The desk's history (the learner, `crate::learn::tickets`) against the
//! TINY.md rules: a field the history knows well enough is decided by it,
//! any other by the rules, and the classification note says which.

use serde_json::Value;

use crate::learn::tickets::{Field, Learned, installed, ticket_text};

/// What the history says for one ticket.
pub(super) struct History {
    learned: Option<std::sync::Arc<Learned>>,
    text: String,
    /// (field name, examples behind the label) for each field it decided.
    used: Vec<(&'static str, usize)>,
    ruled: Vec<&'static str>,
}

impl History {
    pub fn of(ticket: &Value) -> Self {
        let messages = ticket["messages"].as_array();
        let text = ticket_text(
            ticket["subject"].as_str().unwrap_or(""),
            messages
                .into_iter()
                .flatten()
                .filter(|m| m["from"] == "customer")
                .filter_map(|m| m["text"].as_str()),
        );
        Self {
            learned: installed(),
            text,
            used: Vec::new(),
            ruled: Vec::new(),
        }
    }

    /// The history's label for `field` when it has one that `valid`
    /// accepts, else `rules`.
    pub fn pick(
        &mut self,
        field: Field,
        name: &'static str,
        rules: Option<String>,
        valid: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let suggested = self
            .learned
            .as_ref()
            .and_then(|l| l.suggest(field, &self.text))
            .filter(|s| valid(&s.label));
        match suggested {
            Some(s) => {
                self.used.push((name, s.support));
                Some(s.label)
            }
            None => {
                self.ruled.push(name);
                rules
            }
        }
    }

    /// Examples behind the history's choice of `name` (None: the rules).
    pub fn support(&self, name: &str) -> Option<usize> {
        self.used.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
    }

    /// `learned: category (6), queue (6) · rules: priority`.
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        if !self.used.is_empty() {
            let used: Vec<String> = self
                .used
                .iter()
                .map(|(n, s)| format!("{n} ({s} tickets)"))
                .collect();
            parts.push(format!("learned from history: {}", used.join(", ")));
        }
        if !self.ruled.is_empty() {
            parts.push(format!("rules: {}", self.ruled.join(", ")));
        }
        parts.join(" · ")
    }
}
