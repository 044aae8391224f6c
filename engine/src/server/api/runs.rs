//! Runs: list, submit, status, logs, cancel, retry, resume and preempt, each the service's
//! operation for the token's principal. Changes are written to the audit record with their
//! result, refusals included. `?format=text` answers with what the CLI prints in text mode,
//! rendered by the same code, so that `sluice --server` prints exactly what embedded mode does.

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::{IntoParams, ToSchema};

use super::error::Refusal;
use super::{ApiError, AppState, Caller};
use crate::service::logs::{Query as LogQuery, Sink};
use crate::service::{self, Filter, Retried};

/// JSON (the default) or the CLI's text.
#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Json,
    Text,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only runs of this team (a team-bound token sees its own team only).
    team: Option<String>,
    /// Only runs in this state: Running, Succeeded, Failed, Cancelled (any case).
    state: Option<String>,
    /// Only runs of this pipeline or sweep, by name.
    pipeline: Option<String>,
    /// Only runs started at or after this: a date (2026-12-01) or an RFC 3339 time.
    since: Option<String>,
    /// Only runs a schedule of this name started.
    schedule: Option<String>,
    /// At most this many runs, newest first (default 20; 0 for all).
    #[param(minimum = 0)]
    limit: Option<i64>,
    /// Skip this many first: the next page starts at offset + limit.
    #[param(minimum = 0)]
    offset: Option<i64>,
    #[param(inline)]
    format: Option<Format>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FormatQuery {
    #[param(inline)]
    pub format: Option<Format>,
}

/// How `GET /api/v1/runs/{run}` answers: as JSON or text, all of the run's steps or a page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    #[param(inline)]
    pub format: Option<Format>,
    /// At most this many steps, in the order they were created (0: all); with it, the answer
    /// adds `steps_total` and `step_counts`. Without it, every step.
    #[param(minimum = 0)]
    pub steps_limit: Option<i64>,
    /// Skip this many first steps: the next page starts at steps_offset + steps_limit.
    #[param(minimum = 0)]
    pub steps_offset: Option<i64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RunPath {
    /// A run id, an unambiguous prefix of one, `@latest` or `NAME@latest`.
    run: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct StepPath {
    /// A run id, an unambiguous prefix of one, `@latest` or `NAME@latest`.
    run: String,
    /// A step instance: `train`, `evaluate[1]`.
    step: String,
}

pub(super) fn text_response(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes).into_response()
}

pub(super) fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => ApiError::Service(service::Error::io(
            "cannot write the answer",
            std::io::Error::from(e),
        ))
        .into_response(),
    }
}

/// Lists the token's team's runs, newest first.
#[utoipa::path(get, path = "/api/v1/runs", tag = "runs", operation_id = "list_runs", params(ListQuery),
    responses((status = 200, description = "Runs as `sluice runs --output json` prints them, newest first, without their steps; with `format=text`, the table `sluice runs` prints",
                  content((Vec<crate::service::view::RunView> = "application/json"), (String = "text/plain"))),
              (status = 400, description = "A filter that does not parse: a state, a time, a negative limit or offset, an unknown parameter", body = Refusal)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = query?;
    let filter = Filter {
        team: q.team,
        state: q.state,
        pipeline: q.pipeline,
        since: q.since,
        schedule: q.schedule,
        limit: q.limit.unwrap_or(20),
        offset: q.offset.unwrap_or(0),
    };
    let listing = state.service.list(&caller.principal, &filter).await?;
    Ok(match q.format.unwrap_or_default() {
        Format::Json => json_response(StatusCode::OK, &listing.runs),
        Format::Text => {
            let mut out = Vec::new();
            crate::cli::status::write_runs(&mut out, &listing, &filter)
                .map_err(|e| service::Error::io("cannot write the answer", e))?;
            text_response(out)
        }
    })
}

