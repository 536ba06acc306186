//! Skills: `.tinycode/skills/<name>/SKILL.md` (and, as Claude Code keeps
//! them, `.claude/skills/<name>/SKILL.md`; `.tinycode/` wins a name both
//! hold) with frontmatter `name` and `description`. Only names and
//! descriptions go into the system prompt ([`SkillRegistry::summary`]); a
//! body is loaded on demand by the model (`load_skill`) or invoked by a
//! person as a command (`/name args`, expanded in the daemon). A skill with
//! `disable-model-invocation: true` is for people only: it stays out of
//! the summary and `load_skill` refuses it.

mod install;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::Deserialize;

use crate::ids::sanitize_id;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
    /// `false` when the frontmatter says `disable-model-invocation: true`.
    pub model_invocable: bool,
}

pub use install::{SkillInstallError, install, remove};

/// Where skills are found, in order of precedence; `tinycode skills
/// install` writes to the first.
const SKILL_DIRS: [&str; 2] = [".tinycode/skills", ".claude/skills"];
/// A SKILL.md larger than this is skipped (its body goes into a prompt).
const MAX_SKILL_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Default, Clone)]
pub struct SkillRegistry {
    skills: BTreeMap<String, Skill>,
}

#[derive(Deserialize)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
    #[serde(rename = "disable-model-invocation", default)]
    disable_model_invocation: bool,
}

/// Split `---\nyaml\n---\nbody`; `None` when there is no frontmatter.
fn split(text: &str) -> Option<(&str, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    let body = rest[end + 4..].trim_start_matches(['\r', '\n']);
    Some((&rest[..end], body))
}

/// A `SKILL.md`'s skill; `folder` names it when the frontmatter does not.
pub(crate) fn parse(text: &str, folder: &str) -> Result<Skill, String> {
    let (yaml, body) = split(text).ok_or("missing frontmatter (name, description)")?;
    let fm: Frontmatter = yaml_serde::from_str(yaml).map_err(|e| e.to_string())?;
    let name = sanitize_id(&fm.name.unwrap_or_else(|| folder.to_string()))
        .map_err(|e| format!("bad name: {e}"))?;
    let description = fm
        .description
        .filter(|d| !d.trim().is_empty())
        .ok_or("frontmatter `description` is missing")?;
    Ok(Skill {
        name,
        description: description.trim().to_string(),
        body: body.to_string(),
        model_invocable: !fm.disable_model_invocation,
    })
}

/// The workspace's skills as they are now: a turn takes [`Skills::current`]
/// when it starts; `tinycode skills install|remove` reload them without a
/// restart.
pub struct Skills {
    workspace: PathBuf,
    current: RwLock<Arc<SkillRegistry>>,
}

impl Skills {
    /// Discover the workspace's skills; the warnings name skipped files.
    pub fn discover(workspace: &Path) -> (Self, Vec<String>) {
        let (registry, warnings) = SkillRegistry::discover(workspace);
        let skills = Self {
            workspace: workspace.to_path_buf(),
            current: RwLock::new(Arc::new(registry)),
        };
        (skills, warnings)
    }

    pub fn current(&self) -> Arc<SkillRegistry> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Read the skill folders again.
    pub fn reload(&self) -> Vec<String> {
        let (registry, warnings) = SkillRegistry::discover(&self.workspace);
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(registry);
        warnings
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }
}

impl SkillRegistry {
    /// Load every skill under `<workspace>/.tinycode/skills/`; a malformed
    /// one is skipped with a warning naming the file.
    pub fn discover(workspace: &Path) -> (Self, Vec<String>) {
        let mut registry = Self::default();
        let mut warnings = Vec::new();
        for dir in SKILL_DIRS {
            registry.discover_in(workspace, dir, &mut warnings);
        }
        (registry, warnings)
    }

    fn discover_in(&mut self, workspace: &Path, under: &str, warnings: &mut Vec<String>) {
        let registry = self;
        let dir = workspace.join(under);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut paths: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path().join("SKILL.md"))
            .filter(|p| p.is_file())
            .collect();
        paths.sort();
        for path in paths {
            let folder = path
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            let shown = format!("{under}/{folder}/SKILL.md");
            let loaded = crate::files::read_own_text(&path, MAX_SKILL_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|text| parse(&text, &folder));
            match loaded {
                Ok(skill) if registry.skills.contains_key(&skill.name) => warnings.push(format!(
                    "skipped {shown}: a skill named {} was found first",
                    skill.name
                )),
                Ok(skill) => {
                    registry.skills.insert(skill.name.clone(), skill);
                }
                Err(problem) => warnings.push(format!("skipped {shown}: {problem}")),
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name.trim())
    }

