//! Small faults found under test (issue 15): a start straight after a
//! kill -9, a client that left an attach still counted, a daemon of another
//! user reported as "not running".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::sessions_client::SessionsClient;
use tinycode_shared::proto::{AttachRequest, GetSessionRequest};
use tinycode_tests::{Desk, alive, kill};

#[test]
fn daemon_start_straight_after_a_kill_9_succeeds_every_time() {
    let desk = Desk::new();
    for round in 0..15 {
        desk.ok(&["daemon", "start"]);
        let pid = desk.daemon_pid().unwrap();
        kill(pid, "KILL");
        // No wait: the old process may still be exiting.
        let out = desk.run(&["daemon", "start"]);
        assert_eq!(out.code, 0, "round {round}: {out:?}");
        let new = desk.daemon_pid().unwrap();
        assert_ne!(new, pid, "round {round}: the killed daemon answered");
        assert!(alive(new));
    }
    desk.stop();
}

async fn attached(ch: &tinycode_shared::client::DaemonChannel, id: &str) -> u32 {
    SessionsClient::new(ch.clone())
        .get(GetSessionRequest {
            id: id.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .attached_clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_an_attach_stops_counting_at_once() {
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    let id = desk.new_session(&["--title", "watched"]);
    let ch = connect(&desk.socket(), &ClientName::new("tests").unwrap())
        .await
        .unwrap();
    let stream = SessionsClient::new(ch.clone())
        .attach(AttachRequest {
            session_id: id.clone(),
            from_sequence: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(attached(&ch, &id).await, 1);
    drop(stream);
    let mut left = false;
    for _ in 0..100 {
        if attached(&ch, &id).await == 0 {
            left = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(left, "a client that left is still counted after 2 s");
}

#[test]
fn the_daemon_of_another_user_is_named_as_such() {
    let root = rustix_uid() == 0;
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    if !root || !setpriv.exists() {
        eprintln!("skipped: needs root and setpriv to act as another user");
        return;
    }
    let desk = Desk::fixture();
    desk.ok(&["daemon", "start"]);
    // The workspace is readable by everyone; the state dir stays private.
    let mut dir = desk.workspace();
    for _ in 0..3 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir = dir.parent().unwrap().to_path_buf();
    }
    for sub in [".tinycode", ".tinycode/config.json"] {
        let path = desk.workspace().join(sub);
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(tinycode_tests::bin("tinycode"))
        .args(["--no-autostart", "daemon", "status"])
        .current_dir(desk.workspace())
        .env("XDG_RUNTIME_DIR", &desk.runtime)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("belongs to another user (uid 0)"),
        "{stderr}"
    );
    desk.stop();
}

fn rustix_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(u32::MAX)
}
