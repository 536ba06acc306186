use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Subcommand;
use tinycode_shared::client::{self, ConnectError};
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::{DaemonStatus, GetStatusRequest, ReloadRequest, ShutdownRequest};
use tinycode_shared::render;

use crate::{Ctx, output};

/// Exit code of `daemon status` when no daemon answers.
const NOT_RUNNING: u8 = 3;

#[derive(Subcommand, Debug)]
pub enum DaemonAction {
    /// Start tinycoded in the background (no-op when it is running).
    Start,
    /// Ask tinycoded to stop and wait until it has.
    Stop,
    /// Show whether tinycoded runs, and its figures (exit 3 when it does not).
    Status,
    /// Read `.tinycode/config.json` again and apply what can change while
    /// the daemon runs (model, providers, permission mode, limits,
    /// auto-triage, MCP servers, skills); say what needs a restart. A config
    /// that does not load changes nothing (exit 1). SIGHUP does the same.
    Reload,
    /// Stop and start tinycoded: first no new turn starts and running turns
    /// reach a safe point (completed, or waiting for a person).
    Restart {
        /// Wait at most this long for running turns (`90`, `90s`, `5m`);
        /// turns still running then are marked interrupted.
        #[arg(long, default_value = "60s", value_parser = crate::session_cmd::parse_duration_arg)]
        timeout: u64,
    },
}

pub async fn run(ctx: &Ctx, action: DaemonAction) -> anyhow::Result<ExitCode> {
    match action {
        DaemonAction::Start => start(ctx).await,
        DaemonAction::Stop => stop(ctx).await,
        DaemonAction::Status => status(ctx).await,
        DaemonAction::Reload => reload(ctx).await,
        DaemonAction::Restart { timeout } => restart(ctx, timeout).await,
    }
}

