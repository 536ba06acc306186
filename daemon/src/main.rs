//! `tinycoded` — run the daemon in the foreground. The `tinycode` CLI starts
//! it detached on demand; run it by hand (or under systemd) to watch it.

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
    #[arg(long, short = 'w', value_name = "DIR")]
    workspace: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
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
    // Everything the daemon creates in its state dir (log, database, lock,
    // artifacts) is private; workspace files keep the usual mode.
    tinycoded::domain::desk::private_umask();
    tinycode_shared::logging::init(&layout.log_path())
        .with_context(|| format!("cannot open log file {}", layout.log_path().display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(tinycoded::lifecycle::run(layout));
    if let Err(e) = &result {
        tracing::error!(error = %e, "tinycoded failed");
    }
    Ok(result?)
}
