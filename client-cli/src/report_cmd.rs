//! `tinycode report`: the desk's daily triage report (made by the daemon
//! from its read models and stored under the state directory); `report
//! list|show` read the stored ones.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use tinycode_shared::proto::reports_client::ReportsClient;
use tinycode_shared::proto::{
    GenerateReportRequest, GetReportRequest, ListReportsRequest, ReportInfo,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ReportArgs {
    /// One day of the desk's time zone (default: yesterday).
    #[arg(long, value_name = "YYYY-MM-DD", conflicts_with_all = ["from", "to"])]
    day: Option<String>,
    /// A range of days, both included.
    #[arg(long, value_name = "YYYY-MM-DD", requires = "to")]
    from: Option<String>,
    #[arg(long, value_name = "YYYY-MM-DD", requires = "from")]
    to: Option<String>,
    /// Only this queue's tickets.
    #[arg(long)]
    queue: Option<String>,
    /// Also copy the report's files (report.md, report.json, the SVG
    /// charts) into this folder.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(subcommand)]
    action: Option<ReportAction>,
}

#[derive(Subcommand, Debug)]
pub enum ReportAction {
    /// Reports made, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One report: its Markdown (with --json: its figures).
    Show { id: String },
}

pub async fn run(ctx: &Ctx, args: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut client = ReportsClient::new(ctx.connect().await?);
    match args.action {
        Some(ReportAction::List { limit }) => list(ctx, &mut client, limit).await?,
        Some(ReportAction::Show { id }) => show(ctx, &mut client, id).await?,
        None => {
            let info = client
                .generate(GenerateReportRequest {
                    day: args.day.unwrap_or_default(),
                    from: args.from.unwrap_or_default(),
                    to: args.to.unwrap_or_default(),
                    queue: args.queue.unwrap_or_default(),
                })
                .await?
                .into_inner();
            let content = client
                .get(GetReportRequest {
                    report_id: info.report_id.clone(),
                })
                .await?
                .into_inner();
            if let Some(dir) = &args.out {
                copy_out(ctx, &info, dir)?;
            }
            if ctx.json {
                let figures: serde_json::Value = serde_json::from_str(&content.figures_json)
                    .context("the stored report.json is not JSON")?;
                output::json_pretty(&serde_json::json!({
                    "report": render::message_json("tinycode.v1.ReportInfo", &info),
                    "figures": figures,
                }));
            } else {
                print!("{}", content.markdown);
                println!(
                    "\n{} · {} · files in {}",
                    info.report_id,
                    info.summary,
                    ctx.layout.state_dir.join(&info.directory).display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

type Client = ReportsClient<tinycode_shared::client::DaemonChannel>;

/// `report list`.
async fn list(ctx: &Ctx, client: &mut Client, limit: u32) -> anyhow::Result<()> {
    let list = client
        .list(ListReportsRequest { limit })
        .await?
        .into_inner()
        .reports;
    if ctx.json {
        let all = list
            .iter()
            .map(|r| render::message_json("tinycode.v1.ReportInfo", r))
            .collect();
        output::json_pretty(&serde_json::Value::Array(all));
    } else if list.is_empty() {
        println!("no reports yet (`tinycode report` makes yesterday's)");
    } else {
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|r| {
                vec![
                    r.report_id.clone(),
                    period(r),
                    if r.queue.is_empty() {
                        "-".into()
                    } else {
                        r.queue.clone()
                    },
                    r.summary.clone(),
                ]
            })
            .collect();
        print!(
            "{}",
            output::table(&["ID", "PERIOD", "QUEUE", "SUMMARY"], &rows)
        );
    }
    Ok(())
}

/// `report show ID`.
async fn show(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<()> {
    let content = client
        .get(GetReportRequest { report_id: id })
        .await?
        .into_inner();
    if ctx.json {
        let figures: serde_json::Value = serde_json::from_str(&content.figures_json)
            .context("the stored report.json is not JSON")?;
        output::json_pretty(&figures);
    } else {
        print!("{}", content.markdown);
    }
    Ok(())
}

fn period(r: &ReportInfo) -> String {
    if r.day.is_empty() {
        format!(
            "{} – {}",
            &r.from[..10.min(r.from.len())],
            &r.to[..10.min(r.to.len())]
        )
    } else {
        r.day.clone()
    }
}

/// Copy the report's files from the state directory into `dir`.
fn copy_out(ctx: &Ctx, info: &ReportInfo, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for file in &info.files {
        let from = ctx.layout.state_dir.join(file);
        let name = from.file_name().context("a report file without a name")?;
        let to = dir.join(name);
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}
