//! `tinycoded doctor` (`tinycode doctor`): what stands between this
//! workspace and a working desk, each with what to do — the workspace, its
//! config, the state dir, the daemon and its socket, the model's provider,
//! and every workspace file the daemon would refuse. It reads; it never
//! changes anything, and works whether the daemon runs or not.

use std::path::Path;

use tinycode_shared::paths::Layout;

use crate::config::Config;

/// How one check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub what: &'static str,
    pub verdict: Verdict,
    pub detail: String,
    /// What to do about it (empty when nothing).
    pub fix: String,
}

impl Check {
    fn ok(what: &'static str, detail: impl Into<String>) -> Self {
        Self {
            what,
            verdict: Verdict::Ok,
            detail: detail.into(),
            fix: String::new(),
        }
    }

    fn bad(
        what: &'static str,
        verdict: Verdict,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            what,
            verdict,
            detail: detail.into(),
            fix: fix.into(),
        }
    }
}

/// Every check, in the order a person would fix them.
pub fn checks(layout: &Layout) -> Vec<Check> {
    let mut out = Vec::new();
    let Some(workspace) = layout.workspace.as_deref() else {
        out.push(Check::bad(
            "workspace",
            Verdict::Fail,
            "no support workspace here (no `.tinycode/` in this folder or above it)",
            "run `tinycode init` in the desk's folder, or pass `-w DIR`",
        ));
        return out;
    };
    out.push(Check::ok("workspace", workspace.display().to_string()));
    let config = match Config::load(workspace) {
        Ok(c) => {
            out.push(Check::ok(
                "config",
                format!(
                    "{} is valid (model {}, permission mode {})",
                    crate::config::CONFIG_FILE,
                    if c.model.is_empty() {
                        "offline"
                    } else {
                        &c.model
                    },
                    c.permission_mode.as_str()
                ),
            ));
            for w in &c.warnings {
                out.push(Check::bad(
                    "config",
                    Verdict::Warn,
                    w.clone(),
                    "remove the key, or check its spelling against docs/DEPLOY.md",
                ));
            }
            Some(c)
        }
        Err(e) => {
            out.push(Check::bad(
                "config",
                Verdict::Fail,
                e.to_string(),
                format!(
                    "fix {} (the message names the key)",
                    crate::config::CONFIG_FILE
                ),
            ));
            None
        }
    };
    out.push(state_dir(&layout.state_dir));
    out.push(daemon(layout));
    if let Some(config) = &config {
        out.push(provider(config, &layout.state_dir));
        out.extend(files(workspace, config));
    }
    out
}

fn state_dir(dir: &Path) -> Check {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(dir) else {
        return Check::ok(
            "state dir",
            format!("{} (created at the first start)", dir.display()),
        );
    };
    if meta.uid() != rustix::process::getuid().as_raw() {
        return Check::bad(
            "state dir",
            Verdict::Fail,
            format!(
                "{} belongs to uid {}, not to you",
                dir.display(),
                meta.uid()
            ),
            "run tinycode as the user who owns it, or set TINYCODE_HOME to a folder of yours",
        );
    }
    if meta.mode() & 0o077 != 0 {
        return Check::bad(
            "state dir",
            Verdict::Warn,
            format!(
                "{} is readable by others (mode {:o})",
                dir.display(),
                meta.mode() & 0o777
            ),
            format!("chmod 700 {}", dir.display()),
        );
    }
    let space = crate::store::space::DiskSpace::new(dir, None);
    match space.check(0) {
        Ok(()) => Check::ok("state dir", dir.display().to_string()),
        Err(e) => Check::bad(
            "state dir",
            Verdict::Fail,
            e.to_string(),
            "free space on that disk",
        ),
    }
}

