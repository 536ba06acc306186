//! End-to-end for the support domain: the real daemon on a copy of the
//! TinyCode fixture workspace, driven through the real CLI and over gRPC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::CreateTicketRequest;
use tinycode_shared::proto::WatchTicketsRequest;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_tests::Desk;

fn ids(list: &serde_json::Value) -> Vec<String> {
    list["tickets"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_fixture_workspace_opens_unchanged_and_reads_through_the_cli() {
    let desk = Desk::fixture();
    let before = desk.read("tickets/T-1001.json");
    let list = desk.json(&["ticket", "list"]);
    assert_eq!(ids(&list), ["T-1001", "T-1002", "T-1003"]);
    assert_eq!(list["total"], 3);

    let t = desk.json(&["ticket", "show", "T-1001"]);
    assert_eq!(t["customer"], "张伟");
    assert_eq!(t["channel"], "email");
    assert_eq!(t["messages"][0]["from"], "customer");
    let text = desk.ok(&["ticket", "show", "T-1003"]);
    assert!(text.contains("企业账户今天早上突然被风控冻结"), "{text}");

    let hits = desk.json(&["kb", "search", "退款 时效"]);
    assert_eq!(hits["hits"][0]["id"], "refund-policy", "{hits}");
    assert_eq!(hits["hits"][0]["kind"], "article");
    let articles = desk.json(&["kb", "list"]);
    assert_eq!(articles["articles"].as_array().unwrap().len(), 3);
    let tagged = desk.json(&["kb", "list", "--tag", "物流"]);
    assert_eq!(tagged["articles"][0]["id"], "logistics-sla");
    let article = desk.json(&["kb", "show", "escalation-policy"]);
    assert_eq!(article["owner"], "客服主管");
    let found = desk.json(&["ticket", "search", "包裹 停滞"]);
    assert_eq!(found["hits"][0]["id"], "T-1002");

    assert_eq!(
        desk.read("tickets/T-1001.json"),
        before,
        "opening rewrote nothing"
    );
}

#[test]
fn intake_and_messages_write_through_to_the_files() {
    let desk = Desk::fixture();
    let untouched = desk.read("tickets/T-1002.json");
    let created = desk.json(&[
        "ticket",
        "create",
        "--subject",
        "Printer on fire",
        "--customer",
        "Ana",
        "--channel",
        "chat",
        "--body",
        "It smokes",
        "--sla",
        "60",
    ]);
    assert_eq!(created["id"], "T-1004");
    assert_eq!(created["status"], "open");
    // The command answers once the model has the ticket; the file follows.
    let file = desk.ticket_file("T-1004");
    assert_eq!(file["slaMinutes"], 60);
    assert_eq!(file["messages"][0]["text"], "It smokes");

    let t = desk.json(&["ticket", "message", "T-1001", "还没收到，请尽快处理"]);
    assert_eq!(t["messages"].as_array().unwrap().len(), 2);
    let file = desk.ticket_file("T-1001");
    assert_eq!(file["messages"][1]["text"], "还没收到，请尽快处理");
    assert_eq!(desk.read("tickets/T-1002.json"), untouched);

    let events = desk.events(&["--stream", "ticket-T-1001"]);
    assert_eq!(events.len(), 2);
    assert!(
        events[0]["ticketImported"].is_object() && events[1]["customerMessageAdded"].is_object()
    );
}

#[test]
fn bad_input_gets_one_actionable_sentence_and_changes_nothing() {
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let seq = desk.json(&["daemon", "status"])["lastSequence"].clone();
    let cases: &[(&[&str], &str)] = &[
        (&["ticket", "show", "../../etc/passwd"], "invalid ticket id"),
        (
            &["ticket", "show", "T-9999"],
            "ticket T-9999 does not exist",
        ),
        (
            &["kb", "show", "nope"],
            "knowledge article nope does not exist",
        ),
        (&["ticket", "message", "T-1001", " "], "`text` is empty"),
        (
            &[
                "ticket",
                "create",
                "--subject",
                "s",
                "--customer",
                "c",
                "--body",
                "b",
                "--channel",
                "fax",
            ],
            "`channel` must be one of email, chat, phone, web",
        ),
        (
            &["ticket", "list", "--status", "closed"],
            "`status` must be one of open",
        ),
        (&["ticket", "search", "  "], "`query` is empty"),
    ];
    for (args, expected) in cases {
        let out = desk.run(args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: one sentence"
        );
    }
    let huge = "x".repeat(70 * 1024);
    let out = desk.run(&["ticket", "message", "T-1001", &huge]);
    assert!(
        out.stderr.contains("`text` is 71680 bytes; at most 65536"),
        "{}",
        out.stderr
    );
    assert_eq!(
        desk.json(&["daemon", "status"])["lastSequence"],
        seq,
        "nothing stored"
    );
}

#[test]
fn restarts_are_idempotent_and_hand_edits_are_imported() {
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let ticket_events = || desk.events(&["--stream", "ticket-"]).len();
    assert_eq!(ticket_events(), 3);
    for _ in 0..2 {
        desk.stop();
        desk.ok(&["daemon", "start"]);
        assert_eq!(ticket_events(), 3, "an unchanged file is a no-op");
    }
    desk.stop();
    let edited = desk
        .read("tickets/T-1002.json")
        .replace("\"slaMinutes\": 480", "\"slaMinutes\": 30");
    desk.write("tickets/T-1002.json", &edited);
    desk.write("tickets/T-1005.json", "{ this is not json");
    desk.write(
        "tickets/T-1006.json",
        &desk
            .read("tickets/T-1001.json")
            .replace("T-1001", "T-1006")
            .replace("\"open\"", "\"closed\""),
    );
    desk.ok(&["daemon", "start"]);
    assert_eq!(desk.json(&["ticket", "show", "T-1002"])["slaMinutes"], 30);
    let events = desk.events(&["--stream", "ticket-T-1002"]);
    assert!(events.last().unwrap()["ticketUpdatedFromFile"].is_object());
    // Malformed files are skipped with the file and field named; the rest work.
    let log = desk.log();
    assert!(
        log.contains("skipped tickets/T-1005.json: not valid JSON"),
        "{log}"
    );
    assert!(
        log.contains("skipped tickets/T-1006.json: field `status`"),
        "{log}"
    );
    assert_eq!(
        ids(&desk.json(&["ticket", "list"])),
        ["T-1001", "T-1002", "T-1003"]
    );
}

#[test]
fn a_file_missing_optional_fields_is_read_and_a_refused_one_is_listed_until_fixed() {
    let desk = Desk::fixture();
    // TinyCode's optional fields missing: read with their defaults.
    let mut doc: serde_json::Value =
        serde_json::from_str(&desk.read("tickets/T-1001.json")).unwrap();
    for key in ["slaMinutes", "channel", "customer"] {
        doc.as_object_mut().unwrap().remove(key);
    }
    doc["id"] = "T-1007".into();
    desk.write("tickets/T-1007.json", &doc.to_string());
    // A file that is really refused (a status TinyCode does not know).
    desk.write(
        "tickets/T-1008.json",
        &desk
            .read("tickets/T-1001.json")
            .replace("T-1001", "T-1008")
            .replace("\"open\"", "\"lost\""),
    );
    desk.ok(&["daemon", "start"]);
    let t = desk.json(&["ticket", "show", "T-1007"]);
    assert_eq!(
        (t["slaMinutes"].as_u64(), t["channel"].as_str()),
        (Some(1440), Some("email")),
        "{t}"
    );
    let status = desk.json(&["daemon", "status"]);
    let problems = status["workspaceProblems"].to_string();
    assert!(
        problems.contains("tickets/T-1008.json") && problems.contains("status"),
        "{status:#}"
    );
    let shown = desk.ok(&["daemon", "status"]);
    assert!(shown.contains("tickets/T-1008.json: "), "{shown}");
    let doctor = desk.run(&["doctor"]);
    assert!(
        doctor.stdout.contains("tickets/T-1008.json") && doctor.stdout.contains("status"),
        "{doctor:?}"
    );
    // Fixed, it is read at the next read-back and no longer listed.
    desk.stop();
    desk.write(
        "tickets/T-1008.json",
        &desk.read("tickets/T-1001.json").replace("T-1001", "T-1008"),
    );
    desk.ok(&["daemon", "start"]);
    assert_eq!(desk.json(&["ticket", "show", "T-1008"])["id"], "T-1008");
    let status = desk.json(&["daemon", "status"]);
    assert!(
        !status["workspaceProblems"].to_string().contains("T-1008"),
        "{status:#}"
    );
    desk.stop();
}

#[test]
fn a_bad_config_stops_the_daemon_with_the_key_named() {
    let desk = Desk::fixture();
    // A known key with a bad value stops it.
    desk.write(
        ".tinycode/config.json",
        r#"{"queues": ["售后组"], "maxStepsPerTurn": 0}"#,
    );
    let out = desk.run(&["ticket", "list"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr
            .contains("`maxStepsPerTurn` must be a whole number"),
        "{}",
        out.stderr
    );
    assert!(!desk.socket().exists());
    // An unknown key is ignored, as TinyCode ignores it, and named in the
    // log and by `doctor` with the file.
    desk.write(
        ".tinycode/config.json",
        r#"{"queues": ["售后组"], "maxStepz": 3}"#,
    );
    let out = desk.run(&["ticket", "list"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        desk.log().contains("config.json: unknown key `maxStepz`")
            && desk.log().contains("; ignored"),
        "{}",
        desk.log()
    );
    let doctor = desk.run(&["doctor"]);
    assert!(
        doctor.stdout.contains("unknown key `maxStepz`") && doctor.stdout.contains("config.json"),
        "{doctor:?}"
    );
}

#[test]
fn init_demo_scaffolds_a_desk_the_daemon_serves() {
    let desk = Desk::new();
    let dir = desk.root.join("fresh");
    let out = desk
        .cli()
        .current_dir(&desk.root)
        .args(["init", "fresh", "--demo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(dir.join(".gitignore").exists());
    let again = desk
        .cli()
        .current_dir(&desk.root)
        .args(["init", "fresh"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a tinycode workspace"));
    let list = desk
        .cli()
        .current_dir(&dir)
        .args(["--json", "ticket", "list"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(list["total"].as_u64().unwrap() >= 30, "{list}");
    let _ = desk
        .cli()
        .current_dir(&dir)
        .args(["daemon", "stop"])
        .output();
}

#[test]
fn demo_command_triages_the_demo_desk_and_leaves_the_daemon_running() {
    let desk = Desk::new();
    let dir = desk.root.join("demo");
    let out = desk.run(&["--json", "demo", dir.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["created"], true);
    // The CLI under test is not `tinycode` on PATH: the printed command
    // names it by its full path, so it works when pasted.
    let me = tinycode_tests::bin("tinycode").canonicalize().unwrap();
    assert_eq!(
        v["stop"],
        format!("{} -w {} daemon stop", me.display(), dir.display()),
        "{v}"
    );
    let results = v["results"].as_array().unwrap();
    assert!(results.len() >= 30, "{}", results.len());
    assert!(
        results
            .iter()
            .all(|r| r["outcome"] == "completed" || r["outcome"] == "waiting for approval"),
        "{results:?}"
    );
    let t1001 = results.iter().find(|r| r["ticket"] == "T-1001").unwrap();
    assert_eq!(
        (
            t1001["category"].as_str(),
            t1001["queue"].as_str(),
            t1001["status"].as_str()
        ),
        (Some("退款"), Some("售后组"), Some("routed"))
    );
    let waiting = v["needApproval"].as_array().unwrap();
    let t1003 = waiting
        .iter()
        .find(|w| w["ticket"] == "T-1003")
        .unwrap_or_else(|| panic!("{waiting:?}"));
    let approval = t1003["approval"].as_str().unwrap().to_string();
    assert!(approval.starts_with("A-"), "{approval}");
    // Answering it lets the waiting turn finish in the daemon.
    let ws = ["-w", dir.to_str().unwrap()];
    let listed = desk.run(&[ws[0], ws[1], "approvals", "list"]);
    assert!(listed.stdout.contains(&approval), "{listed:?}");
    let approved = desk.run(&[ws[0], ws[1], "approvals", "approve", &approval]);
    assert!(approved.stdout.contains("allowed by"), "{approved:?}");
    let escalated = tinycode_tests::wait_until(std::time::Duration::from_secs(20), || {
        let t = desk.run(&[ws[0], ws[1], "--json", "ticket", "show", "T-1003"]);
        t.stdout.contains("\"escalateLevel\": 2")
    });
    assert!(escalated, "the approved turn went on and escalated T-1003");
    let pid = v["daemonPid"].as_u64().unwrap() as u32;
    assert!(tinycode_tests::alive(pid), "left running");
    // Running it again reuses the desk and triages nothing twice.
    let again = desk.run(&["--json", "demo", dir.to_str().unwrap()]);
    let again: serde_json::Value = serde_json::from_str(&again.stdout).unwrap();
    assert_eq!(again["created"], false);
    assert_eq!(again["results"].as_array().unwrap().len(), results.len());
    let queued = desk
        .run(&[
            ws[0],
            ws[1],
            "--json",
            "events",
            "--stream",
            "triage-T-1001",
        ])
        .stdout
        .matches("triageQueued")
        .count();
    assert_eq!(queued, 1, "T-1001 was triaged once");
    let stop = desk
        .cli()
        .args(["-w", dir.to_str().unwrap(), "daemon", "stop"])
        .output()
        .unwrap();
    assert!(stop.status.success(), "{stop:?}\n{}", desk.log());
    assert!(!tinycode_tests::alive(pid));
}

#[tokio::test]
async fn watch_replays_ticket_changes_then_streams_new_ones() {
    let desk = Desk::fixture();
    desk.ok(&["ticket", "message", "T-1003", "还在等"]);
    let channel = connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap();
    let mut client = TicketsClient::new(channel);
    let mut watch = client
        .watch(WatchTicketsRequest {
            from_sequence: 0,
            id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    for _ in 0..4 {
        let change = watch.message().await.unwrap().unwrap();
        let t = change.ticket.unwrap();
        seen.push((t.id.clone(), t.messages.len()));
    }
    assert_eq!(
        seen,
        [
            ("T-1001".into(), 1),
            ("T-1002".into(), 1),
            ("T-1003".into(), 1),
            ("T-1003".into(), 2)
        ],
        "catch-up folds each ticket as of its event"
    );
    let created = client
        .create(CreateTicketRequest {
            subject: "Live one".into(),
            customer: "Bo".into(),
            channel: "web".into(),
            body: "hello".into(),
            sla_minutes: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let live = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(live.ticket.unwrap().id, created.id);
    assert!(live.event.unwrap().payload.is_some());
    // Watching one ticket only sees that ticket.
    let mut one = client
        .watch(WatchTicketsRequest {
            from_sequence: 0,
            id: "T-1003".into(),
        })
        .await
        .unwrap()
        .into_inner();
    for expected in [1, 2] {
        let c = one.message().await.unwrap().unwrap();
        assert_eq!(c.ticket.unwrap().messages.len(), expected);
    }
    let err = client
        .create(CreateTicketRequest {
            subject: "x".into(),
            customer: "y".into(),
            body: "z".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("`channel` is required"),
        "{}",
        err.message()
    );
}

#[test]
fn a_persons_reply_note_classification_route_close_and_reopen_are_recorded_with_who() {
    let desk = Desk::fixture();
    let out = desk.ok(&["ticket", "reply", "T-1002", "我们已联系快递，明天送达。"]);
    assert!(out.starts_with("T-1002: "), "{out}");
    desk.ok(&["ticket", "note", "T-1002", "customer called twice"]);
    desk.ok(&[
        "ticket",
        "classify",
        "T-1002",
        "--category",
        "物流",
        "--priority",
        "P1",
    ]);
    desk.ok(&[
        "ticket",
        "route",
        "T-1002",
        "物流组",
        "--reason",
        "parcel stuck",
    ]);
    let closed = desk.json(&["ticket", "close", "T-1002", "--reason", "delivered"]);
    assert_eq!(closed["status"], "resolved", "{closed}");
    // Bad input is refused with the field named; nothing is stored.
    let events_before = desk.events(&["--stream", "ticket-T-1002"]).len();
    for (args, said) in [
        (vec!["ticket", "route", "T-1002", "火星组"], "queue"),
        (
            vec!["ticket", "classify", "T-1002", "--priority", "P9"],
            "priority",
        ),
        (vec!["ticket", "reply", "T-1002", "   "], "text"),
    ] {
        let out = desk.run(&args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(out.stderr.contains(said), "{args:?}: {}", out.stderr);
    }
    assert_eq!(
        desk.events(&["--stream", "ticket-T-1002"]).len(),
        events_before
    );
    let reopened = desk.json(&["ticket", "reopen", "T-1002"]);
    assert_eq!(reopened["status"], "open");
    // The file follows, and every change names who made it.
    desk.mirror_settled();
    let file = desk.ticket_file("T-1002");
    let texts = file["messages"].to_string();
    assert!(texts.contains("我们已联系快递，明天送达。"), "{file:#}");
    assert_eq!(file["queue"], "物流组");
    assert!(file["notes"].to_string().contains("customer called twice"));
    let events = desk.events(&["--stream", "ticket-T-1002"]);
    for kind in [
        "agentReplyAdded",
        "ticketNoteAdded",
        "ticketClassified",
        "ticketRouted",
        "ticketStatusChanged",
    ] {
        let e = events
            .iter()
            .rev()
            .find_map(|e| e.get(kind))
            .unwrap_or_else(|| panic!("no {kind}: {events:#?}"));
        let by = e["by"]["name"].as_str().unwrap_or_default();
        assert!(by.starts_with("tinycode-cli/"), "{kind}: {e}");
        assert!(
            e.get("origin").is_none(),
            "a person's decision has no tool origin: {e}"
        );
    }
    desk.stop();
}
