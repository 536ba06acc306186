//! Harness for the end-to-end tests: a temp workspace per test, the real
//! `tinycoded` and `tinycode` binaries, and cleanup of any daemon a test
//! started. Every test gets its own directory and socket, so tests run in
//! parallel safely.
#![forbid(unsafe_code)]
// Test support: a failed setup step should abort the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod helpdesk;
pub mod mock_llm;
pub mod pg;
pub mod pg_tls;
pub mod proxy;
pub mod shared_desk;
pub mod targets;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Directory holding the workspace's binaries, freshly built.
///
/// `cargo test` does not build the binaries of packages that have no
/// integration tests of their own, and a stale binary would test old code,
/// so the first call builds them (a no-op when they are up to date).
pub fn bin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/<test> → target/<profile>
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target dir")
            .to_path_buf();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "tinycoded",
            "-p",
            "tinycode",
            "-p",
            "tinycode-tui",
            "-p",
            "tinycode-web",
            "--bins",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building the binaries failed");
        dir
    })
}

pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A temporary support workspace with its own state dir and socket.
pub struct Desk {
    /// `None` for a desk kept at a given directory ([`Desk::at`]).
    _tmp: Option<TempDir>,
    pub root: PathBuf,
    /// `$XDG_RUNTIME_DIR` for this desk's processes (long-path sockets).
    pub runtime: PathBuf,
    /// `$TINYCODE_HOME` for this desk's processes, when set.
    pub home: Option<PathBuf>,
    /// Extra environment for this desk's processes (and so its daemon).
    pub extra_env: Vec<(String, String)>,
}