    /// Every skill, by name.
    pub fn all(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    pub fn names(&self) -> Vec<&str> {
        self.skills.keys().map(String::as_str).collect()
    }

    /// The skill a command message invokes (`/name args`), with the args;
    /// `Err` with the skills' names when `/name` names none; `Ok(None)` for
    /// a message that is no command.
    pub fn command<'a>(&self, text: &'a str) -> Result<Option<(&Skill, &'a str)>, String> {
        let Some((name, args)) = split_command(text) else {
            return Ok(None);
        };
        match self.get(name) {
            Some(skill) => Ok(Some((skill, args))),
            None => Err(format!(
                "there is no skill /{name}; the skills are {}",
                self.names()
                    .iter()
                    .map(|n| format!("/{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// `- name: description` lines for the system prompt (the skills a
    /// model may load).
    pub fn summary(&self) -> String {
        self.all()
            .filter(|s| s.model_invocable)
            .map(|s| format!("- {}: {}", s.name, s.description))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `/name args` → (`name`, `args`); `None` for text that is no command
/// (`"/etc/hosts is missing"` is none: a name has no `/`).
pub fn split_command(text: &str) -> Option<(&str, &str)> {
    let rest = text.trim_start().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let command_like = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
    command_like.then(|| (name, args.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_skills_load_with_summaries_and_bodies() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk");
        let (skills, warnings) = SkillRegistry::discover(&ws);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(skills.names(), ["escalation-rules", "triage-sop"]);
        assert!(skills.summary().contains("- triage-sop: 工单分流标准流程"));
        let body = &skills.get("escalation-rules").unwrap().body;
        assert!(
            body.starts_with("# 升级判断规则") && body.contains("升级 L2"),
            "{body}"
        );
        assert!(
            !skills.summary().contains("一律升级 L2"),
            "bodies stay out of the prompt"
        );
    }

    #[test]
    fn malformed_skills_are_skipped_with_the_file_named() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".tinycode/skills");
        std::fs::create_dir_all(dir.join("good")).unwrap();
        std::fs::create_dir_all(dir.join("bad")).unwrap();
        std::fs::write(
            dir.join("good/SKILL.md"),
            "---\nname: good\ndescription: Does good.\n---\nBody\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("bad/SKILL.md"),
            "---\nname: bad\n---\nno description\n",
        )
        .unwrap();
        let (skills, warnings) = SkillRegistry::discover(tmp.path());
        assert_eq!(skills.names(), ["good"]);
        assert_eq!(skills.get("good").unwrap().body, "Body\n");
        assert_eq!(
            warnings,
            ["skipped .tinycode/skills/bad/SKILL.md: frontmatter `description` is missing"]
        );
    }

    #[test]
    fn claude_skills_commands_and_people_only_skills() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |dir: &str, name: &str, extra: &str| {
            let d = tmp.path().join(dir).join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("SKILL.md"),
                format!(
                    "---\nname: {name}\ndescription: {name} steps.\n{extra}---\nBody of {name}\n"
                ),
            )
            .unwrap();
        };
        write(".tinycode/skills", "refund-sop", "");
        write(".claude/skills", "refund-sop", "");
        write(
            ".claude/skills",
            "close-month",
            "disable-model-invocation: true\n",
        );
        let (skills, warnings) = SkillRegistry::discover(tmp.path());
        assert_eq!(skills.names(), ["close-month", "refund-sop"]);
        assert_eq!(
            warnings,
            [
                "skipped .claude/skills/refund-sop/SKILL.md: a skill named refund-sop was found first"
            ]
        );
        assert!(skills.summary().contains("refund-sop"));
        assert!(!skills.summary().contains("close-month"), "people only");
        let (skill, args) = skills.command("/refund-sop T-1001 now").unwrap().unwrap();
        assert_eq!((skill.name.as_str(), args), ("refund-sop", "T-1001 now"));
        assert_eq!(skills.command("/close-month").unwrap().unwrap().1, "");
        assert!(skills.command("hello /refund-sop").unwrap().is_none());
        assert!(skills.command("/etc/hosts is missing").unwrap().is_none());
        let err = skills.command("/nope x").unwrap_err();
        assert_eq!(
            err,
            "there is no skill /nope; the skills are /close-month, /refund-sop"
        );
    }
}
