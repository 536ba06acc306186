//! Knowledge articles: `knowledge/<id>.md` with YAML frontmatter (id, title,
//! tags as a comma list or a YAML list, owner, updatedAt) and a Markdown
//! body; and the edit operation shared by the `propose_knowledge_edit` tool
//! and the approval preview: unique match of `old_text`, replace, unified
//! diff with +added/−removed line counts.

use serde::Deserialize;
use similar::{ChangeTag, TextDiff};
use tinycode_shared::proto::KnowledgeArticle;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArticleError {
    #[error("missing frontmatter: the file must start with a `---` line")]
    NoFrontmatter,
    #[error("the frontmatter is not closed by a `---` line")]
    Unclosed,
    #[error("frontmatter: {0}")]
    Yaml(String),
    #[error("frontmatter field `{0}` is missing")]
    Missing(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("old_text is empty; quote the exact passage to replace")]
    EmptyOldText,
    #[error("old_text was not found in article {0}; read_article first and quote it exactly")]
    NotFound(String),
    #[error(
        "old_text occurs {count} times in article {id}; quote a longer passage so it matches once"
    )]
    Ambiguous { id: String, count: usize },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Frontmatter {
    id: Option<String>,
    title: Option<String>,
    #[serde(default)]
    tags: Option<Tags>,
    owner: Option<String>,
    updated_at: Option<yaml_serde::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Tags {
    Comma(String),
    List(Vec<String>),
}

/// Parse an article file. `file_id` (from the file name) is used when the
/// frontmatter has no `id`.
pub fn parse_article(file_id: &str, text: &str) -> Result<KnowledgeArticle, ArticleError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or(ArticleError::NoFrontmatter)?;
    let (yaml, body) = split_frontmatter(rest).ok_or(ArticleError::Unclosed)?;
    let fm: Frontmatter =
        yaml_serde::from_str(yaml).map_err(|e| ArticleError::Yaml(e.to_string()))?;
    let tags = match fm.tags {
        None => Vec::new(),
        Some(Tags::Comma(s)) => s
            .split([',', '，'])
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        Some(Tags::List(v)) => v.into_iter().map(|t| t.trim().to_string()).collect(),
    };
    let updated_at = match fm.updated_at {
        None => String::new(),
        Some(yaml_serde::Value::String(s)) => s,
        Some(other) => yaml_serde::to_string(&other)
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    Ok(KnowledgeArticle {
        id: fm.id.unwrap_or_else(|| file_id.to_string()),
        title: fm.title.ok_or(ArticleError::Missing("title"))?,
        tags,
        owner: fm.owner.unwrap_or_default(),
        updated_at,
        body: body.to_string(),
    })
}

/// Split `yaml\n---\nbody` at the closing `---` line.
fn split_frontmatter(rest: &str) -> Option<(&str, &str)> {
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

/// A planned edit: the whole file before and after, and its diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditPlan {
    pub before: String,
    pub after: String,
    pub diff: String,
    pub added: u32,
    pub removed: u32,
}

impl EditPlan {
    /// Nothing would change (old == new).
    pub fn is_noop(&self) -> bool {
        self.before == self.after
    }
}

/// Replace the single occurrence of `old_text` in `content` with `new_text`.
pub fn plan_edit(
    id: &str,
    content: &str,
    old_text: &str,
    new_text: &str,
) -> Result<EditPlan, EditError> {
    if old_text.is_empty() {
        return Err(EditError::EmptyOldText);
    }
    let count = content.matches(old_text).count();
    match count {
        0 => return Err(EditError::NotFound(id.to_string())),
        1 => {}
        _ => {
            return Err(EditError::Ambiguous {
                id: id.to_string(),
                count,
            });
        }
    }
    let after = content.replacen(old_text, new_text, 1);
    let (diff, added, removed) = unified_diff(id, content, &after);
    Ok(EditPlan {
        before: content.to_string(),
        after,
        diff,
        added,
        removed,
    })
}

/// Unified diff of an article file, with added/removed line counts.
pub fn unified_diff(id: &str, before: &str, after: &str) -> (String, u32, u32) {
    let diff = TextDiff::from_lines(before, after);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(
            &format!("a/knowledge/{id}.md"),
            &format!("b/knowledge/{id}.md"),
        )
        .to_string();
    (text, added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(id: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../../../shared/fixtures/tinycode-support-desk/knowledge/{id}.md"
            )),
        )
        .unwrap()
    }

    #[test]
    fn fixture_articles_parse_with_comma_tags() {
        let a = parse_article("refund-policy", &fixture("refund-policy")).unwrap();
        assert_eq!(a.id, "refund-policy");
        assert_eq!(a.title, "退款政策");
        assert_eq!(a.tags, ["退款", "售后", "时效"]);
        assert_eq!(a.owner, "售后组");
        assert_eq!(a.updated_at, "2026-06-01");
        assert!(a.body.starts_with("# 退款政策"));
    }

    #[test]
    fn yaml_list_tags_and_missing_id_work() {
        let a = parse_article(
            "from-file",
            "---\ntitle: T\ntags:\n  - a\n  - b\n---\nbody\n",
        )
        .unwrap();
        assert_eq!(
            (a.id.as_str(), a.tags.clone()),
            ("from-file", vec!["a".to_string(), "b".into()])
        );
        assert_eq!(a.body, "body\n");
    }

    #[test]
    fn bad_articles_say_what_is_wrong() {
        assert_eq!(
            parse_article("x", "# no frontmatter").unwrap_err(),
            ArticleError::NoFrontmatter
        );
        assert_eq!(
            parse_article("x", "---\ntitle: t\n").unwrap_err(),
            ArticleError::Unclosed
        );
        assert_eq!(
            parse_article("x", "---\nowner: o\n---\n").unwrap_err(),
            ArticleError::Missing("title")
        );
        let err = parse_article("x", "---\ntitle: t\ncolour: red\n---\n").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn an_edit_replaces_one_unique_match_and_counts_lines() {
        let content = fixture("refund-policy");
        let plan = plan_edit(
            "refund-policy",
            &content,
            "款项在 7 个工作日内退回原支付渠道。",
            "款项在 5 个工作日内退回原支付渠道。",
        )
        .unwrap();
        assert_eq!((plan.added, plan.removed), (1, 1));
        assert!(
            plan.diff.starts_with(
                "--- a/knowledge/refund-policy.md\n+++ b/knowledge/refund-policy.md\n"
            )
        );
        assert!(
            plan.diff
                .contains("-退款审核通过后，款项在 7 个工作日内退回原支付渠道。")
        );
        assert!(
            plan.diff
                .contains("+退款审核通过后，款项在 5 个工作日内退回原支付渠道。")
        );
        assert!(plan.after.contains("5 个工作日") && !plan.after.contains("7 个工作日"));
        assert!(!plan.is_noop());
    }

    #[test]
    fn edits_refuse_missing_ambiguous_and_empty_matches() {
        let content = "a\nsame\nsame\n";
        assert_eq!(
            plan_edit("k", content, "", "x").unwrap_err(),
            EditError::EmptyOldText
        );
        assert_eq!(
            plan_edit("k", content, "zzz", "x").unwrap_err(),
            EditError::NotFound("k".into())
        );
        assert_eq!(
            plan_edit("k", content, "same", "x").unwrap_err(),
            EditError::Ambiguous {
                id: "k".into(),
                count: 2
            }
        );
        let noop = plan_edit("k", content, "a\n", "a\n").unwrap();
        assert!(noop.is_noop());
        assert_eq!((noop.added, noop.removed), (0, 0));
    }
}
