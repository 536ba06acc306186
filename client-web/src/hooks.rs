//! `POST /hooks/<source>`: helpdesks' webhooks. No cookie and no person:
//! each source signs its deliveries with its own secret, which the daemon
//! checks (`Connectors.Receive`); this server only hands the body and the
//! headers an adapter reads to the daemon and answers with what it said —
//! 2xx once the delivery is durable, 4xx with the daemon's words when it
//! is refused (nothing is stored then).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tinycode_shared::proto::HookDelivery;
use tokio::sync::Semaphore;

use crate::app::App;

/// The largest body read (the daemon's limit); a larger one is answered
/// 413 by the body limit itself.
pub const MAX_BODY: usize = 1024 * 1024;
/// How long the daemon has to store a delivery.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

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

/// Deliveries being handed to the daemon at once, at most; more are
/// answered 503 at once (an unauthenticated sender cannot pile up work).
const MAX_IN_FLIGHT: usize = 64;

/// Deliveries in flight now.
#[derive(Clone)]
struct InFlight(Arc<Semaphore>);

pub fn router() -> Router<App> {
    Router::new()
        .route("/hooks/{source}", post(receive))
        .layer(Extension(InFlight(Arc::new(Semaphore::new(MAX_IN_FLIGHT)))))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

async fn receive(
    State(app): State<App>,
    Extension(InFlight(in_flight)): Extension<InFlight>,
    Path(source): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(_turn) = in_flight.try_acquire() else {
        return try_again("too many deliveries at once; try again");
    };
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
    let mut request = tonic::Request::new(delivery);
    // A daemon that cannot store it soon is told to the helpdesk as
    // "try again", never left hanging.
    request.set_timeout(DEADLINE);
    match app.daemon.connectors().receive(request).await {
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
            use tonic::Code;
            let status = match e.code() {
                Code::Unauthenticated => StatusCode::UNAUTHORIZED,
                Code::NotFound => StatusCode::NOT_FOUND,
                Code::InvalidArgument => StatusCode::BAD_REQUEST,
                // Anything else is the desk's trouble, not the delivery's
                // (a full disk, a busy ticket, no secret yet, a daemon
                // that is not running): the helpdesk should try again.
                _ => StatusCode::SERVICE_UNAVAILABLE,
            };
            if status == StatusCode::SERVICE_UNAVAILABLE {
                return try_again(e.message());
            }
            json(status, &serde_json::json!({ "error": e.message() }))
        }
    }
}

/// 503 with `Retry-After`: the helpdesk delivers it again later.
fn try_again(why: &str) -> Response {
    let mut response = json(
        StatusCode::SERVICE_UNAVAILABLE,
        &serde_json::json!({ "error": why }),
    );
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("30"),
    );
    response
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
