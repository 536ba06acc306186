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
            let mut batch = collect(first, &mut rx, &mut held, failed.is_none()).await;
            let deltas = still_running(std::mem::take(&mut batch.deltas), &batch.payloads);
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
            let stored = stored.map(|events| {
                live.publish(&events);
                for (kind, text) in deltas {
                    live.emit(turn, kind, &text);
                }
            });
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
/// in `held`). With `linger`, a [`Write::StoreWithNext`] waits for the
/// write after it, until [`WITH_NEXT_WITHIN`] after the batch began at
/// most, and deltas arriving meanwhile wait with the batch (in
/// `Batch::deltas`); any other write ends the wait.
async fn collect(
    first: Write,
    rx: &mut mpsc::UnboundedReceiver<Write>,
    held: &mut Option<Write>,
    linger: bool,
) -> Batch {
    let mut batch = Batch::default();
    let mut wait = linger && matches!(first, Write::StoreWithNext(_));
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
                wait = linger && matches!(w, Write::StoreWithNext(_));
                batch.add(w);
            }
            None => break,
        }
    }
    batch
}

/// The deltas that waited with a batch and still say something once it
/// is stored: those of a step still running (after the batch's last
/// answer or end). A delta of a step whose message the batch stores is
/// dropped: the message has its text, and a client that reads the message
/// from the log before the writer publishes would see its text twice.
fn still_running(
    deltas: Vec<(usize, DeltaKind, String)>,
    payloads: &[Payload],
) -> Vec<(DeltaKind, String)> {
    let step_end = payloads.iter().rposition(super::live::ends_step);
    deltas
        .into_iter()
        .filter(|(at, _, _)| step_end.is_none_or(|end| end < *at))
        .map(|(_, kind, text)| (kind, text))
        .collect()
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
            Write::Boundary => {}
            // Never batched: the writer emits deltas itself.
            Write::Delta(..) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tinycode_shared::proto::{AssistantMessageAdded, TurnCompleted, TurnStarted};

    use super::*;

    fn started() -> Box<Payload> {
        Box::new(Payload::TurnStarted(TurnStarted::default()))
    }

    fn answer() -> Box<Payload> {
        Box::new(Payload::AssistantMessageAdded(
            AssistantMessageAdded::default(),
        ))
    }

    fn completed() -> Box<Payload> {
        Box::new(Payload::TurnCompleted(TurnCompleted::default()))
    }

    fn delta(text: &str) -> Write {
        Write::Delta(DeltaKind::Text, text.into())
    }

    fn texts(deltas: &[(DeltaKind, String)]) -> Vec<&str> {
        deltas.iter().map(|(_, t)| t.as_str()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_waits_for_the_next_write_and_deltas_wait_with_it() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(delta("do")).unwrap();
        tx.send(Write::StoreWithNext(answer())).unwrap();
        tx.send(delta("ne")).unwrap();
        tx.send(Write::Store(completed())).unwrap();
        tx.send(delta("after")).unwrap();
        let mut held = None;
        let start = tokio::time::Instant::now();
        let batch = collect(Write::StoreWithNext(started()), &mut rx, &mut held, true).await;
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "nothing waited for the clock"
        );
        assert_eq!(batch.payloads.len(), 3);
        // The delta after the end, with nothing waiting, ends the batch.
        assert!(matches!(held, Some(Write::Delta(_, ref t)) if t == "after"));
        // Both deltas came before the answer or the end stored with them.
        let positions: Vec<usize> = batch.deltas.iter().map(|(at, _, _)| *at).collect();
        assert_eq!(positions, [1, 2]);
        assert!(still_running(batch.deltas, &batch.payloads).is_empty());
    }

    /// The batch a waiting start begins with what `rx` holds, and how long
    /// collecting it took on the (paused) clock.
    async fn collect_timed(
        rx: &mut mpsc::UnboundedReceiver<Write>,
        linger: bool,
    ) -> (Batch, Duration) {
        let start = tokio::time::Instant::now();
        let batch = collect(Write::StoreWithNext(started()), rx, &mut None, linger).await;
        (batch, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_nothing_follows_is_stored_once_the_window_passed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (batch, took) = collect_timed(&mut rx, true).await;
        assert_eq!((batch.payloads.len(), took), (1, WITH_NEXT_WITHIN));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn an_ack_a_flush_a_boundary_or_a_closed_writer_ends_the_wait_at_once() {
        let ends: [(Option<Write>, usize); 4] = [
            (Some(Write::StoreAck(completed(), oneshot::channel().0)), 3),
            (Some(Write::Flush(oneshot::channel().0)), 2),
            (Some(Write::Boundary), 2),
            (None, 2), // the turn dropped its sender
        ];
        for (end, payloads) in ends {
            let (tx, mut rx) = mpsc::unbounded_channel();
            tx.send(Write::StoreWithNext(answer())).unwrap();
            match end {
                Some(w) => tx.send(w).unwrap(),
                None => drop(tx),
            }
            let (batch, took) = collect_timed(&mut rx, true).await;
            assert_eq!(took, Duration::ZERO);
            assert_eq!(batch.payloads.len(), payloads);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_writer_does_not_wait() {
        let (_tx, mut rx) = mpsc::unbounded_channel();
        let (batch, took) = collect_timed(&mut rx, false).await;
        assert_eq!((batch.payloads.len(), took), (1, Duration::ZERO));
    }

    #[test]
    fn deltas_of_a_step_stored_in_the_batch_are_dropped_the_running_steps_kept() {
        let payloads = [*started(), *answer(), *answer()];
        let deltas = vec![
            (1, DeltaKind::Text, "first".to_string()),
            (2, DeltaKind::Text, "second".to_string()),
            (3, DeltaKind::Text, "third, still running".to_string()),
        ];
        assert_eq!(
            texts(&still_running(deltas, &payloads)),
            ["third, still running"]
        );
        let none_stored = vec![(1, DeltaKind::Text, "so far".to_string())];
        assert_eq!(
            texts(&still_running(none_stored, &[*started()])),
            ["so far"]
        );
    }
}
