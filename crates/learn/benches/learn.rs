//! Learning benchmark (not a test): `cargo bench -p tinycode-learn --bench learn`.
//!
//! - intent accuracy on the Bitext customer-support test split, training on
//!   its train split (`../shared/datasets/bitext-customer-support/`);
//! - training time on 10,000 labelled rows (the train split drawn with
//!   replacement, deterministic) on one core;
//! - prediction time per ticket and the model's memory.
//!
//! Exits 1 when a target is missed. Figures go to docs/BENCHMARKS.md.

// A benchmark binary: any failure aborts the run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use tinycode_learn::{Classifier, dataset};

fn load(name: &str) -> Vec<(String, String)> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/datasets/bitext-customer-support")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    dataset::csv(&text)
        .unwrap()
        .into_iter()
        .map(|r| (dataset::text_of(&r), r["intent"].clone()))
        .collect()
}

fn main() {
    let train = load("train.csv");
    let test = load("test.csv");
    let mut missed = false;
    let mut check = |what: &str, ok: bool| {
        println!("  {} {what}", if ok { "✓" } else { "✗" });
        missed |= !ok;
    };

    let started = Instant::now();
    let model = Classifier::train(train.iter().map(|(t, l)| (t.as_str(), l.as_str()))).unwrap();
    let trained = started.elapsed();
    let right = test
        .iter()
        .filter(|(t, l)| model.predict(t).label == *l)
        .count();
    let accuracy = right as f64 / test.len() as f64;
    println!(
        "bitext intents: {} train rows, {} test rows, {} intents; trained in {:.0} ms",
        train.len(),
        test.len(),
        model.labels().len(),
        trained.as_secs_f64() * 1000.0
    );
    println!(
        "  accuracy {:.2} % ({right}/{}) (baseline TF-IDF + linear SVM 99.78 %)",
        accuracy * 100.0,
        test.len()
    );
    check("intent accuracy ≥ 99.5 %", accuracy >= 0.995);

    // How far its confidence can be trusted (`calibrate.rs`).
    let decisions: Vec<(f32, bool)> = test
        .iter()
        .map(|(t, l)| {
            let p = model.predict(t);
            (p.confidence.unwrap_or(0.0), p.label == *l)
        })
        .collect();
    let ece = tinycode_learn::calibrate::expected_calibration_error(&decisions);
    println!("  expected calibration error {ece:.4}; reliability (bin: n, confidence, accuracy):");
    for bin in tinycode_learn::calibrate::reliability(&decisions) {
        if bin.count > 0 {
            println!(
                "    [{:.1}, {:.1}): {}, {:.3}, {:.3}",
                bin.from, bin.to, bin.count, bin.confidence, bin.accuracy
            );
        }
    }
    for threshold in [0.5f32, 0.8, 0.9, 0.95, 0.99] {
        let kept: Vec<&(f32, bool)> = decisions.iter().filter(|(c, _)| *c >= threshold).collect();
        let right = kept.iter().filter(|(_, r)| *r).count();
        println!(
            "  at confidence ≥ {threshold}: coverage {:.1} %, accuracy {:.2} %",
            kept.len() as f64 * 100.0 / decisions.len() as f64,
            right as f64 * 100.0 / kept.len().max(1) as f64
        );
    }
    check("expected calibration error ≤ 0.05", ece <= 0.05);

    // 10,000 rows drawn from the train split (a fixed LCG), one thread.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let big: Vec<&(String, String)> = (0..10_000)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            &train[(seed >> 33) as usize % train.len()]
        })
        .collect();
    let started = Instant::now();
    let model = Classifier::train(big.iter().map(|(t, l)| (t.as_str(), l.as_str()))).unwrap();
    let trained = started.elapsed();
    println!(
        "10,000 rows: trained in {:.2} s; model {:.1} MiB",
        trained.as_secs_f64(),
        model.bytes() as f64 / (1 << 20) as f64
    );
    check(
        "training on 10,000 rows ≤ 5 s",
        trained.as_secs_f64() <= 5.0,
    );
    check(
        "model memory ≤ 30 MiB",
        model.bytes() as f64 <= 30.0 * (1 << 20) as f64,
    );

    let mut times: Vec<f64> = test
        .iter()
        .map(|(t, _)| {
            let started = Instant::now();
            std::hint::black_box(model.predict(t));
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let p50 = times[times.len() / 2];
    let p99 = times[times.len() * 99 / 100];
    println!("prediction per ticket: p50 {p50:.3} ms, p99 {p99:.3} ms");
    check("prediction ≤ 1 ms per ticket (p99)", p99 <= 1.0);
    check(
        "prediction with confidence ≤ 0.1 ms per ticket (p99)",
        p99 <= 0.1,
    );
    variants(&train, &test);
    if missed {
        std::process::exit(1);
    }
}

/// Each variant of the learner, side by side on the same split: accuracy,
/// accuracy of the 90 % of decisions it is surest of, training time.
fn variants(train: &[(String, String)], test: &[(String, String)]) {
    use tinycode_learn::Variant;
    use tinycode_learn::features::FeatureSet;
    let base = Variant::DEFAULT;
    let with = |name, words, bigrams, chars| Variant {
        name,
        features: FeatureSet {
            words,
            bigrams,
            chars,
        },
        ..base
    };
    let all = [
        base,
        with("words only", true, false, (0, 0)),
        with("words + word pairs", true, true, (0, 0)),
        with("char 3-5 only", false, false, (3, 5)),
        with("words + word pairs + char 2-5", true, true, (2, 5)),
        with("words + word pairs + char 3-6", true, true, (3, 6)),
        Variant {
            name: "default, 16 epochs",
            epochs: 16,
            ..base
        },
        Variant {
            name: "default, class weights",
            class_weights: true,
            ..base
        },
    ];
    println!("\n| variant | accuracy | accuracy of the surest 90 % | training |");
    println!("| --- | --- | --- | --- |");
    for v in &all {
        let started = Instant::now();
        let model =
            Classifier::train_variant(train.iter().map(|(t, l)| (t.as_str(), l.as_str())), v)
                .unwrap();
        let took = started.elapsed().as_secs_f64() * 1000.0;
        let mut decisions: Vec<(f32, bool)> = test
            .iter()
            .map(|(t, l)| {
                let p = model.predict(t);
                (p.confidence.unwrap_or(0.0), p.label == *l)
            })
            .collect();
        let right = decisions.iter().filter(|(_, r)| *r).count();
        decisions.sort_by(|a, b| b.0.total_cmp(&a.0));
        let top = decisions.len() * 9 / 10;
        let top_right = decisions[..top].iter().filter(|(_, r)| *r).count();
        println!(
            "| {} | {:.2} % | {:.2} % | {took:.0} ms |",
            v.name,
            right as f64 * 100.0 / test.len() as f64,
            top_right as f64 * 100.0 / top.max(1) as f64
        );
    }
}
