//! `tinycode run` and `tinycode session …`: talk to the agent. The turn runs
//! in the daemon; this client only sends, attaches and prints.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::{
    AttachRequest, CancelTurnRequest, CompactSessionRequest, CreateSessionRequest,
    DeleteSessionRequest, ForkSessionRequest, GetSessionRequest, ListSessionsRequest,
    PruneSessionsRequest, RenameSessionRequest, SendMessageRequest, SessionInfo, TurnOutcome,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// What to ask, e.g. "triage T-1001".
    pub text: String,
    /// Continue this session.
    #[arg(long, conflicts_with = "continue_")]
    pub session: Option<String>,
    /// Continue the most recent session.
    #[arg(long = "continue", short = 'c')]
    pub continue_: bool,
    /// provider/model for a new session (default: the daemon's).
    #[arg(long)]
    pub model: Option<String>,
    /// How a new session settles approvals: ask (a human decides, from any
    /// client; the run prints the approval and the commands that decide
    /// it), auto or deny. Default: the desk's permissionMode.
    #[arg(long, value_parser = ["ask", "auto", "deny"])]
    pub approve: Option<String>,
    /// End the turn as `timed_out` (exit 124) after this long: `90`, `90s`,
    /// `5m`, `1h` (default: the daemon's `turnTimeoutSeconds`, else none).
    #[arg(long, value_parser = parse_timeout)]
    pub timeout: Option<u32>,
}

/// `90`, `90s`, `5m`: a number, in seconds unless one of `units` (letter,
/// seconds) ends it.
fn seconds(text: &str, units: &[(char, u64)]) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((i, c)) => match units.iter().find(|(u, _)| *u == c) {
            Some((_, unit)) => (&text[..i], *unit),
            None => (text, 1),
        },
        None => (text, 1),
    };
    number.trim().parse::<u64>().ok()?.checked_mul(unit)
}

/// `90`, `90s`, `5m`, `1h` → seconds (1 s to 24 h).
fn parse_timeout(text: &str) -> Result<u32, String> {
    let seconds = seconds(text, &[('s', 1), ('m', 60), ('h', 3600)])
        .and_then(|s| u32::try_from(s).ok())
        .ok_or_else(|| format!("{:?} is not a duration like 90, 90s, 5m or 1h", text.trim()))?;
    if (1..=86_400).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(format!(
            "{:?} must be from 1 second to 24 hours",
            text.trim()
        ))
    }
}

/// `90`, `90s`, `5m`, `1h` → seconds (1 s to 24 h), for any duration
/// option.
pub fn parse_duration_arg(text: &str) -> Result<u64, String> {
    parse_timeout(text).map(u64::from)
}

/// `30d`, `12h`, `90m`, `60s` (or seconds) → seconds.
fn parse_age(text: &str) -> Result<u64, String> {
    seconds(text, &[('d', 86_400), ('h', 3600), ('m', 60), ('s', 1)])
        .filter(|s| *s >= 60)
        .ok_or_else(|| {
            format!(
                "{:?} is not an age of at least a minute, like 30d, 12h or 90m",
                text.trim()
            )
        })
}

/// `--approve` when not given: the desk's `permissionMode` (empty asks
/// the daemon to apply it), at a terminal and in a script alike. With
/// `ask`, a script waits for a person and prints the approval id and the
/// commands that decide it.
pub fn default_approve(given: Option<String>) -> String {
    given.unwrap_or_default()
}

