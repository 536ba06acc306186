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
        /// Models to rebuild (tickets, kb, mirror).
        models: Vec<String>,
    },
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
    }
}
