//! The tickets' full-text index, stored in the tickets model's tree and
//! written in the same batch as the tickets it indexes (so it follows the
//! log with them, survives a restart and rebuilds with them; nothing of it
//! is held in memory):
//!
//! - the postings of `<term>`, under `p/<term> 0x00`: a ticket's term
//!   frequency and weighted length either in a row of its own,
//!   `… 0x00 <id>` → (tf, len), or in a block of the batch that indexed
//!   it, `… 0x01 <anchor> <chunk>` → up to [`BLOCK`] entries of (id, tf,
//!   len). A term that two or more tickets of one batch share gets blocks
//!   (a first start's batches of hundreds of tickets write each term once
//!   per batch instead of a row per term and ticket, which cost 17 sled
//!   keys per ticket and most of its time and store: docs/BENCHMARKS.md);
//!   a term of one ticket only — every live change — a row, written
//!   without reading anything. The anchor is the batch's first indexed
//!   ticket and its version, which no other batch has. A query reads one
//!   prefix per term and nothing else to score;
//! - `d/<id>` → the ticket's length, a hash of its indexed text, its
//!   batch's anchor and its terms, each with where its posting is (to take
//!   them out when the ticket changes);
//! - `s/stats` → tickets indexed and their total length (BM25's average);
//! - `m/max` → the highest `T-<n>` (ids for `Tickets.Create`);
//! - `o/<id>` → `()` while the ticket is open (the triage worker's start
//!   looks for open tickets without reading every ticket).
//!
//! A ticket is indexed from scratch whenever its text (subject, messages,
//! notes) changed in a batch, so the index ranks as a function of the
//! tickets, whatever the batches were (where a posting is stored is not).

use std::collections::{BTreeMap, HashMap};

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
/// Postings per block at most.
const BLOCK: usize = 64;
/// Where a posting is: its own row (else the chunk of its batch's block).
const ROW: u16 = u16::MAX;

fn row_key(term: &str, id: &str) -> Vec<u8> {
    [POSTING, term.as_bytes(), &[0, 0], id.as_bytes()].concat()
}

fn block_key(term: &str, anchor: &[u8], chunk: u16) -> Vec<u8> {
    [
        POSTING,
        term.as_bytes(),
        &[0, 1],
        anchor,
        &chunk.to_be_bytes(),
    ]
    .concat()
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

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([
        bytes.get(at).copied().unwrap_or(0),
        bytes.get(at + 1).copied().unwrap_or(0),
    ])
}

/// One posting.
struct Posting<'a> {
    id: &'a str,
    tf: f64,
    len: f64,
}

/// A block's entries: the id's length (u16 BE), the id, tf and len (f64
/// LE); a cut block reads as far as it is whole.
fn postings(block: &[u8]) -> impl Iterator<Item = Posting<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let n = usize::from(u16_at(block, at));
        let id = std::str::from_utf8(block.get(at + 2..at + 2 + n)?).ok()?;
        let values = at + 2 + n;
        block.get(values..values + 16)?;
        at = values + 16;
        Some(Posting {
            id,
            tf: f64_at(block, values),
            len: f64_at(block, values + 8),
        })
    })
}

fn push(block: &mut Vec<u8>, p: &Posting<'_>) {
    let id = &p.id.as_bytes()[..p.id.len().min(usize::from(u16::MAX))];
    block.extend_from_slice(&(id.len() as u16).to_be_bytes());
    block.extend_from_slice(id);
    block.extend_from_slice(&p.tf.to_le_bytes());
    block.extend_from_slice(&p.len.to_le_bytes());
}

/// What `d/<id>` holds.
#[derive(Debug, PartialEq)]
struct Indexed {
    len: f64,
    hash: u64,
    /// The batch's anchor (empty when no posting is in a block).
    anchor: Vec<u8>,
    /// Each term with where its posting is: [`ROW`] or a chunk.
    terms: Vec<(String, u16)>,
}

