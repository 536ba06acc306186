//! Nothing longer than it needs to be (issue 31), checked on the source: no
//! function of the product's code over 80 lines and no source file over
//! 600. A function is measured from its `fn` line to its closing brace
//! (strings, characters and comments do not count as braces); test code —
//! `#[cfg(test)]` modules, files named `tests.rs` or `*_tests.rs`, and the
//! `tests/` crate — is left out: a test file holds one scenario per function
//! and reads best with its neighbours, so it is not split for size.
//!
//! A function that must stay long goes in `LONG_ON_PURPOSE` with its reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

const MAX_FN_LINES: usize = 80;
const MAX_FILE_LINES: usize = 600;

/// `(path, function)`: allowed over the limit, with why. Empty today.
const LONG_ON_PURPOSE: &[(&str, &str, &str)] = &[];

/// The product's source folders.
const SOURCES: &[&str] = &[
    "shared/src",
    "crates",
    "daemon/src",
    "client-cli/src",
    "client-tui/src",
    "client-web/src",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| {
            let c = c.as_os_str();
            c == "tests" || c == "benches"
        })
}

fn sources() -> Vec<PathBuf> {
    let root = root();
    let mut stack: Vec<PathBuf> = SOURCES.iter().map(|s| root.join(s)).collect();
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && !is_test_file(path.strip_prefix(&root).unwrap())
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The line with strings, character literals and a trailing `//` comment
/// taken out, so only real braces are left. Block comments and raw strings
/// spanning lines are rare in this code and would only make a count
/// longer, never hide a long function.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(d) = chars.next() {
                    match d {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '\'' => {
                // A character literal ('x', '\n', '{'), not a lifetime ('a).
                let rest: String = chars.clone().take(3).collect();
                let mut r = rest.chars();
                match (r.next(), r.next(), r.next()) {
                    (Some('\\'), _, _) => {
                        for d in chars.by_ref() {
                            if d == '\'' {
                                break;
                            }
                        }
                    }
                    (Some(_), Some('\''), _) => {
                        chars.next();
                        chars.next();
                    }
                    _ => {}
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// The name of the function a line starts, if it starts one.
fn fn_name(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        match w {
            "fn" => {
                let name = words.next()?;
                let end = name
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                return Some(&name[..end]);
            }
            "pub" | "async" | "const" | "unsafe" | "extern" | "\"C\"" => {}
            w if w.starts_with("pub(") => {}
            _ => return None,
        }
    }
    None
}

/// Every function in `text` (test modules left out): name, first line
/// (1-based) and length in lines.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let Some(name) = fn_name(line) else { continue };
        let (mut depth, mut started) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            let code = code_of(l);
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        started = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if started && depth <= 0 {
                found.push((name.to_string(), i + 1, j - i + 1));
                break;
            }
            if !started && code.trim_end().ends_with(';') {
                break; // a declaration without a body
            }
        }
    }
    found
}

#[test]
fn no_function_over_80_lines_and_no_file_over_600() {
    let root = root();
    let mut problems = Vec::new();
    let mut measured = 0;
    for path in sources() {
        let text = std::fs::read_to_string(&path).unwrap();
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            problems.push(format!("{rel}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        for (name, line, len) in functions(&text) {
            measured += 1;
            let allowed = LONG_ON_PURPOSE
                .iter()
                .any(|(p, f, _)| *p == rel && *f == name);
            if len > MAX_FN_LINES && !allowed {
                problems.push(format!(
                    "{rel}:{line}: fn {name} is {len} lines (at most {MAX_FN_LINES}); split it by concern"
                ));
            }
        }
    }
    assert!(measured > 1_000, "only {measured} functions were measured");
    assert!(problems.is_empty(), "too long:\n{}", problems.join("\n"));
}

#[test]
fn the_measure_sees_a_long_function_and_ignores_braces_in_text() {
    let body: String = (0..85)
        .map(|i| format!("    let x{i} = \"{{\";\n"))
        .collect();
    let text = format!(
        "pub(crate) async fn long() {{\n{body}}}\nfn short() -> char {{ '}}' }}\n// fn not_code() {{\n"
    );
    let found = functions(&text);
    assert_eq!(found[0], ("long".to_string(), 1, 87));
    assert_eq!(found[1], ("short".to_string(), 88, 1));
    assert_eq!(found.len(), 2, "{found:?}");
    let tests = "fn a() {}\n#[cfg(test)]\nmod tests {\n fn b() {}\n}\n";
    assert_eq!(functions(tests).len(), 1);
    assert!(is_test_file(Path::new("crates/x/src/app_tests.rs")));
    assert!(!is_test_file(Path::new("crates/x/src/app.rs")));
}
