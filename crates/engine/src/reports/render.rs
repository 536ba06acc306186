//! A report's files: `report.md` (every figure as a table) and two SVG
//! charts — volume by category (this period against the one before) and
//! the backlog by age — whose title, axes and labels are text (category
//! names in Chinese included: a viewer draws them with its own fonts).
//! Every name is escaped: category and queue names come from the desk's
//! configuration, ticket ids from the log, never a customer's text.

use std::fmt::Write as _;

use super::figures::{Durations, Figures, Row};

/// A name in a Markdown table: no markup (a ticket file may name any
/// category: every Markdown and HTML character is backslash-escaped), no
/// line or column break.
fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '(' | ')' | '<' | '>' | '|' | '#' | '!' | '&'
            | '~' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

fn span(seconds: Option<i64>) -> String {
    seconds.map_or_else(|| "–".into(), tinycode_shared::render::sla::span)
}

fn percent(share: Option<f64>) -> String {
    share.map_or_else(|| "–".into(), |s| format!("{:.1} %", s * 100.0))
}

fn change(now: u64, before: u64) -> String {
    match now as i64 - before as i64 {
        0 => "±0".into(),
        d if d > 0 => format!("+{d}"),
        d => d.to_string(),
    }
}

/// `report.md`.
pub fn markdown(title: &str, f: &Figures) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", cell(title));
    let _ = writeln!(
        md,
        "Period {} – {}{}.\n",
        f.from,
        f.to,
        if f.queue.is_empty() {
            String::new()
        } else {
            format!(", queue {}", cell(&f.queue))
        }
    );
    volume_md(&mut md, f);
    backlog_md(&mut md, f);
    sla_md(&mut md, f);
    activity_md(&mut md, f);
    drift_md(&mut md, f);
    model_md(&mut md, f);
    let _ = writeln!(
        md,
        "\n![Volume by category](volume.svg)\n\n![Backlog by age](backlog.svg)\n\n\
         The same charts as PNG: `volume.png`, `backlog.png`."
    );
    md
}

/// Volume: totals and a table per category, queue and channel.
fn volume_md(md: &mut String, f: &Figures) {
    let v = &f.volume;
    let _ = writeln!(md, "## Volume\n");
    let _ = writeln!(
        md,
        "{} new ({} the period before, {}), {} reopened ({} before).\n",
        v.new,
        v.previous_new,
        change(v.new, v.previous_new),
        v.reopened,
        v.previous_reopened
    );
    for (what, rows) in [
        ("Category", &v.by_category),
        ("Queue", &v.by_queue),
        ("Channel", &v.by_channel),
    ] {
        rows_table(md, what, rows);
    }
}

/// The backlog by age, and response and resolution times.
fn backlog_md(md: &mut String, f: &Figures) {
    let b = &f.backlog;
    let _ = writeln!(md, "## Backlog at the end of the period\n");
    let _ = writeln!(
        md,
        "| open | < 4 h | < 24 h | < 3 d | older |\n| ---: | ---: | ---: | ---: | ---: |"
    );
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} | {} |\n",
        b.open, b.under_4h, b.under_24h, b.under_3d, b.older
    );
    let _ = writeln!(md, "## Response and resolution (business hours)\n");
    let _ = writeln!(
        md,
        "| | tickets | median | p90 |\n| --- | ---: | ---: | ---: |"
    );
    for (what, d) in [
        ("first response", &f.first_response),
        ("resolution", &f.resolution),
    ] {
        durations_row(md, what, d);
    }
}

/// SLA met per policy and target; breached and due-soon tickets.
fn sla_md(md: &mut String, f: &Figures) {
    let _ = writeln!(md, "\n## SLA\n");
    if f.sla.targets.is_empty() {
        let _ = writeln!(md, "No clock was met or breached in the period.\n");
    } else {
        let _ = writeln!(
            md,
            "| policy | target | met | breached | met share |\n| --- | --- | ---: | ---: | ---: |"
        );
        for t in &f.sla.targets {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                cell(&t.policy),
                t.target,
                t.met,
                t.breached,
                percent(t.met_share)
            );
        }
        let _ = writeln!(md);
    }
    for (what, count, list) in [
        (
            "Breached in the period",
            f.sla.breached_count,
            &f.sla.breached,
        ),
        (
            "Due in the next 4 hours",
            f.sla.due_next_4h_count,
            &f.sla.due_next_4h,
        ),
    ] {
        let shown = match count {
            0 => "none".to_string(),
            n if n as usize > list.len() => format!("{n} (the first {} by due time)", list.len()),
            n => n.to_string(),
        };
        let _ = writeln!(md, "{what}: {shown}");
        for t in list {
            let _ = writeln!(md, "- {} {} (due {})", cell(&t.ticket), t.target, t.due_at);
        }
        let _ = writeln!(md);
    }
}

