//! The desk's own history as training data for the offline model: every
//! ticket with a category, queue or priority decided on it is an example
//! (its subject and customer messages → that field). Trained from the
//! history projection whenever its generation moves (at most every
//! [`RETRAIN_EVERY`]), off the async threads, and kept on disk
//! (`saved.rs`): a start whose history has not changed since reads the
//! model back instead of training again; one whose history moved uses the
//! kept model until the new one is trained. A field whose predicted class
//! has fewer than [`MIN_SUPPORT`] examples, or that has fewer than
//! [`MIN_EXAMPLES`] in all, is left to the TINY.md rules.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::Classifier;
pub use super::model::ticket_text;
use super::model::{HistoryModel, HistoryRow, generation, labelled};
use crate::projection::{ProjectionError, Projector, ProjectorHandle};
use crate::store::EventStore;

/// Examples a predicted class needs before the history decides.
pub const MIN_SUPPORT: usize = 3;
/// Examples a field needs in all before it is learned.
pub const MIN_EXAMPLES: usize = 8;
/// How often, at least, the learner looks for new decisions; and at
/// most a tenth of its time goes to training (a pause of ten times the
/// last training).
pub const RETRAIN_EVERY: Duration = Duration::from_secs(2);

/// The fields learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Category,
    Queue,
    Priority,
}

/// What the history says for one field of one ticket.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    pub label: String,
    /// Examples of that label in the history.
    pub support: usize,
    /// How sure the model is (calibrated; `None`: too little history).
    pub confidence: Option<f32>,
}

/// Models trained on the history as it was at one point.
#[derive(Default)]
pub struct Learned {
    category: Option<Classifier>,
    queue: Option<Classifier>,
    priority: Option<Classifier>,
    /// Tickets that taught something.
    pub examples: usize,
}

impl Learned {
    /// Train on the decisions people made (the history read model's rows).
    pub fn train(rows: impl Iterator<Item = HistoryRow>) -> Self {
        let rows: Vec<(String, BTreeMap<String, String>)> =
            rows.map(|r| (r.text(), r.labels)).collect();
        let field = |name: &str| {
            let examples: Vec<(&str, &str)> = rows
                .iter()
                .filter_map(|(text, labels)| Some((text.as_str(), labels.get(name)?.as_str())))
                .collect();
            if examples.len() < MIN_EXAMPLES {
                return None;
            }
            Classifier::train(examples)
        };
        Self {
            category: field("category"),
            queue: field("queue"),
            priority: field("priority"),
            examples: rows.len(),
        }
    }

    /// The three fields' models, in the kept file's order.
    fn fields(&self) -> [Option<&Classifier>; 3] {
        [
            self.category.as_ref(),
            self.queue.as_ref(),
            self.priority.as_ref(),
        ]
    }

    /// A model read back from disk.
    fn from_kept(kept: super::saved::Kept) -> Self {
        let [category, queue, priority] = kept.fields;
        Self {
            category,
            queue,
            priority,
            examples: kept.examples,
        }
    }

    /// The history's answer for `field`, unless it is too thin.
    pub fn suggest(&self, field: Field, text: &str) -> Option<Suggestion> {
        let model = match field {
            Field::Category => self.category.as_ref(),
            Field::Queue => self.queue.as_ref(),
            Field::Priority => self.priority.as_ref(),
        }?;
        let p = model.predict(text);
        (p.support >= MIN_SUPPORT && p.margin > 0.0).then_some(Suggestion {
            label: p.label,
            support: p.support,
            confidence: p.confidence,
        })
    }
}

/// The learner of this process's desk (the offline model asks it).
pub struct TicketLearner {
    learned: RwLock<Arc<Learned>>,
    /// The history read model it trains from.
    projector: ProjectorHandle,
    /// Where the trained model is kept (`None`: not kept).
    kept: Option<PathBuf>,
}

/// The trained offline model, kept in the daemon's state directory.
pub const KEPT_MODEL_FILE: &str = "offline-model.bin";

/// The environment variable naming a kept model a daemon uses frozen
/// (an eval's scratch desk measuring the live desk's model).
pub const FROZEN_MODEL_ENV: &str = "TINYCODE_FROZEN_MODEL";

impl TicketLearner {
    /// A learner that uses the model kept at `frozen`, read before this
    /// returns, and never trains: `eval --with-history` measures the live
    /// desk's model in a scratch desk that has no history of its own.
    pub async fn start_frozen(
        store: &EventStore,
        frozen: PathBuf,
    ) -> Result<Arc<Self>, ProjectionError> {
        let learner = Arc::new(Self {
            learned: RwLock::new(Arc::new(Learned::default())),
            projector: Projector::spawn(store, Arc::new(HistoryModel))?,
            kept: Some(frozen),
        });
        if learner.read_back().await.is_none() {
            tracing::warn!("the frozen offline model could not be read; the rules decide");
        }
        Ok(learner)
    }

