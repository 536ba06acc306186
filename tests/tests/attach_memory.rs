//! Attach replay in bounded memory (issue 29): 32 attach-only clients
//! replaying a session of 3,000 events over and over keep the daemon under
//! 64 MiB, and once they leave its resident size is back near idle.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::AttachRequest;
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_tests::mock_llm::{MockLlm, Reply};
use tinycode_tests::{Desk, proc_status_kib};

const CLIENTS: usize = 32;
const EVENTS: u64 = 3_000;
const TOOLS_PER_STEP: usize = 24;
const STEPS_PER_TURN: usize = 4;

/// Steps of many small tool calls, then a short answer.
fn responder(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let since_user = messages
        .iter()
        .rev()
        .take_while(|m| m["role"] != "user")
        .filter(|m| m["role"] == "assistant")
        .count();
    if since_user < STEPS_PER_TURN {
        Reply::Tools(
            (0..TOOLS_PER_STEP)
                .map(|_| ("search_knowledge".to_string(), json!({"query": "zzqx"})))
                .collect(),
        )
    } else {
        Reply::Text("done".into())
    }
}

fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_attach_only_clients_replay_in_bounded_memory() {
    let mock = MockLlm::respond(responder);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test-attach")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    let id = desk.new_session(&["--title", "long"]);
    let mut events = 0u64;
    let mut turns = 0;
    while events < EVENTS {
        desk.ok(&[
            "run",
            "--approve",
            "auto",
            "--session",
            &id,
            &format!("turn {turns}"),
        ]);
        turns += 1;
        events = desk
            .ok(&["--json", "events", "--stream", &format!("session-{id}")])
            .lines()
            .count() as u64;
    }
    let pid = desk.daemon_pid().unwrap();
    // Idle: settled after the turns (the start-up trim included).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_kib(pid);

    let ch = connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let replays = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (ch, id, stop, replays) = (ch.clone(), id.clone(), stop.clone(), replays.clone());
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut stream = SessionsClient::new(ch.clone())
                    .attach(AttachRequest {
                        session_id: id.clone(),
                        from_sequence: 0,
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let mut got = 0u64;
                while got < events {
                    match stream.message().await {
                        Ok(Some(u))
                            if matches!(
                                u.update,
                                Some(tinycode_shared::proto::session_update::Update::Event(_))
                            ) =>
                        {
                            got += 1
                        }
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
                assert_eq!(got, events, "a replay came back short");
                replays.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(60) {
        peak = peak.max(rss_kib(pid));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    drop(ch);
    let replayed = replays.load(Ordering::Relaxed);
    assert!(
        replayed >= CLIENTS as u64,
        "only {replayed} replays finished"
    );
    // Back near idle once they left.
    let mut after = rss_kib(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while after > idle + idle / 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        after = rss_kib(pid);
    }
    eprintln!(
        "{events} events, {replayed} replays by {CLIENTS} clients: RSS idle {} KiB, peak {} KiB, after {} KiB",
        idle, peak, after
    );
    // The 64 MiB bound is for the release daemon (idle about 32 MiB; a
    // debug build idles near 75 MiB): under `cargo test` the bound is on
    // what replaying adds, which is what grew without limit before (31 →
    // 277 MiB).
    let release = tinycode_tests::bin_dir().ends_with("release");
    if release {
        assert!(
            peak <= 64 * 1024,
            "the daemon peaked at {} MiB while replaying",
            peak / 1024
        );
    }
    assert!(
        peak <= idle + 16 * 1024,
        "replaying grew the daemon from {idle} KiB to {peak} KiB"
    );
    assert!(
        after <= idle + idle / 10,
        "RSS after the clients left is {after} KiB, idle was {idle} KiB"
    );
    desk.stop();
}
