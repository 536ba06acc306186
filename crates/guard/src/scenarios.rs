//! The fixed scenarios. Each builds what it needs in a temp dir (the
//! fixture desk, a store, the sessions with a model of its own), then runs
//! its measured part `repeats` times — unless `setup_only`. What it prints
//! (one JSON object) joins the check: figures other than instructions that
//! must not grow either.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{ClientRef, TurnOutcome};
use tinycoded::config::Config;
use tinycoded::domain::desk::{Desk, NewTicket};
use tinycoded::model::{
    Message, ModelEvent, ModelProvider, ModelRequest, ModelStream, StopReason, ToolCall, Usage,
};
use tinycoded::sessions::{LiveUpdate, Parts, Sessions, TurnDefaults};
use tinycoded::store::EventStore;

pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    /// How often the measured part runs (the cost is per run).
    pub repeats: u64,
    pub run: fn(bool) -> BoxFuture<'static, anyhow::Result<Value>>,
}

/// Catch-ups counted in the attach scenario: its set-up (17 turns) varies
/// by a few million instructions from run to run with how the turns'
/// events fall into appends, so the measured part is repeated enough to
/// keep that under 2 % of it.
const ATTACH_REPEATS: u64 = 25;

pub const ALL: &[Scenario] = &[
    Scenario {
        name: "prompt",
        what: "one prompt turn: a scripted model calls get_ticket, then answers",
        repeats: 10,
        run: |setup_only| Box::pin(prompt(setup_only)),
    },
    Scenario {
        name: "triage",
        what: "one offline triage of a fixed ticket (T-1001), in a session of its own",
        repeats: 3,
        run: |setup_only| Box::pin(triage(setup_only)),
    },
    Scenario {
        name: "create",
        what: "one ticket created (appended, folded, mirrored to its file)",
        repeats: 20,
        run: |setup_only| Box::pin(create(setup_only)),
    },
    Scenario {
        name: "import",
        what: "the first start's import of 1,000 ticket files (store bytes per ticket, peak RSS)",
        repeats: 1,
        run: |setup_only| Box::pin(import(setup_only)),
    },
    Scenario {
        name: "attach",
        what: "a 100-event attach catch-up of a session's stored events",
        repeats: ATTACH_REPEATS,
        run: |setup_only| Box::pin(attach(setup_only)),
    },
];

pub fn find(name: &str) -> anyhow::Result<&'static Scenario> {
    ALL.iter()
        .find(|s| s.name == name)
        .with_context(|| format!("no scenario {name:?} (`tinycode-guard list`)"))
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/tinycode-support-desk")
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

fn me() -> ClientRef {
    ClientRef {
        name: "guard".into(),
        uid: 0,
        pid: 0,
    }
}

/// A model that answers every request the same way: on a turn's first
/// step a `get_ticket` call, then a short answer.
#[derive(Debug)]
struct Scripted;

impl ModelProvider for Scripted {
    fn name(&self) -> String {
        "scripted".into()
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        let answered = matches!(request.messages.last(), Some(Message::ToolResult { .. }));
        let mut events = Vec::new();
        let stop = if answered {
            events.push(ModelEvent::TextDelta("T-1001 is a refund request.".into()));
            StopReason::EndTurn
        } else {
            events.push(ModelEvent::ToolCall(ToolCall::new(
                "call-1".into(),
                "get_ticket".into(),
                r#"{"ticket_id":"T-1001"}"#.into(),
            )));
            StopReason::ToolUse
        };
        events.push(ModelEvent::Usage(Usage {
            input_tokens: 1000,
            output_tokens: 20,
            ..Usage::default()
        }));
        events.push(ModelEvent::Stop(stop));
        Box::pin(futures::stream::iter(events.into_iter().map(Ok)))
    }
}

/// The desk's settings with no periodic read-back of the files during a
/// run: a timer's work would depend on how slowly valgrind runs.
fn quiet(config: &Config) -> tinycoded::domain::desk::DeskSettings {
    tinycoded::domain::desk::DeskSettings {
        poll_interval: Duration::from_secs(3600),
        ..config.desk()
    }
}

/// A desk and its sessions on the fixture, `model` answering as `offline`.
struct Bench {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    store: EventStore,
    desk: Arc<Desk>,
    sessions: Arc<Sessions>,
}

async fn bench(model: Arc<dyn ModelProvider>) -> anyhow::Result<Bench> {
    let dir = tempfile::tempdir()?;
    let ws = dir.path().join("desk");
    copy_dir(&fixture(), &ws)?;
    let store = EventStore::open(&dir.path().join("db"))?;
    let config = Config::load(&ws)?;
    let (desk, _) = Desk::open(store.clone(), &ws, &quiet(&config)).await?;
    let member = tinycoded::store::Member {
        id: "guard".into(),
        ..Default::default()
    };
    let cluster =
        tinycoded::cluster::Cluster::join(store.clone(), member, Duration::from_secs(15)).await?;
    let approvals = tinycoded::approvals::Approvals::open(store.clone()).await?;
    let skills = Arc::new(tinycoded::skills::Skills::discover(&ws).0);
    let mut defaults = TurnDefaults::from_config(&config, Some(dir.path().join("artifacts")));
    defaults.model = "offline".into();
    defaults.approve = tinycoded::permissions::ApprovalMode::Auto;
    let sessions = Sessions::open(
        Parts {
            store: store.clone(),
            desk: Arc::clone(&desk),
            skills,
            approvals,
            workspace: ws.clone(),
            cluster,
            offline: model,
            keys: Arc::new(tinycoded::model::keys::Environment),
        },
        defaults,
    )
    .await?;
    Ok(Bench {
        _dir: dir,
        ws,
        store,
        desk,
        sessions,
    })
}

