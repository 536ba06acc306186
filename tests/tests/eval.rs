//! `tinycode eval` end to end: the offline model measured on a labelled set
//! in a scratch desk — figures as expected, the live desk's files and log
//! unchanged — then listed and shown again; `--from-history` takes only the
//! decisions people made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tinycode_tests::Desk;

/// Every workspace file but the daemon's state, with its content.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.ends_with(".tinycode/state") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// The log without the evaluations' own streams.
fn log(desk: &Desk) -> Vec<Value> {
    desk.events(&[])
        .into_iter()
        .filter(|e| !e["streamId"].as_str().unwrap_or("").starts_with("eval-"))
        .collect()
}

fn field<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["field"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report:#}"))
}

#[test]
fn an_evaluation_measures_in_a_scratch_desk_and_never_changes_the_live_one() {
    let desk = Desk::fixture();
    desk.ok(&["ticket", "list"]);
    desk.mirror_settled();
    let (files_before, log_before) = (files(&desk.workspace()), log(&desk));

    // Three rows the offline model gets right, one labelled against it.
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.csv");
    std::fs::write(
        &set,
        "subject,body,category,queue,escalateLevel\n\
         退款：订单 8842 已付款但未收到货,我一直没收到货，要求全额退款。,退款,售后组,0\n\
         物流：包裹停滞 3 天未更新,快递一直没有更新。,物流,物流组,0\n\
         账户被冻结,我的账户被风控冻结了，无法付款。,账户,,2\n\
         退款：耳机坏了,耳机左耳没有声音，申请退款。,技术,售后组,0\n",
    )
    .unwrap();
    let report = desk.json(&[
        "eval",
        set.to_str().unwrap(),
        "--concurrency",
        "2",
        "--runs",
        "2",
    ]);
    assert_eq!(
        (report["rows"].as_u64(), report["measured"].as_u64()),
        (Some(4), Some(4)),
        "{report:#}"
    );
    assert_eq!(report["model"], "offline");
    assert_eq!(report["runs"].as_u64(), Some(2));
    let category = field(&report, "category");
    assert_eq!(category["accuracy"], 0.75, "{category:#}");
    assert_eq!(category["scored"].as_u64(), Some(8), "4 rows × 2 runs");
    assert_eq!(
        category["passK"], 0.75,
        "the offline model is deterministic"
    );
    assert_eq!(
        category["labels"],
        serde_json::json!(["技术", "物流", "账户", "退款", "(other)"])
    );
    // Expected 技术, predicted 退款.
    assert_eq!(
        category["confusion"][0]["counts"],
        serde_json::json!([0, 0, 0, 2, 0])
    );
    let queue = field(&report, "queue");
    assert_eq!(
        (queue["scored"].as_u64(), &queue["accuracy"]),
        (Some(6), &Value::from(1.0)),
        "{queue:#}"
    );
    assert_eq!(field(&report, "escalateLevel")["accuracy"], 1.0);
    assert_eq!(report["allFieldsPassK"], 0.75);

    // The live desk: the same files, the same log (but for the evaluation's
    // own record).
    desk.mirror_settled();
    assert_eq!(
        files(&desk.workspace()),
        files_before,
        "workspace files changed"
    );
    assert_eq!(log(&desk), log_before, "the live log changed");

    // Listed, shown again, and written as Markdown with a chart.
    let id = report["evalId"].as_str().unwrap().to_string();
    assert!(desk.ok(&["eval", "list"]).contains(&id));
    let shown = desk.json(&["eval", "show", &id]);
    assert_eq!(shown, report);
    let dir = desk.state_dir().join("evals").join(&id);
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| category | 8 | 75.0 % |"), "{md}");
    assert!(dir.join("confusion-category.png").is_file());
    assert!(!dir.join("scratch").exists(), "the scratch desk is removed");

    // On a terminal a bar shows progress; in a log or a pipe, lines do,
    // counting up to every ticket of every run.
    let out = desk.run(&["eval", set.to_str().unwrap(), "--runs", "2"]);
    assert_eq!(out.code, 0, "{out:?}");
    let counts: Vec<(u32, u32)> = out
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("eval: ")?.strip_suffix(" tickets"))
        .filter_map(|c| {
            let (done, total) = c.split_once('/')?;
            Some((done.parse().ok()?, total.parse().ok()?))
        })
        .collect();
    assert_eq!(counts.last(), Some(&(8, 8)), "{}", out.stderr);
    assert!(counts.windows(2).all(|w| w[0].0 < w[1].0), "{}", out.stderr);
    assert!(out.stdout.contains("report: "), "{}", out.stdout);
    desk.stop();
}

