//! The tickets' full-text index, stored in the tickets model's tree and
//! written in the same batch as the tickets it indexes (so it follows the
//! log with them, survives a restart and rebuilds with them; nothing of it
//! is held in memory):
//!
//! - `p/<term> 0x00 <id>` → the term's weighted frequency in the ticket and
//!   the ticket's weighted length (two f64 LE): a query reads one prefix
//!   per term and nothing else to score;
//! - `d/<id>` → the ticket's length, a hash of its indexed text and its
//!   terms (to remove its postings when it changes);
//! - `s/stats` → tickets indexed and their total length (BM25's average);
//! - `m/max` → the highest `T-<n>` (ids for `Tickets.Create`);
//! - `o/<id>` → `()` while the ticket is open (the triage worker's start
//!   looks for open tickets without reading every ticket).
//!
//! A ticket is indexed from scratch whenever its text (subject, messages,
//! notes) changed in a batch, so the index is a function of the tickets,
//! whatever the batches were.

use std::collections::HashMap;

use tinycode_shared::proto::Ticket;

use crate::ids::ticket_number;
use crate::projection::{ProjectionError, Writes, decode_u64};
use crate::search::{self, Document, Kind};
use crate::ticket::Status;

const POSTING: &[u8] = b"p/";
const DOC: &[u8] = b"d/";
const STATS: &[u8] = b"s/stats";
const MAX: &[u8] = b"m/max";
const OPEN: &[u8] = b"o/";

fn posting_key(term: &str, id: &str) -> Vec<u8> {
    [POSTING, term.as_bytes(), &[0], id.as_bytes()].concat()
}

fn doc_key(id: &str) -> Vec<u8> {
    [DOC, id.as_bytes()].concat()
}

fn f64_at(bytes: &[u8], at: usize) -> f64 {
    let mut b = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        b.copy_from_slice(src);
    }
    f64::from_le_bytes(b)
}

/// What `d/<id>` holds.
struct Indexed {
    len: f64,
    hash: u64,
    terms: Vec<String>,
}