#[derive(Subcommand, Debug)]
pub enum SessionAction {
    /// Create a session; prints its id.
    New {
        #[arg(long, default_value = "")]
        title: String,
        #[arg(long)]
        model: Option<String>,
        /// ask, auto or deny (default: the daemon's permissionMode).
        #[arg(long, default_value = "", value_parser = ["", "ask", "auto", "deny"])]
        approve: String,
    },
    /// Sessions, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// A session's transcript (with --children, its workers after it).
    Show {
        id: String,
        /// Also list the session's workers (sub-agents) and their state.
        #[arg(long)]
        children: bool,
    },
    /// Follow a session live (replays from --from first); Ctrl+C detaches.
    Attach {
        id: String,
        #[arg(long, default_value_t = 1)]
        from: u64,
    },
    /// Send a message and return at once (the turn runs in the daemon).
    Send { id: String, text: String },
    /// Cancel the running turn.
    Cancel { id: String },
    /// Give a session a new title.
    Rename { id: String, title: String },
    /// A new session with a copy of this one's history (up to --at).
    Fork {
        id: String,
        /// Last sequence to copy (default: everything).
        #[arg(long, default_value_t = 0)]
        at: u64,
        #[arg(long, default_value = "")]
        title: String,
    },
    /// Cancel the running turn and remove the session from listings (its
    /// events stay in the log).
    Delete { id: String },
    /// Delete idle sessions with no activity for a while, and their
    /// artifacts (their events stay, marked deleted).
    Prune {
        /// How old: `30d`, `12h`, `90m` (at least a minute).
        #[arg(long, value_parser = parse_age)]
        older_than: u64,
        /// Only list what would go.
        #[arg(long)]
        dry_run: bool,
    },
    /// Summarise older turns now (context.keepRecentMessages stay verbatim).
    Compact { id: String },
}

/// Exit code for a turn outcome: 0 only for `completed`.
fn exit_for(outcome: i32) -> ExitCode {
    match TurnOutcome::try_from(outcome) {
        Ok(TurnOutcome::Completed) => ExitCode::SUCCESS,
        Ok(TurnOutcome::Cancelled) => ExitCode::from(130),
        // As timeout(1) does.
        Ok(TurnOutcome::TimedOut) => ExitCode::from(124),
        _ => ExitCode::from(2),
    }
}

fn print_info(ctx: &Ctx, s: &SessionInfo) {
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.SessionInfo", s));
    } else {
        println!("{}  {}", s.id, s.title);
    }
}

/// A session's workers: `AGENT SESSION STATE STEPS TASK` (JSON lines with
/// --json).
fn print_workers(ctx: &Ctx, s: &SessionInfo) {
    if ctx.json {
        for a in &s.agents {
            output::json_line(&render::message_json("tinycode.v1.AgentInfo", a));
        }
        return;
    }
    if s.agents.is_empty() {
        println!("\n(no workers)");
        return;
    }
    let rows: Vec<Vec<String>> = s
        .agents
        .iter()
        .map(|a| {
            vec![
                a.agent_id.clone(),
                a.session_id.clone(),
                a.state.clone(),
                a.steps.to_string(),
                a.task.chars().take(60).collect(),
            ]
        })
        .collect();
    println!();
    print!(
        "{}",
        output::table(&["AGENT", "SESSION", "STATE", "STEPS", "TASK"], &rows)
    );
}

fn info_row(s: &SessionInfo) -> Vec<String> {
    let state = if s.running { "running" } else { "idle" };
    vec![
        s.id.clone(),
        s.model.clone(),
        s.turns.to_string(),
        state.into(),
        output::clip(&s.title, 50),
    ]
}

pub async fn run(ctx: &Ctx, args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut client = SessionsClient::new(ctx.connect().await?);
    let session = if let Some(id) = args.session {
        client
            .get(GetSessionRequest {
                id,
                ..Default::default()
            })
            .await?
            .into_inner()
    } else if args.continue_ {
        let latest = client
            .list(ListSessionsRequest {
                limit: 1,
                ..Default::default()
            })
            .await?
            .into_inner()
            .sessions;
        latest.into_iter().next().ok_or_else(|| {
            anyhow::anyhow!("there is no session to continue; drop --continue to start one")
        })?
    } else {
        let title: String = args.text.chars().take(60).collect();
        client
            .create(CreateSessionRequest {
                title,
                model: args.model.unwrap_or_default(),
                approve: default_approve(args.approve),
            })
            .await?
            .into_inner()
    };
    if !ctx.json {
        eprintln!("session {} · {}", session.id, session.model);
    }
    // Attach before sending so nothing of the turn is missed.
    let mut updates = client
        .attach(AttachRequest {
            session_id: session.id.clone(),
            from_sequence: session.last_sequence + 1,
        })
        .await?
        .into_inner();
    let sent = client
        .send_message(SendMessageRequest {
            session_id: session.id.clone(),
            text: args.text,
            timeout_seconds: args.timeout.unwrap_or(0),
        })
        .await?
        .into_inner();
    if sent.queued && !ctx.json {
        eprintln!("(queued behind the running turn)");
    }
    let outcome = print_updates(ctx, &mut updates, Some(sent.turn)).await?;
    Ok(outcome.map(exit_for).unwrap_or(ExitCode::FAILURE))
}

