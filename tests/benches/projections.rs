//! Read-model benchmark (not a test): `cargo bench -p tinycode-tests --bench projections`.
//!
//! 1. Projection lag, in process: 64 writers append ticket events; for each
//!    append, the time from its acknowledgement to the tickets projection
//!    having applied it (p50, p99).
//! 2. A large log written straight through the store: 100,000 tickets
//!    (created, classified, routed: 3 events each) and 20,000 triage
//!    sessions (two turns, 35 events each, their steps reporting model
//!    usage) with their triage records (3 events each): 1,020,000 events
//!    with the daemon's own. Then the real daemon: its first start (every read model
//!    built from the log), a clean stop, and a second start (resumed from
//!    the checkpoints): time from spawn to the first answered
//!    `Tickets.List`, daemon RSS, `Tickets.Get` p99 over 2,000 reads, and
//!    `Reports.Generate` of the day every ticket came in (≤ 1 s).
//!
//! `TINYCODE_BENCH_SCALE=0.1` shrinks part 2 for a quick look;
//! `TINYCODE_BENCH_DESK=DIR` keeps part 2's desk in DIR and, when DIR
//! already holds one, measures only the second start on it;
//! `TINYCODE_BENCH_PART=lag|log` runs one part. Figures go to
//! docs/BENCHMARKS.md. Exits 1 when a target is missed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::reports_client::ReportsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AssistantMessageAdded, GenerateReportRequest, GetTicketRequest, ListTicketsRequest, ModelUsage,
    SessionCreated, Ticket, TicketClassified, TicketCreated, TicketMessage, TicketNote,
    TicketNoteAdded, TicketRouted, ToolCallFinished, ToolCallRef, TriageFinished, TriageQueued,
    TriageStarted, TurnCompleted, TurnStarted, UserMessageAdded,
};
use tinycode_tests::Desk;
use tinycode_tests::targets::{Targets, settle_disk};
use tinycoded::store::{EventStore, ExpectedVersion};

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn rss_mib(pid: u32) -> (f64, f64) {
    let field = |name| tinycode_tests::proc_status_kib(pid, name) as f64 / 1024.0;
    (field("VmRSS:"), field("VmHWM:"))
}

/// Projection lag with 64 writers, in process (the desk's own projector).
async fn lag(targets: &mut Targets) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("desk");
    std::fs::create_dir_all(ws.join(".tinycode")).unwrap();
    std::fs::write(ws.join(".tinycode/config.json"), "{}").unwrap();
    let store = EventStore::open(&dir.path().join("db")).unwrap();
    let config = tinycoded::config::Config::load(&ws).unwrap();
    let (desk, _) = tinycoded::domain::desk::Desk::open(store.clone(), &ws, &config.desk())
        .await
        .unwrap();
    let writers: Vec<_> = (0..64)
        .map(|w| {
            let (store, desk) = (store.clone(), Arc::clone(&desk));
            tokio::spawn(async move {
                let mut lags = Vec::new();
                for i in 0..100 {
                    let note = Payload::TicketNoteAdded(TicketNoteAdded {
                        by: None,
                        note: Some(TicketNote {
                            text: format!("note {i}"),
                            at: String::new(),
                        }),
                    });
                    let events = store
                        .append(&format!("ticket-L-{w}"), ExpectedVersion::Any, vec![note])
                        .await
                        .unwrap();
                    let acked = Instant::now();
                    desk.tickets_at(events[0].sequence).await.unwrap();
                    lags.push(acked.elapsed());
                }
                lags
            })
        })
        .collect();
    let mut lags = Vec::new();
    for w in writers {
        lags.extend(w.await.unwrap());
    }
    lags.sort();
    let p99 = percentile_ms(&lags, 0.99);
    println!(
        "projection lag, 64 writers × 100 appends: p50 {:.3} ms, p99 {p99:.3} ms, max {:.3} ms",
        percentile_ms(&lags, 0.5),
        lags.last().unwrap().as_secs_f64() * 1e3
    );
    targets.at_most("projection lag p99 (64 writers)", p99, 2.0, "ms");
    store.close().await.unwrap();
}

fn ticket(n: usize) -> Ticket {
    let at = "2026-09-18T09:12:00Z".to_string();
    let subject = if n.is_multiple_of(2) {
        format!("退款：订单 {n} 已付款但未收到货")
    } else {
        format!("Parcel {n} stuck in transit for a week")
    };
    Ticket {
        id: format!("T-{}", 10_000 + n),
        subject: subject.clone(),
        customer: format!("Customer {n}"),
        channel: "email".into(),
        created_at: at.clone(),
        sla_minutes: 480,
        status: "open".into(),
        messages: vec![TicketMessage {
            from: "customer".into(),
            text: format!("{subject}. Please help, this is message {n}."),
            at,
            delivery: String::new(),
        }],
        ..Ticket::default()
    }
}

