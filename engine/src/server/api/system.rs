//! Routes without a token: `/healthz` (the process is up), `/readyz` (it can reach its state
//! store), `/metrics` (Prometheus text) and `/api/v1/openapi.json` (the API's description).

use std::sync::Arc;

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

async fn ready(State(state): State<AppState>) -> Response {
    match state.service.store().ping().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the state store cannot be reached: {e}\n"),
        )
            .into_response(),
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
