//! The ten business tools of the TinyCode design, with its parameter names,
//! plus `load_skill` and `render_report` (`report.rs`). Every write goes through the desk (the event log).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{
    AgentReplyAdded, DecisionSuggested, Ticket, TicketClassified, TicketEscalated, TicketMessage,
    TicketNote, TicketNoteAdded, TicketRouted,
};

use super::{Tool, ToolContext, ToolError, ToolOutput, review};
use crate::domain::desk::TicketFilter;
use crate::domain::search::{Hit, Kind};
use crate::domain::ticket::{Priority, Status, render_ticket_file, ticket_document};

type Run = for<'a> fn(&'a Value, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// A tool made of a name, a description, a schema and a function.
struct FnTool {
    name: &'static str,
    description: &'static str,
    parameters: Value,
    run: Run,
    /// What the tool would refuse, checked before a person is asked.
    check: Option<Check>,
}

type Check = for<'a> fn(&'a Value, &'a ToolContext) -> BoxFuture<'a, Result<(), ToolError>>;

impl Tool for FnTool {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn parameters(&self) -> Value {
        self.parameters.clone()
    }
    fn check<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<(), ToolError>> {
        match self.check {
            Some(check) => check(args, ctx),
            None => Box::pin(futures::future::ready(Ok(()))),
        }
    }
    fn execute<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        (self.run)(args, ctx)
    }
}

/// The ticket a call names exists (and, with `classified`, has a
/// category): what route, escalate and reply would refuse.
async fn ticket_ready(
    args: &Value,
    ctx: &ToolContext,
    classified: Option<&'static str>,
) -> Result<(), ToolError> {
    let t = ctx.desk.get_ticket(arg(args, "ticket_id"))?;
    // A classification held for review counts: the next steps are held too.
    if let Some(tool) = classified
        && t.category.is_empty()
        && t.suggestion.is_none()
    {
        return Err(ToolError::Invalid(format!(
            "{} is not classified yet; call classify_ticket before {tool}",
            t.id
        )));
    }
    Ok(())
}

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false })
}

fn text(description: &str) -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 65536, "description": description })
}

fn arg<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("").trim()
}

fn limit(args: &Value, default: usize) -> usize {
    args.get("limit")
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .unwrap_or(default)
}

/// `{ticketId, ticket}`: the ticket as its file holds it, plus the version
/// of its stream (docs/PROTOCOL.md, tool details).
fn ticket_details(t: &Ticket) -> Value {
    let mut ticket = ticket_document(t);
    ticket.insert("version".into(), t.version.into());
    json!({ "ticketId": t.id, "ticket": ticket })
}

fn hits_content(hits: &[Hit]) -> String {
    if hits.is_empty() {
        return "no matches; try other words".into();
    }
    let list: Vec<Value> = hits
        .iter()
        .map(|h| json!({ "id": h.id, "title": h.title, "score": (h.score * 100.0).round() / 100.0, "snippet": h.snippet }))
        .collect();
    Value::Array(list).to_string()
}

fn search_schema() -> Value {
    schema(
        json!({ "query": text("Words to search for"), "limit": { "type": "integer", "minimum": 1, "maximum": 20 } }),
        &["query"],
    )
}

/// The body of `search_tickets` and `search_knowledge`.
fn search(args: &Value, ctx: &ToolContext, kind: Kind) -> Result<ToolOutput, ToolError> {
    let hits = ctx
        .desk
        .search(arg(args, "query"), limit(args, 5), Some(kind))?;
    let ids: Vec<&String> = hits.iter().map(|h| &h.id).collect();
    Ok(ToolOutput::ok(hits_content(&hits), json!({ "hits": ids })))
}

/// Every standard tool.
pub fn business_tools() -> Vec<Arc<dyn Tool>> {
    [
        list_tickets(),
        get_ticket(),
        search_tickets(),
        search_knowledge(),
        read_article(),
        classify_ticket(),
        route_ticket(),
        escalate_ticket(),
        reply_customer(),
        propose_knowledge_edit(),
        load_skill(),
    ]
    .into_iter()
    .map(|t| Arc::new(t) as Arc<dyn Tool>)
    .chain([super::report::render_report()])
    .collect()
}

/// The `ticket_id` parameter of the ticket tools.
fn ticket_id_param() -> Value {
    text("Ticket id, e.g. T-1001")
}

