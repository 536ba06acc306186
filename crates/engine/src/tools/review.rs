//! A model's decision held for a person (`triage.reviewBelow`): when the
//! model's confidence in a field is below its threshold — or the ticket
//! already waits for review — `classify_ticket` and `route_ticket` record
//! a `DecisionSuggested` and a note instead of the decision, and the
//! ticket joins the review queue (`tinycode triage review`, the TUI, the
//! web page). A person's answer (`Tickets.Review`) is the decision.

use serde_json::{Value, json};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{DecisionSuggested, Ticket};

use super::{ToolContext, ToolOutput};
use crate::domain::ticket::review::describe;

/// The fields of this call below their threshold (empty: it stands).
pub(super) fn below(ctx: &ToolContext) -> Vec<String> {
    ctx.review_below.below(&ctx.confidence)
}

/// `suggestion` held: the event, with the call's confidence and origin.
pub(super) fn held(ctx: &ToolContext, below: &[String], suggestion: DecisionSuggested) -> Payload {
    Payload::DecisionSuggested(DecisionSuggested {
        confidence: ctx.confidence.clone(),
        below: below.to_vec(),
        origin: ctx.origin.clone(),
        ..suggestion
    })
}

/// Why it was held, for the note and the tool's answer.
pub(super) fn why(ctx: &ToolContext, below: &[String]) -> String {
    let confidence = match describe(&ctx.confidence) {
        d if d.is_empty() => "confidence unknown".to_string(),
        d => d,
    };
    if below.is_empty() {
        format!("the ticket already waits for review ({confidence})")
    } else {
        let thresholds: Vec<String> = below
            .iter()
            .filter_map(|f| {
                let t = ctx.review_below.thresholds.get(f)?;
                Some(format!("{f} below {t:.2}"))
            })
            .collect();
        format!("{confidence}; {}", thresholds.join(", "))
    }
}

/// The tool's answer for a held decision.
pub(super) fn answer(t: &Ticket, what: &str, why: &str) -> ToolOutput {
    let details: Value = json!({
        "ticket_id": t.id,
        "held_for_review": true,
        "status": t.status,
    });
    ToolOutput::ok(
        format!(
            "{} {what} held for review ({why}): not applied; a person decides with `tinycode triage review`",
            t.id
        ),
        details,
    )
}