/// Send `text` to session `id` and wait for its turn to end completed.
async fn turn(sessions: &Arc<Sessions>, id: &str, text: &str) -> anyhow::Result<()> {
    let (mut rx, _, _) = sessions.attach(id)?;
    let sent = sessions.send(id, text, me()).await?;
    loop {
        match rx.recv().await? {
            LiveUpdate::Event(e) => {
                if let Some(Payload::TurnCompleted(c)) = &e.payload
                    && c.turn == sent.turn
                {
                    if c.outcome != TurnOutcome::Completed as i32 {
                        bail!("turn {} ended {:?}: {}", c.turn, c.outcome, c.error);
                    }
                    return Ok(());
                }
            }
            LiveUpdate::Delta(_) => {}
        }
    }
}

async fn prompt(setup_only: bool) -> anyhow::Result<Value> {
    let b = bench(Arc::new(Scripted)).await?;
    let s = b.sessions.create("guard", "", "auto", me()).await?;
    // One turn before counting: the session's actor and the model's first
    // request are set-up.
    turn(&b.sessions, &s.id, "first").await?;
    if !setup_only {
        for i in 0..10 {
            turn(&b.sessions, &s.id, &format!("prompt {i}")).await?;
        }
    }
    Ok(json!({}))
}

async fn triage(setup_only: bool) -> anyhow::Result<Value> {
    let b = bench(Arc::new(tinycoded::offline::OfflineModel::default())).await?;
    // The desk warmed with one triage (search index, jieba, the skill).
    let warm = b.sessions.create("warm", "", "auto", me()).await?;
    turn(&b.sessions, &warm.id, "triage T-1002").await?;
    if !setup_only {
        for i in 0..3 {
            let s = b
                .sessions
                .create(&format!("triage {i}"), "", "auto", me())
                .await?;
            turn(&b.sessions, &s.id, "triage T-1001").await?;
        }
    }
    Ok(json!({}))
}

async fn create(setup_only: bool) -> anyhow::Result<Value> {
    let b = bench(Arc::new(Scripted)).await?;
    let ticket = |i: u32| NewTicket {
        subject: format!("Parcel {i} has not arrived"),
        customer: "Ana".into(),
        channel: "email".into(),
        body: "物流 一直 没有 更新，快递 到哪了？".into(),
        sla_minutes: 240,
    };
    b.desk.create_ticket(ticket(0)).await?;
    b.desk.settled().await?;
    if !setup_only {
        for i in 1..=20 {
            b.desk.create_ticket(ticket(i)).await?;
        }
        b.desk.settled().await?;
    }
    Ok(json!({}))
}

/// Peak resident size of this process, KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

async fn import(setup_only: bool) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    let ws = dir.path().join("desk");
    copy_dir(&fixture(), &ws)?;
    let template = std::fs::read_to_string(ws.join("tickets/T-1001.json"))?;
    for n in 0..1000 {
        let id = format!("T-{}", 5000 + n);
        let text = template
            .replace("T-1001", &id)
            .replace("退款", if n % 2 == 0 { "退款" } else { "物流" });
        std::fs::write(ws.join(format!("tickets/{id}.json")), text)?;
    }
    if setup_only {
        return Ok(json!({}));
    }
    let store = EventStore::open(&dir.path().join("db"))?;
    let config = Config::load(&ws)?;
    let (desk, report) = Desk::open(store.clone(), &ws, &quiet(&config)).await?;
    desk.settled().await?;
    if report.tickets < 1000 {
        bail!("only {} tickets were imported", report.tickets);
    }
    store.close().await?;
    let bytes = dir_bytes(&dir.path().join("db"))?;
    Ok(json!({
        "store_bytes_per_ticket": bytes / report.tickets as u64,
        "peak_rss_kib": peak_rss_kib(),
    }))
}

/// Bytes the files under `dir` hold on disk.
fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_bytes(&entry.path())?
        } else {
            meta.blocks() * 512
        };
    }
    Ok(total)
}

async fn attach(setup_only: bool) -> anyhow::Result<Value> {
    let b = bench(Arc::new(Scripted)).await?;
    let s = b.sessions.create("long", "", "auto", me()).await?;
    // 17 turns of 6 events each: a little over 100 stored events.
    for i in 0..17 {
        turn(&b.sessions, &s.id, &format!("turn {i}")).await?;
    }
    let (_stop, stopping) = tokio::sync::watch::channel(false);
    if !setup_only {
        for _ in 0..ATTACH_REPEATS {
            let mut rx = Arc::clone(&b.sessions)
                .follow(&s.id, 1, stopping.clone())
                .await?;
            let mut events = 0;
            while events < 100 {
                match rx.recv().await.context("the follow ended early")?? {
                    LiveUpdate::Event(_) => events += 1,
                    LiveUpdate::Delta(_) => {}
                }
            }
        }
    }
    drop((b.ws, b.store));
    Ok(json!({}))
}
