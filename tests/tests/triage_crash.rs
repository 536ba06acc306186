//! A kill -9 loop over background triage (issue 29): however often the
//! daemon dies mid-triage, every ticket ends routed or escalated, or handed
//! to a person with a note — never classified and left unrouted — and each
//! triage record's outcome says what happened.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tinycode_tests::{Desk, alive, kill, wait_until};

const KILLS: usize = 30;

/// The demo desk with auto-triage, and `copies` more of each demo ticket.
fn busy_demo_desk(copies: usize) -> Desk {
    let desk = Desk::new();
    let ws = desk.workspace();
    desk.ok(&["init", ws.to_str().unwrap(), "--demo"]);
    desk.edit_config(|c| {
        c["autoTriage"]["enabled"] = true.into();
        c["autoTriage"]["concurrency"] = 2.into();
        c["autoTriage"]["pollIntervalMs"] = 100.into();
    });
    let demo: Vec<Value> = std::fs::read_dir(ws.join("tickets"))
        .unwrap()
        .map(|e| {
            serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    let mut n = 5000;
    for copy in 0..copies {
        for t in &demo {
            n += 1;
            let mut t = t.clone();
            let id = format!("T-{n}");
            t["id"] = id.clone().into();
            t["subject"] = format!("{} ({copy})", t["subject"].as_str().unwrap()).into();
            desk.write(&format!("tickets/{id}.json"), &t.to_string());
        }
    }
    desk
}

fn approve_pending(desk: &Desk) -> usize {
    let out = desk.run(&["--json", "--no-autostart", "approvals", "list"]);
    let Ok(list) = serde_json::from_str::<Value>(&out.stdout) else {
        return 0;
    };
    let mut decided = 0;
    for a in list.as_array().into_iter().flatten() {
        let id = a["request"]["approvalId"].as_str().unwrap_or_default();
        if !id.is_empty()
            && desk
                .run(&["--no-autostart", "approvals", "approve", id])
                .code
                == 0
        {
            decided += 1;
        }
    }
    decided
}

/// Wait (a moment at most) for an approval to come up, then decide every
/// pending one.
fn approve_when_one_waits(desk: &Desk) -> usize {
    let mut decided = 0;
    wait_until(Duration::from_secs(3), || {
        decided += approve_pending(desk);
        decided > 0
    });
    decided
}

/// A proto3 JSON integer (64-bit ones are strings).
fn number(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

fn triage_status(desk: &Desk) -> Value {
    desk.json(&["triage", "status"])
}

#[test]
fn a_kill_9_loop_over_background_triage_never_leaves_a_ticket_half_done() {
    let desk = busy_demo_desk(4);
    let mut approved = 0;
    let mut approved_in_loop = 0;
    for round in 0..KILLS {
        let out = desk.run(&["daemon", "start"]);
        assert_eq!(out.code, 0, "round {round}: {out:?}\n{}", desk.log());
        // Let triage run a while (varied, deterministic), deciding the
        // approvals that came up meanwhile.
        std::thread::sleep(Duration::from_millis(80 + (round as u64 * 37) % 220));
        if round % 3 == 1 {
            approved_in_loop += approve_when_one_waits(&desk);
        }
        let pid = desk.daemon_pid().unwrap();
        kill(pid, "KILL");
        assert!(wait_until(Duration::from_secs(10), || !alive(pid)));
    }
    // Then let it finish, deciding every approval as it comes.
    desk.ok(&["daemon", "start"]);
    let settled = wait_until(Duration::from_secs(120), || {
        approved += approve_pending(&desk);
        let s = triage_status(&desk);
        s["queued"] == 0 && s["running"] == 0 && s["retrying"] == 0 && s["waitingForApproval"] == 0
    });
    let s = triage_status(&desk);
    assert!(settled, "triage did not settle: {s:#}\n{}", desk.log());
    assert!(
        approved_in_loop > 0,
        "no L2 approval was decided during the loop"
    );
    assert!(approved + approved_in_loop > 0);

    let tickets: usize = std::fs::read_dir(desk.workspace().join("tickets"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    let items = s["items"].as_array().unwrap();
    assert_eq!(items.len(), tickets, "every ticket has a triage record");
    assert_eq!(
        s["skipped"], 0,
        "no ticket was handled before its triage: {s:#}"
    );

    // Which tickets the triage sessions placed, from the log.
    let mut routed: BTreeMap<String, usize> = BTreeMap::new();
    let mut escalated: BTreeMap<String, usize> = BTreeMap::new();
    let mut interrupted_with_steps = 0;
    // Per session stream and turn: assistant messages and tool results
    // stored, to hold each interrupted turn's counts against.
    let mut made: BTreeMap<(String, u64), (u64, u64)> = BTreeMap::new();
    let mut interrupted = Vec::new();
    for e in desk.events(&[]) {
        let stream = e["streamId"].as_str().unwrap_or_default().to_string();
        if let Some(m) = e.get("assistantMessageAdded") {
            made.entry((stream.clone(), number(&m["turn"])))
                .or_default()
                .0 += 1;
        }
        if let Some(f) = e.get("toolCallFinished") {
            made.entry((stream.clone(), number(&f["turn"])))
                .or_default()
                .1 += 1;
        }
        if let Some(c) = e.get("turnCompleted")
            && c["outcome"] == "TURN_OUTCOME_INTERRUPTED"
        {
            interrupted.push((
                stream.clone(),
                number(&c["turn"]),
                number(&c["steps"]),
                number(&c["toolCalls"]),
            ));
        }
        let ticket = e["streamId"]
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("ticket-");
        if e.get("ticketRouted").is_some() {
            *routed.entry(ticket.to_string()).or_default() += 1;
        }
        if e.get("ticketEscalated").is_some() {
            *escalated.entry(ticket.to_string()).or_default() += 1;
        }
        if let Some(c) = e.get("turnCompleted")
            && c["outcome"] == "TURN_OUTCOME_INTERRUPTED"
            && c["steps"].as_u64().unwrap_or(0) > 0
        {
            interrupted_with_steps += 1;
        }
    }
    // The interrupted transcript counts the steps and calls it made.
    for (stream, turn, steps, calls) in &interrupted {
        let (messages, results) = made
            .get(&(stream.clone(), *turn))
            .copied()
            .unwrap_or_default();
        assert_eq!(
            (*steps, *calls),
            (messages, results),
            "{stream} turn {turn}: the interrupted turn's counts differ from its transcript"
        );
    }
    let mut half_done = Vec::new();
    for item in items {
        let id = item["ticket"].as_str().unwrap();
        let placed = routed.contains_key(id) || escalated.contains_key(id);
        let state = item["state"].as_str().unwrap();
        match state {
            "done" => {
                assert!(
                    placed,
                    "{id} is done but was neither routed nor escalated: {item:#}"
                );
                // The outcome says what happened: never "skipped" for a
                // ticket the round placed.
                let outcome = item["outcome"].as_str().unwrap_or_default();
                assert!(
                    !outcome.is_empty() && !outcome.contains("skipped"),
                    "{id}: {item:#}"
                );
            }
            "failed" | "incomplete" => {
                // Only a ticket the round did not place is handed over.
                assert!(!placed, "{id} was placed yet ended {state}: {item:#}");
                // Handed to a person, with the note saying why.
                let t = desk.json(&["ticket", "show", id]);
                let noted = t["notes"].as_array().into_iter().flatten().any(|n| {
                    n["text"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("Auto-triage gave up")
                });
                assert!(noted, "{id} failed without a note: {item:#}\n{t:#}");
            }
            other => panic!("{id} ended {other}: {item:#}"),
        }
        let classified = !item["category"].as_str().unwrap_or_default().is_empty();
        if classified && !placed && state == "done" {
            half_done.push(id.to_string());
        }
    }
    assert!(
        half_done.is_empty(),
        "classified but neither routed nor escalated: {half_done:?}"
    );
    assert!(
        routed.values().all(|n| *n == 1),
        "a ticket routed twice: {:?}",
        routed.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    assert!(
        escalated.values().all(|n| *n == 1),
        "a ticket escalated twice: {:?}",
        escalated
            .iter()
            .filter(|(_, n)| **n > 1)
            .collect::<Vec<_>>()
    );
    assert!(
        interrupted_with_steps > 0,
        "no interrupted turn counted the steps it made"
    );
    desk.stop();
}
