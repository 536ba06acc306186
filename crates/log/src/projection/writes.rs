//! A batch's writes to a projection's tree: reads see earlier writes of the
//! same batch; the batch commits atomically with the checkpoint.

use std::collections::BTreeMap;

use super::ProjectionError;

pub struct Writes<'a> {
    tree: &'a sled::Tree,
    /// `None` is a removal.
    pending: Changes,
}

/// A batch's writes by key (`None`: removed).
pub type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

impl<'a> Writes<'a> {
    pub fn new(tree: &'a sled::Tree) -> Self {
        Self {
            tree,
            pending: BTreeMap::new(),
        }
    }

    /// Writes already committed, for the `committed` hook.
    pub(super) fn from_changes(tree: &'a sled::Tree, pending: Changes) -> Self {
        Self { tree, pending }
    }

    pub(super) fn into_changes(self) -> Changes {
        self.pending
    }

    /// The value as of this batch.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ProjectionError> {
        if let Some(value) = self.pending.get(key) {
            return Ok(value.clone());
        }
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    /// The rows under `prefix` as of this batch, in key order.
    pub fn scan_prefix(&self, prefix: &[u8]) -> Result<Changes, ProjectionError> {
        let mut rows = Changes::new();
        for row in self.tree.scan_prefix(prefix) {
            let (key, value) = row?;
            rows.insert(key.to_vec(), Some(value.to_vec()));
        }
        let pending = self.pending.range(prefix.to_vec()..);
        for (key, value) in pending.take_while(|(k, _)| k.starts_with(prefix)) {
            rows.insert(key.clone(), value.clone());
        }
        rows.retain(|_, v| v.is_some());
        Ok(rows)
    }

    /// Nothing written in this batch.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.pending.insert(key, Some(value));
    }

    pub fn remove(&mut self, key: Vec<u8>) {
        self.pending.insert(key, None);
    }

    /// Keys written (or removed) in this batch, in order, with their values.
    pub fn changed(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.pending
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// Apply the writes and the checkpoint in one sled batch.
    pub fn commit(&self, checkpoint: u64) -> Result<(), ProjectionError> {
        let mut batch = sled::Batch::default();
        for (key, value) in &self.pending {
            match value {
                Some(value) => batch.insert(key.as_slice(), value.as_slice()),
                None => batch.remove(key.as_slice()),
            }
        }
        batch.insert(super::CHECKPOINT_KEY, &checkpoint.to_be_bytes());
        self.tree.apply_batch(batch)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_sees_the_batch_over_the_tree() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        for key in ["a/1", "a/2", "a/3", "b/1"] {
            tree.insert(key, key.as_bytes()).unwrap();
        }
        let mut writes = Writes::new(&tree);
        writes.remove(b"a/2".to_vec());
        writes.put(b"a/3".to_vec(), b"new".to_vec());
        writes.put(b"a/4".to_vec(), b"added".to_vec());
        writes.put(b"b/2".to_vec(), b"other".to_vec());
        let rows: Vec<(Vec<u8>, Vec<u8>)> = writes
            .scan_prefix(b"a/")
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, v.unwrap()))
            .collect();
        assert_eq!(
            rows,
            [
                (b"a/1".to_vec(), b"a/1".to_vec()),
                (b"a/3".to_vec(), b"new".to_vec()),
                (b"a/4".to_vec(), b"added".to_vec()),
            ]
        );
    }
}
