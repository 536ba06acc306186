//! Faults of the disk and of the files under the desk (issue 29): FIFOs,
//! devices and links in the workspace are refused without being opened or
//! followed, and a full disk pauses writes instead of wedging the daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tinycode_tests::{Desk, alive, wait_until};

fn mkfifo(path: &Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
}

/// `daemon status --json`, within `limit`.
fn status_within(desk: &Desk, limit: Duration) -> serde_json::Value {
    let started = Instant::now();
    let out = desk.run(&["--json", "--no-autostart", "daemon", "status"]);
    assert!(
        started.elapsed() < limit,
        "daemon status took {:?}",
        started.elapsed()
    );
    assert_eq!(out.code, 0, "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

fn problems(status: &serde_json::Value) -> Vec<(String, String)> {
    status["workspaceProblems"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["file"].as_str().unwrap_or_default().to_string(),
                p["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Put every kind of file that must not be read into `dir` (as `ext`
/// files): a FIFO, a device (a real one when this runs as root, else a
/// link to /dev/null), a link to /etc/passwd and a link loop.
fn plant(dir: &Path, ext: &str, prefix: &str) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let name = |n: &str| format!("{prefix}{n}.{ext}");
    mkfifo(&dir.join(name("X-fifo")));
    let device = dir.join(name("X-device"));
    let made = rustix::process::geteuid().is_root()
        && rustix::fs::mknodat(
            rustix::fs::CWD,
            &device,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_bits_truncate(0o600),
            rustix::fs::makedev(1, 3),
        )
        .is_ok();
    if !made {
        std::os::unix::fs::symlink("/dev/null", &device).unwrap();
    }
    std::os::unix::fs::symlink("/etc/passwd", dir.join(name("X-passwd"))).unwrap();
    std::os::unix::fs::symlink(dir.join(name("X-loop")), dir.join(name("X-loop"))).unwrap();
    ["X-fifo", "X-device", "X-passwd", "X-loop"]
        .iter()
        .map(|n| name(n))
        .collect()
}

#[test]
fn fifos_devices_and_links_out_are_refused_without_blocking_and_listed() {
    let desk = Desk::fixture();
    let ws = desk.workspace();
    // Already there when the daemon starts, in both folders…
    let mut planted: Vec<String> = Vec::new();
    for (dir, ext) in [("tickets", "json"), ("knowledge", "md")] {
        planted.extend(
            plant(&ws.join(dir), ext, "")
                .into_iter()
                .map(|n| format!("{dir}/{n}")),
        );
    }
    // (A FIFO opened for reading would block the start for ever; a start
    // that returns at all proves it was not opened. The bound leaves room
    // for a debug build on a loaded machine.)
    // The binaries are built (once per test process) before the clock runs.
    tinycode_tests::bin_dir();
    let started = Instant::now();
    let out = desk.run(&["daemon", "start"]);
    assert_eq!(out.code, 0, "{out:?}\n{}", desk.log());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "start took {:?}",
        started.elapsed()
    );
    // … and dropped while it runs (the poll reads them).
    for (dir, ext) in [("tickets", "json"), ("knowledge", "md")] {
        planted.extend(
            plant(&ws.join(dir), ext, "Y")
                .into_iter()
                .map(|n| format!("{dir}/{n}")),
        );
    }
    let listed = wait_until(Duration::from_secs(10), || {
        let s = status_within(&desk, Duration::from_secs(1));
        let files: Vec<String> = problems(&s).into_iter().map(|(f, _)| f).collect();
        planted.iter().all(|p| files.contains(p))
    });
    let status = status_within(&desk, Duration::from_secs(1));
    assert!(listed, "not every planted file is listed: {status:#}");
    for (file, reason) in problems(&status) {
        let expected = if file.contains("fifo") {
            "FIFO"
        } else if file.contains("passwd") {
            "outside the workspace"
        } else if file.contains("loop") {
            "cannot be followed"
        } else {
            // A real device, or a link to one outside the workspace.
            ""
        };
        assert!(reason.contains(expected), "{file}: {reason}");
    }
    // Every RPC still answers at once, and nothing was read through.
    for args in [
        vec!["ticket", "list"],
        vec!["kb", "list"],
        vec!["triage", "status"],
        vec!["session", "list"],
    ] {
        let t = Instant::now();
        desk.ok(&args);
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{args:?} took {:?}",
            t.elapsed()
        );
    }
    let list = desk.ok(&["ticket", "list"]);
    assert!(!list.contains("X-"), "{list}");
    assert!(!desk.ok(&["kb", "list"]).contains("X-"));
    let events = desk.ok(&["--json", "events"]);
    assert!(
        !events.contains("root:x:0"),
        "/etc/passwd was read into the log"
    );
    // A planted file removed is no longer listed.
    std::fs::remove_file(ws.join("tickets/X-fifo.json")).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        !problems(&status_within(&desk, Duration::from_secs(1)))
            .iter()
            .any(|(f, _)| f == "tickets/X-fifo.json")
    }));
    desk.stop();
}

