//! The trained offline model kept on disk beside the log, so a start does
//! not train again on a history that has not changed (100,000 rows cost
//! 8–11 s of one core). It is a cache of the history read model, not a
//! truth of its own: its header names the history **generation** it was
//! trained at (the sequence of the last event that changed a history row,
//! kept by that projection), and a file of another generation, of another
//! format, or damaged (a CRC-32 over every byte before it) is retrained
//! over. Written to a temporary file, fsynced, renamed.
//!
//! Layout, little-endian: `TCLM`, format `u32`, generation `u64`,
//! examples `u64`, then per field (category, queue, priority) a present
//! byte and, when present, the labels (count, then length + UTF-8 each),
//! the support per label (`u64`), the temperature (`f32`, 0 when not
//! calibrated), the idf — sparse: the value of a
//! feature no training text had (the largest), then the others as
//! (index `u32`, `f32`) — and the linear model — sparse too: classes,
//! then each feature with a non-zero weight as its index and one `f32`
//! per class; last, the CRC-32. A small desk's model is kilobytes, not
//! `classes × 2^17` floats.

use std::io::Write;
use std::path::Path;

use crate::Classifier;
use crate::features::{DIMS, Idf};
use crate::linear::Linear;

const MAGIC: &[u8; 4] = b"TCLM";
/// Bumped whenever the features or the training change: a model of
/// another format is trained again.
pub const FORMAT: u32 = 2;

/// Why a kept model was not used.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the kept offline model {0} is damaged ({1}); it is trained again")]
    Damaged(String, &'static str),
}

/// A kept model: one classifier per field (category, queue, priority; a
/// field that learned nothing is `None`), the examples it was trained on,
/// and the history generation it was trained at.
pub struct Kept {
    pub fields: [Option<Classifier>; 3],
    pub examples: usize,
    pub generation: u64,
}

