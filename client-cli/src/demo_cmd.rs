//! `tinycode demo [DIR]`: the main job on the embedded demo desk — create
//! the desk, start the daemon on it, triage every open ticket with the
//! daemon's model (offline unless configured), and print the results and
//! the escalations waiting for a human. The daemon is left running.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use tinycode_shared::client::{self, ClientName};
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::GetStatusRequest;
use tinycode_shared::proto::daemon_client::DaemonClient;

use crate::triage_cmd::{
    TriageArgs, TriageResult, open_ticket_ids, result_table, results_json, triage_all,
};
use crate::{Ctx, init_cmd, output};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Where to create the demo desk (default: a new directory under the
    /// system temp dir). An existing workspace there is reused.
    pub dir: Option<PathBuf>,
}

pub async fn run(json: bool, client_name: &ClientName, args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = match args.dir {
        Some(dir) => dir,
        None => {
            let stamp = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0);
            std::env::temp_dir().join(format!("tinycode-demo-{stamp}"))
        }
    };
    let created = !dir.join(".tinycode/config.json").exists();
    if created {
        init_cmd::scaffold(&dir, true)?;
    }
    let layout = Layout::discover(Some(&dir))?;
    let workspace = layout.workspace.clone().unwrap_or(dir.clone());
    let ws = workspace.display().to_string();
    let channel = client::connect_or_start(&layout, client_name, true).await?;
    let status = DaemonClient::new(channel.clone())
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    if !json {
        println!(
            "Demo desk {} {ws}",
            if created { "created in" } else { "reused in" }
        );
        println!(
            "tinycoded running (pid {}) on {}",
            status.pid, status.socket_path
        );
    }
    let ids = open_ticket_ids(&channel).await?;
    let ctx = Ctx {
        json,
        autostart: true,
        layout,
        client: client_name.clone(),
    };
    let triage = TriageArgs {
        ids: vec![],
        all: true,
        approve: Some("ask".into()),
        model: None,
        concurrency: 2,
    };
    if !json {
        println!(
            "Triaging {} open tickets, two at a time, in the daemon…\n",
            ids.len()
        );
    }
    let results = triage_all(&ctx, channel.clone(), ids, &triage).await;
    let waiting: Vec<&TriageResult> = results.iter().filter(|r| r.waiting_for.is_some()).collect();
    if json {
        output::json_pretty(&serde_json::json!({
            "workspace": ws,
            "created": created,
            "daemonPid": status.pid,
            "socket": status.socket_path,
            "results": results_json(&results),
            "needApproval": waiting.iter().map(|r| serde_json::json!({
                "ticket": r.id, "approval": r.waiting_for,
            })).collect::<Vec<_>>(),
            "stop": format!("tinycode -w {ws} daemon stop"),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", result_table(&results));
    if results.is_empty() {
        println!("(no open tickets: this desk was triaged before)");
    }
    if !waiting.is_empty() {
        println!(
            "\n{} triage turns wait for a human's approval (they resume in the daemon once decided):",
            waiting.len()
        );
        for r in &waiting {
            let a = r.waiting_for.clone().unwrap_or_default();
            println!("  {}: tinycode -w {ws} approvals show {a}", r.id);
            println!(
                "        tinycode -w {ws} approvals approve {a}   |   tinycode -w {ws} approvals deny {a} --reason \"…\""
            );
        }
    }
    println!("\nTry:");
    println!("  cd {ws}");
    println!("  tinycode ticket show T-1001");
    println!("  tinycode session list");
    println!("  tinycode run \"退款 时效 是多久？\"");
    println!("Stop the daemon: tinycode -w {ws} daemon stop");
    Ok(ExitCode::SUCCESS)
}
