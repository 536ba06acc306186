//! Commands printed for a person to paste: `tinycode …` when that name on
//! PATH is this installation's CLI, else the CLI's full path (after a
//! `cargo build` without an install, `tinycode` is not on PATH and a hint
//! naming it would fail when pasted). The TUI and the daemon find the CLI
//! beside themselves.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How to run the CLI from anywhere, worked out once per process.
pub fn program() -> &'static str {
    static PROGRAM: OnceLock<String> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let me = std::env::current_exe().ok();
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("tinycode"))
                .find(|p| p.is_file())
        });
        choose(me.as_deref(), on_path.as_deref())
    })
}

/// The CLI this program belongs to (itself, or `tinycode` beside it) and
/// what to print for it, given the `tinycode` found on PATH.
fn choose(me: Option<&Path>, on_path: Option<&Path>) -> String {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let Some(me) = me.map(canonical) else {
        return "tinycode".into();
    };
    let cli: PathBuf = if me.file_name().is_some_and(|n| n == "tinycode") {
        me
    } else {
        match me.parent().map(|d| d.join("tinycode")) {
            Some(beside) if beside.is_file() => canonical(&beside),
            // No CLI beside us (a test binary, an odd install): the name.
            _ => return "tinycode".into(),
        }
    };
    match on_path.map(canonical) {
        Some(found) if found == cli => "tinycode".into(),
        _ => shell_word(&cli.display().to_string()),
    }
}

/// `text` with every backticked `` `tinycode …` `` command naming
/// [`program`] (unchanged when that is `tinycode`).
pub fn localize(text: &str) -> String {
    localize_with(text, program())
}

fn localize_with(text: &str, program: &str) -> String {
    if program == "tinycode" {
        return text.to_string();
    }
    text.replace("`tinycode ", &format!("`{program} "))
}

/// `text` quoted for a POSIX shell when it needs to be.
pub fn shell_word(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+:@".contains(c))
    {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn printed_commands_work_when_pasted() {
        assert_eq!(shell_word("/usr/bin/tinycode"), "/usr/bin/tinycode");
        assert_eq!(shell_word("/tmp/my dir/tinycode"), "'/tmp/my dir/tinycode'");
        assert_eq!(shell_word("/a/it's"), "'/a/it'\\''s'");
    }

    #[test]
    fn the_cli_is_named_by_its_path_unless_it_is_the_one_on_path() {
        let dir = tempfile::tempdir().unwrap();
        let cli = dir.path().join("tinycode");
        let tui = dir.path().join("tinycode-tui");
        std::fs::write(&cli, "").unwrap();
        std::fs::write(&tui, "").unwrap();
        let full = std::fs::canonicalize(&cli).unwrap().display().to_string();
        // The CLI itself, not on PATH; the TUI beside it.
        assert_eq!(choose(Some(&cli), None), full);
        assert_eq!(choose(Some(&tui), None), full);
        // On PATH: the short name.
        assert_eq!(choose(Some(&tui), Some(&cli)), "tinycode");
        // Another tinycode on PATH is not this one.
        let other = tempfile::tempdir().unwrap();
        let elsewhere = other.path().join("tinycode");
        std::fs::write(&elsewhere, "").unwrap();
        assert_eq!(choose(Some(&cli), Some(&elsewhere)), full);
        // No CLI beside a program: the name.
        let third = tempfile::tempdir().unwrap();
        let lone = third.path().join("tinycoded");
        assert_eq!(choose(Some(&lone), None), "tinycode");
    }

    #[test]
    fn backticked_commands_are_localized() {
        assert_eq!(
            localize_with(
                "run `tinycode daemon start` or `tinycode init`",
                "/x/tinycode"
            ),
            "run `/x/tinycode daemon start` or `/x/tinycode init`"
        );
        assert_eq!(
            localize_with("`tinycode init`", "tinycode"),
            "`tinycode init`"
        );
    }
}
