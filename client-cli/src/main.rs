//! `tinycode` — the scriptable command-line client of `tinycoded`.
//!
//! A thin client: it resolves where the daemon lives, connects (starting the
//! daemon when needed), calls the gRPC API and prints the answer as text or,
//! with `--json`, as JSON. No business logic lives here.
#![forbid(unsafe_code)]

mod admin_cmd;
mod approvals_cmd;
mod auth_cmd;
mod connectors_cmd;
mod daemon_cmd;
mod demo_cmd;
mod eval_cmd;
mod events_cmd;
mod init_cmd;
mod kb_cmd;
mod mcp_cmd;
mod mcp_serve;
mod output;
mod report_cmd;
mod review_cmd;
mod session_cmd;
mod skills_cmd;
mod sla_cmd;
mod ticket_cmd;
mod triage_cmd;

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
    long_about = "Customer-support triage agent — command-line client of tinycoded.\n\nWith no command, opens the terminal UI on a new session (as TinyCode does); `--continue` or `--session ID` attach to one instead.",
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
    /// With no command: open the terminal UI on the most recent session.
    #[arg(long = "continue", short = 'c', conflicts_with = "session")]
    continue_: bool,
    /// With no command: open the terminal UI on this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

impl Cli {
    /// `--continue` and `--session` belong to the bare command.
    fn check(&self) -> anyhow::Result<()> {
        if self.command.is_some() && (self.continue_ || self.session.is_some()) {
            anyhow::bail!(
                "--continue and --session open the terminal UI and take no command; for one turn use `tinycode run -c TEXT` or `tinycode run --session ID TEXT`"
            );
        }
        Ok(())
    }

