//! The house's walls, checked on the source (issue 31): the lower layers
//! are crates, so an upward import between them does not compile; inside a
//! crate this test fails on a cycle between files and, in the engine, on an
//! import that runs up the layer order written at the top of
//! docs/ARCHITECTURE.md. It reads `use` trees and `crate::`, `super::` and
//! `self::` paths (comments and test modules left out); an import between a
//! module and its own parent folder (`super::Type`, `mod.rs` naming its
//! children) is how Rust folders work and is not counted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The engine's top-level modules, lowest first: a module may import those
/// of its own layer or below, never above. The crates below the engine
/// (`tinycode-base`, `-log`, `-domain`, `-learn`, `-model`) are re-exported
/// by their old names and count as layer 0; `tinycoded` (server,
/// lifecycle, main) stands above it as a crate of its own.
const ENGINE_LAYERS: &[(&str, u32)] = &[
    ("offline", 6),
    ("context", 7),
    ("auth", 7),
    ("config", 8),
    ("tools", 9),
    ("mcp", 10),
    ("agent", 11),
    ("sessions", 12),
    ("eval", 13),
    ("extensions", 13),
    ("triage", 14),
    ("calls", 14),
    ("reports", 14),
    ("connectors", 14),
    ("control", 15),
    ("doctor", 15),
];

/// Re-exports of the lower crates at the engine's root.
const BELOW: &[&str] = &[
    "clock",
    "files",
    "fnv",
    "heap",
    "paging",
    "ratelimit",
    "sync",
    "cluster",
    "projection",
    "store",
    "domain",
    "approvals",
    "permissions",
    "skills",
    "learn",
    "model",
    "error_limited",
    "warn_limited",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One source file: its module path in its crate and its text, without
/// comments and without its test module.
struct Source {
    module: Vec<String>,
    text: String,
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "testing.rs"
        || name == "fixtures.rs"
}

fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text without `//` comments and from an inline `#[cfg(test)] mod`
/// on.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.trim_end().ends_with('{'))
        {
            break;
        }
        let code = match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn sources(src: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push(Source {
                    module: module_of(src, &path),
                    text: code_of(&text),
                });
            }
        }
    }
    out
}

/// Every path a `use` tree names, flattened (`a::{b, c::d}` → `a::b`,
/// `a::c::d`).
fn flatten(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        if let Some(open) = tree.find('{') {
            let head = &tree[..open];
            let close = tree.rfind('}').filter(|c| *c > open).unwrap_or(tree.len());
            let inner = &tree[open + 1..close];
            let mut depth = 0;
            let mut start = 0;
            let bytes: Vec<char> = inner.chars().collect();
            let mut parts = Vec::new();
            for (i, c) in bytes.iter().enumerate() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(bytes[start..i].iter().collect::<String>());
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parts.push(bytes[start..].iter().collect::<String>());
            for p in parts.iter().filter(|p| !p.is_empty()) {
                go(&format!("{prefix}{head}"), p, out);
            }
        } else {
            out.push(format!("{prefix}{tree}"));
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// Module paths this file names, each resolved from `crate`, `super` or
/// `self` to a path from the crate root.
fn references(s: &Source) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    // `use` statements (their trees may span lines).
    let text = &s.text;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let t = line.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        if !t.starts_with("use ") {
            continue;
        }
        let from = start + line.find("use ").unwrap_or(0) + 4;
        let Some(end) = text[from..].find(';') else {
            continue;
        };
        paths.extend(flatten(&text[from..from + end]));
    }
    // Paths written in place.
    let text = &s.text;
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(start) {
            let i = from + at;
            from = i + start.len();
            if text[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
            {
                continue;
            }
            let path: String = text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(path);
        }
    }
    // `self` is this file's module; each `super` is one module up.
    let mut out = Vec::new();
    for p in paths {
        let segs: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
        let (mut base, rest) = match segs.first() {
            Some(&"crate") => (Vec::new(), &segs[1..]),
            Some(&"self") => (s.module.clone(), &segs[1..]),
            Some(&"super") => {
                let ups = segs.iter().take_while(|s| **s == "super").count();
                let keep = s.module.len().saturating_sub(ups);
                (s.module[..keep].to_vec(), &segs[ups..])
            }
            _ => continue,
        };
        base.extend(rest.iter().map(|s| s.to_string()));
        out.push(base);
    }
    out
}

