//! `tinycode skills install PATH | remove NAME`: skill folders copied into
//! (or removed from) `.tinycode/skills/`. A skill is checked before
//! anything is written (its `SKILL.md` must load), copied into a temp
//! folder and renamed into place, so a half-copied skill is never seen.
//! Skills under `.claude/skills/` are read but never changed.

use std::path::{Path, PathBuf};

use super::{SKILL_DIRS, Skill, parse};

/// At most this many files, and bytes in all, per skill folder.
pub const MAX_FILES: usize = 200;
pub const MAX_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SkillInstallError {
    #[error("{}: no such file or folder", .0.display())]
    Missing(PathBuf),
    #[error("{}: a skill is a folder holding SKILL.md (or a SKILL.md file itself)", .0.display())]
    NoSkillFile(PathBuf),
    #[error("{}: {problem}", path.display())]
    Invalid { path: PathBuf, problem: String },
    #[error("a skill named `{0}` is installed already; remove it first, or install with --replace")]
    Exists(String),
    #[error("there is no skill named `{name}` in .tinycode/skills (installed: {known})")]
    NoSuchSkill { name: String, known: String },
    #[error(
        "`{0}` lives in .claude/skills, which tinycode reads but leaves alone; delete it there"
    )]
    NotOurs(String),
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SkillInstallError {
    let path = path.to_path_buf();
    move |source| SkillInstallError::Io {
        action,
        path,
        source,
    }
}

/// Install the skill at `from` (a folder with `SKILL.md`, or the file
/// itself); returns it.
pub fn install(workspace: &Path, from: &Path, replace: bool) -> Result<Skill, SkillInstallError> {
    let meta = std::fs::metadata(from).map_err(|_| SkillInstallError::Missing(from.into()))?;
    let (folder, skill_file) = if meta.is_dir() {
        (Some(from), from.join("SKILL.md"))
    } else {
        (None, from.to_path_buf())
    };
    if !skill_file.is_file() {
        return Err(SkillInstallError::NoSkillFile(from.into()));
    }
    let invalid = |problem: String| SkillInstallError::Invalid {
        path: skill_file.clone(),
        problem,
    };
    let files = match folder {
        Some(folder) => listed(folder)?,
        None => vec![(PathBuf::from("SKILL.md"), skill_file.clone())],
    };
    let text = std::fs::read_to_string(&skill_file).map_err(|e| invalid(e.to_string()))?;
    let named_by = folder
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let skill = parse(&text, &named_by).map_err(invalid)?;

    let root = workspace.join(SKILL_DIRS[0]);
    let dest = root.join(&skill.name);
    if dest.exists() && !replace {
        return Err(SkillInstallError::Exists(skill.name));
    }
    let staging = root.join(format!(".installing-{}-{}", skill.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let copied = (|| {
        for (relative, source) in &files {
            let target = staging.join(relative);
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir).map_err(io("create", dir))?;
            }
            std::fs::copy(source, &target).map_err(io("copy", source))?;
        }
        if dest.exists() {
            std::fs::remove_dir_all(&dest).map_err(io("replace", &dest))?;
        }
        std::fs::rename(&staging, &dest).map_err(io("install into", &dest))
    })();
    if copied.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    copied?;
    Ok(skill)
}

