//! `/approvals`: the inbox across every session — what each call would do
//! (a knowledge edit as a coloured diff), approve / deny with a reason /
//! always allow, and the latest decisions with who made them.

use maud::{Markup, html};
use tinycode_shared::proto::{ApprovalDecision, ApprovalInfo, ApprovalState};
use tinycode_shared::render;

use super::{Tab, at_ms, csrf, diff, layout};
use crate::person::Person;
use crate::timeline::clip;

pub struct ApprovalsView {
    pub pending: Vec<ApprovalInfo>,
    pub recent: Vec<ApprovalInfo>,
}

pub fn approvals(person: &Person, from: u64, v: &ApprovalsView) -> Markup {
    let body = html! {
        h1 { "Approvals" }
        section #inbox data-live="approval-" data-src="/approvals?part=live" {
            (approvals_live(person, v))
        }
    };
    layout("Approvals", person, Tab::Approvals, from, body)
}

pub fn approvals_live(person: &Person, v: &ApprovalsView) -> Markup {
    html! {
        @if v.pending.is_empty() {
            p.empty #no-pending { "Nothing waits for a decision." }
        }
        @for a in &v.pending { (card(person, a, "/approvals")) }
        h2 { "Latest decisions" }
        table.decisions {
            thead { tr { th { "Approval" } th { "Tool" } th { "Decision" } th { "By" } th { "When" } th { "Reason" } } }
            tbody {
                @for a in &v.recent { (decided_row(a)) }
            }
        }
    }
}

fn state_name(a: &ApprovalInfo) -> &'static str {
    match ApprovalState::try_from(a.state).unwrap_or_default() {
        ApprovalState::Pending => "pending",
        ApprovalState::Cancelled => "cancelled",
        _ => match a
            .decision
            .as_ref()
            .and_then(|d| ApprovalDecision::try_from(d.decision).ok())
        {
            Some(ApprovalDecision::AlwaysAllow) => "always allowed",
            Some(ApprovalDecision::AllowOnce) => "allowed",
            Some(ApprovalDecision::Deny) => "denied",
            _ => "decided",
        },
    }
}

fn decided_row(a: &ApprovalInfo) -> Markup {
    let r = a.request.clone().unwrap_or_default();
    let d = a.decision.clone().unwrap_or_default();
    let tool = r.call.as_ref().map(|c| c.name.clone()).unwrap_or_default();
    html! {
        tr.decided id={ "decided-" (r.approval_id) } data-state=(state_name(a)) {
            td { (r.approval_id) }
            td { code { (tool) } }
            td.state { (state_name(a)) }
            td.by { @if a.decision.is_some() { (render::client_name(d.by.as_ref())) } }
            td.at { (at_ms(a.decided_at_ms)) }
            td { (d.reason) (a.cancelled_reason) @if !d.answer.is_empty() { "answer: " (d.answer) } }
        }
    }
}

/// One pending approval with its decision forms; `back` is where the
/// forms return to.
pub fn card(person: &Person, a: &ApprovalInfo, back: &str) -> Markup {
    let r = a.request.clone().unwrap_or_default();
    let call = r.call.clone().unwrap_or_default();
    let action = format!("/approvals/{}", r.approval_id);
    let args = serde_json::from_str::<serde_json::Value>(&call.arguments_json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or(call.arguments_json.clone());
    html! {
        article.approval id=(r.approval_id) data-id=(r.approval_id) {
            header {
                b { (r.approval_id) } " "
                code.tool { (call.name) } " · "
                @if r.session_id.is_empty() {
                    (render::requested_by(&r))
                } @else {
                    a href={ "/sessions/" (r.session_id) } { "session " (r.session_id) } " turn " (r.turn)
                }
                " · " span.at { (at_ms(a.requested_at_ms)) }
            }
            @if !r.question.is_empty() {
                p.question { (r.question) }
            } @else {
                @if !r.reason.is_empty() { p.reason { (r.reason) } }
                pre.args { (clip(&args, 4000)) }
            }
            @if !r.rationale.is_empty() { p.rationale { "Why: " (r.rationale) } }
            @if !r.diff.is_empty() {
                p.article { "Edit of " code { (r.article_id) } " (+" (r.added) " −" (r.removed) ")" }
                (diff(&r.diff))
            }
            // Approving and refusing are separate forms: Enter in the
            // reason field submits its own form, so it can only deny.
            div.decide {
                form.allow method="post" action=(action) {
                    (csrf(person))
                    input type="hidden" name="back" value=(back);
                    @if !r.question.is_empty() {
                        @for (i, c) in r.choices.iter().enumerate() {
                            button type="submit" name="answer" value=(i + 1) { (c) }
                        }
                        @if r.choices.is_empty() {
                            input name="answer" placeholder="your answer" maxlength="2000" required;
                            button type="submit" name="decision" value="allow" { "Answer" }
                        }
                    } @else {
                        button.allow type="submit" name="decision" value="allow" { "Approve" }
                        @if !r.review_required {
                            button.always type="submit" name="decision" value="always" title="allow this tool for the rest of the session" { "Always allow" }
                        }
                    }
                }
                form.deny method="post" action=(action) {
                    (csrf(person))
                    input type="hidden" name="back" value=(back);
                    input type="hidden" name="decision" value="deny";
                    @if !r.question.is_empty() {
                        input name="reason" placeholder="why not (to decline)" maxlength="2000";
                        button.deny type="submit" { "Decline" }
                    } @else {
                        input name="reason" placeholder="reason (given to the model on a denial)" maxlength="2000";
                        button.deny type="submit" { "Deny" }
                    }
                }
            }
        }
    }
}
