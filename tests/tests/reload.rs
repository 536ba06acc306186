//! Configuration without a restart (`tinycode daemon reload`, SIGHUP) and
//! a restart that waits for running turns (`tinycode daemon restart`): the
//! real daemon, the real CLI, the scripted OpenAI-compatible mock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tinycode_tests::mock_llm::{MockLlm, Reply, text};
use tinycode_tests::{Desk, kill, wait_until};

fn status(desk: &Desk) -> serde_json::Value {
    desk.json(&["daemon", "status"])
}

#[test]
fn a_reload_applies_the_mode_and_model_live_and_refuses_a_bad_config_whole() {
    let mock = MockLlm::start(vec![text("hello from the mock")], Duration::ZERO);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    desk.ok(&["daemon", "start"]);
    let before = status(&desk);
    assert_eq!(before["permissionMode"], "ask");
    assert_eq!(before["defaultModel"], "offline");
    let pid = before["pid"].clone();
    // No `autoTriage.concurrency`: the triage's slots follow the model.
    let slots = || desk.json(&["triage", "status"])["concurrency"].clone();
    assert_eq!(slots(), 16);

    // The desk says auto and names another model: in force at once.
    desk.edit_config(|c| {
        c["permissionMode"] = "auto".into();
        c["model"] = "openai/gpt-test".into();
    });
    let out = desk.ok(&["daemon", "reload"]);
    assert!(out.contains("in force now: model, permissionMode"), "{out}");
    assert!(
        out.contains("autoTriage slots (16 -> 2, by the model)"),
        "{out}"
    );
    assert_eq!(slots(), 2);
    let now = status(&desk);
    assert_eq!(now["pid"], pid, "no restart");
    assert_eq!(
        (now["permissionMode"].as_str(), now["defaultModel"].as_str()),
        (Some("auto"), Some("openai/gpt-test"))
    );
    let out = desk.ok(&["run", "hi"]);
    assert!(out.contains("hello from the mock"), "{out}");
    assert_eq!(mock.requests().len(), 1);

    // A known key with a bad value: refused whole, nothing changes.
    desk.edit_config(|c| {
        c["permissionMode"] = "ask".into();
        c["maxStepsPerTurn"] = 0.into();
    });
    let bad = desk.run(&["daemon", "reload"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(
        bad.stderr
            .contains("`maxStepsPerTurn` must be a whole number")
            && bad.stderr.contains("nothing was changed"),
        "{}",
        bad.stderr
    );
    assert_eq!(status(&desk)["permissionMode"], "auto");

    // A model that cannot be used (no key for it) is refused too.
    desk.edit_config(|c| {
        c["maxStepsPerTurn"] = 12.into();
        c["model"] = "anthropic/claude-test".into();
    });
    let bad = desk.run(&["daemon", "reload"]);
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("claude-test"), "{}", bad.stderr);
    assert_eq!(status(&desk)["defaultModel"], "openai/gpt-test");

    // What the desk was opened with waits for a restart, and says so.
    desk.edit_config(|c| {
        c["model"] = "openai/gpt-test".into();
        c["queues"] = serde_json::json!(["售后组", "物流组", "技术支持", "VIP"]);
    });
    let out = desk.ok(&["daemon", "reload"]);
    assert!(
        out.contains("needs a restart") && out.contains("queues"),
        "{out}"
    );
    assert!(
        out.contains("permission mode ask"),
        "the rest applied: {out}"
    );
    let shown = desk.ok(&["daemon", "status"]);
    assert!(
        shown.contains("changed, needs a restart: queues"),
        "{shown}"
    );
    desk.stop();
}

#[test]
fn sighup_reloads_the_config() {
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    desk.edit_config(|c| c["permissionMode"] = "auto".into());
    kill(desk.daemon_pid().unwrap(), "HUP");
    let reloaded = wait_until(Duration::from_secs(10), || {
        status(&desk)["permissionMode"] == "auto"
    });
    assert!(reloaded, "{}", desk.log());
    desk.stop();
}

#[test]
fn a_restart_waits_for_a_running_turn_and_keeps_a_waiting_approval() {
    // The model thinks for a while: the turn is running when the restart
    // is asked for.
    let mock = MockLlm::start(
        vec![Reply::Delayed(
            Duration::from_secs(2),
            Box::new(text("took a while")),
        )],
        Duration::ZERO,
    );
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    // A turn waiting for a person (offline model, L2 escalation) …
    let waiting = desk.new_session(&["--approve", "ask"]);
    desk.ok(&["session", "send", &waiting, "triage T-1003"]);
    let approval = {
        let mut id = String::new();
        assert!(wait_until(Duration::from_secs(20), || {
            id = desk.json(&["approvals", "list"])[0]["request"]["approvalId"]
                .as_str()
                .unwrap_or("")
                .to_string();
            !id.is_empty()
        }));
        id
    };
    // … and one running.
    let running = desk.new_session(&["--model", "openai/gpt-test"]);
    desk.ok(&["session", "send", &running, "think"]);
    assert!(wait_until(Duration::from_secs(10), || !mock
        .requests()
        .is_empty()));
    let pid = desk.daemon_pid().unwrap();
    let out = desk.run(&["daemon", "restart"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("tinycoded started"), "{out:?}");
    assert_ne!(desk.daemon_pid(), Some(pid));
    // The running turn finished before the stop: completed, not
    // interrupted.
    let shown = desk.ok(&["session", "show", &running]);
    assert!(
        shown.contains("took a while") && shown.contains("— turn 1 completed"),
        "{shown}"
    );
    assert!(!shown.contains("interrupted"), "{shown}");
    // The waiting approval survived; deciding it finishes its turn.
    desk.ok(&["approvals", "approve", &approval]);
    let done = wait_until(Duration::from_secs(30), || {
        desk.ok(&["session", "show", &waiting])
            .contains("— turn 1 completed")
    });
    assert!(done, "{}", desk.ok(&["session", "show", &waiting]));
    desk.stop();
}