/// Every file under `folder` (relative path, full path), refusing links,
/// too many files or too many bytes.
fn listed(folder: &Path) -> Result<Vec<(PathBuf, PathBuf)>, SkillInstallError> {
    let mut files = Vec::new();
    let mut bytes = 0;
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io("read", &dir))? {
            let entry = entry.map_err(io("read", &dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io("read", &path))?;
            let invalid = |problem: String| SkillInstallError::Invalid {
                path: path.clone(),
                problem,
            };
            if kind.is_symlink() {
                return Err(invalid(
                    "a skill holds plain files; links are not copied".into(),
                ));
            }
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            bytes += entry.metadata().map_err(io("read", &path))?.len();
            let relative = path.strip_prefix(folder).unwrap_or(&path).to_path_buf();
            files.push((relative, path));
            if files.len() > MAX_FILES || bytes > MAX_BYTES {
                return Err(SkillInstallError::Invalid {
                    path: folder.to_path_buf(),
                    problem: format!(
                        "a skill folder holds at most {MAX_FILES} files and {} MiB",
                        MAX_BYTES >> 20
                    ),
                });
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Remove the installed skill `name` (its folder in `.tinycode/skills`).
pub fn remove(workspace: &Path, name: &str) -> Result<(), SkillInstallError> {
    let valid = crate::ids::sanitize_id(name).ok();
    let ours = valid
        .as_ref()
        .map(|n| workspace.join(SKILL_DIRS[0]).join(n));
    if let Some(dir) = ours.filter(|d| d.join("SKILL.md").is_file()) {
        return std::fs::remove_dir_all(&dir).map_err(io("remove", &dir));
    }
    if valid
        .as_ref()
        .is_some_and(|n| workspace.join(SKILL_DIRS[1]).join(n).is_dir())
    {
        return Err(SkillInstallError::NotOurs(name.to_string()));
    }
    let known: Vec<String> = std::fs::read_dir(workspace.join(SKILL_DIRS[0]))
        .map(|entries| {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("SKILL.md").is_file())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect();
            names.sort();
            names
        })
        .unwrap_or_default();
    Err(SkillInstallError::NoSuchSkill {
        name: valid.unwrap_or_else(|| "(an invalid name)".into()),
        known: if known.is_empty() {
            "none".into()
        } else {
            known.join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill_folder(root: &Path, name: &str) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("refs")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: refund-check\ndescription: Check a refund\n---\nRead the policy.\n",
        )
        .unwrap();
        std::fs::write(dir.join("refs/policy.md"), "30 days").unwrap();
        dir
    }

    #[test]
    fn a_folder_is_installed_whole_and_removed() {
        let (ws, src) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let from = skill_folder(src.path(), "anything");
        let skill = install(ws.path(), &from, false).unwrap();
        assert_eq!(skill.name, "refund-check");
        let dest = ws.path().join(".tinycode/skills/refund-check");
        assert_eq!(
            std::fs::read_to_string(dest.join("refs/policy.md")).unwrap(),
            "30 days"
        );
        let (registry, warnings) = super::super::SkillRegistry::discover(ws.path());
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(registry.names(), ["refund-check"]);

        let err = install(ws.path(), &from, false).unwrap_err();
        assert!(matches!(err, SkillInstallError::Exists(_)), "{err}");
        install(ws.path(), &from, true).unwrap();

        remove(ws.path(), "refund-check").unwrap();
        assert!(!dest.exists());
        let err = remove(ws.path(), "refund-check").unwrap_err();
        assert!(err.to_string().contains("installed: none"), "{err}");
        let err = remove(ws.path(), "../../etc").unwrap_err();
        assert!(
            matches!(err, SkillInstallError::NoSuchSkill { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_bad_skill_is_refused_before_anything_is_written() {
        let (ws, src) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let bad = src.path().join("bad");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("SKILL.md"), "no frontmatter").unwrap();
        let err = install(ws.path(), &bad, false).unwrap_err();
        assert!(err.to_string().contains("missing frontmatter"), "{err}");
        let err = install(ws.path(), src.path(), false).unwrap_err();
        assert!(matches!(err, SkillInstallError::NoSkillFile(_)), "{err}");
        let err = install(ws.path(), &src.path().join("nope"), false).unwrap_err();
        assert!(matches!(err, SkillInstallError::Missing(_)), "{err}");
        let linked = skill_folder(src.path(), "linked");
        std::os::unix::fs::symlink("/etc/passwd", linked.join("passwd")).unwrap();
        let err = install(ws.path(), &linked, false).unwrap_err();
        assert!(err.to_string().contains("links are not copied"), "{err}");
        assert!(!ws.path().join(".tinycode/skills/refund-check").exists());
    }

    #[test]
    fn claude_skills_are_left_alone() {
        let ws = tempfile::tempdir().unwrap();
        skill_folder(&ws.path().join(".claude/skills"), "refund-check");
        let err = remove(ws.path(), "refund-check").unwrap_err();
        assert!(matches!(err, SkillInstallError::NotOurs(_)), "{err}");
    }
}
