//! The docs stay true where a machine can tell (issue 31): every source
//! path the docs name in backticks exists — a file of the repository by its
//! path (`crates/log/src/store/mod.rs`), by its path inside a crate's
//! `src/` (`store/sled/commit.rs`), or a folder from the repository root
//! (`crates/engine/`). Runtime paths (`<state>/…`, `tickets/*.json`) are
//! not source paths and are left alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const DOCS: &[&str] = &[
    "README.md",
    "docs/ARCHITECTURE.md",
    "docs/PROTOCOL.md",
    "docs/BENCHMARKS.md",
    "docs/DEPLOY.md",
];

/// Folders at the repository root: a path starting with one is checked
/// from the root.
const TOP: &[&str] = &[
    "crates/",
    "daemon/",
    "shared/",
    "client-cli/",
    "client-tui/",
    "tests/",
    "proto/",
    "docs/",
    "examples/",
    ".ci/",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every source file of the repository, as a path from its root.
fn files() -> Vec<String> {
    let root = root();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "target" && name != ".git" && name != "node_modules" {
                    stack.push(path);
                }
            } else {
                out.push(
                    path.strip_prefix(&root)
                        .unwrap()
                        .to_string_lossy()
                        .to_string(),
                );
            }
        }
    }
    out
}

/// The backticked spans of `text` outside fenced code blocks.
fn spans(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push(inside.to_string());
        }
    }
    out
}

/// The source path a span names, if it names one.
fn source_path(span: &str) -> Option<String> {
    if span.contains(|c: char| c.is_whitespace() || "<>*{}$…#?=,|\"'()".contains(c)) {
        return None;
    }
    let path = span.split("::").next()?.split(':').next()?;
    // An extension alone (`.proto`) names no file.
    if path.starts_with('.') && !path.contains('/') {
        return None;
    }
    let is_source = path.ends_with(".rs") || path.ends_with(".proto");
    let from_top = TOP.iter().any(|t| path.starts_with(t));
    (is_source || from_top).then(|| path.to_string())
}

#[test]
fn every_source_path_the_docs_name_exists() {
    let files = files();
    let root = root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in DOCS {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for span in spans(&text) {
            let Some(path) = source_path(&span) else {
                continue;
            };
            checked += 1;
            let found = if TOP.iter().any(|t| path.starts_with(t)) {
                root.join(path.trim_end_matches('/')).exists()
            } else {
                files
                    .iter()
                    .any(|f| f == &path || f.ends_with(&format!("/{path}")))
            };
            if !found {
                missing.push(format!("{doc}: `{span}`"));
            }
        }
    }
    assert!(checked > 100, "only {checked} paths were checked");
    assert!(
        missing.is_empty(),
        "paths the docs name that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_check_tells_a_path_from_other_words() {
    assert_eq!(
        source_path("store/sled/commit.rs").as_deref(),
        Some("store/sled/commit.rs")
    );
    assert_eq!(
        source_path("crates/engine/").as_deref(),
        Some("crates/engine/")
    );
    assert_eq!(
        source_path("learn/tickets.rs::installed").as_deref(),
        Some("learn/tickets.rs")
    );
    assert_eq!(source_path("<state>/logs/tinycoded.log"), None);
    assert_eq!(source_path("tickets/*.json"), None);
    assert_eq!(source_path("permissionMode"), None);
    assert_eq!(
        spans("a `x.rs` b\n```\n`y.rs`\n```\n`z.rs`"),
        ["x.rs", "z.rs"]
    );
}
