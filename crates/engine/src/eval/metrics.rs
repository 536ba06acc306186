//! The report's arithmetic: per field accuracy, macro-F1, the confusion
//! matrix, per-class precision and recall, and pass^k (a row is right when
//! every one of its K runs is right, as τ-bench reports it).

use std::collections::BTreeMap;

use tinycode_shared::proto::{ClassReport, ConfusionRow, FieldReport};

/// One field's outcomes: for each row, its expected label and what each
/// run predicted (`None`: nothing, such as a failed turn).
#[derive(Debug, Default, Clone)]
pub struct FieldOutcomes {
    pub rows: Vec<(String, Vec<Option<String>>)>,
    /// Each decision that came with a confidence: (confidence, right).
    pub confident: Vec<(f32, bool)>,
}

/// Column of the confusion matrix for predictions outside the labels.
pub const OTHER: &str = "(other)";

impl FieldOutcomes {
    /// The field's report; its calibration names the lowest confidence
    /// threshold that reaches `target` accuracy.
    pub fn report(&self, field: &str, target: f64) -> FieldReport {
        let mut report = self.counts(field);
        super::calibration::calibrate(&mut report, &self.confident, target);
        report
    }

    fn counts(&self, field: &str) -> FieldReport {
        // Labels: every expected one, then any other predicted one, sorted.
        let mut labels: Vec<String> = self
            .rows
            .iter()
            .map(|(e, _)| e.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let tally = self.tally(&labels);
        let classes = class_reports(&tally.matrix, &labels);
        let macro_f1 = if classes.is_empty() {
            0.0
        } else {
            classes.iter().map(|c| c.f1).sum::<f64>() / classes.len() as f64
        };
        let confusion = tally
            .matrix
            .into_iter()
            .zip(&labels)
            .map(|(counts, expected)| ConfusionRow {
                expected: expected.clone(),
                counts,
            })
            .collect();
        labels.push(OTHER.into());
        FieldReport {
            field: field.into(),
            scored: tally.scored,
            accuracy: ratio(tally.right, tally.scored),
            macro_f1,
            labels,
            confusion,
            classes,
            pass_k: ratio(tally.rows_all_right, self.rows.len() as u32),
            ..FieldReport::default()
        }
    }

    /// Count every run's prediction against its row's label.
    fn tally(&self, labels: &[String]) -> Tally {
        let position: BTreeMap<&str, usize> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.as_str(), i))
            .collect();
        let n = labels.len();
        let mut tally = Tally {
            matrix: vec![vec![0u32; n + 1]; n],
            scored: 0,
            right: 0,
            rows_all_right: 0,
        };
        for (expected, runs) in &self.rows {
            let e = position[expected.as_str()];
            let mut all = !runs.is_empty();
            for predicted in runs {
                tally.scored += 1;
                let p = predicted
                    .as_deref()
                    .and_then(|p| position.get(p).copied())
                    .unwrap_or(n);
                tally.matrix[e][p] += 1;
                if p == e {
                    tally.right += 1;
                } else {
                    all = false;
                }
            }
            if all {
                tally.rows_all_right += 1;
            }
        }
        tally
    }
}

/// One field's predictions, counted.
struct Tally {
    /// matrix[expected][predicted], predicted n (the label count) = other.
    matrix: Vec<Vec<u32>>,
    /// Predictions counted (one per run of each row).
    scored: u32,
    /// Predictions equal to their row's label.
    right: u32,
    /// Rows whose every run was right.
    rows_all_right: u32,
}

/// `a / b`; 0 when `b` is 0.
fn ratio(a: u32, b: u32) -> f64 {
    if b == 0 {
        0.0
    } else {
        f64::from(a) / f64::from(b)
    }
}

/// Precision, recall and F1 of each label, from the confusion matrix.
fn class_reports(matrix: &[Vec<u32>], labels: &[String]) -> Vec<ClassReport> {
    let n = labels.len();
    (0..n)
        .map(|c| {
            let tp = matrix[c][c];
            let predicted: u32 = (0..n).map(|r| matrix[r][c]).sum();
            let support: u32 = matrix[c].iter().sum();
            let precision = ratio(tp, predicted);
            let recall = ratio(tp, support);
            let f1 = if precision + recall == 0.0 {
                0.0
            } else {
                2.0 * precision * recall / (precision + recall)
            };
            ClassReport {
                label: labels[c].clone(),
                support,
                precision,
                recall,
                f1,
            }
        })
        .collect()
}

/// p-th percentile (0–100) of `values` by nearest rank; 0 when empty.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcomes(rows: &[(&str, &[Option<&str>])]) -> FieldOutcomes {
        FieldOutcomes {
            rows: rows
                .iter()
                .map(|(e, runs)| {
                    (
                        e.to_string(),
                        runs.iter().map(|p| p.map(String::from)).collect(),
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_hand_made_set_gives_the_known_matrix_and_scores() {
        // 4 refund rows: 3 right, 1 called shipping. 2 shipping rows: 1
        // right, 1 with no answer.
        let f = outcomes(&[
            ("refund", &[Some("refund")]),
            ("refund", &[Some("refund")]),
            ("refund", &[Some("refund")]),
            ("refund", &[Some("shipping")]),
            ("shipping", &[Some("shipping")]),
            ("shipping", &[None]),
        ])
        .report("category", 0.98);
        assert_eq!(f.labels, ["refund", "shipping", OTHER]);
        assert_eq!(f.confusion[0].counts, [3, 1, 0]);
        assert_eq!(f.confusion[1].counts, [0, 1, 1]);
        assert_eq!(f.scored, 6);
        assert!((f.accuracy - 4.0 / 6.0).abs() < 1e-12);
        // refund: P 3/3, R 3/4; shipping: P 1/2, R 1/2.
        let (r, s) = (&f.classes[0], &f.classes[1]);
        assert_eq!((r.precision, r.recall, r.support), (1.0, 0.75, 4));
        assert_eq!((s.precision, s.recall, s.support), (0.5, 0.5, 2));
        let f1_refund = 2.0 * 0.75 / 1.75;
        assert!((f.macro_f1 - (f1_refund + 0.5) / 2.0).abs() < 1e-12);
        assert!(
            (f.pass_k - f.accuracy).abs() < 1e-12,
            "one run: pass^1 = accuracy"
        );
    }

    #[test]
    fn pass_k_needs_every_run_right() {
        let f = outcomes(&[
            ("P1", &[Some("P1"), Some("P1"), Some("P1")]),
            ("P1", &[Some("P1"), Some("P2"), Some("P1")]),
            ("P2", &[Some("P2"), Some("P2"), Some("P2")]),
            ("P2", &[None, None, None]),
        ])
        .report("priority", 0.98);
        assert_eq!(f.scored, 12);
        assert!((f.accuracy - 8.0 / 12.0).abs() < 1e-12);
        assert!((f.pass_k - 0.5).abs() < 1e-12);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&mut v, 50.0), 3.0);
        assert_eq!(percentile(&mut v, 95.0), 5.0);
        assert_eq!(percentile(&mut [], 50.0), 0.0);
    }
}
