//! `tinycode demo [DIR]`: the main job on the embedded demo desk — create
//! the desk with auto-triage on, start the daemon on it, follow its
//! background triage worker with a progress bar, and print the results and
//! the escalations waiting for a human. The daemon is left running, and
//! goes on triaging tickets that arrive.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use tinycode_shared::client::{self, ClientName};
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::{DaemonStatus, GetStatusRequest};

use crate::triage_cmd::{TriageArgs, enqueue, follow_items, result_table, results_json};
use crate::{Ctx, init_cmd, output};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Where to create the demo desk (default: a new directory under the
    /// system temp dir). An existing workspace there is reused.
    pub dir: Option<PathBuf>,
}

/// Turn the background worker on in a freshly scaffolded desk's config.
fn enable_auto_triage(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(".tinycode/config.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut config: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    if let Some(obj) = config.as_object_mut() {
        obj.insert(
            "autoTriage".into(),
            // No `concurrency`: the daemon's default follows the model (16
            // triages at once with the offline model, 2 with a provider's).
            serde_json::json!({ "enabled": true }),
        );
    }
    let text = serde_json::to_string_pretty(&config)?;
    std::fs::write(&path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// A new directory under the system temp dir for a demo desk.
fn fresh_dir() -> PathBuf {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("tinycode-demo-{stamp}"))
}

/// Scaffold the demo desk in `dir` with auto-triage on, unless a workspace
/// is there already. Whether it was created.
fn prepare_desk(dir: &Path) -> anyhow::Result<bool> {
    let created = !dir.join(".tinycode/config.json").exists();
    if created {
        init_cmd::scaffold(dir, true)?;
        enable_auto_triage(dir)?;
    }
    Ok(created)
}

pub async fn run(json: bool, client_name: &ClientName, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = args.dir.unwrap_or_else(fresh_dir);
    let created = prepare_desk(&dir)?;
    let layout = Layout::discover(Some(&dir))?;
    let workspace = layout.workspace.clone().unwrap_or(dir.clone());
    let ws = workspace.display().to_string();
    let tc = program();
    let channel = client::connect_or_start(&layout, client_name, true).await?;
    let status = DaemonClient::new(channel.clone())
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    if !json {
        print_started(created, &ws, &status);
    }
    let ctx = Ctx {
        json,
        autostart: true,
        layout,
        client: client_name.clone(),
    };
    // With auto-triage on, the worker queued the open tickets at start;
    // asking for them again changes nothing then, and covers a desk whose
    // config has it off. Then the whole board is followed.
    let everything = TriageArgs {
        view: None,
        ids: vec![],
        all: true,
        approve: Some("ask".into()),
        model: None,
    };
    enqueue(&channel, &everything).await?;
    let (items, levels) = follow_items(&ctx, &channel, vec![]).await?;
    let waiting: Vec<(&String, &String)> = items
        .iter()
        .flat_map(|i| i.approval_ids.iter().map(move |a| (&i.ticket_id, a)))
        .collect();
    if json {
        output::json_pretty(&serde_json::json!({
            "workspace": ws,
            "created": created,
            "daemonPid": status.pid,
            "socket": status.socket_path,
            "results": results_json(&items, &levels),
            "needApproval": waiting.iter().map(|(t, a)| serde_json::json!({
                "ticket": t, "approval": a,
            })).collect::<Vec<_>>(),
            "stop": format!("{tc} -w {ws} daemon stop"),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", result_table(&items, &levels));
    if items.is_empty() {
        println!("(no open tickets: this desk was triaged before; `{tc} triage status` shows how)");
    }
    print_waiting(&tc, &ws, &waiting);
    print_next_steps(&tc, &ws);
    Ok(ExitCode::SUCCESS)
}

/// Where the desk is and which daemon triages it.
fn print_started(created: bool, ws: &str, status: &DaemonStatus) {
    println!(
        "Demo desk {} {ws}",
        if created { "created in" } else { "reused in" }
    );
    println!(
        "tinycoded running (pid {}) on {}",
        status.pid, status.socket_path
    );
    println!("Its triage worker triages every open ticket in the background…\n");
}

/// The triage turns waiting for a human, with the commands that decide them.
fn print_waiting(tc: &str, ws: &str, waiting: &[(&String, &String)]) {
    if waiting.is_empty() {
        return;
    }
    println!(
        "\n{} triage turns wait for a human's approval (they resume in the daemon once decided):",
        waiting.len()
    );
    for (t, a) in waiting {
        println!("  {t}: {tc} -w {ws} approvals show {a}");
        println!(
            "        {tc} -w {ws} approvals approve {a}   |   {tc} -w {ws} approvals deny {a} --reason \"…\""
        );
    }
}

/// What to try next, and how to stop the daemon.
fn print_next_steps(tc: &str, ws: &str) {
    println!("\nThe daemon keeps triaging tickets as they arrive. Try:");
    println!("  cd {ws}");
    println!(
        "  {tc} ticket create --subject \"Parcel lost\" --customer Ana --channel email --body \"物流 一直 没有 更新\""
    );
    println!("  {tc} triage watch            # the worker, live");
    println!("  {tc} ticket show T-1001");
    println!("  {tc} run \"退款 时效 是多久？\"");
    println!("Stop the daemon: {tc} -w {ws} daemon stop");
}

/// How to run this CLI from anywhere (`tinycode`, or its full path).
fn program() -> String {
    tinycode_shared::hint::program().to_string()
}