#[test]
fn from_history_takes_the_decisions_people_made_not_the_agents() {
    let desk = Desk::fixture();
    // A ticket classified by hand (its file) and one triaged by the agent.
    let mut hand = serde_json::from_str::<Value>(&desk.read("tickets/T-1002.json")).unwrap();
    hand["category"] = "物流".into();
    hand["queue"] = "物流组".into();
    desk.write(
        "tickets/T-1002.json",
        &serde_json::to_string_pretty(&hand).unwrap(),
    );
    let out = desk.run(&["run", "triage T-1001", "--approve", "auto"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report = desk.json(&["eval", "--from-history"]);
    assert_eq!(report["source"], "history");
    assert_eq!(
        report["rows"].as_u64(),
        Some(1),
        "only the hand-made decision: {report:#}"
    );
    assert_eq!(field(&report, "category")["scored"].as_u64(), Some(1));
    desk.stop();
}

#[test]
fn a_bad_labelled_set_is_refused_with_what_to_fix() {
    let desk = Desk::fixture();
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.csv");
    std::fs::write(&set, "text,category\nok,退款\nno label here\n").unwrap();
    let out = desk.run(&["eval", set.to_str().unwrap()]);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("line 3") && out.stderr.contains("the header has 2"),
        "{}",
        out.stderr
    );
    desk.stop();
}

#[test]
fn ctrl_c_stops_the_evaluation_and_keeps_the_partial_report() {
    use tinycode_tests::mock_llm::{MockLlm, Reply};
    // A model that never answers: nothing finishes until the cancel.
    let mock = MockLlm::respond(|_| Reply::Hang);
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    desk.ok(&["ticket", "list"]);
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.jsonl");
    std::fs::write(
        &set,
        "{\"text\": \"退款 没收到货\", \"category\": \"退款\"}\n{\"text\": \"包裹 停滞\", \"category\": \"物流\"}\n",
    )
    .unwrap();
    let mut cmd = desk.cli();
    cmd.args([
        "--json",
        "eval",
        set.to_str().unwrap(),
        "--model",
        "openai/gpt-test",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Once the scratch desk's turns are asking the model, press Ctrl+C.
    let asking = tinycode_tests::wait_until(std::time::Duration::from_secs(60), || {
        !mock.requests().is_empty()
    });
    assert!(asking, "{}", desk.log());
    tinycode_tests::kill(child.id(), "INT");
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["partial"], true, "{report:#}");
    assert_eq!(report["rows"].as_u64(), Some(2));
    // Recorded like any other run.
    let id = report["evalId"].as_str().unwrap().to_string();
    assert_eq!(desk.json(&["eval", "show", &id])["partial"], true);
    desk.stop();
}

#[test]
fn tokens_and_cost_per_ticket_come_from_the_providers_usage() {
    use tinycode_tests::mock_llm::{MockLlm, text};
    // One request per ticket; the mock reports 100 input and 10 output
    // tokens for each.
    let mock = MockLlm::respond(|_| text("nothing to do"));
    let desk = Desk::fixture()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.csv");
    std::fs::write(&set, "text,category\n退款 没收到货,退款\n包裹 停滞,物流\n").unwrap();
    let report = desk.json(&[
        "eval",
        set.to_str().unwrap(),
        "--model",
        "openai/gpt-test",
        "--price-in",
        "3",
        "--price-out",
        "15",
    ]);
    assert_eq!(report["model"], "openai/gpt-test");
    assert_eq!(
        (
            report["inputTokens"].as_u64(),
            report["outputTokens"].as_u64()
        ),
        (Some(200), Some(20)),
        "{report:#}"
    );
    // (100 × 3 + 10 × 15) / 1,000,000 per ticket.
    let cost = report["costPerTicket"].as_f64().unwrap();
    assert!((cost - 0.00045).abs() < 1e-12, "{cost}");
    // The model decided nothing (a zero is left out of proto3 JSON).
    assert_eq!(
        field(&report, "category")["accuracy"]
            .as_f64()
            .unwrap_or(0.0),
        0.0
    );
    desk.stop();
}

#[test]
fn the_learner_on_bitext_reports_its_calibration_and_the_threshold_for_99_5_percent() {
    let data =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/datasets/bitext-customer-support");
    let desk = Desk::fixture();
    let (train, test) = (data.join("train.csv"), data.join("test.csv"));
    let args = [
        "eval",
        "--train",
        train.to_str().unwrap(),
        "--test",
        test.to_str().unwrap(),
        "--target-accuracy",
        "0.995",
    ];
    let mut json = vec!["--json"];
    json.extend(args);
    let report: Value = serde_json::from_str(&desk.ok(&json)).unwrap();
    let intent = field(&report, "intent");
    assert!(intent["accuracy"].as_f64().unwrap() >= 0.995, "{intent:#}");
    // Every test row's decision came with a confidence, calibrated.
    assert_eq!(intent["withConfidence"], intent["scored"], "{intent:#}");
    assert!(intent["ece"].as_f64().unwrap() < 0.05, "{intent:#}");
    // Accuracy at coverage, and the threshold that reaches 99.5 %.
    assert_eq!(intent["targetAccuracy"], 0.995);
    assert_eq!(intent["reached"], true, "{intent:#}");
    assert!(
        intent["thresholdCoverage"].as_f64().unwrap() >= 0.9,
        "{intent:#}"
    );
    let coverage = intent["coverage"].as_array().unwrap();
    let at = |t: f64| {
        coverage
            .iter()
            .find(|p| (p["threshold"].as_f64().unwrap_or(0.0) - t).abs() < 1e-6)
            .unwrap_or_else(|| panic!("no point at {t}: {coverage:?}"))
    };
    assert_eq!(at(0.0)["coverage"], 1.0);
    assert!(at(0.9)["accuracy"].as_f64().unwrap() >= at(0.0)["accuracy"].as_f64().unwrap());
    let out = desk.ok(&args);
    assert!(out.contains("for 99.50 % accuracy: confidence ≥"), "{out}");
}

#[test]
fn with_history_the_scratch_desk_measures_the_desks_learned_model_not_the_rules() {
    // People sent refunds to 技术支持 (the rules would say 售后组), parcels
    // to 物流组.
    let desk = Desk::fixture();
    for i in 0..6 {
        tinycode_tests::decided_ticket(
            &desk,
            &format!("H-{:03}", 10 + i),
            &format!("退款：订单 {} 申请退款", 5000 + i),
            "东西坏了，我要求退款，钱请退回原卡。",
            "退款",
            "技术支持",
        );
        tinycode_tests::decided_ticket(
            &desk,
            &format!("H-{:03}", 20 + i),
            &format!("物流：包裹 {} 停滞", 6000 + i),
            "快递好几天没有更新，包裹停在转运中心。",
            "物流",
            "物流组",
        );
    }
    desk.ok(&["ticket", "list"]);
    assert!(
        tinycode_tests::wait_until(std::time::Duration::from_secs(60), || desk
            .log()
            .contains("learned from the desk's history examples=12")),
        "{}",
        desk.log()
    );
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("labels.csv");
    std::fs::write(
        &set,
        "subject,body,queue\n退款：订单 7712 申请退款,耳机有质量问题，我想申请退款。,技术支持\n",
    )
    .unwrap();
    let queue_accuracy = |args: &[&str]| {
        let mut all = vec!["eval", set.to_str().unwrap()];
        all.extend_from_slice(args);
        let report = desk.json(&all);
        // proto3 JSON leaves a 0 out.
        field(&report, "queue")["accuracy"].as_f64().unwrap_or(0.0)
    };
    assert_eq!(
        queue_accuracy(&[]),
        0.0,
        "the scratch desk alone: the rules"
    );
    assert_eq!(queue_accuracy(&["--with-history"]), 1.0, "the desk's model");
    desk.stop();
}
