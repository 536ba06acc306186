//! Evaluations (`tinycode eval`, the `Evals` service): how well a model
//! triages labelled tickets, measured in a scratch desk (`scratch.rs`) with
//! the daemon's own triage machinery, or — with a training set — how well
//! the offline model's learner classifies (no agent). The arithmetic is in
//! `metrics.rs`, the sets in `labels.rs`, the files in `report.rs`. Each
//! run is recorded (`EvalStarted`, `EvalFinished` in stream `eval-<id>`),
//! and the evals read model (`model.rs`) lists them.

pub mod calibration;
pub mod labels;
pub mod metrics;
mod model;
/// Finished evaluations, newest first, from the evals read model's tree.
pub use model::newest as newest_reports;
pub mod report;
mod scratch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{EvalFinished, EvalProgress, EvalReport, EvalStarted};
use tokio::sync::{mpsc, watch};

use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::store::{EventStore, ExpectedVersion, StoreError};
use crate::sync::lock;
use labels::{FIELDS, Labelled};
use metrics::{FieldOutcomes, percentile};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("the labelled set cannot be used: {0}")]
    Labels(String),
    #[error("`{field}` {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error("the evaluation's scratch desk failed: {0}")]
    Scratch(String),
    #[error("evaluation {0} does not exist; `tinycode eval list` shows them")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// What to measure, checked at the boundary.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    pub labels: Option<PathBuf>,
    pub from_history: bool,
    /// Empty: the daemon's model.
    pub model: String,
    pub runs: u32,
    pub concurrency: usize,
    /// A training set: measure the learner instead of the agent.
    pub train: Option<PathBuf>,
    pub target: String,
    /// Prices per million input / output tokens (0: not given).
    pub price_input: f64,
    pub price_output: f64,
    /// The accuracy the report's confidence threshold should reach.
    pub target_accuracy: f64,
    /// The scratch desk uses this desk's learned model, frozen.
    pub with_history: bool,
}

pub struct Evals {
    store: EventStore,
    /// The history read model (`--from-history`).
    history: ProjectorHandle,
    workspace: PathBuf,
    state_dir: PathBuf,
    config: crate::config::Config,
    default_model: String,
    projector: ProjectorHandle,
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
}

/// Where an evaluation's Markdown report and charts are written.
pub fn report_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("evals").join(id)
}

impl Evals {
    pub fn open(
        store: EventStore,
        history: ProjectorHandle,
        workspace: PathBuf,
        state_dir: PathBuf,
        config: crate::config::Config,
        default_model: String,
    ) -> Result<Arc<Self>, EvalError> {
        let projector = Projector::spawn(&store, Arc::new(model::EvalsModel))?;
        Ok(Arc::new(Self {
            store,
            history,
            workspace,
            state_dir,
            config,
            default_model,
            projector,
            running: Mutex::new(HashMap::new()),
        }))
    }

    pub fn projector(&self) -> &ProjectorHandle {
        &self.projector
    }

    /// The history read model the learner and `--from-history` read.
    pub fn history(&self) -> &ProjectorHandle {
        &self.history
    }

    /// Finished evaluations, newest first.
    pub async fn list(&self, limit: usize) -> Result<Vec<EvalReport>, EvalError> {
        self.projector.wait_for(self.store.last_sequence()).await?;
        Ok(model::newest(self.projector.tree(), limit)?)
    }

    pub async fn get(&self, id: &str) -> Result<EvalReport, EvalError> {
        let id = crate::domain::ids::sanitize_id(id).map_err(|e| EvalError::Invalid {
            field: "eval_id",
            problem: e.to_string(),
        })?;
        self.projector.wait_for(self.store.last_sequence()).await?;
        model::get(self.projector.tree(), &id)?.ok_or(EvalError::NotFound(id))
    }

    /// Stop a running evaluation; `false` when none runs by that id.
    pub fn cancel(&self, id: &str) -> bool {
        lock(&self.running)
            .get(id)
            .map(|c| c.send_replace(true))
            .is_some()
    }

