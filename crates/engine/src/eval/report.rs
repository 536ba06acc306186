//! An evaluation's files: `report.md` (the figures, a confusion table per
//! field, per-class precision and recall) and `confusion-<field>.png` (the
//! matrix as shaded cells, row-normalised: expected rows top to bottom and
//! predicted columns left to right in the Markdown table's order; no text
//! is drawn, so no font is needed).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use tinycode_shared::proto::{EvalReport, FieldReport};

/// Cell size of the chart, pixels.
const CELL: u32 = 24;

pub fn markdown(r: &EvalReport) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Evaluation {}\n", r.eval_id);
    let _ = writeln!(md, "- model: `{}`", r.model);
    let _ = writeln!(md, "- labels: `{}`", r.source);
    let _ = writeln!(
        md,
        "- rows: {} measured of {}, {} run(s) each{}",
        r.measured,
        r.rows,
        r.runs,
        if r.partial {
            " (**partial**: stopped early)"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "- failed triage turns: {}", r.failed);
    let _ = writeln!(
        md,
        "- latency per ticket: p50 {:.0} ms, p95 {:.0} ms",
        r.latency_p50_ms, r.latency_p95_ms
    );
    if r.input_tokens + r.output_tokens > 0 {
        let per = f64::from(r.measured.max(1) * r.runs.max(1));
        let _ = writeln!(
            md,
            "- tokens per ticket: {:.0} in, {:.0} out",
            r.input_tokens as f64 / per,
            r.output_tokens as f64 / per
        );
    }
    if r.cost_per_ticket > 0.0 {
        let _ = writeln!(
            md,
            "- cost per ticket: {:.6} (at the prices given)",
            r.cost_per_ticket
        );
    }
    let _ = writeln!(
        md,
        "- every labelled field right in every run (pass^{}): {:.1} %\n",
        r.runs,
        r.all_fields_pass_k * 100.0
    );
    let _ = writeln!(
        md,
        "| field | scored | accuracy | macro-F1 | pass^{} |",
        r.runs
    );
    let _ = writeln!(md, "| --- | --- | --- | --- | --- |");
    for f in &r.fields {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} % | {:.3} | {:.1} % |",
            f.field,
            f.scored,
            f.accuracy * 100.0,
            f.macro_f1,
            f.pass_k * 100.0
        );
    }
    for f in &r.fields {
        field_section(&mut md, f);
    }
    md
}

fn field_section(md: &mut String, f: &FieldReport) {
    let _ = writeln!(md, "\n## {}\n", f.field);
    let _ = writeln!(md, "![confusion matrix](confusion-{}.png)\n", f.field);
    let _ = writeln!(md, "| expected \\ predicted | {} |", f.labels.join(" | "));
    let _ = writeln!(md, "|{}", " --- |".repeat(f.labels.len() + 1));
    for row in &f.confusion {
        let counts: Vec<String> = row.counts.iter().map(u32::to_string).collect();
        let _ = writeln!(md, "| {} | {} |", row.expected, counts.join(" | "));
    }
    let _ = writeln!(md, "\n| class | support | precision | recall | F1 |");
    let _ = writeln!(md, "| --- | --- | --- | --- | --- |");
    for c in &f.classes {
        let _ = writeln!(
            md,
            "| {} | {} | {:.3} | {:.3} | {:.3} |",
            c.label, c.support, c.precision, c.recall, c.f1
        );
    }
    super::calibration::markdown(md, f);
}

/// The confusion matrix as a PNG.
pub fn chart(path: &Path, f: &FieldReport) -> Result<(), String> {
    let cols = f.labels.len().max(1) as u32;
    let rows = f.confusion.len().max(1) as u32;
    let root = BitMapBackend::new(path, (cols * CELL, rows * CELL)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    for (y, row) in f.confusion.iter().enumerate() {
        let total: u32 = row.counts.iter().sum();
        for (x, count) in row.counts.iter().enumerate() {
            let share = if total == 0 {
                0.0
            } else {
                f64::from(*count) / f64::from(total)
            };
            let diagonal = x == y;
            // Right answers shade green, wrong ones red; darker is more.
            let fade = |full: u8| (255.0 - share * (255.0 - f64::from(full))) as u8;
            let colour = if diagonal {
                RGBColor(fade(30), fade(140), fade(60))
            } else {
                RGBColor(fade(200), fade(40), fade(40))
            };
            let (x0, y0) = ((x as u32 * CELL) as i32, (y as u32 * CELL) as i32);
            root.draw(&Rectangle::new(
                [(x0, y0), (x0 + CELL as i32 - 1, y0 + CELL as i32 - 1)],
                colour.filled(),
            ))
            .map_err(|e| e.to_string())?;
        }
    }
    root.present().map_err(|e| e.to_string())
}

/// Write `report.md` and one chart per field into `dir`.
pub fn write(dir: &Path, r: &EvalReport) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("report.md"), markdown(r)).map_err(|e| e.to_string())?;
    for f in &r.fields {
        chart(&dir.join(format!("confusion-{}.png", f.field)), f)?;
        if f.with_confidence > 0 {
            let path = dir.join(format!("reliability-{}.png", f.field));
            super::calibration::chart(&path, f)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::metrics::FieldOutcomes;

    #[test]
    fn the_report_files_hold_the_figures_and_a_png() {
        let field = FieldOutcomes {
            rows: vec![
                ("退款".into(), vec![Some("退款".into())]),
                ("物流".into(), vec![Some("退款".into())]),
            ],
            confident: vec![(0.9, true), (0.6, false)],
        }
        .report("category", 0.98);
        let report = EvalReport {
            eval_id: "ev1".into(),
            model: "offline".into(),
            rows: 2,
            measured: 2,
            runs: 1,
            fields: vec![field],
            ..EvalReport::default()
        };
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &report).unwrap();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| category | 2 | 50.0 % |"), "{md}");
        assert!(md.contains("| 物流 | 0 | 1 | 0 |"), "{md}");
        let png = std::fs::read(dir.path().join("confusion-category.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // The calibration: a reliability table, coverage, the threshold.
        assert!(md.contains("expected calibration error"), "{md}");
        assert!(
            md.contains("confidence ≥ **0.900**, covering 50.0 %"),
            "{md}"
        );
        let png = std::fs::read(dir.path().join("reliability-category.png")).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
