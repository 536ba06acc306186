//! End-to-end: MCP servers' tools in the agent's registry, with the real
//! `@modelcontextprotocol/server-everything` (pinned, from npm) as the peer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::mock_llm::{MockLlm, text, tool};
use tinycode_tests::{Desk, wait_until};

const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The pinned server-everything, installed once per target dir with npm;
/// `None` (the test is skipped) without npm, unless CI is set.
fn everything() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm-server-everything");
    let script = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.exists() {
        let installed = std::process::Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(EVERYTHING)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !installed || !script.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs node and npm to install {EVERYTHING}"
            );
            eprintln!("skipped: cannot install {EVERYTHING} with npm");
            return None;
        }
    }
    Some(script)
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
        ],
        Duration::ZERO,
    );
    let desk = mcp_desk(&mock, &script);
    let mut last = Value::Null;
    let ready = wait_until(Duration::from_secs(60), || {
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
    desk.stop();
}
