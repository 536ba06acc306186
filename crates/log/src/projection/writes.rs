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
