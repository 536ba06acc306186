//! `render_report`: the desk's triage report for a day or a range, as
//! Markdown tables with its figures — read-only (nothing is stored; `tinycode
//! report` stores one). The reports live above the tools, so the tool reads
//! them through [`ReportSource`], which the daemon hands the sessions.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};

/// What to report on: `day` (`YYYY-MM-DD`), or `from` and `to`, or none
/// of them (yesterday); `queue` narrows it to one queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportQuery {
    pub day: String,
    pub from: String,
    pub to: String,
    pub queue: String,
}

/// The report's Markdown and figures, or why a figure could not be read.
pub trait ReportSource: Send + Sync {
    fn render<'a>(
        &'a self,
        query: &'a ReportQuery,
    ) -> BoxFuture<'a, Result<(String, Value), String>>;
}

pub struct RenderReport;

pub fn render_report() -> Arc<dyn Tool> {
    Arc::new(RenderReport)
}

impl Tool for RenderReport {
    fn name(&self) -> &str {
        "render_report"
    }

    fn description(&self) -> &str {
        "Render the desk's triage report (volume, backlog, response times, SLA, escalations, approvals, automation, drift) for one day (default: yesterday) or a range of days, as Markdown tables with the figures. Read-only."
    }

    fn parameters(&self) -> Value {
        let day = |d: &str| json!({ "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "description": d });
        json!({
            "type": "object",
            "properties": {
                "day": day("One day of the desk's time zone, YYYY-MM-DD"),
                "from": day("First day of a range (with `to`)"),
                "to": day("Last day of a range, included"),
                "queue": { "type": "string", "description": "Only this queue's tickets" },
            },
            "additionalProperties": false,
        })
    }

    fn execute<'a>(
        &'a self,
        args: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let source = ctx.reports.as_deref().ok_or_else(|| {
                ToolError::Invalid("reports are not available here; do not make up figures".into())
            })?;
            let text = |key: &str| {
                args.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let query = ReportQuery {
                day: text("day"),
                from: text("from"),
                to: text("to"),
                queue: text("queue"),
            };
            let (markdown, figures) = source.render(&query).await.map_err(|e| {
                ToolError::Invalid(format!(
                    "the report could not be made: {e}. Say so; do not make up figures"
                ))
            })?;
            Ok(ToolOutput::ok(markdown, json!({ "figures": figures })))
        })
    }
}
