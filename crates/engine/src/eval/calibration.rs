//! How far a model's confidence can be trusted, per field: the expected
//! calibration error and reliability table of the decisions that came with
//! a confidence, accuracy at coverage (the decisions at or above each
//! threshold: how many, how often right), and the lowest threshold whose
//! decisions reach a target accuracy — the `triage.reviewBelow` to set.

use tinycode_shared::proto::{CoveragePoint, FieldReport, ReliabilityBin};

use crate::learn::calibrate::{expected_calibration_error, reliability};

/// The thresholds the coverage table lists.
const THRESHOLDS: [f32; 8] = [0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];

/// The target accuracy when none is asked for.
pub const DEFAULT_TARGET: f64 = 0.98;

/// Fill `report`'s calibration from `decisions` (confidence, right).
pub fn calibrate(report: &mut FieldReport, decisions: &[(f32, bool)], target: f64) {
    report.target_accuracy = target;
    report.with_confidence = decisions.len() as u32;
    if decisions.is_empty() {
        return;
    }
    report.ece = expected_calibration_error(decisions);
    report.reliability = reliability(decisions)
        .into_iter()
        .map(|b| ReliabilityBin {
            from: b.from,
            to: b.to,
            count: b.count as u32,
            confidence: b.confidence,
            accuracy: b.accuracy,
        })
        .collect();
    report.coverage = THRESHOLDS
        .iter()
        .map(|&t| at_or_above(decisions, t))
        .collect();
    if let Some(point) = lowest_reaching(decisions, target) {
        report.threshold = point.threshold;
        report.threshold_coverage = point.coverage;
        report.reached = true;
    }
}

fn at_or_above(decisions: &[(f32, bool)], threshold: f32) -> CoveragePoint {
    let kept: Vec<bool> = decisions
        .iter()
        .filter(|(c, _)| *c >= threshold)
        .map(|(_, right)| *right)
        .collect();
    let right = kept.iter().filter(|r| **r).count();
    CoveragePoint {
        threshold: f64::from(threshold),
        coverage: kept.len() as f64 / decisions.len() as f64,
        accuracy: if kept.is_empty() {
            0.0
        } else {
            right as f64 / kept.len() as f64
        },
        decisions: kept.len() as u32,
    }
}

/// The lowest confidence threshold (one of the decisions' own) whose
/// decisions at or above it are right at least `target` of the time: the
/// most coverage at that accuracy.
fn lowest_reaching(decisions: &[(f32, bool)], target: f64) -> Option<CoveragePoint> {
    let mut sorted = decisions.to_vec();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut right, mut best) = (0usize, None);
    for (i, (confidence, ok)) in sorted.iter().enumerate() {
        right += usize::from(*ok);
        let n = i + 1;
        // Only where the next decision is less sure: a threshold keeps
        // every decision of its own confidence.
        let boundary = sorted.get(n).is_none_or(|next| next.0 < *confidence);
        if boundary && right as f64 / n as f64 >= target {
            best = Some(CoveragePoint {
                threshold: f64::from(*confidence),
                coverage: n as f64 / sorted.len() as f64,
                accuracy: right as f64 / n as f64,
                decisions: n as u32,
            });
        }
    }
    best
}