    fn path(&self, raw: &Path) -> PathBuf {
        if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.workspace.join(raw)
        }
    }

    /// Run one evaluation, sending progress, and return its report (partial
    /// when cancelled or when the client left).
    pub async fn run(
        self: &Arc<Self>,
        spec: RunSpec,
        progress: mpsc::Sender<EvalProgress>,
    ) -> Result<EvalReport, EvalError> {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let id = format!("ev{millis:x}");
        let runs = spec.runs.max(1);
        let (source, rows, train) = self.labelled_set(&spec).await?;
        let model = match (&train, spec.model.trim()) {
            (Some(_), _) => "learner".to_string(),
            (None, "") => self.default_model.clone(),
            (None, m) => m.to_string(),
        };
        let stream = format!("eval-{id}");
        let started_at = crate::clock::now_unix();
        self.store
            .append(
                &stream,
                ExpectedVersion::NoStream,
                vec![Payload::EvalStarted(EvalStarted {
                    eval_id: id.clone(),
                    model: model.clone(),
                    source: source.clone(),
                    rows: rows.len() as u32,
                    runs,
                })],
            )
            .await?;
        let (cancel_tx, cancel) = watch::channel(false);
        lock(&self.running).insert(id.clone(), cancel_tx);
        let measured = match train {
            Some(train) => Ok(learner_eval(&train, &rows, &spec)),
            None => {
                self.agent_eval(&id, &model, &rows, &spec, cancel, &progress)
                    .await
            }
        };
        lock(&self.running).remove(&id);
        let mut report = measured?;
        report.eval_id = id.clone();
        report.model = model;
        report.source = source;
        report.rows = rows.len() as u32;
        report.started_at = started_at;
        let tickets = f64::from(report.measured.max(1) * runs);
        report.cost_per_ticket = (report.input_tokens as f64 * spec.price_input
            + report.output_tokens as f64 * spec.price_output)
            / 1e6
            / tickets;
        report.finished_at = crate::clock::now_unix();
        self.finish(&stream, &id, report).await
    }

    /// The set to measure on: where it comes from (for the report), its
    /// rows, and the training rows when the learner is measured.
    async fn labelled_set(&self, spec: &RunSpec) -> Result<LabelledSet, EvalError> {
        Ok(match (&spec.labels, spec.from_history, &spec.train) {
            (Some(_), true, _) => {
                return Err(EvalError::Invalid {
                    field: "labels",
                    problem: "and from_history exclude each other".into(),
                });
            }
            (None, true, _) => {
                self.history.wait_for(self.store.last_sequence()).await?;
                (
                    "history".to_string(),
                    labels::from_history(self.history.tree())?,
                    None,
                )
            }
            (Some(path), false, train) => {
                let path = self.path(path);
                let rows = labels::load(&path)?;
                let train = match train {
                    Some(t) => {
                        let t = self.path(t);
                        let rows = labels::load(&t)?;
                        Some((t, rows))
                    }
                    None => None,
                };
                let source = match &train {
                    Some((t, _)) => format!("{} → {}", t.display(), path.display()),
                    None => path.display().to_string(),
                };
                (source, rows, train.map(|(_, rows)| rows))
            }
            (None, false, _) => {
                return Err(EvalError::Invalid {
                    field: "labels",
                    problem: "is empty: name a labelled set, or use from_history".into(),
                });
            }
        })
    }

    /// Record the finished report, write its files, and wait until the
    /// evals model lists it.
    async fn finish(
        &self,
        stream: &str,
        id: &str,
        report: EvalReport,
    ) -> Result<EvalReport, EvalError> {
        let events = self
            .store
            .append(
                stream,
                ExpectedVersion::Exact(1),
                vec![Payload::EvalFinished(EvalFinished {
                    report: Some(report.clone()),
                })],
            )
            .await?;
        let dir = report_dir(&self.state_dir, id);
        if let Err(e) = report::write(&dir, &report) {
            tracing::warn!(eval = %id, error = %e, "could not write the evaluation's report files");
        }
        self.projector
            .wait_for(events.last().map_or(0, |e| e.sequence))
            .await?;
        tracing::info!(eval = %id, partial = report.partial, "evaluation finished");
        Ok(report)
    }

    /// Triage every row `runs` times in a scratch desk, `concurrency` at once.
    async fn agent_eval(
        &self,
        id: &str,
        model: &str,
        rows: &[Labelled],
        spec: &RunSpec,
        cancel: watch::Receiver<bool>,
        progress: &mpsc::Sender<EvalProgress>,
    ) -> Result<EvalReport, EvalError> {
        let (runs, concurrency) = (spec.runs.max(1), spec.concurrency.max(1));
        let root = self.state_dir.join("evals").join(id).join("scratch");
        let kept = self.state_dir.join(crate::learn::tickets::KEPT_MODEL_FILE);
        let history = spec.with_history.then_some(kept.as_path());
        let started = scratch::Scratch::start(
            &self.workspace,
            &self.config,
            &root,
            model,
            (rows, runs),
            history,
        );
        let scratch = Arc::new(started.await?);
        let total = rows.len() * runs as usize;
        let mut jobs: Vec<(u32, usize)> = (1..=runs)
            .flat_map(|run| (0..rows.len()).map(move |i| (run, i)))
            .collect();
        jobs.reverse();
        // The client learns the id at once (it needs it to cancel).
        let _ = progress.try_send(EvalProgress {
            eval_id: id.to_string(),
            done: 0,
            total: total as u32,
        });
        let measured = triage_all(id, &scratch, jobs, concurrency, cancel, progress, total).await;
        if let Ok(scratch) = Arc::try_unwrap(scratch) {
            scratch.stop().await;
        }
        if measured.results.is_empty()
            && let Some(e) = measured.scratch_error
        {
            return Err(e);
        }
        Ok(agent_report(
            rows,
            (runs, target(spec)),
            &measured.results,
            measured.partial || measured.results.len() < total,
        ))
    }
}

