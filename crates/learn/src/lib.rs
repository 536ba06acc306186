//! `tinycode-learn`: learning from labelled text: a classical classifier (hashed TF-IDF over
//! words, word bigrams and character n-grams — `features.rs` — and an
//! averaged passive-aggressive linear model — `linear.rs`). Chosen by the
//! benchmark (`cargo bench -p tinycode-learn --bench learn`, docs/BENCHMARKS.md):
//! it trains on 10,000 tickets in well under a second on one core, predicts
//! in microseconds, and keeps `classes × 2^17` weights whatever the
//! vocabulary.

#![forbid(unsafe_code)]

pub mod calibrate;
pub mod dataset;
pub mod features;
mod linear;
pub mod model;
pub mod saved;
pub mod tickets;

pub(crate) use tinycode_base::fnv;
pub(crate) use tinycode_domain as domain;
pub(crate) use tinycode_log::{projection, store};

use std::collections::BTreeMap;

use features::Idf;
use linear::Linear;

/// Passes over the training set.
const EPOCHS: usize = 8;

/// A trained classifier for one field.
pub struct Classifier {
    pub(crate) labels: Vec<String>,
    /// Training examples per label (same order as `labels`).
    pub(crate) support: Vec<usize>,
    pub(crate) idf: Idf,
    pub(crate) model: Linear,
    /// The temperature its scores are divided by before the softmax
    /// (`calibrate.rs`), fitted on held-out examples; `None` with too few
    /// to hold any out: its confidence is unknown.
    pub(crate) temperature: Option<f32>,
    /// The features it reads (the kept model: always the default).
    pub(crate) features: features::FeatureSet,
}

/// How a classifier is trained: the features, the passes, class weights.
/// [`Variant::DEFAULT`] is the learner's; the others are measured beside
/// it in the learning benchmark (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variant {
    pub name: &'static str,
    pub features: features::FeatureSet,
    pub epochs: usize,
    /// Weigh each class by the inverse of its share of the examples.
    pub class_weights: bool,
}

impl Variant {
    pub const DEFAULT: Self = Self {
        name: "words + word pairs + char 3-5, 8 epochs",
        features: features::FeatureSet::DEFAULT,
        epochs: EPOCHS,
        class_weights: false,
    };
}

/// Examples needed before a fifth of them is held out to fit the
/// temperature (fewer: the confidence is unknown).
const CALIBRATE_FROM: usize = 50;

/// The temperature of a model of `examples`: a model trained on four
/// fifths of them scores the fifth it did not see (every fifth example,
/// so each class is held out in proportion), and the temperature that
/// makes those scores' probabilities most likely is the one kept.
fn held_out_temperature(examples: &[(features::Sparse, usize)], classes: usize) -> Option<f32> {
    if examples.len() < CALIBRATE_FROM {
        return None;
    }
    let (held, rest): (Vec<_>, Vec<_>) = examples.iter().enumerate().partition(|(i, _)| i % 5 == 0);
    let rest: Vec<&(features::Sparse, usize)> = rest.into_iter().map(|(_, e)| e).collect();
    let model = Linear::train(&rest, classes, EPOCHS);
    let held: Vec<(Vec<f32>, usize)> = held
        .into_iter()
        .map(|(_, (x, class))| (model.scores(x), *class))
        .collect();
    Some(calibrate::fit_temperature(&held))
}

/// One prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub label: String,
    /// Score of the best class over the second (0: a tie).
    pub margin: f32,
    /// Training examples the label had.
    pub support: usize,
    /// The calibrated probability that the label is right; `None` when the
    /// model had too few examples to calibrate.
    pub confidence: Option<f32>,
}

