//! The Events service's boundary: requests checked and typed (`TryFrom`).

use tinycode_shared::proto::{ReadStreamRequest, SubscribeRequest};
use tonic::Status;

use super::super::validate;
use crate::store::{MAX_STREAM_ID, SubscriptionOptions};

/// `Events.Subscribe`, checked. (A newtype: both types are other crates'.)
pub struct Subscription(pub SubscriptionOptions);

impl TryFrom<SubscribeRequest> for Subscription {
    type Error = Status;

    fn try_from(req: SubscribeRequest) -> Result<Self, Status> {
        if req.stream_prefix.len() > MAX_STREAM_ID {
            return Err(Status::invalid_argument(format!(
                "stream_prefix is {} bytes; stream ids are at most {MAX_STREAM_ID}",
                req.stream_prefix.len()
            )));
        }
        Ok(Self(SubscriptionOptions {
            from_sequence: req.from_sequence,
            stream_prefix: req.stream_prefix,
            follow: req.follow,
        }))
    }
}

/// `Events.ReadStream`, checked: one stream from a version (at least 1).
pub struct ReadStream {
    pub stream_id: String,
    pub from_version: u64,
    pub limit: usize,
}

impl TryFrom<ReadStreamRequest> for ReadStream {
    type Error = Status;

    fn try_from(req: ReadStreamRequest) -> Result<Self, Status> {
        validate::max_len("stream_id", &req.stream_id, MAX_STREAM_ID)?;
        let limit = validate::limit("limit", req.limit, 1_000, 10_000)?;
        Ok(Self {
            stream_id: req.stream_id,
            from_version: req.from_version.max(1),
            limit,
        })
    }
}