fn daemon(layout: &Layout) -> Check {
    let pid = std::fs::read_to_string(layout.lock_path())
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .filter(|p| tinycode_shared::client::process_running(*p));
    match (pid, layout.socket.exists()) {
        (Some(pid), true) => Check::ok(
            "daemon",
            format!("running (pid {pid}) on {}", layout.socket.display()),
        ),
        (Some(pid), false) => Check::bad(
            "daemon",
            Verdict::Warn,
            format!(
                "pid {pid} holds the state dir but {} is missing (starting, or stuck)",
                layout.socket.display()
            ),
            format!(
                "see {}; `tinycode daemon stop`, then start it again",
                layout.log_path().display()
            ),
        ),
        (None, _) => Check::ok("daemon", "not running (any command starts it)"),
    }
}

fn provider(config: &Config, state_dir: &Path) -> Check {
    let model = std::env::var("TINYCODE_MODEL")
        .ok()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| config.model.clone());
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    // A key stored with `tinycode auth set` counts (read without opening it).
    let stored = crate::auth::vault::Vault::stored(state_dir);
    let keys = crate::auth::vault::StoredOrEnv(stored);
    let resolved = crate::model::catalog::resolve_with(
        &model,
        &config.providers,
        &env,
        std::sync::Arc::new(keys),
        Default::default(),
    );
    match resolved {
        Ok(crate::model::catalog::ModelChoice::Offline) => {
            Check::ok("model", "the embedded offline model (no key, no network)")
        }
        Ok(_) => Check::ok("model", format!("{model} (its key is set or stored)")),
        Err(e) => Check::bad(
            "model",
            Verdict::Fail,
            e.to_string(),
            "set the key with `tinycode auth set PROVIDER` or in the daemon's environment, or pick another model (config `model`, $TINYCODE_MODEL)",
        ),
    }
}

/// Every ticket and article file the read-back would refuse.
fn files(workspace: &Path, config: &Config) -> Vec<Check> {
    let mut out = Vec::new();
    let mut refused = 0;
    let mut read = 0;
    for (dir, ext) in [(&config.tickets_dir, "json"), (&config.knowledge_dir, "md")] {
        let dir = workspace.join(dir);
        let root = crate::domain::desk::read_root(workspace, &dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|e| e == ext)
                    && p.file_name()
                        .is_some_and(|n| !n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        for path in paths {
            read += 1;
            if let Some(problem) = crate::domain::desk::file_problem(&path, &root) {
                refused += 1;
                let shown = path
                    .strip_prefix(workspace)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                out.push(Check::bad(
                    "file",
                    Verdict::Warn,
                    format!("{shown}: {problem}"),
                    "fix or remove the file (until then it is not imported)",
                ));
            }
        }
    }
    if refused == 0 {
        out.push(Check::ok(
            "files",
            format!("{read} ticket and article files read back fine"),
        ));
    }
    out
}

/// The report as lines: `✓ config  …`, `✗ model  … → fix`.
pub fn render(checks: &[Check]) -> String {
    checks
        .iter()
        .map(|c| {
            let mark = match c.verdict {
                Verdict::Ok => "✓",
                Verdict::Warn => "!",
                Verdict::Fail => "✗",
            };
            let fix = if c.fix.is_empty() {
                String::new()
            } else {
                format!("\n    → {}", c.fix)
            };
            format!("{mark} {:<10} {}{fix}", c.what, c.detail)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_file_and_a_missing_key_are_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("desk");
        std::fs::create_dir_all(ws.join(".tinycode")).unwrap();
        std::fs::create_dir_all(ws.join("tickets")).unwrap();
        std::fs::write(
            ws.join(".tinycode/config.json"),
            r#"{"model": "nosuch/model"}"#,
        )
        .unwrap();
        std::fs::write(
            ws.join("tickets/T-1.json"),
            r#"{"id": "T-2", "subject": "x", "createdAt": "now"}"#,
        )
        .unwrap();
        let layout = Layout::resolve(
            Some(&ws),
            &ws,
            Some(&dir.path().join("home")),
            &dir.path().join("run"),
        )
        .unwrap();
        let checks = checks(&layout);
        let text = render(&checks);
        assert!(text.contains("✓ config"), "{text}");
        assert!(text.contains("✗ model"), "{text}");
        assert!(
            text.contains("tickets/T-1.json: field `id` is \"T-2\""),
            "{text}"
        );
        assert!(checks.iter().any(|c| c.verdict == Verdict::Fail));
    }
}
