//! Text → a sparse, L2-normalised TF-IDF vector over hashed features:
//! words (jieba for Chinese, lower-cased), word bigrams, and character
//! 3–5-grams of each word with boundary marks (they carry misspellings,
//! inflections and unseen compounds). Digit runs become one `0`, so order
//! numbers and amounts do not become vocabulary. Hashing bounds memory
//! whatever the vocabulary: `DIMS` weights per class.

/// Hashed feature space (2^17).
pub const DIMS: usize = 1 << 17;

/// One document's features: (index, weight), indexes distinct.
pub type Sparse = Vec<(u32, f32)>;

fn index(kind: u8, text: &str) -> u32 {
    (crate::fnv::fnv1a(std::iter::once(kind).chain(text.bytes())) % DIMS as u64) as u32
}

/// Digit runs folded to one `0`.
fn fold_digits(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut in_digits = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('0');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// The words of `text`, as the search index cuts them.
pub fn words(text: &str) -> Vec<String> {
    crate::domain::search::tokenize(text)
        .into_iter()
        .map(|w| fold_digits(&w))
        .collect()
}

/// Which features a text gives: its words, its word pairs, and the
/// character n-grams of each word in a range of lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureSet {
    pub words: bool,
    pub bigrams: bool,
    /// Shortest and longest character n-gram (0, 0: none).
    pub chars: (usize, usize),
}

impl FeatureSet {
    /// What the learner uses: words, word pairs, character 3–5-grams.
    pub const DEFAULT: Self = Self {
        words: true,
        bigrams: true,
        chars: (3, 5),
    };
}

/// Raw term counts of `text`'s features (not yet weighted).
pub fn counts(text: &str) -> Vec<(u32, f32)> {
    counts_with(text, &FeatureSet::DEFAULT)
}

/// [`counts`] with another feature set (the variants measured in the
/// learning benchmark).
pub fn counts_with(text: &str, set: &FeatureSet) -> Vec<(u32, f32)> {
    let words = words(text);
    let mut out: Vec<(u32, f32)> = Vec::with_capacity(words.len() * 8);
    for w in &words {
        if set.words {
            out.push((index(b'w', w), 1.0));
        }
        let marked: Vec<char> = std::iter::once('<')
            .chain(w.chars())
            .chain(std::iter::once('>'))
            .collect();
        for n in set.chars.0.max(1)..=set.chars.1 {
            if set.chars.1 == 0 || marked.len() < n {
                break;
            }
            for gram in marked.windows(n) {
                let g: String = gram.iter().collect();
                out.push((index(b'c', &g), 1.0));
            }
        }
    }
    if set.bigrams {
        for pair in words.windows(2) {
            out.push((index(b'b', &format!("{} {}", pair[0], pair[1])), 1.0));
        }
    }
    out.sort_unstable_by_key(|(i, _)| *i);
    let mut merged: Vec<(u32, f32)> = Vec::with_capacity(out.len());
    for (i, v) in out {
        match merged.last_mut() {
            Some((j, total)) if *j == i => *total += v,
            _ => merged.push((i, v)),
        }
    }
    merged
}

/// Inverse document frequencies learned from a training set.
pub struct Idf(pub(crate) Vec<f32>);

impl Idf {
    /// Smoothed idf, `ln((1 + n) / (1 + df)) + 1`, from documents' counts.
    pub fn fit(docs: &[Vec<(u32, f32)>]) -> Self {
        let mut df = vec![0u32; DIMS];
        for doc in docs {
            for (i, _) in doc {
                df[*i as usize] += 1;
            }
        }
        let n = docs.len() as f32;
        Self(
            df.into_iter()
                .map(|d| ((1.0 + n) / (1.0 + d as f32)).ln() + 1.0)
                .collect(),
        )
    }

    /// Sublinear tf × idf, L2-normalised.
    pub fn weigh(&self, counts: &[(u32, f32)]) -> Sparse {
        let mut v: Sparse = counts
            .iter()
            .map(|(i, c)| (*i, (1.0 + c.ln()) * self.0[*i as usize]))
            .collect();
        let norm = v.iter().map(|(_, x)| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            for (_, x) in &mut v {
                *x /= norm;
            }
        }
        v
    }

    pub fn bytes(&self) -> usize {
        self.0.len() * std::mem::size_of::<f32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_fold_and_features_merge() {
        assert_eq!(fold_digits("order732201349959"), "order0");
        assert_eq!(fold_digits("a1b22"), "a0b0");
        let a = counts("cancel order 732201349959");
        let b = counts("cancel order 3707955617");
        assert_eq!(a, b, "order numbers are not vocabulary");
        let mut seen = std::collections::HashSet::new();
        assert!(a.iter().all(|(i, _)| seen.insert(*i)), "indexes distinct");
    }

    #[test]
    fn chinese_text_gets_words_and_ngrams() {
        let f = counts("退款 未收到货");
        assert!(f.len() > 4, "{f:?}");
        let idf = Idf::fit(&[f.clone(), counts("物流 停滞")]);
        let v = idf.weigh(&f);
        let norm: f32 = v.iter().map(|(_, x)| x * x).sum();
        assert!((norm - 1.0).abs() < 1e-4);
    }
}
