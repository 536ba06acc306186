//! A turn's writer: the one task that stores a turn's events and emits
//! its deltas, in the order the turn produced them.

use std::sync::Arc;

use tinycode_shared::proto::event::Payload;
use tokio::sync::{mpsc, oneshot};

use super::fence::TurnFence;
use super::jobs::{DeltaKind, WITH_NEXT_WITHIN, WRITE_BATCH, Write};
use super::write::append_unpublished;
use super::{Live, Sessions};
use crate::agent::Fence;

/// One writer stores events and emits deltas in the order the turn
/// produced them, so every attached client sees one order. What queued
/// while an append was in flight is stored by the next one, in one
/// append (up to [`WRITE_BATCH`] events); a turn's steps are sent as
/// [`Write::StoreWithNext`], so a turn whose model answers at once is
/// stored in one append with its end. The first failed append stops
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
            let mut batch = collect(first, &mut rx, &mut held).await;
            let deltas = std::mem::take(&mut batch.deltas);
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
                None if batch.payloads.is_empty() => Ok(Vec::new()),
                None => append_unpublished(&sessions, &id, batch.payloads)
                    .await
                    .map_err(|e| e.to_string()),
            };
            // Published with the deltas that waited with them, in the
            // order the turn produced them.
            let stored = stored.map(|events| live.publish_with(turn, &events, deltas));
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

/// The batch `first` starts: the stores queued behind it, up to the next
/// delta (emitted only once what came before it is stored, so it is left
/// in `held`). A [`Write::StoreWithNext`] waits for the write after it,
/// until [`WITH_NEXT_WITHIN`] after the batch began at most, and deltas
/// arriving meanwhile wait with the batch (in `Batch::deltas`).
async fn collect(
    first: Write,
    rx: &mut mpsc::UnboundedReceiver<Write>,
    held: &mut Option<Write>,
) -> Batch {
    let mut batch = Batch::default();
    let mut wait = matches!(first, Write::StoreWithNext(_));
    let deadline = tokio::time::Instant::now() + WITH_NEXT_WITHIN;
    batch.add(first);
    while batch.len < WRITE_BATCH {
        let waiting = std::mem::take(&mut wait);
        let next = if waiting {
            tokio::time::timeout_at(deadline, rx.recv())
                .await
                .ok()
                .flatten()
        } else {
            rx.try_recv().ok()
        };
        match next {
            Some(Write::Delta(kind, text)) if waiting => {
                batch.deltas.push((batch.payloads.len(), kind, text));
                wait = true;
            }
            Some(w @ Write::Delta(..)) => {
                *held = Some(w);
                break;
            }
            Some(w) => {
                wait = matches!(w, Write::StoreWithNext(_));
                batch.add(w);
            }
            None => break,
        }
    }
    batch
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
    /// Deltas that arrived while the batch waited, each with how many
    /// payloads came before it.
    deltas: Vec<(usize, DeltaKind, String)>,
}

impl Batch {
    fn add(&mut self, w: Write) {
        self.len += 1;
        match w {
            Write::Store(p) | Write::StoreWithNext(p) => self.payloads.push(*p),
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

#[cfg(test)]
mod tests {
    use tinycode_shared::proto::{TurnCompleted, TurnStarted};

    use super::*;

    fn started() -> Box<Payload> {
        Box::new(Payload::TurnStarted(TurnStarted::default()))
    }

    fn completed() -> Box<Payload> {
        Box::new(Payload::TurnCompleted(TurnCompleted::default()))
    }

    fn delta(text: &str) -> Write {
        Write::Delta(DeltaKind::Text, text.into())
    }

    #[tokio::test]
    async fn a_step_waits_for_the_next_write_and_deltas_wait_with_it() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(delta("do")).unwrap();
        tx.send(Write::StoreWithNext(started())).unwrap();
        tx.send(Write::Store(completed())).unwrap();
        tx.send(delta("after")).unwrap();
        let mut held = None;
        let first = Write::StoreWithNext(started());
        let batch = collect(first, &mut rx, &mut held).await;
        assert_eq!(batch.payloads.len(), 3);
        assert!(matches!(batch.payloads[2], Payload::TurnCompleted(_)));
        // The delta came after the first write; the one after the end,
        // with nothing waiting, ends the batch and is left for later.
        let deltas: Vec<_> = batch
            .deltas
            .iter()
            .map(|(at, _, t)| (*at, t.as_str()))
            .collect();
        assert_eq!(deltas, [(1, "do")]);
        assert!(matches!(held, Some(Write::Delta(_, ref t)) if t == "after"));
    }

    #[tokio::test]
    async fn a_step_nothing_follows_is_stored_once_the_window_passed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let start = std::time::Instant::now();
        let mut held = None;
        let batch = collect(Write::StoreWithNext(started()), &mut rx, &mut held).await;
        assert_eq!(batch.payloads.len(), 1);
        assert!(start.elapsed() >= WITH_NEXT_WITHIN, "{:?}", start.elapsed());
        drop(tx);
    }

    #[tokio::test]
    async fn a_plain_store_waits_for_nothing_and_a_delta_ends_its_batch() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(delta("text")).unwrap();
        tx.send(Write::Store(completed())).unwrap();
        let mut held = None;
        let batch = collect(Write::Store(started()), &mut rx, &mut held).await;
        assert_eq!(batch.payloads.len(), 1);
        assert!(batch.deltas.is_empty());
        assert!(matches!(held, Some(Write::Delta(..))));
        // A closed channel ends a waiting batch at once.
        drop(tx);
        let mut rest = None;
        let batch = collect(Write::StoreWithNext(started()), &mut rx, &mut rest).await;
        assert_eq!(batch.payloads.len(), 2, "the queued end joins it");
    }
}