/// Escalations, approvals and automation.
fn activity_md(md: &mut String, f: &Figures) {
    let _ = writeln!(md, "## Escalations\n");
    if f.escalations.is_empty() {
        let _ = writeln!(md, "None.\n");
    } else {
        for e in &f.escalations {
            let _ = writeln!(md, "- {}: {}", e.name, e.count);
        }
        let _ = writeln!(md);
    }
    let a = &f.approvals;
    let _ = writeln!(md, "## Approvals\n");
    let _ = writeln!(
        md,
        "{} requested, {} decided ({} denied); median wait for a decision {}.\n",
        a.requested,
        a.decided,
        a.denied,
        span(a.median_wait_seconds)
    );
    let au = &f.automation;
    let _ = writeln!(md, "## Automation\n");
    let _ = writeln!(
        md,
        "{} of {} tickets resolved in the period were triaged by the agent with no person changing its decision ({}).\n",
        au.unchanged,
        au.resolved,
        percent(au.share)
    );
}

/// A person's changes of the agent's decisions; the latest evaluation.
fn drift_md(md: &mut String, f: &Figures) {
    let _ = writeln!(md, "## Drift\n");
    if f.drift.changes.is_empty() {
        let _ = writeln!(
            md,
            "No person changed the agent's category, priority or queue.\n"
        );
    } else {
        let _ = writeln!(md, "| field | category | changes |\n| --- | --- | ---: |");
        for c in &f.drift.changes {
            let _ = writeln!(md, "| {} | {} | {} |", c.field, cell(&c.category), c.count);
        }
        let _ = writeln!(md);
    }
    if f.drift.eval_id.is_empty() {
        let _ = writeln!(md, "No evaluation yet (`tinycode eval`).");
    } else {
        let fields: Vec<String> = f
            .drift
            .eval_accuracy
            .iter()
            .map(|(field, acc)| format!("{field} {:.1} %", acc * 100.0))
            .collect();
        let _ = writeln!(
            md,
            "Latest evaluation {}: {}.",
            cell(&f.drift.eval_id),
            fields.join(", ")
        );
    }
}

/// The agent's model use: tokens and cost per ticket, by model.
fn model_md(md: &mut String, f: &Figures) {
    let m = &f.model;
    let _ = writeln!(md, "\n## Model use\n");
    if m.tickets == 0 {
        let _ = writeln!(
            md,
            "No model usage reported for the period's triage (a provider that reports none, or no triage).\n"
        );
        return;
    }
    let money = |c: Option<f64>| c.map_or_else(|| "no price".into(), |c| format!("{c:.4}"));
    let _ = writeln!(
        md,
        "{} tickets, {} input and {} output tokens: {:.0} tokens per ticket, cost per ticket {}.\n",
        m.tickets,
        m.input_tokens,
        m.output_tokens,
        m.tokens_per_ticket.unwrap_or(0.0),
        money(m.cost_per_ticket),
    );
    let _ = writeln!(
        md,
        "| model | tickets | input tokens | output tokens | cost |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for r in &m.by_model {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            cell(&r.model),
            r.tickets,
            r.input_tokens,
            r.output_tokens,
            money(r.cost)
        );
    }
    if m.cost.is_none() {
        let _ = writeln!(
            md,
            "\nA model without a price in `reports.prices` leaves the cost unknown."
        );
    }
    let _ = writeln!(md);
}

fn rows_table(md: &mut String, what: &str, rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "| {what} | new | reopened | new before | change |\n| --- | ---: | ---: | ---: | ---: |"
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            cell(&r.name),
            r.new,
            r.reopened,
            r.previous_new,
            change(r.new, r.previous_new)
        );
    }
    let _ = writeln!(md);
}

