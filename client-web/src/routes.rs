//! The page's URLs and what each asks the daemon. Every handler is a few
//! lines: read with gRPC, render with `pages`, or turn a form into one RPC
//! made by the person (`grpc::by`) and send the browser back to the page
//! it came from. The checks of `auth::guard` ran before any of them.

use std::sync::Arc;

use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::Markup;
use serde::Deserialize;
use tinycode_shared::proto::*;

use crate::app::App;
use crate::auth::local;
use crate::grpc::{Daemon, Failed, by};
use crate::pages::{self, Filter};
use crate::person::Person;

mod reads;
mod reports;

type Page = Result<Response, Failed>;

pub fn router(app: App) -> Router {
    let auth = Arc::clone(&app.auth);
    Router::new()
        .route("/", get(desk))
        .route("/tickets/{id}", get(ticket))
        .route("/tickets/{id}/{action}", post(act_on_ticket))
        .route("/approvals", get(approvals))
        .route("/approvals/{id}", post(decide))
        .route("/sessions", get(sessions).post(new_session))
        .route("/sessions/{id}", get(session))
        .route("/sessions/{id}/send", post(send))
        .route("/sessions/{id}/cancel", post(cancel))
        .route("/triage", get(triage))
        .route("/reports", get(reports::list).post(reports::make))
        .route("/reports/{id}", get(reports::one))
        .route("/reports/{id}/{chart}", get(reports::chart))
        .route("/outbox", get(outbox))
        .route("/outbox/{sequence}/retry", post(retry_delivery))
        .route("/settings", get(settings))
        .route("/whoami", get(whoami).post(name_given))
        .route("/live", get(crate::live::changes))
        .route("/live/session/{id}", get(crate::live::session))
        .route("/assets/{file}", get(asset))
        .layer(middleware::from_fn(ask_name))
        .layer(middleware::from_fn_with_state(auth, crate::auth::guard))
        // Webhooks carry their own signature instead of the cookie.
        .merge(crate::hooks::router())
        .with_state(app)
}

/// A person who has not said who they are is asked once, before the
/// first page (their name is recorded with what they decide).
async fn ask_name(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let unnamed = request
        .extensions()
        .get::<Person>()
        .is_some_and(|p| p.name.is_empty());
    if !unnamed || path == "/whoami" || path.starts_with("/assets/") {
        return next.run(request).await;
    }
    if request.method() != axum::http::Method::GET {
        return (
            StatusCode::FORBIDDEN,
            pages::refused(StatusCode::FORBIDDEN, "say who you are first: open /whoami"),
        )
            .into_response();
    }
    let next_url = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let query = serde_urlencoded::to_string([("next", next_url)]).unwrap_or_default();
    Redirect::to(&format!("/whoami?{query}")).into_response()
}