/// A pipeline or sweep to run: the file's text and how it is named.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitBody {
    /// The YAML text of the pipeline or sweep file.
    source: String,
    /// How the file is named in diagnostics (its path on the client); default `pipeline.yaml`.
    #[serde(default)]
    path: Option<String>,
    /// `NAME=VALUE` parameters (a sweep's `NAME=SPEC`).
    #[serde(default)]
    params: Vec<String>,
    /// Which document to run, when the file holds several.
    #[serde(default)]
    name: Option<String>,
    /// The folder steps run in by default, when it exists on the server's machine (a server
    /// on the same machine as the client); else the run's own folder. Not read on
    /// Kubernetes, where steps run in their containers.
    #[serde(default)]
    workdir: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SubmittedBody {
    id: String,
    name: String,
    /// Warnings about the file, as `sluice lint` prints them (none on a replay).
    warnings: Vec<String>,
    /// Answered again for a retried `Idempotency-Key` (200, `Idempotent-Replayed: true`).
    #[serde(skip)]
    replayed: bool,
}

/// Submits a run of the token's team; the server starts driving it at once.
#[utoipa::path(post, path = "/api/v1/runs", operation_id = "submit_run", tag = "runs", request_body = SubmitBody,
    params(("Idempotency-Key" = Option<String>, Header, description = "A key of the client's (1 to 255 visible ASCII characters, a UUID say): the same request with the same key again is answered with the run the first recorded, never a second run (kept a day)")),
    responses((status = 201, description = "The run was recorded", body = SubmittedBody),
              (status = 200, description = "A retried Idempotency-Key: the run its first submission recorded", body = SubmittedBody,
                  headers(("Idempotent-Replayed" = String, description = "`true`"))),
              (status = 400, description = "The body does not parse, or the file is not valid: lint's diagnostics", body = Refusal),
              (status = 403, description = "A viewer's token, or a file of another team", body = Refusal),
              (status = 409, description = "The team's queue is full (maxQueued), or the Idempotency-Key was used for another request", body = Refusal)))]
pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
    body: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let result = submit_run(&state, &caller, &headers, body).await;
    answer_submission(&state, &caller, result, "run").await
}

/// A submission's answer: audited, driven, 201, or 200 with `Idempotent-Replayed` for a
/// retried key (whose run was audited and driven when it was recorded).
pub(super) async fn answer_submission(
    state: &AppState,
    caller: &Caller,
    result: Result<SubmittedBody, ApiError>,
    refused_target: &str,
) -> Result<Response, ApiError> {
    let target = match &result {
        Ok(s) => format!("run {}", s.id),
        Err(_) => refused_target.to_owned(),
    };
    if !result.as_ref().is_ok_and(|s| s.replayed) {
        audit(state, caller, "submit", &target, &result).await;
    }
    let submitted = result?;
    if submitted.replayed {
        let mut response = json_response(StatusCode::OK, &submitted);
        response.headers_mut().insert(
            super::idempotent::REPLAYED,
            axum::http::HeaderValue::from_static("true"),
        );
        return Ok(response);
    }
    state.drivers.drive(&submitted.id);
    Ok(json_response(StatusCode::CREATED, &submitted))
}

async fn submit_run(
    state: &AppState,
    caller: &Caller,
    headers: &axum::http::HeaderMap,
    body: Result<Json<SubmitBody>, JsonRejection>,
) -> Result<SubmittedBody, ApiError> {
    let Json(body) = body?;
    let key = super::idempotent::key_of(
        headers,
        caller,
        &serde_json::json!([
            "runs",
            body.source,
            body.path,
            body.params,
            body.name,
            body.workdir
        ]),
    )?;
    // A folder the client names, when it exists here (a client on the server's machine);
    // else none: the run gets a folder of its own (`Service::submit`), never the home.
    let workdir = body
        .workdir
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .unwrap_or_default();
    let request = service::Request {
        shown: body.path.unwrap_or_else(|| "pipeline.yaml".to_owned()),
        text: body.source,
        workdir,
        params: body.params,
        name: body.name,
        cluster: state.cluster.clone(),
        objects: state.objects.clone(),
        applied_version: None,
        schedule: None,
    };
    submit_request(state, caller, request, key).await
}