/// `list_tickets`: Tickets with their status, priority, category and queue, filtered.
fn list_tickets() -> FnTool {
    FnTool {
        name: "list_tickets",
        description: "List tickets with their status, priority, category and queue; optional filters.",
        parameters: schema(
            json!({
                "status": { "type": "string", "enum": Status::NAMES },
                "queue": { "type": "string" },
                "priority": { "type": "string", "enum": Priority::NAMES },
                "category": { "type": "string" },
                "limit": { "type": "integer", "minimum": 1, "maximum": 200 },
            }),
            &[],
        ),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let filter = TicketFilter {
                    status: arg(args, "status").into(),
                    queue: arg(args, "queue").into(),
                    priority: arg(args, "priority").into(),
                    category: arg(args, "category").into(),
                    ..TicketFilter::default()
                };
                let (tickets, total) = ctx.desk.list_tickets(&filter, limit(args, 50));
                let rows: Vec<Value> = tickets
                .iter()
                .map(|t| json!({ "id": t.id, "subject": t.subject, "status": t.status, "priority": t.priority, "category": t.category, "queue": t.queue }))
                .collect();
                Ok(ToolOutput::ok(
                    format!(
                        "{} of {total} tickets: {}",
                        rows.len(),
                        Value::Array(rows.clone())
                    ),
                    json!({ "total": total, "tickets": rows }),
                ))
            })
        },
    }
}

/// `get_ticket`: One ticket in full.
fn get_ticket() -> FnTool {
    FnTool {
        name: "get_ticket",
        description: "Read one ticket in full: customer, SLA, status, the conversation and notes.",
        parameters: schema(json!({ "ticket_id": ticket_id_param() }), &["ticket_id"]),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let t = ctx.desk.get_ticket(arg(args, "ticket_id"))?;
                Ok(ToolOutput::ok(render_ticket_file(&t), ticket_details(&t)))
            })
        },
    }
}

/// `search_tickets`: Full-text search over tickets.
fn search_tickets() -> FnTool {
    FnTool {
        name: "search_tickets",
        description: "Full-text search over tickets (subject, messages, notes).",
        parameters: search_schema(),
        check: None,
        run: |args, ctx| Box::pin(async move { search(args, ctx, Kind::Ticket) }),
    }
}

/// `search_knowledge`: Full-text search over the knowledge base.
fn search_knowledge() -> FnTool {
    FnTool {
        name: "search_knowledge",
        description: "Full-text search over knowledge articles (title, tags, body); returns ids to read with read_article.",
        parameters: search_schema(),
        check: None,
        run: |args, ctx| Box::pin(async move { search(args, ctx, Kind::Article) }),
    }
}

/// `read_article`: One knowledge article in full.
fn read_article() -> FnTool {
    FnTool {
        name: "read_article",
        description: "Read a knowledge article in full (title, tags, owner, body).",
        parameters: schema(
            json!({ "article_id": text("Article id, e.g. refund-policy") }),
            &["article_id"],
        ),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let a = ctx.desk.get_article(arg(args, "article_id"))?;
                let content = format!(
                    "id: {}\ntitle: {}\ntags: {}\nowner: {}\nupdatedAt: {}\n\n{}",
                    a.id,
                    a.title,
                    a.tags.join(", "),
                    a.owner,
                    a.updated_at,
                    a.body
                );
                Ok(ToolOutput::ok(
                    content,
                    json!({ "articleId": a.id, "owner": a.owner, "tags": a.tags }),
                ))
            })
        },
    }
}

/// `classify_ticket`: Category, priority and intent, with a note.
fn classify_ticket() -> FnTool {
    FnTool {
        name: "classify_ticket",
        description: "Record the ticket's category, priority (P0 loss or public risk, P1 availability, P2 routine, P3 question) and intent.",
        parameters: schema(
            json!({
                "ticket_id": ticket_id_param(),
                "category": text("One main category"),
                "priority": { "type": "string", "enum": Priority::NAMES },
                "intent": text("What the customer wants"),
                "summary": { "type": "string", "maxLength": 2000 },
            }),
            &["ticket_id", "category", "priority", "intent"],
        ),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let category = ctx
                    .desk
                    .taxonomy()
                    .category(arg(args, "category"))
                    .map_err(|e| ToolError::Invalid(format!("classify_ticket: {e}")))?;
                let priority = arg(args, "priority");
                let summary = arg(args, "summary").trim();
                let below = review::below(ctx);
                let mut payloads = vec![if below.is_empty() {
                    Payload::TicketClassified(TicketClassified {
                        by: None,
                        category: category.clone(),
                        priority: priority.into(),
                        intent: arg(args, "intent").into(),
                        summary: summary.into(),
                        origin: ctx.origin.clone(),
                        confidence: ctx.confidence.clone(),
                    })
                } else {
                    let suggestion = DecisionSuggested {
                        category: category.clone(),
                        priority: priority.into(),
                        intent: arg(args, "intent").into(),
                        summary: summary.into(),
                        ..Default::default()
                    };
                    review::held(ctx, &below, suggestion)
                }];
                if !below.is_empty() {
                    let why = review::why(ctx, &below);
                    payloads.push(note(format!("待复核 {category} · {priority}: {why}")));
                    let t = ctx
                        .desk
                        .change_ticket_once(arg(args, "ticket_id"), ctx.origin.as_ref(), |_| {
                            Ok(payloads.clone())
                        })
                        .await?;
                    return Ok(review::answer(&t, "classification", &why));
                }
                // The decision leaves a note on the ticket, as in TinyCode.
                if !summary.is_empty() {
                    payloads.push(note(format!("分类 {category} · {priority}: {summary}")));
                }
                let t = ctx
                    .desk
                    .change_ticket_once(arg(args, "ticket_id"), ctx.origin.as_ref(), |_| {
                        Ok(payloads.clone())
                    })
                    .await?;
                Ok(ToolOutput::ok(
                    format!(
                        "{} classified: {} · {} · {} → {}",
                        t.id, t.category, t.priority, t.intent, t.status
                    ),
                    ticket_details(&t),
                ))
            })
        },
    }
}

