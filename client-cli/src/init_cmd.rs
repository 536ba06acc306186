//! `tinycode init [DIR] [--demo]`: scaffold a workspace (files only; the
//! daemon starts on first use).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;

use crate::output;

include!(concat!(env!("OUT_DIR"), "/demo_files.rs"));

const CONFIG: &str = r#"{
  "permissionMode": "ask",
  "knowledgeDir": "knowledge",
  "ticketsDir": "tickets",
  "queues": [],
  "maxStepsPerTurn": 12
}
"#;

const TINY_MD: &str = "# Business rules\n\nThis file is injected into the triage agent's system prompt. Write the\nrules your desk lives by: categories, priorities, what needs a human.\n";

const GITIGNORE: &str = "# tinycoded's state (event log, logs, socket)\n.tinycode/state/\n";

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Directory to turn into a workspace (created if missing).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Fill it with the embedded demo desk (tickets, articles, skills, queues).
    #[arg(long)]
    pub demo: bool,
}

/// Write the workspace files; refuses to touch an existing workspace.
pub fn scaffold(dir: &Path, demo: bool) -> anyhow::Result<Vec<String>> {
    if dir.join(".tinycode/config.json").exists() {
        bail!(
            "{} is already a tinycode workspace (it has .tinycode/config.json); nothing was changed",
            dir.display()
        );
    }
    let mut written = Vec::new();
    let mut write = |rel: &str, content: &str| -> anyhow::Result<()> {
        let path = dir.join(rel);
        if path.exists() {
            bail!(
                "{} already exists; nothing after it was written",
                path.display()
            );
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, content)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(rel.to_string());
        Ok(())
    };
    if demo {
        for (rel, content) in DEMO_FILES {
            write(rel, content)?;
        }
    } else {
        write(".tinycode/config.json", CONFIG)?;
        write("TINY.md", TINY_MD)?;
    }
    if !dir.join(".gitignore").exists() {
        write(".gitignore", GITIGNORE)?;
    }
    for sub in ["tickets", "knowledge", ".tinycode/skills"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("cannot create {}", dir.join(sub).display()))?;
    }
    Ok(written)
}

pub fn run(json: bool, args: InitArgs) -> anyhow::Result<ExitCode> {
    let written = scaffold(&args.dir, args.demo)?;
    let dir = args.dir.canonicalize().unwrap_or(args.dir.clone());
    let tickets = written.iter().filter(|f| f.starts_with("tickets/")).count();
    let articles = written
        .iter()
        .filter(|f| f.starts_with("knowledge/"))
        .count();
    if json {
        output::json_pretty(&serde_json::json!({
            "workspace": dir.display().to_string(),
            "demo": args.demo,
            "files": written,
            "tickets": tickets,
            "articles": articles,
        }));
    } else {
        println!("Initialised a tinycode workspace in {}", dir.display());
        if args.demo {
            println!("  demo desk: {tickets} tickets, {articles} knowledge articles, 2 skills");
        }
        println!("Next: cd {} && tinycode ticket list", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_desk_is_large_enough_and_well_formed() {
        let tickets: Vec<_> = DEMO_FILES
            .iter()
            .filter(|(p, _)| p.starts_with("tickets/"))
            .collect();
        let articles = DEMO_FILES
            .iter()
            .filter(|(p, _)| p.starts_with("knowledge/"))
            .count();
        let skills = DEMO_FILES
            .iter()
            .filter(|(p, _)| p.ends_with("SKILL.md"))
            .count();
        assert!(tickets.len() >= 30, "{}", tickets.len());
        assert!(articles >= 10, "{articles}");
        assert_eq!(skills, 3, "triage-sop, escalation-rules, daily-report");
        let chinese = tickets
            .iter()
            .filter(|(_, c)| c.chars().any(|ch| ('\u{4e00}'..='\u{9fff}').contains(&ch)))
            .count();
        assert!(
            chinese >= 10 && tickets.len() - chinese >= 10,
            "both languages"
        );
        for (path, content) in &tickets {
            let v: serde_json::Value = serde_json::from_str(content).unwrap();
            assert_eq!(format!("tickets/{}.json", v["id"].as_str().unwrap()), *path);
        }
        assert!(
            DEMO_FILES
                .iter()
                .any(|(p, _)| *p == ".tinycode/config.json")
        );
    }

    #[test]
    fn init_refuses_to_overwrite_a_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        scaffold(tmp.path(), false).unwrap();
        let err = scaffold(tmp.path(), true).unwrap_err().to_string();
        assert!(err.contains("already a tinycode workspace"), "{err}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(".tinycode/config.json")).unwrap(),
            CONFIG
        );
    }
}
