//! Pages of a list response: in key order, after a token, at most a
//! limit and always below the transport's message size.

/// A page stays below this, well under the 4 MiB message limit.
pub const MAX_PAGE_BYTES: usize = 3 * 1024 * 1024;

/// One page of `items` (already in `key` order): those after `after`
/// (none: from the start), at most `limit` and about [`MAX_PAGE_BYTES`]
/// (at least one); the key of the last one when more follow.
pub fn page<T: prost::Message, K: Ord>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
    after: Option<K>,
    limit: usize,
) -> (Vec<T>, Option<K>) {
    page_by(items, key, T::encoded_len, after, limit)
}

/// [`page`] for items whose wire size `size` tells.
pub fn page_by<T, K: Ord>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
    size: impl Fn(&T) -> usize,
    after: Option<K>,
    limit: usize,
) -> (Vec<T>, Option<K>) {
    let mut out: Vec<T> = Vec::new();
    let mut bytes = 0;
    for item in items {
        if after.as_ref().is_some_and(|a| key(&item) <= *a) {
            continue;
        }
        let size = size(&item);
        if out.len() >= limit || (!out.is_empty() && bytes + size > MAX_PAGE_BYTES) {
            let last = out.last().map(&key);
            return (out, last);
        }
        bytes += size;
        out.push(item);
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use tinycode_shared::proto::Ticket;

    fn ticket(n: u32, bytes: usize) -> Ticket {
        Ticket {
            id: format!("T-{n:04}"),
            subject: "s".repeat(bytes),
            ..Ticket::default()
        }
    }

    #[test]
    fn pages_follow_the_key_the_limit_and_the_byte_budget() {
        let small: Vec<Ticket> = (0..10).map(|n| ticket(n, 10)).collect();
        let key = |t: &Ticket| t.id.clone();
        let (first, next) = super::page(small.clone(), key, None, 4);
        assert_eq!(first.len(), 4);
        assert_eq!(next.as_deref(), Some("T-0003"));
        let (second, next) = super::page(small.clone(), key, next, 4);
        assert_eq!(second[0].id, "T-0004");
        let (last, next) = super::page(small, key, next, 4);
        assert_eq!((last.len(), next), (2, None));
        // 1 MiB each: a page ends before 3 MiB, but always holds one.
        let big: Vec<Ticket> = (0..5).map(|n| ticket(n, 1024 * 1024)).collect();
        let (page, next) = super::page(big.clone(), key, None, 100);
        assert_eq!((page.len(), next.as_deref()), (2, Some("T-0001")));
        let huge = vec![ticket(0, 4 * 1024 * 1024)];
        assert_eq!(super::page(huge, key, None, 100).0.len(), 1);
    }
}