impl Classifier {
    /// Train on `(text, label)` pairs; `None` with fewer than two labels.
    pub fn train<'a>(examples: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Self> {
        Self::train_variant(examples, &Variant::DEFAULT)
    }

    /// [`Classifier::train`] as `variant` says.
    pub fn train_variant<'a>(
        examples: impl IntoIterator<Item = (&'a str, &'a str)>,
        variant: &Variant,
    ) -> Option<Self> {
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        let mut labelled = Vec::new();
        for (text, label) in examples {
            let label = label.trim();
            if label.is_empty() {
                continue;
            }
            let next = index.len();
            let class = *index.entry(label).or_insert(next);
            labelled.push((text, class));
        }
        // One label teaches nothing: known before any text is read.
        if index.len() < 2 {
            return None;
        }
        let rows: Vec<_> = labelled
            .into_iter()
            .map(|(text, class)| (features::counts_with(text, &variant.features), class))
            .collect();
        let mut labels = vec![String::new(); index.len()];
        for (label, class) in &index {
            labels[*class] = (*label).to_string();
        }
        let mut support = vec![0usize; labels.len()];
        for (_, class) in &rows {
            support[*class] += 1;
        }
        let counts: Vec<_> = rows.iter().map(|(c, _)| c.clone()).collect();
        let idf = Idf::fit(&counts);
        let examples: Vec<_> = rows
            .into_iter()
            .map(|(c, class)| (idf.weigh(&c), class))
            .collect();
        let temperature = held_out_temperature(&examples, labels.len());
        let n = examples.len() as f32;
        let weights: Vec<f32> = support
            .iter()
            .map(|&s| n / (labels.len() as f32 * s.max(1) as f32))
            .collect();
        let weights = variant.class_weights.then_some(weights.as_slice());
        let model = Linear::train_weighted(&examples, labels.len(), variant.epochs, weights);
        Some(Self {
            labels,
            support,
            idf,
            model,
            temperature,
            features: variant.features,
        })
    }

    pub fn predict(&self, text: &str) -> Prediction {
        let x = self.idf.weigh(&features::counts_with(text, &self.features));
        let scores = self.model.scores(&x);
        let (class, margin) = linear::best_of(&scores);
        Prediction {
            label: self.labels[class].clone(),
            margin,
            support: self.support[class],
            confidence: self
                .temperature
                .map(|t| calibrate::softmax(&scores, t)[class]),
        }
    }

    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Memory the model holds (weights and idf).
    pub fn bytes(&self) -> usize {
        self.model.bytes() + self.idf.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_learns_a_small_intent_set_and_generalises_to_unseen_wording() {
        let train = [
            ("I want my money back for order 123", "refund"),
            ("please refund the payment", "refund"),
            ("refund not received yet", "refund"),
            ("how do I get a refund", "refund"),
            ("where is my parcel", "shipping"),
            ("the package has not arrived", "shipping"),
            ("tracking shows no update for my delivery", "shipping"),
            ("when will my order ship", "shipping"),
            ("I cannot log in to my account", "account"),
            ("reset my password please", "account"),
            ("my account is locked", "account"),
            ("change the email of my account", "account"),
        ];
        let model = Classifier::train(train.iter().copied()).unwrap();
        assert_eq!(model.labels().len(), 3);
        for (text, label) in train {
            assert_eq!(model.predict(text).label, label, "{text}");
        }
        assert_eq!(model.predict("refunds for order 99812").label, "refund");
        assert_eq!(model.predict("parcel delivery is late").label, "shipping");
        assert_eq!(model.predict("forgot my password").label, "account");
        assert_eq!(model.predict("退款").support, 4);
    }

    #[test]
    fn a_model_with_enough_examples_says_how_sure_it_is() {
        let small = [
            ("refund please", "refund"),
            ("where is my parcel", "shipping"),
        ];
        let model = Classifier::train(small.iter().copied()).unwrap();
        assert_eq!(
            model.predict("refund").confidence,
            None,
            "too few to calibrate"
        );

        // Sixty rows: clear refunds and parcels, and a third of each class
        // that says both (the classes overlap there).
        let mut rows = Vec::new();
        for i in 0..20 {
            rows.push((format!("please refund order {i}, the money back"), "refund"));
            rows.push((
                format!("parcel {i} has not arrived, tracking is stuck"),
                "shipping",
            ));
            let both = format!("order {i}: parcel lost, refund or send again");
            rows.push((both, if i % 2 == 0 { "refund" } else { "shipping" }));
        }
        let model = Classifier::train(rows.iter().map(|(t, l)| (t.as_str(), *l))).unwrap();
        assert!(model.temperature.is_some());
        let clear = model.predict("please refund the money back");
        let mixed = model.predict("parcel lost, refund or send again");
        let (clear, mixed) = (clear.confidence.unwrap(), mixed.confidence.unwrap());
        assert!(clear > 0.5 && clear <= 1.0, "{clear}");
        assert!(
            mixed < clear,
            "a text of both classes is less sure: {mixed} vs {clear}"
        );
    }

    #[test]
    fn one_label_is_not_enough_to_learn() {
        assert!(Classifier::train([("a", "x"), ("b", "x")]).is_none());
        assert!(Classifier::train([("a", ""), ("b", " ")]).is_none());
    }
}
