//! `/reports`: list, make (one RPC made by the person), one report, and
//! its charts as images.

use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use serde::Deserialize;
use tinycode_shared::proto::{GenerateReportRequest, GetReportRequest, ListReportsRequest};

use super::{Page, Part, html};
use crate::app::App;
use crate::grpc::by;
use crate::pages;
use crate::person::Person;

pub(super) async fn list(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Query(q): Query<Part>,
) -> Page {
    let from = app.daemon.now().await?;
    let request = ListReportsRequest { limit: 100 };
    let list = app
        .daemon
        .reports()
        .list(request)
        .await?
        .into_inner()
        .reports;
    Ok(if q.part == "live" {
        html(pages::reports_live(&list))
    } else {
        html(pages::reports(&person, from, &list))
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct MakeForm {
    day: String,
    queue: String,
}

pub(super) async fn make(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Form(f): Form<MakeForm>,
) -> Page {
    let request = GenerateReportRequest {
        day: f.day,
        queue: f.queue,
        ..Default::default()
    };
    let info = app.daemon.reports().generate(by(&person, request)).await?;
    Ok(Redirect::to(&format!("/reports/{}", info.into_inner().report_id)).into_response())
}

pub(super) async fn one(
    State(app): State<App>,
    Extension(person): Extension<Person>,
    Path(id): Path<String>,
) -> Page {
    let from = app.daemon.now().await?;
    let content = app
        .daemon
        .reports()
        .get(GetReportRequest { report_id: id })
        .await?
        .into_inner();
    Ok(html(pages::report(&person, from, &content)))
}

/// `volume.svg` / `backlog.svg`: the daemon's chart, as an image (an SVG
/// shown through `<img>` runs no script; the policy says so again).
pub(super) async fn chart(
    State(app): State<App>,
    Path((id, file)): Path<(String, String)>,
) -> Page {
    let Some(name) = file.strip_suffix(".svg") else {
        return Ok(StatusCode::NOT_FOUND.into_response());
    };
    let content = app
        .daemon
        .reports()
        .get(GetReportRequest { report_id: id })
        .await?
        .into_inner();
    let Some(chart) = content.charts.into_iter().find(|c| c.name == name) else {
        return Ok(StatusCode::NOT_FOUND.into_response());
    };
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'",
            ),
        ],
        chart.svg,
    )
        .into_response())
}
