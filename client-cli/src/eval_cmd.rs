//! `tinycode eval`: how well a model triages labelled tickets (the daemon
//! measures in a scratch desk; this client sends the request, shows
//! progress, and prints the report). `eval list|show` read past runs.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use tinycode_shared::proto::evals_client::EvalsClient;
use tinycode_shared::proto::{
    CancelEvalRequest, EvalReport, EvalUpdate, FieldReport, GetEvalRequest, ListEvalsRequest,
    RunEvalRequest, eval_update::Update,
};
use tinycode_shared::render;

use crate::{Ctx, output};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EvalArgs {
    /// A labelled CSV or JSONL file (`text` or `subject`+`body`, and any of
    /// `category`, `priority`, `queue`, `escalateLevel`), or a directory of
    /// ticket files with labels.csv / labels.jsonl keyed by `id`.
    labels: Option<PathBuf>,
    /// The model to measure (default: the daemon's).
    #[arg(long, default_value = "")]
    model: String,
    /// Runs per ticket; the report adds pass^k (right in every run).
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Tickets triaged at once.
    #[arg(long, default_value_t = 4)]
    concurrency: u32,
    /// Measure on the desk's own tickets whose decisions a person made or
    /// corrected.
    #[arg(long, conflicts_with_all = ["labels", "train"])]
    from_history: bool,
    /// Train a fresh learner (the offline model's classifier) on this set
    /// and measure it on --test; no agent runs.
    #[arg(long, requires = "test")]
    train: Option<PathBuf>,
    #[arg(long, requires = "train", conflicts_with = "labels")]
    test: Option<PathBuf>,
    /// With --train: the label the learner predicts (default: `intent` when
    /// the set has it, else `category`).
    #[arg(long, default_value = "")]
    target: String,
    /// The model's price per million input tokens (any currency); with
    /// --price-out, the report gives the cost per ticket.
    #[arg(long, default_value_t = 0.0)]
    price_in: f64,
    /// The model's price per million output tokens.
    #[arg(long, default_value_t = 0.0)]
    price_out: f64,
    /// The accuracy a confidence threshold should reach: the report names
    /// the lowest threshold that does and its coverage (default 0.98).
    #[arg(long, value_name = "ACCURACY")]
    target_accuracy: Option<f64>,
    /// Measure the offline model with this desk's learned model (copied
    /// into the scratch desk, frozen) instead of the rules alone.
    #[arg(long, conflicts_with = "train")]
    with_history: bool,
    #[command(subcommand)]
    action: Option<EvalAction>,
}

