//! `tinycode demo [DIR]`: the main job on the embedded demo desk — create
//! the desk, start the daemon on it, and show what it holds. The daemon is
//! left running for the CLI and the TUI.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use tinycode_shared::client::{self, ClientName};
use tinycode_shared::paths::Layout;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::proto::knowledge_client::KnowledgeClient;
use tinycode_shared::proto::tickets_client::TicketsClient;
use tinycode_shared::proto::{
    GetStatusRequest, ListArticlesRequest, ListTicketsRequest, SearchRequest,
};

use crate::{init_cmd, output, ticket_cmd};

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
    let channel = client::connect_or_start(&layout, client_name, true).await?;
    let status = DaemonClient::new(channel.clone())
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    let tickets = TicketsClient::new(channel.clone())
        .list(ListTicketsRequest {
            limit: 10_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    let articles = KnowledgeClient::new(channel.clone())
        .list(ListArticlesRequest::default())
        .await?
        .into_inner();
    let query = "退款 时效";
    let hits = KnowledgeClient::new(channel)
        .search(SearchRequest {
            query: query.into(),
            limit: 3,
        })
        .await?
        .into_inner();
    let ws = workspace.display().to_string();
    if json {
        output::json_pretty(&serde_json::json!({
            "workspace": ws,
            "created": created,
            "daemonPid": status.pid,
            "socket": status.socket_path,
            "tickets": tickets.total,
            "articles": articles.articles.len(),
            "search": { "query": query, "top": hits.hits.first().map(|h| h.id.clone()) },
            "stop": format!("tinycode -w {ws} daemon stop"),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Demo desk {} {ws}",
        if created { "created in" } else { "reused in" }
    );
    println!(
        "tinycoded running (pid {}) on {}\n",
        status.pid, status.socket_path
    );
    println!(
        "{} tickets, {} knowledge articles, queues from .tinycode/config.json\n",
        tickets.total,
        articles.articles.len()
    );
    print!("{}", ticket_cmd::ticket_table(&tickets.tickets));
    if let Some(top) = hits.hits.first() {
        println!(
            "\nsearch {query:?} → {} ({:.2}): {}",
            top.id, top.score, top.snippet
        );
    }
    println!("\nTry:");
    println!("  cd {ws}");
    println!("  tinycode ticket show T-1001");
    println!("  tinycode kb search \"refund business days\"");
    println!("  tinycode events --follow");
    println!("Stop the daemon: tinycode -w {ws} daemon stop");
    Ok(ExitCode::SUCCESS)
}