fn html(markup: Markup) -> Response {
    Html(markup.into_string()).into_response()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Part {
    part: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NextUrl {
    next: String,
}

async fn whoami(Extension(person): Extension<Person>, Query(q): Query<NextUrl>) -> Response {
    html(pages::whoami(&person, local(&q.next)))
}

#[derive(Deserialize)]
struct Named {
    name: String,
    #[serde(default)]
    next: String,
}

async fn name_given(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Form(form): Form<Named>,
) -> Response {
    let name: String = form
        .name
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect();
    if name.is_empty() {
        return html(pages::whoami(&person, local(&form.next)));
    }
    app.auth.name(&person.id, &name);
    Redirect::to(local(&form.next)).into_response()
}

async fn desk(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(filter): Query<Filter>,
) -> Page {
    let from = app.daemon.now().await?;
    let view = app.daemon.desk(filter, from).await?;
    Ok(if view.filter.part == "live" {
        html(pages::desk_live(&view))
    } else {
        html(pages::desk(&person, from, &view))
    })
}

async fn ticket(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    Query(q): Query<Part>,
) -> Page {
    let (view, from) = app.daemon.ticket(&id).await?;
    Ok(if q.part == "live" {
        html(pages::ticket_live(&view))
    } else {
        html(pages::ticket(&person, from, &view))
    })
}

/// The fields of every ticket action's form (each uses its own).
#[derive(Deserialize, Default)]
#[serde(default)]
struct TicketForm {
    text: String,
    category: String,
    priority: String,
    intent: String,
    queue: String,
    status: String,
    reason: String,
}

/// A ticket's form: its action's one RPC, made by the person, then back to
/// the ticket (404 for an action a ticket does not have).
async fn act_on_ticket(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path((id, action)): Path<(String, String)>,
    Form(f): Form<TicketForm>,
) -> Page {
    if !ticket_action(&app.daemon, &person, id.clone(), &action, f).await? {
        return Ok((
            StatusCode::NOT_FOUND,
            pages::refused(StatusCode::NOT_FOUND, "no such action on a ticket"),
        )
            .into_response());
    }
    Ok(Redirect::to(&format!("/tickets/{id}")).into_response())
}

/// Send `action` on ticket `ticket_id` as `person` asked it, with the form
/// fields it uses; `false` when a ticket has no such action.
async fn ticket_action(
    d: &Daemon,
    person: &Person,
    ticket_id: String,
    action: &str,
    f: TicketForm,
) -> Result<bool, Failed> {
    match action {
        "reply" => {
            let request = TicketTextRequest {
                ticket_id,
                text: f.text,
            };
            drop(d.tickets().reply(by(person, request)).await?);
        }
        "note" => {
            let request = TicketTextRequest {
                ticket_id,
                text: f.text,
            };
            drop(d.tickets().add_note(by(person, request)).await?);
        }
        "classify" => {
            let request = ClassifyTicketRequest {
                ticket_id,
                category: f.category,
                priority: f.priority,
                intent: f.intent,
            };
            drop(d.tickets().classify(by(person, request)).await?);
        }
        "route" => {
            let request = RouteTicketRequest {
                ticket_id,
                queue: f.queue,
                reason: f.reason,
            };
            drop(d.tickets().route(by(person, request)).await?);
        }
        "status" => {
            let request = SetTicketStatusRequest {
                ticket_id,
                status: f.status,
                reason: f.reason,
            };
            drop(d.tickets().set_status(by(person, request)).await?);
        }
        "review" => {
            let request = ReviewTicketRequest {
                ticket_id,
                ..Default::default()
            };
            drop(d.tickets().review(by(person, request)).await?);
        }
        "triage" => {
            let request = EnqueueTriageRequest {
                ticket_ids: vec![ticket_id],
                ..Default::default()
            };
            drop(d.triage().enqueue(by(person, request)).await?);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

async fn approvals(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(q): Query<Part>,
) -> Page {
    let from = app.daemon.now().await?;
    let view = app.daemon.inbox().await?;
    Ok(if q.part == "live" {
        html(pages::approvals_live(&person, &view))
    } else {
        html(pages::approvals(&person, from, &view))
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DecisionForm {
    decision: String,
    reason: String,
    answer: String,
    back: String,
}

async fn decide(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(approval_id): Path<String>,
    Form(f): Form<DecisionForm>,
) -> Page {
    let decision = match (f.decision.as_str(), f.answer.is_empty()) {
        ("always", _) => ApprovalDecision::AlwaysAllow,
        ("deny", _) => ApprovalDecision::Deny,
        ("allow", _) | ("", false) => ApprovalDecision::AllowOnce,
        _ => {
            return Ok((
                StatusCode::BAD_REQUEST,
                pages::refused(
                    StatusCode::BAD_REQUEST,
                    "a decision is allow, always or deny",
                ),
            )
                .into_response());
        }
    };
    let request = DecideApprovalRequest {
        approval_id,
        decision: decision as i32,
        reason: f.reason,
        answer: f.answer,
        ..Default::default()
    };
    app.daemon.approvals().decide(by(&person, request)).await?;
    Ok(Redirect::to(local(&f.back)).into_response())
}

async fn sessions(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(q): Query<Part>,
) -> Page {
    let from = app.daemon.now().await?;
    let list = app
        .daemon
        .sessions()
        .list(ListSessionsRequest {
            limit: 100,
            min_sequence: from,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(if q.part == "live" {
        html(pages::sessions_live(&list.sessions, list.more))
    } else {
        html(pages::sessions(&person, from, &list.sessions, list.more))
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TextForm {
    title: String,
    text: String,
}

async fn new_session(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Form(f): Form<TextForm>,
) -> Page {
    let created = app
        .daemon
        .sessions()
        .create(by(
            &person,
            CreateSessionRequest {
                title: f.title,
                ..Default::default()
            },
        ))
        .await?
        .into_inner();
    Ok(Redirect::to(&format!("/sessions/{}", created.id)).into_response())
}

async fn session(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
    Query(q): Query<Part>,
) -> Page {
    if q.part == "pending" {
        let pending = app.daemon.pending(&id).await?;
        return Ok(html(pages::session_pending(&person, &id, &pending)));
    }
    let view = app.daemon.session(&id).await?;
    Ok(html(pages::session(&person, &view)))
}

/// The page's script posts the composer and cancel with `fetch` and the
/// CSRF header: it needs no page back, only whether it worked.
fn done(headers: &HeaderMap, back: String) -> Response {
    if headers.contains_key("x-csrf-token") {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Redirect::to(&back).into_response()
    }
}

async fn send(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
    Form(f): Form<TextForm>,
) -> Page {
    let back = format!("/sessions/{session_id}");
    let request = SendMessageRequest {
        session_id,
        text: f.text,
        ..Default::default()
    };
    app.daemon
        .sessions()
        .send_message(by(&person, request))
        .await?;
    Ok(done(&headers, back))
}

async fn cancel(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(session_id): Path<String>,
    headers: HeaderMap,
) -> Page {
    let back = format!("/sessions/{session_id}");
    app.daemon
        .sessions()
        .cancel_turn(by(&person, CancelTurnRequest { session_id }))
        .await?;
    Ok(done(&headers, back))
}

async fn triage(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(q): Query<Part>,
) -> Page {
    let from = app.daemon.now().await?;
    let status = app
        .daemon
        .triage()
        .get_status(TriageStatusRequest {
            limit: 1_000,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(if q.part == "live" {
        html(pages::triage_live(&status))
    } else {
        html(pages::triage(&person, from, &status))
    })
}

async fn outbox(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(q): Query<Part>,
) -> Page {
    let from = app.daemon.now().await?;
    let request = ListOutboxRequest {
        limit: 200,
        ..Default::default()
    };
    let items = app
        .daemon
        .connectors()
        .list_outbox(request)
        .await?
        .into_inner()
        .items;
    if q.part == "live" {
        return Ok(html(pages::outbox_live(&person, &items)));
    }
    let sources = app
        .daemon
        .connectors()
        .status(ConnectorsStatusRequest {})
        .await?
        .into_inner()
        .sources;
    Ok(html(pages::outbox(&person, from, &sources, &items)))
}

/// "Try again" on a parked delivery: one RPC made by the person.
async fn retry_delivery(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(sequence): Path<u64>,
) -> Page {
    let request = RetryDeliveryRequest { sequence };
    app.daemon
        .connectors()
        .retry_delivery(by(&person, request))
        .await?;
    Ok(Redirect::to("/outbox").into_response())
}

async fn settings(State(app): State<App>, Extension(person): Extension<Person>) -> Page {
    let status = app.daemon.status().await?;
    Ok(html(pages::settings(
        &person,
        status.last_sequence,
        &status,
    )))
}

const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const FAVICON: &str = include_str!("../assets/favicon.svg");

/// The page's script, style and icon, embedded in the binary.
async fn asset(Path(file): Path<String>) -> Response {
    let (kind, body) = match file.as_str() {
        "app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "app.css" => ("text/css; charset=utf-8", APP_CSS),
        "favicon.svg" => ("image/svg+xml", FAVICON),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::local;

    #[test]
    fn only_paths_of_this_server_are_followed() {
        assert_eq!(local("/tickets/T-1?x=1"), "/tickets/T-1?x=1");
        for bad in [
            "//evil.example",
            "/\t/evil.example",
            "/\\evil",
            "https://evil",
            "",
            "/a b",
        ] {
            assert_eq!(local(bad), "/", "{bad:?}");
        }
    }
}
