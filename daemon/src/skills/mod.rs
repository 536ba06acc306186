//! Skills: `.tinycode/skills/<name>/SKILL.md` with frontmatter `name` and
//! `description`. Only names and descriptions go into the system prompt
//! ([`SkillRegistry::summary`]); a body is loaded on demand (`load_skill`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::domain::ids::sanitize_id;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
}

#[derive(Debug, Default, Clone)]
pub struct SkillRegistry {
    skills: BTreeMap<String, Skill>,
}

#[derive(Deserialize)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
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

impl SkillRegistry {
    /// Load every skill under `<workspace>/.tinycode/skills/`; a malformed
    /// one is skipped with a warning naming the file.
    pub fn discover(workspace: &Path) -> (Self, Vec<String>) {
        let dir = workspace.join(".tinycode/skills");
        let mut registry = Self::default();
        let mut warnings = Vec::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return (registry, warnings);
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
            let shown = format!(".tinycode/skills/{folder}/SKILL.md");
            let loaded = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| {
                    let (yaml, body) =
                        split(&text).ok_or("missing frontmatter (name, description)")?;
                    let fm: Frontmatter = yaml_serde::from_str(yaml).map_err(|e| e.to_string())?;
                    let name = sanitize_id(&fm.name.unwrap_or(folder.clone()))
                        .map_err(|e| format!("bad name: {e}"))?;
                    let description = fm
                        .description
                        .filter(|d| !d.trim().is_empty())
                        .ok_or("frontmatter `description` is missing")?;
                    Ok(Skill {
                        name,
                        description: description.trim().to_string(),
                        body: body.to_string(),
                    })
                });
            match loaded {
                Ok(skill) => {
                    registry.skills.insert(skill.name.clone(), skill);
                }
                Err(problem) => warnings.push(format!("skipped {shown}: {problem}")),
            }
        }
        (registry, warnings)
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

    /// `- name: description` lines for the system prompt.
    pub fn summary(&self) -> String {
        self.all()
            .map(|s| format!("- {}: {}", s.name, s.description))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_skills_load_with_summaries_and_bodies() {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/tinycode-support-desk");
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
}
