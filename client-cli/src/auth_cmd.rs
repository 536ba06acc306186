//! `tinycode auth set|list|remove PROVIDER` and `tinycode models`: provider
//! keys stored in the daemon (encrypted at rest, used by the next request
//! with no restart) and the models each provider serves. A key is read
//! from a hidden prompt or standard input, never from the command line.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use tinycode_shared::proto::providers_client::ProvidersClient;
use tinycode_shared::proto::{
    ListCredentialsRequest, ListModelsRequest, RemoveCredentialRequest, SetCredentialRequest,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Subcommand, Debug)]
pub enum AuthAction {
    /// Store a provider's key (asked at a hidden prompt, or read from
    /// standard input: `printenv KEY | tinycode auth set openai`).
    Set { provider: String },
    /// Each provider: where its key comes from (helper, stored,
    /// environment) and how its last request went — never the key.
    List,
    /// Forget a provider's stored key.
    Remove { provider: String },
}

pub async fn auth(ctx: &Ctx, action: AuthAction) -> anyhow::Result<ExitCode> {
    match action {
        AuthAction::Set { provider } => {
            let key = read_key(&provider)?;
            let mut client = ProvidersClient::new(ctx.connect().await?);
            let receipt = client
                .set_credential(SetCredentialRequest {
                    provider: provider.clone(),
                    key,
                })
                .await?
                .into_inner();
            if ctx.json {
                output::json_line(&render::message_json(
                    "tinycode.v1.CredentialReceipt",
                    &receipt,
                ));
            } else {
                println!("{provider}: key stored; the next request of every session uses it");
            }
        }
        AuthAction::Remove { provider } => {
            let mut client = ProvidersClient::new(ctx.connect().await?);
            let request = RemoveCredentialRequest {
                provider: provider.clone(),
            };
            let receipt = client.remove_credential(request).await?.into_inner();
            if ctx.json {
                output::json_line(&render::message_json(
                    "tinycode.v1.CredentialReceipt",
                    &receipt,
                ));
            } else if receipt.unchanged {
                println!("{provider}: no stored key; nothing changed");
            } else {
                println!("{provider}: stored key removed");
            }
        }
        AuthAction::List => list(ctx).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(ctx: &Ctx) -> anyhow::Result<()> {
    let mut client = ProvidersClient::new(ctx.connect().await?);
    let list = client
        .list_credentials(ListCredentialsRequest {})
        .await?
        .into_inner();
    if ctx.json {
        output::json_pretty(&render::message_json(
            "tinycode.v1.ListCredentialsResponse",
            &list,
        ));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .providers
        .iter()
        .map(|p| {
            let source = match (p.source.as_str(), p.required) {
                ("environment", _) => format!("environment ${}", p.env),
                ("none", false) => "none (not needed)".into(),
                ("none", true) => "none".into(),
                (s, _) => s.to_string(),
            };
            let last = match p.last_result.as_str() {
                "" => "-".to_string(),
                "ok" => format!("ok {}", p.last_at),
                _ => format!("FAILED {} {}", p.last_at, p.last_error),
            };
            let problem = match p.problem.as_str() {
                "" => String::new(),
                problem => format!("CANNOT BE READ: {problem}"),
            };
            vec![p.provider.clone(), source, last, problem]
        })
        .collect();
    print!(
        "{}",
        output::table(&["PROVIDER", "KEY FROM", "LAST REQUEST", ""], &rows)
    );
    match list.master_key.as_str() {
        "" => println!("master key: none yet (made by the first `tinycode auth set`)"),
        master => println!("stored keys are encrypted with the master key in the {master}"),
    }
    Ok(())
}

/// The key: at a hidden prompt on a terminal, else the first line of
/// standard input.
fn read_key(provider: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let key = if stdin.is_terminal() {
        eprint!("{provider} API key (not shown): ");
        std::io::stderr().flush()?;
        let echo = Echo::off(&stdin);
        let mut line = String::new();
        let read = stdin.lock().read_line(&mut line);
        drop(echo);
        eprintln!();
        read.context("cannot read the key")?;
        line
    } else {
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .context("cannot read the key from standard input")?;
        line
    };
    let key = key.trim().to_string();
    anyhow::ensure!(
        !key.is_empty(),
        "no key was given: type it at the prompt, or pipe it in (`printenv OPENAI_API_KEY | tinycode auth set {provider}`)"
    );
    Ok(key)
}

/// The terminal's echo turned off until dropped.
struct Echo<'a> {
    stdin: &'a std::io::Stdin,
    saved: Option<rustix::termios::Termios>,
}

impl<'a> Echo<'a> {
    fn off(stdin: &'a std::io::Stdin) -> Self {
        use rustix::termios::{LocalModes, OptionalActions, tcgetattr, tcsetattr};
        let saved = tcgetattr(stdin).ok();
        if let Some(mut quiet) = saved.clone() {
            quiet.local_modes.remove(LocalModes::ECHO);
            let _ = tcsetattr(stdin, OptionalActions::Now, &quiet);
        }
        Self { stdin, saved }
    }
}

impl Drop for Echo<'_> {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = rustix::termios::tcsetattr(
                self.stdin,
                rustix::termios::OptionalActions::Now,
                saved,
            );
        }
    }
}

/// `tinycode models [PROVIDER]`: the offline model first, then each
/// provider's.
pub async fn models(ctx: &Ctx, provider: Option<String>) -> anyhow::Result<ExitCode> {
    let mut client = ProvidersClient::new(ctx.connect().await?);
    let lists = client
        .list_models(ListModelsRequest {
            provider: provider.unwrap_or_default(),
        })
        .await?
        .into_inner()
        .providers;
    if ctx.json {
        for p in &lists {
            output::json_line(&render::message_json("tinycode.v1.ProviderModels", p));
        }
        return Ok(ExitCode::SUCCESS);
    }
    for p in &lists {
        for m in &p.models {
            println!("{m}");
        }
        if !p.error.is_empty() {
            eprintln!(
                "{}: the models could not be listed: {}",
                p.provider, p.error
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
