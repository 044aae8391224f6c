//! The web UI at `/`: server-rendered pages (maud) over the same service operations as the
//! API, each scoped to the signed-in token's team. No Node build: the CSS and the little
//! JavaScript that refreshes logs and a running run's DAG and asks before changes are
//! compiled into the binary and served as files (`/ui/app.css`, `/ui/app.js`), never inline:
//! every answer's Content-Security-Policy allows no inline script or style
//! ([`crate::server::headers`]).
//!
//! Sign-in: the token is entered once on `/login` and kept in an `HttpOnly`, `SameSite=Strict`
//! cookie (never in a URL). Every change (cancel, retry, resume, preempt) is a POST form
//! carrying a CSRF value derived from the token (see [`session::csrf_of`]): a request forged
//! from another site has neither the cookie nor the value, and is refused with 403 (before
//! that, by its `Origin`: [`crate::server::origin`], which also guards `/login`). Pages
//! answer the API's statuses: another team's run is 404 exactly as one that never existed.
//!
//! Files: `session` (the cookie, sign-in, the CSRF check), `layout` (the page shell, the
//! stylesheet, small formatting helpers), `runs` (the runs list, a run, a step's log, the
//! actions), `dag` (a run's graph as SVG, laid out here), `charts` (a sweep's history and
//! parallel coordinates as SVG), `pages` (queue, schedules, usage).

mod charts;
mod dag;
mod layout;
mod pages;
mod runs;
mod session;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::api::AppState;

pub use session::csrf_of;

/// The UI's routes; merged beside the API's by `api::router`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/runs") }))
        .route("/login", get(session::login_page).post(session::login))
        .route("/logout", post(session::logout))
        .route("/runs", get(runs::list))
        .route("/runs/{run}", get(runs::page))
        .route("/runs/{run}/live", get(runs::live))
        .route("/runs/{run}/steps/{step}", get(runs::step_page))
        .route("/runs/{run}/steps/{step}/log.txt", get(runs::log_text))
        .route("/runs/{run}/cancel", post(runs::cancel))
        .route("/runs/{run}/retry", post(runs::retry))
        .route("/runs/{run}/resume", post(runs::resume))
        .route("/runs/{run}/steps/{step}/preempt", post(runs::preempt))
        .route("/queue", get(pages::queue))
        .route("/schedules", get(pages::schedules))
        .route("/usage", get(pages::usage))
        .route("/ui/app.css", get(layout::stylesheet))
        .route("/ui/app.js", get(layout::script))
}

/// A page that could not be shown: the service's refusal as an HTML page with its status.
#[derive(Debug)]
pub struct PageError {
    status: StatusCode,
    message: String,
}

impl From<crate::service::Error> for PageError {
    fn from(e: crate::service::Error) -> Self {
        PageError {
            status: StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::BAD_REQUEST),
            message: e.to_string(),
        }
    }
}

impl From<crate::store::Error> for PageError {
    fn from(e: crate::store::Error) -> Self {
        crate::service::Error::from(e).into()
    }
}

impl PageError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        PageError {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("error").to_owned();
        let body = layout::bare(
            &title,
            maud::html! {
                main.narrow {
                    h1 { (self.status.as_u16()) " " (title) }
                    p.error { (self.message) }
                    p { a href="/runs" { "Back to the runs" } }
                }
            },
        );
        (
            self.status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body.into_string(),
        )
            .into_response()
    }
}