impl Indexed {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.terms.len() * 8);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&f64::from_bits(self.hash).to_le_bytes());
        out.extend_from_slice(self.terms.join("\0").as_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Self {
        let terms = String::from_utf8_lossy(bytes.get(16..).unwrap_or_default());
        Self {
            len: f64_at(bytes, 0),
            hash: f64_at(bytes, 8).to_bits(),
            terms: terms
                .split('\0')
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
}

/// The text a ticket is searched by: its messages and notes.
pub(super) fn body(t: &Ticket) -> String {
    t.messages
        .iter()
        .map(|m| m.text.as_str())
        .chain(t.notes.iter().map(|n| n.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn text_hash(subject: &str, body: &str) -> u64 {
    crate::fnv::fnv1a(subject.bytes().chain([0]).chain(body.bytes()))
}

/// Stats: (tickets indexed, total length).
fn stats(writes: &Writes<'_>) -> Result<(u64, f64), ProjectionError> {
    Ok(match writes.get(STATS)? {
        Some(v) => (decode_u64(&v[..8.min(v.len())]), f64_at(&v, 8)),
        None => (0, 0.0),
    })
}

/// (Re)index `ticket` in this batch, when its text changed.
pub(super) fn index(writes: &mut Writes<'_>, ticket: &Ticket) -> Result<(), ProjectionError> {
    let id = &ticket.id;
    let open_key = [OPEN, id.as_bytes()].concat();
    match (
        Status::of(ticket) == Some(Status::Open),
        writes.get(&open_key)?.is_some(),
    ) {
        (true, false) => writes.put(open_key, Vec::new()),
        (false, true) => writes.remove(open_key),
        _ => {}
    }
    if let Some(n) = ticket_number(id)
        && writes.get(MAX)?.map_or(0, |v| decode_u64(&v)) < n
    {
        writes.put(MAX.to_vec(), n.to_be_bytes().to_vec());
    }
    let body = body(ticket);
    let hash = text_hash(&ticket.subject, &body);
    let old = writes.get(&doc_key(id))?.map(|v| Indexed::decode(&v));
    if old.as_ref().is_some_and(|o| o.hash == hash) {
        return Ok(());
    }
    let (count, total) = stats(writes)?;
    if let Some(old) = &old {
        for term in &old.terms {
            writes.remove(posting_key(term, id));
        }
    }
    let (tf, len) = search::weighted_terms(&Document {
        kind: Kind::Ticket,
        id,
        title: &ticket.subject,
        keywords: &[],
        body: &body,
    });
    for (term, f) in &tf {
        writes.put(
            posting_key(term, id),
            [f.to_le_bytes(), len.to_le_bytes()].concat(),
        );
    }
    let mut terms: Vec<String> = tf.into_keys().collect();
    terms.sort();
    writes.put(doc_key(id), Indexed { len, hash, terms }.encode());
    let (count, total) = match old {
        Some(o) => (count, total - o.len + len),
        None => (count + 1, total + len),
    };
    writes.put(
        STATS.to_vec(),
        [count.to_be_bytes(), total.to_le_bytes()].concat(),
    );
    Ok(())
}

/// Ids of the open tickets, in id order.
pub(super) fn open_ids(tree: &sled::Tree) -> Result<Vec<String>, ProjectionError> {
    tree.scan_prefix(OPEN)
        .keys()
        .map(|k| Ok(String::from_utf8_lossy(&k?[OPEN.len()..]).to_string()))
        .collect()
}

/// Tickets in the index.
pub(super) fn count(tree: &sled::Tree) -> Result<u64, ProjectionError> {
    Ok(tree
        .get(STATS)?
        .map_or(0, |v| decode_u64(&v[..8.min(v.len())])))
}

/// The highest `T-<n>` the tickets hold.
pub(super) fn max_number(tree: &sled::Tree) -> Result<u64, ProjectionError> {
    Ok(tree.get(MAX)?.map_or(0, |v| decode_u64(&v)))
}

/// A ranked ticket: its id, its BM25 score.
pub(super) struct Ranked {
    pub id: String,
    pub score: f64,
}

/// The query's terms found, with their idf (rarest first, for snippets).
pub(super) type Idfs = Vec<(f64, String)>;

/// The best `limit` tickets for `query`, and the query's terms.
pub(super) fn search(
    tree: &sled::Tree,
    query: &str,
    limit: usize,
) -> Result<(Vec<Ranked>, Idfs), ProjectionError> {
    let mut terms = search::tokenize(query);
    terms.sort();
    terms.dedup();
    let (n, total) = match tree.get(STATS)? {
        Some(v) => (decode_u64(&v[..8.min(v.len())]) as f64, f64_at(&v, 8)),
        None => (0.0, 0.0),
    };
    if terms.is_empty() || n == 0.0 || limit == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let avg = (total / n).max(1.0);
    let mut scores: HashMap<String, f64> = HashMap::new();
    let mut idfs = Vec::new();
    for term in terms {
        let prefix = [POSTING, term.as_bytes(), &[0]].concat();
        let postings: Vec<(String, f64, f64)> = tree
            .scan_prefix(&prefix)
            .map(|row| {
                let (k, v) = row?;
                Ok((
                    String::from_utf8_lossy(&k[prefix.len()..]).to_string(),
                    f64_at(&v, 0),
                    f64_at(&v, 8),
                ))
            })
            .collect::<Result<_, ProjectionError>>()?;
        if postings.is_empty() {
            continue;
        }
        let idf = search::idf(n, postings.len() as f64);
        for (id, tf, len) in postings {
            *scores.entry(id).or_default() += search::bm25(idf, tf, len, avg);
        }
        idfs.push((idf, term));
    }
    idfs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut ranked: Vec<Ranked> = scores
        .into_iter()
        .map(|(id, score)| Ranked { id, score })
        .collect();
    let order = |a: &Ranked, b: &Ranked| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id));
    if ranked.len() > limit {
        ranked.select_nth_unstable_by(limit - 1, order);
        ranked.truncate(limit);
    }
    ranked.sort_by(order);
    Ok((ranked, idfs))
}