/// The calibration part of a field's section in `report.md`.
pub fn markdown(md: &mut String, f: &FieldReport) {
    use std::fmt::Write;
    if f.with_confidence == 0 {
        let _ = writeln!(
            md,
            "\nConfidence: none reported for this field (the model gives none), so no threshold can be set.\n"
        );
        return;
    }
    let _ = writeln!(
        md,
        "\n### Calibration\n\n{} decisions with a confidence; expected calibration error **{:.4}**.\n",
        f.with_confidence, f.ece
    );
    let _ = writeln!(md, "![reliability](reliability-{}.png)\n", f.field);
    let _ = writeln!(
        md,
        "| confidence | decisions | mean confidence | accuracy |"
    );
    let _ = writeln!(md, "| --- | --- | --- | --- |");
    for b in f.reliability.iter().filter(|b| b.count > 0) {
        let _ = writeln!(
            md,
            "| [{:.1}, {:.1}) | {} | {:.3} | {:.3} |",
            b.from, b.to, b.count, b.confidence, b.accuracy
        );
    }
    let _ = writeln!(md, "\n| at or above | coverage | accuracy |");
    let _ = writeln!(md, "| --- | --- | --- |");
    for p in &f.coverage {
        let _ = writeln!(
            md,
            "| {:.2} | {:.1} % ({}) | {:.2} % |",
            p.threshold,
            p.coverage * 100.0,
            p.decisions,
            p.accuracy * 100.0
        );
    }
    let _ = if f.reached {
        writeln!(
            md,
            "\nFor {:.2} % accuracy: confidence ≥ **{:.3}**, covering {:.1} % of the decisions (`\"triage\": {{\"reviewBelow\": {{\"{}\": {:.3}}}}}` sends the rest to review).",
            f.target_accuracy * 100.0,
            f.threshold,
            f.threshold_coverage * 100.0,
            f.field,
            f.threshold
        )
    } else {
        writeln!(
            md,
            "\nNo confidence threshold reaches {:.2} % accuracy on this set.",
            f.target_accuracy * 100.0
        )
    };
}

/// The reliability diagram as a PNG: per bin, the accuracy (a bar) against
/// the mean confidence (a dark mark); a calibrated model's bars meet
/// their marks on the diagonal.
pub fn chart(path: &std::path::Path, f: &FieldReport) -> Result<(), String> {
    use plotters::prelude::*;
    const W: i32 = 400;
    const H: i32 = 300;
    let root = BitMapBackend::new(path, (W as u32, H as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let bins = f.reliability.len().max(1) as i32;
    let width = W / bins;
    let y = |v: f64| H - (v.clamp(0.0, 1.0) * f64::from(H)) as i32;
    for (i, b) in f.reliability.iter().enumerate() {
        let x0 = i as i32 * width;
        if b.count == 0 {
            continue;
        }
        let bar = [(x0 + 2, y(b.accuracy)), (x0 + width - 2, H)];
        root.draw(&Rectangle::new(bar, RGBColor(70, 130, 180).filled()))
            .map_err(|e| e.to_string())?;
        let mark = [
            (x0 + 2, y(b.confidence) - 2),
            (x0 + width - 2, y(b.confidence) + 2),
        ];
        root.draw(&Rectangle::new(mark, BLACK.filled()))
            .map_err(|e| e.to_string())?;
    }
    // The diagonal: perfect calibration.
    root.draw(&PathElement::new(
        vec![(0, H), (W, 0)],
        RGBColor(200, 40, 40),
    ))
    .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_is_the_lowest_that_keeps_the_target_accuracy() {
        // Sure and right, then less sure and sometimes wrong.
        let decisions = [
            (0.99, true),
            (0.97, true),
            (0.95, true),
            (0.9, true),
            (0.8, false),
            (0.7, true),
            (0.6, false),
            (0.55, false),
        ];
        let mut r = FieldReport::default();
        calibrate(&mut r, &decisions, 0.98);
        assert!(r.reached);
        assert!((r.threshold - 0.9).abs() < 1e-6, "{}", r.threshold);
        assert!((r.threshold_coverage - 0.5).abs() < 1e-9);
        let at = |t: f64| {
            r.coverage
                .iter()
                .find(|p| (p.threshold - t).abs() < 1e-6)
                .unwrap()
        };
        assert_eq!(at(0.0).decisions, 8);
        assert!((at(0.0).accuracy - 5.0 / 8.0).abs() < 1e-9);
        assert!((at(0.8).accuracy - 0.8).abs() < 1e-9);
        assert_eq!(r.reliability.iter().map(|b| b.count).sum::<u32>(), 8);
        assert!(r.ece > 0.0);
        // No threshold reaches a target nothing meets.
        let mut none = FieldReport::default();
        calibrate(&mut none, &[(0.9, false), (0.8, false)], 0.98);
        assert!(!none.reached);
        // No confidence at all: only the target is said.
        let mut empty = FieldReport::default();
        calibrate(&mut empty, &[], 0.98);
        assert_eq!((empty.with_confidence, empty.coverage.len()), (0, 0));
    }
}
