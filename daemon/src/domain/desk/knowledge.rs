//! Knowledge articles: list, get, and edits recorded in `kb-<id>` before the
//! file is written.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, KnowledgeArticle, KnowledgeEdited};

use super::{Desk, DomainError, article_id, article_stream, lock, write_atomic};
use crate::domain::knowledge::{EditPlan, parse_article, plan_edit};
use crate::domain::search::{Document, Kind};
use crate::store::{ExpectedVersion, StoreError};

/// An applied knowledge edit.
#[derive(Debug, Clone)]
pub struct AppliedEdit {
    pub plan: EditPlan,
    /// `None` when nothing changed (old == new): nothing was recorded.
    pub event: Option<Arc<Event>>,
}

impl Desk {
    /// Articles ordered by id, optionally only those carrying `tag`.
    pub fn list_articles(&self, tag: &str) -> Vec<KnowledgeArticle> {
        lock(&self.articles)
            .values()
            .filter(|a| tag.is_empty() || a.tags.iter().any(|t| t == tag))
            .cloned()
            .collect()
    }

    pub fn get_article(&self, raw_id: &str) -> Result<KnowledgeArticle, DomainError> {
        let id = article_id(raw_id)?;
        lock(&self.articles)
            .get(&id)
            .cloned()
            .ok_or(DomainError::ArticleNotFound(id))
    }

    fn article_path(&self, id: &str) -> std::path::PathBuf {
        self.knowledge_dir.join(format!("{id}.md"))
    }

    fn read_article_file(&self, id: &str) -> Result<String, DomainError> {
        self.get_article(id)?;
        let path = self.article_path(id);
        std::fs::read_to_string(&path).map_err(|source| DomainError::Io {
            action: "read",
            path,
            source,
        })
    }

    /// What an edit would do, without doing it (approval previews).
    pub fn preview_article_edit(
        &self,
        raw_id: &str,
        old_text: &str,
        new_text: &str,
    ) -> Result<EditPlan, DomainError> {
        let id = article_id(raw_id)?;
        let content = self.read_article_file(&id)?;
        Ok(plan_edit(&id, &content, old_text, new_text)?)
    }

    /// Edit an article: plan on the current file, record `KnowledgeEdited`,
    /// then write the file and re-index. The same plan as the preview.
    pub async fn edit_article(
        &self,
        raw_id: &str,
        old_text: &str,
        new_text: &str,
        rationale: &str,
    ) -> Result<AppliedEdit, DomainError> {
        let id = article_id(raw_id)?;
        let _one_at_a_time = self.edit_lock.lock().await;
        let content = self.read_article_file(&id)?;
        let plan = plan_edit(&id, &content, old_text, new_text)?;
        if plan.is_noop() {
            return Ok(AppliedEdit { plan, event: None });
        }
        let stream = article_stream(&id);
        let version = self.store.stream_version(&stream)?;
        let payload = Payload::KnowledgeEdited(KnowledgeEdited {
            article_id: id.clone(),
            old_text: old_text.to_string(),
            new_text: new_text.to_string(),
            rationale: rationale.to_string(),
            diff: plan.diff.clone(),
            added: plan.added,
            removed: plan.removed,
            content_after: plan.after.clone(),
        });
        let events = match self
            .store
            .append(&stream, ExpectedVersion::Exact(version), vec![payload])
            .await
        {
            Ok(events) => events,
            Err(StoreError::Conflict { .. }) => {
                return Err(DomainError::Busy(format!("article {id}")));
            }
            Err(e) => return Err(e.into()),
        };
        write_atomic(&self.article_path(&id), &plan.after)?;
        match parse_article(&id, &plan.after) {
            Ok(mut article) => {
                article.id = id.clone();
                self.index_article(&article);
                lock(&self.articles).insert(id, article);
            }
            Err(e) => {
                tracing::warn!(article = %id, error = %e, "edited article no longer parses; keeping the previous metadata")
            }
        }
        Ok(AppliedEdit {
            plan,
            event: events.into_iter().next(),
        })
    }

    pub(crate) fn index_article(&self, a: &KnowledgeArticle) {
        lock(&self.index).upsert(Document {
            kind: Kind::Article,
            id: &a.id,
            title: &a.title,
            keywords: &a.tags,
            body: &a.body,
        });
    }
}
