//! The desk's reports (`Reports` service, `tinycode report`): figures
//! tallied from the read models (`figures.rs`), written as `report.json`,
//! `report.md` and SVG charts (`render.rs`) into the state directory's
//! `reports/<id>/` (a temp folder renamed into place), then announced by
//! `ReportGenerated` on stream `reports` (id, period, relative paths; no
//! file body). A report belongs to the desk, not to a session: deleting a
//! session never touches one. With `reports.daily` the daemon makes the
//! previous day's report at that time of the desk's day, exactly once
//! across restarts and daemons (`schedule.rs`).

pub mod figures;
mod png;
mod render;
mod schedule;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, ReportChart, ReportContent, ReportGenerated, ReportInfo};

use crate::approvals::{ApprovalError, Approvals};
use crate::domain::desk::{Desk, DomainError};
use crate::projection::{ProjectionError, ProjectorHandle};
use crate::store::{EventStore, ExpectedVersion, StoreError};
pub use figures::{Figures, Period};
pub use schedule::run_daily;

/// A report's files: the figures, the Markdown, each chart as SVG and PNG
/// (drawn off the async threads: the first loads the system's fonts).
async fn files(
    title: String,
    figures: Figures,
) -> Result<Vec<(&'static str, Vec<u8>)>, ReportError> {
    tokio::task::spawn_blocking(move || {
        let fonts = png::Fonts::system();
        let volume = render::volume_chart(&figures);
        let backlog = render::backlog_chart(&figures);
        let mut md = render::markdown(&title, &figures);
        if fonts.lacks(&volume) || fonts.lacks(&backlog) {
            md.push_str(png::FALLBACK_NOTE);
        }
        let chart = |name: &'static str, svg: &str| {
            png::png(svg, fonts).map_err(|problem| ReportError::Chart { name, problem })
        };
        Ok(vec![
            (
                "report.json",
                serde_json::to_string_pretty(&figures)
                    .unwrap_or_default()
                    .into_bytes(),
            ),
            ("report.md", md.into_bytes()),
            ("volume.png", chart("volume", &volume)?),
            ("backlog.png", chart("backlog", &backlog)?),
            ("volume.svg", volume.into_bytes()),
            ("backlog.svg", backlog.into_bytes()),
        ])
    })
    .await
    .map_err(|e| ReportError::Chart {
        name: "charts",
        problem: e.to_string(),
    })?
}

/// The report's heading.
fn title(ask: &Ask, figures: &Figures) -> String {
    match (ask.day.is_empty(), ask.queue.is_empty()) {
        (false, true) => format!("Daily triage report — {}", ask.day),
        (false, false) => format!("Daily triage report — {}, queue {}", ask.day, ask.queue),
        (true, _) => format!("Triage report — {} to {}", figures.from, figures.to),
    }
}

/// `render_report`: the Markdown and figures of a report, nothing stored.
impl crate::tools::report::ReportSource for Reports {
    fn render<'a>(
        &'a self,
        query: &'a crate::tools::report::ReportQuery,
    ) -> futures::future::BoxFuture<'a, Result<(String, serde_json::Value), String>> {
        Box::pin(async move {
            // One report is worked out at a time (each reads every ticket).
            let _one = self.making.lock().await;
            let ask = Ask::of(
                &query.day,
                &query.from,
                &query.to,
                &query.queue,
                self.offset(),
                crate::clock::now_unix(),
            )
            .map_err(|e| e.to_string())?;
            let figures = self.figures(&ask).await.map_err(|e| e.to_string())?;
            let markdown = render::markdown(&title(&ask, &figures), &figures);
            let json = serde_json::to_value(&figures).map_err(|e| e.to_string())?;
            Ok((markdown, json))
        })
    }
}

