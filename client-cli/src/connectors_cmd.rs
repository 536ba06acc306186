//! `tinycode import csv FILE`, `tinycode outbox list|retry` and
//! `tinycode connectors status`: tickets in from a file, the deliveries
//! owed to customers, each source's figures (docs/CONNECTORS.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use tinycode_shared::proto::connectors_client::ConnectorsClient;
use tinycode_shared::proto::{
    ConnectorsStatusRequest, ImportProgress, ImportRequest, ListOutboxRequest, OutboxItem,
    RetryDeliveryRequest,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// What the file is.
    kind: ImportKind,
    /// The file, or the maildir folder (read by the daemon).
    file: PathBuf,
    /// Which column fills which field, e.g. `--map subject=Title,body=Description`
    /// (fields: id, subject, body, customer, channel, time; a field not
    /// mapped is read from the column of its own name).
    #[arg(long, value_delimiter = ',', value_name = "FIELD=COLUMN")]
    map: Vec<String>,
    /// mbox, maildir: the configured mail source (type "mail") the tickets
    /// belong to — their replies then go out by its SMTP relay.
    #[arg(long, value_name = "NAME")]
    source: Option<String>,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum ImportKind {
    /// RFC 4180 CSV with a header row.
    Csv,
    /// An mbox file: one ticket per mail thread.
    Mbox,
    /// A maildir folder (cur/, new/): one ticket per mail thread.
    Maildir,
    /// Zendesk's incremental ticket export (JSON, tickets with comments).
    Zendesk,
}

#[derive(Subcommand, Debug)]
pub enum OutboxAction {
    /// Deliveries owed to customers, newest first.
    List {
        /// pending, sending, sent or failed.
        #[arg(long)]
        state: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Try a failed (parked) delivery again.
    Retry {
        /// The delivery's number (`outbox list`, first column).
        sequence: u64,
    },
}

pub async fn import(ctx: &Ctx, args: ImportArgs) -> anyhow::Result<ExitCode> {
    let kind = match args.kind {
        ImportKind::Csv => "csv",
        ImportKind::Mbox => "mbox",
        ImportKind::Maildir => "maildir",
        ImportKind::Zendesk => "zendesk",
    };
    let path = std::path::absolute(&args.file)
        .with_context(|| format!("cannot resolve {}", args.file.display()))?;
    let mut map = std::collections::HashMap::new();
    for pair in &args.map {
        let (field, column) = pair.split_once('=').with_context(|| {
            format!("`--map {pair}`: write FIELD=COLUMN, e.g. body=Description")
        })?;
        map.insert(field.trim().to_string(), column.trim().to_string());
    }
    let mut client = ConnectorsClient::new(ctx.connect().await?);
    let mut stream = client
        .import(ImportRequest {
            kind: kind.into(),
            source: args.source.clone().unwrap_or_default(),
            path: path.display().to_string(),
            map,
        })
        .await?
        .into_inner();
    let bar = if ctx.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(0)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("import [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut last = ImportProgress::default();
    while let Some(p) = stream.message().await? {
        bar.set_length(p.rows_total);
        bar.set_position(p.rows_read);
        bar.set_message(format!(
            "{} created, {} appended, {} skipped",
            p.created, p.appended, p.skipped
        ));
        last = p;
    }
    bar.finish_and_clear();
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.ImportProgress", &last));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: {} read — {} tickets created, {} messages appended, {} skipped",
        args.file.display(),
        last.rows_read,
        last.created,
        last.appended,
        last.skipped
    );
    for reason in &last.skip_reasons {
        println!("  skipped {reason}");
    }
    if last.skipped as usize > last.skip_reasons.len() {
        println!(
            "  … and {} more",
            last.skipped as usize - last.skip_reasons.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Subcommand, Debug)]
pub enum ConnectorsAction {
    /// Each source: deliveries in and out, the last error, waiting and
    /// failed replies, whether its secret is set.
    Status,
}

pub async fn connectors(ctx: &Ctx, action: ConnectorsAction) -> anyhow::Result<ExitCode> {
    let ConnectorsAction::Status = action;
    let mut client = ConnectorsClient::new(ctx.connect().await?);
    let sources = client
        .status(ConnectorsStatusRequest {})
        .await?
        .into_inner()
        .sources;
    if ctx.json {
        for s in &sources {
            output::json_line(&render::message_json("tinycode.v1.SourceStatus", s));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if sources.is_empty() {
        println!("no connector is configured (docs/CONNECTORS.md)");
        return Ok(ExitCode::SUCCESS);
    }
    let when = |n: u64, at: &str| match n {
        0 => "0".to_string(),
        n => format!("{n} (last {at})"),
    };
    let rows: Vec<Vec<String>> = sources
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                match (s.kind.as_str(), s.secret_set) {
                    ("", _) => "not configured".into(),
                    (_, true) => format!("{}, secret set", s.kind),
                    (_, false) => format!("{}, ${} NOT SET", s.kind, s.secret_env),
                },
                when(s.received, &s.last_received_at),
                when(s.sent, &s.last_sent_at),
                s.pending.to_string(),
                s.failed.to_string(),
                match s.last_error.as_str() {
                    "" => String::new(),
                    e => format!("{} ({})", e, s.last_error_at),
                },
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(
            &[
                "SOURCE",
                "SETUP",
                "IN",
                "OUT",
                "WAITING",
                "FAILED",
                "LAST ERROR"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn outbox(ctx: &Ctx, action: OutboxAction) -> anyhow::Result<ExitCode> {
    let mut client = ConnectorsClient::new(ctx.connect().await?);
    match action {
        OutboxAction::List { state, limit } => {
            let items = client
                .list_outbox(ListOutboxRequest {
                    state: state.unwrap_or_default(),
                    limit,
                })
                .await?
                .into_inner()
                .items;
            if ctx.json {
                for item in &items {
                    output::json_line(&render::message_json("tinycode.v1.OutboxItem", item));
                }
            } else if items.is_empty() {
                println!("nothing owed to customers");
            } else {
                print!(
                    "{}",
                    output::table(
                        &[
                            "#",
                            "TICKET",
                            "SOURCE",
                            "KIND",
                            "STATE",
                            "TRIES",
                            "WHEN / WHY"
                        ],
                        &rows(&items)
                    )
                );
            }
        }
        OutboxAction::Retry { sequence } => {
            let item = client
                .retry_delivery(RetryDeliveryRequest { sequence })
                .await?
                .into_inner();
            if ctx.json {
                output::json_pretty(&render::message_json("tinycode.v1.OutboxItem", &item));
            } else {
                println!(
                    "delivery {} of {} is pending again",
                    item.sequence, item.ticket_id
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn rows(items: &[OutboxItem]) -> Vec<Vec<String>> {
    items
        .iter()
        .map(|i| {
            let when = match i.state.as_str() {
                "sent" => format!("sent {}", i.sent_at),
                "failed" => i.last_error.clone(),
                _ if !i.last_error.is_empty() => format!("next {} ({})", i.next_at, i.last_error),
                _ => "due now".into(),
            };
            vec![
                i.sequence.to_string(),
                i.ticket_id.clone(),
                i.source.clone(),
                i.kind.clone(),
                i.state.clone(),
                i.attempts.to_string(),
                when,
            ]
        })
        .collect()
}
