use tinycode_shared::proto::events_server::Events;
use tinycode_shared::proto::{Event, SubscribeRequest};
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