/// Checks and records a run for the caller; warnings about the file in the answer.
pub(super) async fn submit_request(
    state: &AppState,
    caller: &Caller,
    request: service::Request,
    key: Option<crate::store::IdempotencyKey>,
) -> Result<SubmittedBody, ApiError> {
    // A retried submission is answered before anything is validated again.
    if let Some(key) = &key
        && let Some(done) = state.service.replay(key).await?
    {
        return Ok(SubmittedBody {
            id: done.id,
            name: done.name,
            warnings: Vec::new(),
            replayed: true,
        });
    }
    let principal = caller.principal.clone();
    let (checked, mut warnings) = state
        .validation
        .run(move || {
            let mut warnings: Vec<String> = Vec::new();
            let mut warn = |d: &[crate::spec::Diagnostic]| {
                warnings.extend(d.iter().map(ToString::to_string));
            };
            let checked = service::submit::check(&principal, request, &mut warn);
            (checked, warnings)
        })
        .await?;
    let checked = checked?;
    let mut warn = |d: &[crate::spec::Diagnostic]| {
        warnings.extend(d.iter().map(ToString::to_string));
    };
    let submitted = state
        .service
        .submit_keyed(&caller.principal, checked, key.as_ref(), &mut warn)
        .await?;
    if submitted.replayed {
        warnings.clear();
    }
    Ok(SubmittedBody {
        id: submitted.id,
        name: submitted.name,
        warnings,
        replayed: submitted.replayed,
    })
}

/// Records a change and its result; a store that cannot record it is said in the log (the
/// change itself is already committed or refused).
pub(crate) async fn audit<T>(
    state: &AppState,
    caller: &Caller,
    action: &str,
    target: &str,
    result: &Result<T, ApiError>,
) {
    let outcome = match result {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.audit_result(),
    };
    if let Err(e) = state
        .service
        .record_change(&caller.id, caller.team(), action, target, &outcome)
        .await
    {
        tracing::warn!("cannot add to the audit record: {e}");
    }
}

/// A run with its steps, attempts and (sweeps) trials.
#[utoipa::path(get, path = "/api/v1/runs/{run}", operation_id = "run_status", tag = "runs", params(RunPath, StatusQuery),
    responses((status = 200, description = "The run as `sluice status --output json` prints it; with `format=text`, as `sluice status` prints it",
                  content((crate::service::view::RunView = "application/json"), (String = "text/plain"))),
              (status = 400, description = "A negative steps_limit or steps_offset, or an unknown parameter", body = Refusal),
              (status = 404, description = "No such run for this token's team, or a prefix of several", body = Refusal)))]
pub async fn status(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<RunPath>, PathRejection>,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let Query(q) = query?;
    let view = match (q.steps_limit, q.steps_offset) {
        (None, None) => state.service.status(&caller.principal, &p.run).await?,
        (limit, offset) => {
            state
                .service
                .status_page(
                    &caller.principal,
                    &p.run,
                    limit.unwrap_or(0),
                    offset.unwrap_or(0),
                )
                .await?
        }
    };
    Ok(match q.format.unwrap_or_default() {
        Format::Json => json_response(StatusCode::OK, &view),
        Format::Text => {
            let mut out = Vec::new();
            crate::cli::status::write_view(&mut out, &view)
                .map_err(|e| service::Error::io("cannot write the answer", e))?;
            text_response(out)
        }
    })
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// One step (`train`, `evaluate[1]`); without it, every step's, each line marked.
    step: Option<String>,
    /// Keep streaming new lines until the step (or the run) has ended.
    follow: Option<bool>,
    /// Which attempt of `step` (default: the latest).
    attempt: Option<i64>,
    /// `json`: one JSON object per line; `text` (the default): the lines as they are.
    #[param(inline)]
    format: Option<Format>,
}

/// How long a log request waits for its first line (or its refusal) before the answer starts.
const FIRST_LINE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// What a log stream carries from the task reading the logs to the response.
enum Piece {
    Bytes(Vec<u8>),
    Note(String),
    Done(Result<(), service::Error>),
}

struct Channel(mpsc::UnboundedSender<Piece>);

impl Sink for Channel {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0
            .send(Piece::Bytes(bytes.to_vec()))
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }

    fn note(&mut self, text: &str) {
        let _ = self.0.send(Piece::Note(text.to_owned()));
    }
}

