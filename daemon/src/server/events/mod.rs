//! The Events service: the log itself, read and followed.

mod convert;

use prost::Message;
use tinycode_shared::proto::events_server::Events;
use tinycode_shared::proto::{Event, ReadStreamRequest, ReadStreamResponse, SubscribeRequest};
use tonic::{Request, Response, Status};

use super::{OrStatus, ResponseStream, Shared, stream_from};
use crate::store::SubscriptionOptions;
use convert::{ReadStream, Subscription};

pub struct EventsService {
    shared: Shared,
}

impl EventsService {
    pub fn new(shared: Shared) -> Self {
        Self { shared }
    }
}

#[tonic::async_trait]
impl Events for EventsService {
    type SubscribeStream = ResponseStream<Event>;

    async fn subscribe(
        &self,
        request: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let Subscription(options) = Subscription::try_from(request.into_inner())?;
        Ok(Response::new(subscribe(&self.shared, options)))
    }

    async fn read_stream(
        &self,
        request: Request<ReadStreamRequest>,
    ) -> Result<Response<ReadStreamResponse>, Status> {
        let q = ReadStream::try_from(request.into_inner())?;
        // Taken first: a subscription after it misses nothing the page
        // does not hold.
        let last_sequence = self.shared.store.last_sequence();
        let store = &self.shared.store;
        let events = store
            .read_stream(&q.stream_id, q.from_version, q.limit + 1)
            .await;
        let (events, next_version) = page_of(events.or_status()?, q.limit);
        Ok(Response::new(ReadStreamResponse {
            events,
            next_version,
            last_sequence,
        }))
    }
}

/// A catch-up subscription as a response stream that ends when the daemon
/// stops (shared by `Events.Subscribe` and `Approvals.Watch`).
pub(super) fn subscribe(shared: &Shared, options: SubscriptionOptions) -> ResponseStream<Event> {
    let mut subscription = shared.store.subscribe(options);
    let mut stopping = shared.stopping.clone();
    stream_from(move |tx| async move {
        loop {
            let next = tokio::select! {
                next = subscription.recv() => next,
                _ = stopping.wait_for(|s| *s) => None,
            };
            let Some(item) = next else { return };
            let item = item.map(|event| Event::clone(&event)).or_status();
            if tx.send(item).await.is_err() {
                return;
            }
        }
    })
}

/// At most `limit` events and a page's bytes; the version the next page
/// starts at (0: none).
fn page_of(mut events: Vec<Event>, limit: usize) -> (Vec<Event>, u64) {
    let mut bytes = 0;
    for (i, e) in events.iter().enumerate() {
        bytes += e.encoded_len();
        if i == limit || (i > 0 && bytes > super::MAX_PAGE_BYTES) {
            let next = e.stream_version;
            events.truncate(i);
            return (events, next);
        }
    }
    (events, 0)
}
