//! End-to-end: the read models and the workspace files follow the log —
//! under many concurrent writers, across clean restarts, across kill -9 under
//! load, with hand edits made while the daemon is down, and after a rebuild.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tinycode_shared::client::{ClientName, DaemonChannel, connect};
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::events_client::EventsClient;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    AddCustomerMessageRequest, CreateSessionRequest, CreateTicketRequest, GetSessionRequest,
    GetTicketRequest, ListSessionsRequest, ListTicketsRequest, RebuildRequest, SessionInfo,
    SubscribeRequest, Ticket,
};
use tinycode_tests::{Desk, alive, kill, wait_until};
use tinycoded::domain::ticket::{apply, parse_ticket_file, render_ticket_file, same_content};

async fn channel(desk: &Desk) -> DaemonChannel {
    connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap()
}

/// Start the daemon (through the CLI) and connect.
async fn started(desk: &Desk) -> DaemonChannel {
    desk.ok(&["daemon", "start"]);
    channel(desk).await
}

/// Every ticket folded from the whole log, read over `Events.Subscribe`,
/// and the last ticket event's sequence.
async fn fold_of_log(ch: &DaemonChannel) -> (BTreeMap<String, Ticket>, u64) {
    let mut events = EventsClient::new(ch.clone())
        .subscribe(SubscribeRequest {
            from_sequence: 1,
            stream_prefix: "ticket-".into(),
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut tickets: BTreeMap<String, Ticket> = BTreeMap::new();
    let mut last = 0;
    while let Some(event) = events.message().await.unwrap() {
        last = event.sequence;
        let id = event.stream_id.trim_start_matches("ticket-").to_string();
        apply(tickets.entry(id).or_default(), &event);
    }
    (tickets, last)
}

async fn listed_at(ch: &DaemonChannel, min_sequence: u64) -> BTreeMap<String, Ticket> {
    TicketsClient::new(ch.clone())
        .list(ListTicketsRequest {
            limit: 10_000,
            min_sequence,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tickets
        .into_iter()
        // The SLA clocks are worked out as of the read (`seconds_left`
        // moves on), never folded: what is compared is the rest.
        .map(|t| {
            assert!(!t.sla.is_empty(), "{} has its clocks", t.id);
            (
                t.id.clone(),
                Ticket {
                    sla: Vec::new(),
                    ..t
                },
            )
        })
        .collect()
}

async fn listed(ch: &DaemonChannel) -> BTreeMap<String, Ticket> {
    listed_at(ch, 0).await
}

/// The first difference between the model, the log's fold and the files.
fn difference(
    desk: &Desk,
    model: &BTreeMap<String, Ticket>,
    folded: &BTreeMap<String, Ticket>,
) -> Option<String> {
    if model.len() != folded.len() {
        return Some(format!(
            "{} tickets listed, {} in the log",
            model.len(),
            folded.len()
        ));
    }
    for (id, t) in folded {
        if model.get(id) != Some(t) {
            return Some(format!(
                "Tickets.List of {id}: {:?}\n≠ fold of the log: {t:?}",
                model.get(id)
            ));
        }
        // Equal content: a file imported from a hand edit keeps the
        // person's layout; what the mirror writes is the TinyCode layout.
        let file = std::fs::read_to_string(desk.workspace().join(format!("tickets/{id}.json")))
            .unwrap_or_default();
        if !parse_ticket_file(&file).is_ok_and(|f| same_content(&f, t)) {
            return Some(format!(
                "tickets/{id}.json:\n{file}\n≠ the model:\n{}",
                render_ticket_file(t)
            ));
        }
    }
    None
}

/// The model (read at the log's last ticket event), the log's fold and the
/// files agree once the log is quiet (a background triage may still be
/// writing); returns the model.
async fn consistent(desk: &Desk, ch: &DaemonChannel) -> BTreeMap<String, Ticket> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (folded, last) = fold_of_log(ch).await;
        let model = listed_at(ch, last).await;
        let problem = difference(desk, &model, &folded);
        let quiet = fold_of_log(ch).await.1 == last;
        match problem {
            None if quiet => return model,
            Some(p) if Instant::now() > deadline => panic!("{p}\n{}", desk.log()),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_writers_lose_nothing_and_files_follow() {
    let desk = Desk::fixture();
    let ch = started(&desk).await;
    let writers: Vec<_> = (0..64)
        .map(|w| {
            let socket = desk.socket();
            tokio::spawn(async move {
                // A connection per writer: 64 real clients.
                let ch = connect(&socket, &ClientName::new("writer").unwrap())
                    .await
                    .unwrap();
                let mut client = TicketsClient::new(ch);
                let mut acked = Vec::new();
                for i in 0..6 {
                    let text = format!("w{w} m{i}");
                    if (w + i) % 3 == 0 {
                        let t = client
                            .create(CreateTicketRequest {
                                subject: format!("from writer {w}"),
                                customer: "Load".into(),
                                channel: "web".into(),
                                body: text.clone(),
                                sla_minutes: 0,
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        acked.push((t.id, text));
                    } else {
                        let id = format!("T-100{}", 1 + (w + i) % 3);
                        let t = client
                            .add_customer_message(AddCustomerMessageRequest {
                                id: id.clone(),
                                text: text.clone(),
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        // Read-your-writes: the answer has the message.
                        assert!(t.messages.iter().any(|m| m.text == text));
                        acked.push((id, text));
                    }
                }
                acked
            })
        })
        .collect();
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    let check = |model: &BTreeMap<String, Ticket>| {
        for (id, text) in &acked {
            let t = model.get(id).unwrap_or_else(|| panic!("{id} is missing"));
            assert!(
                t.messages.iter().any(|m| &m.text == text),
                "{id} lost {text:?}"
            );
        }
    };
    let model = consistent(&desk, &ch).await;
    check(&model);
    assert_eq!(
        model.len(),
        3 + acked
            .iter()
            .filter(|(id, _)| id.as_str() > "T-1003")
            .count()
    );
    // A clean restart reads back the same, and adds nothing to the files.
    desk.stop();
    let ch = started(&desk).await;
    let again = consistent(&desk, &ch).await;
    assert_eq!(again, model);
    check(&again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_changed_while_the_daemon_was_down_are_imported_rewritten_or_restored() {
    let desk = Desk::fixture();
    let ch = started(&desk).await;
    let old_1002 = desk.read("tickets/T-1002.json");
    let mut tickets = TicketsClient::new(ch.clone());
    tickets
        .add_customer_message(AddCustomerMessageRequest {
            id: "T-1002".into(),
            text: "还没到".into(),
        })
        .await
        .unwrap();
    consistent(&desk, &ch).await;
    desk.stop();

    // A hand edit (the TinyCode workflow), a file put back as it was before
    // the last change (a hand edit too: it undoes the message), a deleted
    // file.
    let mut t1001 = desk.ticket_file("T-1001");
    t1001["subject"] = "改过的标题".into();
    desk.write(
        "tickets/T-1001.json",
        &serde_json::to_string_pretty(&t1001).unwrap(),
    );
    desk.write("tickets/T-1002.json", &old_1002);
    std::fs::remove_file(desk.workspace().join("tickets/T-1003.json")).unwrap();

    let ch = started(&desk).await;
    let mut tickets = TicketsClient::new(ch.clone());
    let get = |id: &str| GetTicketRequest {
        id: id.into(),
        ..Default::default()
    };
    let t = tickets.get(get("T-1001")).await.unwrap().into_inner();
    assert_eq!(t.subject, "改过的标题", "the hand edit was imported");
    let t = tickets.get(get("T-1002")).await.unwrap().into_inner();
    assert_eq!(t.messages.len(), 1, "the older file is an edit: imported");
    assert!(
        desk.workspace().join("tickets/T-1003.json").exists(),
        "restored"
    );
    let events = desk.events(&["--stream", "ticket-"]);
    let updates: Vec<&str> = events
        .iter()
        .filter(|e| e.get("ticketUpdatedFromFile").is_some())
        .map(|e| e["streamId"].as_str().unwrap())
        .collect();
    assert_eq!(
        updates,
        ["ticket-T-1001", "ticket-T-1002"],
        "the two edits are imports; the deleted file is not"
    );
    consistent(&desk, &ch).await;

    // While it runs: an edit is picked up by the poll; an unparsable file is
    // left alone and reported once.
    let mut t1003 = desk.ticket_file("T-1003");
    t1003["customer"] = "另一个人".into();
    desk.write(
        "tickets/T-1003.json",
        &serde_json::to_string_pretty(&t1003).unwrap(),
    );
    let mut tickets2 = tickets.clone();
    let mut seen = false;
    for _ in 0..200 {
        let t = tickets2.get(get("T-1003")).await.unwrap().into_inner();
        if t.customer == "另一个人" {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(seen, "the running daemon imported the edit\n{}", desk.log());
    consistent(&desk, &ch).await;
}

/// Every session as listed, without what is live (running, attached).
async fn sessions(ch: &DaemonChannel) -> Vec<SessionInfo> {
    SessionsClient::new(ch.clone())
        .list(ListSessionsRequest {
            limit: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .sessions
        .into_iter()
        .map(|s| SessionInfo {
            running: false,
            queued: 0,
            attached_clients: 0,
            ..s
        })
        .collect()
}

/// A session created by one client and seen at sequence N on
/// `Events.Subscribe` by another is there for `Sessions.Get` at N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_seen_on_the_event_stream_is_readable_at_its_sequence() {
    let desk = Desk::fixture();
    let ch = started(&desk).await;
    let mut events = EventsClient::new(ch.clone())
        .subscribe(SubscribeRequest {
            from_sequence: 0,
            stream_prefix: "session-".into(),
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    let writer = {
        let ch = ch.clone();
        tokio::spawn(async move {
            for n in 0..20 {
                SessionsClient::new(ch.clone())
                    .create(CreateSessionRequest {
                        title: format!("s{n}"),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = 0;
    while seen < 20 {
        let e = events.message().await.unwrap().unwrap();
        let id = e.stream_id.trim_start_matches("session-").to_string();
        let got = SessionsClient::new(ch.clone())
            .get(GetSessionRequest {
                id,
                min_sequence: e.sequence,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(got.last_sequence >= e.sequence, "{got:?} read before {e:?}");
        seen += 1;
    }
    writer.await.unwrap();
    let err = SessionsClient::new(ch.clone())
        .get(GetSessionRequest {
            id: "nope".into(),
            min_sequence: 1_000_000,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_from_the_log_equals_the_live_models() {
    let desk = Desk::fixture();
    let ch = started(&desk).await;
    desk.ok(&["ticket", "message", "T-1001", "hello"]);
    desk.ok(&[
        "ticket",
        "create",
        "--subject",
        "New",
        "--customer",
        "Bo",
        "--channel",
        "web",
        "--body",
        "b",
    ]);
    // A triage session, and the board and approvals models beside it.
    desk.ok(&["triage", "T-1002"]);
    let before = consistent(&desk, &ch).await;
    let sessions_before = sessions(&ch).await;
    assert!(!sessions_before.is_empty());
    let out = desk.ok(&["admin", "rebuild"]);
    for model in ["tickets", "kb", "mirror", "approvals", "sessions", "triage"] {
        assert!(
            out.contains(&format!("rebuilt {model} up to sequence")),
            "{out}"
        );
    }
    assert_eq!(consistent(&desk, &ch).await, before);
    assert_eq!(sessions(&ch).await, sessions_before);
    let err = DaemonClient::new(ch.clone())
        .rebuild(RebuildRequest {
            models: vec!["nope".into()],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("tickets, kb, mirror"),
        "{}",
        err.message()
    );
    // min_sequence: a sequence the log does not have is refused.
    let err = TicketsClient::new(ch.clone())
        .get(GetTicketRequest {
            id: "T-1001".into(),
            min_sequence: 1_000_000,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::OutOfRange);
}

/// Kill -9 under load, many times: no acknowledged change is lost or
/// reverted, every file equals the model, the model equals the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_and_reverts_nothing() {
    let rounds: usize = std::env::var("TINYCODE_KILL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let desk = Desk::fixture();
    desk.edit_config(|c| {
        c["autoTriage"] = serde_json::json!({ "enabled": true, "concurrency": 2 });
    });
    let started_at = Instant::now();
    // (ticket, message text) acknowledged so far.
    let mut acked: BTreeSet<(String, String)> = BTreeSet::new();
    for round in 0..rounds {
        let ch = started(&desk).await;
        // What was acknowledged before every earlier kill is all there.
        let model = listed(&ch).await;
        for (id, text) in &acked {
            let t = model
                .get(id)
                .unwrap_or_else(|| panic!("round {round}: {id} lost"));
            assert!(
                t.messages.iter().any(|m| &m.text == text),
                "round {round}: {id} lost {text:?}"
            );
        }
        // Load: 4 writers, for a moment, then kill -9 in the middle of it.
        let stop_at = Instant::now() + Duration::from_millis(40 + (round as u64 * 37) % 120);
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let ch = ch.clone();
                tokio::spawn(async move {
                    let mut client = TicketsClient::new(ch);
                    let mut ok = Vec::new();
                    let mut i = 0;
                    while Instant::now() < stop_at + Duration::from_millis(200) {
                        i += 1;
                        let text = format!("r{round} w{w} m{i}");
                        let answer = if i % 4 == 0 {
                            client
                                .create(CreateTicketRequest {
                                    subject: format!("load {round}"),
                                    customer: "Load".into(),
                                    channel: "chat".into(),
                                    body: text.clone(),
                                    sla_minutes: 0,
                                })
                                .await
                        } else {
                            client
                                .add_customer_message(AddCustomerMessageRequest {
                                    id: format!("T-100{}", 1 + (w + i) % 3),
                                    text: text.clone(),
                                })
                                .await
                        };
                        match answer {
                            Ok(t) => ok.push((t.into_inner().id, text)),
                            Err(_) => break, // the daemon is gone
                        }
                    }
                    ok
                })
            })
            .collect();
        tokio::time::sleep_until(stop_at.into()).await;
        let pid = desk.daemon_pid().unwrap();
        kill(pid, "KILL");
        assert!(wait_until(Duration::from_secs(5), || !alive(pid)));
        for w in writers {
            acked.extend(w.await.unwrap());
        }
    }
    // After the last kill: everything acknowledged, files equal to the
    // model, the model equal to the log and to a rebuild — once the
    // triage worker has finished what the kills interrupted (a retry after
    // its backoff would change tickets between the two looks).
    let ch = started(&desk).await;
    let settled = wait_until(Duration::from_secs(60), || {
        let s = desk.json(&["triage", "status"]);
        s["queued"] == 0 && s["running"] == 0 && s["retrying"] == 0
    });
    assert!(settled, "{}", desk.ok(&["triage", "status"]));
    let model = consistent(&desk, &ch).await;
    for (id, text) in &acked {
        let t = model.get(id).unwrap_or_else(|| panic!("{id} lost"));
        assert!(
            t.messages.iter().any(|m| &m.text == text),
            "{id} lost {text:?}"
        );
    }
    DaemonClient::new(ch.clone())
        .rebuild(RebuildRequest::default())
        .await
        .unwrap();
    let rebuilt = consistent(&desk, &ch).await;
    let differ: Vec<_> = model
        .iter()
        .filter(|(id, t)| rebuilt.get(*id) != Some(t))
        .map(|(id, t)| (t, rebuilt.get(id)))
        .chain(
            rebuilt
                .iter()
                .filter(|(id, _)| !model.contains_key(*id))
                .map(|(_, t)| (t, None)),
        )
        .collect();
    assert!(
        differ.is_empty(),
        "a rebuild changed the model: {differ:#?}"
    );
    for file in std::fs::read_dir(desk.workspace().join("tickets")).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                parse_ticket_file(&text).is_ok(),
                "{} is torn",
                path.display()
            );
        }
    }
    eprintln!(
        "{rounds} kill -9 rounds, {} acknowledged changes, {:.1} s",
        acked.len(),
        started_at.elapsed().as_secs_f64()
    );
}
