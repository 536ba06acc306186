//! `tinycode triage ID… | --all`: one session per ticket, a few at a time,
//! a progress bar, and a summary table. The agent runs in the daemon.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AttachRequest, CreateSessionRequest, GetTicketRequest, ListTicketsRequest, SendMessageRequest,
    Ticket, TurnOutcome,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug, Clone)]
pub struct TriageArgs {
    /// Ticket ids to triage.
    pub ids: Vec<String>,
    /// Every open ticket.
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// How sessions settle approvals: ask (the turn waits for a human; the
    /// table lists what waits), auto or deny. Default: ask on a terminal,
    /// deny otherwise.
    #[arg(long, value_parser = ["ask", "auto", "deny"])]
    pub approve: Option<String>,
    /// provider/model (default: the daemon's).
    #[arg(long)]
    pub model: Option<String>,
    /// Tickets triaged at the same time.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
}

/// What one ticket's triage turn did.
#[derive(Debug, Clone)]
pub struct TriageResult {
    pub id: String,
    pub session: String,
    pub outcome: String,
    /// An escalation level the agent wanted but was not approved.
    pub escalation_asked: Option<u64>,
    /// The approval the turn waits for (the table says how to answer it).
    pub waiting_for: Option<String>,
    pub error: String,
    pub ticket: Option<Ticket>,
}

async fn triage_one(channel: DaemonChannel, id: String, args: &TriageArgs) -> TriageResult {
    let mut result = TriageResult {
        id: id.clone(),
        session: String::new(),
        outcome: "failed".into(),
        escalation_asked: None,
        waiting_for: None,
        error: String::new(),
        ticket: None,
    };
    let mut sessions = SessionsClient::new(channel.clone());
    let run = async {
        let s = sessions
            .create(CreateSessionRequest {
                title: format!("triage {id}"),
                model: args.model.clone().unwrap_or_default(),
                approve: crate::session_cmd::default_approve(args.approve.clone()),
            })
            .await?
            .into_inner();
        result.session = s.id.clone();
        let mut updates = sessions
            .attach(AttachRequest {
                session_id: s.id.clone(),
                from_sequence: s.last_sequence + 1,
            })
            .await?
            .into_inner();
        let sent = sessions
            .send_message(SendMessageRequest {
                session_id: s.id.clone(),
                text: format!("triage {id}"),
            })
            .await?
            .into_inner();
        while let Some(u) = updates.message().await? {
            let Some(Update::Event(e)) = u.update else {
                continue;
            };
            match e.payload {
                Some(Payload::ToolCallFinished(f)) if f.is_error => {
                    let call = f.call.unwrap_or_default();
                    if call.name == "escalate_ticket" && f.content.contains("not approved") {
                        let args: serde_json::Value =
                            serde_json::from_str(&call.arguments_json).unwrap_or_default();
                        result.escalation_asked = args["level"].as_u64();
                    }
                }
                // The turn waits for a human: it goes on in the daemon once
                // someone decides; this ticket is reported as waiting.
                Some(Payload::ApprovalRequested(r)) if r.turn == sent.turn => {
                    let call = r.call.unwrap_or_default();
                    if call.name == "escalate_ticket" {
                        let args: serde_json::Value =
                            serde_json::from_str(&call.arguments_json).unwrap_or_default();
                        result.escalation_asked = args["level"].as_u64();
                    }
                    result.outcome = "waiting for approval".into();
                    result.waiting_for = Some(r.approval_id);
                    break;
                }
                Some(Payload::TurnCompleted(c)) if c.turn == sent.turn => {
                    result.outcome = render::outcome_name(c.outcome).into();
                    result.error = c.error;
                    break;
                }
                _ => {}
            }
        }
        Ok::<_, tonic::Status>(())
    };
    if let Err(status) = run.await {
        result.error = output::describe_status(&status);
    }
    result.ticket = TicketsClient::new(channel)
        .get(GetTicketRequest { id })
        .await
        .ok()
        .map(|r| r.into_inner());
    result
}

