//! Provider keys without a restart, end to end: `tinycode auth set` through
//! standard input, the key asked on every request (a rotation reaches a
//! running turn's next request), encrypted at rest and nowhere in clear, a
//! wrong master key named and nothing lost, key helpers cached, failing
//! and hanging, and a session's model switched mid-session. The provider is
//! the scripted OpenAI-compatible mock, which checks the key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tinycode_tests::mock_llm::{MockLlm, Reply, text, tool};
use tinycode_tests::{Desk, Output, wait_until};

const MODEL: &str = "openai/gpt-test";

/// A desk whose daemon has no key of its own (and no OS keyring).
fn keyless(mock: &MockLlm) -> Desk {
    Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "")
        .with_env("TINYCODE_MODEL", MODEL)
        .with_env("TINYCODE_KEYRING", "off")
}

/// `tinycode auth set PROVIDER` with `key` on standard input.
fn auth_set(desk: &Desk, provider: &str, key: &str) -> Output {
    let mut child = desk
        .cli()
        .args(["auth", "set", provider])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{key}").unwrap();
    let out = child.wait_with_output().unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every file under the state directory, as bytes.
fn state_bytes(desk: &Desk) -> Vec<(String, Vec<u8>)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.push((path.display().to_string(), bytes));
            }
        }
    }
    let mut out = Vec::new();
    walk(&desk.state_dir(), &mut out);
    out
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn provider<'a>(list: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    list["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

#[test]
fn a_key_set_through_stdin_is_used_at_once_and_a_rotation_reaches_the_running_turn() {
    let mock = MockLlm::start(
        vec![
            // The first request is answered slowly: the key is rotated meanwhile.
            Reply::Delayed(
                Duration::from_secs(2),
                Box::new(tool("list_tickets", json!({}))),
            ),
            text("done."),
        ],
        Duration::ZERO,
    );
    mock.accept_keys(&["sk-first-0123456789", "sk-second-9876543210"]);
    let desk = keyless(&mock);
    // No key anywhere: a clear error that says how to set one.
    let out = desk.run(&["run", "hello"]);
    assert_ne!(out.code, 0, "{out:?}");
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("tinycode auth set openai"), "{said}");
    assert!(
        mock.authorizations().is_empty(),
        "nothing was sent without a key"
    );

    let set = auth_set(&desk, "openai", "sk-first-0123456789");
    assert_eq!(set.code, 0, "{set:?}");
    let mut run = desk.cli();
    run.args(["run", "look at the tickets"]);
    let runner = std::thread::spawn(move || run.output().unwrap());
    assert!(
        wait_until(Duration::from_secs(20), || mock.authorizations().len() == 1),
        "the turn's first request never came: {:?}",
        mock.authorizations()
    );
    // Rotated while the turn waits for its first answer.
    assert_eq!(auth_set(&desk, "openai", "sk-second-9876543210").code, 0);
    let finished = runner.join().unwrap();
    assert_eq!(
        finished.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&finished.stdout),
        String::from_utf8_lossy(&finished.stderr)
    );
    assert_eq!(
        mock.authorizations(),
        ["Bearer sk-first-0123456789", "Bearer sk-second-9876543210"]
    );

    let list = desk.json(&["auth", "list"]);
    let openai = provider(&list, "openai");
    assert_eq!(openai["source"], "stored", "{list}");
    assert_eq!(openai["lastResult"], "ok", "{list}");
    assert!(
        list["masterKey"].as_str().unwrap().starts_with("file "),
        "{list}"
    );
    // `tinycode models`: the offline model first, then the provider's.
    let models = desk.ok(&["models"]);
    let lines: Vec<&str> = models.lines().collect();
    assert_eq!(lines.first(), Some(&"offline"), "{models}");
    assert!(lines.contains(&"openai/gpt-test"), "{models}");

    // The log says who set it, never the key; nothing holds it in clear.
    let events = desk.ok(&["--json", "events"]);
    assert!(events.contains("credentialSet"), "{events}");
    let credentials = desk.state_dir().join("credentials.json");
    let mode = std::fs::metadata(&credentials)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let master = desk.state_dir().join("master.key");
    assert_eq!(
        std::fs::metadata(&master).unwrap().permissions().mode() & 0o777,
        0o600
    );
    desk.stop();
    let export = desk.workspace().join("export.jsonl");
    desk.ok(&["admin", "export", export.to_str().unwrap()]);
    let exported = std::fs::read(&export).unwrap();
    for key in ["sk-first-0123456789", "sk-second-9876543210"] {
        assert!(!holds(events.as_bytes(), key), "the key is in `events`");
        assert!(!holds(&exported, key), "the key is in the export");
        for (path, bytes) in state_bytes(&desk) {
            assert!(!holds(&bytes, key), "{path} holds the key in clear");
        }
    }
}

