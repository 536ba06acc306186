//! MCP benchmarks (not tests): `cargo bench -p tinycode-tests --bench mcp`.
//!
//! 1. Start with 5 configured MCP servers (3 × server-everything, one that
//!    never answers, one whose command does not exist) against none, in
//!    alternating rounds: time from spawning `tinycoded` to its first
//!    answered `Daemon.GetStatus`. Target: ≤ 200 ms with the servers, not
//!    after the slowest server.
//! 2. Overhead per MCP tool call: the daemon's tool registry calling
//!    server-everything's `echo` (schema check, rmcp request over the
//!    child's stdio, result) — in process, the registry and hub the daemon
//!    uses; a built-in `get_ticket` through the same registry alongside.
//!    Target: p50 ≤ 2 ms.
//!
//! Needs node and npm (the pinned server-everything is installed with npm).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tinycode_shared::client::{ClientName, connect};
use tinycode_shared::proto::GetStatusRequest;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_tests::Desk;
use tinycode_tests::targets::{Targets, settle_disk};

const ROUNDS: usize = 10;
const CALLS: usize = 1_000;

fn main() {
    tinycode_tests::bin_dir();
    let Some(everything) =
        tinycode_tests::server_everything(Path::new(env!("CARGO_TARGET_TMPDIR")))
    else {
        eprintln!("needs node and npm");
        std::process::exit(1);
    };
    settle_disk();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut targets = Targets::new();
    runtime.block_on(async {
        start_times(&everything, &mut targets).await;
        call_overhead(&everything, &mut targets).await;
    });
    targets.finish();
}

fn servers(everything: &Path) -> Value {
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/fake_server.js");
    let script = everything.display().to_string();
    json!({
        "everything-1": { "command": "node", "args": [script, "stdio"] },
        "everything-2": { "command": "node", "args": [script, "stdio"] },
        "everything-3": { "command": "node", "args": [script, "stdio"] },
        "hangs": { "command": "node", "args": [fake, "hang"] },
        "missing": { "command": "/nonexistent/mcp-server" },
    })
}

/// Spawn the daemon; ms to its first answered `GetStatus`.
async fn first_answer(desk: &Desk) -> (std::process::Child, f64) {
    let t = Instant::now();
    let daemon = desk
        .daemon_cmd()
        .arg("--workspace")
        .arg(desk.workspace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let name = ClientName::new("bench").unwrap();
    loop {
        if let Ok(ch) = connect(&desk.socket(), &name).await
            && DaemonClient::new(ch)
                .get_status(GetStatusRequest {})
                .await
                .is_ok()
        {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no answer");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    (daemon, t.elapsed().as_secs_f64() * 1000.0)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

async fn start_times(everything: &Path, targets: &mut Targets) {
    let plain = Desk::fixture();
    let with_servers = Desk::fixture();
    with_servers.edit_config(|c| c["mcpServers"] = servers(everything));
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        for (desk, times) in [(&plain, &mut without), (&with_servers, &mut with)] {
            let (mut daemon, ms) = first_answer(desk).await;
            desk.stop();
            let _ = daemon.wait();
            // Round 0 imports the workspace: not a restart, not counted.
            if round > 0 {
                times.push(ms);
            }
        }
    }
    let (slowest_without, slowest_with) = (
        without.iter().copied().fold(0.0, f64::max),
        with.iter().copied().fold(0.0, f64::max),
    );
    let (without, with) = (median(without), median(with));
    println!(
        "start → first GetStatus, {ROUNDS} rounds alternating: no MCP servers median {without:.1} ms (max {slowest_without:.1}); 5 servers (3 server-everything, 1 hanging, 1 missing) median {with:.1} ms (max {slowest_with:.1})"
    );
    targets.at_most("start with 5 MCP servers, median", with, 200.0, "ms");
    targets.at_most("start with 5 MCP servers, max", slowest_with, 200.0, "ms");
}

async fn call_overhead(everything: &Path, targets: &mut Targets) {
    use tinycoded::config::Config;
    use tinycoded::domain::desk::Desk as DeskModel;
    use tinycoded::store::EventStore;
    use tinycoded::tools::{ToolContext, ToolRegistry};

    let desk = Desk::fixture();
    desk.edit_config(|c| {
        c["mcpServers"] = json!({
            "everything": { "command": "node", "args": [everything.display().to_string(), "stdio"] },
        });
    });
    let ws = desk.workspace();
    let config = Config::load(&ws).unwrap();
    let store = EventStore::open(&desk.root.join("bench-db")).unwrap();
    let (model, _) = DeskModel::open(store.clone(), &ws, &config.desk())
        .await
        .unwrap();
    let registry = ToolRegistry::standard();
    let hub = tinycoded::mcp::McpHub::start(&config.mcp_servers, &ws, registry.dynamic());
    let t = Instant::now();
    while hub.status()[0].state.name() != "ready" {
        assert!(t.elapsed() < Duration::from_secs(60), "{:?}", hub.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_cancel, cancel) = tokio::sync::watch::channel(false);
    let ctx = ToolContext {
        desk: model,
        skills: Arc::new(tinycoded::skills::SkillRegistry::default()),
        cancel,
        origin: None,
        agents: None,
        reports: None,
        confidence: Vec::new(),
        review_below: Default::default(),
    };
    let time = async |name: &str, args: Value| {
        for _ in 0..50 {
            registry.call(name, &args, &ctx).await;
        }
        let mut ms = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let t = Instant::now();
            let out = registry.call(name, &args, &ctx).await;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(!out.is_error, "{name}: {}", out.content);
        }
        ms.sort_by(f64::total_cmp);
        (ms[CALLS / 2], ms[CALLS * 99 / 100])
    };
    let (echo_p50, echo_p99) = time(
        "mcp__everything__echo",
        json!({"message": "hello from the bench"}),
    )
    .await;
    let (get_p50, get_p99) = time("get_ticket", json!({"ticket_id": "T-1001"})).await;
    println!(
        "{CALLS} calls each through the daemon's tool registry: mcp__everything__echo p50 {echo_p50:.3} ms, p99 {echo_p99:.3} ms; built-in get_ticket p50 {get_p50:.3} ms, p99 {get_p99:.3} ms"
    );
    targets.at_most("MCP echo call p50", echo_p50, 2.0, "ms");
    hub.stop();
    store.close().await.unwrap();
}
