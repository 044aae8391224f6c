//! The HTTP API under `/api/v1/`: JSON, the shapes of the CLI's `--output json` (a run is
//! what `sluice status --output json` prints), described by the OpenAPI document at
//! `/api/v1/openapi.json`, which is generated from the handlers below, so that the document
//! and the routes cannot disagree. Every route but `/healthz`, `/readyz`, `/metrics` and the
//! document itself takes a bearer token; the team is always the token's.
//!
//! Files: `error` (how a refusal is answered), `auth` (the token, the per-token rate limit),
//! `runs` and `tokens` (the operations), `system` (health, readiness, metrics, the document).

mod auth;
mod error;
pub mod failures;
mod idempotent;
mod runs;
mod schedules;
pub mod system;
mod tokens;
mod usage;
mod validate;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Caller, ClientAddress, authenticate, client_address, over_rate};
pub use error::ApiError;
pub(crate) use runs::audit;
pub use tokens::{parse_expiry, parse_role};

use super::Config;
use super::drivers::Drivers;
use super::metrics::Metrics;
use crate::service::Service;

/// The largest request body accepted (a pipeline file with its parameters); larger is 413,
/// refused before it is read when its `Content-Length` says so.
pub const BODY_LIMIT: usize = 4 * 1024 * 1024;

/// How long a request may take before its answer starts (a log that follows a run streams
/// for longer: only the wait for its first bytes counts).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What every handler gets.
#[derive(Clone, Debug)]
pub struct AppState {
    pub service: Service,
    pub drivers: Arc<Drivers>,
    pub metrics: Arc<Metrics>,
    pub limiter: Arc<auth::Limiter>,
    /// `/readyz`'s last probe of the store.
    pub readiness: Arc<system::Readiness>,
    /// Turns at validating members' files, off the async workers.
    pub validation: Arc<validate::Validation>,
    /// Failed authentications by client address.
    pub failures: Arc<failures::Failures>,
    /// The Cluster file runs submitted here are admitted under.
    pub cluster: Option<std::path::PathBuf>,
    /// The object store runs submitted here use, when not the Cluster's or the home's.
    pub objects: Option<String>,
    /// Turns true when the server stops: streams that follow a run end then.
    pub stop: watch::Receiver<bool>,
    /// The origins besides the server's own that may send changes (`--allowed-origin`).
    pub allowed_origins: Arc<[super::origin::Origin]>,
}

impl AppState {
    pub fn new(
        service: Service,
        drivers: Arc<Drivers>,
        metrics: Arc<Metrics>,
        config: &Config,
        stop: watch::Receiver<bool>,
    ) -> Self {
        AppState {
            service,
            drivers,
            metrics,
            limiter: Arc::new(auth::limiter(config.rate)),
            readiness: Arc::default(),
            validation: Arc::default(),
            failures: Arc::new(failures::Failures::new(config.auth_failures)),
            cluster: config.cluster.clone(),
            objects: config.objects.clone(),
            stop,
            allowed_origins: config.allowed_origins.clone().into(),
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sluice",
        description = "The sluice server's API: runs, logs, tokens and the audit record. Every route under /api/v1 but this document takes `Authorization: Bearer TOKEN`; the team is the token's."
    ),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The routes and their OpenAPI document, from one list.
pub fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(runs::list, runs::submit))
        .routes(routes!(runs::status))
        .routes(routes!(runs::logs))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::retry))
        .routes(routes!(runs::resume))
        .routes(routes!(runs::preempt))
        .routes(routes!(tokens::whoami))
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::revoke))
        .routes(routes!(tokens::audit))
        .routes(routes!(usage::usage))
        .routes(routes!(schedules::apply))
        .routes(routes!(schedules::submit))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::status))
        .split_for_parts();
    error::document_refusals(&mut doc);
    (router, doc)
}

/// The whole application: the API, its document, health, readiness and metrics, with the
/// body limit, the timeout and the request metrics around every route.
pub fn router(state: AppState) -> Router {
    let (api, doc) = routes();
    let doc = Arc::new(doc);
    api.merge(system::routes(doc))
        .merge(super::ui::routes())
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(middleware::from_fn(refuse_declared_oversize))
        .layer(middleware::from_fn_with_state(state.clone(), measure))
        .fallback(error::not_a_route)
        // Outermost, so that another site's change is refused before anything else runs.
        .layer(middleware::from_fn_with_state(
            state.allowed_origins.clone(),
            super::origin::check,
        ))
        .layer(middleware::map_response(super::headers::add))
        .with_state(state)
}

/// The method as metrics label it: one of a fixed set, never the client's own word (any
/// token is a method to HTTP, and each would be a series of its own).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// A request whose `Content-Length` is past [`BODY_LIMIT`] is answered 413 at once, rather
/// than read (or waited for) up to the limit.
async fn refuse_declared_oversize(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
        let mut response = error::too_large().into_response();
        // The body is not read: the connection cannot carry another request.
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        return response;
    }
    next.run(request).await
}

/// Counts every answer by route template and status, with its latency.
async fn measure(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state.metrics.request(
        method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    /// Every operation of the document has an id of its own: OpenAPI requires it, and
    /// clients generated from the document (and validators, schemathesis) name operations by it.
    #[test]
    fn operation_ids_are_unique() {
        let (_, doc) = super::routes();
        let doc = serde_json::to_value(&doc).expect("the document serializes");
        let mut seen = std::collections::BTreeMap::new();
        let paths = doc["paths"].as_object().expect("paths");
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("operations") {
                let id = op["operationId"]
                    .as_str()
                    .expect("an operationId")
                    .to_owned();
                if let Some(other) = seen.insert(id.clone(), format!("{method} {path}")) {
                    panic!("operationId {id} names both {other} and {method} {path}");
                }
            }
        }
        assert!(seen.len() >= 10, "the document lists the API: {seen:?}");
    }
}