/// One triage session's events: two turns of 17 events each, plus the
/// creation (35).
fn session_events(n: usize) -> Vec<Payload> {
    let mut out = vec![Payload::SessionCreated(SessionCreated {
        title: format!("triage T-{}", 10_000 + n),
        model: "offline".into(),
        approve: "deny".into(),
        ..SessionCreated::default()
    })];
    for turn in 1..=2u64 {
        out.push(Payload::UserMessageAdded(UserMessageAdded {
            text: format!("Triage ticket T-{}", 10_000 + n),
            turn,
            ..UserMessageAdded::default()
        }));
        out.push(Payload::TurnStarted(TurnStarted {
            turn,
            ..TurnStarted::default()
        }));
        for step in 0..7u32 {
            let call = ToolCallRef {
                id: format!("call_{step}"),
                name: "get_ticket".into(),
                arguments_json: format!("{{\"ticket_id\":\"T-{}\"}}", 10_000 + n),
                ..Default::default()
            };
            out.push(Payload::AssistantMessageAdded(AssistantMessageAdded {
                text: "Looking at the ticket and the policy before deciding.".into(),
                tool_calls: if step < 6 { vec![call.clone()] } else { vec![] },
                step,
                turn,
                usage: Some(ModelUsage {
                    input_tokens: 1_500,
                    output_tokens: 60,
                    ..ModelUsage::default()
                }),
                model: "openai/gpt-4o-mini".into(),
                ..AssistantMessageAdded::default()
            }));
            if step < 6 {
                out.push(Payload::ToolCallFinished(ToolCallFinished {
                    call: Some(call),
                    content: "x".repeat(400),
                    turn,
                    ..ToolCallFinished::default()
                }));
            }
        }
        out.push(Payload::TurnCompleted(TurnCompleted {
            turn,
            outcome: 1,
            steps: 7,
            tool_calls: 6,
            ..TurnCompleted::default()
        }));
    }
    out
}

