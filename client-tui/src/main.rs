//! `tinycode-tui` (also `tinycode tui`): attach a terminal to a session of
//! `tinycoded`. Logs go to `<state>/logs/tinycode-tui.log`; nothing is
//! printed to stdout but the screen itself.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ratatui::crossterm::event::{self, DisableBracketedPaste, EnableBracketedPaste, Event};
use ratatui::crossterm::execute;
use tinycode_shared::client::{self, ClientName};
use tinycode_shared::paths::Layout;
use tinycode_tui::app::{App, Start};
use tinycode_tui::net::Net;
use tinycode_tui::ui;
use tokio::sync::mpsc;

#[derive(Parser, Debug)]
#[command(
    name = "tinycode-tui",
    version,
    about = "Terminal UI of tinycoded: attach to a live session (quitting never stops a turn)"
)]
struct Args {
    /// The support workspace; default: nearest ancestor holding `.tinycode/`.
    #[arg(long, short = 'w', value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Attach this session (default: a new one).
    #[arg(long, conflicts_with = "continue_")]
    session: Option<String>,
    /// Attach the most recent session.
    #[arg(long = "continue", short = 'c')]
    continue_: bool,
    /// Show approval requests of every session, not only the attached one.
    #[arg(long)]
    inbox: bool,
    /// provider/model for sessions this TUI creates (default: the daemon's).
    #[arg(long, default_value = "")]
    model: String,
    /// Fail instead of starting tinycoded when it is not running.
    #[arg(long)]
    no_autostart: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // A screen needs a terminal both ways; without one (a pipe, a script,
    // CI) say so in one sentence instead of failing inside the terminal
    // library.
    if let Some(message) = no_terminal() {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinycode-tui: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "tinycode-tui: {}",
                tinycode_shared::hint::localize(&format!("{e:#}"))
            );
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let layout = Layout::discover(args.workspace.as_deref())?;
    tinycode_shared::logging::init(&layout.log_dir().join("tinycode-tui.log"))?;
    let name = ClientName::new(&format!("tinycode-tui/{}", env!("CARGO_PKG_VERSION")))?;
    // Reach (or start) the daemon before the screen changes, so a failure
    // reads as a plain error.
    client::connect_or_start(&layout, &name, !args.no_autostart).await?;
    let (net_tx, net_rx) = mpsc::unbounded_channel();
    let net = Net::start(layout.socket.clone(), name, net_tx);
    let app = App::new(Start {
        session: args.session,
        continue_latest: args.continue_,
        inbox: args.inbox,
        model: args.model,
    });
    let mut terminal = ratatui::init();
    let _ = execute!(std::io::stdout(), EnableBracketedPaste);
    let (keys_tx, keys_rx) = mpsc::unbounded_channel();
    // crossterm's reader blocks: it gets a thread of its own.
    std::thread::spawn(move || {
        while let Ok(e) = event::read() {
            if keys_tx.send(e).is_err() {
                break;
            }
        }
    });
    let result = event_loop(&mut terminal, app, net, keys_rx, net_rx).await;
    let _ = execute!(std::io::stdout(), DisableBracketedPaste);
    ratatui::restore();
    tracing::info!("detached");
    result
}

/// Most events handled before the next frame is drawn.
const BATCH: usize = 512;

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    mut app: App,
    mut net: Net,
    mut keys: mpsc::UnboundedReceiver<Event>,
    mut updates: mpsc::UnboundedReceiver<tinycode_tui::rpc::NetEvent>,
) -> anyhow::Result<()> {
    loop {
        for rpc in app.take_rpcs() {
            tracing::debug!(?rpc, "request");
            net.execute(rpc);
        }
        if app.quit {
            return Ok(());
        }
        terminal.draw(|f| ui::draw(f, &mut app))?;
        let tick = if app.turn_running() {
            Duration::from_millis(100)
        } else {
            Duration::from_millis(250)
        };
        tokio::select! {
            Some(e) = keys.recv() => terminal_event(&mut app, e),
            Some(n) = updates.recv() => app.on_net(n),
            () = tokio::time::sleep(tick) => app.on_tick(),
        }
        // Catch up on what else arrived before drawing again.
        for _ in 0..BATCH {
            match updates.try_recv() {
                Ok(n) => app.on_net(n),
                Err(_) => break,
            }
        }
        while let Ok(e) = keys.try_recv() {
            terminal_event(&mut app, e);
        }
    }
}

fn terminal_event(app: &mut App, e: Event) {
    match e {
        Event::Key(k) if k.kind == event::KeyEventKind::Press => app.on_key(k),
        Event::Paste(text) => app.on_paste(&text),
        _ => {}
    }
}

/// Why the terminal UI cannot run here (`None`: it can).
fn no_terminal() -> Option<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return None;
    }
    Some(tinycode_shared::hint::localize(
        "tinycode-tui: the terminal UI needs a terminal (standard input and output are not one); for scripts use the commands, e.g. `tinycode run TEXT`, `tinycode ticket list` or `tinycode --help`",
    ))
}
