//! Confidence from a linear model's scores: the softmax of the scores
//! divided by a **temperature** fitted on held-out examples (temperature
//! scaling, Guo et al. 2017: one parameter, so it cannot overfit a small
//! desk, and it never changes which class wins), and the measures that
//! say whether a confidence can be trusted — the expected calibration
//! error and its reliability table.

/// Bins of the reliability table and of the expected calibration error.
pub const BINS: usize = 10;

/// The probability of each class: softmax of `scores / temperature`.
pub fn softmax(scores: &[f32], temperature: f32) -> Vec<f32> {
    let t = temperature.max(1e-6);
    let top = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = scores.iter().map(|s| ((s - top) / t).exp()).collect();
    let sum: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

/// The mean negative log-likelihood of the right classes at `temperature`.
fn nll(held_out: &[(Vec<f32>, usize)], temperature: f32) -> f64 {
    let total: f64 = held_out
        .iter()
        .map(|(scores, right)| {
            let p = softmax(scores, temperature)[*right];
            -f64::from(p.max(1e-12)).ln()
        })
        .sum();
    total / held_out.len().max(1) as f64
}

/// The temperature that makes the held-out examples' probabilities most
/// likely: a golden-section search over its logarithm (the likelihood is
/// unimodal in it), between 1/100 and 100. No examples: 1.
pub fn fit_temperature(held_out: &[(Vec<f32>, usize)]) -> f32 {
    if held_out.is_empty() {
        return 1.0;
    }
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut lo, mut hi) = ((0.01f64).ln(), 100f64.ln());
    let at = |log_t: f64| nll(held_out, log_t.exp() as f32);
    let mut a = hi - ratio * (hi - lo);
    let mut b = lo + ratio * (hi - lo);
    let (mut fa, mut fb) = (at(a), at(b));
    for _ in 0..60 {
        if fa <= fb {
            hi = b;
            b = a;
            fb = fa;
            a = hi - ratio * (hi - lo);
            fa = at(a);
        } else {
            lo = a;
            a = b;
            fa = fb;
            b = lo + ratio * (hi - lo);
            fb = at(b);
        }
    }
    ((lo + hi) / 2.0).exp() as f32
}

/// One bin of a reliability table: decisions whose confidence fell in
/// `[from, to)`, how sure they were on average and how often right.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    pub from: f32,
    pub to: f32,
    pub count: usize,
    pub confidence: f64,
    pub accuracy: f64,
}

/// The reliability table of `(confidence, right)` decisions in [`BINS`]
/// equal-width bins (empty bins included, with zeros).
pub fn reliability(decisions: &[(f32, bool)]) -> Vec<Bin> {
    let mut bins: Vec<Bin> = (0..BINS)
        .map(|i| Bin {
            from: i as f32 / BINS as f32,
            to: (i + 1) as f32 / BINS as f32,
            count: 0,
            confidence: 0.0,
            accuracy: 0.0,
        })
        .collect();
    for &(confidence, right) in decisions {
        let i = ((confidence.clamp(0.0, 1.0) * BINS as f32) as usize).min(BINS - 1);
        let bin = &mut bins[i];
        bin.count += 1;
        bin.confidence += f64::from(confidence);
        bin.accuracy += f64::from(u8::from(right));
    }
    for bin in &mut bins {
        if bin.count > 0 {
            bin.confidence /= bin.count as f64;
            bin.accuracy /= bin.count as f64;
        }
    }
    bins
}

/// The expected calibration error: the gap between confidence and
/// accuracy in each bin, weighted by the bin's share of the decisions.
pub fn expected_calibration_error(decisions: &[(f32, bool)]) -> f64 {
    let n = decisions.len().max(1) as f64;
    reliability(decisions)
        .iter()
        .map(|b| b.count as f64 / n * (b.confidence - b.accuracy).abs())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic normal draws (Box–Muller over the learner's SplitMix).
    struct Normal(crate::linear::SplitMix);

    impl Normal {
        fn uniform(&mut self) -> f64 {
            (self.0.next() >> 11) as f64 / (1u64 << 53) as f64
        }

        fn draw(&mut self) -> f64 {
            let (u, v) = (self.uniform().max(1e-12), self.uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
    }

    /// Two classes whose one feature overlaps: x ~ N(±1, 1), so the true
    /// posterior is logistic in 2x. A model that scores ±`scale`·x is
    /// overconfident for `scale` > 1 (as a margin-trained linear model
    /// is); its right temperature is `scale`.
    fn overlapping(n: usize, scale: f32, seed: u64) -> Vec<(Vec<f32>, usize)> {
        let mut rng = Normal(crate::linear::SplitMix(seed));
        (0..n)
            .map(|i| {
                let class = i % 2;
                let mean = if class == 1 { 1.0 } else { -1.0 };
                let x = (mean + rng.draw()) as f32;
                (vec![-scale * x, scale * x], class)
            })
            .collect()
    }

    fn decisions(set: &[(Vec<f32>, usize)], temperature: f32) -> Vec<(f32, bool)> {
        set.iter()
            .map(|(scores, right)| {
                let p = softmax(scores, temperature);
                let best = if p[1] > p[0] { 1 } else { 0 };
                (p[best], best == *right)
            })
            .collect()
    }

    #[test]
    fn temperature_scaling_calibrates_an_overconfident_model_on_overlapping_classes() {
        let held_out = overlapping(20_000, 6.0, 1);
        let test = overlapping(20_000, 6.0, 2);
        let before = expected_calibration_error(&decisions(&test, 1.0));
        let t = fit_temperature(&held_out);
        let after = expected_calibration_error(&decisions(&test, t));
        assert!((t - 6.0).abs() < 0.6, "fitted temperature {t}, right one 6");
        assert!(after < before, "ECE {before:.4} → {after:.4}");
        assert!(after < 0.05, "ECE after calibration {after:.4}");
        assert!(
            before > 0.1,
            "the raw model is overconfident: ECE {before:.4}"
        );
    }

    #[test]
    fn temperature_never_changes_the_winner() {
        let scores = [0.3f32, 2.5, -1.0, 2.4];
        for t in [0.05, 0.5, 1.0, 7.0, 90.0] {
            let p = softmax(&scores, t);
            let best = (0..4).max_by(|a, b| p[*a].total_cmp(&p[*b])).unwrap();
            assert_eq!(best, 1, "at {t}: {p:?}");
            assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn the_reliability_table_bins_by_confidence() {
        let table = reliability(&[(0.95, true), (0.92, false), (0.55, true), (1.0, true)]);
        assert_eq!(table.len(), BINS);
        assert_eq!(table[9].count, 3, "1.0 falls in the last bin");
        assert!((table[9].accuracy - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(table[5].count, 1);
        assert_eq!(table[0].count, 0);
        let ece = expected_calibration_error(&[(0.9, true), (0.9, false)]);
        assert!((ece - 0.4).abs() < 1e-6, "{ece}");
        assert_eq!(fit_temperature(&[]), 1.0);
    }
}
