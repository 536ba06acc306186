//! `/reports`: the desk's reports, newest first, and a form that makes one
//! (a day, or yesterday); `/reports/<id>`: one report — its summary, the
//! two charts (the daemon's SVG, served as images from
//! `/reports/<id>/<chart>.svg`) and its figures as tables. The figures are
//! the daemon's `report.json`; the page only lays them out.

use maud::{Markup, html};
use serde_json::Value;
use tinycode_shared::proto::{ReportContent, ReportInfo};

use super::{Tab, csrf, layout};
use crate::person::Person;

pub fn reports(person: &Person, from: u64, list: &[ReportInfo]) -> Markup {
    let body = html! {
        h1 { "Reports" }
        form.make-report method="post" action="/reports" {
            (csrf(person))
            label { "Day " input type="date" name="day"; }
            label { "Queue " input name="queue" maxlength="64" placeholder="every queue"; }
            button type="submit" { "Make report" }
            span.hint { "No day: yesterday, in the desk's time zone." }
        }
        section #report-list data-live="reports" data-src="/reports?part=live" {
            (reports_live(list))
        }
    };
    layout("Reports", person, Tab::Reports, from, body)
}

pub fn reports_live(list: &[ReportInfo]) -> Markup {
    html! {
        @if list.is_empty() {
            p.empty #no-reports { "No report yet. Make one above, or set " code { "reports.daily" } " in the desk's config." }
        } @else {
            table.reports {
                thead { tr { th { "Report" } th { "Period" } th { "Queue" } th { "Made" } th { "Summary" } } }
                tbody {
                    @for r in list {
                        tr {
                            td { a href={ "/reports/" (r.report_id) } { (r.report_id) } }
                            td { (period(r)) }
                            td { @if r.queue.is_empty() { "every queue" } @else { (r.queue) } }
                            td { (r.generated_at.replace('T', " ").chars().take(16).collect::<String>())
                                 @if r.scheduled { " (daily)" } }
                            td { (r.summary) }
                        }
                    }
                }
            }
        }
    }
}

fn period(r: &ReportInfo) -> String {
    if r.day.is_empty() {
        format!(
            "{} – {}",
            r.from.chars().take(10).collect::<String>(),
            r.to.chars().take(10).collect::<String>()
        )
    } else {
        r.day.clone()
    }
}

pub fn report(person: &Person, from: u64, content: &ReportContent) -> Markup {
    let info = content.info.clone().unwrap_or_default();
    let f: Value = serde_json::from_str(&content.figures_json).unwrap_or(Value::Null);
    let title = format!("Report {}", period(&info));
    let body = html! {
        p { a href="/reports" { "← Reports" } }
        h1 { (title) @if !info.queue.is_empty() { ", queue " (info.queue) } }
        p.summary #report-summary { (info.summary) }
        p.files { "Files: " code { (info.directory) } " under the daemon's state directory." }
        div.charts {
            @for c in &content.charts {
                img src={ "/reports/" (info.report_id) "/" (c.name) ".svg" } alt={ (c.name) " chart" };
            }
        }
        (volume(&f["volume"]))
        (backlog(&f["backlog"]))
        (times(&f))
        (sla(&f["sla"]))
        (automation(&f))
    };
    layout(&title, person, Tab::Reports, from, body)
}

fn n(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn volume(v: &Value) -> Markup {
    html! {
        h2 { "Volume" }
        p { (n(&v["new"])) " new (" (n(&v["previousNew"])) " the period before), "
            (n(&v["reopened"])) " reopened (" (n(&v["previousReopened"])) " before)." }
        @for (what, key) in [("Category", "byCategory"), ("Queue", "byQueue"), ("Channel", "byChannel")] {
            table.figures data-table=(key) {
                thead { tr { th { (what) } th { "New" } th { "Before" } th { "Reopened" } th { "Before" } } }
                tbody {
                    @for row in v[key].as_array().into_iter().flatten() {
                        tr {
                            td { @if n(&row["name"]).is_empty() { "(none)" } @else { (n(&row["name"])) } }
                            td { (n(&row["new"])) } td { (n(&row["previousNew"])) }
                            td { (n(&row["reopened"])) } td { (n(&row["previousReopened"])) }
                        }
                    }
                }
            }
        }
    }
}

fn backlog(b: &Value) -> Markup {
    html! {
        h2 { "Backlog at the end" }
        table.figures data-table="backlog" {
            thead { tr { th { "Open" } th { "< 4 h" } th { "< 24 h" } th { "< 3 d" } th { "Older" } } }
            tbody { tr {
                td { (n(&b["open"])) } td { (n(&b["under4h"])) } td { (n(&b["under24h"])) }
                td { (n(&b["under3d"])) } td { (n(&b["older"])) }
            } }
        }
    }
}

fn span(v: &Value) -> String {
    v.as_i64()
        .map_or_else(|| "–".into(), tinycode_shared::render::sla::span)
}

fn times(f: &Value) -> Markup {
    html! {
        h2 { "Response and resolution (business hours)" }
        table.figures data-table="times" {
            thead { tr { th { "" } th { "Count" } th { "Median" } th { "p90" } } }
            tbody {
                @for (what, key) in [("First response", "firstResponse"), ("Resolution", "resolution")] {
                    tr { td { (what) } td { (n(&f[key]["count"])) }
                         td { (span(&f[key]["medianSeconds"])) } td { (span(&f[key]["p90Seconds"])) } }
                }
            }
        }
    }
}

fn sla(s: &Value) -> Markup {
    html! {
        h2 { "SLA" }
        table.figures data-table="sla" {
            thead { tr { th { "Policy" } th { "Target" } th { "Met" } th { "Breached" } th { "Met share" } } }
            tbody {
                @for t in s["targets"].as_array().into_iter().flatten() {
                    tr { td { (n(&t["policy"])) } td { (n(&t["target"])) } td { (n(&t["met"])) }
                         td { (n(&t["breached"])) }
                         td { (t["metShare"].as_f64().map_or_else(|| "–".into(), |x| format!("{:.1} %", x * 100.0))) } }
                }
            }
        }
        @for (what, key) in [("Breached", "breached"), ("Due in the next 4 hours", "dueNext4h")] {
            h3 { (what) " (" (n(&s[format!("{key}Count")])) ")" }
            ul.tickets data-list=(key) {
                @for t in s[key].as_array().into_iter().flatten() {
                    li { a href={ "/tickets/" (n(&t["ticket"])) } { (n(&t["ticket"])) }
                         " " (n(&t["target"])) " · due " (n(&t["dueAt"])) }
                }
            }
        }
    }
}

fn automation(f: &Value) -> Markup {
    let a = &f["automation"];
    let ap = &f["approvals"];
    html! {
        h2 { "Approvals, automation and drift" }
        p { "Approvals: " (n(&ap["requested"])) " requested, " (n(&ap["decided"])) " decided, "
            (n(&ap["denied"])) " denied; median wait " (span(&ap["medianWaitSeconds"])) "." }
        p { "Automation: " (n(&a["resolved"])) " resolved, " (n(&a["unchanged"])) " of them with no person changing the agent's decision." }
        table.figures data-table="drift" {
            thead { tr { th { "Changed by a person" } th { "Category" } th { "Times" } } }
            tbody {
                @for c in f["drift"]["changes"].as_array().into_iter().flatten() {
                    tr { td { (n(&c["field"])) } td { (n(&c["category"])) } td { (n(&c["count"])) } }
                }
            }
        }
        p { "Escalations: "
            @for e in f["escalations"].as_array().into_iter().flatten() { (n(&e["name"])) " × " (n(&e["count"])) "; " } }
    }
}