impl Desk {
    /// An empty workspace (just `.tinycode/`).
    pub fn new() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("tc-")
            .tempdir()
            .expect("temp dir");
        let mut desk = Self::at(tmp.path());
        desk._tmp = Some(tmp);
        desk
    }

    /// A workspace at `root` (created when missing) that outlives this
    /// value: benchmarks reuse a large log across runs with it.
    pub fn at(root: &Path) -> Self {
        std::fs::create_dir_all(root.join("desk/.tinycode")).expect("create workspace");
        std::fs::create_dir_all(root.join("run")).expect("create runtime dir");
        let root = root.canonicalize().expect("canonical desk dir");
        Self {
            runtime: root.join("run"),
            root,
            _tmp: None,
            home: None,
            extra_env: Vec::new(),
        }
    }

    /// A copy of `../shared/fixtures/tinycode-support-desk` (writable),
    /// whose config allows the sub-agent tools as the demo desk's does, so
    /// the offline model's L2 path asks a person only for the escalation
    /// ([`Desk::fixture_as_shipped`] keeps the config as it is).
    pub fn fixture() -> Self {
        let desk = Self::fixture_as_shipped();
        desk.edit_config(|c| {
            c["permissions"] = serde_json::json!({
                "allow": ["spawn_agent", "wait_agent", "list_agents", "close_agent"]
            });
        });
        desk
    }

    /// A copy of the fixture desk, its config unchanged.
    pub fn fixture_as_shipped() -> Self {
        let desk = Self::new();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/tinycode-support-desk");
        copy_dir(&src, &desk.workspace());
        desk
    }

    /// Write (or overwrite) a workspace file.
    pub fn write(&self, rel: &str, content: &str) {
        let path = self.workspace().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }

    /// Change `.tinycode/config.json` (parsed, edited by `edit`, written
    /// back) before the daemon starts.
    pub fn edit_config(&self, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut config: serde_json::Value =
            serde_json::from_str(&self.read(".tinycode/config.json")).expect("config JSON");
        edit(&mut config);
        self.write(".tinycode/config.json", &config.to_string());
    }

    /// Read a workspace file.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace().join(rel)).expect("read")
    }

    /// `tickets/<id>.json` of the workspace, parsed.
    /// A ticket's file, once the running daemon's mirror has written every
    /// event so far (files follow the log a moment after an
    /// acknowledgement; docs/PROTOCOL.md).
    pub fn ticket_file(&self, id: &str) -> serde_json::Value {
        self.mirror_settled();
        serde_json::from_str(&self.read(&format!("tickets/{id}.json"))).expect("ticket JSON")
    }

    /// Wait (up to 20 s) until a running daemon's workspace mirror has
    /// applied the whole log, as `daemon status` reports it.
    pub fn mirror_settled(&self) {
        if self.daemon_pid().is_none_or(|pid| !alive(pid)) {
            return;
        }
        let number = |v: &serde_json::Value| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .unwrap_or(0)
        };
        let settled = wait_until(Duration::from_secs(20), || {
            let out = self.run(&["--json", "--no-autostart", "daemon", "status"]);
            let Ok(s) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
                return true; // stopped meanwhile: the files are as final as they get
            };
            if s["running"] == false {
                return true;
            }
            let last = number(&s["lastSequence"]);
            s["projections"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "mirror" && number(&p["applied"]) >= last)
        });
        assert!(settled, "the workspace mirror did not catch up within 20 s");
    }

    /// The daemon's log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state_dir().join("logs/tinycoded.log")).unwrap_or_default()
    }

    /// Set an environment variable for every process of this desk,
    /// including a daemon it auto-starts.
    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.extra_env.push((key.to_string(), value.to_string()));
        self
    }

    /// Use `home` as `$TINYCODE_HOME` for every process of this desk.
    pub fn with_home(mut self, home: PathBuf) -> Self {
        self.home = Some(home);
        self
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.join("desk")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.home
            .clone()
            .unwrap_or_else(|| self.workspace().join(".tinycode/state"))
    }

    pub fn socket(&self) -> PathBuf {
        self.layout().socket
    }

    pub fn layout(&self) -> tinycode_shared::paths::Layout {
        tinycode_shared::paths::Layout::resolve(
            Some(&self.workspace()),
            &self.workspace(),
            self.home.as_deref(),
            &self.runtime.join("tinycode"),
        )
        .expect("layout")
    }

    /// The environment this desk's processes get (besides running in the
    /// workspace, without an inherited `$TINYCODE_HOME`).
    pub fn env_vars(&self) -> Vec<(String, String)> {
        let mut vars = vec![
            (
                "XDG_RUNTIME_DIR".to_string(),
                self.runtime.display().to_string(),
            ),
            ("RUST_LOG".to_string(), "info".to_string()),
        ];
        if let Some(home) = &self.home {
            vars.push(("TINYCODE_HOME".into(), home.display().to_string()));
        }
        vars.extend(self.extra_env.iter().cloned());
        vars
    }

    fn env(&self, cmd: &mut Command) {
        cmd.current_dir(self.workspace())
            .env_remove("TINYCODE_HOME");
        for (k, v) in self.env_vars() {
            cmd.env(k, v);
        }
    }

    /// The `tinycode` CLI, run in the workspace.
    pub fn cli(&self) -> Command {
        let mut cmd = Command::new(bin("tinycode"));
        self.env(&mut cmd);
        cmd
    }

    /// The `tinycoded` daemon binary, run in the workspace (not started).
    pub fn daemon_cmd(&self) -> Command {
        let mut cmd = Command::new(bin("tinycoded"));
        self.env(&mut cmd);
        cmd
    }

    /// Run the CLI with `args`; returns (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self.cli().args(args).output().expect("run tinycode");
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// [`Desk::ok`] again until its output holds every one of `wanted`
    /// (within 30 s); returns the last output. For reads of a model that
    /// follows the log (`session show` right after a turn's end was seen
    /// live, or on another daemon).
    pub fn ok_when(&self, args: &[&str], wanted: &[&str]) -> String {
        let mut out = String::new();
        wait_until(Duration::from_secs(30), || {
            out = self.ok(args);
            wanted.iter().all(|w| out.contains(w))
        });
        out
    }

    /// Run the CLI and require success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.code,
            0,
            "tinycode {args:?} failed: {out:?}\n--- daemon log ---\n{}\n--- daemon stderr ---\n{}",
            self.log(),
            std::fs::read_to_string(self.state_dir().join("logs/tinycoded.stderr.log"))
                .unwrap_or_default()
        );
        out.stdout
    }

    /// Run the CLI with `--json` and parse its stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let stdout = self.ok(&all);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout}"))
    }

    /// `events --json` as parsed lines.
    pub fn events(&self, args: &[&str]) -> Vec<serde_json::Value> {
        let mut all = vec!["--json", "events"];
        all.extend_from_slice(args);
        self.ok(&all)
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    }

    /// `ticket create` of a web ticket with `subject` (and a placeholder
    /// customer and body).
    pub fn create_ticket(&self, subject: &str) -> Output {
        self.run(&[
            "ticket",
            "create",
            "--subject",
            subject,
            "--customer",
            "c",
            "--channel",
            "web",
            "--body",
            "b",
        ])
    }

    /// `tinycode session new ARGS…`; the new session's id.
    pub fn new_session(&self, args: &[&str]) -> String {
        let mut all = vec!["session", "new"];
        all.extend_from_slice(args);
        let out = self.ok(&all);
        out.split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// The pid written in the state dir's lock file by the running daemon.
    pub fn daemon_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.state_dir().join("tinycoded.lock"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stop the daemon (if any) through the CLI, then make sure it is gone.
    pub fn stop(&self) {
        let pid = self.daemon_pid();
        let _ = self.cli().args(["daemon", "stop"]).output();
        if let Some(pid) = pid {
            wait_until(Duration::from_secs(10), || !alive(pid));
        }
    }
}

impl Default for Desk {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Desk {
    fn drop(&mut self) {
        if let Some(pid) = self.daemon_pid().filter(|p| alive(*p)) {
            let _ = self.cli().args(["daemon", "stop"]).output();
            if !wait_until(Duration::from_secs(10), || !alive(pid)) {
                kill(pid, "KILL");
            }
        }
    }
}

/// Copy a directory tree; files come out writable.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).expect("read")).expect("write");
        }
    }
}

