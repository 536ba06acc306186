//! What both backends' group commits share: the queued append, and the
//! acceptance of a batch — each request's expected version checked against
//! its stream's version (the batch's earlier requests counted), the
//! accepted ones' events numbered in arrival order, conflicts answered at
//! once. A backend only says where a stream's version comes from and what
//! to do with the accepted events.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use tinycode_shared::proto::{Event, event::Payload};
use tokio::sync::oneshot;

use super::{ExpectedVersion, StoreError};

/// Where an append's answer goes: its events once durable, or why not.
pub(crate) type Reply = oneshot::Sender<Result<Vec<Arc<Event>>, StoreError>>;

/// One queued append.
pub(crate) struct Request {
    pub(crate) stream: String,
    pub(crate) expected: ExpectedVersion,
    pub(crate) payloads: Vec<Payload>,
    pub(crate) reply: Reply,
}

impl Request {
    /// About how many bytes it will store.
    pub(crate) fn size(&self) -> usize {
        self.payloads.iter().map(|p| p.encoded_len() + 64).sum()
    }
}

/// A request that passed its version check, with its numbered events.
pub(crate) type Accepted = (Reply, Vec<Arc<Event>>);

/// The accepted part of a batch.
pub(crate) struct Sequenced {
    pub(crate) accepted: Vec<Accepted>,
    /// The next free sequence after them.
    pub(crate) next: u64,
    /// The version of each stream they touched, after them.
    pub(crate) versions: HashMap<String, u64>,
}

/// Accept `batch` from sequence `next` on; `version_of` reads a stream's
/// version before this batch (an error refuses just that request).
pub(crate) fn accept(
    batch: Vec<Request>,
    mut next: u64,
    mut version_of: impl FnMut(&str) -> Result<u64, StoreError>,
) -> Sequenced {
    let recorded_at = Some(prost_types::Timestamp::from(SystemTime::now()));
    let mut versions: HashMap<String, u64> = HashMap::new();
    let mut accepted = Vec::with_capacity(batch.len());
    for Request {
        stream,
        expected,
        payloads,
        reply,
    } in batch
    {
        let current = match versions.get(&stream) {
            Some(v) => Ok(*v),
            None => version_of(&stream),
        };
        let current = match current {
            Ok(v) => v,
            Err(e) => {
                let _ = reply.send(Err(e));
                continue;
            }
        };
        match expected.sequence(stream.clone(), current, next, payloads, recorded_at) {
            Ok(events) => {
                next += events.len() as u64;
                versions.insert(stream, current + events.len() as u64);
                accepted.push((reply, events));
            }
            Err(conflict) => {
                let _ = reply.send(Err(conflict));
            }
        }
    }
    Sequenced {
        accepted,
        next,
        versions,
    }
}