    /// Follow the log into the history model and learn in the background
    /// (whoever needs it — the offline model — is handed this learner):
    /// once the model has caught up (the daemon does not wait; until then
    /// the rules decide), the model kept at `kept` is read back, and
    /// trained again only when the history moved past it; then again as
    /// decisions arrive.
    pub fn start(store: &EventStore, kept: Option<PathBuf>) -> Result<Arc<Self>, ProjectionError> {
        let learner = Arc::new(Self {
            learned: RwLock::new(Arc::new(Learned::default())),
            projector: Projector::spawn(store, Arc::new(HistoryModel))?,
            kept,
        });
        let weak = Arc::downgrade(&learner);
        let head = store.last_sequence();
        tokio::spawn(async move {
            let Some(first) = weak.upgrade() else { return };
            if let Err(e) = first.projector.wait_for(head).await {
                tracing::error!(error = %e, "the history model stopped; the offline model uses its rules only");
                return;
            }
            let mut seen = first.generation();
            let mut took = Duration::ZERO;
            if first.read_back().await != Some(seen) {
                took = first.retrain(seen).await;
            }
            drop(first);
            loop {
                tokio::time::sleep(RETRAIN_EVERY.max(took * 10)).await;
                let Some(learner) = weak.upgrade() else {
                    return;
                };
                let now = learner.generation();
                if now != seen {
                    seen = now;
                    took = learner.retrain(now).await;
                }
            }
        });
        Ok(learner)
    }

    /// The history read model (status, rebuild, `eval --from-history`).
    pub fn projector(&self) -> &ProjectorHandle {
        &self.projector
    }

    /// The history's generation now (0 when it cannot be read: trained
    /// again).
    fn generation(&self) -> u64 {
        generation(self.projector.tree()).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "the history's generation cannot be read");
            0
        })
    }

    /// Use the kept model, if there is one; returns its generation.
    async fn read_back(&self) -> Option<u64> {
        let path = self.kept.clone()?;
        let started = std::time::Instant::now();
        match tokio::task::spawn_blocking(move || super::saved::load(&path)).await {
            Ok(Ok(Some(kept))) => {
                let generation = kept.generation;
                let learned = Arc::new(Learned::from_kept(kept));
                // In use before it is logged: whoever waits for the line
                // triages with it.
                *self.learned.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&learned);
                tracing::info!(
                    examples = learned.examples,
                    generation,
                    ms = started.elapsed().as_millis() as u64,
                    "the offline model was read back"
                );
                Some(generation)
            }
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the kept offline model was not used");
                None
            }
            Err(e) => {
                tracing::error!(error = %e, "reading the kept offline model failed");
                None
            }
        }
    }

    /// Train again on the history as of `generation` (read before its
    /// rows), and keep the result; returns how long it took.
    async fn retrain(&self, generation: u64) -> Duration {
        let tree = self.projector.tree().clone();
        let kept = self.kept.clone();
        let started = std::time::Instant::now();
        let trained = tokio::task::spawn_blocking(move || {
            // A row that cannot be read stops this training (a store that
            // fails once usually fails for every row: never one warning
            // per row); the model learned before stays in use.
            let mut failed = None;
            let learned = Learned::train(
                labelled(&tree).map_while(|row| row.map_err(|e| failed = Some(e.to_string())).ok()),
            );
            if let Some(e) = failed {
                return Err(e);
            }
            if let Some(path) = kept
                && let Err(e) = super::saved::save(&path, learned.fields(), learned.examples, generation)
            {
                tracing::warn!(error = %e, path = %path.display(), "the offline model could not be kept; the next start trains it again");
            }
            Ok(learned)
        })
        .await;
        match trained {
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                "the history could not be read for learning; the model learned before stays in use"
            ),
            Ok(Ok(learned)) => {
                let learned = Arc::new(learned);
                // In use before it is logged (as when read back).
                *self.learned.write().unwrap_or_else(|p| p.into_inner()) = Arc::clone(&learned);
                tracing::info!(
                    examples = learned.examples,
                    generation,
                    ms = started.elapsed().as_millis() as u64,
                    "the offline model learned from the desk's history"
                );
            }
            Err(e) => tracing::error!(error = %e, "learning from the desk's history failed"),
        }
        started.elapsed()
    }

    pub fn current(&self) -> Arc<Learned> {
        Arc::clone(&self.learned.read().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(subject: &str, body: &str, category: &str, queue: &str) -> HistoryRow {
        HistoryRow {
            subject: subject.into(),
            messages: vec![body.into()],
            labels: [("category", category), ("queue", queue)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn history(refund_queue: &str) -> Vec<HistoryRow> {
        let mut all = Vec::new();
        for i in 0..6 {
            all.push(row(
                &format!("退款申请 订单 {i}"),
                "我要退款，钱还没退回",
                "退款",
                refund_queue,
            ));
            all.push(row(
                &format!("物流 包裹 {i}"),
                "快递停滞没有更新",
                "物流",
                "物流组",
            ));
        }
        all
    }

    #[test]
    fn the_history_decides_once_it_is_thick_enough() {
        let learned = Learned::train(history("VIP组").into_iter());
        assert_eq!(learned.examples, 12);
        let text = ticket_text("退款 订单 9931", ["申请退款"].into_iter());
        assert_eq!(
            learned.suggest(Field::Queue, &text),
            Some(Suggestion {
                label: "VIP组".into(),
                support: 6,
                confidence: None, // 12 examples: too few to calibrate
            })
        );
        assert_eq!(
            learned.suggest(Field::Category, &text).map(|s| s.label),
            Some("退款".into())
        );
        assert_eq!(
            learned.suggest(Field::Priority, &text),
            None,
            "no priorities decided"
        );
    }

    #[test]
    fn thin_history_leaves_it_to_the_rules() {
        let few: Vec<HistoryRow> = history("VIP组").into_iter().take(4).collect();
        let learned = Learned::train(few.into_iter());
        assert_eq!(learned.suggest(Field::Queue, "退款"), None);
        assert_eq!(Learned::default().suggest(Field::Category, "退款"), None);
    }
}
