//! `tinycoded`'s command line: run the daemon in the foreground (the
//! `tinycode` CLI starts it detached on demand; run it by hand or under
//! systemd to watch it), or maintain a stopped daemon's log. It lives in the
//! library so the binary is a stub: a release rebuild after a change here
//! or in a handler compiles this crate once, not again for the binary.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use tinycode_shared::paths::Layout;

#[derive(Parser, Debug)]
#[command(
    name = "tinycoded",
    version,
    about = "The tinycode daemon (event log + gRPC over a Unix socket)"
)]
struct Args {
    /// The support workspace; default: nearest ancestor holding `.tinycode/`.
    #[arg(long, short = 'w', value_name = "DIR", global = true)]
    workspace: Option<PathBuf>,
    /// Start on a damaged log: what can still be read is kept, the lost
    /// range is recorded (`LogRecovered`) and its sequence numbers are never
    /// used again; every read model is rebuilt.
    #[arg(long)]
    recover: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Maintenance of a stopped daemon's log.
#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Check the whole log: checksums, sequences, stream versions, the
    /// durable head. Exit status 1 when it is damaged.
    Verify,
    /// Write the log to FILE (length-prefixed protobuf with checksums): the
    /// backup.
    Export { file: PathBuf },
    /// Restore the log from an export into this workspace's state (the
    /// current log, if any, is kept aside).
    Import { file: PathBuf },
    /// Check the workspace, config, state dir, daemon, provider and files;
    /// exit 1 when one fails. Reads only; the daemon may be running.
    Doctor,
}

/// The `tinycoded` process.
pub fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tinycoded: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let layout = Layout::discover(args.workspace.as_deref())?;
    if let Some(command) = args.command {
        use crate::maintenance::{Maintenance, maintain};
        crate::domain::desk::private_umask();
        let command = match command {
            Command::Verify => Maintenance::Verify,
            Command::Export { file } => Maintenance::Export(file),
            Command::Import { file } => Maintenance::Import(file),
            Command::Doctor => {
                let checks = crate::doctor::checks(&layout);
                println!("{}", crate::doctor::render(&checks));
                if checks
                    .iter()
                    .any(|c| c.verdict == crate::doctor::Verdict::Fail)
                {
                    anyhow::bail!("a check failed (above)");
                }
                return Ok(());
            }
        };
        println!("{}", maintain(&layout, &command)?);
        return Ok(());
    }
    // Everything the daemon creates in its state dir (log, database, lock,
    // artifacts) is private; workspace files keep the usual mode.
    crate::domain::desk::private_umask();
    tinycode_shared::logging::init(&layout.log_path())
        .with_context(|| format!("cannot open log file {}", layout.log_path().display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let options = crate::lifecycle::RunOptions {
        recover: args.recover,
    };
    let result = runtime.block_on(crate::lifecycle::run(layout, options));
    if let Err(e) = &result {
        tracing::error!(error = %e, "tinycoded failed");
    }
    // A blocking task still running (a training, a file scan) must not
    // keep a stopped daemon alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    Ok(result?)
}
