//! The review queue's side of a ticket: a model's confidence per field,
//! the thresholds below which its decision is held for a person
//! (`triage.reviewBelow`), and the fold of a held decision into the
//! ticket's `suggestion` — cleared part by part as a person (or a later
//! confident decision) classifies or routes it.

use std::collections::BTreeMap;

use tinycode_shared::proto::{DecisionSuggested, FieldConfidence, Ticket};

/// The fields a confidence can be given for, and held on.
pub const FIELDS: [&str; 3] = ["category", "priority", "queue"];

/// `triage.reviewBelow`: a decision whose confidence in a field is below
/// that field's threshold is held for review. Empty: nothing is held.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReviewBelow {
    pub thresholds: BTreeMap<String, f32>,
}

// The thresholds are checked to be in 0..=1 when read: never NaN.
impl Eq for ReviewBelow {}

impl ReviewBelow {
    /// The fields of `confidence` below their threshold (a field with no
    /// confidence — a person, an LLM that reports none — is never held).
    pub fn below(&self, confidence: &[FieldConfidence]) -> Vec<String> {
        confidence
            .iter()
            .filter(|c| {
                self.thresholds
                    .get(&c.field)
                    .is_some_and(|&threshold| c.value < threshold)
            })
            .map(|c| c.field.clone())
            .collect()
    }
}

/// A confidence in words, and a list of them (the one rendering, shared
/// with the clients).
pub use tinycode_shared::render::{confidence as describe, confidence_level as level};

/// A decision of `fields` now stands: their confidence is `confidence`
/// (none: a person's, or unknown), and their part of a held suggestion is
/// settled.
pub fn decided(ticket: &mut Ticket, fields: &[&str], confidence: &[FieldConfidence]) {
    ticket
        .confidence
        .retain(|c| !fields.contains(&c.field.as_str()));
    ticket.confidence.extend(confidence.iter().cloned());
    let Some(s) = ticket.suggestion.as_mut() else {
        return;
    };
    if fields.contains(&"category") {
        s.category.clear();
        s.priority.clear();
        s.intent.clear();
        s.summary.clear();
    }
    if fields.contains(&"queue") {
        s.queue.clear();
        s.reason.clear();
    }
    s.confidence.retain(|c| !fields.contains(&c.field.as_str()));
    s.below.retain(|f| !fields.contains(&f.as_str()));
    if s.category.is_empty() && s.queue.is_empty() {
        ticket.suggestion = None;
    }
}

/// A decision held for review: merged into the ticket's suggestion (the
/// classification part and the routing part come from different calls).
pub fn suggested(ticket: &mut Ticket, e: &DecisionSuggested) {
    let s = ticket.suggestion.get_or_insert_with(Default::default);
    if !e.category.is_empty() {
        s.category = e.category.clone();
        s.priority = e.priority.clone();
        s.intent = e.intent.clone();
        s.summary = e.summary.clone();
    }
    if !e.queue.is_empty() {
        s.queue = e.queue.clone();
        s.reason = e.reason.clone();
    }
    for c in &e.confidence {
        s.confidence.retain(|old| old.field != c.field);
        s.confidence.push(c.clone());
    }
    for f in &e.below {
        if !s.below.contains(f) {
            s.below.push(f.clone());
        }
    }
    s.origin = e.origin.clone();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(field: &str, value: f32) -> FieldConfidence {
        FieldConfidence {
            field: field.into(),
            value,
        }
    }

    #[test]
    fn only_a_known_confidence_below_its_threshold_is_held() {
        let review = ReviewBelow {
            thresholds: [("category".to_string(), 0.8), ("queue".to_string(), 0.7)].into(),
        };
        let held = review.below(&[c("category", 0.79), c("priority", 0.1), c("queue", 0.7)]);
        assert_eq!(held, ["category"]);
        assert!(review.below(&[]).is_empty(), "unknown is never held");
        assert!(
            ReviewBelow::default()
                .below(&[c("category", 0.0)])
                .is_empty()
        );
    }

    #[test]
    fn a_suggestion_is_merged_then_settled_part_by_part() {
        let mut t = Ticket::default();
        suggested(
            &mut t,
            &DecisionSuggested {
                category: "账户".into(),
                priority: "P2".into(),
                confidence: vec![c("category", 0.5)],
                below: vec!["category".into()],
                ..Default::default()
            },
        );
        suggested(
            &mut t,
            &DecisionSuggested {
                queue: "技术支持".into(),
                confidence: vec![c("queue", 0.9)],
                ..Default::default()
            },
        );
        let s = t.suggestion.clone().unwrap();
        assert_eq!(
            (s.category.as_str(), s.queue.as_str()),
            ("账户", "技术支持")
        );
        assert_eq!(
            describe(&s.confidence),
            "category low 0.50, queue high 0.90"
        );
        decided(&mut t, &["category", "priority", "intent"], &[]);
        assert_eq!(t.suggestion.as_ref().unwrap().category, "");
        decided(&mut t, &["queue"], &[c("queue", 0.95)]);
        assert!(t.suggestion.is_none());
        assert_eq!(describe(&t.confidence), "queue high 0.95");
    }
}
