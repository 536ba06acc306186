//! Full-text search over tickets and articles: BM25 with field boosts,
//! Latin text tokenised by words and Chinese by jieba (created once), a
//! snippet around the best match. The index is updated on every change.

use std::collections::HashMap;
use std::sync::OnceLock;

use jieba_rs::Jieba;

const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Title / subject / tags count this many times the body.
const TITLE_BOOST: f64 = 3.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Ticket,
    Article,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ticket => "ticket",
            Kind::Article => "article",
        }
    }
}

/// What to index for one document.
pub struct Document<'a> {
    pub kind: Kind,
    pub id: &'a str,
    pub title: &'a str,
    /// Boosted like the title (article tags).
    pub keywords: &'a [String],
    /// Body text, also the source of snippets.
    pub body: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub kind: Kind,
    pub id: String,
    pub title: String,
    pub score: f64,
    pub snippet: String,
}

struct Doc {
    kind: Kind,
    id: String,
    title: String,
    body: String,
    len: f64,
    terms: Vec<String>,
}

#[derive(Default)]
pub struct SearchIndex {
    slots: Vec<Option<Doc>>,
    free: Vec<u32>,
    by_key: HashMap<(Kind, String), u32>,
    /// term → (slot → weighted term frequency)
    postings: HashMap<String, HashMap<u32, f64>>,
    total_len: f64,
    count: usize,
}

/// The trimmed dictionary (see `daemon/data/README.md`): a quarter of the
/// memory of jieba's full one.
const DICTIONARY: &str = include_str!("../data/jieba-dict.txt");

/// The shared jieba segmenter (its dictionary loads once, on first use).
fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(|| {
        Jieba::with_dict(&mut DICTIONARY.as_bytes()).unwrap_or_else(|e| {
            tracing::error!(error = %e, "the embedded dictionary did not load; Chinese text is cut by the HMM alone");
            Jieba::empty()
        })
    })
}

/// Lower-cased search tokens: words for Latin text, jieba's search-mode
/// segments for Chinese; punctuation and whitespace dropped.
pub fn tokenize(text: &str) -> Vec<String> {
    jieba()
        .cut_for_search(text, true)
        .into_iter()
        .filter(|t| t.word.chars().any(char::is_alphanumeric))
        .map(|t| t.word.to_lowercase())
        .collect()
}

/// A document's terms with their weighted frequencies (title and keywords
/// count [`TITLE_BOOST`] times), and its weighted length.
pub fn weighted_terms(doc: &Document<'_>) -> (HashMap<String, f64>, f64) {
    let mut tf: HashMap<String, f64> = HashMap::new();
    let mut len = 0.0;
    for (text, weight) in [(doc.title, TITLE_BOOST), (doc.body, 1.0)]
        .into_iter()
        .chain(doc.keywords.iter().map(|k| (k.as_str(), TITLE_BOOST)))
    {
        for token in tokenize(text) {
            *tf.entry(token).or_default() += weight;
            len += weight;
        }
    }
    (tf, len)
}

/// BM25 of one term in one document.
pub fn bm25(idf: f64, tf: f64, len: f64, avg: f64) -> f64 {
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg))
}

