//! `/report`: what the TUI shows of a report it made.

use tinycode_shared::proto::ReportContent;
use tinycode_shared::text::{clip, pad};

/// `/report`: the report's summary, its volume by category and backlog as
/// a small table, and where its files are.
pub fn summary(r: &ReportContent) -> String {
    let info = r.info.clone().unwrap_or_default();
    let f: serde_json::Value = serde_json::from_str(&r.figures_json).unwrap_or_default();
    let period = if info.day.is_empty() {
        format!(
            "{} – {}",
            info.from.chars().take(10).collect::<String>(),
            info.to.chars().take(10).collect::<String>()
        )
    } else {
        info.day.clone()
    };
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let mut out = format!("Report {} · {period} · {}\n", info.report_id, info.summary);
    out.push_str(&format!(
        "{} {:>5} {:>7}\n",
        pad("CATEGORY", 20),
        "NEW",
        "BEFORE"
    ));
    for row in f["volume"]["byCategory"].as_array().into_iter().flatten() {
        let name = row["name"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or("(none)");
        out.push_str(&format!(
            "{} {:>5} {:>7}\n",
            pad(&clip(name, 20), 20),
            n(&row["new"]),
            n(&row["previousNew"])
        ));
    }
    let b = &f["backlog"];
    out.push_str(&format!(
        "Backlog: {} open (< 4 h {} · < 24 h {} · < 3 d {} · older {})\n",
        n(&b["open"]),
        n(&b["under4h"]),
        n(&b["under24h"]),
        n(&b["under3d"]),
        n(&b["older"])
    ));
    out.push_str(&format!(
        "Files: {}/ under the daemon's state directory (report.md, report.json, the charts as SVG and PNG)",
        info.directory
    ));
    out
}
