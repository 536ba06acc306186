//! A turn's writer: the one task that stores a turn's events and emits
//! its deltas, in the order the turn produced them.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tokio::sync::{mpsc, oneshot};

use super::fence::TurnFence;
use super::jobs::{WRITE_BATCH, Write};
use super::write::append_all;
use super::{Live, Sessions};
use crate::agent::Fence;

/// One writer stores events and emits deltas in the order the turn
/// produced them, so every attached client sees one order. What queued
/// while an append was in flight is stored by the next one, in one
/// append (up to [`WRITE_BATCH`] events). The first failed append stops
/// the turn (as a cancel does) and fails it: nothing after an event that
/// was never stored is stored or acknowledged. The task ends when every
/// sender is gone, with the first failure. While the daemon is fenced it
/// holds what it would store; once the turn was taken over it stores
/// nothing more (see [`TurnFence`]).
pub(super) fn spawn_writer(
    sessions: &Arc<Sessions>,
    live: &Arc<Live>,
    id: &str,
    turn: u64,
    fence: Arc<TurnFence>,
) -> (
    mpsc::UnboundedSender<Write>,
    tokio::task::JoinHandle<Option<String>>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Write>();
    let (sessions, live, id) = (Arc::clone(sessions), Arc::clone(live), id.to_string());
    let writer = tokio::spawn(async move {
        let mut failed: Option<String> = None;
        let mut held: Option<Write> = None;
        loop {
            let first = match held.take() {
                Some(w) => w,
                None => match rx.recv().await {
                    Some(w) => w,
                    None => break,
                },
            };
            if let Write::Delta(kind, text) = first {
                if failed.is_none() {
                    live.emit(turn, kind, &text);
                }
                continue;
            }
            // The stores queued behind it, up to the next delta (emitted
            // only once what came before it is stored).
            let mut batch = Batch::default();
            batch.add(first);
            while batch.len < WRITE_BATCH {
                match rx.try_recv() {
                    Ok(w @ Write::Delta(..)) => {
                        held = Some(w);
                        break;
                    }
                    Ok(w) => batch.add(w),
                    Err(_) => break,
                }
            }
            // Held while the daemon is fenced; nothing once the turn was
            // taken over.
            if failed.is_none()
                && !batch.payloads.is_empty()
                && let Err(why) = fence.hold().await
            {
                failed = Some(format!("handed over: {why}"));
                live.cancel.send_replace(true);
            }
            let stored = match &failed {
                Some(e) => Err(e.clone()),
                None if batch.payloads.is_empty() => Ok(()),
                None => append_all(&sessions, &live, &id, batch.payloads)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            };
            if let (Err(e), None) = (&stored, &failed) {
                failed = Some(e.clone());
                live.cancel.send_replace(true);
            }
            for ack in batch.acks {
                // The asker may have given up waiting: nothing to tell.
                let _ = ack.send(stored.clone());
            }
        }
        failed
    });
    (tx, writer)
}

/// Hand the writer `write`, built around an acknowledgement, and wait
/// until what it carries (and everything sent before it) is durable.
pub(super) async fn acknowledged(
    tx: &mpsc::UnboundedSender<Write>,
    write: impl FnOnce(oneshot::Sender<Result<(), String>>) -> Write,
) -> Result<(), String> {
    let stopped = "the turn's writer stopped";
    let (ack, stored) = oneshot::channel();
    tx.send(write(ack)).map_err(|_| stopped.to_string())?;
    stored.await.map_err(|_| stopped.to_string())?
}

/// Writes the writer stores in one append, and who waits for them.
#[derive(Default)]
struct Batch {
    payloads: Vec<Payload>,
    acks: Vec<oneshot::Sender<Result<(), String>>>,
    len: usize,
}

impl Batch {
    fn add(&mut self, w: Write) {
        self.len += 1;
        match w {
            Write::Store(p) => self.payloads.push(*p),
            Write::StoreAck(p, ack) => {
                self.payloads.push(*p);
                self.acks.push(ack);
            }
            Write::Flush(ack) => self.acks.push(ack),
            // Never batched: the writer emits deltas itself.
            Write::Delta(..) => {}
        }
    }
}