/// Where a labelled set comes from (for the report), its rows, and the
/// training rows when the learner is measured.
type LabelledSet = (String, Vec<Labelled>, Option<Vec<Labelled>>);

/// What the triage of the jobs gave.
#[derive(Default)]
struct Measured {
    /// (row, run) → what came out; failures recorded as None.
    results: BTreeMap<(usize, u32), Option<scratch::Triaged>>,
    /// Cancelled, or the client left: not every job ran.
    partial: bool,
    /// The first triage that could not be measured.
    scratch_error: Option<EvalError>,
}

/// Triage the `jobs` (run, row), taken from the end, `concurrency` at a
/// time, sending progress after each; a cancel or the client leaving stops
/// them and keeps what was measured.
async fn triage_all(
    id: &str,
    scratch: &Arc<scratch::Scratch>,
    mut jobs: Vec<(u32, usize)>,
    concurrency: usize,
    mut cancel: watch::Receiver<bool>,
    progress: &mpsc::Sender<EvalProgress>,
    total: usize,
) -> Measured {
    let mut running = tokio::task::JoinSet::new();
    let mut measured = Measured::default();
    loop {
        while running.len() < concurrency.max(1) && !measured.partial {
            let Some((run, i)) = jobs.pop() else { break };
            let scratch = Arc::clone(scratch);
            running.spawn(async move {
                let outcome = scratch.triage(&scratch::ticket_id(run, i + 1)).await;
                ((i, run), outcome)
            });
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => match joined {
                Some(Ok((key, Ok(done)))) => { measured.results.insert(key, Some(done)); }
                Some(Ok((key, Err(e)))) => {
                    tracing::warn!(eval = %id, error = %e, "a ticket's triage could not be measured");
                    measured.scratch_error.get_or_insert(e);
                    measured.results.insert(key, None);
                }
                Some(Err(e)) => tracing::warn!(eval = %id, error = %e, "a measuring task stopped"),
                None => {}
            },
            _ = cancel.wait_for(|c| *c), if !measured.partial => {
                measured.partial = true;
                running.abort_all();
            }
            () = progress.closed(), if !measured.partial => {
                // The client left: keep what was measured.
                measured.partial = true;
                running.abort_all();
            }
        }
        let _ = progress.try_send(EvalProgress {
            eval_id: id.to_string(),
            done: measured.results.len() as u32,
            total: total as u32,
        });
    }
    measured
}

/// The value of `field` as triage left it (`None`: unset).
fn predicted(t: &tinycode_shared::proto::Ticket, field: &str) -> Option<String> {
    let v = match field {
        "category" => t.category.clone(),
        "priority" => t.priority.clone(),
        "queue" => t.queue.clone(),
        "intent" => t.intent.clone(),
        "escalateLevel" => t.escalate_level.to_string(),
        _ => String::new(),
    };
    (!v.is_empty()).then_some(v)
}

/// The accuracy the confidence threshold should reach.
fn target(spec: &RunSpec) -> f64 {
    if spec.target_accuracy > 0.0 {
        spec.target_accuracy
    } else {
        calibration::DEFAULT_TARGET
    }
}

/// A run's confidence in `field`, when the model gave one.
fn confidence_of(t: &tinycode_shared::proto::Ticket, field: &str) -> Option<f32> {
    t.confidence
        .iter()
        .find(|c| c.field == field)
        .map(|c| c.value)
}

