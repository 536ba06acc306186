//! Limits on every way in (issue 15): a huge ticket file or article dropped
//! into the workspace is skipped with a warning naming the limit, nothing
//! is stored, and the desk keeps working in little memory; a list of 50,000
//! tickets comes back whole, page by page.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_tests::{Desk, wait_until};

/// A valid ticket file (T-1001's, renamed) whose first message is `bytes`
/// long.
fn ticket_file(desk: &Desk, id: &str, subject: &str, bytes: usize) -> String {
    let mut t: serde_json::Value = serde_json::from_str(&desk.read("tickets/T-1001.json")).unwrap();
    t["id"] = id.into();
    t["subject"] = subject.into();
    t["messages"][0]["text"] = "x".repeat(bytes).into();
    t.to_string()
}

#[test]
fn oversized_files_are_skipped_with_the_limit_named_and_the_desk_keeps_working() {
    let desk = Desk::fixture();
    desk.write(
        "tickets/T-2001.json",
        &ticket_file(&desk, "T-2001", "huge", 50 * 1024 * 1024),
    );
    desk.write(
        "tickets/T-2002.json",
        &ticket_file(&desk, "T-2002", &"s".repeat(600), 10),
    );
    desk.write(
        "knowledge/huge.md",
        &format!("---\ntitle: Huge\n---\n{}", "y".repeat(6 * 1024 * 1024)),
    );
    desk.ok(&["daemon", "start"]);
    let log = desk.log();
    assert!(
        log.contains("skipped tickets/T-2001.json: it is 524")
            && log.contains("at most 98304 bytes"),
        "{log}"
    );
    assert!(
        log.contains("skipped tickets/T-2002.json: field `subject` is 600 bytes; at most 500"),
        "{log}"
    );
    assert!(
        log.contains("skipped knowledge/huge.md: it is 629") && log.contains("at most 65536 bytes"),
        "{log}"
    );
    // Nothing of them is stored, and everything still answers.
    let list = desk.json(&["ticket", "list"]);
    let ids: Vec<&str> = list["tickets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["T-1001", "T-1002", "T-1003"]);
    assert!(desk.run(&["ticket", "show", "T-2001"]).code != 0);
    desk.ok(&["ticket", "show", "T-1001"]);
    assert!(!desk.ok(&["kb", "list"]).contains("huge"));
    let events = desk.events(&[]);
    assert!(events.iter().all(|e| !e.to_string().contains("T-2001")));
    let pid = desk.daemon_pid().unwrap();
    let peak = tinycode_tests::proc_status_kib(pid, "VmHWM:") / 1024;
    assert!(peak < 100, "the daemon peaked at {peak} MiB");
    // A restart does not import them either.
    desk.stop();
    desk.ok(&["daemon", "start"]);
    assert_eq!(
        desk.json(&["ticket", "list"])["tickets"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    desk.stop();
}

#[test]
fn a_ticket_cannot_grow_past_its_limit() {
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let text = "z".repeat(60 * 1024);
    desk.ok(&["ticket", "message", "T-1001", &text]);
    let out = desk.run(&["ticket", "message", "T-1001", &text]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("a ticket holds at most 98304 bytes"),
        "{out:?}"
    );
    assert!(wait_until(Duration::from_secs(5), || desk
        .json(&["ticket", "show", "T-1001"])["messages"]
        .as_array()
        .unwrap()
        .len()
        == 2));
    desk.stop();
}

/// 50,000 tickets written straight into the log before the daemon starts.
async fn many_tickets(desk: &Desk, n: usize) {
    use futures::StreamExt;
    use tinycode_shared::proto::event::Payload;
    use tinycode_shared::proto::{Ticket, TicketCreated, TicketMessage};
    use tinycoded::store::{EventStore, ExpectedVersion};
    std::fs::create_dir_all(desk.state_dir()).unwrap();
    let store = EventStore::open(&desk.state_dir().join("db")).unwrap();
    futures::stream::iter(0..n)
        .map(|i| {
            let store = store.clone();
            async move {
                let t = Ticket {
                    id: format!("T-{}", 10_000 + i),
                    subject: format!("ticket {i}"),
                    customer: "C".into(),
                    channel: "email".into(),
                    created_at: "2026-09-18T09:12:00Z".into(),
                    sla_minutes: 480,
                    status: "open".into(),
                    messages: vec![TicketMessage {
                        from: "customer".into(),
                        text: "help".into(),
                        at: "2026-09-18T09:12:00Z".into(),
                        delivery: String::new(),
                    }],
                    ..Ticket::default()
                };
                let stream = format!("ticket-{}", t.id);
                let created = Payload::TicketCreated(TicketCreated { ticket: Some(t) });
                store
                    .append(&stream, ExpectedVersion::NoStream, vec![created])
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_tickets_list_whole_page_by_page() {
    let desk = Desk::new();
    many_tickets(&desk, 50_000).await;
    // The first start builds every model and writes 50,000 files: start
    // it by hand and give it time (the CLI's auto-start waits 15 s).
    let mut daemon = desk
        .daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = tinycode_tests::wait_until(Duration::from_secs(300), || {
        std::os::unix::net::UnixStream::connect(desk.socket()).is_ok()
    });
    assert!(up, "the daemon did not start: {}", desk.log());
    let list = tokio::task::spawn_blocking(move || {
        let list = desk.json(&["ticket", "list", "--limit", "50000"]);
        desk.stop();
        list
    })
    .await
    .unwrap();
    let _ = daemon.wait();
    let tickets = list["tickets"].as_array().unwrap();
    assert_eq!(tickets.len(), 50_000);
    assert_eq!(list["total"], 50_000);
    let ids: std::collections::BTreeSet<&str> =
        tickets.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 50_000, "no ticket twice");
}

#[test]
fn a_knowledge_base_larger_than_one_message_lists_whole() {
    let desk = Desk::fixture();
    for n in 0..80 {
        desk.write(
            &format!("knowledge/big-{n:02}.md"),
            &format!("---\ntitle: Big {n}\n---\n{}", "w".repeat(60 * 1024)),
        );
    }
    desk.ok(&["daemon", "start"]);
    let list = desk.json(&["kb", "list"]);
    let ids: Vec<&str> = list["articles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 83, "4.8 MB of articles, in pages under 4 MiB");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in id order, none twice"
    );
    desk.stop();
}
