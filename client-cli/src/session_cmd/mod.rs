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
    AttachRequest, CreateSessionRequest, GetSessionRequest, ListSessionsRequest,
    SendMessageRequest, TurnOutcome,
};
use tinycode_shared::render;

use crate::{Ctx, output};

mod actions;

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
    /// provider/model: a new session's model, or (with --session / -c) the
    /// session's model from this turn on (default: the session's, else the
    /// daemon's).
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
    /// The model of the session's next turns (`offline`, `openai/gpt-4o`,
    /// …; `tinycode models` lists them); a running turn keeps its own.
    Model { id: String, model: String },
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
                model: args.model.clone().unwrap_or_default(),
                approve: default_approve(args.approve),
            })
            .await?
            .into_inner()
    };
    if !ctx.json {
        eprintln!("session {} · {}", session.id, session.model);
    }
    // Attached from the session's next event, so nothing of the turn is
    // missed whichever of the two calls the daemon answers first: both go
    // out at once, on the one connection.
    let mut attacher = client.clone();
    let (updates, sent) = tokio::join!(
        attacher.attach(AttachRequest {
            session_id: session.id.clone(),
            from_sequence: session.last_sequence + 1,
        }),
        client.send_message(SendMessageRequest {
            session_id: session.id.clone(),
            text: args.text,
            timeout_seconds: args.timeout.unwrap_or(0),
            model: args.model.clone().unwrap_or_default(),
        })
    );
    // The send's error first: it says why nothing runs.
    let sent = sent?.into_inner();
    let mut updates = updates
        .map_err(|e| {
            anyhow::anyhow!(
                "the message was sent (turn {}), but following it failed: {}; follow it with `tinycode session attach {}` (sending again would run it twice)",
                sent.turn,
                crate::output::describe_status(&e),
                session.id
            )
        })?
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

/// `tinycode session …`: one function per subcommand, in [`actions`].
pub async fn session(ctx: &Ctx, action: SessionAction) -> anyhow::Result<ExitCode> {
    let channel: DaemonChannel = ctx.connect().await?;
    let mut client = SessionsClient::new(channel);
    let client = &mut client;
    match action {
        SessionAction::New {
            title,
            model,
            approve,
        } => actions::new(ctx, client, title, model, approve).await?,
        SessionAction::List { limit } => actions::list(ctx, client, limit).await?,
        SessionAction::Show { id, children } => actions::show(ctx, client, id, children).await?,
        SessionAction::Attach { id, from } => actions::attach(ctx, client, id, from).await?,
        SessionAction::Send { id, text } => actions::send(ctx, client, id, text).await?,
        SessionAction::Cancel { id } => actions::cancel(client, id).await?,
        SessionAction::Rename { id, title } => actions::rename(ctx, client, id, title).await?,
        SessionAction::Model { id, model } => actions::set_model(ctx, client, id, model).await?,
        SessionAction::Fork { id, at, title } => actions::fork(ctx, client, id, at, title).await?,
        SessionAction::Prune {
            older_than,
            dry_run,
        } => actions::prune(ctx, client, older_than, dry_run).await?,
        SessionAction::Delete { id } => actions::delete(ctx, client, id).await?,
        SessionAction::Compact { id } => actions::compact(ctx, client, id).await?,
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
