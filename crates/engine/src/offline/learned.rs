//! The desk's history (the learner, `tinycode_learn::tickets`, handed to the model) against the
//! TINY.md rules: a field the history knows well enough is decided by it,
//! any other by the rules, and the classification note says which.

use serde_json::Value;

pub(super) use crate::domain::ticket::review::level;
use crate::learn::tickets::{Field, Learned, ticket_text};

/// What the history says for one ticket.
pub(super) struct History {
    learned: Option<std::sync::Arc<Learned>>,
    text: String,
    /// (field name, examples behind the label, calibrated confidence) for
    /// each field it decided.
    used: Vec<(&'static str, usize, Option<f32>)>,
    ruled: Vec<&'static str>,
    /// (field name, label) the history proposed that the desk does not
    /// accept (a label people used that is not in its taxonomy): reported,
    /// not used.
    refused: Vec<(&'static str, String)>,
}

impl History {
    pub fn of(ticket: &Value, learned: Option<std::sync::Arc<Learned>>) -> Self {
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
            learned,
            text,
            used: Vec::new(),
            ruled: Vec::new(),
            refused: Vec::new(),
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
            .and_then(|l| l.suggest(field, &self.text));
        let suggested = match suggested {
            Some(s) if !valid(&s.label) => {
                self.refused.push((name, s.label));
                None
            }
            other => other,
        };
        match suggested {
            Some(s) => {
                self.used.push((name, s.support, s.confidence));
                Some(s.label)
            }
            None => {
                self.ruled.push(name);
                rules
            }
        }
    }

    /// The calibrated confidence of the fields among `names` the history
    /// decided (a field the rules decided has none: unknown).
    pub fn confidence(&self, names: &[&str]) -> Vec<(String, f32)> {
        self.used
            .iter()
            .filter(|(n, ..)| names.contains(n))
            .filter_map(|(n, _, c)| c.map(|c| (n.to_string(), c)))
            .collect()
    }

    /// Examples behind the history's choice of `name` (None: the rules).
    pub fn support(&self, name: &str) -> Option<usize> {
        self.used
            .iter()
            .find(|(n, ..)| *n == name)
            .map(|(_, s, _)| *s)
    }

    /// `learned from history: category (60 tickets, high 0.97), queue (6
    /// tickets) · rules: priority` (a confidence where the model had
    /// enough history to calibrate one).
    pub fn note(&self) -> String {
        let mut parts = Vec::new();
        if !self.used.is_empty() {
            let used: Vec<String> = self
                .used
                .iter()
                .map(|(n, s, confidence)| match confidence {
                    Some(c) => format!("{n} ({s} tickets, {} {c:.2})", level(*c)),
                    None => format!("{n} ({s} tickets)"),
                })
                .collect();
            parts.push(format!("learned from history: {}", used.join(", ")));
        }
        if !self.ruled.is_empty() {
            parts.push(format!("rules: {}", self.ruled.join(", ")));
        }
        for (name, label) in &self.refused {
            parts.push(format!(
                "history proposed {name} {label:?}, which this desk does not have: not used"
            ));
        }
        parts.join(" · ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::learn::model::HistoryRow;

    #[test]
    fn a_label_outside_the_desk_is_reported_and_the_rules_decide() {
        let rows = (0..6).flat_map(|i| {
            let row = |subject: String, body: &str, category: &str| HistoryRow {
                subject,
                messages: vec![body.into()],
                labels: [("category".to_string(), category.to_string())]
                    .into_iter()
                    .collect(),
            };
            [
                row(format!("发票 开具 {i}"), "请开增值税发票", "发票"),
                row(format!("物流 包裹 {i}"), "快递停滞没有更新", "物流"),
            ]
        });
        let learned = std::sync::Arc::new(Learned::train(rows));
        let mut history = History {
            learned: Some(learned),
            text: ticket_text("发票 开具", ["请开增值税发票"].into_iter()),
            used: Vec::new(),
            ruled: Vec::new(),
            refused: Vec::new(),
        };
        let desk = ["退款", "物流", "账户"];
        let picked = history.pick(Field::Category, "category", Some("账户".into()), |c| {
            desk.contains(&c)
        });
        assert_eq!(picked.as_deref(), Some("账户"), "the rules decide");
        let note = history.note();
        assert!(note.contains("rules: category"), "{note}");
        assert!(
            note.contains("\"发票\", which this desk does not have"),
            "{note}"
        );
    }

    #[test]
    fn the_note_names_a_calibrated_confidence_in_words_and_number() {
        let history = History {
            learned: None,
            text: String::new(),
            used: vec![("category", 60, Some(0.973)), ("queue", 6, None)],
            ruled: vec!["priority"],
            refused: Vec::new(),
        };
        assert_eq!(
            history.note(),
            "learned from history: category (60 tickets, high 0.97), queue (6 tickets) · rules: priority"
        );
        assert_eq!(
            [level(0.95), level(0.9), level(0.7), level(0.59)],
            ["high", "high", "medium", "low"]
        );
    }
}