#[test]
fn a_wrong_master_key_is_named_and_changes_nothing() {
    let mock = MockLlm::start(vec![text("hi")], Duration::ZERO);
    mock.accept_keys(&["sk-kept-5555"]);
    let desk = keyless(&mock);
    assert_eq!(auth_set(&desk, "openai", "sk-kept-5555").code, 0);
    desk.stop();
    let credentials = desk.state_dir().join("credentials.json");
    let before = std::fs::read(&credentials).unwrap();
    let master = desk.state_dir().join("master.key");
    let right = std::fs::read(&master).unwrap();
    std::fs::write(&master, "ab".repeat(32)).unwrap();

    let list = desk.json(&["auth", "list"]);
    let problem = provider(&list, "openai")["problem"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        problem.contains("master key") && problem.contains("master.key"),
        "{list}"
    );
    let out = desk.run(&["run", "hello"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        format!("{}{}", out.stdout, out.stderr).contains("master key"),
        "{out:?}"
    );
    // Setting another key would strand the first: refused, file unchanged.
    let refused = auth_set(&desk, "anthropic", "sk-ant-1");
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("nothing was changed"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read(&credentials).unwrap(), before);

    // The right master key back: the stored key works again.
    desk.stop();
    std::fs::write(&master, right).unwrap();
    desk.ok(&["run", "hello"]);
    assert_eq!(mock.authorizations(), ["Bearer sk-kept-5555"]);
}

#[test]
fn a_key_helper_runs_once_per_cache_period_and_fails_or_hangs_clearly() {
    let mock = MockLlm::start(vec![], Duration::ZERO);
    mock.accept_keys(&["sk-from-helper"]);
    let desk = keyless(&mock);
    let runs = desk.workspace().join("helper-runs");
    let helper = format!("echo run >> {}; echo sk-from-helper", runs.display());
    desk.edit_config(|c| {
        c["providers"] = json!({"openai": {"apiKeyHelper": helper, "apiKeyHelperTtlSeconds": 600}});
    });
    desk.ok(&["run", "one"]);
    desk.ok(&["run", "two"]);
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
    assert_eq!(mock.authorizations().len(), 2);
    let list = desk.json(&["auth", "list"]);
    assert_eq!(provider(&list, "openai")["source"], "helper", "{list}");

    // A helper that fails: its exit status in a clear error.
    desk.edit_config(|c| {
        c["providers"] = json!({"openai": {"apiKeyHelper": "echo vault sealed >&2; exit 3"}});
    });
    desk.ok(&["daemon", "reload"]);
    let out = desk.run(&["run", "three"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        out.code != 0 && said.contains("key helper") && said.contains("vault sealed"),
        "{said}"
    );
    // A helper that hangs: stopped at its timeout.
    desk.edit_config(|c| {
        c["providers"] = json!({"openai": {"apiKeyHelper": "sleep 60; echo late", "apiKeyHelperTimeoutSeconds": 1}});
    });
    desk.ok(&["daemon", "reload"]);
    let started = Instant::now();
    let out = desk.run(&["run", "four"]);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        out.code != 0 && said.contains("did not answer within 1s"),
        "{said}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        mock.authorizations().len(),
        2,
        "no request went without a key"
    );
}

#[test]
fn switching_a_sessions_model_sends_its_next_turn_to_the_new_provider() {
    let mock = MockLlm::start(vec![text("from the remote model")], Duration::ZERO);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-env-key")
        .with_env("TINYCODE_MODEL", "offline")
        .with_env("TINYCODE_KEYRING", "off");
    let id = desk.new_session(&[]);
    desk.ok(&[
        "run",
        "--session",
        &id,
        "triage T-1001",
        "--approve",
        "auto",
    ]);
    assert!(mock.authorizations().is_empty(), "the offline model ran it");
    // An unknown provider is refused and changes nothing.
    let out = desk.run(&["session", "model", &id, "nosuch/model"]);
    assert_ne!(out.code, 0, "{out:?}");
    let switched = desk.ok(&["session", "model", &id, MODEL]);
    assert!(switched.contains(MODEL), "{switched}");
    let out = desk.ok(&["run", "--session", &id, "hello"]);
    assert!(out.contains("from the remote model"), "{out}");
    assert_eq!(mock.authorizations(), ["Bearer sk-env-key"]);
    let events = desk.ok(&["--json", "events"]);
    let changed: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("sessionModelChanged"))
        .collect();
    assert_eq!(changed.len(), 1, "{events}");
    assert!(
        changed[0].contains(MODEL) && changed[0].contains("offline"),
        "{changed:?}"
    );
}

#[test]
fn the_master_key_goes_to_the_os_keyring_when_one_answers() {
    if !tinycode_tests::tool_available(
        &["gnome-keyring-daemon", "--version"],
        "apt install gnome-keyring dbus",
    ) || !tinycode_tests::tool_available(&["dbus-run-session", "--version"], "apt install dbus")
    {
        return;
    }
    let mock = MockLlm::start(vec![text("keyring ok")], Duration::ZERO);
    mock.accept_keys(&["sk-in-keyring-42"]);
    let home = tempfile::tempdir().unwrap();
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "")
        .with_env("TINYCODE_MODEL", MODEL)
        .with_env("HOME", home.path().to_str().unwrap())
        .with_env("XDG_DATA_HOME", home.path().join("data").to_str().unwrap());
    // One private D-Bus session with an unlocked gnome-keyring; the daemon
    // the CLI starts inside it talks to that Secret Service.
    let tinycode = tinycode_tests::bin("tinycode");
    let script = format!(
        "printf secret | gnome-keyring-daemon --unlock --components=secrets >/dev/null 2>&1; \
         printf sk-in-keyring-42 | {t} auth set openai && {t} --json auth list && {t} run hello; \
         status=$?; {t} daemon stop >/dev/null 2>&1; exit $status",
        t = tinycode.display()
    );
    let mut cmd = std::process::Command::new("dbus-run-session");
    cmd.args(["--", "sh", "-c", &script])
        .current_dir(desk.workspace())
        .env_remove("TINYCODE_HOME")
        .env_remove("DBUS_SESSION_BUS_ADDRESS");
    for (k, v) in desk.env_vars() {
        cmd.env(k, v);
    }
    let done = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{stdout}{}\n{}",
        String::from_utf8_lossy(&done.stderr),
        desk.log()
    );
    assert!(stdout.contains("\"masterKey\": \"keyring"), "{stdout}");
    assert!(stdout.contains("keyring ok"), "{stdout}");
    assert!(
        !desk.state_dir().join("master.key").exists(),
        "no key file beside a keyring"
    );
    assert_eq!(mock.authorizations(), ["Bearer sk-in-keyring-42"]);
}