/// Inverse document frequency of a term found in `df` of `n` documents.
pub fn idf(n: f64, df: f64) -> f64 {
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

impl SearchIndex {
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Add or replace a document.
    pub fn upsert(&mut self, doc: Document<'_>) {
        self.remove(doc.kind, doc.id);
        let (tf, len) = weighted_terms(&doc);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        for (term, f) in &tf {
            self.postings
                .entry(term.clone())
                .or_default()
                .insert(slot, *f);
        }
        self.slots[slot as usize] = Some(Doc {
            kind: doc.kind,
            id: doc.id.to_string(),
            title: doc.title.to_string(),
            body: doc.body.to_string(),
            len,
            terms: tf.into_keys().collect(),
        });
        self.by_key.insert((doc.kind, doc.id.to_string()), slot);
        self.total_len += len;
        self.count += 1;
    }

    pub fn remove(&mut self, kind: Kind, id: &str) {
        let Some(slot) = self.by_key.remove(&(kind, id.to_string())) else {
            return;
        };
        if let Some(doc) = self.slots[slot as usize].take() {
            for term in &doc.terms {
                if let Some(list) = self.postings.get_mut(term) {
                    list.remove(&slot);
                    if list.is_empty() {
                        self.postings.remove(term);
                    }
                }
            }
            self.total_len -= doc.len;
            self.count -= 1;
        }
        self.free.push(slot);
    }

    /// The best `limit` documents for `query`, optionally of one kind.
    pub fn search(&self, query: &str, limit: usize, kind: Option<Kind>) -> Vec<Hit> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        if terms.is_empty() || self.count == 0 || limit == 0 {
            return Vec::new();
        }
        let n = self.count as f64;
        let avg = (self.total_len / n).max(1.0);
        // Dense scores by slot (every contribution is positive, so 0.0
        // means "not scored yet") and the slots scored, in first-seen order.
        let mut scores = vec![0.0_f64; self.slots.len()];
        let mut scored: Vec<u32> = Vec::new();
        let mut idfs: Vec<(f64, &str)> = Vec::new();
        for term in &terms {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            let idf = idf(n, list.len() as f64);
            idfs.push((idf, term));
            for (&slot, &tf) in list {
                let Some(doc) = &self.slots[slot as usize] else {
                    continue;
                };
                if kind.is_some_and(|k| k != doc.kind) {
                    continue;
                }
                let score = &mut scores[slot as usize];
                if *score == 0.0 {
                    scored.push(slot);
                }
                *score += bm25(idf, tf, doc.len, avg);
            }
        }
        idfs.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut ranked: Vec<(u32, f64)> = scored
            .into_iter()
            .map(|slot| (slot, scores[slot as usize]))
            .collect();
        // Best score first, ties by id: a total order, so the result does
        // not depend on the order documents were scored in. Only the best
        // `limit` are sorted.
        let order = |a: &(u32, f64), b: &(u32, f64)| {
            b.1.total_cmp(&a.1).then_with(|| {
                let id = |s: u32| self.slots[s as usize].as_ref().map(|d| d.id.as_str());
                id(a.0).cmp(&id(b.0))
            })
        };
        if ranked.len() > limit {
            ranked.select_nth_unstable_by(limit - 1, order);
            ranked.truncate(limit);
        }
        ranked.sort_by(order);
        ranked
            .into_iter()
            .filter_map(|(slot, score)| {
                let doc = self.slots[slot as usize].as_ref()?;
                Some(Hit {
                    kind: doc.kind,
                    id: doc.id.clone(),
                    title: doc.title.clone(),
                    score,
                    snippet: snippet(&doc.body, &idfs),
                })
            })
            .collect()
    }
}

