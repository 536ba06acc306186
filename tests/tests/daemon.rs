//! End-to-end: the real `tinycoded` driven by the real `tinycode` CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use tinycode_tests::{Desk, LineReader, alive, kill, wait_until};

fn kinds(events: &[serde_json::Value]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| {
            if e.get("daemonStarted").is_some() {
                "started"
            } else if e.get("daemonStopped").is_some() {
                "stopped"
            } else {
                "other"
            }
        })
        .collect()
}

#[test]
fn the_cli_auto_starts_the_daemon_and_reports_its_status() {
    let desk = Desk::new();
    assert!(!desk.socket().exists());
    let events = desk.events(&[]);
    assert_eq!(kinds(&events), ["started"]);
    assert_eq!(events[0]["sequence"], 1);
    assert_eq!(events[0]["streamId"], "daemon");

    let status = desk.json(&["daemon", "status"]);
    assert_eq!(status["running"], true);
    assert_eq!(status["protocolVersion"], 1);
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["workspace"], desk.workspace().display().to_string());
    assert_eq!(status["stateDir"], desk.state_dir().display().to_string());
    assert_eq!(status["socketPath"], desk.socket().display().to_string());
    assert_eq!(status["eventCount"], 1);
    assert_eq!(status["lastSequence"], 1);
    assert!(status["storeBytes"].as_u64().unwrap() > 0);
    let pid = status["pid"].as_u64().unwrap() as u32;
    assert_eq!(desk.daemon_pid(), Some(pid));
    assert!(alive(pid));

    let text = desk.ok(&["daemon", "status"]);
    assert!(
        text.contains("running") && text.contains("events      1"),
        "{text}"
    );
    // Logs go to the state dir, not the terminal.
    let log = std::fs::read_to_string(desk.state_dir().join("logs/tinycoded.log")).unwrap();
    assert!(log.contains("tinycoded listening"), "{log}");
}

#[test]
fn rust_log_selects_what_the_daemon_logs() {
    let quiet = Desk::new().with_env("RUST_LOG", "warn");
    quiet.ok(&["daemon", "start"]);
    quiet.ok(&["daemon", "stop"]);
    assert!(
        !quiet.log().contains("tinycoded listening"),
        "{}",
        quiet.log()
    );

    let targeted = Desk::new().with_env("RUST_LOG", "warn,tinycoded=info");
    targeted.ok(&["daemon", "start"]);
    assert!(targeted.log().contains("tinycoded listening"));

    // A value it cannot read: the default level, and the log says why.
    let wrong = Desk::new().with_env("RUST_LOG", "tinycoded=loud");
    wrong.ok(&["daemon", "start"]);
    let log = wrong.log();
    assert!(
        log.contains("RUST_LOG=\"tinycoded=loud\" is not a list")
            && log.contains("tinycoded listening"),
        "{log}"
    );
}

#[test]
fn daemon_start_is_idempotent_and_stop_waits_for_exit() {
    let desk = Desk::new();
    let first = desk.ok(&["daemon", "start"]);
    assert!(first.contains("tinycoded started"), "{first}");
    let again = desk.json(&["daemon", "start"]);
    assert_eq!(again["alreadyRunning"], true);
    let pid = desk.daemon_pid().unwrap();
    let stopped = desk.ok(&["daemon", "stop"]);
    assert!(stopped.contains("stopped"), "{stopped}");
    assert!(!alive(pid), "stop returns only after the process exited");
    assert!(!desk.socket().exists(), "socket removed on clean stop");
    let out = desk.run(&["daemon", "status"]);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stdout.contains("not running"), "{out:?}");
    // Stopping a stopped daemon is not an error.
    assert!(desk.ok(&["daemon", "stop"]).contains("not running"));
}

#[test]
fn restart_keeps_the_log_and_adds_lifecycle_events() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    desk.stop();
    desk.ok(&["daemon", "start"]);
    let events = desk.events(&[]);
    assert_eq!(kinds(&events), ["started", "stopped", "started"]);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert!(
        events[1]["daemonStopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("Shutdown rpc from tinycode-cli")
    );
    assert_eq!(
        events[2]["daemonStarted"].get("previousRunUnclean"),
        None,
        "clean stop"
    );
    // --from and --stream filter the log.
    assert_eq!(desk.events(&["--from", "2"]).len(), 2);
    assert_eq!(desk.events(&["--stream", "ticket-"]).len(), 0);
}

