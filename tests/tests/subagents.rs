//! Sub-agents as child sessions, end to end against the real daemon and a
//! scripted OpenAI-compatible mock: workers run at once, are bounded,
//! only read, are cancelled with their parent's turn, come back
//! `interrupted` after a kill -9, and can be attached to like any session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::mock_llm::{MockLlm, Reply, text};
use tinycode_tests::{Desk, LineReader, kill, wait_until};

/// What the daemon's worker prompt starts with.
const WORKER: &str = "You are a read-only research worker";

fn system(req: &Value) -> String {
    req["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The turn's user message (the last one) and what followed it.
fn this_turn(req: &Value) -> (String, Vec<Value>) {
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .unwrap_or(0);
    let user = messages[start]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (user, messages[start + 1..].to_vec())
}

fn results(after: &[Value]) -> Vec<String> {
    after
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn calls(list: &[(&str, Value)]) -> Reply {
    Reply::Tools(
        list.iter()
            .map(|(n, a)| (n.to_string(), a.clone()))
            .collect(),
    )
}

/// `wait_agent` for a1, a2 and a3, a minute each.
fn wait_for_three() -> Reply {
    let wait = |id: &str| ("wait_agent", json!({"agent_id": id, "timeout_seconds": 60}));
    calls(&[wait("a1"), wait("a2"), wait("a3")])
}

fn desk_with(mock: &MockLlm) -> Desk {
    Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test")
}

fn stream(desk: &Desk, session: &str) -> Vec<Value> {
    desk.events(&["--stream", &format!("session-{session}")])
}

fn payloads<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter_map(|e| e.get(kind)).collect()
}

fn sequence_of(events: &[Value], kind: &str) -> u64 {
    events
        .iter()
        .find(|e| e.get(kind).is_some())
        .and_then(|e| {
            e["sequence"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .or(e["sequence"].as_u64())
        })
        .unwrap_or(0)
}

fn workers_of(desk: &Desk, parent: &str) -> Vec<String> {
    payloads(&stream(desk, parent), "subAgentSpawned")
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_string())
        .collect()
}

fn turn_outcome(desk: &Desk, session: &str) -> Option<String> {
    payloads(&stream(desk, session), "turnCompleted")
        .last()
        .map(|c| {
            c["outcome"]
                .as_str()
                .unwrap_or("TURN_OUTCOME_UNSPECIFIED")
                .to_string()
        })
}

#[test]
fn two_workers_run_at_once_a_fourth_is_refused_and_a_worker_cannot_write() {
    let mock = MockLlm::respond(|req| {
        let (user, after) = this_turn(req);
        if system(req).starts_with(WORKER) {
            // A worker: one read, then (slowly) its answer; the one asked
            // to write tries to.
            if user.contains("try a write") && after.is_empty() {
                return calls(&[(
                    "classify_ticket",
                    json!({"ticket_id": "T-1001", "category": "账户", "priority": "P3"}),
                )]);
            }
            if after.is_empty() {
                return calls(&[("search_knowledge", json!({"query": "refund", "limit": 1}))]);
            }
            let answer = format!("answer to <{user}>");
            return Reply::Delayed(Duration::from_millis(1500), Box::new(text(&answer)));
        }
        let done = results(&after);
        match done.len() {
            0 => calls(&[
                ("spawn_agent", json!({"task": "wording of refund-policy"})),
                ("spawn_agent", json!({"task": "wording of shipping-policy"})),
            ]),
            2 => calls(&[
                ("spawn_agent", json!({"task": "try a write on T-1001"})),
                ("spawn_agent", json!({"task": "one too many"})),
            ]),
            4 => wait_for_three(),
            _ => text(&format!("Workers said: {}", done[4..].join(" / "))),
        }
    });
    let desk = desk_with(&mock);
    let before = desk.ticket_file("T-1001");
    let parent = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &parent, "check the policies"]);
    let finished = wait_until(Duration::from_secs(60), || {
        turn_outcome(&desk, &parent).is_some()
    });
    assert!(finished, "{}", desk.log());
    assert_eq!(
        turn_outcome(&desk, &parent).unwrap(),
        "TURN_OUTCOME_COMPLETED"
    );
    let events = stream(&desk, &parent);

    // The 4th concurrent spawn was refused with an error the model can act on.
    let spawns: Vec<&Value> = payloads(&events, "toolCallFinished")
        .into_iter()
        .filter(|f| f["call"]["name"] == "spawn_agent")
        .collect();
    assert_eq!(spawns.len(), 4);
    assert!(
        spawns[..3].iter().all(|f| f.get("isError").is_none()),
        "{spawns:#?}"
    );
    let refused = spawns[3]["content"].as_str().unwrap();
    assert!(
        spawns[3]["isError"] == true && refused.contains("3 workers are already running"),
        "{spawns:#?}"
    );

    // Three child sessions, linked to the call that spawned them.
    let workers = workers_of(&desk, &parent);
    assert_eq!(workers.len(), 3);
    let first = stream(&desk, &workers[0]);
    let created = &first[0]["sessionCreated"];
    assert_eq!(created["parent"]["sessionId"], parent.as_str());
    assert_eq!(created["parent"]["agentId"], "a1");
    assert_eq!(created["parent"]["turn"].as_u64(), Some(1), "{created}");

    // Both ran at once: each started before the other ended.
    let second = stream(&desk, &workers[1]);
    let (s1, e1) = (
        sequence_of(&first, "turnStarted"),
        sequence_of(&first, "turnCompleted"),
    );
    let (s2, e2) = (
        sequence_of(&second, "turnStarted"),
        sequence_of(&second, "turnCompleted"),
    );
    assert!(
        s1 > 0 && s2 > 0 && s1 < e2 && s2 < e1,
        "{s1}..{e1} vs {s2}..{e2}"
    );

    // The parent read both answers and cited them.
    let finals: Vec<&Value> = payloads(&events, "subAgentFinished");
    assert_eq!(finals.len(), 3, "{finals:#?}");
    let answer = payloads(&events, "assistantMessageAdded")
        .last()
        .and_then(|a| a["text"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        answer.contains("answer to <wording of refund-policy>")
            && answer.contains("answer to <wording of shipping-policy>"),
        "{answer}"
    );

    // The worker that tried to write was refused, and the ticket is as it was.
    let writer = stream(&desk, &workers[2]);
    let refusal = payloads(&writer, "toolCallFinished")
        .into_iter()
        .find(|f| f["call"]["name"] == "classify_ticket")
        .expect("the worker's write attempt")
        .clone();
    assert_eq!(refusal["isError"], true);
    assert!(
        refusal["content"]
            .as_str()
            .unwrap()
            .contains("a worker only reads"),
        "{refusal}"
    );
    desk.mirror_settled();
    assert_eq!(desk.ticket_file("T-1001"), before);

    // Workers stay out of the session list, and show under their parent.
    let listed = desk.ok(&["session", "list"]);
    assert!(
        listed.contains(&parent) && !listed.contains(&workers[0]),
        "{listed}"
    );
    let waited = "● wait_agent a1 → ✓ 2 steps";
    let shown = desk.ok_when(&["session", "show", &parent, "--children"], &[waited]);
    for w in &workers {
        assert!(shown.contains(w.as_str()), "{shown}");
    }
    assert!(
        shown.contains("● spawn_agent → a1 \"wording of refund-policy\""),
        "{shown}"
    );
    assert!(shown.contains("● wait_agent a1 → ✓ 2 steps"), "{shown}");
    desk.stop();
}

#[test]
fn cancelling_the_parent_cancels_its_workers_and_a_kill_leaves_them_interrupted() {
    let mock = MockLlm::respond(|req| {
        let (user, after) = this_turn(req);
        if system(req).starts_with(WORKER) {
            return Reply::Hang;
        }
        let done = results(&after);
        match (user.as_str(), done.len()) {
            ("again", 0) => calls(&[(
                "wait_agent",
                json!({"agent_id": "a1", "timeout_seconds": 60}),
            )]),
            ("again", _) => text(&format!("a1 said: {}", done[0])),
            (_, 0) => calls(&[
                ("spawn_agent", json!({"task": "slow one"})),
                ("spawn_agent", json!({"task": "slow two"})),
            ]),
            (_, 2) => calls(&[(
                "wait_agent",
                json!({"agent_id": "a1", "timeout_seconds": 600}),
            )]),
            _ => text("unexpected"),
        }
    });
    let desk = desk_with(&mock);

    // Cancel the parent while both workers run: all three turns end cancelled.
    let parent = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &parent, "start two"]);
    let running = wait_until(Duration::from_secs(30), || {
        let workers = workers_of(&desk, &parent);
        workers.len() == 2
            && workers
                .iter()
                .all(|w| sequence_of(&stream(&desk, w), "turnStarted") > 0)
    });
    assert!(running, "{}", desk.log());
    std::thread::sleep(Duration::from_millis(300));
    desk.ok(&["session", "cancel", &parent]);
    let mut all = vec![parent.clone()];
    all.extend(workers_of(&desk, &parent));
    let cancelled = wait_until(Duration::from_secs(20), || {
        all.iter()
            .all(|s| turn_outcome(&desk, s).as_deref() == Some("TURN_OUTCOME_CANCELLED"))
    });
    assert!(
        cancelled,
        "{:?}",
        all.iter()
            .map(|s| turn_outcome(&desk, s))
            .collect::<Vec<_>>()
    );
    let finals = payloads(&stream(&desk, &parent), "subAgentFinished")
        .iter()
        .map(|f| f["outcome"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert_eq!(finals, ["TURN_OUTCOME_CANCELLED", "TURN_OUTCOME_CANCELLED"]);

    // kill -9 while a worker runs and its parent waits for it.
    let parent = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &parent, "start two"]);
    let waiting = wait_until(Duration::from_secs(30), || {
        payloads(&stream(&desk, &parent), "assistantMessageAdded")
            .iter()
            .any(|a| a["toolCalls"][0]["name"] == "wait_agent")
    });
    assert!(waiting, "{}", desk.log());
    let worker = workers_of(&desk, &parent)[0].clone();
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || {
        !tinycode_tests::alive(pid)
    }));
    // The next command starts the daemon again.
    let recovered = wait_until(Duration::from_secs(30), || {
        turn_outcome(&desk, &worker).as_deref() == Some("TURN_OUTCOME_INTERRUPTED")
    });
    assert!(recovered, "{}", desk.log());
    assert_eq!(
        turn_outcome(&desk, &parent).as_deref(),
        Some("TURN_OUTCOME_INTERRUPTED")
    );
    let finished = payloads(&stream(&desk, &parent), "subAgentFinished")
        .iter()
        .map(|f| f["outcome"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert_eq!(
        finished,
        ["TURN_OUTCOME_INTERRUPTED", "TURN_OUTCOME_INTERRUPTED"]
    );
    // Waiting for it again returns at once with that outcome.
    desk.ok(&["session", "send", &parent, "again"]);
    let answered = wait_until(Duration::from_secs(20), || {
        payloads(&stream(&desk, &parent), "turnCompleted").len() == 2
    });
    assert!(answered, "{}", desk.log());
    let text = payloads(&stream(&desk, &parent), "assistantMessageAdded")
        .last()
        .and_then(|a| a["text"].as_str().map(String::from))
        .unwrap_or_default();
    assert!(text.contains("a1 interrupted"), "{text}");
    desk.stop();
}

#[test]
fn two_clients_attached_to_a_worker_see_its_turn_live() {
    let mock = MockLlm::respond(|req| {
        let (_, after) = this_turn(req);
        if system(req).starts_with(WORKER) {
            return Reply::Delayed(
                Duration::from_secs(3),
                Box::new(text("the worker's answer")),
            );
        }
        match results(&after).len() {
            0 => calls(&[("spawn_agent", json!({"task": "look something up"}))]),
            1 => calls(&[("wait_agent", json!({"agent_id": "a1"}))]),
            _ => text("done"),
        }
    });
    let desk = desk_with(&mock);
    let parent = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &parent, "go"]);
    assert!(wait_until(Duration::from_secs(30), || workers_of(
        &desk, &parent
    )
    .len()
        == 1));
    let worker = workers_of(&desk, &parent)[0].clone();
    let attach = || {
        let mut cmd = desk.cli();
        cmd.args(["--json", "session", "attach", &worker]);
        LineReader::spawn(cmd)
    };
    let (mut a, mut b) = (attach(), attach());
    let done = |lines: &[String]| lines.iter().any(|l| l.contains("turnCompleted"));
    let a = a.until(Duration::from_secs(30), done).to_vec();
    let b = b.until(Duration::from_secs(30), done).to_vec();
    assert!(
        a.iter().any(|l| l.contains("the worker's answer")),
        "{a:#?}"
    );
    let events = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l.contains("\"event\""))
            .cloned()
            .collect()
    };
    assert_eq!(events(&a), events(&b), "the same events in the same order");
    assert!(wait_until(Duration::from_secs(20), || {
        turn_outcome(&desk, &parent).as_deref() == Some("TURN_OUTCOME_COMPLETED")
    }));
    desk.stop();
}