/// A run's logs as chunked text (`sluice logs` prints the same bytes); with `follow=true`,
/// streamed until the step or run has ended. Remarks (`step 'x' has not started yet`) that
/// come before the first line are in the `sluice-note` header.
#[utoipa::path(get, path = "/api/v1/runs/{run}/logs", operation_id = "run_logs", tag = "runs", params(RunPath, LogsQuery),
    responses((status = 200, description = "The log lines (with `format=json`, one JSON object a line)", body = String, content_type = "text/plain",
                  headers(("sluice-note" = String, description = "A remark made before the first line: `step 'x' has not started yet`"))),
              (status = 400, description = "A parameter that does not parse, `attempt` without `step`, or an attempt the step does not have", body = Refusal),
              (status = 404, description = "No such run or step for this token's team", body = Refusal)))]
pub async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<RunPath>, PathRejection>,
    query: Result<Query<LogsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let Query(q) = query?;
    if q.attempt.is_some() && q.step.is_none() {
        return Err(ApiError::BadRequest(
            "attempt names an attempt of one step: give step too".into(),
        ));
    }
    let query = LogQuery {
        run: p.run,
        step: q.step,
        follow: q.follow.unwrap_or(false),
        attempt: q.attempt,
        json: q.format == Some(Format::Json),
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let service = state.service.clone();
    let principal = caller.principal.clone();
    let mut stop = state.stop.clone();
    tokio::spawn(async move {
        let mut sink = Channel(tx.clone());
        let result = tokio::select! {
            r = service.stream_logs(&principal, &query, &mut sink) => r,
            _ = stop.wait_for(|s| *s) => Ok(()),
        };
        let _ = tx.send(Piece::Done(result));
    });
    // Errors found before the first line (no such run, step or attempt: found at once) are
    // the answer's status; later ones end the stream. A followed log with nothing to say yet
    // is answered after a moment all the same, so that the client sees it has begun.
    let mut notes = Vec::new();
    let mut first = None;
    let deadline = tokio::time::Instant::now() + FIRST_LINE_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(Piece::Note(n))) => notes.push(n),
            Ok(Some(Piece::Done(Err(e)))) => return Err(e.into()),
            Ok(Some(Piece::Done(Ok(())))) | Ok(None) => break,
            Ok(Some(Piece::Bytes(b))) => {
                first = Some(b);
                break;
            }
            Err(_) => break,
        }
    }
    let stream = futures::stream::unfold((first, rx), |(first, mut rx)| async move {
        if let Some(b) = first {
            return Some((Ok::<_, std::io::Error>(b), (None, rx)));
        }
        loop {
            match rx.recv().await {
                Some(Piece::Bytes(b)) => return Some((Ok(b), (None, rx))),
                Some(Piece::Note(_)) => continue,
                Some(Piece::Done(Err(e))) => {
                    return Some((Err(std::io::Error::other(e.to_string())), (None, rx)));
                }
                Some(Piece::Done(Ok(()))) | None => return None,
            }
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(note) = notes.first()
        && let Ok(v) = header::HeaderValue::from_str(note)
    {
        headers.insert("sluice-note", v);
    }
    Ok(response)
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StateBody {
    id: String,
    state: String,
}

/// Asks the server to cancel a run: its steps get SIGTERM, then the grace period. An ended
/// run is 409 with the state in the way.
#[utoipa::path(post, path = "/api/v1/runs/{run}/cancel", operation_id = "cancel_run", tag = "runs", params(RunPath),
    responses((status = 202, description = "The cancellation is recorded", body = StateBody),
              (status = 403, description = "A viewer's token", body = Refusal),
              (status = 404, description = "No such run for this token's team", body = Refusal),
              (status = 409, description = "The run has ended already: the run and its state in `in_the_way`", body = Refusal)))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<RunPath>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let asked = format!("run {}", p.run);
    let result = async {
        let id = state.service.cancel(&caller.principal, &p.run).await?;
        let run = state
            .service
            .store()
            .run(&id)
            .await
            .map_err(service::Error::from)?;
        Ok::<_, ApiError>(StateBody {
            id,
            state: run.state.into(),
        })
    }
    .await;
    let target = result.as_ref().map_or(asked, |b| format!("run {}", b.id));
    audit(&state, &caller, "cancel", &target, &result).await;
    Ok(json_response(StatusCode::ACCEPTED, &result?))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RetriedBody {
    id: String,
    /// The steps reopened; empty when the run had succeeded (nothing to retry).
    steps: Vec<String>,
}

/// Reruns what failed or was cancelled in an ended run; the server drives it again.
#[utoipa::path(post, path = "/api/v1/runs/{run}/retry", operation_id = "retry_run", tag = "runs", params(RunPath),
    responses((status = 200, description = "The steps reopened", body = RetriedBody),
              (status = 403, description = "A viewer's token", body = Refusal),
              (status = 404, description = "No such run for this token's team, or it is being deleted", body = Refusal),
              (status = 409, description = "The run is still running: the run and its state in `in_the_way`", body = Refusal)))]
pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<RunPath>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let asked = format!("run {}", p.run);
    let result = async {
        Ok::<_, ApiError>(
            match state.service.retry(&caller.principal, &p.run).await? {
                Retried::NothingToRetry { id } => RetriedBody {
                    id,
                    steps: Vec::new(),
                },
                Retried::Reopened { id, steps } => RetriedBody { id, steps },
            },
        )
    }
    .await;
    let target = result.as_ref().map_or(asked, |b| format!("run {}", b.id));
    audit(&state, &caller, "retry", &target, &result).await;
    let body = result?;
    if !body.steps.is_empty() {
        state.drivers.drive(&body.id);
    }
    Ok(json_response(StatusCode::OK, &body))
}

/// Continues a run whose engine died; the server adopts such runs by itself within a second,
/// so this only makes it sooner.
#[utoipa::path(post, path = "/api/v1/runs/{run}/resume", operation_id = "resume_run", tag = "runs", params(RunPath),
    responses((status = 200, description = "The run's state", body = StateBody),
              (status = 403, description = "A viewer's token", body = Refusal),
              (status = 404, description = "No such run for this token's team", body = Refusal)))]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<RunPath>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let asked = format!("run {}", p.run);
    let result = async {
        let id = state.service.resume(&caller.principal, &p.run).await?;
        let run = state
            .service
            .store()
            .run(&id)
            .await
            .map_err(service::Error::from)?;
        Ok::<_, ApiError>(StateBody {
            id,
            state: run.state.into(),
        })
    }
    .await;
    let target = result.as_ref().map_or(asked, |b| format!("run {}", b.id));
    audit(&state, &caller, "resume", &target, &result).await;
    let body = result?;
    state.drivers.drive(&body.id);
    Ok(json_response(StatusCode::OK, &body))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PreemptedBody {
    id: String,
    state: String,
    step: String,
    attempt: i64,
}

/// Preempts a running step as the scheduler would: it resumes from its checkpoint.
#[utoipa::path(post, path = "/api/v1/runs/{run}/steps/{step}/preempt", operation_id = "preempt_step", tag = "runs", params(StepPath),
    responses((status = 202, description = "The preemption is recorded", body = PreemptedBody),
              (status = 403, description = "A viewer's token", body = Refusal),
              (status = 404, description = "No such run or step for this token's team", body = Refusal),
              (status = 409, description = "The step is not running: the run and the step's state in `in_the_way`", body = Refusal)))]
pub async fn preempt(
    State(state): State<AppState>,
    caller: Caller,
    path: Result<Path<StepPath>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(p) = path?;
    let asked = format!("run {} step {}", p.run, p.step);
    let result = async {
        let done = state
            .service
            .preempt(&caller.principal, &p.run, &p.step)
            .await?;
        Ok::<_, ApiError>(PreemptedBody {
            id: done.id,
            state: crate::run::state::run::RUNNING.into(),
            step: done.step,
            attempt: done.attempt,
        })
    }
    .await;
    let target = result
        .as_ref()
        .map_or(asked, |b| format!("run {} step {}", b.id, b.step));
    audit(&state, &caller, "preempt", &target, &result).await;
    Ok(json_response(StatusCode::ACCEPTED, &result?))
}