/// Print updates until turn `until` completes (or forever with `None`).
/// Returns that turn's outcome.
async fn print_updates(
    ctx: &Ctx,
    updates: &mut tonic::Streaming<tinycode_shared::proto::SessionUpdate>,
    until: Option<u64>,
) -> anyhow::Result<Option<i32>> {
    let mut streamed_text = false;
    let mut out = std::io::stdout();
    while let Some(update) = updates.message().await? {
        if ctx.json {
            output::json_line(&render::message_json("tinycode.v1.SessionUpdate", &update));
        }
        let Some(update) = update.update else {
            continue;
        };
        match update {
            Update::Delta(d) if d.kind == "text" => {
                if !ctx.json {
                    print!("{}", d.text);
                    let _ = out.flush();
                }
                streamed_text = true;
            }
            Update::Delta(_) => {}
            Update::Event(e) => {
                let Some(payload) = e.payload else { continue };
                match &payload {
                    _ if ctx.json => {}
                    Payload::AssistantMessageAdded(m) => {
                        if streamed_text {
                            println!();
                        } else if !m.text.is_empty() {
                            println!("{}", m.text);
                        }
                        streamed_text = false;
                    }
                    other => {
                        if let Some(line) = render::session_line(other) {
                            println!("{line}");
                        }
                    }
                }
                if let Payload::TurnCompleted(c) = &payload
                    && Some(c.turn) == until
                {
                    return Ok(Some(c.outcome));
                }
            }
        }
    }
    if until.is_some() {
        anyhow::bail!(
            "the connection to tinycoded ended before the turn finished; `tinycode session attach` resumes"
        );
    }
    Ok(None)
}