#[test]
fn the_offline_model_asks_a_worker_before_an_l2_escalation_and_cites_it() {
    let desk = Desk::fixture();
    let session = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &session, "triage T-1003"]);
    let done = wait_until(Duration::from_secs(60), || {
        turn_outcome(&desk, &session).is_some()
    });
    assert!(done, "{}", desk.log());
    let escalated = "● escalate_ticket T-1003 → ✓ L2";
    let shown = desk.ok_when(&["session", "show", &session, "--children"], &[escalated]);
    assert!(shown.contains("● spawn_agent → a1"), "{shown}");
    assert!(shown.contains("● wait_agent a1 → ✓"), "{shown}");
    assert!(shown.contains("● escalate_ticket T-1003 → ✓ L2"), "{shown}");
    // The worker read the policy; the escalation cites what it found.
    let worker = workers_of(&desk, &session)[0].clone();
    let read = desk.ok(&["session", "show", &worker]);
    assert!(read.contains("● read_article escalation-policy"), "{read}");
    let escalated = payloads(&stream(&desk, &session), "toolCallFinished")
        .into_iter()
        .find(|f| f["call"]["name"] == "escalate_ticket")
        .map(|f| f["call"]["argumentsJson"].as_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(
        escalated.contains("依据 escalation-policy（子代理 a1 核对）"),
        "{escalated}"
    );
    desk.mirror_settled();
    assert_eq!(desk.ticket_file("T-1003")["escalateLevel"], 2);
    desk.stop();
}

