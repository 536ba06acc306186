//! `POST /hooks/<source>`: helpdesks' webhooks. No cookie and no person:
//! each source signs its deliveries with its own secret, which the daemon
//! checks (`Connectors.Receive`); this server only hands the body and the
//! headers an adapter reads to the daemon and answers with what it said —
//! 2xx once the delivery is durable, 4xx with the daemon's words when it
//! is refused (nothing is stored then).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tinycode_shared::proto::HookDelivery;

use crate::app::App;

/// The largest body read (the daemon's limit).
pub const MAX_BODY: usize = 1024 * 1024;

/// Headers handed to the daemon: the signatures and timestamps the
/// adapters read (tinycode's, Chatwoot's, Zendesk's, Zammad's).
const FORWARDED: [&str; 9] = [
    "x-tinycode-timestamp",
    "x-tinycode-signature",
    "x-chatwoot-timestamp",
    "x-chatwoot-signature",
    "x-zendesk-webhook-signature",
    "x-zendesk-webhook-signature-timestamp",
    "x-hub-signature",
    "content-type",
    "user-agent",
];

pub fn router() -> Router<App> {
    Router::new()
        .route("/hooks/{source}", post(receive))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

async fn receive(
    State(app): State<App>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let headers = FORWARDED
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    let delivery = HookDelivery {
        source,
        headers,
        body: body.to_vec(),
    };
    match app.daemon.connectors().receive(delivery).await {
        Ok(r) => {
            let r = r.into_inner();
            let status = if r.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            let body = if r.ignored.is_empty() {
                serde_json::json!({
                    "ticket_id": r.ticket_id,
                    "created": r.created,
                    "duplicate": r.duplicate,
                })
            } else {
                serde_json::json!({ "ignored": r.ignored })
            };
            json(status, &body)
        }
        Err(e) => {
            let status = match e.code() {
                tonic::Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                tonic::Code::ResourceExhausted => StatusCode::PAYLOAD_TOO_LARGE,
                tonic::Code::FailedPrecondition => StatusCode::SERVICE_UNAVAILABLE,
                code => crate::grpc::http_status(code),
            };
            let body = serde_json::json!({ "error": e.message() });
            json(status, &body)
        }
    }
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
