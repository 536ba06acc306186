//! `tinycode admin …`: operator commands on the daemon's state.

use std::process::ExitCode;

use clap::Subcommand;
use tinycode_shared::proto::RebuildRequest;
use tinycode_shared::proto::daemon_client::DaemonClient;
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum AdminAction {
    /// Fold the log again, from scratch, into read models: tickets, kb,
    /// mirror (the workspace files); none named: all. The log is the truth;
    /// this never changes it.
    Rebuild {
        /// Models to rebuild (tickets, kb, mirror, approvals, sessions,
        /// triage).
        models: Vec<String>,
    },
    /// Check the whole log (checksums, sequences, stream versions, the
    /// durable head); exit status 1 when it is damaged. The daemon must be
    /// stopped (`tinycode daemon stop`).
    Verify,
    /// Write the log to FILE (the backup). The daemon must be stopped.
    Export { file: std::path::PathBuf },
    /// Restore the log from FILE (the current one is kept aside). The
    /// daemon must be stopped.
    Import { file: std::path::PathBuf },
}

/// Run `tinycoded <args…>` on this workspace's log; its output is ours.
fn maintain(ctx: &Ctx, args: &[&std::ffi::OsStr]) -> anyhow::Result<ExitCode> {
    let daemon = tinycode_shared::client::find_daemon_binary()?;
    let mut cmd = std::process::Command::new(daemon);
    if let Some(ws) = &ctx.layout.workspace {
        cmd.arg("--workspace").arg(ws);
    }
    let status = cmd.args(args).status()?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub async fn run(ctx: &Ctx, action: AdminAction) -> anyhow::Result<ExitCode> {
    match action {
        AdminAction::Rebuild { models } => {
            let resp = DaemonClient::new(ctx.connect().await?)
                .rebuild(RebuildRequest { models })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.RebuildResponse", &resp));
            } else {
                for m in &resp.models {
                    println!("rebuilt {} up to sequence {}", m.name, m.applied);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AdminAction::Verify => maintain(ctx, &["verify".as_ref()]),
        AdminAction::Export { file } => maintain(ctx, &["export".as_ref(), file.as_os_str()]),
        AdminAction::Import { file } => maintain(ctx, &["import".as_ref(), file.as_os_str()]),
    }
}

/// `tinycode doctor`: the daemon binary's checks of this workspace, then
/// what a running daemon reports (files it refused, paused writes).
pub async fn doctor(ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let code = maintain(ctx, &["doctor".as_ref()])?;
    if let Ok(channel) = tinycode_shared::client::connect(&ctx.layout.socket, &ctx.client).await
        && let Ok(status) = DaemonClient::new(channel)
            .get_status(tinycode_shared::proto::GetStatusRequest {})
            .await
    {
        let s = status.into_inner();
        if !s.writes_paused.is_empty() {
            println!("✗ store      writes paused: {}", s.writes_paused);
        }
        for p in &s.workspace_problems {
            println!("! daemon     {} is not read: {}", p.file, p.reason);
        }
    }
    Ok(code)
}