/// Write the files into a temp folder under `root`, fsync them, rename
/// it into place; returns the folder.
fn write_files(root: &Path, id: &str, files: &[(&str, Vec<u8>)]) -> Result<PathBuf, ReportError> {
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(root).map_err(io("create", root))?;
    let tmp = root.join(format!(".tmp-{id}"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir(&tmp).map_err(io("create", &tmp))?;
    for (name, body) in files {
        let path = tmp.join(name);
        crate::files::replace(&path, body, 0o600).map_err(io("write", &path))?;
    }
    let dir = root.join(id);
    std::fs::rename(&tmp, &dir).map_err(io("rename", &dir))?;
    if let Ok(d) = std::fs::File::open(root) {
        let _ = d.sync_all();
    }
    Ok(dir)
}

/// The stream of `ReportGenerated`.
pub const STREAM: &str = "reports";
const DAY: i64 = 86_400;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("`{field}` {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error("report {0} does not exist; `tinycode report list` shows the reports")]
    NotFound(String),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "report {0} is on the log but its files are not in this daemon's state directory: another daemon sharing the log made it (open it there), or its folder was removed"
    )]
    Elsewhere(String),
    #[error("the report's work stopped: {0}")]
    Stopped(String),
    #[error("cannot draw the {name} chart: {problem}")]
    Chart { name: &'static str, problem: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Approvals(#[from] ApprovalError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
}

/// What to report on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub period: Period,
    /// `YYYY-MM-DD` when the period is one day.
    pub day: String,
    pub queue: String,
    pub scheduled: bool,
}

pub struct Reports {
    store: EventStore,
    desk: Arc<Desk>,
    approvals: Arc<Approvals>,
    evals: ProjectorHandle,
    state_dir: PathBuf,
    /// `reports.prices`: the cost of the agent's model use.
    prices: Arc<crate::config::Prices>,
    /// One report is made at a time.
    making: tokio::sync::Mutex<()>,
}

/// A day of the desk's time zone (`offset` seconds east of UTC) as a
/// period.
fn day_period(day: &str, offset: i64) -> Option<Period> {
    let midnight = crate::clock::parse_rfc3339(&format!("{day}T00:00:00Z"))
        .filter(|&m| day.len() == 10 && day_of(m, 0) == day)?;
    Some(Period {
        from: midnight - offset,
        to: midnight - offset + DAY,
    })
}

/// `YYYY-MM-DD` of the desk's day holding `t`.
pub fn day_of(t: i64, offset: i64) -> String {
    tinycode_shared::render::rfc3339(t + offset, 0)[..10].to_string()
}

impl Ask {
    /// `--day D`, `--from A --to B` (days, both included), or nothing:
    /// yesterday; days of the desk's time zone.
    pub fn of(
        day: &str,
        from: &str,
        to: &str,
        queue: &str,
        offset: i64,
        now: i64,
    ) -> Result<Self, ReportError> {
        let bad = |field: &'static str, value: &str| ReportError::Invalid {
            field,
            problem: format!("must be a day such as 2026-12-03, got {value:?}"),
        };
        let parse = |field: &'static str, value: &str| {
            day_period(value.trim(), offset).ok_or_else(|| bad(field, value))
        };
        let (period, day) = match (day.trim(), from.trim(), to.trim()) {
            ("", "", "") => {
                let yesterday = day_of(now - DAY, offset);
                (parse("day", &yesterday)?, yesterday)
            }
            (d, "", "") => (parse("day", d)?, d.to_string()),
            ("", a, b) if !a.is_empty() && !b.is_empty() => {
                let (a, b) = (parse("from", a)?, parse("to", b)?);
                if b.to <= a.from {
                    return Err(ReportError::Invalid {
                        field: "to",
                        problem: "must not be before `from`".into(),
                    });
                }
                (
                    Period {
                        from: a.from,
                        to: b.to,
                    },
                    String::new(),
                )
            }
            _ => {
                return Err(ReportError::Invalid {
                    field: "day",
                    problem: "give a day, or both `from` and `to`, not both kinds".into(),
                });
            }
        };
        if period.to - period.from > 366 * DAY {
            return Err(ReportError::Invalid {
                field: "to",
                problem: "a report covers at most 366 days".into(),
            });
        }
        Ok(Self {
            period,
            day,
            queue: queue.trim().to_string(),
            scheduled: false,
        })
    }
}

