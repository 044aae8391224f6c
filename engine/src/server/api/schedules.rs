//! Applied documents and schedules: `apply`, `submit NAME`, the schedules with their last and
//! next fires, and one schedule's every fire. The team is the token's, as everywhere.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::Refusal;
use super::runs::{Format, FormatQuery, json_response, text_response};
use super::{ApiError, AppState, Caller};
use crate::service::{self, apply};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyFile {
    /// How the file is named in diagnostics (its path on the client).
    path: String,
    /// Its YAML text.
    text: String,
    /// The folder its steps run in by default (used when it exists on the server's machine;
    /// not read on Kubernetes, where steps run in their containers).
    #[serde(default)]
    workdir: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyBody {
    files: Vec<ApplyFile>,
    /// Delete the team's applied documents these files no longer hold.
    #[serde(default)]
    prune: bool,
    /// Say what would be done, and do nothing.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AppliedLine {
    kind: String,
    name: String,
    /// created, configured, unchanged or pruned.
    result: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AppliedBody {
    applied: Vec<AppliedLine>,
    dry_run: bool,
}

/// Applies Pipeline, Sweep and Schedule documents for the token's team, as `kubectl apply`:
/// every document validated first; if any is invalid nothing is applied (400).
#[utoipa::path(post, path = "/api/v1/apply", operation_id = "apply_documents", tag = "schedules", request_body = ApplyBody,
    responses((status = 200, description = "What was done to each document", body = AppliedBody),
              (status = 400, description = "The body does not parse, or documents with errors: lint's diagnostics; nothing applied", body = Refusal),
              (status = 403, description = "A viewer's token, or a document of another team", body = Refusal)))]
pub async fn apply(
    State(state): State<AppState>,
    caller: Caller,
    body: Result<Json<ApplyBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    // A folder the client names when it exists here; else none, and each run of the
    // document gets a folder of its own (never the server's home).
    let files: Vec<apply::File> = body
        .files
        .into_iter()
        .map(|f| apply::File {
            workdir: f
                .workdir
                .filter(|w| {
                    let w = std::path::Path::new(w);
                    w.is_absolute() && w.is_dir()
                })
                .unwrap_or_default(),
            path: f.path,
            text: f.text,
        })
        .collect();
    // Validating the files is CPU work: on a blocking thread, within the server's budget
    // (`validate`); the store is written from there too.
    let (service, principal, by) = (
        state.service.clone(),
        caller.principal.clone(),
        caller.id.clone(),
    );
    let (prune, dry_run) = (body.prune, body.dry_run);
    let cluster = state.cluster.clone();
    let handle = tokio::runtime::Handle::current();
    let result = state
        .validation
        .run(move || {
            handle.block_on(service.apply(
                &principal,
                &by,
                &files,
                prune,
                dry_run,
                cluster.as_deref(),
            ))
        })
        .await
        .and_then(|r| r.map_err(ApiError::from));
    if !body.dry_run {
        let target = match &result {
            Ok(lines) => lines
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            Err(_) => "documents".to_owned(),
        };
        super::runs::audit(&state, &caller, "apply", &target, &result).await;
    }
    let lines = result?;
    Ok(json_response(
        StatusCode::OK,
        &AppliedBody {
            applied: lines
                .into_iter()
                .map(|l| AppliedLine {
                    kind: l.kind,
                    name: l.name,
                    result: l.what.as_str().to_owned(),
                })
                .collect(),
            dry_run: body.dry_run,
        },
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitNamedBody {
    /// The applied pipeline or sweep of the token's team.
    name: String,
    /// `NAME=VALUE` parameters.
    #[serde(default)]
    params: Vec<String>,
}

/// Runs an applied pipeline or sweep by name (`sluice submit NAME`).
#[utoipa::path(post, path = "/api/v1/submit", operation_id = "submit_applied", tag = "schedules", request_body = SubmitNamedBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "A key of the client's: the same request with the same key again is answered with the run the first recorded, never a second run (kept a day)")),
    responses((status = 201, description = "The run was recorded", body = super::runs::SubmittedBody),
              (status = 200, description = "A retried Idempotency-Key: the run its first submission recorded", body = super::runs::SubmittedBody,
                  headers(("Idempotent-Replayed" = String, description = "`true`"))),
              (status = 400, description = "The body does not parse, or parameters the pipeline does not take", body = Refusal),
              (status = 403, description = "A viewer's token", body = Refusal),
              (status = 404, description = "No such applied pipeline for this token's team", body = Refusal),
              (status = 409, description = "The team's queue is full (maxQueued), or the Idempotency-Key was used for another request", body = Refusal)))]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    body: Result<Json<SubmitNamedBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let refused = format!("pipeline {}", body.name);
    let result = async {
        let key = super::idempotent::key_of(
            &headers,
            &caller,
            &serde_json::json!(["submit", body.name, body.params]),
        )?;
        let mut request = state
            .service
            .applied_request(&caller.principal, &body.name, body.params)
            .await?;
        request.cluster.clone_from(&state.cluster);
        request.objects.clone_from(&state.objects);
        super::runs::submit_request(&state, &caller, request, key).await
    }
    .await;
    super::runs::answer_submission(&state, &caller, result, &refused).await
}

fn render<T: Serialize>(
    value: &T,
    format: Option<Format>,
    text: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
) -> Result<Response, ApiError> {
    Ok(match format.unwrap_or_default() {
        Format::Json => json_response(StatusCode::OK, value),
        Format::Text => {
            let mut out = Vec::new();
            text(&mut out).map_err(|e| service::Error::io("cannot write the answer", e))?;
            text_response(out)
        }
    })
}

/// The token's team's schedules with their last and next fires.
#[utoipa::path(get, path = "/api/v1/schedules", operation_id = "list_schedules", tag = "schedules", params(FormatQuery),
    responses((status = 200, description = "The schedules, as `sluice schedules --output json` prints them; with `format=text`, its table",
                  content((Vec<crate::service::schedules::ScheduleView> = "application/json"), (String = "text/plain")))))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let views = state.service.schedules(&caller.principal).await?;
    render(&views, q.format, |out| {
        crate::cli::schedules::write_list(out, &views)
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SchedulePath {
    /// The schedule's name.
    name: String,
}

/// One schedule with every fire: its scheduled time, outcome, run and why.
#[utoipa::path(get, path = "/api/v1/schedules/{name}", operation_id = "schedule_status", tag = "schedules", params(SchedulePath, FormatQuery),
    responses((status = 200, description = "The schedule, as `sluice status SCHEDULE --output json` prints it, with every fire; with `format=text`, as `sluice status SCHEDULE` prints it",
                  content((crate::service::schedules::ScheduleView = "application/json"), (String = "text/plain"))),
              (status = 400, description = "A parameter that does not parse, or (an admin's token) a name that several teams' schedules have", body = Refusal),
              (status = 404, description = "No such schedule for this token's team", body = Refusal)))]
pub async fn status(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<SchedulePath>, PathRejection>,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let Query(q) = query?;
    let view = state.service.schedule(&caller.principal, &p.name).await?;
    render(&view, q.format, |out| {
        crate::cli::schedules::write_one(out, &view)
    })
}