#[derive(Subcommand, Debug)]
enum EvalAction {
    /// Past evaluations, newest first.
    List {
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// One evaluation's report.
    Show { id: String },
}

/// Relative paths are the caller's, not the daemon's.
fn absolute(p: &Path) -> String {
    std::path::absolute(p)
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// The daemon's evaluations service.
type Client = EvalsClient<tinycode_shared::client::DaemonChannel>;

/// `tinycode eval`: a past run's list or report, or a new run, followed
/// to its report (exit 130 when Ctrl+C cut it short).
pub async fn run(ctx: &Ctx, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let mut client = EvalsClient::new(ctx.connect().await?);
    match &args.action {
        Some(EvalAction::List { limit }) => return list(ctx, &mut client, *limit).await,
        Some(EvalAction::Show { id }) => return show(ctx, &mut client, id.clone()).await,
        None => {}
    }
    let request = run_request(args)?;
    let mut updates = client.run(request).await?.into_inner();
    let mut progress = Progress::new(ctx.json);
    let report = follow(&mut client, &mut updates, &mut progress).await?;
    progress.finish();
    print_report(ctx, &report);
    if !ctx.json {
        let dir = ctx.layout.state_dir.join("evals").join(&report.eval_id);
        println!("report: {}", dir.join("report.md").display());
    }
    Ok(if report.partial {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// `eval list`: past evaluations, newest first.
async fn list(ctx: &Ctx, client: &mut Client, limit: u32) -> anyhow::Result<ExitCode> {
    let evals = client
        .list(ListEvalsRequest { limit })
        .await?
        .into_inner()
        .evals;
    if ctx.json {
        for r in &evals {
            output::json_line(&render::message_json("tinycode.v1.EvalReport", r));
        }
    } else {
        let rows: Vec<Vec<String>> = evals.iter().map(list_row).collect();
        print!(
            "{}",
            output::table(
                &["EVAL", "WHEN", "MODEL", "ROWS", "ACCURACY", "SOURCE"],
                &rows
            )
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `eval show`: one evaluation's report.
async fn show(ctx: &Ctx, client: &mut Client, id: String) -> anyhow::Result<ExitCode> {
    let report = client
        .get(GetEvalRequest { eval_id: id })
        .await?
        .into_inner();
    print_report(ctx, &report);
    Ok(ExitCode::SUCCESS)
}

/// The run the arguments ask for (a labelled set, the history, or a
/// learner's train/test pair), with the caller's paths made absolute.
fn run_request(args: EvalArgs) -> anyhow::Result<RunEvalRequest> {
    let labels = args.test.as_ref().or(args.labels.as_ref());
    if labels.is_none() && !args.from_history {
        anyhow::bail!(
            "name a labelled set (`tinycode eval LABELS`), or use --from-history or --train TRAIN --test TEST"
        );
    }
    Ok(RunEvalRequest {
        labels: labels.map(|p| absolute(p)).unwrap_or_default(),
        from_history: args.from_history,
        model: args.model,
        runs: args.runs,
        concurrency: args.concurrency,
        train: args.train.as_deref().map(absolute).unwrap_or_default(),
        target: args.target,
        price_input_per_mtok: args.price_in,
        price_output_per_mtok: args.price_out,
        target_accuracy: args.target_accuracy.unwrap_or(0.0),
        with_history: args.with_history,
    })
}

/// Show the run's progress until its report; the first Ctrl+C asks the
/// daemon to stop it (the report is then partial).
async fn follow(
    client: &mut Client,
    updates: &mut tonic::Streaming<EvalUpdate>,
    progress: &mut Progress,
) -> anyhow::Result<EvalReport> {
    let mut eval_id = String::new();
    let mut asked_to_stop = false;
    loop {
        let next = tokio::select! {
            next = updates.message() => next?,
            _ = tokio::signal::ctrl_c(), if !asked_to_stop => {
                asked_to_stop = true;
                if !eval_id.is_empty() {
                    let _ = client.cancel(CancelEvalRequest { eval_id: eval_id.clone() }).await;
                }
                continue;
            }
        };
        match next.and_then(|u| u.update) {
            Some(Update::Progress(p)) => {
                if eval_id.is_empty() && asked_to_stop {
                    // Ctrl+C came before the id did.
                    let _ = client
                        .cancel(CancelEvalRequest {
                            eval_id: p.eval_id.clone(),
                        })
                        .await;
                }
                eval_id = p.eval_id;
                progress.show(p.done, p.total);
            }
            Some(Update::Report(r)) => return Ok(r),
            None => anyhow::bail!("tinycoded ended the evaluation without a report"),
        }
    }
}

/// Progress on standard error: a bar on a terminal; elsewhere (a CI log,
/// a pipe) a line at every tenth of the way; nothing with `--json`.
enum Progress {
    Quiet,
    Bar(indicatif::ProgressBar),
    Lines { shown: u32 },
}

impl Progress {
    fn new(json: bool) -> Self {
        if json {
            return Self::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Self::Lines { shown: 0 };
        }
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tickets · {elapsed} · Ctrl+C stops and keeps the partial report")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Self::Bar(bar)
    }

    fn show(&mut self, done: u32, total: u32) {
        match self {
            Self::Quiet => {}
            Self::Bar(bar) => {
                bar.set_length(u64::from(total));
                bar.set_position(u64::from(done));
            }
            Self::Lines { shown } => {
                let step = (total / 10).max(1);
                if done > *shown && (done - *shown >= step || done == total) {
                    *shown = done;
                    eprintln!("eval: {done}/{total} tickets");
                }
            }
        }
    }

    fn finish(self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn list_row(r: &EvalReport) -> Vec<String> {
    let accuracy = r
        .fields
        .iter()
        .map(|f| format!("{} {}", f.field, pct(f.accuracy)))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        r.eval_id.clone(),
        render::rfc3339(r.finished_at, 0),
        r.model.clone(),
        format!(
            "{}{}",
            r.measured,
            if r.partial { " (partial)" } else { "" }
        ),
        accuracy,
        r.source.clone(),
    ]
}

fn print_report(ctx: &Ctx, r: &EvalReport) {
    if ctx.json {
        output::json_pretty(&render::message_json("tinycode.v1.EvalReport", r));
        return;
    }
    println!(
        "eval {} · model {} · {} of {} rows × {} run(s){}",
        r.eval_id,
        r.model,
        r.measured,
        r.rows,
        r.runs,
        if r.partial { " · partial" } else { "" }
    );
    let k = format!("PASS^{}", r.runs);
    let rows: Vec<Vec<String>> = r
        .fields
        .iter()
        .map(|f| {
            vec![
                f.field.clone(),
                f.scored.to_string(),
                pct(f.accuracy),
                format!("{:.3}", f.macro_f1),
                pct(f.pass_k),
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(
            &["FIELD", "SCORED", "ACCURACY", "MACRO-F1", k.as_str()],
            &rows
        )
    );
    let per = f64::from(r.measured.max(1) * r.runs.max(1));
    let tokens = if r.input_tokens + r.output_tokens > 0 {
        format!(
            " · tokens per ticket {:.0} in / {:.0} out",
            r.input_tokens as f64 / per,
            r.output_tokens as f64 / per
        )
    } else {
        String::new()
    };
    let tokens = if r.cost_per_ticket > 0.0 {
        format!("{tokens} · cost per ticket {:.6}", r.cost_per_ticket)
    } else {
        tokens
    };
    println!(
        "latency p50 {:.0} ms · p95 {:.0} ms{tokens} · failed turns {} · every field right {}",
        r.latency_p50_ms,
        r.latency_p95_ms,
        r.failed,
        pct(r.all_fields_pass_k)
    );
    for f in &r.fields {
        print_calibration(f);
    }
    for f in &r.fields {
        print_field(f);
    }
}

/// One line per field: how well its confidence is calibrated and the
/// threshold that reaches the target accuracy.
fn print_calibration(f: &FieldReport) {
    if f.with_confidence == 0 {
        println!("{}: no confidence reported", f.field);
        return;
    }
    let target = f.target_accuracy * 100.0;
    let threshold = if f.reached {
        format!(
            "for {target:.2} % accuracy: confidence ≥ {:.3} covers {:.1} %",
            f.threshold,
            f.threshold_coverage * 100.0
        )
    } else {
        format!("no threshold reaches {target:.2} % accuracy")
    };
    println!(
        "{}: ECE {:.4} over {} decisions · {threshold}",
        f.field, f.ece, f.with_confidence
    );
}

fn print_field(f: &FieldReport) {
    println!("\n{} — rows expected, columns predicted", f.field);
    let mut headers: Vec<&str> = vec![""];
    headers.extend(f.labels.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = f
        .confusion
        .iter()
        .map(|row| {
            std::iter::once(row.expected.clone())
                .chain(row.counts.iter().map(u32::to_string))
                .collect()
        })
        .collect();
    print!("{}", output::table(&headers, &rows));
    let classes: Vec<Vec<String>> = f
        .classes
        .iter()
        .map(|c| {
            vec![
                c.label.clone(),
                c.support.to_string(),
                format!("{:.3}", c.precision),
                format!("{:.3}", c.recall),
                format!("{:.3}", c.f1),
            ]
        })
        .collect();
    print!(
        "{}",
        output::table(&["CLASS", "SUPPORT", "PRECISION", "RECALL", "F1"], &classes)
    );
}