fn durations_row(md: &mut String, what: &str, d: &Durations) {
    let _ = writeln!(
        md,
        "| {what} | {} | {} | {} |",
        d.count,
        span(d.median_seconds),
        span(d.p90_seconds)
    );
}

/// Text safe inside SVG markup.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A horizontal bar chart: one row per label, one bar per series.
pub fn bars(title: &str, series: &[&str], rows: &[(String, Vec<u64>)]) -> String {
    const LABEL: u32 = 160;
    const BAR: u32 = 14;
    const WIDTH: u32 = 640;
    let colours = ["#3b6fd8", "#b9c6e4"];
    let per_row = BAR * series.len() as u32 + 10;
    let height = 70 + per_row * rows.len().max(1) as u32 + 30;
    let max = rows
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = f64::from(WIDTH - LABEL - 60) / max as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Noto Sans CJK SC, Noto Sans, sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">{}</text>"#,
        xml(title)
    );
    for (i, name) in series.iter().enumerate() {
        let x = 10 + 130 * i as u32;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="34" width="10" height="10" fill="{}"/><text x="{}" y="43">{}</text>"#,
            colours[i % 2],
            x + 14,
            xml(name)
        );
    }
    let axis_y = 60;
    for (r, (label, values)) in rows.iter().enumerate() {
        let y = axis_y + 6 + per_row * r as u32;
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            LABEL - 8,
            y + BAR,
            xml(label)
        );
        for (i, value) in values.iter().enumerate() {
            let w = (*value as f64 * scale).round() as u32;
            let by = y + BAR * i as u32;
            let _ = write!(
                svg,
                r#"<rect x="{LABEL}" y="{by}" width="{w}" height="{}" fill="{}"/><text x="{}" y="{}">{value}</text>"#,
                BAR - 2,
                colours[i % 2],
                LABEL + w + 4,
                by + BAR - 3
            );
        }
    }
    let bottom = height - 24;
    let _ = write!(
        svg,
        r##"<line x1="{LABEL}" y1="{axis_y}" x2="{LABEL}" y2="{bottom}" stroke="#333"/><text x="{LABEL}" y="{}" fill="#333">0</text><text x="{}" y="{}" text-anchor="end" fill="#333">{max} tickets</text></svg>"##,
        bottom + 16,
        WIDTH - 20,
        bottom + 16
    );
    svg
}

/// `volume.svg`: new and reopened tickets by category, this period and
/// the one before.
pub fn volume_chart(f: &Figures) -> String {
    let rows: Vec<(String, Vec<u64>)> = f
        .volume
        .by_category
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                vec![r.new + r.reopened, r.previous_new + r.previous_reopened],
            )
        })
        .collect();
    bars(
        "Volume by category",
        &["this period", "period before"],
        &rows,
    )
}

/// `backlog.svg`: open tickets by age at the end of the period.
pub fn backlog_chart(f: &Figures) -> String {
    let b = &f.backlog;
    let rows = [
        ("< 4 h", b.under_4h),
        ("< 24 h", b.under_24h),
        ("< 3 d", b.under_3d),
        ("older", b.older),
    ]
    .into_iter()
    .map(|(l, n)| (l.to_string(), vec![n]))
    .collect::<Vec<_>>();
    bars("Backlog by age", &["open tickets"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reports::figures::Row;

    #[test]
    fn the_svg_holds_every_label_escaped_and_chinese_names_as_text() {
        let mut f = Figures::default();
        f.volume.by_category = vec![
            Row {
                name: "退款".into(),
                new: 3,
                ..Row::default()
            },
            Row {
                name: "<script>x</script>".into(),
                previous_new: 1,
                ..Row::default()
            },
        ];
        let svg = volume_chart(&f);
        assert!(svg.contains(">退款</text>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;x&lt;/script&gt;") && !svg.contains("<script>"));
        assert!(svg.contains("Volume by category") && svg.contains("3 tickets"));
        let md = markdown("Daily report", &f);
        assert!(md.contains("| 退款 | 3 | 0 | 0 | +3 |"), "{md}");
        assert!(
            md.contains("| \\<script\\>x\\</script\\> |") && !md.contains("<script>"),
            "{md}"
        );
        assert_eq!(cell("R&D [x](u) a|b\nc"), "R\\&D \\[x\\]\\(u\\) a\\|b c");
    }
}
