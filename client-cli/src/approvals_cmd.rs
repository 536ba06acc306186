//! `tinycode approvals …`: the inbox of tool calls waiting for a human,
//! across sessions. Deciding here resumes the waiting turn in the daemon.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::approvals_client::ApprovalsClient;
use tinycode_shared::proto::{
    ApprovalDecision, ApprovalInfo, ApprovalState, DecideApprovalRequest, GetApprovalRequest,
    ListApprovalsRequest, ListRulesRequest, RevokeRuleRequest, WatchApprovalsRequest,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum ApprovalsAction {
    /// Approvals waiting for a human (--all: decided and cancelled too).
    List {
        #[arg(long)]
        all: bool,
        #[arg(long)]
        session: Option<String>,
    },
    /// One approval: the call, the reason, and a knowledge edit's diff.
    Show { id: String },
    /// Allow the call once (--always: remember for this tool).
    Approve {
        id: String,
        /// Remember "always allow" for this tool (never for knowledge edits).
        #[arg(long)]
        always: bool,
        /// With --always: for every session, not only this one.
        #[arg(long, requires = "always")]
        all_sessions: bool,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Answer an agent's question (`ask_user`): the text, or one of the
    /// choices it offers (its text or its number).
    Answer { id: String, answer: String },
    /// Refuse the call (or decline a question); the reason is given to the
    /// model.
    Deny {
        id: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Follow approval events live (Ctrl+C stops).
    Watch {
        /// Replay from this sequence first (default: only new events).
        #[arg(long)]
        from: Option<u64>,
    },
    /// Remembered "always allow" rules.
    Rules {
        #[arg(long)]
        session: Option<String>,
    },
    /// Forget a remembered rule.
    Revoke { rule_id: String },
}

fn state_name(state: i32) -> &'static str {
    match ApprovalState::try_from(state).unwrap_or_default() {
        ApprovalState::Pending => "pending",
        ApprovalState::Allowed => "allowed",
        ApprovalState::Denied => "denied",
        ApprovalState::Cancelled => "cancelled",
        ApprovalState::Unspecified => "?",
    }
}

fn json(info: &ApprovalInfo) -> serde_json::Value {
    render::message_json("tinycode.v1.ApprovalInfo", info)
}

/// A unified diff, coloured on a terminal.
fn print_diff(diff: &str) {
    let colour = std::io::stdout().is_terminal();
    for line in diff.lines() {
        let code = match line.chars().next() {
            _ if !colour => "",
            Some('+') if !line.starts_with("+++") => "\x1b[32m",
            Some('-') if !line.starts_with("---") => "\x1b[31m",
            Some('@') => "\x1b[36m",
            _ => "",
        };
        if code.is_empty() {
            println!("{line}");
        } else {
            println!("{code}{line}\x1b[0m");
        }
    }
}

fn show(info: &ApprovalInfo) {
    let r = info.request.clone().unwrap_or_default();
    let call = r.call.clone().unwrap_or_default();
    println!("{}  {}", r.approval_id, state_name(info.state));
    if r.session_id.is_empty() {
        println!("by       {}", tinycode_shared::render::requested_by(&r));
    } else {
        println!("session  {} (turn {})", r.session_id, r.turn);
    }
    println!("tool     {}", call.name);
    println!("args     {}", call.arguments_json);
    println!("why      {}", r.reason);
    if !r.question.is_empty() {
        println!("question {}", r.question);
        for (i, c) in r.choices.iter().enumerate() {
            println!("  {}. {c}", i + 1);
        }
    }
    if !r.article_id.is_empty() {
        println!("article  {}", r.article_id);
        println!("rationale {}", r.rationale);
        println!("before   {}", r.before_text);
        println!("after    {}", r.after_text);
        println!("diff     +{} −{}", r.added, r.removed);
        print_diff(&r.diff);
    }
    if let Some(d) = &info.decision {
        println!("{}", render::approval_decided_line(d));
    } else if !info.cancelled_reason.is_empty() {
        println!("cancelled: {}", info.cancelled_reason);
    } else {
        println!("{}", render::how_to_answer_request(&r));
    }
}

/// The daemon's approvals service, as every subcommand here uses it.
type Client = ApprovalsClient<tinycode_shared::client::DaemonChannel>;

/// `tinycode approvals …`: one function per subcommand.
pub async fn run(ctx: &Ctx, action: ApprovalsAction) -> anyhow::Result<ExitCode> {
    let mut client = ApprovalsClient::new(ctx.connect().await?);
    let client = &mut client;
    match action {
        ApprovalsAction::List { all, session } => list(ctx, client, all, session).await?,
        ApprovalsAction::Show { id } => show_one(ctx, client, id).await?,
        ApprovalsAction::Approve {
            id,
            always,
            all_sessions,
            reason,
        } => {
            let decision = if always {
                ApprovalDecision::AlwaysAllow
            } else {
                ApprovalDecision::AllowOnce
            };
            decide(ctx, client, id, decision, reason, all_sessions).await?;
        }
        ApprovalsAction::Answer { id, answer } => answer_question(ctx, client, id, answer).await?,
        ApprovalsAction::Deny { id, reason } => {
            decide(ctx, client, id, ApprovalDecision::Deny, reason, false).await?;
        }
        ApprovalsAction::Watch { from } => watch(ctx, client, from).await?,
        ApprovalsAction::Rules { session } => rules(ctx, client, session).await?,
        ApprovalsAction::Revoke { rule_id } => revoke(ctx, client, rule_id).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Every page of the approvals `list` asks for.
async fn fetch_all(
    client: &mut Client,
    all: bool,
    session: Option<String>,
) -> anyhow::Result<Vec<ApprovalInfo>> {
    let mut request = ListApprovalsRequest {
        all,
        session_id: session.unwrap_or_default(),
        limit: 1_000,
        // The inbox by urgency: the ticket's SLA due time first.
        order: if all { String::new() } else { "due".into() },
        ..Default::default()
    };
    let mut list = Vec::new();
    loop {
        let page = client.list(request.clone()).await?.into_inner();
        list.extend(page.approvals);
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    Ok(list)
}

/// `approvals list`: `ID STATE ASKED BY TOOL ARGUMENTS`.
async fn list(
    ctx: &Ctx,
    client: &mut Client,
    all: bool,
    session: Option<String>,
) -> anyhow::Result<()> {
    let list = fetch_all(client, all, session).await?;
    if ctx.json {
        output::json_pretty(&serde_json::Value::Array(list.iter().map(json).collect()));
        return Ok(());
    }
    if list.is_empty() {
        println!("no approvals waiting");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|a| {
            let r = a.request.clone().unwrap_or_default();
            let by = tinycode_shared::render::requested_by(&r);
            let call = r.call.unwrap_or_default();
            vec![
                r.approval_id,
                state_name(a.state).into(),
                match a.ticket_due_at.as_str() {
                    "" => "-".into(),
                    due => due.get(..16).unwrap_or(due).replace('T', " "),
                },
                by,
                call.name,
                output::clip(&call.arguments_json, 50),
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(
            &["ID", "STATE", "TICKET DUE", "ASKED BY", "TOOL", "ARGUMENTS"],
            &rows
        )
    );
    Ok(())
}

/// `approvals show`: one approval in full.
async fn show_one(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<()> {
    let info = client
        .get(GetApprovalRequest { approval_id: id })
        .await?
        .into_inner();
    if ctx.json {
        output::json_pretty(&json(&info));
    } else {
        show(&info);
    }
    Ok(())
}

/// `approvals answer`: answer an agent's question.
async fn answer_question(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    answer: String,
) -> anyhow::Result<()> {
    let request = DecideApprovalRequest {
        approval_id: id,
        decision: ApprovalDecision::AllowOnce as i32,
        answer,
        ..DecideApprovalRequest::default()
    };
    send_decision(ctx, client, request).await
}

/// `approvals watch`: approval events as they happen (replayed from `from`).
async fn watch(ctx: &Ctx, client: &mut Client, from: Option<u64>) -> anyhow::Result<()> {
    // Without --from: only what happens from now on.
    let from_sequence = match from {
        Some(n) => n,
        None => crate::events_cmd::head(ctx).await? + 1,
    };
    let mut events = client
        .watch(WatchApprovalsRequest { from_sequence })
        .await?
        .into_inner();
    while let Some(e) = events.message().await? {
        if ctx.json {
            output::json_line(&render::message_json("tinycode.v1.Event", &e));
            continue;
        }
        if let Some(line) = e.payload.as_ref().and_then(render::session_line) {
            println!("{line}");
        }
    }
    Ok(())
}

/// `approvals rules`: the remembered "always allow" rules.
async fn rules(ctx: &Ctx, client: &mut Client, session: Option<String>) -> anyhow::Result<()> {
    let rules = client
        .list_rules(ListRulesRequest {
            session_id: session.unwrap_or_default(),
        })
        .await?
        .into_inner()
        .rules;
    if ctx.json {
        output::json_pretty(&serde_json::Value::Array(
            rules
                .iter()
                .map(|r| render::message_json("tinycode.v1.PermissionRule", r))
                .collect(),
        ));
    } else if rules.is_empty() {
        println!("no remembered rules");
    } else {
        let rows: Vec<Vec<String>> = rules
            .iter()
            .map(|r| {
                vec![
                    r.rule_id.clone(),
                    r.tool.clone(),
                    if r.session_id.is_empty() {
                        "every session".into()
                    } else {
                        r.session_id.clone()
                    },
                    r.from_approval.clone(),
                ]
            })
            .collect();
        print!(
            "{}",
            output::table(&["RULE", "TOOL", "SCOPE", "FROM"], &rows)
        );
    }
    Ok(())
}

/// `approvals revoke`: forget a remembered rule.
async fn revoke(ctx: &Ctx, client: &mut Client, rule_id: String) -> anyhow::Result<()> {
    client
        .revoke_rule(RevokeRuleRequest {
            rule_id: rule_id.clone(),
        })
        .await?;
    if ctx.json {
        output::json_pretty(&serde_json::json!({ "revoked": rule_id }));
    } else {
        println!("revoked {rule_id}");
    }
    Ok(())
}

/// Allow or deny approval `id`, and print the decision.
async fn decide(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    decision: ApprovalDecision,
    reason: String,
    workspace_wide: bool,
) -> anyhow::Result<()> {
    let request = DecideApprovalRequest {
        approval_id: id,
        decision: decision as i32,
        reason,
        workspace_wide,
        answer: String::new(),
    };
    send_decision(ctx, client, request).await
}

/// Send one decision (or a question's answer) and print what was decided.
async fn send_decision(
    ctx: &Ctx,
    client: &mut Client,
    request: DecideApprovalRequest,
) -> anyhow::Result<()> {
    let info = client.decide(request).await?.into_inner();
    if ctx.json {
        output::json_pretty(&json(&info));
    } else if let Some(d) = &info.decision {
        println!("{}", render::approval_decided_line(d));
    }
    Ok(())
}