/// Write the large log into the desk's state dir; returns the event count.
async fn write_log(desk: &Desk, tickets: usize, sessions: usize) -> u64 {
    std::fs::create_dir_all(desk.state_dir()).unwrap();
    let store = EventStore::open(&desk.state_dir().join("db")).unwrap();
    let started = Instant::now();
    futures::stream::iter(0..tickets)
        .map(|n| {
            let store = store.clone();
            async move {
                let t = ticket(n);
                let id = t.id.clone();
                store
                    .append(
                        &format!("ticket-{id}"),
                        ExpectedVersion::NoStream,
                        vec![
                            Payload::TicketCreated(TicketCreated { ticket: Some(t) }),
                            Payload::TicketClassified(TicketClassified {
                                category: "物流".into(),
                                priority: "P2".into(),
                                intent: "where is my parcel".into(),
                                ..TicketClassified::default()
                            }),
                            Payload::TicketRouted(TicketRouted {
                                queue: "物流组".into(),
                                reason: "logistics-sla".into(),
                                ..TicketRouted::default()
                            }),
                        ],
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    futures::stream::iter(0..sessions)
        .map(|n| {
            let store = store.clone();
            async move {
                let (ticket, session) = (format!("T-{}", 10_000 + n), format!("s{n:012x}"));
                store
                    .append(
                        &format!("triage-{ticket}"),
                        ExpectedVersion::NoStream,
                        vec![
                            Payload::TriageQueued(TriageQueued {
                                ticket_id: ticket.clone(),
                                source: "file".into(),
                                ..TriageQueued::default()
                            }),
                            Payload::TriageStarted(TriageStarted {
                                ticket_id: ticket.clone(),
                                session_id: session.clone(),
                                attempt: 1,
                                ..TriageStarted::default()
                            }),
                        ],
                    )
                    .await
                    .unwrap();
                store
                    .append(
                        &format!("session-{session}"),
                        ExpectedVersion::NoStream,
                        session_events(n),
                    )
                    .await
                    .unwrap();
                store
                    .append(
                        &format!("triage-{ticket}"),
                        ExpectedVersion::Exact(2),
                        vec![Payload::TriageFinished(TriageFinished {
                            ticket_id: ticket,
                            session_id: session,
                            result: "done".into(),
                            outcome: "completed".into(),
                            attempts: 1,
                            ..TriageFinished::default()
                        })],
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    let events = store.last_sequence();
    println!(
        "wrote {events} events ({tickets} tickets, {sessions} sessions) in {:.1?}",
        started.elapsed()
    );
    store.close().await.unwrap();
    events
}

/// Start the daemon; time to the first answered `Tickets.List`, RSS then.
async fn start(desk: &Desk, what: &str) -> (std::process::Child, f64) {
    let t = Instant::now();
    let daemon = desk
        .daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let name = ClientName::new("bench").unwrap();
    let listed = loop {
        if let Ok(ch) = connect(&desk.socket(), &name).await
            && let Ok(r) = TicketsClient::new(ch)
                .list(ListTicketsRequest::default())
                .await
        {
            break r.into_inner();
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the daemon never answered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let elapsed = t.elapsed().as_secs_f64();
    let (rss, peak) = rss_mib(daemon.id());
    println!(
        "{what}: first `ticket list` answered {elapsed:.3} s after spawn ({} of {} tickets); RSS {rss:.1} MiB (peak {peak:.1} MiB)",
        listed.tickets.len(),
        listed.total
    );
    (daemon, elapsed)
}

async fn large_log(targets: &mut Targets, scale: f64) {
    let tickets = (100_000.0 * scale) as usize;
    let sessions = (20_000.0 * scale) as usize;
    let kept = std::env::var_os("TINYCODE_BENCH_DESK").map(std::path::PathBuf::from);
    let reused = kept
        .as_ref()
        .is_some_and(|d| d.join("desk/.tinycode/state/db").exists());
    let desk = kept.as_deref().map_or_else(Desk::new, Desk::at);
    if reused {
        println!("reusing the desk in {}", desk.root.display());
    } else {
        write_log(&desk, tickets, sessions).await;
        settle_disk();
        let (mut daemon, _) = start(&desk, "first start (read models built from the log)").await;
        desk.stop();
        let _ = daemon.wait();
    }
    settle_disk();
    let (mut daemon, elapsed) = start(&desk, "second start (resumed from checkpoints)").await;
    for line in desk
        .log()
        .lines()
        .rev()
        .filter(|l| l.contains("start-up"))
        .take(2)
    {
        println!("  daemon: {}", line.split(": ").nth(1).unwrap_or(line));
    }
    let (rss, _) = rss_mib(daemon.id());
    let ch = connect(&desk.socket(), &ClientName::new("bench").unwrap())
        .await
        .unwrap();
    let mut client = TicketsClient::new(ch);
    let mut times = Vec::new();
    for i in 0..2_000 {
        let id = format!("T-{}", 10_000 + (i * 7919) % tickets.max(1));
        let t = Instant::now();
        client
            .get(GetTicketRequest {
                id,
                ..Default::default()
            })
            .await
            .unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    let p99 = percentile_ms(&times, 0.99);
    println!(
        "`Tickets.Get` over gRPC, 2,000 reads: p50 {:.3} ms, p99 {p99:.3} ms",
        percentile_ms(&times, 0.5)
    );
    // The daily report of the day every ticket came in (issue 34): three
    // in a row (the first also loads the system's fonts for the PNGs).
    let mut reports = ReportsClient::new(
        connect(&desk.socket(), &ClientName::new("bench").unwrap())
            .await
            .unwrap(),
    );
    let mut made = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let info = reports
            .generate(GenerateReportRequest {
                day: "2026-09-18".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        made.push(t.elapsed().as_secs_f64());
        assert!(
            info.summary.starts_with(&format!("{tickets} new")),
            "{}",
            info.summary
        );
    }
    let slowest = made.iter().copied().fold(0.0, f64::max);
    println!(
        "one day's report over the whole desk ({tickets} tickets), 3 runs: {}",
        made.iter()
            .map(|s| format!("{:.3} s", s))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if scale >= 1.0 {
        targets.at_most(
            "one day's report (1M events, 100,000 tickets)",
            slowest,
            1.0,
            "s",
        );
        targets.at_most("start to first ticket list (1M events)", elapsed, 0.5, "s");
        targets.at_most("daemon RSS after start (1M events)", rss, 100.0, "MiB");
        targets.at_most("Tickets.Get p99 (1M events)", p99, 2.0, "ms");
    }
    desk.stop();
    let _ = daemon.wait();
}

fn main() {
    tinycode_tests::bin_dir();
    settle_disk();
    let scale: f64 = std::env::var("TINYCODE_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut targets = Targets::new();
    let part = std::env::var("TINYCODE_BENCH_PART").unwrap_or_default();
    runtime.block_on(async {
        if part != "log" {
            lag(&mut targets).await;
        }
        if part != "lag" {
            large_log(&mut targets, scale).await;
        }
    });
    targets.finish();
}