/// `route_ticket`: The queue, with the reason as a note.
fn route_ticket() -> FnTool {
    FnTool {
        name: "route_ticket",
        description: "Send the ticket to a queue, with the reason (cite the article ids it rests on).",
        parameters: schema(
            json!({ "ticket_id": ticket_id_param(), "queue": text("A queue of this desk"), "reason": text("Why this queue") }),
            &["ticket_id", "queue", "reason"],
        ),
        check: Some(|args, ctx| {
            Box::pin(async move {
                ctx.desk
                    .taxonomy()
                    .queue(arg(args, "queue"))
                    .map_err(|e| ToolError::Invalid(format!("route_ticket: {e}")))?;
                ticket_ready(args, ctx, None).await
            })
        }),
        run: |args, ctx| {
            Box::pin(async move {
                let queue = ctx
                    .desk
                    .taxonomy()
                    .queue(arg(args, "queue"))
                    .map_err(|e| ToolError::Invalid(format!("route_ticket: {e}")))?;
                let reason = arg(args, "reason").trim();
                let below = review::below(ctx);
                let held = |t: &Ticket| !below.is_empty() || t.suggestion.is_some();
                let t = ctx
                    .desk
                    .change_ticket_once(arg(args, "ticket_id"), ctx.origin.as_ref(), |t| {
                        // A ticket whose classification waits for a person
                        // is not routed by the model either.
                        if held(t) {
                            let suggestion = DecisionSuggested {
                                queue: queue.clone(),
                                reason: reason.into(),
                                ..Default::default()
                            };
                            let why = review::why(ctx, &below);
                            return Ok(vec![
                                review::held(ctx, &below, suggestion),
                                note(format!("待复核 → {queue}: {why}")),
                            ]);
                        }
                        Ok(vec![
                            Payload::TicketRouted(TicketRouted {
                                by: None,
                                queue: queue.clone(),
                                reason: reason.into(),
                                origin: ctx.origin.clone(),
                                confidence: ctx.confidence.clone(),
                            }),
                            note(format!("路由 → {queue}: {reason}")),
                        ])
                    })
                    .await?;
                if t.suggestion.as_ref().is_some_and(|s| s.queue == queue) && t.queue != queue {
                    return Ok(review::answer(&t, "routing", &review::why(ctx, &below)));
                }
                Ok(ToolOutput::ok(
                    format!("{} routed to {} → {}", t.id, t.queue, t.status),
                    ticket_details(&t),
                ))
            })
        },
    }
}

/// `escalate_ticket`: L1 (team lead) or L2 (supervisor), with the reason.
fn escalate_ticket() -> FnTool {
    FnTool {
        name: "escalate_ticket",
        description: "Escalate to a team lead (level 1) or a supervisor (level 2). Classify the ticket first; cite the policy article in the reason.",
        parameters: schema(
            json!({ "ticket_id": ticket_id_param(), "level": { "type": "integer", "enum": [1, 2] }, "reason": text("Why, citing the article id") }),
            &["ticket_id", "level", "reason"],
        ),
        check: Some(|args, ctx| Box::pin(ticket_ready(args, ctx, Some("escalate_ticket")))),
        run: |args, ctx| {
            Box::pin(async move {
                let level = args.get("level").and_then(Value::as_u64).unwrap_or(1) as u32;
                let reason = arg(args, "reason").to_string();
                let note = note(format!("升级 L{level}: {reason}"));
                let t = ctx
                .desk
                .change_ticket_once(arg(args, "ticket_id"), ctx.origin.as_ref(), |t| {
                    if t.category.is_empty() {
                        return Err(crate::domain::desk::DomainError::Invalid {
                            field: "ticket_id",
                            problem: format!("{} is not classified yet; call classify_ticket before escalate_ticket", t.id),
                        });
                    }
                    Ok(vec![
                        Payload::TicketEscalated(TicketEscalated { level, reason: reason.clone(), origin: ctx.origin.clone() }),
                        note.clone(),
                    ])
                })
                .await?;
                Ok(ToolOutput::ok(
                    format!("{} escalated to L{} → {}", t.id, t.escalate_level, t.status),
                    ticket_details(&t),
                ))
            })
        },
    }
}