    /// What to pass `tinycode-tui` when no command was given.
    fn tui_args(&self) -> Vec<String> {
        match (&self.session, self.continue_) {
            (Some(id), _) => vec!["--session".into(), id.clone()],
            (None, true) => vec!["--continue".into()],
            (None, false) => Vec::new(),
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Operator commands: rebuild read models; verify, export, import the
    /// log.
    Admin {
        #[command(subcommand)]
        action: admin_cmd::AdminAction,
    },
    /// Start, stop or inspect the daemon.
    Daemon {
        #[command(subcommand)]
        action: daemon_cmd::DaemonAction,
    },
    /// Create the embedded demo desk, start the daemon on it, show it.
    Demo(demo_cmd::DemoArgs),
    /// Check the workspace, config, state dir, daemon, model provider and
    /// files, and say what to do about each problem (exit 1 on a failure).
    Doctor,
    /// Turn a directory into a tinycode workspace (`--demo`: with the demo desk).
    Init(init_cmd::InitArgs),
    /// Tickets: list, show, search, create, message.
    Ticket {
        #[command(subcommand)]
        action: ticket_cmd::TicketAction,
    },
    /// Knowledge base: list, show, search.
    Kb {
        #[command(subcommand)]
        action: kb_cmd::KbAction,
    },
    /// Ask the agent (one turn, streamed); exit 0 when the turn completes.
    Run(session_cmd::RunArgs),
    /// Triage tickets: one session each, a summary table at the end.
    Triage(triage_cmd::TriageArgs),
    /// Sessions: new, list, show, attach, send, cancel.
    Session {
        #[command(subcommand)]
        action: session_cmd::SessionAction,
    },
    /// Approvals waiting for a human: list, show, approve, deny, watch, rules.
    Approvals {
        #[command(subcommand)]
        action: approvals_cmd::ApprovalsAction,
    },
    /// MCP: the servers whose tools the agent uses (list, add, remove,
    /// status) and `serve`, the desk for other agents.
    Mcp {
        #[command(subcommand)]
        action: mcp_cmd::McpAction,
    },
    /// Measure triage on labelled tickets (in a scratch desk); list, show.
    Eval(eval_cmd::EvalArgs),
    /// Skills: list, install PATH, remove NAME.
    Skills {
        #[command(subcommand)]
        action: skills_cmd::SkillsAction,
    },
    /// Print the event log (optionally following new events).
    Events(events_cmd::EventsArgs),
    /// The daily triage report (default: yesterday's); `list`, `show ID`.
    Report(report_cmd::ReportArgs),
    /// Provider keys, stored encrypted in the daemon and used with no
    /// restart: `set PROVIDER` (a hidden prompt or stdin), `list`, `remove`.
    Auth {
        #[command(subcommand)]
        action: auth_cmd::AuthAction,
    },
    /// The models each provider serves (the offline model first), for
    /// `--model` and `tinycode session model`.
    Models {
        /// Only this provider's.
        provider: Option<String>,
    },
    /// Import tickets from a file (`import csv FILE [--map field=column,…]`);
    /// the same file twice adds nothing.
    Import(connectors_cmd::ImportArgs),
    /// Connected helpdesks: `status` (each source's deliveries in and out,
    /// failures).
    Connectors {
        #[command(subcommand)]
        action: connectors_cmd::ConnectorsAction,
    },
    /// Replies and resolutions owed to customers of connected sources:
    /// `list`, `retry N`.
    Outbox {
        #[command(subcommand)]
        action: connectors_cmd::OutboxAction,
    },
    /// SLA clocks: `watch` follows the alerts (at risk, breached) live.
    Sla {
        #[command(subcommand)]
        action: sla_cmd::SlaAction,
    },
    /// The terminal UI (runs `tinycode-tui` with these arguments, e.g.
    /// `tinycode tui --continue`; `tinycode tui --help` shows its options).
    #[command(disable_help_flag = true)]
    Tui {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The desk in a browser (runs `tinycode-web` with these arguments:
    /// `tinycode web [--listen ADDR] [--no-open] [--url]`; `tinycode web
    /// --help` shows its options).
    #[command(disable_help_flag = true)]
    Web {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
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

/// End quietly when stdout is a closed pipe (`tinycode … | head`), as Unix
/// tools do. (Not by restoring SIGPIPE's default: that would also kill the
/// CLI when the daemon closes its socket mid-write.)
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// `tinycode tui …` / `tinycode web …`: become `tinycode-tui …` /
/// `tinycode-web …` (found beside this binary or on PATH), passing the
/// global `--workspace` and `--no-autostart` on.
fn companion(
    name: &str,
    workspace: Option<PathBuf>,
    no_autostart: bool,
    args: Vec<String>,
) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let binary = client::find_binary(name).map_err(|beside| {
        anyhow::anyhow!(
            "cannot find {name} (looked beside {} and on PATH); build it with `cargo build -p {name}`",
            beside.display()
        )
    })?;
    let mut command = std::process::Command::new(&binary);
    if let Some(w) = workspace {
        command.arg("--workspace").arg(w);
    }
    if no_autostart {
        command.arg("--no-autostart");
    }
    let error = command.args(args).exec();
    Err(anyhow::anyhow!("cannot run {}: {error}", binary.display()))
}

fn main() -> ExitCode {
    quiet_on_closed_stdout();
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
            eprintln!(
                "tinycode: {}",
                tinycode_shared::hint::localize(&output::describe(&e))
            );
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let client = ClientName::new(&format!("tinycode-cli/{}", env!("CARGO_PKG_VERSION")))?;
    cli.check()?;
    // Commands that need no existing workspace.
    let Some(command) = cli.command else {
        // As TinyCode: no command opens the terminal UI.
        let args = cli.tui_args();
        return companion("tinycode-tui", cli.workspace, cli.no_autostart, args);
    };
    let command = match command {
        Command::Completions { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "tinycode", &mut std::io::stdout());
            return Ok(ExitCode::SUCCESS);
        }
        Command::Init(args) => return init_cmd::run(cli.json, args),
        Command::Tui { args } => {
            return companion("tinycode-tui", cli.workspace, cli.no_autostart, args);
        }
        Command::Web { args } => {
            return companion("tinycode-web", cli.workspace, cli.no_autostart, args);
        }
        Command::Demo(args) => return demo_cmd::run(cli.json, &client, args).await,
        other => other,
    };
    let ctx = Ctx {
        json: cli.json,
        autostart: !cli.no_autostart,
        layout: Layout::discover(cli.workspace.as_deref())?,
        client,
    };
    match command {
        Command::Admin { action } => admin_cmd::run(&ctx, action).await,
        Command::Doctor => admin_cmd::doctor(&ctx).await,
        Command::Daemon { action } => daemon_cmd::run(&ctx, action).await,
        Command::Events(args) => events_cmd::run(&ctx, args).await,
        Command::Auth { action } => auth_cmd::auth(&ctx, action).await,
        Command::Models { provider } => auth_cmd::models(&ctx, provider).await,
        Command::Sla { action } => sla_cmd::run(&ctx, action).await,
        Command::Report(args) => report_cmd::run(&ctx, args).await,
        Command::Import(args) => connectors_cmd::import(&ctx, args).await,
        Command::Outbox { action } => connectors_cmd::outbox(&ctx, action).await,
        Command::Connectors { action } => connectors_cmd::connectors(&ctx, action).await,
        Command::Ticket { action } => ticket_cmd::run(&ctx, action).await,
        Command::Kb { action } => kb_cmd::run(&ctx, action).await,
        Command::Run(args) => session_cmd::run(&ctx, args).await,
        Command::Triage(args) => triage_cmd::run(&ctx, args).await,
        Command::Session { action } => session_cmd::session(&ctx, action).await,
        Command::Approvals { action } => approvals_cmd::run(&ctx, action).await,
        Command::Mcp { action } => mcp_cmd::run(ctx, action).await,
        Command::Skills { action } => skills_cmd::run(&ctx, action).await,
        Command::Eval(args) => eval_cmd::run(&ctx, args).await,
        Command::Completions { .. }
        | Command::Init(_)
        | Command::Demo(_)
        | Command::Tui { .. }
        | Command::Web { .. } => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tinycode").chain(args.iter().copied()))
    }

    #[test]
    fn no_command_opens_the_tui_as_tinycode_does() {
        let cli = parse(&[]).unwrap();
        assert!(cli.command.is_none());
        assert!(cli.tui_args().is_empty(), "a new session");
        assert_eq!(parse(&["--continue"]).unwrap().tui_args(), ["--continue"]);
        assert_eq!(parse(&["-c"]).unwrap().tui_args(), ["--continue"]);
        assert_eq!(
            parse(&["--session", "S-3"]).unwrap().tui_args(),
            ["--session", "S-3"]
        );
        assert!(parse(&["--continue", "--session", "S-3"]).is_err());
        // A command still runs as before; `run -c` keeps its own meaning.
        let cli = parse(&["run", "-c", "hello"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Run(ref a)) if a.continue_));
        assert!(
            parse(&["--continue", "ticket", "list"])
                .unwrap()
                .check()
                .is_err()
        );
        assert!(
            parse(&["--json", "ticket", "list"])
                .unwrap()
                .check()
                .is_ok()
        );
    }
}