/// The file-level import graph of one crate: module → modules it imports
/// (neither its ancestors nor its descendants).
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = sources(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let entry = edges.entry(f.module.clone()).or_default();
        for r in references(f) {
            // The longest prefix that is a file of this crate.
            let target = (1..=r.len())
                .rev()
                .map(|n| r[..n].to_vec())
                .find(|p| modules.contains(p));
            let Some(target) = target else { continue };
            let nested = target.starts_with(&f.module) || f.module.starts_with(&target);
            if !nested {
                entry.insert(target);
            }
        }
    }
    edges
}

/// Groups of modules that import each other in a loop (Tarjan).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Vec<String>) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = t.edges.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let low = t.low[v].min(t.low[w]);
                t.low.insert(v, low);
            } else if t.on.contains(w) {
                let low = t.low[v].min(t.index[w]);
                t.low.insert(v, low);
            }
        }
        if t.low[v] == t.index[v] {
            let mut group = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                group.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                t.out.push(group);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

const CRATES: &[&str] = &[
    "crates/base/src",
    "crates/log/src",
    "crates/domain/src",
    "crates/learn/src",
    "crates/model/src",
    "crates/engine/src",
    "daemon/src",
    "shared/src",
    "client-cli/src",
    "client-tui/src",
    "client-web/src",
];

#[test]
fn no_crate_has_a_cycle_between_its_files() {
    let mut found = Vec::new();
    for dir in CRATES {
        for group in cycles(&graph(&root().join(dir))) {
            found.push(format!("{dir}: {}", group.join(" ↔ ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_engine_module_imports_one_above_it() {
    let layer = |m: &str| {
        ENGINE_LAYERS
            .iter()
            .find(|(name, _)| *name == m)
            .map(|(_, l)| *l)
    };
    let edges = graph(&root().join("crates/engine/src"));
    let mut upward = Vec::new();
    let mut unknown = BTreeSet::new();
    for (from, tos) in &edges {
        let Some(top) = from.first() else { continue };
        let Some(here) = layer(top) else {
            unknown.insert(top.clone());
            continue;
        };
        for to in tos {
            let Some(target) = to.first() else { continue };
            if target == top || BELOW.contains(&target.as_str()) {
                continue;
            }
            match layer(target) {
                Some(l) if l > here => upward.push(format!(
                    "{} (layer {here}) imports {} (layer {l})",
                    from.join("::"),
                    to.join("::")
                )),
                Some(_) => {}
                None => {
                    unknown.insert(target.clone());
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules with no layer in ENGINE_LAYERS (add them, and to docs/ARCHITECTURE.md): {unknown:?}"
    );
    assert!(
        upward.is_empty(),
        "imports up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_check_sees_a_cycle_and_an_upward_import() {
    // A self-test on a made-up crate: the checks above must be able to fail.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::create_dir(src.join("c")).unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "use crate::{a::A, c::{d::D}};\n// crate::nothing::here\npub struct B;\n",
    )
    .unwrap();
    std::fs::write(src.join("c/mod.rs"), "pub mod d;\npub use d::D;\n").unwrap();
    std::fs::write(
        src.join("c/d.rs"),
        "use super::super::a::A;\npub struct D;\n",
    )
    .unwrap();
    let g = graph(src);
    let key = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert!(g[&key("b")].contains(&key("c::d")), "{g:?}");
    assert!(
        !g[&key("c")].contains(&key("c::d")),
        "a folder and its child: {g:?}"
    );
    assert!(g[&key("c::d")].contains(&key("a")), "{g:?}");
    let found = cycles(&g);
    assert_eq!(found, [vec!["a", "b", "c::d"]], "{g:?}");
}
