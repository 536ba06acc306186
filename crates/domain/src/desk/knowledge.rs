//! Knowledge articles: list and get (the knowledge projection), and edits
//! recorded in `kb-<id>`; the mirror writes the file.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::{Event, KnowledgeArticle, KnowledgeEdited, ToolOrigin};

use super::models::{all_articles, parse_stored, stored_article};
use super::{Desk, DomainError, article_id, article_stream};
use crate::knowledge::{EditPlan, plan_edit};
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
        all_articles(self.kb.tree())
            .filter_map(|row| match row {
                Ok((id, content)) => parse_stored(&id, &content),
                Err(e) => {
                    tracing::error!(error = %e, "cannot read a stored article");
                    None
                }
            })
            .filter(|a| tag.is_empty() || a.tags.iter().any(|t| t == tag))
            .collect()
    }

    /// An edit found in the log, as [`AppliedEdit`] (the content before it
    /// is the previous event's).
    async fn applied_before(&self, id: &str, done: Event) -> Result<AppliedEdit, DomainError> {
        let mut before = String::new();
        for e in self
            .store
            .read_stream(&article_stream(id), 1, usize::MAX)
            .await?
        {
            if e.sequence == done.sequence {
                break;
            }
            if let Some(content) = super::models::article_content(&e) {
                before = content.to_string();
            }
        }
        let Some(Payload::KnowledgeEdited(edit)) = &done.payload else {
            return Err(DomainError::ArticleNotFound(id.into()));
        };
        Ok(AppliedEdit {
            plan: EditPlan {
                before,
                after: edit.content_after.clone(),
                diff: edit.diff.clone(),
                added: edit.added,
                removed: edit.removed,
            },
            event: Some(Arc::new(done)),
        })
    }

    pub(super) fn article_count(&self) -> Result<usize, DomainError> {
        Ok(all_articles(self.kb.tree()).count())
    }

    pub fn get_article(&self, raw_id: &str) -> Result<KnowledgeArticle, DomainError> {
        let id = article_id(raw_id)?;
        let (content, _) = self.article_content(&id)?;
        parse_stored(&id, &content).ok_or(DomainError::ArticleNotFound(id))
    }

    /// The article's file content and stream version, as the log has them.
    fn article_content(&self, id: &str) -> Result<(String, u64), DomainError> {
        stored_article(self.kb.tree(), id)?.ok_or_else(|| DomainError::ArticleNotFound(id.into()))
    }

    /// What an edit would do, without doing it (approval previews).
    pub fn preview_article_edit(
        &self,
        raw_id: &str,
        old_text: &str,
        new_text: &str,
    ) -> Result<EditPlan, DomainError> {
        let id = article_id(raw_id)?;
        let (content, _) = self.article_content(&id)?;
        Ok(plan_edit(&id, &content, old_text, new_text)?)
    }

    /// Edit an article: plan on its content as the log has it, record
    /// `KnowledgeEdited` (with the whole file after), wait for the
    /// projection. The same plan as the preview; the mirror writes the file.
    /// With `origin`, at most once per tool call: an edit the call already
    /// made is returned from the log instead of applied again.
    pub async fn edit_article(
        &self,
        raw_id: &str,
        old_text: &str,
        new_text: &str,
        rationale: &str,
        origin: Option<&ToolOrigin>,
    ) -> Result<AppliedEdit, DomainError> {
        let id = article_id(raw_id)?;
        let _one_at_a_time = self.edit_lock.lock().await;
        if let Some(origin) = origin
            && let Some(done) = self.made_by(&article_stream(&id), origin).await?
        {
            return self.applied_before(&id, done).await;
        }
        let (content, version) = self.article_content(&id)?;
        let plan = plan_edit(&id, &content, old_text, new_text)?;
        if plan.is_noop() {
            return Ok(AppliedEdit { plan, event: None });
        }
        let payload = Payload::KnowledgeEdited(KnowledgeEdited {
            article_id: id.clone(),
            old_text: old_text.to_string(),
            new_text: new_text.to_string(),
            rationale: rationale.to_string(),
            diff: plan.diff.clone(),
            added: plan.added,
            removed: plan.removed,
            content_after: plan.after.clone(),
            origin: origin.cloned(),
        });
        let expected = if version == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exact(version)
        };
        let events = match self
            .store
            .append(&article_stream(&id), expected, vec![payload])
            .await
        {
            Ok(events) => events,
            Err(StoreError::Conflict { .. }) => {
                return Err(DomainError::Busy(format!("article {id}")));
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(last) = events.last() {
            self.kb.wait_for(last.sequence).await?;
        }
        Ok(AppliedEdit {
            plan,
            event: events.into_iter().next(),
        })
    }
}
