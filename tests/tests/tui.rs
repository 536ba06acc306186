//! Two real `tinycode-tui`s in tmux, attached to one session of the real
//! daemon running the offline model: what is typed in one shows in both,
//! an approval answered in one closes the dialog in the other, and
//! detaching one leaves the turn running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tinycode_tests::{Desk, bin, tool_available, wait_until};

/// A private tmux server (its own socket in the desk's temp dir).
struct Tmux {
    socket: PathBuf,
    /// The TUIs' log, shown when a wait fails.
    log: PathBuf,
}

impl Tmux {
    fn new(desk: &Desk) -> Self {
        Self {
            socket: desk.root.join("tmux.sock"),
            log: desk.state_dir().join("logs/tinycode-tui.log"),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(["-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A 100×32 window named `name` running the TUI on `session`.
    fn start_tui(&self, desk: &Desk, name: &str, session: &str) {
        let env: Vec<String> = desk
            .env_vars()
            .into_iter()
            .map(|(k, v)| format!("{k}='{v}'"))
            .collect();
        let command = format!(
            "cd '{}' && exec env -u TINYCODE_HOME TERM=xterm-256color {} '{}' --session {session}",
            desk.workspace().display(),
            env.join(" "),
            bin("tinycode-tui").display()
        );
        self.run(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            "100",
            "-y",
            "32",
            &command,
        ]);
        self.run(&["set-option", "-t", name, "remain-on-exit", "on"]);
    }

    fn screen(&self, name: &str) -> String {
        self.run(&["capture-pane", "-p", "-t", name])
    }

    /// Wait until the screen of `name` satisfies `ok`; its last screen.
    fn wait(&self, name: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let seen = wait_until(Duration::from_secs(30), || {
            last = self.screen(name);
            ok(&last)
        });
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(
            seen,
            "{name} never showed {what}; its screen:\n{last}\n--- TUI log ---\n{log}"
        );
        last
    }

    fn type_line(&self, name: &str, text: &str) {
        self.run(&["send-keys", "-t", name, "-l", text]);
        self.run(&["send-keys", "-t", name, "Enter"]);
    }

    fn keys(&self, name: &str, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", name];
        args.extend_from_slice(keys);
        self.run(&args);
    }

    fn exited(&self, name: &str) -> bool {
        self.run(&["display-message", "-p", "-t", name, "#{pane_dead}"])
            .trim()
            == "1"
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

const DIALOG: &str = "y: allow once";

#[test]
fn two_tuis_share_a_session_its_approvals_and_a_detach_leaves_the_turn_running() {
    if !tool_available(&["tmux", "-V"], "apt-get install tmux") {
        return;
    }
    let desk = Desk::fixture();
    let session = desk.new_session(&["--approve", "ask"]);
    let tmux = Tmux::new(&desk);
    tmux.start_tui(&desk, "one", &session);
    tmux.start_tui(&desk, "two", &session);
    for name in ["one", "two"] {
        tmux.wait(name, "the connected status bar", |s| {
            s.contains("● connected") && s.contains(&session)
        });
    }

    // Typed in one, shown in both, with the turn's tool lines and outcome.
    tmux.type_line("one", "triage T-1002");
    for name in ["one", "two"] {
        tmux.wait(name, "the T-1002 turn", |s| {
            s.contains("› triage T-1002")
                && s.contains("● route_ticket T-1002")
                && s.contains("— turn 1 completed")
        });
    }
    tmux.wait("two", "two clients attached", |s| s.contains("2 attached"));

    // An escalation asks in both; answered in two, one's dialog closes
    // and says who decided.
    tmux.type_line("one", "triage T-1003");
    for name in ["one", "two"] {
        tmux.wait(name, "the approval dialog", |s| {
            s.contains(DIALOG) && s.contains("Tool: escalate_ticket")
        });
    }
    // A dialog reads keys only after a moment on screen.
    std::thread::sleep(std::time::Duration::from_millis(600));
    tmux.keys("two", &["y"]);
    let one = tmux.wait("one", "the dialog closed by two", |s| {
        !s.contains(DIALOG) && s.contains("allowed by tinycode-tui")
    });
    assert!(one.contains("A-1"), "{one}");
    for name in ["one", "two"] {
        tmux.wait(name, "the escalation done", |s| {
            s.contains("L2 → escalated") && s.contains("— turn 2 completed")
        });
    }

    // A second escalation: one detaches (Ctrl+C asks, Ctrl+C again
    // detaches) while the turn waits; the turn is not cancelled, and two
    // answers it.
    desk.ok(&[
        "ticket",
        "create",
        "--subject",
        "投诉：企业客户账户被风控冻结",
        "--customer",
        "星辰科技（企业客户）",
        "--body",
        "我们的企业账户今天早上突然被风控冻结，影响了今天的结算，请立刻处理。",
    ]);
    let created = desk.json(&["ticket", "list"]);
    let newest = created["tickets"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|t| t["id"].as_str()).max())
        .unwrap()
        .to_string();
    tmux.type_line("one", &format!("triage {newest}"));
    tmux.wait("one", "the second dialog", |s| s.contains(DIALOG));
    tmux.keys("one", &["C-c"]);
    tmux.wait("one", "the cancel question", |s| {
        s.contains("Cancel the running turn?")
    });
    tmux.keys("one", &["C-c"]);
    assert!(
        wait_until(Duration::from_secs(10), || tmux.exited("one")),
        "one did not detach:\n{}",
        tmux.screen("one")
    );
    let info = desk.json(&["session", "list"]);
    let running = info["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == session.as_str())
        .map(|s| s["running"].clone());
    assert_eq!(running, Some(serde_json::json!(true)), "{info}");
    let two = tmux.screen("two");
    assert!(two.contains(DIALOG), "{two}");
    // A dialog reads keys only after a moment on screen.
    std::thread::sleep(std::time::Duration::from_millis(600));
    tmux.keys("two", &["y"]);
    tmux.wait("two", "the third turn completed", |s| {
        s.contains("— turn 3 completed")
    });
    let events = desk.events(&["--stream", &format!("session-{session}")]);
    let outcomes: Vec<&str> = events
        .iter()
        .filter_map(|e| e["turnCompleted"]["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes, ["TURN_OUTCOME_COMPLETED"; 3],
        "the detach must not cancel a turn"
    );
}

#[test]
fn losing_the_daemon_shows_a_banner_and_resumes_without_duplicates() {
    if !tool_available(&["tmux", "-V"], "apt-get install tmux") {
        return;
    }
    let desk = Desk::fixture();
    let session = desk.new_session(&["--approve", "deny"]);
    let tmux = Tmux::new(&desk);
    tmux.start_tui(&desk, "one", &session);
    tmux.wait("one", "the connected status bar", |s| {
        s.contains("● connected")
    });
    tmux.type_line("one", "triage T-1001");
    tmux.wait("one", "the first turn", |s| {
        s.contains("— turn 1 completed")
    });

    // The daemon's skills, as the TUI lists them.
    let status = desk.json(&["daemon", "status"]);
    assert_eq!(status["defaultModel"], "offline");
    let skills: Vec<&str> = status["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(skills, ["escalation-rules", "triage-sop"]);
    tmux.type_line("one", "/skills");
    tmux.wait("one", "the skills", |s| {
        s.contains("/escalation-rules") && s.contains("/triage-sop")
    });

    desk.ok(&["daemon", "stop"]);
    tmux.wait("one", "the banner", |s| {
        s.contains("daemon connection lost") && s.contains("✗ disconnected")
    });
    desk.ok(&["daemon", "start"]);
    tmux.wait("one", "the reconnection", |s| {
        s.contains("● connected") && !s.contains("daemon connection lost")
    });
    tmux.type_line("one", "triage T-1002");
    let screen = tmux.wait("one", "the second turn", |s| {
        s.contains("— turn 2 completed")
    });
    for line in [
        "› triage T-1001",
        "— turn 1 completed",
        "● route_ticket T-1001",
    ] {
        assert_eq!(screen.matches(line).count(), 1, "{line} twice:\n{screen}");
    }
}

#[test]
fn tinycode_tui_runs_the_terminal_ui_with_its_arguments() {
    let desk = Desk::new();
    let out = desk.run(&["tui", "--version"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("tinycode-tui {}", env!("CARGO_PKG_VERSION"))
    );
    let help = desk.ok(&["tui", "--help"]);
    assert!(
        help.contains("--continue") && help.contains("--inbox"),
        "{help}"
    );
}

#[test]
fn without_a_terminal_the_ui_says_so_in_one_sentence_and_exits_2() {
    let desk = Desk::new();
    for args in [&[][..], &["tui"][..], &["tui", "--continue"][..]] {
        let out = desk.run(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        let err = out.stderr.trim();
        assert_eq!(err.lines().count(), 1, "one sentence: {err}");
        assert!(err.contains("needs a terminal"), "{err}");
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
    }
}
