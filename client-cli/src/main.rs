//! `tinycode` — the scriptable command-line client of `tinycoded`.
//!
//! A thin client: it resolves where the daemon lives, connects (starting the
//! daemon when needed), calls the gRPC API and prints the answer as text or,
//! with `--json`, as JSON. No business logic lives here.

mod daemon_cmd;
mod events_cmd;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use tinycode_shared::client::{self, ClientName, DaemonChannel};
use tinycode_shared::paths::Layout;

#[derive(Parser, Debug)]
#[command(
    name = "tinycode",
    version,
    about = "Customer-support triage agent — command-line client of tinycoded",
    propagate_version = true
)]
struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// The support workspace; default: nearest ancestor holding `.tinycode/`.
    #[arg(long, short = 'w', global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Fail instead of starting tinycoded when it is not running.
    #[arg(long, global = true)]
    no_autostart: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start, stop or inspect the daemon.
    Daemon {
        #[command(subcommand)]
        action: daemon_cmd::DaemonAction,
    },
    /// Print the event log (optionally following new events).
    Events(events_cmd::EventsArgs),
    /// Print a shell completion script, e.g. `tinycode completions bash`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// What every command needs: where the daemon is and how to talk to it.
pub struct Ctx {
    pub json: bool,
    pub autostart: bool,
    pub layout: Layout,
    pub client: ClientName,
}

impl Ctx {
    /// Connect, auto-starting the daemon unless `--no-autostart`.
    pub async fn connect(&self) -> anyhow::Result<DaemonChannel> {
        Ok(client::connect_or_start(&self.layout, &self.client, self.autostart).await?)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinycode: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tinycode: {}", output::describe(&e));
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "tinycode",
            &mut std::io::stdout(),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let ctx = Ctx {
        json: cli.json,
        autostart: !cli.no_autostart,
        layout: Layout::discover(cli.workspace.as_deref())?,
        client: ClientName::new(&format!("tinycode-cli/{}", env!("CARGO_PKG_VERSION")))?,
    };
    match cli.command {
        Command::Daemon { action } => daemon_cmd::run(&ctx, action).await,
        Command::Events(args) => events_cmd::run(&ctx, args).await,
        Command::Completions { .. } => Ok(ExitCode::SUCCESS),
    }
}
