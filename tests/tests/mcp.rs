//! End-to-end: MCP servers' tools in the agent's registry, with the real
//! `@modelcontextprotocol/server-everything` (pinned, from npm) as the peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::mock_llm::{MockLlm, text, tool};
use tinycode_tests::{Desk, wait_until};

/// The pinned server-everything (installed once per target dir); `None`
/// (the test is skipped) without npm, unless CI is set.
fn everything() -> Option<PathBuf> {
    tinycode_tests::server_everything(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
}

fn mcp_desk(mock: &MockLlm, script: &std::path::Path) -> Desk {
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    desk.edit_config(|c| {
        c["mcpServers"] = json!({
            "everything": { "command": "node", "args": [script, "stdio"] },
            "broken": { "command": "/nonexistent/mcp-server" },
            "off": { "command": "node", "enabled": false },
            "crashing": { "command": "node", "args": ["-e", "console.error('bad config'); process.exit(3)"] },
        });
    });
    desk
}

fn servers(desk: &Desk) -> Value {
    desk.json(&["mcp", "status"])["servers"].clone()
}

fn server<'a>(all: &'a Value, name: &str) -> &'a Value {
    all.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()
}

#[test]
fn an_mcp_servers_tools_join_the_registry_and_a_broken_server_changes_nothing_else() {
    let Some(script) = everything() else { return };
    let mock = MockLlm::start(
        vec![
            tool(
                "mcp__everything__echo",
                json!({"message": "hello from mcp"}),
            ),
            text("echoed."),
            tool("mcp__everything__get-sum", json!({"a": 2, "b": 40})),
            text("summed."),
            tool(
                "mcp__everything__trigger-long-running-operation",
                json!({"duration": 60, "steps": 60}),
            ),
            text("never reached."),
        ],
        Duration::ZERO,
    );
    let desk = mcp_desk(&mock, &script);
    let mut last = Value::Null;
    let ready = wait_until(Duration::from_secs(180), || {
        last = servers(&desk);
        server(&last, "everything")["state"] == "ready"
            && server(&last, "broken")["state"] == "failed"
    });
    assert!(ready, "{last:#}\n{}", desk.log());
    assert!(
        server(&last, "everything")["tools"].as_u64().unwrap() >= 10,
        "{last:#}"
    );
    assert!(
        server(&last, "broken")["error"]
            .as_str()
            .unwrap()
            .contains("cannot start `/nonexistent/mcp-server`"),
        "{last:#}"
    );
    assert_eq!(server(&last, "off")["state"], "disabled");
    // A server that dies is failed with what it said, and started again
    // with backoff.
    let restarted = wait_until(Duration::from_secs(30), || {
        last = servers(&desk);
        server(&last, "crashing")["starts"].as_u64().unwrap_or(0) >= 2
    });
    assert!(restarted, "{last:#}");
    let crashing = server(&last, "crashing");
    assert!(
        crashing["error"]
            .as_str()
            .unwrap_or("")
            .contains("bad config")
            || crashing["state"] == "connecting",
        "{crashing}"
    );
    // The desk works as before meanwhile.
    assert_eq!(desk.json(&["ticket", "list"])["total"], 3);

    // An MCP tool asks by default: approved (auto), it runs on the server.
    let out = desk.run(&["run", "--approve", "auto", "echo please"]);
    assert_eq!(out.code, 0, "{out:?}");
    let finished: Vec<Value> = desk
        .events(&["--stream", "session-"])
        .into_iter()
        .filter_map(|e| e.get("toolCallFinished").cloned())
        .collect();
    assert!(
        finished[0]["content"]
            .as_str()
            .unwrap()
            .contains("hello from mcp"),
        "{finished:?}"
    );
    assert_ne!(finished[0]["isError"], true);
    let offered: Vec<String> = mock.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        offered.contains(&"mcp__everything__echo".to_string()),
        "{offered:?}"
    );
    assert!(offered.contains(&"classify_ticket".to_string()));

    // Refused (deny): the model is told why, and nothing reaches the server.
    let out = desk.run(&["run", "--approve", "deny", "sum please"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("comes from the MCP server everything"),
        "{}",
        out.stdout
    );

    // server-everything's long-running operation (60 s), cancelled a
    // moment after it started: the turn ends cancelled at once, and the
    // server is still there for the next call.
    let session = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &session, "take your time"]);
    let stream = format!("session-{session}");
    let asked = wait_until(Duration::from_secs(20), || {
        desk.events(&["--stream", &stream])
            .iter()
            .any(|e| e.get("assistantMessageAdded").is_some())
    });
    assert!(asked, "the model asked for the long operation");
    std::thread::sleep(Duration::from_millis(500));
    let cancelled_at = std::time::Instant::now();
    desk.ok(&["session", "cancel", &session]);
    let ended = wait_until(Duration::from_secs(10), || {
        desk.events(&["--stream", &stream])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_CANCELLED")
    });
    assert!(ended && cancelled_at.elapsed() < Duration::from_secs(10));
    assert_eq!(server(&servers(&desk), "everything")["state"], "ready");
    desk.stop();
}

