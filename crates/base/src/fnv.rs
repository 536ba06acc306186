//! FNV-1a, 64 bits: a hash that is stable across builds and platforms, for
//! values stored on disk (the mirror's file records, the search index's
//! text hashes, the log's running hash).

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_published_test_vector() {
        assert_eq!(super::fnv1a(*b"abc"), 0xe71f_a219_0541_574b);
        assert_eq!(super::fnv1a([]), 0xcbf2_9ce4_8422_2325);
    }
}