/// A tmpfs of `mib` MiB mounted for the test (and unmounted after), or
/// `None` where this process may not mount.
/// The mount point, and the temp dir that holds it (removed on drop).
struct Tmpfs(PathBuf, #[allow(dead_code)] tempfile::TempDir);

impl Tmpfs {
    fn mount(mib: u64) -> Option<Self> {
        let dir = tempfile::Builder::new()
            .prefix("tc-full-")
            .tempdir()
            .unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root and must be able to mount a tmpfs for the full-disk test"
            );
            eprintln!("skipped: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(Self(dir.path().to_path_buf(), dir))
    }

    /// Write a file until the file system is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn create(desk: &Desk, subject: &str) -> tinycode_tests::Output {
    desk.run(&[
        "ticket",
        "create",
        "--subject",
        subject,
        "--customer",
        "Ana",
        "--channel",
        "chat",
        "--body",
        "disk test",
    ])
}

fn created_id(out: &tinycode_tests::Output) -> String {
    // "created T-1234 (open): subject"
    out.stdout.split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn a_full_disk_pauses_writes_serves_reads_and_resumes_by_itself() {
    let Some(fs) = Tmpfs::mount(32) else { return };
    // The workspace (so the mirror's files) and the state dir on the small
    // file system; the daemon's log beside it, so what it logs while the
    // disk is full is kept and counted.
    let desk = Desk::at(&fs.0.join("root"));
    tinycode_tests::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/tinycode-support-desk"),
        &desk.workspace(),
    );
    let logs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(desk.state_dir()).unwrap();
    std::os::unix::fs::symlink(logs.path(), desk.state_dir().join("logs")).unwrap();
    desk.ok(&["daemon", "start"]);
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        let out = create(&desk, &format!("before {i}"));
        assert_eq!(out.code, 0, "{out:?}");
        acknowledged.push(created_id(&out));
    }
    let events_before = desk.ok(&["--json", "events"]).lines().count();

    fs.fill();
    let out = create(&desk, "while full");
    assert_ne!(
        out.code, 0,
        "an append on a full disk was accepted: {out:?}"
    );
    assert!(
        out.stderr.contains("disk full") && out.stderr.contains("resume by themselves"),
        "{out:?}"
    );
    let status = status_within(&desk, Duration::from_secs(2));
    let paused = status["writesPaused"].as_str().unwrap_or_default();
    assert!(paused.starts_with("disk full ("), "{status:#}");
    let shown = desk.ok(&["--no-autostart", "daemon", "status"]);
    assert!(
        shown.contains("writes paused: disk full (") && shown.contains(" MiB free on "),
        "{shown}"
    );
    // Reads are served meanwhile.
    let list = desk.ok(&["ticket", "list"]);
    for id in &acknowledged {
        assert!(list.contains(id.as_str()), "{id} missing: {list}");
    }
    assert_eq!(
        desk.ok(&["--json", "events"]).lines().count(),
        events_before
    );
    // Repeated refusals are one line in the log, not one per attempt.
    for _ in 0..20 {
        assert_ne!(create(&desk, "still full").code, 0);
    }

    fs.free();
    let out = create(&desk, "after");
    assert_eq!(
        out.code, 0,
        "writes did not resume once space was back: {out:?}"
    );
    acknowledged.push(created_id(&out));
    let status = status_within(&desk, Duration::from_secs(2));
    assert_eq!(status["writesPaused"].as_str().unwrap_or_default(), "");
    // Every read model and the mirror catch up.
    let after = desk.ticket_file(acknowledged.last().unwrap());
    assert_eq!(after["subject"], "after");

    // Full again: the daemon still stops within 5 s.
    fs.fill();
    assert_ne!(create(&desk, "full again").code, 0);
    let pid = desk.daemon_pid().unwrap();
    let t = Instant::now();
    let _ = desk.run(&["daemon", "stop"]);
    assert!(
        wait_until(Duration::from_secs(5), || !alive(pid)),
        "daemon stop on a full disk took more than 5 s"
    );
    assert!(t.elapsed() < Duration::from_secs(6));

    fs.free();
    desk.ok(&["daemon", "start"]);
    let list = desk.ok(&["ticket", "list"]);
    for id in &acknowledged {
        assert!(list.contains(id.as_str()), "acknowledged {id} lost: {list}");
    }
    let log = desk.log();
    let paused_lines = log.lines().filter(|l| l.contains("writes paused")).count();
    assert!(
        paused_lines <= 4,
        "{paused_lines} lines say writes paused:\n{log}"
    );
    assert!(
        log.len() < 1024 * 1024,
        "the daemon log grew to {} bytes",
        log.len()
    );
    desk.stop();
    let verify = desk.run(&["admin", "verify"]);
    assert_eq!(verify.code, 0, "{verify:?}");
}