fn agent_report(
    rows: &[Labelled],
    (runs, target): (u32, f64),
    results: &BTreeMap<(usize, u32), Option<scratch::Triaged>>,
    partial: bool,
) -> EvalReport {
    let mut fields: BTreeMap<&str, FieldOutcomes> = BTreeMap::new();
    let (mut all_right, mut measured_rows) = (0u32, 0u32);
    for (i, row) in rows.iter().enumerate() {
        let outs: Vec<Option<&scratch::Triaged>> = (1..=runs)
            .filter_map(|run| results.get(&(i, run)).map(Option::as_ref))
            .collect();
        if outs.is_empty() {
            continue;
        }
        measured_rows += 1;
        let mut row_right = true;
        for field in FIELDS {
            let Some(expected) = row.labels.get(field) else {
                continue;
            };
            let got: Vec<Option<String>> = outs
                .iter()
                .map(|o| {
                    o.filter(|t| t.completed)
                        .and_then(|t| predicted(&t.ticket, field))
                        .or_else(|| {
                            (field == "escalateLevel" && o.is_some_and(|t| t.completed))
                                .then(|| "0".into())
                        })
                })
                .collect();
            row_right &= got.iter().all(|g| g.as_deref() == Some(expected.as_str()));
            let outcomes = fields.entry(field).or_default();
            for (o, g) in outs.iter().zip(&got) {
                if let Some(c) = o.and_then(|t| confidence_of(&t.ticket, field)) {
                    outcomes
                        .confident
                        .push((c, g.as_deref() == Some(expected.as_str())));
                }
            }
            outcomes.rows.push((expected.clone(), got));
        }
        if row_right {
            all_right += 1;
        }
    }
    let done: Vec<&scratch::Triaged> = results.values().flatten().collect();
    let mut millis: Vec<f64> = done.iter().map(|t| t.millis).collect();
    EvalReport {
        runs,
        partial,
        measured: measured_rows,
        fields: fields.iter().map(|(f, o)| o.report(f, target)).collect(),
        latency_p50_ms: percentile(&mut millis, 50.0),
        latency_p95_ms: percentile(&mut millis, 95.0),
        input_tokens: done.iter().map(|t| t.input_tokens).sum(),
        output_tokens: done.iter().map(|t| t.output_tokens).sum(),
        failed: results
            .values()
            .filter(|r| r.as_ref().is_none_or(|t| !t.completed))
            .count() as u32,
        all_fields_pass_k: if measured_rows == 0 {
            0.0
        } else {
            f64::from(all_right) / f64::from(measured_rows)
        },
        ..EvalReport::default()
    }
}

/// Train a fresh learner on `train` and measure it on `test`, for the
/// `target` field (default `intent` when the sets have it, else
/// `category`).
fn learner_eval(train: &[Labelled], test: &[Labelled], spec: &RunSpec) -> EvalReport {
    let target = match spec.target.trim() {
        "" if test.iter().any(|r| r.labels.contains_key("intent")) => "intent",
        "" => "category",
        t => FIELDS
            .iter()
            .copied()
            .find(|f| *f == t)
            .unwrap_or("category"),
    };
    let examples: Vec<(String, &str)> = train
        .iter()
        .filter_map(|r| Some((r.text(), r.labels.get(target)?.as_str())))
        .collect();
    let model = crate::learn::Classifier::train(examples.iter().map(|(t, l)| (t.as_str(), *l)));
    let mut outcomes = FieldOutcomes::default();
    let mut millis = Vec::new();
    for row in test {
        let Some(expected) = row.labels.get(target) else {
            continue;
        };
        let started = Instant::now();
        let predicted = model.as_ref().map(|m| m.predict(&row.text()));
        millis.push(started.elapsed().as_secs_f64() * 1000.0);
        if let Some(p) = &predicted
            && let Some(c) = p.confidence
        {
            outcomes.confident.push((c, &p.label == expected));
        }
        let got = predicted.map(|p| p.label);
        outcomes.rows.push((expected.clone(), vec![got]));
    }
    let field = outcomes.report(target, self::target(spec));
    EvalReport {
        runs: 1,
        measured: outcomes.rows.len() as u32,
        all_fields_pass_k: field.accuracy,
        fields: vec![field],
        latency_p50_ms: percentile(&mut millis, 50.0),
        latency_p95_ms: percentile(&mut millis, 95.0),
        ..EvalReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(text: &str, category: &str) -> Labelled {
        Labelled {
            subject: text.into(),
            body: String::new(),
            labels: [("category".to_string(), category.to_string())].into(),
        }
    }

    #[test]
    fn the_learner_is_measured_on_the_test_set_it_did_not_see() {
        let train: Vec<Labelled> = (0..6)
            .flat_map(|i| {
                [
                    row(&format!("refund my order {i} please"), "refund"),
                    row(&format!("parcel {i} has not arrived"), "shipping"),
                ]
            })
            .collect();
        let test = vec![
            row("please refund order 77", "refund"),
            row("my parcel 12 has not arrived", "shipping"),
        ];
        let report = learner_eval(&train, &test, &RunSpec::default());
        assert_eq!(report.fields[0].field, "category");
        assert_eq!(report.fields[0].accuracy, 1.0);
        assert_eq!(report.measured, 2);
    }
}
