//! A multiclass linear classifier over sparse features, trained with the
//! averaged multiclass passive-aggressive rule (PA-I; Crammer et al. 2006):
//! for each example, when the best wrong class scores within a margin of 1
//! of the right one, move both by the smallest step that fixes it (capped at
//! `C`). Averaging the weights over every step gives the stability of a
//! linear SVM at the cost of a perceptron; a few shuffled epochs suffice.

use super::features::{DIMS, Sparse};

/// Aggressiveness cap (PA-I's C).
const C: f32 = 0.5;

pub struct Linear {
    pub(crate) classes: usize,
    /// Feature-major, `weights[feature * classes + class]`: one feature's
    /// weights for every class sit together, so scoring all classes reads
    /// each feature's row once.
    pub(crate) weights: Vec<f32>,
}

/// Every class's score for `x`, into `out`.
fn scores(weights: &[f32], classes: usize, x: &Sparse, out: &mut [f32]) {
    out.fill(0.0);
    for (i, v) in x {
        let row = &weights[*i as usize * classes..(*i as usize + 1) * classes];
        for (o, w) in out.iter_mut().zip(row) {
            *o += w * v;
        }
    }
}

/// A small deterministic generator for the epoch shuffles (and the
/// calibration tests' draws).
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Linear {
    /// Train on `(features, class)` pairs, classes `0..classes`.
    pub fn train<E: std::borrow::Borrow<(Sparse, usize)>>(
        examples: &[E],
        classes: usize,
        epochs: usize,
    ) -> Self {
        Self::train_weighted(examples, classes, epochs, None)
    }

    /// [`Linear::train`] with a weight per class scaling how far an
    /// example of it may move the weights (class weights: rare classes
    /// count as much as common ones).
    pub fn train_weighted<E: std::borrow::Borrow<(Sparse, usize)>>(
        examples: &[E],
        classes: usize,
        epochs: usize,
        class_weights: Option<&[f32]>,
    ) -> Self {
        let mut w = vec![0f32; classes * DIMS];
        // Sum over steps of each update × its step (the averaging trick:
        // average = w - u / steps).
        let mut u = vec![0f32; classes * DIMS];
        let mut order: Vec<usize> = (0..examples.len()).collect();
        let mut rng = SplitMix(0x7417_c0de);
        let mut step = 1f32;
        let mut out = vec![0f32; classes];
        for _ in 0..epochs {
            for i in (1..order.len()).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            for &k in &order {
                let (x, y) = examples[k].borrow();
                scores(&w, classes, x, &mut out);
                let right = out[*y];
                let (wrong, best) = out.iter().enumerate().filter(|(c, _)| c != y).fold(
                    (usize::MAX, f32::NEG_INFINITY),
                    |a, (c, s)| {
                        if *s > a.1 { (c, *s) } else { a }
                    },
                );
                let loss = 1.0 - (right - best);
                if wrong != usize::MAX && loss > 0.0 {
                    let norm: f32 = 2.0 * x.iter().map(|(_, v)| v * v).sum::<f32>();
                    let c = C * class_weights.map_or(1.0, |w| w[*y]);
                    let tau = if norm > 0.0 {
                        (loss / norm).min(c)
                    } else {
                        0.0
                    };
                    for (i, v) in x {
                        let d = tau * v;
                        let row = *i as usize * classes;
                        let (a, b) = (row + *y, row + wrong);
                        w[a] += d;
                        u[a] += step * d;
                        w[b] -= d;
                        u[b] -= step * d;
                    }
                }
                step += 1.0;
            }
        }
        for (wi, ui) in w.iter_mut().zip(&u) {
            *wi -= ui / step;
        }
        Self {
            classes,
            weights: w,
        }
    }

    /// Every class's score for `x`.
    pub fn scores(&self, x: &Sparse) -> Vec<f32> {
        let mut out = vec![0f32; self.classes];
        scores(&self.weights, self.classes, x, &mut out);
        out
    }

    pub fn bytes(&self) -> usize {
        self.weights.len() * std::mem::size_of::<f32>()
    }
}

/// The best class of `out` and its margin over the second best.
pub fn best_of(out: &[f32]) -> (usize, f32) {
    let mut best = (0usize, f32::NEG_INFINITY);
    let mut second = f32::NEG_INFINITY;
    for (c, &s) in out.iter().enumerate() {
        if s > best.1 {
            second = best.1;
            best = (c, s);
        } else if s > second {
            second = s;
        }
    }
    let margin = if second.is_finite() {
        best.1 - second
    } else {
        best.1
    };
    (best.0, margin)
}