pub async fn session(ctx: &Ctx, action: SessionAction) -> anyhow::Result<ExitCode> {
    let channel: DaemonChannel = ctx.connect().await?;
    let mut client = SessionsClient::new(channel);
    match action {
        SessionAction::New {
            title,
            model,
            approve,
        } => {
            let s = client
                .create(CreateSessionRequest {
                    title,
                    model: model.unwrap_or_default(),
                    approve,
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.SessionInfo", &s));
            } else {
                println!("{}", s.id);
            }
        }
        SessionAction::List { limit } => {
            let list = client
                .list(ListSessionsRequest {
                    limit,
                    ..Default::default()
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json(
                    "tinycode.v1.ListSessionsResponse",
                    &list,
                ));
            } else {
                let rows: Vec<Vec<String>> = list.sessions.iter().map(info_row).collect();
                print!(
                    "{}",
                    output::table(&["ID", "MODEL", "TURNS", "STATE", "TITLE"], &rows)
                );
                if list.more {
                    eprintln!(
                        "(the newest {limit} sessions; there are more: `--limit N` shows more)"
                    );
                }
            }
        }
        SessionAction::Show { id, children } => {
            let s = client
                .get(GetSessionRequest {
                    id: id.clone(),
                    ..Default::default()
                })
                .await?
                .into_inner();
            let mut updates = client
                .attach(AttachRequest {
                    session_id: id,
                    from_sequence: s.created_sequence,
                })
                .await?
                .into_inner();
            // Replay up to what was stored when we asked, then stop.
            let mut out = Vec::new();
            while let Some(u) = updates.message().await? {
                let Some(Update::Event(e)) = u.update else {
                    continue;
                };
                let last = e.sequence >= s.last_sequence;
                out.push(e);
                if last {
                    break;
                }
            }
            for e in out {
                if ctx.json {
                    output::json_line(&render::event_json(&e));
                    continue;
                }
                if let Some(line) = e.payload.as_ref().and_then(render::session_line) {
                    println!("{line}");
                }
            }
            if children {
                print_workers(ctx, &s);
            }
        }
        SessionAction::Attach { id, from } => {
            let mut updates = client
                .attach(AttachRequest {
                    session_id: id,
                    from_sequence: from,
                })
                .await?
                .into_inner();
            print_updates(ctx, &mut updates, None).await?;
        }
        SessionAction::Send { id, text } => {
            let sent = client
                .send_message(SendMessageRequest {
                    session_id: id,
                    text,
                    ..Default::default()
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json(
                    "tinycode.v1.SendMessageResponse",
                    &sent,
                ));
            } else {
                println!(
                    "turn {}{}",
                    sent.turn,
                    if sent.queued { " (queued)" } else { "" }
                );
            }
        }
        SessionAction::Cancel { id } => {
            let r = client
                .cancel_turn(CancelTurnRequest { session_id: id })
                .await?
                .into_inner();
            println!(
                "{}",
                if r.cancelled {
                    "cancelled"
                } else {
                    "no turn was running"
                }
            );
        }
        SessionAction::Rename { id, title } => {
            let request = RenameSessionRequest {
                session_id: id,
                title,
            };
            print_info(ctx, &client.rename(request).await?.into_inner());
        }
        SessionAction::Fork { id, at, title } => {
            let request = ForkSessionRequest {
                session_id: id,
                up_to_sequence: at,
                title,
            };
            print_info(ctx, &client.fork(request).await?.into_inner());
        }
        SessionAction::Prune {
            older_than,
            dry_run,
        } => {
            let r = client
                .prune(PruneSessionsRequest {
                    older_than_seconds: older_than,
                    dry_run,
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&serde_json::json!({
                    "sessions": r.session_ids, "dryRun": dry_run,
                }));
            } else if r.session_ids.is_empty() {
                println!("no idle session is that old");
            } else {
                let verb = if dry_run { "would delete" } else { "deleted" };
                println!(
                    "{verb} {} sessions: {}",
                    r.session_ids.len(),
                    r.session_ids.join(" ")
                );
            }
        }
        SessionAction::Delete { id } => {
            let request = DeleteSessionRequest {
                session_id: id.clone(),
            };
            let r = client.delete(request).await?.into_inner();
            if ctx.json {
                output::json_pretty(
                    &serde_json::json!({ "deleted": id, "cancelledTurn": r.cancelled_turn }),
                );
            } else {
                let note = if r.cancelled_turn {
                    " (its running turn was cancelled)"
                } else {
                    ""
                };
                println!("deleted {id}{note}");
            }
        }
        SessionAction::Compact { id } => {
            let r = client
                .compact(CompactSessionRequest {
                    session_id: id.clone(),
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json(
                    "tinycode.v1.CompactSessionResponse",
                    &r,
                ));
            } else if r.compacted {
                println!(
                    "compacted {id}: {} messages before turn {} summarised; context {} → {} tokens",
                    r.summarized_messages, r.first_kept_turn, r.tokens_before, r.tokens_after
                );
            } else {
                println!("{id}: nothing to compact (the recent messages are all kept verbatim)");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn timeouts_and_ages_parse_with_their_units_and_bounds() {
        assert_eq!(parse_timeout("90"), Ok(90));
        assert_eq!(parse_timeout("5m"), Ok(300));
        assert_eq!(parse_timeout("1h"), Ok(3600));
        assert!(
            parse_timeout("2 days")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(parse_timeout("1d").unwrap_err().contains("not a duration"));
        assert!(
            parse_timeout("25h")
                .unwrap_err()
                .contains("from 1 second to 24 hours")
        );
        assert!(parse_timeout("0").is_err());
        assert_eq!(parse_age("30d"), Ok(30 * 86_400));
        assert_eq!(parse_age("90m"), Ok(5400));
        assert!(parse_age("30").unwrap_err().contains("at least a minute"));
    }
}