#[test]
fn sigterm_stops_cleanly_and_records_why() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "TERM");
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)));
    assert!(!desk.socket().exists());
    let events = desk.events(&[]);
    assert_eq!(kinds(&events), ["started", "stopped", "started"]);
    assert_eq!(events[1]["daemonStopped"]["reason"], "SIGTERM");
}

#[test]
fn socket_and_state_dir_are_private() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&desk.state_dir()), 0o700);
    assert_eq!(mode(&desk.socket()), 0o600);
    // Every file the daemon made in its state dir is private too (the
    // database, its log, the lock), while the workspace files it writes keep
    // the usual mode.
    let created = desk.create_ticket("s");
    assert_eq!(created.code, 0, "{}", created.stderr);
    let mut seen = 0;
    let mut dirs = vec![desk.state_dir()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            // A file renamed away since the listing (the learner's temp
            // file, written in the background) is not there to check.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let m = meta.permissions().mode() & 0o777;
            assert_eq!(m & 0o077, 0, "{} is {m:o}", path.display());
            if meta.is_dir() {
                dirs.push(path);
            }
            seen += 1;
        }
    }
    assert!(seen >= 4, "{seen} entries");
    let ticket = desk.workspace().join("tickets/T-1001.json");
    assert!(wait_until(Duration::from_secs(5), || ticket.exists()));
    assert_eq!(
        mode(&ticket) & 0o044,
        0o044,
        "a workspace file is readable as usual"
    );
}

#[test]
fn a_second_daemon_on_the_same_state_dir_is_refused() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let pid = desk.daemon_pid().unwrap();
    let out = desk
        .daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("already running") && stderr.contains(&format!("pid {pid}")),
        "{stderr}"
    );
    // The first daemon is untouched.
    assert!(alive(pid));
    assert_eq!(desk.json(&["daemon", "status"])["pid"], pid);
}

#[test]
fn a_stale_socket_from_a_crash_is_recovered() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let pid = desk.daemon_pid().unwrap();
    kill(pid, "KILL");
    assert!(wait_until(Duration::from_secs(10), || !alive(pid)));
    assert!(desk.socket().exists(), "SIGKILL leaves the socket behind");
    // The next command finds nobody answering, starts a new daemon, which
    // removes the stale socket and notes the unclean end.
    let events = desk.events(&[]);
    assert_eq!(kinds(&events), ["started", "started"]);
    assert_eq!(events[1]["daemonStarted"]["previousRunUnclean"], true);
    assert_ne!(desk.daemon_pid(), Some(pid));
}

