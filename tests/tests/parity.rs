//! End-to-end: TinyCode parity. A desk whose tickets carry any id format
//! is triaged offline the same way as one with `T-` ids: every ticket gets
//! a decision, none is left "completed" with nothing done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tinycode_tests::{Desk, copy_dir};

/// Id formats a support desk may use (`sanitize_id` accepts them all).
fn mixed_id(n: usize) -> String {
    match n % 6 {
        0 => format!("ZD-{}", 4400 + n),
        1 => format!("{}", 12_000 + n),
        2 => format!("INC00{}", 12_300 + n),
        3 => format!("t-{n}"),
        4 => format!("H-{}", 2000 + n),
        _ => format!("T-{}", 5000 + n),
    }
}

/// The embedded demo desk (32 tickets, English and Chinese) plus 8 copies,
/// with each ticket's id made by `id_of(n)`.
fn demo_desk(id_of: impl Fn(usize) -> String) -> Desk {
    let desk = Desk::new();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../client-cli/demo");
    copy_dir(&demo, &desk.workspace());
    let tickets = desk.workspace().join("tickets");
    let mut files: Vec<_> = std::fs::read_dir(&tickets)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let originals: Vec<Value> = files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect();
    for f in &files {
        std::fs::remove_file(f).unwrap();
    }
    for n in 0..originals.len() + 8 {
        let mut t = originals[n % originals.len()].clone();
        let id = id_of(n);
        t["id"] = Value::String(id.clone());
        std::fs::write(
            tickets.join(format!("{id}.json")),
            serde_json::to_string_pretty(&t).unwrap(),
        )
        .unwrap();
    }
    desk.edit_config(|c| {
        c.as_object_mut().unwrap().remove("autoTriage");
    });
    desk
}

/// (category, priority, queue, escalateLevel, status) per ticket number.
fn decisions(
    desk: &Desk,
    id_of: impl Fn(usize) -> String,
    n: usize,
) -> BTreeMap<usize, Vec<String>> {
    (0..n)
        .map(|i| {
            let t = desk.json(&["ticket", "show", &id_of(i)]);
            let field = |k: &str| match &t[k] {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            (
                i,
                ["category", "priority", "queue", "escalateLevel", "status"]
                    .iter()
                    .map(|k| field(k))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn any_ticket_id_is_triaged_like_a_t_id() {
    let mixed = demo_desk(mixed_id);
    let plain = demo_desk(|n| format!("T-{}", 7000 + n));
    let total = mixed.json(&["ticket", "list"])["total"].as_u64().unwrap() as usize;
    assert_eq!(total, 40);
    for desk in [&mixed, &plain] {
        let out = desk.run(&["triage", "--all", "--approve", "auto"]);
        assert_eq!(out.code, 0, "{out:?}\n{}", desk.log());
    }
    let got = decisions(&mixed, mixed_id, total);
    let want = decisions(&plain, |n| format!("T-{}", 7000 + n), total);
    for (n, d) in &got {
        let (category, queue, level, status) = (&d[0], &d[2], &d[3], &d[4]);
        assert!(
            !category.is_empty() && (!queue.is_empty() || !level.is_empty()),
            "{} was left without a decision: {d:?}",
            mixed_id(*n)
        );
        assert!(
            status == "routed" || status == "escalated",
            "{}: {d:?}",
            mixed_id(*n)
        );
    }
    assert_eq!(
        got, want,
        "the same tickets get the same decisions whatever their ids"
    );
    // One taxonomy: every category is one TINY.md names.
    for d in got.values() {
        assert!(
            ["退款", "物流", "账户", "技术"].contains(&d[0].as_str()),
            "{d:?}"
        );
    }
    mixed.stop();
    plain.stop();
}