/// Triage `ids` with a progress bar; results in input order.
pub async fn triage_all(
    ctx: &Ctx,
    channel: DaemonChannel,
    ids: Vec<String>,
    args: &TriageArgs,
) -> Vec<TriageResult> {
    let bar = if ctx.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(ids.len() as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} triage [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let mut results: Vec<TriageResult> = futures::stream::iter(ids.into_iter().map(|id| {
        let (channel, bar) = (channel.clone(), bar.clone());
        async move {
            let r = triage_one(channel, id, args).await;
            bar.set_message(format!("{} {}", r.id, r.outcome));
            bar.inc(1);
            r
        }
    }))
    .buffer_unordered(args.concurrency.max(1))
    .collect()
    .await;
    bar.finish_and_clear();
    results.sort_by(|a, b| a.id.cmp(&b.id));
    results
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

pub fn result_table(results: &[TriageResult]) -> String {
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let t = r.ticket.clone().unwrap_or_default();
            let escalation = match (t.escalate_level, r.escalation_asked, &r.waiting_for) {
                (l, _, _) if l > 0 => format!("L{l}"),
                (_, Some(l), Some(a)) => format!("L{l} awaits {a}"),
                (_, Some(l), None) => format!("L{l} not approved"),
                _ => "-".into(),
            };
            vec![
                r.id.clone(),
                dash(&t.category),
                dash(&t.priority),
                dash(&t.queue),
                escalation,
                r.outcome.clone(),
            ]
        })
        .collect();
    output::table(
        &[
            "TICKET",
            "CATEGORY",
            "PRI",
            "QUEUE",
            "ESCALATION",
            "OUTCOME",
        ],
        &rows,
    )
}

pub fn results_json(results: &[TriageResult]) -> serde_json::Value {
    serde_json::Value::Array(
        results
            .iter()
            .map(|r| {
                let t = r.ticket.clone().unwrap_or_default();
                serde_json::json!({
                    "ticket": r.id, "session": r.session, "outcome": r.outcome, "error": r.error,
                    "category": t.category, "priority": t.priority, "queue": t.queue, "status": t.status,
                    "escalateLevel": t.escalate_level, "escalationNeedsApproval": r.escalation_asked,
                    "waitingForApproval": r.waiting_for,
                })
            })
            .collect(),
    )
}

/// Ids of every open ticket.
pub async fn open_ticket_ids(channel: &DaemonChannel) -> Result<Vec<String>, tonic::Status> {
    let request = ListTicketsRequest {
        status: "open".into(),
        limit: 10_000,
        ..Default::default()
    };
    let open = TicketsClient::new(channel.clone())
        .list(request)
        .await?
        .into_inner();
    Ok(open.tickets.into_iter().map(|t| t.id).collect())
}

pub async fn run(ctx: &Ctx, args: TriageArgs) -> anyhow::Result<ExitCode> {
    let channel = ctx.connect().await?;
    let ids = if args.all {
        open_ticket_ids(&channel).await?
    } else {
        args.ids.clone()
    };
    if ids.is_empty() {
        anyhow::bail!("nothing to triage: name ticket ids or use --all (it takes open tickets)");
    }
    let results = triage_all(ctx, channel, ids, &args).await;
    if ctx.json {
        output::json_pretty(&results_json(&results));
    } else {
        print!("{}", result_table(&results));
        for r in results.iter().filter(|r| !r.error.is_empty()) {
            eprintln!("{}: {}", r.id, r.error);
        }
    }
    let waiting: Vec<&String> = results
        .iter()
        .filter_map(|r| r.waiting_for.as_ref())
        .collect();
    if !ctx.json && !waiting.is_empty() {
        println!("\n{} triage turns wait for a human:", waiting.len());
        for id in &waiting {
            println!("{}", render::how_to_answer(id));
        }
    }
    let all_completed = results.iter().all(|r| {
        r.waiting_for.is_some() || r.outcome == render::outcome_name(TurnOutcome::Completed as i32)
    });
    Ok(if all_completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
