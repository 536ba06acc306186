//! Live pages: the daemon's catch-up subscriptions as server-sent events.
//!
//! - `/live?p=ticket-,approval-&after=N`: every stored event of those
//!   streams after sequence `N`, in log order, then live, as `change`
//!   events whose `id:` is the event's global sequence. A reconnecting
//!   browser sends `Last-Event-ID` and continues right after it: nothing
//!   missed, nothing twice (the daemon's subscription has no gap and no
//!   duplicate; one subscription per connection keeps the order). The page
//!   refreshes the parts that changed; an `approval_requested` carries
//!   what a notification needs.
//! - `/live/session/<id>?after=N`: `Sessions.Attach` — the session's
//!   stored events after `N` as `item` events (the timeline item's HTML,
//!   escaped by maud), the running step's text so far, then its deltas as
//!   `delta` events (live only: no `id:`, as on gRPC).
//!
//! Both send a `ping` event every `PING` (the page reconnects when none
//! came for longer than its watchdog) and `gone` when the daemon ends the
//! stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as Sse, Sse as SseResponse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tinycode_shared::proto::event::Payload;
use tinycode_shared::proto::session_update::Update;
use tinycode_shared::proto::{AttachRequest, Event, SubscribeRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::app::App;
use crate::grpc::Failed;
use crate::timeline::{kind_of, session_item};

/// A heartbeat this often; the page's watchdog waits 25 s.
const PING: Duration = Duration::from_secs(10);
/// Stream prefixes one page may follow.
const MAX_PREFIXES: usize = 8;

type Events = SseResponse<ReceiverStream<Result<Sse, Infallible>>>;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct LiveQuery {
    /// Comma-separated stream prefixes.
    p: String,
    /// The last sequence the page holds.
    after: u64,
}

/// The sequence to deliver first: after the page's, or after the last
/// event a reconnecting browser saw.
fn first_sequence(after: u64, headers: &HeaderMap) -> u64 {
    let seen = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    after.max(seen).saturating_add(1)
}

/// Prefixes from the query: at most `MAX_PREFIXES`, none empty.
fn prefixes(p: &str) -> Vec<String> {
    p.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 100)
        .take(MAX_PREFIXES)
        .map(String::from)
        .collect()
}

/// What the page needs to know of a change.
fn change(event: &Event) -> Sse {
    let mut data = serde_json::json!({
        "seq": event.sequence,
        "stream": event.stream_id,
        "kind": kind_of(event),
    });
    if let Some(Payload::ApprovalRequested(r)) = &event.payload {
        data["approval"] = serde_json::json!({
            "id": r.approval_id,
            "tool": r.call.as_ref().map(|c| c.name.as_str()).unwrap_or_default(),
            "session": r.session_id,
            "question": r.question,
        });
    }
    Sse::default()
        .id(event.sequence.to_string())
        .event("change")
        .data(data.to_string())
}

/// Forward `source` to a browser through `wrap`, with a heartbeat, until
/// either side goes.
fn pump<S, T, F>(mut source: S, wrap: F) -> Events
where
    S: Stream<Item = Result<T, tonic::Status>> + Send + Unpin + 'static,
    T: Send + 'static,
    F: Fn(T) -> Option<Sse> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let mut ping = tokio::time::interval(PING);
        ping.tick().await;
        loop {
            let out = tokio::select! {
                _ = tx.closed() => return,
                // A `data:` line, or a browser never dispatches it.
                _ = ping.tick() => Sse::default().event("ping").data("1"),
                next = source.next() => match next {
                    Some(Ok(item)) => match wrap(item) {
                        Some(e) => e,
                        None => continue,
                    },
                    Some(Err(status)) => {
                        tracing::info!(error = %status, "a live stream ended");
                        let _ = tx.send(Ok(Sse::default().event("gone").data(status.message()))).await;
                        return;
                    }
                    None => {
                        let _ = tx.send(Ok(Sse::default().event("gone").data("the daemon ended the stream"))).await;
                        return;
                    }
                },
            };
            if tx.send(Ok(out)).await.is_err() {
                return;
            }
        }
    });
    SseResponse::new(ReceiverStream::new(rx))
}

pub async fn changes(
    State(app): State<App>,
    Query(q): Query<LiveQuery>,
    headers: HeaderMap,
) -> Result<Events, Failed> {
    let wanted = prefixes(&q.p);
    // One subscription keeps the log's order: the one prefix itself, or
    // every stream filtered here.
    let stream_prefix = match wanted.as_slice() {
        [one] => one.clone(),
        _ => String::new(),
    };
    let request = SubscribeRequest {
        from_sequence: first_sequence(q.after, &headers),
        stream_prefix,
        follow: true,
    };
    let source = app.daemon.events().subscribe(request).await?.into_inner();
    Ok(pump(source, move |event: Event| {
        let shown = wanted.is_empty() || wanted.iter().any(|p| event.stream_id.starts_with(p));
        shown.then(|| change(&event))
    }))
}

pub async fn session(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(q): Query<LiveQuery>,
    headers: HeaderMap,
) -> Result<Events, Failed> {
    let request = AttachRequest {
        session_id: id,
        from_sequence: first_sequence(q.after, &headers),
    };
    let source = app.daemon.sessions().attach(request).await?.into_inner();
    Ok(pump(
        source,
        |update: tinycode_shared::proto::SessionUpdate| match update.update? {
            Update::Event(event) => Some(
                Sse::default()
                    .id(event.sequence.to_string())
                    .event("item")
                    .data(session_item(&event).into_string().replace('\r', "")),
            ),
            Update::Delta(d) => Some(Sse::default().event("delta").data(
                serde_json::json!({"turn": d.turn, "kind": d.kind, "text": d.text}).to_string(),
            )),
        },
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_reconnect_continues_after_the_last_event_seen() {
        let mut headers = HeaderMap::new();
        assert_eq!(first_sequence(41, &headers), 42);
        headers.insert("last-event-id", "57".parse().unwrap());
        assert_eq!(first_sequence(41, &headers), 58);
        headers.insert("last-event-id", "junk".parse().unwrap());
        assert_eq!(first_sequence(41, &headers), 42);
        assert_eq!(prefixes("ticket-, ,approval-"), ["ticket-", "approval-"]);
        assert_eq!(prefixes(&"a,".repeat(20)).len(), MAX_PREFIXES);
    }
}