/// `reply_customer`: A reply to the customer (a person approves each one).
fn reply_customer() -> FnTool {
    FnTool {
        name: "reply_customer",
        description: "Send a reply to the customer on the ticket (needs a human's approval).",
        parameters: schema(
            json!({ "ticket_id": ticket_id_param(), "message": text("The reply") }),
            &["ticket_id", "message"],
        ),
        check: Some(|args, ctx| Box::pin(ticket_ready(args, ctx, None))),
        run: |args, ctx| {
            Box::pin(async move {
                let message = TicketMessage {
                    from: "agent".into(),
                    text: arg(args, "message").into(),
                    at: crate::domain::desk::now(),
                    delivery: String::new(),
                };
                let payload = Payload::AgentReplyAdded(AgentReplyAdded {
                    by: None,
                    message: Some(message),
                    origin: ctx.origin.clone(),
                });
                let t = ctx
                    .desk
                    .change_ticket_once(arg(args, "ticket_id"), ctx.origin.as_ref(), |_| {
                        Ok(vec![payload.clone()])
                    })
                    .await?;
                Ok(ToolOutput::ok(
                    format!("reply sent on {} ({} messages)", t.id, t.messages.len()),
                    ticket_details(&t),
                ))
            })
        },
    }
}

/// `propose_knowledge_edit`: A reviewed edit of an article, shown as a diff.
fn propose_knowledge_edit() -> FnTool {
    FnTool {
        name: "propose_knowledge_edit",
        description: "Replace one exact passage of a knowledge article (old_text must occur exactly once), with the rationale. Reviewed by a human.",
        parameters: schema(
            json!({
                "article_id": text("Article id"),
                "old_text": text("The exact passage to replace"),
                "new_text": { "type": "string", "maxLength": 65536 },
                "rationale": text("Why the article must change"),
            }),
            &["article_id", "old_text", "new_text", "rationale"],
        ),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let new_text = args.get("new_text").and_then(Value::as_str).unwrap_or("");
                let old_text = args.get("old_text").and_then(Value::as_str).unwrap_or("");
                let id = arg(args, "article_id");
                let applied = ctx
                    .desk
                    .edit_article(
                        id,
                        old_text,
                        new_text,
                        arg(args, "rationale"),
                        ctx.origin.as_ref(),
                    )
                    .await?;
                let plan = &applied.plan;
                if applied.event.is_none() {
                    return Ok(ToolOutput::ok(
                        format!("no change to {id}: old_text and new_text are the same"),
                        json!({ "articleId": id, "added": 0, "removed": 0 }),
                    ));
                }
                Ok(ToolOutput::ok(
                    format!(
                        "edited {id}: +{} −{}\n{}",
                        plan.added, plan.removed, plan.diff
                    ),
                    json!({ "articleId": id, "added": plan.added, "removed": plan.removed, "diff": plan.diff }),
                ))
            })
        },
    }
}

/// `load_skill`: The full text of a skill (an SOP).
fn load_skill() -> FnTool {
    FnTool {
        name: "load_skill",
        description: "Load the full text of a skill (an SOP) listed in the system prompt.",
        parameters: schema(json!({ "name": text("Skill name") }), &["name"]),
        check: None,
        run: |args, ctx| {
            Box::pin(async move {
                let name = arg(args, "name");
                match ctx.skills.get(name) {
                    Some(skill) if !skill.model_invocable => Err(ToolError::Invalid(format!(
                        "the skill {name:?} is for people to invoke (/{name}); carry on without it"
                    ))),
                    Some(skill) => Ok(ToolOutput::ok(
                        skill.body.clone(),
                        json!({ "skill": skill.name }),
                    )),
                    None => Err(ToolError::Invalid(format!(
                        "there is no skill {name:?}; the skills are {}",
                        ctx.skills.names().join(", ")
                    ))),
                }
            })
        },
    }
}

/// A note on the ticket, stamped now.
fn note(text: String) -> Payload {
    Payload::TicketNoteAdded(TicketNoteAdded {
        by: None,
        note: Some(TicketNote {
            text,
            at: crate::domain::desk::now(),
        }),
    })
}
