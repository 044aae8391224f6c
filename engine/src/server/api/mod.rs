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
mod runs;
mod schedules;
mod system;
mod tokens;
mod usage;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use tokio::sync::watch;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use auth::{Caller, over_rate};
pub use error::ApiError;
pub(crate) use runs::audit;
pub use tokens::{parse_expiry, parse_role};

use super::Config;
use super::drivers::Drivers;
use super::metrics::Metrics;
use crate::service::Service;

/// The largest request body accepted (a pipeline file with its parameters); larger is 400.
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
    /// The Cluster file runs submitted here are admitted under.
    pub cluster: Option<std::path::PathBuf>,
    /// The object store runs submitted here use, when not the Cluster's or the home's.
    pub objects: Option<String>,
    /// Turns true when the server stops: streams that follow a run end then.
    pub stop: watch::Receiver<bool>,
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
            cluster: config.cluster.clone(),
            objects: config.objects.clone(),
            stop,
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
        .layer(middleware::from_fn_with_state(state.clone(), measure))
        .fallback(error::not_a_route)
        .with_state(state)
}

/// Counts every answer by route template and status, with its latency.
async fn measure(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    state.metrics.request(
        &method,
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
