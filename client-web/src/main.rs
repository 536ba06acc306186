//! `tinycode-web` (also `tinycode web`): the desk in a browser. A small HTTP
//! server that turns pages, form posts and server-sent events into the
//! daemon's gRPC calls over its Unix socket — a client as thin as the CLI
//! and the TUI: everything it shows comes from the daemon, every change is
//! one RPC.
//!
//! Safe by default on a shared machine: loopback only (another address
//! needs TLS); a one-time link exchanged for an HttpOnly, SameSite=Strict
//! cookie; the `Host` header checked (DNS rebinding); every change
//! same-origin and carrying a CSRF token; a Content-Security-Policy with no
//! inline script; everything a customer or a model wrote escaped; bodies and
//! rates capped. See `auth.rs`.
//!
//! Why axum: the tokio/hyper/tower stack the daemon's gRPC already uses
//! (no second runtime or HTTP stack), SSE built in, small with its
//! default features off; maud for HTML, whose templates escape by default
//! and are checked when the binary compiles.
#![forbid(unsafe_code)]

mod app;
mod auth;
mod grpc;
mod hooks;
mod live;
mod manage;
mod pages;
mod person;
mod routes;
mod serve;
mod timeline;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Parser;
use tinycode_shared::client::{self, ClientName};
use tinycode_shared::paths::Layout;

#[derive(Parser, Debug)]
#[command(
    name = "tinycode-web",
    version,
    about = "The desk in a browser: a page where a support team works (live)"
)]
struct Args {
    /// The support workspace; default: nearest ancestor holding `.tinycode/`.
    #[arg(long, short = 'w', value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Address to listen on. Loopback by default; any other address needs
    /// --tls-cert and --tls-key.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Do not open a browser; only print the link.
    #[arg(long)]
    no_open: bool,
    /// PEM certificate chain (with --tls-key): serve HTTPS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The URL people open when it is not the listening address (behind
    /// a name, a proxy or `--listen 0.0.0.0:…`), e.g.
    /// `https://desk.example.com:8443`.
    #[arg(long, value_name = "URL")]
    public_url: Option<String>,
    /// Print a fresh one-time link to the page already running for this
    /// workspace, and exit.
    #[arg(long)]
    url: bool,
    /// Fail instead of starting tinycoded when it is not running.
    #[arg(long)]
    no_autostart: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tinycode-web: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "tinycode-web: {}",
                tinycode_shared::hint::localize(&format!("{e:#}"))
            );
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let layout = Layout::discover(args.workspace.as_deref())?;
    if args.url {
        println!("{}", manage::fresh_link(&layout).await?);
        return Ok(());
    }
    let log = layout.log_dir().join("tinycode-web.log");
    tinycode_shared::logging::init(&log)
        .with_context(|| format!("cannot open log file {}", log.display()))?;
    let addr: SocketAddr = args.listen.parse().with_context(|| {
        format!(
            "--listen {:?} is not an address like 127.0.0.1:8080",
            args.listen
        )
    })?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(serve::tls_config(cert, key)?),
        _ if !addr.ip().is_loopback() => bail!(
            "listening on {addr} makes the desk reachable from other machines: give --tls-cert and --tls-key (HTTPS), or listen on 127.0.0.1"
        ),
        _ => None,
    };
    let name = ClientName::new(&format!("tinycode-web/{}", env!("CARGO_PKG_VERSION")))?;
    let channel = client::connect_or_start(&layout, &name, !args.no_autostart).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr()?;
    if let Some(url) = &args.public_url {
        let scheme = if tls.is_some() { "https://" } else { "http://" };
        let rest = url.strip_prefix(scheme).map(|r| r.trim_end_matches('/'));
        let origin_only = rest.is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_graphic() && !b"/?#\"<>'\\".contains(&b))
        });
        anyhow::ensure!(
            origin_only,
            "--public-url {url:?} must be the page's origin, like {scheme}desk.example.com:8443"
        );
    }
    let auth = Arc::new(auth::Auth::new(
        local,
        tls.is_some(),
        args.public_url.as_deref(),
    ));
    let link = auth.link();
    // The first line on stdout is the link to open.
    println!("{link}");
    let _links = manage::serve_links(&layout, Arc::clone(&auth))?;
    if !args.no_open {
        open_browser(&layout, &link);
    }
    tracing::info!(address = %local, tls = tls.is_some(), "tinycode-web listening");
    let app = routes::router(app::App {
        daemon: grpc::Daemon::new(channel),
        auth,
    });
    serve::serve(listener, app, tls).await
}

/// Open `url` in the person's browser (nothing happens where none is).
/// The browser is handed a private file that forwards to the link, never
/// the link itself: a command line is readable by every user of the
/// machine, and the link's token is a key (Jupyter does the same).
fn open_browser(layout: &Layout, url: &str) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = layout.state_dir.join("web-open.html");
    let _ = std::fs::remove_file(&path);
    let page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>tinycode</title></head><body><a href=\"{url}\">Open the desk</a></body></html>\n"
    );
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(page.as_bytes()));
    if let Err(e) = written {
        tracing::info!(error = %e, "no browser opened; open the link printed above");
        return;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        tracing::info!(error = %e, "no browser opened; open the link printed above");
    }
    // The browser reads it within moments; then it goes.
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        let _ = std::fs::remove_file(&path);
    });
}
