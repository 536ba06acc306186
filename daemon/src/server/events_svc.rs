use prost::Message;
use tinycode_shared::proto::events_server::Events;
use tinycode_shared::proto::{Event, ReadStreamRequest, ReadStreamResponse, SubscribeRequest};
use tonic::{Request, Response, Status};

use super::{OrStatus, ResponseStream, Shared, stream_from};
use crate::store::{MAX_STREAM_ID, SubscriptionOptions};

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
        let req = request.into_inner();
        if req.stream_prefix.len() > MAX_STREAM_ID {
            return Err(Status::invalid_argument(format!(
                "stream_prefix is {} bytes; stream ids are at most {MAX_STREAM_ID}",
                req.stream_prefix.len()
            )));
        }
        Ok(Response::new(subscribe(
            &self.shared,
            SubscriptionOptions {
                from_sequence: req.from_sequence,
                stream_prefix: req.stream_prefix,
                follow: req.follow,
            },
        )))
    }

    async fn read_stream(
        &self,
        request: Request<ReadStreamRequest>,
    ) -> Result<Response<ReadStreamResponse>, Status> {
        let req = request.into_inner();
        super::validate::max_len("stream_id", &req.stream_id, MAX_STREAM_ID)?;
        let limit = super::validate::limit("limit", req.limit, 1_000, 10_000)?;
        // Taken first: a subscription after it misses nothing the page
        // does not hold.
        let last_sequence = self.shared.store.last_sequence();
        let mut events = self
            .shared
            .store
            .read_stream(&req.stream_id, req.from_version.max(1), limit + 1)
            .await
            .or_status()?;
        let mut next_version = 0;
        let mut bytes = 0;
        let mut keep = 0;
        for (i, e) in events.iter().enumerate() {
            bytes += e.encoded_len();
            if i == limit || (i > 0 && bytes > super::MAX_PAGE_BYTES) {
                next_version = e.stream_version;
                break;
            }
            keep = i + 1;
        }
        events.truncate(keep);
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