#[test]
fn servers_and_skills_are_added_and_removed_without_a_daemon_restart() {
    let Some(script) = everything() else { return };
    let desk = Desk::fixture();
    assert_eq!(servers(&desk).as_array().unwrap().len(), 0);
    let pid = desk.daemon_pid().unwrap();
    let script = script.display().to_string();

    // Added: written to the config and connected, while the daemon runs.
    let added = desk.json(&["mcp", "add", "everything", "--", "node", &script, "stdio"]);
    assert_eq!(added["state"], "ready", "{added}");
    assert!(added["tools"].as_u64().unwrap() >= 10, "{added}");
    let config: Value = serde_json::from_str(&desk.read(".tinycode/config.json")).unwrap();
    assert_eq!(
        config["mcpServers"]["everything"],
        json!({"command": "node", "args": [script, "stdio"]})
    );
    let listed = desk.json(&["mcp", "list"]);
    assert!(
        server(&listed["servers"], "everything")["launch"]
            .as_str()
            .unwrap()
            .ends_with("index.js stdio"),
        "{listed}"
    );
    // A name taken is refused unless replaced; the file is unchanged.
    let again = desk.run(&["mcp", "add", "everything", "--", "node", "x.js"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains("--replace"), "{}", again.stderr);
    // A server that cannot start is kept, reported failed, exit 2.
    let broken = desk.run(&["mcp", "add", "broken", "--", "/nonexistent/mcp"]);
    assert_eq!(broken.code, 2, "{broken:?}");
    assert!(broken.stdout.contains("failed: cannot start"), "{broken:?}");
    // A spec that would not load is refused and never written.
    let bad = desk.run(&[
        "mcp",
        "add",
        "x",
        "--spec",
        r#"{"command": "c", "colour": 1}"#,
    ]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(
        bad.stderr.contains("unknown key `colour`"),
        "{}",
        bad.stderr
    );

    // Removed: out of the config, its tools gone; the others untouched.
    desk.ok(&["mcp", "remove", "everything"]);
    let now = servers(&desk);
    assert_eq!(now.as_array().unwrap().len(), 1, "{now}");
    assert_eq!(now[0]["name"], "broken");
    let config: Value = serde_json::from_str(&desk.read(".tinycode/config.json")).unwrap();
    assert!(config["mcpServers"].get("everything").is_none(), "{config}");
    let gone = desk.run(&["mcp", "remove", "everything"]);
    assert_eq!(gone.code, 1, "{gone:?}");
    assert!(gone.stderr.contains("known: broken"), "{}", gone.stderr);

    // Skills: installed from a folder, used by the next turn, removed.
    let source = tempfile::tempdir().unwrap();
    let skill = source.path().join("my-skill");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: refund-check\ndescription: Check a refund against the policy\n---\nRead refund-policy first.\n",
    )
    .unwrap();
    let refused = desk.run(&["run", "/refund-check T-1001"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    let installed = desk.json(&["skills", "install", skill.to_str().unwrap()]);
    assert_eq!(installed["installed"], "refund-check");
    assert!(
        desk.workspace()
            .join(".tinycode/skills/refund-check/SKILL.md")
            .is_file()
    );
    let names: Vec<Value> = desk.json(&["skills", "list"])["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert!(names.contains(&json!("refund-check")), "{names:?}");
    let used = desk.run(&["run", "--approve", "deny", "/refund-check T-1001"]);
    assert_ne!(used.code, 1, "{used:?}");
    let invoked = desk
        .events(&["--stream", "session-"])
        .into_iter()
        .filter_map(|e| e.get("userMessageAdded").cloned())
        .any(|m| m["skill"] == "refund-check");
    assert!(invoked, "the message was stored as the skill's command");
    desk.ok(&["skills", "remove", "refund-check"]);
    assert_eq!(desk.run(&["run", "/refund-check T-1001"]).code, 1);
    let missing = desk.run(&["skills", "install", "/nonexistent/skill"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains("no such file"),
        "{}",
        missing.stderr
    );

    assert_eq!(
        desk.daemon_pid(),
        Some(pid),
        "the daemon was never restarted"
    );
    desk.stop();
}

/// The odd MCP server of `tests/mcp/fake_server.js` in `mode`.
fn fake(mode: &str, extra: &[&str]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/fake_server.js");
    let mut args = vec![script.to_string(), mode.to_string()];
    args.extend(extra.iter().map(|a| a.to_string()));
    json!({ "command": "node", "args": args, "timeoutSeconds": 3 })
}

#[test]
fn hanging_garbled_and_huge_servers_are_isolated_and_a_cancelled_turn_cancels_the_call() {
    // The pinned server-everything install also proves node is here.
    if everything().is_none() {
        return;
    }
    let mock = MockLlm::start(
        vec![
            tool("mcp__big__blob", json!({})),
            text("a big one."),
            tool("mcp__slow__grow", json!({})),
            text("grown."),
            tool("mcp__slow__wait", json!({})),
            text("never reached."),
        ],
        Duration::ZERO,
    );
    let scratch = tempfile::tempdir().unwrap();
    let received = scratch.path().join("slow.jsonl");
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test")
        .with_env("TINYCODE_MODEL", "openai/gpt-test");
    desk.edit_config(|c| {
        c["mcpServers"] = json!({
            "hang": fake("hang", &[]),
            "garbage": fake("garbage", &[]),
            "big": fake("big", &[]),
            "slow": fake("slow", &[received.to_str().unwrap()]),
        });
    });
    let mut last = Value::Null;
    let settled = wait_until(Duration::from_secs(90), || {
        last = servers(&desk);
        ["big", "slow"]
            .iter()
            .all(|s| server(&last, s)["state"] == "ready")
            && ["hang", "garbage"]
                .iter()
                .all(|s| server(&last, s)["state"] == "failed")
    });
    assert!(settled, "{last:#}\n{}", desk.log());
    let hang = server(&last, "hang")["error"].as_str().unwrap().to_string();
    assert!(hang.contains("within 3 s"), "{hang}");
    // The legacy-only servers were reached by the fallback hand-shake.
    assert_eq!(server(&last, "big")["tools"], 1);

    // 5 MiB: cut at 2 MiB, then shortened for the model like any result,
    // the whole (cut) text kept as an artifact; the turn goes on.
    let out = desk.run(&["run", "--approve", "auto", "blob please"]);
    assert_eq!(out.code, 0, "{out:?}");
    let finished: Vec<Value> = desk
        .events(&["--stream", "session-"])
        .into_iter()
        .filter_map(|e| e.get("toolCallFinished").cloned())
        .collect();
    let blob = &finished[0];
    assert!(
        blob["content"].as_str().unwrap().len() < 100_000,
        "shortened"
    );
    let artifact = PathBuf::from(blob["artifact"].as_str().expect("an artifact"));
    let saved = std::fs::read_to_string(&artifact).unwrap();
    assert!(saved.len() >= 2 * 1024 * 1024, "{}", saved.len());
    assert!(saved.len() < 2 * 1024 * 1024 + 200, "{}", saved.len());
    assert!(
        saved.ends_with("cut at 2 MiB …]"),
        "{}",
        &saved[saved.len() - 80..]
    );
    assert!(out.stdout.contains("a big one."), "{}", out.stdout);

    // `notifications/tools/list_changed`: the new tool joins the registry.
    assert_eq!(server(&servers(&desk), "slow")["tools"], 2);
    let out = desk.run(&["run", "--approve", "auto", "grow please"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        wait_until(Duration::from_secs(10), || server(&servers(&desk), "slow")
            ["tools"]
            == 3),
        "{}",
        servers(&desk)
    );

    // A turn cancelled while an MCP call runs: the server is told.
    let session = desk.new_session(&["--approve", "auto"]);
    desk.ok(&["session", "send", &session, "wait please"]);
    let read = || std::fs::read_to_string(&received).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || read()
            .contains("\"name\":\"wait\"")),
        "{}",
        read()
    );
    desk.ok(&["session", "cancel", &session]);
    assert!(
        wait_until(Duration::from_secs(10), || read()
            .contains("\"notifications/cancelled\"")),
        "{}",
        read()
    );
    let completed = wait_until(Duration::from_secs(10), || {
        desk.events(&["--stream", &format!("session-{session}")])
            .iter()
            .any(|e| e["turnCompleted"]["outcome"] == "TURN_OUTCOME_CANCELLED")
    });
    assert!(completed, "the turn ended cancelled");
    // The failed servers never held anything up: the desk still answers.
    assert_eq!(desk.json(&["ticket", "list"])["total"], 3);
    desk.stop();
}