/// The bytes of a model of `fields`, trained on `examples` at `generation`.
pub fn encode(fields: [Option<&Classifier>; 3], examples: usize, generation: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 20);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(&(examples as u64).to_le_bytes());
    for field in fields {
        match field {
            None => out.push(0),
            Some(c) => {
                out.push(1);
                put_len(&mut out, c.labels.len());
                for label in &c.labels {
                    put_len(&mut out, label.len());
                    out.extend_from_slice(label.as_bytes());
                }
                for s in &c.support {
                    out.extend_from_slice(&(*s as u64).to_le_bytes());
                }
                // 0: not calibrated (a fitted temperature is at least 0.01).
                out.extend_from_slice(&c.temperature.unwrap_or(0.0).to_le_bytes());
                put_idf(&mut out, &c.idf.0);
                put_weights(&mut out, c.model.classes, &c.model.weights);
            }
        }
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The idf: the value of unseen features, then the features that differ.
fn put_idf(out: &mut Vec<u8>, idf: &[f32]) {
    let unseen = idf.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    out.extend_from_slice(&unseen.to_le_bytes());
    let seen: Vec<(usize, f32)> = idf
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, v)| v != unseen)
        .collect();
    put_len(out, seen.len());
    for (i, v) in seen {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The weights of the features with any non-zero one.
fn put_weights(out: &mut Vec<u8>, classes: usize, weights: &[f32]) {
    put_len(out, classes);
    let rows: Vec<(usize, &[f32])> = weights
        .chunks(classes.max(1))
        .enumerate()
        .filter(|(_, row)| row.iter().any(|w| *w != 0.0))
        .collect();
    put_len(out, rows.len());
    for (i, row) in rows {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        for w in row {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

/// What `bytes` hold; `Ok(None)` for a model of another format.
pub fn decode(bytes: &[u8]) -> Result<Option<Kept>, &'static str> {
    let (body, crc) = bytes
        .split_last_chunk::<4>()
        .ok_or("shorter than its header")?;
    if body.len() < 24 || &body[..4] != MAGIC {
        return Err("not a kept model");
    }
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err("its checksum does not match");
    }
    let mut r = Reader(&body[4..]);
    if r.u32()? != FORMAT {
        return Ok(None);
    }
    let generation = r.u64()?;
    let examples = r.u64()? as usize;
    let mut fields = [None, None, None];
    for slot in &mut fields {
        if r.byte()? == 1 {
            *slot = Some(r.classifier()?);
        }
    }
    if !r.0.is_empty() {
        return Err("it has bytes past its end");
    }
    Ok(Some(Kept {
        fields,
        examples,
        generation,
    }))
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or("it ends early")?;
        self.0 = rest;
        Ok(*head)
    }

    fn byte(&mut self) -> Result<u8, &'static str> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn len(&mut self, each: usize) -> Result<usize, &'static str> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err("a length runs past its end");
        }
        Ok(n)
    }

    fn f32(&mut self) -> Result<f32, &'static str> {
        Ok(f32::from_le_bytes(self.take()?))
    }

    /// A feature's index, checked against the feature space.
    fn index(&mut self) -> Result<usize, &'static str> {
        let i = self.u32()? as usize;
        if i >= DIMS {
            return Err("a feature index is out of range");
        }
        Ok(i)
    }

    fn idf(&mut self) -> Result<Idf, &'static str> {
        let unseen = self.f32()?;
        let mut idf = vec![unseen; DIMS];
        for _ in 0..self.len(8)? {
            let i = self.index()?;
            idf[i] = self.f32()?;
        }
        Ok(Idf(idf))
    }

    fn weights(&mut self, classes: usize) -> Result<Vec<f32>, &'static str> {
        let mut weights = vec![0f32; classes * DIMS];
        for _ in 0..self.len(4 + 4 * classes)? {
            let row = self.index()? * classes;
            for w in &mut weights[row..row + classes] {
                *w = self.f32()?;
            }
        }
        Ok(weights)
    }

    fn classifier(&mut self) -> Result<Classifier, &'static str> {
        let n = self.len(4)?;
        let labels = (0..n)
            .map(|_| {
                let len = self.len(1)?;
                let (text, rest) = self.0.split_at(len);
                self.0 = rest;
                String::from_utf8(text.to_vec()).map_err(|_| "a label is not UTF-8")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let support = (0..n)
            .map(|_| self.u64().map(|s| s as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let temperature = Some(self.f32()?).filter(|t| *t > 0.0);
        let idf = self.idf()?;
        let classes = self.u32()? as usize;
        if classes != n {
            return Err("its weights do not match its labels");
        }
        let weights = self.weights(classes)?;
        Ok(Classifier {
            labels,
            support,
            idf,
            model: Linear { classes, weights },
            temperature,
            features: crate::features::FeatureSet::DEFAULT,
        })
    }
}

/// Keep the model of `fields` at `path`: a temporary file beside it,
/// fsynced, renamed, the directory fsynced.
pub fn save(
    path: &Path,
    fields: [Option<&Classifier>; 3],
    examples: usize,
    generation: u64,
) -> Result<(), SavedError> {
    let bytes = encode(fields, examples, generation);
    let tmp = path.with_extension("tmp");
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The model kept at `path`; `Ok(None)` when there is none or it is of
/// another format.
pub fn load(path: &Path) -> Result<Option<Kept>, SavedError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    decode(&bytes).map_err(|why| SavedError::Damaged(path.display().to_string(), why))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Category and queue learned from sixty rows (calibrated); no
    /// priority.
    fn trained() -> Kept {
        let texts: Vec<(String, &str, &str)> = (0..20)
            .flat_map(|i| {
                [
                    (format!("refund my order {i} please"), "refund", "billing"),
                    (
                        format!("parcel {i} has not arrived"),
                        "shipping",
                        "logistics",
                    ),
                    (
                        format!("cannot log in to account {i}"),
                        "account",
                        "identity",
                    ),
                ]
            })
            .collect();
        let category = Classifier::train(texts.iter().map(|(t, c, _)| (t.as_str(), *c)));
        let queue = Classifier::train(texts.iter().map(|(t, _, q)| (t.as_str(), *q)));
        Kept {
            fields: [category, queue, None],
            examples: texts.len(),
            generation: 0,
        }
    }

    fn bytes_of(kept: &Kept, generation: u64) -> Vec<u8> {
        let [a, b, c] = &kept.fields;
        encode(
            [a.as_ref(), b.as_ref(), c.as_ref()],
            kept.examples,
            generation,
        )
    }

    const TEXTS: [&str; 4] = [
        "please refund the order",
        "where is my parcel",
        "login does not work",
        "退款",
    ];

    #[test]
    fn a_kept_model_reads_back_the_same() {
        let learned = trained();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offline-model.bin");
        let [a, b, c] = &learned.fields;
        assert!(a.as_ref().unwrap().temperature.is_some(), "calibrated");
        save(&path, [a.as_ref(), b.as_ref(), c.as_ref()], 60, 4242).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back.generation, 4242);
        assert_eq!(back.examples, 60);
        for (kept, original) in back.fields.iter().zip(&learned.fields) {
            match (kept, original) {
                (Some(kept), Some(original)) => {
                    assert_eq!(kept.labels(), original.labels());
                    for text in TEXTS {
                        assert_eq!(kept.predict(text), original.predict(text));
                    }
                }
                (None, None) => {}
                _ => panic!("a field was lost or made up"),
            }
        }
        assert_eq!(
            back.fields[0].as_ref().unwrap().predict(TEXTS[0]).label,
            "refund"
        );
        assert!(back.fields[2].is_none(), "no priority was learned");
        assert!(!dir.path().join("offline-model.tmp").exists());
    }

    #[test]
    fn no_file_is_no_model_and_another_format_is_trained_again() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("none.bin")).unwrap().is_none());
        let mut bytes = bytes_of(&trained(), 1);
        bytes[4..8].copy_from_slice(&(FORMAT + 1).to_le_bytes());
        let end = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..end]);
        bytes[end..].copy_from_slice(&crc.to_le_bytes());
        assert!(decode(&bytes).unwrap().is_none());
    }

    #[test]
    fn a_damaged_or_cut_file_is_named_and_not_used() {
        let bytes = bytes_of(&trained(), 7);
        let mut flipped = bytes.clone();
        flipped[bytes.len() / 2] ^= 0x40;
        assert_eq!(decode(&flipped).err(), Some("its checksum does not match"));
        for cut in [0, 3, 20, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("offline-model.bin");
        std::fs::write(&path, &flipped).unwrap();
        let e = load(&path).err().unwrap().to_string();
        assert!(
            e.contains("offline-model.bin") && e.contains("damaged"),
            "{e}"
        );
    }
}
