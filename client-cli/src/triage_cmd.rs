//! `tinycode triage ID… | --all`: ask the daemon's triage worker to triage
//! tickets, follow them with a progress bar, print a summary table.
//! `tinycode triage status` and `tinycode triage watch` show the worker.
//! The worker decides everything; this only asks and prints.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::approvals_client::ApprovalsClient;
use tinycode_shared::proto::triage_client::TriageClient;
use tinycode_shared::proto::{
    EnqueueTriageRequest, EnqueueTriageResponse, GetApprovalRequest, TriageItem, TriageState,
    TriageStatus, TriageStatusRequest,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TriageArgs {
    #[command(subcommand)]
    pub view: Option<TriageView>,
    /// Ticket ids to triage (again, if they were triaged before).
    pub ids: Vec<String>,
    /// Every open ticket never triaged (and follow those in progress).
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// How a new triage session settles approvals: ask (the turn waits for
    /// a human; the table lists what waits), auto or deny. Default: the
    /// desk's permissionMode.
    #[arg(long, value_parser = ["ask", "auto", "deny"])]
    pub approve: Option<String>,
    /// provider/model of a new triage session (default: the daemon's).
    #[arg(long)]
    pub model: Option<String>,
}

#[derive(Subcommand, Debug, Clone)]
pub enum TriageView {
    /// The worker: counts by state, tickets per queue, each ticket's triage.
    Status {
        /// Only these tickets.
        ids: Vec<String>,
    },
    /// Follow the worker live (Ctrl+C to stop).
    Watch {
        /// Only these tickets.
        ids: Vec<String>,
    },
    /// The review queue: model decisions held below `triage.reviewBelow`;
    /// `accept ID` or `correct ID --category … --queue …` decides one.
    Review {
        #[command(subcommand)]
        action: Option<crate::review_cmd::ReviewAction>,
    },
}

fn state(i: &TriageItem) -> TriageState {
    TriageState::try_from(i.state).unwrap_or_default()
}

/// Finished, or parked until a human decides.
fn settled(i: &TriageItem) -> bool {
    matches!(
        state(i),
        TriageState::Done
            | TriageState::Failed
            | TriageState::Skipped
            | TriageState::WaitingForApproval
    )
}

/// `Triage.Watch` of `ids` (all when empty), with items.
async fn watch_status(
    channel: &DaemonChannel,
    ids: Vec<String>,
) -> Result<tonic::Streaming<TriageStatus>, tonic::Status> {
    let request = TriageStatusRequest {
        ticket_ids: ids,
        counts_only: false,
        ..Default::default()
    };
    Ok(TriageClient::new(channel.clone())
        .watch(request)
        .await?
        .into_inner())
}

/// Follow `ids` (all when empty) until each is settled and nothing is
/// queued or running, with a progress bar. Returns the last status.
pub async fn follow(
    ctx: &Ctx,
    channel: &DaemonChannel,
    ids: Vec<String>,
) -> anyhow::Result<TriageStatus> {
    let bar = if ctx.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} triage [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    let whole_board = ids.is_empty();
    let mut updates = watch_status(channel, ids).await?;
    let mut last = TriageStatus::default();
    while let Some(status) = updates.message().await? {
        let done = status.items.iter().filter(|i| settled(i)).count();
        bar.set_length(status.items.len() as u64);
        bar.set_position(done as u64);
        bar.set_message(render::triage_counts(&status));
        let in_flight = status.queued + status.running + status.retrying;
        let finished = done == status.items.len() && (!whole_board || in_flight == 0);
        last = status;
        if finished {
            break;
        }
    }
    bar.finish_and_clear();
    Ok(last)
}

/// The escalation level each waiting approval asks for, by approval id.
async fn asked_levels(channel: &DaemonChannel, items: &[TriageItem]) -> HashMap<String, u64> {
    let mut levels = HashMap::new();
    let mut approvals = ApprovalsClient::new(channel.clone());
    for id in items.iter().flat_map(|i| i.approval_ids.iter()) {
        let Ok(info) = approvals
            .get(GetApprovalRequest {
                approval_id: id.clone(),
            })
            .await
        else {
            continue;
        };
        let call = info
            .into_inner()
            .request
            .and_then(|r| r.call)
            .unwrap_or_default();
        let args: serde_json::Value =
            serde_json::from_str(&call.arguments_json).unwrap_or_default();
        if call.name == "escalate_ticket"
            && let Some(level) = args["level"].as_u64()
        {
            levels.insert(id.clone(), level);
        }
    }
    levels
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// `L2`, `L2 awaits A-1`, or `-`.
fn escalation(i: &TriageItem, levels: &HashMap<String, u64>) -> String {
    if i.escalate_level > 0 {
        return format!("L{}", i.escalate_level);
    }
    i.approval_ids
        .iter()
        .find_map(|a| levels.get(a).map(|l| format!("L{l} awaits {a}")))
        .unwrap_or_else(|| "-".into())
}

/// The turn's outcome, or what the triage waits for.
fn outcome(i: &TriageItem) -> String {
    match state(i) {
        TriageState::Done | TriageState::Failed if !i.outcome.is_empty() => i.outcome.clone(),
        s => render::triage_state_name(s as i32).to_string(),
    }
}

pub fn result_table(items: &[TriageItem], levels: &HashMap<String, u64>) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            vec![
                i.ticket_id.clone(),
                dash(&i.category),
                dash(&i.priority),
                dash(&i.queue),
                escalation(i, levels),
                outcome(i),
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

pub fn results_json(items: &[TriageItem], levels: &HashMap<String, u64>) -> serde_json::Value {
    serde_json::Value::Array(
        items
            .iter()
            .map(|i| {
                let asked = i.approval_ids.iter().find_map(|a| levels.get(a));
                serde_json::json!({
                    "ticket": i.ticket_id, "session": i.session_id,
                    "state": render::triage_state_name(i.state), "outcome": outcome(i),
                    "attempts": i.attempt, "error": i.error,
                    "category": i.category, "priority": i.priority, "queue": i.queue,
                    "status": i.ticket_status, "escalateLevel": i.escalate_level,
                    "escalationNeedsApproval": asked,
                    "waitingForApproval": i.approval_ids.first(),
                })
            })
            .collect(),
    )
}

pub fn status_json(s: &TriageStatus, levels: &HashMap<String, u64>) -> serde_json::Value {
    serde_json::json!({
        "autoTriage": s.auto_triage, "concurrency": s.concurrency,
        "queued": s.queued, "running": s.running, "waitingForApproval": s.waiting_for_approval,
        "retrying": s.retrying, "done": s.done, "failed": s.failed, "skipped": s.skipped,
        "incomplete": s.incomplete,
        "queues": s.queues.iter().map(|q| serde_json::json!({"queue": q.queue, "tickets": q.tickets})).collect::<Vec<_>>(),
        "items": results_json(&s.items, levels),
        "sequence": s.sequence,
    })
}

/// Ask the worker to triage what `args` names.
pub async fn enqueue(
    channel: &DaemonChannel,
    args: &TriageArgs,
) -> Result<EnqueueTriageResponse, tonic::Status> {
    let request = EnqueueTriageRequest {
        ticket_ids: args.ids.clone(),
        all_open: args.all,
        approve: crate::session_cmd::default_approve(args.approve.clone()),
        model: args.model.clone().unwrap_or_default(),
    };
    Ok(TriageClient::new(channel.clone())
        .enqueue(request)
        .await?
        .into_inner())
}

/// Follow `ids` (all when empty) until settled: the items by ticket id,
/// and the escalation level each waiting approval asks for.
pub async fn follow_items(
    ctx: &Ctx,
    channel: &DaemonChannel,
    ids: Vec<String>,
) -> anyhow::Result<(Vec<TriageItem>, HashMap<String, u64>)> {
    let mut items = follow(ctx, channel, ids).await?.items;
    items.sort_by(|a, b| a.ticket_id.cmp(&b.ticket_id));
    let levels = asked_levels(channel, &items).await;
    Ok((items, levels))
}

/// Ask for triage and follow it; the items of the tickets asked for.
pub async fn request(
    ctx: &Ctx,
    channel: &DaemonChannel,
    args: &TriageArgs,
) -> anyhow::Result<(Vec<TriageItem>, HashMap<String, u64>)> {
    let asked = enqueue(channel, args).await?;
    let mut ids: Vec<String> = asked.queued.into_iter().chain(asked.already).collect();
    if ids.is_empty() {
        return Ok((Vec::new(), HashMap::new()));
    }
    ids.sort();
    follow_items(ctx, channel, ids).await
}

/// Print the commands that answer each waiting approval.
pub fn print_waiting(items: &[TriageItem]) {
    let waiting: Vec<&String> = items.iter().flat_map(|i| i.approval_ids.iter()).collect();
    if !waiting.is_empty() {
        println!(
            "\n{} triage turns wait for a human (they go on in the daemon once decided):",
            waiting.len()
        );
        for id in &waiting {
            println!("{}", render::how_to_answer(id));
        }
    }
}

pub async fn run(ctx: &Ctx, args: TriageArgs) -> anyhow::Result<ExitCode> {
    if let Some(TriageView::Review { action }) = &args.view {
        return crate::review_cmd::run(ctx, action.clone()).await;
    }
    let channel = ctx.connect().await?;
    match &args.view {
        Some(TriageView::Status { ids }) => return status(ctx, &channel, ids.clone()).await,
        Some(TriageView::Watch { ids }) => return watch(ctx, &channel, ids.clone()).await,
        Some(TriageView::Review { .. }) | None => {}
    }
    if args.ids.is_empty() && !args.all {
        anyhow::bail!(
            "nothing to triage: name ticket ids or use --all (open tickets never triaged); `tinycode triage status` shows the worker"
        );
    }
    let (items, levels) = request(ctx, &channel, &args).await?;
    if items.is_empty() {
        if !ctx.json {
            println!(
                "{}",
                tinycode_shared::hint::localize(
                    "nothing to triage: every open ticket has been triaged (`tinycode triage status`)"
                )
            );
        } else {
            output::json_pretty(&serde_json::json!([]));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if ctx.json {
        output::json_pretty(&results_json(&items, &levels));
    } else {
        print!("{}", result_table(&items, &levels));
        for i in items.iter().filter(|i| !i.error.is_empty()) {
            eprintln!("{}: {}", i.ticket_id, i.error);
        }
        print_waiting(&items);
    }
    let all_well = items.iter().all(|i| {
        matches!(
            state(i),
            TriageState::Done | TriageState::WaitingForApproval
        )
    });
    Ok(if all_well {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

async fn status(ctx: &Ctx, channel: &DaemonChannel, ids: Vec<String>) -> anyhow::Result<ExitCode> {
    // Every page: the board can outgrow one message.
    let mut client = TriageClient::new(channel.clone());
    let mut s = TriageStatus::default();
    let mut page_token = String::new();
    loop {
        let page = client
            .get_status(TriageStatusRequest {
                ticket_ids: ids.clone(),
                counts_only: false,
                page_token,
                ..Default::default()
            })
            .await?
            .into_inner();
        let items = std::mem::take(&mut s.items);
        s = TriageStatus {
            items: items.into_iter().chain(page.items.clone()).collect(),
            ..page
        };
        if s.next_page_token.is_empty() {
            break;
        }
        page_token = std::mem::take(&mut s.next_page_token);
    }
    let levels = asked_levels(channel, &s.items).await;
    if ctx.json {
        output::json_pretty(&status_json(&s, &levels));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} (auto-triage {}, {} at a time)",
        render::triage_counts(&s),
        if s.auto_triage { "on" } else { "off" },
        s.concurrency
    );
    if !s.queues.is_empty() {
        let queues: Vec<String> = s
            .queues
            .iter()
            .map(|q| format!("{} {}", q.queue, q.tickets))
            .collect();
        println!("routed: {}", queues.join(" · "));
    }
    if !s.items.is_empty() {
        println!();
        print!("{}", result_table(&s.items, &levels));
    }
    print_waiting(&s.items);
    Ok(ExitCode::SUCCESS)
}

/// One line per ticket whose triage changed, and the counts when they change.
async fn watch(ctx: &Ctx, channel: &DaemonChannel, ids: Vec<String>) -> anyhow::Result<ExitCode> {
    let mut updates = watch_status(channel, ids).await?;
    let mut seen: HashMap<String, (i32, u64)> = HashMap::new();
    let mut last_counts = String::new();
    while let Some(s) = updates.message().await? {
        if ctx.json {
            output::json_line(&status_json(&s, &HashMap::new()));
            continue;
        }
        for i in &s.items {
            let key = (i.state, i.sequence);
            if seen.get(&i.ticket_id) == Some(&key) {
                continue;
            }
            seen.insert(i.ticket_id.clone(), key);
            let mut line = format!("{} {}", i.ticket_id, render::triage_state_name(i.state));
            let facts: Vec<&str> = [&i.category, &i.priority, &i.queue]
                .into_iter()
                .filter(|f| !f.is_empty())
                .map(String::as_str)
                .collect();
            if !facts.is_empty() {
                line.push_str(&format!(" · {}", facts.join(" · ")));
            }
            if i.escalate_level > 0 {
                line.push_str(&format!(" · L{}", i.escalate_level));
            }
            if let Some(a) = i.approval_ids.first() {
                line.push_str(&format!(" · awaits {a}"));
            }
            if !i.error.is_empty() {
                line.push_str(&format!(" · {}", i.error));
            }
            println!("{line}");
        }
        let counts = render::triage_counts(&s);
        if counts != last_counts {
            println!("{counts}");
            last_counts = counts;
        }
    }
    Ok(ExitCode::SUCCESS)
}