#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Is `pid` still running? A zombie thread-group leader whose other
/// threads are still exiting counts as running: its file descriptors (the
/// daemon's socket and locks) are released only when the last thread exits.
pub fn alive(pid: u32) -> bool {
    tinycode_shared::client::process_running(pid)
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`), 0 if absent.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The fields of `/proc/<pid>/stat` after the parenthesised command name
/// (the state first, so the parent's pid is at 1, utime at 11, stime at
/// 12); empty when it cannot be read.
fn proc_stat(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_default()
        .rsplit_once(") ")
        .map(|(_, rest)| rest.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// CPU time `pid` has used (user and system, all its threads), in
/// seconds, from `/proc/<pid>/stat` (counted in USER_HZ ticks: 100 a
/// second on Linux); 0 when it cannot be read.
pub fn proc_cpu_seconds(pid: u32) -> f64 {
    let fields = proc_stat(pid);
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The parent of `pid`, from `/proc/<pid>/stat`; `None` when it cannot be
/// read.
pub fn proc_parent(pid: u32) -> Option<u32> {
    proc_stat(pid).get(1).and_then(|v| v.parse().ok())
}

/// Send a signal by name (`TERM`, `KILL`, …) with kill(1).
pub fn kill(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status();
}

/// Whether an external tool a test drives is installed: `probe` must run
/// and succeed. CI installs every such tool (see .ci/run), so there (with
/// `CI` set) a missing one fails the test instead of skipping it.
pub fn tool_available(probe: &[&str], install: &str) -> bool {
    let found = Command::new(probe[0])
        .args(&probe[1..])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} must be installed in CI ({install})",
            probe.join(" ")
        );
        eprintln!("{} is not available; skipping ({install})", probe[0]);
    }
    found
}

/// `grpcurl -plaintext -authority localhost FLAGS… -unix SOCKET METHOD`,
/// `args` being the flags then the method (or `list`), last. (h2 rejects a
/// socket path as `:authority`, hyperium/h2#487, which grpcurl before
/// 1.8.10 sends.) Asserts success, returns stdout.
pub fn grpcurl(socket: &Path, args: &[&str]) -> String {
    let (method, flags) = args.split_last().expect("a method");
    let out = Command::new("grpcurl")
        .args(["-plaintext", "-authority", "localhost"])
        .args(flags)
        .arg("-unix")
        .arg(socket)
        .arg(method)
        .output()
        .expect("run grpcurl");
    assert!(out.status.success(), "grpcurl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Poll `cond` every 10 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// A running child whose stdout lines are collected by a thread.
pub struct LineReader {
    pub child: Child,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl LineReader {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Collect lines until `done(&seen)` holds; panics after `timeout`.
    pub fn until(&mut self, timeout: Duration, done: impl Fn(&[String]) -> bool) -> &[String] {
        let deadline = Instant::now() + timeout;
        while !done(&self.seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("timed out; lines so far: {:#?}", self.seen)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("process ended; lines so far: {:#?}", self.seen)
                }
            }
        }
        &self.seen
    }
}

impl Drop for LineReader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The MCP peer of the tests and benches, pinned.
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The pinned server-everything's script, installed with npm under `tmp`
/// (the caller's `CARGO_TARGET_TMPDIR`) once; `None` without npm, unless
/// `CI` is set (then it panics: CI must run these tests).
pub fn server_everything(tmp: &Path) -> Option<PathBuf> {
    let dir = tmp.join("npm-server-everything");
    let script = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    // Tests run at once in one process: one installs, the others wait.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    if !script.exists() {
        let installed = Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(SERVER_EVERYTHING)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !installed || !script.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs node and npm to install {SERVER_EVERYTHING}"
            );
            eprintln!("skipped: cannot install {SERVER_EVERYTHING} with npm");
            return None;
        }
    }
    Some(script)
}

/// `tinycode web --no-open` on `desk`: the running server and the link it
/// printed (`http://127.0.0.1:<port>/?token=…`).
pub fn start_web(desk: &Desk) -> (LineReader, String) {
    let mut web = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args(["web", "--no-open"]);
        cmd
    });
    let link = web
        .until(Duration::from_secs(20), |l| !l.is_empty())
        .first()
        .cloned()
        .expect("tinycode web printed its link");
    (web, link)
}

/// The first approval `desk` lists as pending, once there is one (within
/// `timeout`).
pub fn pending_approval(desk: &Desk, timeout: Duration) -> String {
    let mut id = String::new();
    let asked = wait_until(timeout, || {
        let list = desk.json(&["approvals", "list"]);
        id = list[0]["request"]["approvalId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        !id.is_empty()
    });
    assert!(asked, "no approval was listed");
    id
}

/// A ticket file a person decided (category, P2, queue; routed), as a desk
/// that triaged it keeps it: history the offline model learns from.
pub fn decided_ticket(
    desk: &Desk,
    id: &str,
    subject: &str,
    body: &str,
    category: &str,
    queue: &str,
) {
    let ticket = serde_json::json!({
        "id": id, "subject": subject, "customer": "历史客户", "channel": "email",
        "createdAt": "2026-09-01T09:00:00+08:00", "slaMinutes": 240, "status": "routed",
        "category": category, "priority": "P2", "queue": queue,
        "messages": [{"from": "customer", "text": body, "at": "2026-09-01T09:00:00+08:00"}]
    });
    desk.write(
        &format!("tickets/{id}.json"),
        &serde_json::to_string_pretty(&ticket).expect("JSON"),
    );
}
