//! Routes without a token: `/healthz` (the process is up), `/readyz` (its state store takes a
//! write), `/metrics` (Prometheus text) and `/api/v1/openapi.json` (the API's description).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;

pub fn routes(doc: Arc<utoipa::openapi::OpenApi>) -> Router<AppState> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .route(
            "/api/v1/openapi.json",
            get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
}

/// How long one readiness answer stands: probes are unauthenticated, and each writes a row.
const READY_FOR: Duration = Duration::from_secs(1);

/// The last readiness probe: when, and what it found.
#[derive(Debug, Default)]
pub struct Readiness {
    last: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Readiness {
    /// Whether the store takes a write now; one probe at a time, its answer kept for
    /// [`READY_FOR`].
    async fn check(&self, state: &AppState) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < READY_FOR
        {
            return answer.clone();
        }
        let owner = crate::run::engine::me(0).owner;
        let store = state.service.store();
        let answer = match store.check_room() {
            Err(e) => Err(format!("the state store cannot take a write: {e}")),
            Ok(()) => store
                .probe_write(&owner, &crate::time::now_rfc3339())
                .await
                .map_err(|e| format!("the state store cannot take a write: {e}")),
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}

async fn ready(State(state): State<AppState>) -> Response {
    match state.readiness.check(&state).await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let text = state
        .metrics
        .render(&state.service, state.drivers.count())
        .await;
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