impl Indexed {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(18 + self.anchor.len() + self.terms.len() * 10);
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&f64::from_bits(self.hash).to_le_bytes());
        out.extend_from_slice(&(self.anchor.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.anchor);
        for (term, at) in &self.terms {
            out.extend_from_slice(term.as_bytes());
            out.push(0);
            out.extend_from_slice(&at.to_be_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Self {
        let anchor_len = usize::from(u16_at(bytes, 16));
        let anchor = bytes.get(18..18 + anchor_len).unwrap_or_default().to_vec();
        let mut terms = Vec::new();
        let mut rest = bytes.get(18 + anchor_len..).unwrap_or_default();
        while let Some(end) = rest.iter().position(|b| *b == 0) {
            let term = String::from_utf8_lossy(&rest[..end]).into_owned();
            terms.push((term, u16_at(rest, end + 1)));
            rest = rest.get(end + 3..).unwrap_or_default();
        }
        Self {
            len: f64_at(bytes, 0),
            hash: f64_at(bytes, 8).to_bits(),
            anchor,
            terms,
        }
    }

    /// Take the ticket's postings out of the index.
    fn remove(&self, writes: &mut Writes<'_>, id: &str) -> Result<(), ProjectionError> {
        for (term, at) in &self.terms {
            if *at == ROW {
                writes.remove(row_key(term, id));
                continue;
            }
            let key = block_key(term, &self.anchor, *at);
            let Some(old) = writes.get(&key)? else {
                continue;
            };
            let mut block = Vec::with_capacity(old.len());
            postings(&old)
                .filter(|p| p.id != id)
                .for_each(|p| push(&mut block, &p));
            if block.is_empty() {
                writes.remove(key);
            } else {
                writes.put(key, block);
            }
        }
        Ok(())
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

/// A ticket indexed in this batch: its terms' frequencies, length, hash.
struct Fresh<'a> {
    id: &'a str,
    tf: HashMap<String, f64>,
    len: f64,
    hash: u64,
}

/// The ticket's open mark and the highest ticket number.
fn marks(writes: &mut Writes<'_>, ticket: &Ticket) -> Result<(), ProjectionError> {
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
    Ok(())
}

/// (Re)index the tickets of this batch whose text changed: their old
/// postings out, their new ones in — in blocks for the terms two or more
/// of them share.
pub(super) fn index(writes: &mut Writes<'_>, tickets: &[Ticket]) -> Result<(), ProjectionError> {
    let (mut count, mut total) = stats(writes)?;
    let mut fresh = Vec::new();
    let mut anchor = Vec::new();
    for ticket in tickets {
        marks(writes, ticket)?;
        let body = body(ticket);
        let hash = text_hash(&ticket.subject, &body);
        let old = writes
            .get(&doc_key(&ticket.id))?
            .map(|v| Indexed::decode(&v));
        if old.as_ref().is_some_and(|o| o.hash == hash) {
            continue;
        }
        let (tf, len) = search::weighted_terms(&Document {
            kind: Kind::Ticket,
            id: &ticket.id,
            title: &ticket.subject,
            keywords: &[],
            body: &body,
        });
        match old {
            Some(o) => {
                o.remove(writes, &ticket.id)?;
                total += len - o.len;
            }
            None => (count, total) = (count + 1, total + len),
        }
        if anchor.is_empty() {
            anchor = [ticket.id.as_bytes(), &[0], &ticket.version.to_be_bytes()].concat();
        }
        fresh.push(Fresh {
            id: &ticket.id,
            tf,
            len,
            hash,
        });
    }
    if fresh.is_empty() {
        return Ok(());
    }
    put_postings(writes, &fresh, &anchor)?;
    put_stats(writes, count, total)
}

/// The postings of the tickets indexed in this batch: rows, or blocks
/// under `anchor` for the terms two or more of them share; their `d/`
/// rows.
fn put_postings(
    writes: &mut Writes<'_>,
    fresh: &[Fresh<'_>],
    anchor: &[u8],
) -> Result<(), ProjectionError> {
    if let [one] = fresh {
        // A live change: a row per term, nothing grouped.
        let mut terms = Vec::with_capacity(one.tf.len());
        for (term, tf) in &one.tf {
            writes.put(
                row_key(term, one.id),
                [tf.to_le_bytes(), one.len.to_le_bytes()].concat(),
            );
            terms.push((term.clone(), ROW));
        }
        terms.sort_unstable();
        let doc = Indexed {
            len: one.len,
            hash: one.hash,
            anchor: Vec::new(),
            terms,
        };
        writes.put(doc_key(one.id), doc.encode());
        return Ok(());
    }
    let mut by_term: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in fresh.iter().enumerate() {
        for term in f.tf.keys() {
            by_term.entry(term).or_default().push(i);
        }
    }
    let mut placed: Vec<Vec<(String, u16)>> = fresh.iter().map(|_| Vec::new()).collect();
    for (term, group) in by_term {
        let posting = |i: usize| Posting {
            id: fresh[i].id,
            tf: fresh[i].tf.get(term).copied().unwrap_or_default(),
            len: fresh[i].len,
        };
        if let [i] = group[..] {
            let p = posting(i);
            writes.put(
                row_key(term, p.id),
                [p.tf.to_le_bytes(), p.len.to_le_bytes()].concat(),
            );
            placed[i].push((term.to_string(), ROW));
            continue;
        }
        for (chunk, members) in group.chunks(BLOCK).enumerate() {
            let chunk = chunk as u16;
            let mut block = Vec::with_capacity(members.len() * 32);
            for &i in members {
                push(&mut block, &posting(i));
                placed[i].push((term.to_string(), chunk));
            }
            writes.put(block_key(term, anchor, chunk), block);
        }
    }
    for (f, mut terms) in fresh.iter().zip(placed) {
        terms.sort();
        let blocks = terms.iter().any(|(_, at)| *at != ROW);
        let doc = Indexed {
            len: f.len,
            hash: f.hash,
            anchor: if blocks { anchor.to_vec() } else { Vec::new() },
            terms,
        };
        writes.put(doc_key(f.id), doc.encode());
    }
    Ok(())
}

fn put_stats(writes: &mut Writes<'_>, count: u64, total: f64) -> Result<(), ProjectionError> {
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
        let rows = tree.scan_prefix(&prefix).collect::<Result<Vec<_>, _>>()?;
        let mut found: Vec<Posting<'_>> = Vec::new();
        for (key, value) in &rows {
            match key.get(prefix.len()) {
                Some(0) => found.push(Posting {
                    id: std::str::from_utf8(&key[prefix.len() + 1..]).unwrap_or_default(),
                    tf: f64_at(value, 0),
                    len: f64_at(value, 8),
                }),
                Some(1) => found.extend(postings(value)),
                _ => {}
            }
        }
        if found.is_empty() {
            continue;
        }
        let idf = search::idf(n, found.len() as f64);
        for p in found {
            *scores.entry(p.id.to_string()).or_default() += search::bm25(idf, p.tf, p.len, avg);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_and_a_doc_row_read_back_what_was_written() {
        let mut block = Vec::new();
        let ids = ["T-1", "工单-二", ""];
        for (i, id) in ids.iter().enumerate() {
            let f = i as f64;
            push(
                &mut block,
                &Posting {
                    id,
                    tf: f + 0.5,
                    len: f * 10.0,
                },
            );
        }
        let read: Vec<(String, f64, f64)> = postings(&block)
            .map(|p| (p.id.to_string(), p.tf, p.len))
            .collect();
        assert_eq!(
            read,
            vec![
                ("T-1".to_string(), 0.5, 0.0),
                ("工单-二".to_string(), 1.5, 10.0),
                (String::new(), 2.5, 20.0)
            ]
        );
        // A cut block reads as far as it is whole, never panics.
        assert_eq!(postings(&block[..block.len() - 3]).count(), 2);
        let doc = Indexed {
            len: 7.25,
            hash: u64::MAX - 3,
            anchor: b"T-9\0\0\0\0\0\0\0\0\x05".to_vec(),
            terms: vec![("退款".into(), 0), ("parcel".into(), ROW), ("x".into(), 1)],
        };
        assert_eq!(Indexed::decode(&doc.encode()), doc);
    }
}