async fn reload(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let channel = ctx.connect().await?;
    let done = DaemonClient::new(channel)
        .reload(ReloadRequest {})
        .await?
        .into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.ReloadResponse", &done));
        return Ok(ExitCode::SUCCESS);
    }
    if done.applied.is_empty() {
        println!("config reloaded: nothing changed that applies live");
    } else {
        println!("config reloaded; in force now: {}", done.applied.join(", "));
    }
    println!(
        "  model {} · permission mode {}",
        done.default_model, done.permission_mode
    );
    for key in &done.needs_restart {
        println!(
            "  {}",
            tinycode_shared::hint::localize(&format!(
                "needs a restart (`tinycode daemon restart`): {key}"
            ))
        );
    }
    for w in &done.warnings {
        eprintln!("  warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn restart(ctx: &Ctx, timeout: u64) -> anyhow::Result<ExitCode> {
    let channel = match client::connect(&ctx.layout.socket, &ctx.client).await {
        Ok(c) => c,
        Err(ConnectError::NotRunning { .. }) => return start(ctx).await,
        Err(e) => return Err(e.into()),
    };
    let pid = fetch_status(channel.clone()).await?.pid;
    if !ctx.json {
        eprintln!(
            "draining: no new turn starts; running turns finish or reach an approval (at most {timeout} s)…"
        );
    }
    let drained = DaemonClient::new(channel)
        .shutdown(ShutdownRequest {
            drain: true,
            drain_seconds: timeout.min(3600) as u32,
        })
        .await?
        .into_inner();
    if !ctx.json && !drained.still_running.is_empty() {
        eprintln!(
            "still running after {timeout} s (marked interrupted at the start): {}",
            drained.still_running.join(", ")
        );
    }
    wait_until_stopped(ctx, pid).await?;
    if !ctx.json {
        println!("tinycoded (pid {pid}) stopped");
    }
    start(ctx).await
}

async fn fetch_status(
    channel: tinycode_shared::client::DaemonChannel,
) -> Result<DaemonStatus, tonic::Status> {
    Ok(DaemonClient::new(channel)
        .get_status(GetStatusRequest {})
        .await?
        .into_inner())
}

/// The status of the daemon just started. A connection cut while it is
/// read (seen once in CI's kill -9 loop as "operation was canceled", the
/// daemon up and well) is tried again, a few times, on a new connection.
async fn status_after_start(ctx: &Ctx) -> anyhow::Result<DaemonStatus> {
    let mut tries = 0;
    loop {
        let channel = client::connect(&ctx.layout.socket, &ctx.client).await?;
        match fetch_status(channel).await {
            Ok(status) => return Ok(status),
            Err(e)
                if tries < 5
                    && matches!(
                        e.code(),
                        tonic::Code::Cancelled | tonic::Code::Unavailable | tonic::Code::Unknown
                    ) =>
            {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The status of the daemon answering now, if one does.
async fn running_status(ctx: &Ctx) -> Option<DaemonStatus> {
    let channel = client::connect(&ctx.layout.socket, &ctx.client)
        .await
        .ok()?;
    fetch_status(channel).await.ok()
}

/// Wait (up to 10 s) until the daemon named in the lock file has exited:
/// one killed a moment ago may still accept a connection it will never
/// answer.
async fn wait_for_previous(ctx: &Ctx) {
    let pid = std::fs::read_to_string(ctx.layout.lock_path())
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let Some(pid) = pid else { return };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client::process_running(pid) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn start(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let (already, status) = match running_status(ctx).await {
        Some(status) => (true, status),
        None => {
            wait_for_previous(ctx).await;
            client::start_daemon(&ctx.layout).await?;
            (false, status_after_start(ctx).await?)
        }
    };
    if ctx.json {
        let mut value = render::message_json("tinycode.v1.DaemonStatus", &status);
        value["alreadyRunning"] = already.into();
        output::json_pretty(&value);
    } else if already {
        println!(
            "tinycoded is already running (pid {}) on {}",
            status.pid, status.socket_path
        );
    } else {
        println!(
            "tinycoded started (pid {}) on {}",
            status.pid, status.socket_path
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn stop(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let channel = match client::connect(&ctx.layout.socket, &ctx.client).await {
        Ok(c) => c,
        Err(ConnectError::NotRunning { .. }) => {
            report_stopped(ctx, None, false);
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let pid = fetch_status(channel.clone()).await?.pid;
    DaemonClient::new(channel)
        .shutdown(ShutdownRequest::default())
        .await?;
    wait_until_stopped(ctx, pid).await?;
    report_stopped(ctx, Some(pid), true);
    Ok(ExitCode::SUCCESS)
}

/// Stopped means: the socket is gone and the process has exited.
async fn wait_until_stopped(ctx: &Ctx, pid: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while ctx.layout.socket.exists() || client::process_running(pid) {
        if Instant::now() > deadline {
            anyhow::bail!(
                "tinycoded (pid {pid}) did not stop within 30s; see {}",
                ctx.layout.log_path().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn report_stopped(ctx: &Ctx, pid: Option<u32>, was_running: bool) {
    if ctx.json {
        output::json_pretty(&serde_json::json!({ "stopped": was_running, "pid": pid }));
    } else if let Some(pid) = pid {
        println!("tinycoded (pid {pid}) stopped");
    } else {
        println!("tinycoded is not running");
    }
}

/// `daemon status`: the startup progress, or the running daemon's status
/// (exit [`NOT_RUNNING`] when no daemon answers).
async fn status(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let channel = match client::connect_now(&ctx.layout.socket, &ctx.client).await {
        Ok(c) => c,
        Err(ConnectError::NotRunning { socket }) => {
            report_not_running(ctx, &socket);
            return Ok(ExitCode::from(NOT_RUNNING));
        }
        Err(e) => return Err(e.into()),
    };
    let s = fetch_status(channel).await?;
    if let Some(p) = s.startup.as_ref().filter(|p| !p.stage.is_empty())
        && !ctx.json
    {
        println!("{} (pid {})", render::startup_line(p), s.pid);
        return Ok(ExitCode::SUCCESS);
    }
    if ctx.json {
        let mut value = render::message_json("tinycode.v1.DaemonStatus", &s);
        value["running"] = true.into();
        output::json_pretty(&value);
    } else {
        print_status(&s);
        print_status_warnings(&s);
    }
    Ok(ExitCode::SUCCESS)
}

/// No daemon answers on `socket`.
fn report_not_running(ctx: &Ctx, socket: &std::path::Path) {
    if ctx.json {
        output::json_pretty(&serde_json::json!({
            "running": false,
            "socketPath": socket.display().to_string(),
        }));
    } else {
        println!(
            "tinycoded is not running (no answer on {})",
            socket.display()
        );
    }
}

/// The running daemon: where it is, its log, its read models, what is in
/// force.
fn print_status(s: &DaemonStatus) {
    println!(
        "tinycoded {} running (pid {}, up {})",
        s.version,
        s.pid,
        human_duration(s.uptime_ms)
    );
    println!("  workspace   {}", s.workspace);
    println!("  state dir   {}", s.state_dir);
    println!("  socket      {}", s.socket_path);
    println!("  log         {}", s.log_path);
    println!("  protocol    v{}", s.protocol_version);
    println!(
        "  events      {} (last sequence {})",
        s.event_count, s.last_sequence
    );
    println!("  store       {}", human_bytes(s.store_bytes));
    let models: Vec<String> = s
        .projections
        .iter()
        .map(|p| format!("{} {}", p.name, p.applied))
        .collect();
    println!(
        "  read models {} (last sequence applied)",
        models.join(", ")
    );
    println!("  daemon id   {}", s.daemon_id);
    println!(
        "  in force    model {} · permission mode {}",
        s.default_model, s.permission_mode
    );
}

/// What needs attention: settings waiting for a restart, paused writes,
/// unreadable workspace files; and the daemons sharing the log.
fn print_status_warnings(s: &DaemonStatus) {
    for key in &s.needs_restart {
        println!("  changed, needs a restart: {key}");
    }
    if !s.writes_paused.is_empty() {
        println!("  writes paused: {}", s.writes_paused);
    }
    if !s.workspace_problems.is_empty() {
        println!(
            "  workspace files not read ({}):",
            s.workspace_problems.len()
        );
        for p in &s.workspace_problems {
            println!("    {}: {}", p.file, p.reason);
        }
    }
    if s.daemons.len() > 1 {
        println!("  daemons sharing the log:");
        for d in &s.daemons {
            println!("    {}", member_line(d));
        }
    }
}

/// One daemon sharing the log, for `daemon status`.
fn member_line(d: &tinycode_shared::proto::DaemonMember) -> String {
    let state = if d.alive {
        format!("alive, heard {} ago", human_ms(d.heartbeat_age_ms))
    } else {
        format!(
            "not heard from for {} (lease {}): its work is taken over",
            human_ms(d.heartbeat_age_ms),
            human_ms(d.lease_ms)
        )
    };
    format!(
        "{}{} {} pid {} · {} · {} triage held",
        if d.this_daemon { "* " } else { "  " },
        d.id,
        d.host,
        d.pid,
        state,
        d.triage_leases
    )
}

fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        human_duration(ms)
    }
}

fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn human_bytes(b: u64) -> String {
    match b {
        0..1024 => format!("{b} B"),
        1024..1_048_576 => format!("{:.1} KiB", b as f64 / 1024.0),
        _ => format!("{:.1} MiB", b as f64 / 1_048_576.0),
    }
}