impl Reports {
    pub fn new(
        store: EventStore,
        desk: Arc<Desk>,
        approvals: Arc<Approvals>,
        evals: ProjectorHandle,
        state_dir: PathBuf,
        prices: crate::config::Prices,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            desk,
            approvals,
            evals,
            state_dir,
            prices: Arc::new(prices),
            making: tokio::sync::Mutex::new(()),
        })
    }

    /// Load the system's fonts for the PNG charts in the background, so
    /// the first report does not wait for them.
    pub fn warm_up(&self) {
        drop(tokio::task::spawn_blocking(|| {
            let started = std::time::Instant::now();
            png::Fonts::system();
            tracing::debug!(
                ms = started.elapsed().as_millis(),
                "fonts loaded for the report charts"
            );
        }));
    }

    /// Becomes true when the store closes (the daily schedule stops).
    pub fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.store.closing()
    }

    /// The desk's time zone, seconds east of UTC.
    pub fn offset(&self) -> i64 {
        self.desk.sla_settings().hours.offset()
    }

    fn root(&self) -> PathBuf {
        self.state_dir.join("reports")
    }

    /// The figures of `ask`, from the read models as they are now (caught
    /// up with the log first).
    pub async fn figures(&self, ask: &Ask) -> Result<Figures, ReportError> {
        let head = self.store.last_sequence();
        self.desk.tickets_at(head).await?;
        self.approvals.projector().wait_for(head).await?;
        self.evals.wait_for(head).await?;
        let now = crate::clock::now_unix();
        let approvals = self.approvals.list(true, "")?;
        let eval = crate::eval::newest_reports(self.evals.tree(), 1)?
            .into_iter()
            .next()
            .map(|r| {
                let fields = r
                    .fields
                    .iter()
                    .map(|f| (f.field.clone(), f.accuracy))
                    .collect();
                (r.eval_id, fields)
            });
        // Every ticket is read and tallied: off the async threads.
        let (desk, period, queue) = (Arc::clone(&self.desk), ask.period, ask.queue.clone());
        let prices = Arc::clone(&self.prices);
        tokio::task::spawn_blocking(move || {
            let mut tally = figures::Tally::new(period, now, &queue, desk.sla_settings());
            desk.each_ticket_with_facts(|t, f| tally.add(t, f))?;
            Ok(tally.finish(&approvals, eval, &prices))
        })
        .await
        .map_err(|e| ReportError::Stopped(e.to_string()))?
    }

    /// Make, store and announce a report. A scheduled one is stored at
    /// the `reports` stream's version as read, after checking no report of
    /// its day is there: two daemons at the same moment store one.
    pub async fn generate(&self, ask: Ask) -> Result<ReportInfo, ReportError> {
        let _one = self.making.lock().await;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let expected = if ask.scheduled {
                // One read gives both: a report another daemon appends
                // after it moves the version, and the append conflicts.
                let (done, version) = self.scheduled_for(&ask.day).await?;
                if let Some(done) = done {
                    return Ok(done);
                }
                ExpectedVersion::Exact(version)
            } else {
                ExpectedVersion::Any
            };
            let (info, dir) = self.make(&ask).await?;
            let payload = Payload::ReportGenerated(ReportGenerated {
                report: Some(info.clone()),
            });
            match self.store.append(STREAM, expected, vec![payload]).await {
                Ok(_) => return Ok(info),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    if !(matches!(e, StoreError::Conflict { .. }) && attempts < 5) {
                        return Err(e.into());
                    }
                }
            }
        }
    }

    /// Compute and write a report's files; what `ReportGenerated` says of
    /// it, and its folder.
    async fn make(&self, ask: &Ask) -> Result<(ReportInfo, PathBuf), ReportError> {
        let started = std::time::Instant::now();
        let figures = self.figures(ask).await?;
        let tallied = started.elapsed();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let day = if ask.day.is_empty() {
            "range".to_string()
        } else {
            ask.day.replace('-', "")
        };
        let id = format!("R-{day}-{}", now_ms % 100_000_000);
        let title = title(ask, &figures);
        let files = files(title, figures.clone()).await?;
        tracing::info!(
            figures_ms = tallied.as_millis(),
            files_ms = (started.elapsed() - tallied).as_millis(),
            "report made"
        );
        let names: Vec<String> = files
            .iter()
            .map(|(name, _)| format!("reports/{id}/{name}"))
            .collect();
        let (root, folder) = (self.root(), id.clone());
        let dir = tokio::task::spawn_blocking(move || write_files(&root, &folder, &files))
            .await
            .map_err(|e| ReportError::Stopped(e.to_string()))??;
        let (met, breached) = figures
            .sla
            .targets
            .iter()
            .fold((0, 0), |(m, b), t| (m + t.met, b + t.breached));
        let info = ReportInfo {
            report_id: id.clone(),
            from: figures.from.clone(),
            to: figures.to.clone(),
            queue: ask.queue.clone(),
            generated_at: crate::clock::now_rfc3339(),
            directory: format!("reports/{id}"),
            files: names,
            summary: format!(
                "{} new, {} reopened; {} open at the end; SLA {met} met, {breached} breached",
                figures.volume.new, figures.volume.reopened, figures.backlog.open
            ),
            scheduled: ask.scheduled,
            day: ask.day.clone(),
        };
        Ok((info, dir))
    }

    async fn events(&self) -> Result<Vec<Event>, ReportError> {
        let mut out = Vec::new();
        loop {
            let from = out.last().map_or(1, |e: &Event| e.stream_version + 1);
            let page = self.store.read_stream(STREAM, from, 1_000).await?;
            let done = page.len() < 1_000;
            out.extend(page);
            if done {
                return Ok(out);
            }
        }
    }

    /// The scheduled report of `day`, if one was made, and the stream's
    /// version, from one read.
    pub async fn scheduled_for(&self, day: &str) -> Result<(Option<ReportInfo>, u64), ReportError> {
        let events = self.events().await?;
        let version = events.last().map_or(0, |e| e.stream_version);
        let done = events.into_iter().find_map(|e| match e.payload {
            Some(Payload::ReportGenerated(ReportGenerated { report: Some(r) }))
                if r.scheduled && r.day == day =>
            {
                Some(r)
            }
            _ => None,
        });
        Ok((done, version))
    }

    /// Reports made, newest first.
    pub async fn list(&self, limit: usize) -> Result<Vec<ReportInfo>, ReportError> {
        let mut out: Vec<ReportInfo> = self
            .events()
            .await?
            .into_iter()
            .filter_map(|e| match e.payload {
                Some(Payload::ReportGenerated(g)) => g.report,
                _ => None,
            })
            .collect();
        out.reverse();
        out.truncate(limit);
        Ok(out)
    }

    /// One report: what was stored, its Markdown, its figures and its SVG
    /// charts.
    pub async fn get(&self, id: &str) -> Result<ReportContent, ReportError> {
        let id = crate::domain::ids::sanitize_id(id).map_err(|e| ReportError::Invalid {
            field: "report_id",
            problem: e.to_string(),
        })?;
        let info = self
            .list(usize::MAX)
            .await?
            .into_iter()
            .find(|r| r.report_id == id)
            .ok_or_else(|| ReportError::NotFound(id.clone()))?;
        // Its own folder, whatever the stored event says (never a path
        // read from the log).
        let dir = self.root().join(&id);
        if !dir.is_dir() {
            return Err(ReportError::Elsewhere(id));
        }
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| ReportError::Io {
                action: "read",
                path,
                source,
            })
        };
        let charts = ["volume", "backlog"]
            .into_iter()
            .map(|name| {
                Ok(ReportChart {
                    name: name.into(),
                    svg: read(&format!("{name}.svg"))?,
                })
            })
            .collect::<Result<_, ReportError>>()?;
        Ok(ReportContent {
            markdown: read("report.md")?,
            figures_json: read("report.json")?,
            charts,
            info: Some(info),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_the_desks_days() {
        let now = crate::clock::parse_rfc3339("2026-12-04T03:00:00Z").unwrap();
        let ask = Ask::of("", "", "", "", 8 * 3600, now).unwrap();
        // 03:00 UTC is 11:00 in +08:00: yesterday there was the 3rd.
        assert_eq!(ask.day, "2026-12-03");
        assert_eq!(
            ask.period.from,
            crate::clock::parse_rfc3339("2026-12-03T00:00:00+08:00").unwrap()
        );
        let range = Ask::of("", "2026-12-01", "2026-12-03", "售后组", 0, now).unwrap();
        assert_eq!(range.period.to - range.period.from, 3 * DAY);
        for (d, f, t) in [
            ("2026-13-01", "", ""),
            ("x", "", ""),
            ("", "2026-12-03", "2026-12-01"),
            ("2026-12-01", "2026-12-01", ""),
        ] {
            assert!(Ask::of(d, f, t, "", 0, now).is_err(), "{d} {f} {t}");
        }
    }
}