/// About 80 characters of `body` around the first occurrence of the rarest
/// query term it contains; the start of the body when none occurs.
pub fn snippet(body: &str, terms_by_idf: &[(f64, &str)]) -> String {
    const BEFORE: usize = 30;
    const AFTER: usize = 50;
    let chars: Vec<char> = body.chars().collect();
    let lower: Vec<char> = body.to_lowercase().chars().collect();
    let at = if lower.len() == chars.len() {
        terms_by_idf.iter().find_map(|(_, term)| {
            let needle: Vec<char> = term.chars().collect();
            lower
                .windows(needle.len().max(1))
                .position(|w| w == needle.as_slice())
        })
    } else {
        None
    };
    let at = at.unwrap_or(0);
    let start = at.saturating_sub(BEFORE);
    let end = (at + AFTER).min(chars.len());
    let mut text: String = chars[start..end]
        .iter()
        .map(|c| if c.is_whitespace() { ' ' } else { *c })
        .collect();
    text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if start > 0 {
        text.insert(0, '…');
    }
    if end < chars.len() {
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_fixture() -> SearchIndex {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/tinycode-support-desk");
        let mut index = SearchIndex::default();
        for id in ["refund-policy", "logistics-sla", "escalation-policy"] {
            let text = std::fs::read_to_string(dir.join(format!("knowledge/{id}.md"))).unwrap();
            let a = super::super::knowledge::parse_article(id, &text).unwrap();
            index.upsert(Document {
                kind: Kind::Article,
                id: &a.id,
                title: &a.title,
                keywords: &a.tags,
                body: &a.body,
            });
        }
        for id in ["T-1001", "T-1002", "T-1003"] {
            let text = std::fs::read_to_string(dir.join(format!("tickets/{id}.json"))).unwrap();
            let t = super::super::ticket::parse_ticket_file(&text).unwrap();
            let body: Vec<&str> = t.messages.iter().map(|m| m.text.as_str()).collect();
            index.upsert(Document {
                kind: Kind::Ticket,
                id: &t.id,
                title: &t.subject,
                keywords: &[],
                body: &body.join("\n"),
            });
        }
        index
    }

    #[test]
    fn chinese_query_ranks_refund_policy_first() {
        let index = index_fixture();
        let hits = index.search("退款 时效", 5, Some(Kind::Article));
        assert_eq!(hits[0].id, "refund-policy", "{hits:#?}");
        assert!(
            hits[0].snippet.contains("时效") || hits[0].snippet.contains("退款"),
            "{}",
            hits[0].snippet
        );
        let hits = index.search("物流 停滞", 5, None);
        assert!(
            matches!(hits[0].id.as_str(), "logistics-sla" | "T-1002"),
            "{hits:#?}"
        );
        let hits = index.search("风控冻结", 5, Some(Kind::Ticket));
        assert_eq!(hits[0].id, "T-1003", "{hits:#?}");
    }

    #[test]
    fn english_queries_work_on_english_text() {
        let mut index = SearchIndex::default();
        let docs = [
            (
                "a",
                "Password reset",
                "Click 'forgot password' to reset your account password.",
            ),
            (
                "b",
                "Shipping times",
                "Parcels ship within two days; tracking updates daily.",
            ),
            (
                "c",
                "Refunds",
                "Refunds are paid back within seven business days.",
            ),
        ];
        for (id, title, body) in docs {
            index.upsert(Document {
                kind: Kind::Article,
                id,
                title,
                keywords: &[],
                body,
            });
        }
        assert_eq!(index.search("reset my PASSWORD", 3, None)[0].id, "a");
        assert_eq!(index.search("refund business days", 3, None)[0].id, "c");
        assert!(index.search("zebra", 3, None).is_empty());
    }

    #[test]
    fn updates_and_removals_change_results() {
        let mut index = SearchIndex::default();
        index.upsert(Document {
            kind: Kind::Ticket,
            id: "T-1",
            title: "printer jam",
            keywords: &[],
            body: "",
        });
        assert_eq!(index.search("printer", 5, None).len(), 1);
        index.upsert(Document {
            kind: Kind::Ticket,
            id: "T-1",
            title: "scanner fault",
            keywords: &[],
            body: "",
        });
        assert!(index.search("printer", 5, None).is_empty());
        assert_eq!(index.search("scanner", 5, None).len(), 1);
        assert_eq!(index.len(), 1);
        index.remove(Kind::Ticket, "T-1");
        assert!(index.search("scanner", 5, None).is_empty());
        assert!(index.is_empty());
    }

    #[test]
    fn snippets_surround_the_match() {
        let body = format!("{}needle in the middle{}", "x ".repeat(60), " y".repeat(60));
        let s = snippet(&body, &[(1.0, "needle")]);
        assert!(
            s.starts_with('…') && s.ends_with('…') && s.contains("needle"),
            "{s}"
        );
    }

    #[test]
    fn only_the_best_are_kept_and_ties_go_by_id() {
        let mut index = SearchIndex::default();
        // Inserted out of order; "refund" twice in the odd ones scores them
        // higher, the even ones tie with each other.
        for n in (0..40).rev() {
            let body = if n % 2 == 1 {
                "refund refund window"
            } else {
                "refund window"
            };
            index.upsert(Document {
                kind: Kind::Article,
                id: &format!("kb-{n:02}"),
                title: "policy",
                keywords: &[],
                body,
            });
        }
        let ids = |limit| -> Vec<String> {
            index
                .search("refund", limit, None)
                .into_iter()
                .map(|h| h.id)
                .collect()
        };
        let all = ids(100);
        assert_eq!(all.len(), 40);
        assert_eq!(&all[..3], ["kb-01", "kb-03", "kb-05"]);
        assert_eq!(&all[20..23], ["kb-00", "kb-02", "kb-04"]);
        for limit in [1, 5, 20, 21, 39] {
            assert_eq!(ids(limit), all[..limit], "limit {limit}");
        }
        assert!(ids(0).is_empty());
    }
}
