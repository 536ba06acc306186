//! One function per `tinycode session …` subcommand: each sends its request
//! and prints the answer (JSON with --json).

use tinycode_shared::client::DaemonChannel;
use tinycode_shared::proto::Event;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::{
    AttachRequest, CancelTurnRequest, CompactSessionRequest, CreateSessionRequest,
    DeleteSessionRequest, ForkSessionRequest, GetSessionRequest, ListSessionsRequest,
    PruneSessionsRequest, RenameSessionRequest, SendMessageRequest, SessionInfo,
    SetSessionModelRequest,
};
use tinycode_shared::render;

use super::print_updates;
use crate::{Ctx, output};

/// The daemon's sessions service, as every subcommand here uses it.
pub(super) type Client = SessionsClient<DaemonChannel>;

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

/// `session new`: create a session; prints its id.
pub(super) async fn new(
    ctx: &Ctx,
    client: &mut Client,
    title: String,
    model: Option<String>,
    approve: String,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// `session list`: the newest `limit` sessions as a table.
pub(super) async fn list(ctx: &Ctx, client: &mut Client, limit: u32) -> anyhow::Result<()> {
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
            eprintln!("(the newest {limit} sessions; there are more: `--limit N` shows more)");
        }
    }
    Ok(())
}

/// `session show`: the stored transcript (and, with `children`, the
/// session's workers).
pub(super) async fn show(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    children: bool,
) -> anyhow::Result<()> {
    let s = client
        .get(GetSessionRequest {
            id: id.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    for e in stored_events(client, id, &s).await? {
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
    Ok(())
}

/// Session `id`'s events from its creation up to what was stored when `s`
/// was read (replayed through an attach that then stops).
async fn stored_events(
    client: &mut Client,
    id: String,
    s: &SessionInfo,
) -> anyhow::Result<Vec<Event>> {
    let mut updates = client
        .attach(AttachRequest {
            session_id: id,
            from_sequence: s.created_sequence,
        })
        .await?
        .into_inner();
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
    Ok(out)
}

/// `session attach`: follow a session live from `from`.
pub(super) async fn attach(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    from: u64,
) -> anyhow::Result<()> {
    let mut updates = client
        .attach(AttachRequest {
            session_id: id,
            from_sequence: from,
        })
        .await?
        .into_inner();
    print_updates(ctx, &mut updates, None).await?;
    Ok(())
}

/// `session send`: queue a message; prints the turn it starts.
pub(super) async fn send(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    text: String,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// `session cancel`: cancel the running turn, if any.
pub(super) async fn cancel(client: &mut Client, id: String) -> anyhow::Result<()> {
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
    Ok(())
}

/// `session rename`.
pub(super) async fn rename(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    title: String,
) -> anyhow::Result<()> {
    let request = RenameSessionRequest {
        session_id: id,
        title,
    };
    print_info(ctx, &client.rename(request).await?.into_inner());
    Ok(())
}

/// `session model`: the session's next turns use another model.
pub(super) async fn set_model(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    model: String,
) -> anyhow::Result<()> {
    let request = SetSessionModelRequest {
        session_id: id,
        model,
    };
    let s = client.set_model(request).await?.into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.SessionInfo", &s));
    } else {
        println!("{}  next turns use {}", s.id, s.model);
    }
    Ok(())
}

/// `session fork`: a new session with this one's history up to `at`.
pub(super) async fn fork(
    ctx: &Ctx,
    client: &mut Client,
    id: String,
    at: u64,
    title: String,
) -> anyhow::Result<()> {
    let request = ForkSessionRequest {
        session_id: id,
        up_to_sequence: at,
        title,
    };
    print_info(ctx, &client.fork(request).await?.into_inner());
    Ok(())
}

/// `session prune`: delete (or, dry, list) idle sessions older than
/// `older_than` seconds.
pub(super) async fn prune(
    ctx: &Ctx,
    client: &mut Client,
    older_than: u64,
    dry_run: bool,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// `session delete`: cancel its turn and drop it from listings.
pub(super) async fn delete(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<()> {
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
    Ok(())
}

/// `session compact`: summarise older turns now.
pub(super) async fn compact(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<()> {
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
    Ok(())
}