#[test]
fn a_dead_daemon_with_no_autostart_is_a_clear_error() {
    let desk = Desk::new();
    let out = desk.run(&["--no-autostart", "events"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.is_empty());
    let msg = out.stderr.trim();
    assert!(
        msg.starts_with("tinycode: tinycoded is not running"),
        "{msg}"
    );
    assert!(msg.contains("tinycode daemon start"), "{msg}");
    assert_eq!(msg.lines().count(), 1, "one sentence, no panic: {msg}");
    assert!(!desk.socket().exists(), "nothing was started");
}

#[test]
fn outside_a_workspace_the_error_says_what_to_do() {
    let desk = Desk::new();
    let out = desk
        .cli()
        .current_dir(&desk.runtime)
        .args(["events"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no tinycode workspace found"), "{stderr}");
    assert!(stderr.contains("tinycode init"), "{stderr}");
}

#[test]
fn two_followers_see_identical_events_across_daemon_restarts() {
    let desk = Desk::new();
    desk.ok(&["daemon", "start"]);
    let follower = || {
        let mut cmd = desk.cli();
        cmd.args(["events", "--follow"]);
        LineReader::spawn(cmd)
    };
    let mut a = follower();
    let mut b = follower();
    let has = |n: usize| move |lines: &[String]| lines.len() >= n;
    a.until(Duration::from_secs(10), has(1));
    b.until(Duration::from_secs(10), has(1));
    // Two restarts: each follower loses the daemon, waits, and resumes
    // right after the last event it printed.
    for _ in 0..2 {
        desk.stop();
        desk.ok(&["daemon", "start"]);
    }
    let a = a.until(Duration::from_secs(20), has(5)).to_vec();
    let b = b.until(Duration::from_secs(20), has(5)).to_vec();
    assert_eq!(a, b, "both followers print the same lines");
    let seqs: Vec<String> = a
        .iter()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(seqs, ["#1", "#2", "#3", "#4", "#5"], "{a:#?}");
    assert!(a[1].contains("daemon_stopped") && a[4].contains("daemon_started"));
}

#[test]
fn a_state_dir_too_long_for_a_socket_address_uses_the_runtime_dir() {
    let base = Desk::new();
    let long = base.root.join("h".repeat(90)).join("state");
    let desk = Desk::new().with_home(long.clone());
    let socket = desk.socket();
    assert!(
        socket.starts_with(desk.runtime.join("tinycode")),
        "{}",
        socket.display()
    );
    assert_eq!(kinds(&desk.events(&[])), ["started"], "auto-started");
    let status = desk.json(&["daemon", "status"]);
    assert_eq!(status["socketPath"], socket.display().to_string());
    assert_eq!(status["stateDir"], long.display().to_string());
    let mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn completions_are_generated() {
    let desk = Desk::new();
    let script = desk.ok(&["completions", "bash"]);
    assert!(
        script.contains("_tinycode()") && script.contains("events"),
        "{}",
        &script[..200.min(script.len())]
    );
    assert!(
        !desk.socket().exists(),
        "completions never start the daemon"
    );
}

#[test]
fn clients_starting_the_daemon_at_the_same_time_all_succeed() {
    let desk = Desk::new();
    let children: Vec<_> = (0..4)
        .map(|_| {
            desk.cli()
                .args(["--json", "daemon", "status"])
                .arg("--no-autostart")
                .output()
        })
        .collect();
    drop(children); // none running yet: status without auto-start says so
    let spawned: Vec<_> = (0..4)
        .map(|_| {
            desk.cli()
                .args(["--json", "events"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in spawned {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let events = desk.events(&["--stream", "daemon"]);
    assert_eq!(kinds(&events), ["started"], "exactly one daemon started");
}

#[test]
fn a_large_desk_answers_while_it_starts_and_a_command_waits_for_it() {
    let desk = Desk::fixture();
    // Enough ticket files that the first start takes a while.
    let template = desk.read("tickets/T-1001.json");
    for n in 0..3000 {
        let id = format!("T-{}", 5000 + n);
        desk.write(
            &format!("tickets/{id}.json"),
            &template.replace("T-1001", &id),
        );
    }
    tinycode_tests::bin_dir();
    let mut daemon = desk
        .daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(20), || desk
        .socket()
        .exists()));
    // A command sent now waits for the start, then answers.
    let list = {
        let mut cmd = desk.cli();
        cmd.args(["--json", "--no-autostart", "ticket", "list", "--limit", "1"]);
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Meanwhile `daemon status` says how far the start is.
    let mut stages = std::collections::BTreeSet::new();
    let mut counted = false;
    // The marker that makes clients ask how far the start is.
    let marker = tinycode_shared::paths::starting_marker(&desk.socket());
    let mut marked = false;
    let ready = wait_until(Duration::from_secs(120), || {
        let out = desk.run(&["--json", "--no-autostart", "daemon", "status"]);
        let Ok(s) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
            return false;
        };
        match s["startup"]["stage"].as_str() {
            Some(stage) if !stage.is_empty() => {
                stages.insert(stage.to_string());
                marked |= marker.exists();
                counted |= s["startup"]["total"].as_str().is_some()
                    || s["startup"]["total"].as_u64().is_some_and(|n| n > 0);
                false
            }
            _ => s["running"] == true,
        }
    });
    assert!(ready, "the daemon never finished starting");
    assert!(!stages.is_empty(), "no start-up progress was seen");
    assert!(counted, "no stage counted what it did: {stages:?}");
    assert!(marked, "no start-up marker while it started");
    assert!(!marker.exists(), "the marker outlived the start");
    let listed = list.wait_with_output().unwrap();
    assert!(listed.status.success(), "{listed:?}");
    let page: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(page["total"], 3003, "{page}");
    desk.stop();
    let _ = daemon.wait();
}
