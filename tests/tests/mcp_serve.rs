//! End-to-end: `tinycode mcp serve` driven by a real MCP client, the Python
//! `mcp` SDK (pinned, from PyPI): tools, a ticket resource, skills as
//! prompts, allow-level calls that run at once, and an L2 escalation that
//! waits for a human — answered `pending` first, then decided by another
//! process while the same call waits again across a daemon restart, and
//! run exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tinycode_tests::{Desk, bin, wait_until};

const MCP_SDK: &str = "mcp==2.3.0";

/// A Python with the pinned MCP SDK, in a venv made once per target dir;
/// `None` (skipped) without Python or PyPI, unless CI is set.
fn python() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("py-mcp-2.3.0");
    let python = venv.join("bin/python");
    let ready = |p: &PathBuf| {
        Command::new(p)
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ready(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    MCP_SDK,
                ])
                .status()
                .is_ok_and(|s| s.success());
        if !made || !ready(&python) {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs python3 and PyPI to install {MCP_SDK}"
            );
            eprintln!("skipped: cannot install {MCP_SDK}");
            return None;
        }
    }
    Some(python)
}

/// Run the client script; its JSON lines, by step.
fn client(desk: &Desk, python: &PathBuf, phase: &str) -> std::process::Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("py/mcp_client.py");
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .arg(bin("tinycode"))
        .arg(desk.workspace())
        .arg(phase)
        .current_dir(desk.workspace())
        .env_remove("TINYCODE_HOME")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in desk.env_vars() {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

fn steps(child: std::process::Child) -> Vec<Value> {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the MCP client failed");
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

fn step<'a>(all: &'a [Value], name: &str) -> &'a Value {
    all.iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {all:?}"))
}

#[test]
fn an_mcp_client_triages_through_the_gate_and_an_escalation_survives_a_restart() {
    let Some(python) = python() else { return };
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);

    // 1. Tools, resources, prompts, two allowed calls, and the escalation
    // answered "pending" after the 2 s wait.
    let first = steps(client(&desk, &python, "first"));
    let tools = &step(&first, "tools")["names"];
    for name in [
        "classify_ticket",
        "route_ticket",
        "escalate_ticket",
        "get_ticket",
    ] {
        assert!(
            tools.as_array().unwrap().iter().any(|t| t == name),
            "{tools}"
        );
    }
    assert!(
        step(&first, "tools")["read_only"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "get_ticket")
    );
    let uris = step(&first, "resources")["uris"].to_string();
    assert!(
        uris.contains("ticket://T-1003") && uris.contains("kb://refund-policy"),
        "{uris}"
    );
    let ticket: Value =
        serde_json::from_str(step(&first, "ticket")["text"].as_str().unwrap()).unwrap();
    assert_eq!(ticket["id"], "T-1003");
    assert!(step(&first, "prompts")["names"].as_array().is_some());
    for allowed in ["classify", "route"] {
        assert_eq!(step(&first, allowed)["error"], false, "{first:?}");
    }
    let pending = step(&first, "escalate");
    assert_eq!(pending["error"], true);
    let text = pending["text"].as_str().unwrap();
    let approval = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("A-"))
        .unwrap_or_else(|| panic!("no approval named in {text}"))
        .to_string();
    assert!(text.contains("tinycode approvals approve"), "{text}");
    let shown = desk.json(&["ticket", "show", "T-1003"]);
    assert_eq!(shown["category"], "账户");
    assert_eq!(shown["queue"], "售后组");
    assert_eq!(
        shown["escalateLevel"].as_u64().unwrap_or(0),
        0,
        "not before approval"
    );

    // 2. The same call again: it waits (progress), the daemon restarts
    // under it, another process approves, and the call completes once.
    let again = client(&desk, &python, "again");
    std::thread::sleep(Duration::from_secs(6));
    desk.stop();
    let approved = desk.ok(&["approvals", "approve", &approval]);
    assert!(approved.contains(&approval), "{approved}");
    let second = steps(again);
    let done = step(&second, "escalate");
    assert_eq!(done["error"], false, "{second:?}");
    assert!(done["text"].as_str().unwrap().contains("L2"), "{done}");
    assert!(
        !done["progress"].as_array().unwrap().is_empty(),
        "the waiting call sent progress: {done}"
    );
    assert!(wait_until(Duration::from_secs(5), || {
        desk.json(&["ticket", "show", "T-1003"])["escalateLevel"] == 2
    }));
    let escalations = desk
        .events(&["--stream", "ticket-T-1003"])
        .iter()
        .filter(|e| e["ticketEscalated"].is_object())
        .count();
    assert_eq!(escalations, 1, "escalated exactly once");
}