fn finishes(desk: &Desk, parent: &str) -> Vec<(String, String)> {
    payloads(&stream(desk, parent), "subAgentFinished")
        .iter()
        .map(|f| {
            (
                f["agentId"].as_str().unwrap().to_string(),
                f["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn workers_are_bounded_in_steps_and_time_cannot_spawn_close_on_request_and_go_with_their_parent() {
    let mock = MockLlm::respond(|req| {
        let (user, after) = this_turn(req);
        if system(req).starts_with(WORKER) {
            if user.contains("loop") {
                return calls(&[("search_knowledge", json!({"query": "refund"}))]);
            }
            if user.contains("spawn") && after.is_empty() {
                return calls(&[("spawn_agent", json!({"task": "a grandchild"}))]);
            }
            if user.contains("spawn") {
                return text("no helpers for me");
            }
            return Reply::Hang;
        }
        let done = results(&after);
        match (user.as_str(), done.len()) {
            ("limits", 0) => calls(&[
                ("spawn_agent", json!({"task": "loop forever"})),
                ("spawn_agent", json!({"task": "hang forever"})),
                ("spawn_agent", json!({"task": "spawn a helper"})),
            ]),
            ("limits", 3) => wait_for_three(),
            ("close", 0) => calls(&[("spawn_agent", json!({"task": "hang until closed"}))]),
            ("close", 1) => calls(&[("close_agent", json!({"agent_id": "a4"}))]),
            _ => text(&format!("done: {}", done.join(" / "))),
        }
    });
    let desk = desk_with(&mock);
    desk.edit_config(|c| {
        c["subAgents"] = json!({"maxSteps": 2, "timeoutSeconds": 3});
    });
    let parent = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &parent, "limits"]);
    assert!(
        wait_until(Duration::from_secs(60), || turn_outcome(&desk, &parent)
            .is_some()),
        "{}",
        desk.log()
    );
    // a1 ran out of steps, a2 out of time, a3 could not spawn and answered.
    let mut ends = finishes(&desk, &parent);
    ends.sort();
    assert_eq!(
        ends,
        [
            ("a1".to_string(), "TURN_OUTCOME_MAX_STEPS".to_string()),
            ("a2".to_string(), "TURN_OUTCOME_TIMED_OUT".to_string()),
            ("a3".to_string(), "TURN_OUTCOME_COMPLETED".to_string()),
        ]
    );
    let workers = workers_of(&desk, &parent);
    let looped = payloads(&stream(&desk, &workers[0]), "toolCallFinished").len();
    assert_eq!(looped, 2, "maxSteps 2 allows two rounds of tool calls");
    let spawner = stream(&desk, &workers[2]);
    let refused = payloads(&spawner, "toolCallFinished")
        .into_iter()
        .find(|f| f["call"]["name"] == "spawn_agent")
        .expect("the worker's spawn attempt")
        .clone();
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        payloads(&spawner, "subAgentSpawned").is_empty(),
        "a worker has no workers"
    );
    assert_eq!(
        turn_outcome(&desk, &parent).unwrap(),
        "TURN_OUTCOME_COMPLETED"
    );

    // close_agent stops one worker at once, its parent's turn goes on.
    desk.ok(&["session", "send", &parent, "close"]);
    assert!(
        wait_until(Duration::from_secs(30), || {
            payloads(&stream(&desk, &parent), "turnCompleted").len() == 2
        }),
        "{}",
        desk.log()
    );
    let ends = finishes(&desk, &parent);
    assert_eq!(
        ends.last().unwrap(),
        &("a4".to_string(), "TURN_OUTCOME_CANCELLED".to_string())
    );
    let closed = payloads(&stream(&desk, &parent), "toolCallFinished")
        .into_iter()
        .find(|f| f["call"]["name"] == "close_agent")
        .map(|f| f["content"].as_str().unwrap().to_string())
        .unwrap();
    assert!(closed.contains("a4 cancelled"), "{closed}");
    assert_eq!(
        turn_outcome(&desk, &parent).unwrap(),
        "TURN_OUTCOME_COMPLETED"
    );

    // Deleting the parent takes its workers with it.
    let workers = workers_of(&desk, &parent);
    assert_eq!(workers.len(), 4);
    desk.ok(&["session", "delete", &parent]);
    for w in &workers {
        let shown = desk.run(&["session", "show", w]);
        assert_ne!(shown.code, 0, "{w} is still shown");
        assert!(shown.stderr.contains("deleted"), "{}", shown.stderr);
    }
    desk.stop();
}
