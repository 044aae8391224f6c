//! The runs pages: the list (filtered by state, pipeline, schedule and start), one run (its
//! graph, steps, attempts and, for a sweep, its trials and charts), one step (its attempts,
//! metrics, outputs and log), and the changes a member makes from them (cancel, retry,
//! resume, preempt), each recorded in the audit record as the API records it.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, Nav, badge, duration, number, time};
use super::session::{ChangeForm, CsrfForm, Session, csrf_field};
use super::{PageError, charts, dag};
use crate::run::state::{run as rs, step as st};
use crate::server::api::{ApiError, AppState};
use crate::service::logs::{Query as LogQuery, Sink};
use crate::service::{Detail, Filter, Retried};

/// Runs per page of the list.
const PAGE: i64 = 50;
/// At most this many rows of a table of steps or trials on one page (a sweep of 10,000
/// trials would weigh megabytes): the rest is counted, and `sluice status` lists all.
const MAX_ROWS: usize = 300;
/// At most this much of a log on a step's page; `log.txt` has all of it.
const MAX_LOG: usize = 200 * 1024;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    state: Option<String>,
    pipeline: Option<String>,
    schedule: Option<String>,
    since: Option<String>,
    page: Option<i64>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The list's query string with another page number.
fn page_link(q: &ListQuery, page: i64) -> String {
    let mut parts = Vec::new();
    for (k, v) in [
        ("state", &q.state),
        ("pipeline", &q.pipeline),
        ("schedule", &q.schedule),
        ("since", &q.since),
    ] {
        if let Some(v) = given(v) {
            parts.push(format!("{k}={}", crate::client::segment(&v)));
        }
    }
    parts.push(format!("page={page}"));
    format!("/runs?{}", parts.join("&"))
}

pub async fn list(
    State(state): State<AppState>,
    session: Session,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = query.ok().map(|Query(q)| q).unwrap_or_default();
    let page = q.page.unwrap_or(1).max(1);
    let filter = Filter {
        state: given(&q.state),
        pipeline: given(&q.pipeline),
        since: given(&q.since),
        schedule: given(&q.schedule),
        limit: PAGE + 1,
        offset: (page - 1) * PAGE,
        ..Filter::default()
    };
    let listed = state.service.list(session.principal(), &filter).await;
    let (status, error, mut runs) = match listed {
        Ok(l) => (StatusCode::OK, None, l.runs),
        Err(e) => (
            StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::BAD_REQUEST),
            Some(e.to_string()),
            Vec::new(),
        ),
    };
    let more = runs.len() as i64 > PAGE;
    runs.truncate(PAGE as usize);
    let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
    let who = state.service.submitters(&ids).await.unwrap_or_default();
    let every_team = session.principal().bound_team().is_none();
    let now = state.service.clock().now();
    let states = ["", "Running", "Succeeded", "Failed", "Cancelled"];
    let body = html! {
        h1 { "Runs" }
        form.filters method="get" action="/runs" {
            label { "State"
                select name="state" {
                    @for s in states {
                        option value=(s) selected[given(&q.state).as_deref() == Some(s)] { @if s.is_empty() { "any" } @else { (s) } }
                    }
                }
            }
            label { "Pipeline" input name="pipeline" value=(q.pipeline.clone().unwrap_or_default()) placeholder="name"; }
            label { "Schedule" input name="schedule" value=(q.schedule.clone().unwrap_or_default()) placeholder="name"; }
            label { "Since" input name="since" value=(q.since.clone().unwrap_or_default()) placeholder="2026-12-01"; }
            button type="submit" { "Filter" }
            a href="/runs" { "clear" }
        }
        @if let Some(e) = &error { p.error role="alert" { (e) } }
        @if runs.is_empty() && error.is_none() {
            p.muted { "No run matches. Submit one with " code { "sluice run FILE --server URL" } " or " code { "sluice submit NAME" } "." }
        } @else if error.is_none() {
            table #runs {
                thead { tr {
                    th { "Run" } th { "State" } @if every_team { th { "Team" } }
                    th { "Started (UTC)" } th.num { "Duration" } th { "Submitted by" }
                } }
                tbody {
                    @for r in &runs {
                        tr data-run=(r.id) {
                            td { a href={ "/runs/" (r.id) } { (r.name) } " " span.muted { (r.id.get(..8).unwrap_or(&r.id)) } }
                            td { (badge(&r.state)) }
                            @if every_team { td { (r.team) } }
                            td { (time(&r.started_at)) }
                            td.num { (duration(&r.started_at, r.ended_at.as_deref(), now)) }
                            td {
                                @if let Some(s) = &r.schedule { "schedule " a href="/schedules" { (s) } }
                                @else if let Some(w) = who.get(&r.id) { (w) }
                                @else { span.muted { "on the server's host" } }
                            }
                        }
                    }
                }
            }
            div.pager {
                @if page > 1 { a href=(page_link(&q, page - 1)) { "← newer" } }
                span.muted { "page " (page) }
                @if more { a href=(page_link(&q, page + 1)) { "older →" } }
            }
        }
    };
    layout::html_response(status, layout::page(&session, "Runs", Nav::Runs, body))
}

#[derive(Debug, Default, Deserialize)]
pub struct Said {
    said: Option<String>,
}

/// The graph and the steps table: the part of a run's page that a running run refreshes.
fn live_part(d: &Detail, session: &Session) -> Markup {
    let v = &d.view;
    let nodes = dag::nodes(d.pipeline.as_ref(), &d.rows);
    // A sweep's trials have a table of their own (see `sweep`).
    let trials: std::collections::HashSet<&str> = v
        .sweep
        .iter()
        .flat_map(|r| r.trials.iter().map(|t| t.step.as_str()))
        .collect();
    let steps: Vec<&crate::service::view::StepView> = v
        .steps
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|s| !trials.contains(s.name.as_str()))
        .collect();
    let may = session.may_change(&v.team) && v.state == rs::RUNNING;
    // Each row's step of the file (`eval` for `eval[3]`): the anchor the graph's boxes link to.
    let template_of: std::collections::HashMap<&str, &str> = d
        .rows
        .iter()
        .map(|r| (r.name.as_str(), r.step.as_str()))
        .collect();
    html! {
        div.card { (layout::svg(dag::svg(&v.id, &nodes))) }
        @if let Some(report) = &v.sweep { (sweep(d, report)) }
        h2 { "Steps" @if !trials.is_empty() { " (besides the trials)" } }
        table #steps {
            thead { tr {
                th { "Step" } th { "State" } th { "Attempts" } th.num { "Duration" } th { "Metrics" } th { "Reason" }
                @if may { th {} }
            } }
            tbody {
                @for s in steps.iter().take(MAX_ROWS) {
                    @let template = template_of.get(s.name.as_str()).copied().unwrap_or(s.name.as_str());
                    @let last = s.attempts.last();
                    tr id={ "step-" (template) } data-step=(s.name) data-state=(s.state) {
                        td { a href={ "/runs/" (v.id) "/steps/" (crate::client::segment(&s.name)) } { (s.name) } }
                        td { (badge(&s.state)) }
                        td { (attempts_summary(&s.attempts)) }
                        td.num { @if let Some(a) = last { (duration(&a.started_at, a.ended_at.as_deref(), v.taken_at)) } }
                        td { (metrics(&s.metrics)) }
                        td.reason { (s.reason.clone().unwrap_or_default()) }
                        @if may {
                            td { @if s.state == st::RUNNING {
                                form.inline method="post" action={ "/runs/" (v.id) "/steps/" (crate::client::segment(&s.name)) "/preempt" } data-confirm={ "Preempt step " (s.name) " of run " (v.id) "? It resumes from its latest checkpoint." } {
                                    input type="hidden" name="csrf" value=(session.csrf);
                                    button type="submit" { "Preempt" }
                                }
                            } }
                        }
                    }
                }
            }
        }
        @if steps.len() > MAX_ROWS {
            p.muted { (steps.len() - MAX_ROWS) " more steps: " code { "sluice status " (v.id) } " lists them all." }
        }
    }
}

/// `2 (1 preempted, 1 lost)`.
fn attempts_summary(attempts: &[crate::service::view::AttemptView]) -> String {
    let mut notable = std::collections::BTreeMap::new();
    for a in attempts {
        if a.state != crate::run::state::attempt::SUCCEEDED
            && a.state != crate::run::state::attempt::RUNNING
        {
            *notable.entry(a.state.to_ascii_lowercase()).or_insert(0) += 1;
        }
    }
    if notable.is_empty() {
        return attempts.len().to_string();
    }
    let parts: Vec<String> = notable.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!("{} ({})", attempts.len(), parts.join(", "))
}

fn metrics(m: &std::collections::BTreeMap<String, f64>) -> Markup {
    html! {
        @for (k, v) in m.iter().take(6) { span.metric { (k) "=" (number(*v)) } " " }
    }
}

/// A run's page.
pub async fn page(
    State(state): State<AppState>,
    session: Session,
    Path(run): Path<String>,
    said: Result<Query<Said>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let d = state.service.detail(session.principal(), &run).await?;
    let v = &d.view;
    let may = session.may_change(&v.team);
    let running = v.state == rs::RUNNING;
    let dead = v.engine.as_ref().is_some_and(|e| !e.alive);
    let said = said.ok().and_then(|Query(s)| s.said);
    let body = html! {
        h1 { (v.name) " " (badge(&v.state)) }
        @if let Some(s) = said { p.said role="status" { (s) } }
        p.muted {
            "run " code #run-id { (v.id) } " · team " (v.team) " · started " (time(&v.started_at))
            " · " (duration(&v.started_at, v.ended_at.as_deref(), v.taken_at))
            @if let Some(ver) = v.version { " · version " (ver) }
            @if let Some(s) = &v.schedule { " · schedule " (s) }
        }
        @if let Some(r) = &v.reason { p.reason { (r) } }
        @if may {
            div.actions {
                @if running { (action(&session, &v.id, "cancel", "Cancel", "? Its running steps are stopped.")) }
                @if !running { (action(&session, &v.id, "retry", "Retry", "? What failed or was cancelled runs again.")) }
                @if running && dead { (action(&session, &v.id, "resume", "Resume", "? It carries on from its latest checkpoints.")) }
            }
        }
        @if running {
            div data-live={ "/runs/" (v.id) "/live" } { (live_part(&d, &session)) }
        } @else {
            div { (live_part(&d, &session)) }
        }
    };
    Ok(layout::html_response(
        StatusCode::OK,
        layout::page(&session, &v.name, Nav::Runs, body),
    ))
}

/// A change's button, in a form that the script asks about first (`data-confirm`: "Retry
/// run ID? ..."); without the script, the form is sent as it is.
fn action(session: &Session, run: &str, what: &str, label: &str, then: &str) -> Markup {
    html! {
        form.inline method="post" action={ "/runs/" (run) "/" (what) } data-confirm={ (label) " run " (run) (then) } {
            input type="hidden" name="csrf" value=(session.csrf);
            button class=[(what == "cancel").then_some("danger")] type="submit" name="do" value=(what) { (label) }
        }
    }
}

/// A sweep's section: the best trial, the two charts and the trials.
fn sweep(d: &Detail, report: &crate::run::driver::Report) -> Markup {
    let minimize = d
        .pipeline
        .as_ref()
        .and_then(|p| {
            p.steps.iter().find_map(|s| match &s.action {
                crate::spec::model::Action::Sweep { sweep: Some(w), .. } => Some(w.objective.goal),
                _ => None,
            })
        })
        .is_some_and(|g| g == crate::spec::model::Goal::Minimize);
    let stopped = report
        .trials
        .iter()
        .filter(|t| t.state == st::STOPPED)
        .count();
    html! {
        h2 #sweep { "Sweep: " (report.metric) ", " @if minimize { "minimized" } @else { "maximized" } }
        @if let Some(b) = &report.best {
            p #best { "Best: trial " (b.trial) @if let Some(v) = b.value { ", " (report.metric) " = " (number(v)) } ", " code { (b.params) } }
        }
        p.muted { (report.trials.len()) " trials" @if stopped > 0 { ", " (stopped) " stopped early" } }
        div.card {
            h3 { "Optimization history" }
            @match charts::history(&report.trials, minimize, &report.metric) {
                Some(svg) => (layout::svg(svg)),
                None => p.muted { "No trial has a value yet." },
            }
        }
        div.card {
            h3 { "Parallel coordinates" }
            @match charts::parallel(&report.trials, &report.metric) {
                Some(svg) => (layout::svg(svg)),
                None => p.muted { "No trial has parameters yet." },
            }
        }
        table #trials {
            thead { tr { th.num { "Trial" } th { "State" } th { "Parameters" } th.num { (report.metric) } th { "Reason" } } }
            tbody {
                @for t in report.trials.iter().take(MAX_ROWS) {
                    tr data-trial=(t.trial) data-state=(t.state) {
                        td.num { a href={ "/runs/" (d.view.id) "/steps/" (crate::client::segment(&t.step)) } { (t.trial) } }
                        td { (badge(&t.state)) @if t.state == st::STOPPED { " " span.muted { "early-stopped" } } }
                        td { code { (t.params) } }
                        td.num { @if let Some(v) = t.value { (number(v)) } }
                        td.reason { (t.reason.clone().unwrap_or_default()) }
                    }
                }
            }
        }
        @if report.trials.len() > MAX_ROWS {
            p.muted { (report.trials.len() - MAX_ROWS) " more trials: " code { "sluice status " (d.view.id) } " lists them all." }
        }
    }
}

/// The refreshing part of a running run's page; `x-run-ended` once it has ended.
pub async fn live(
    State(state): State<AppState>,
    session: Session,
    Path(run): Path<String>,
) -> Result<Response, PageError> {
    let d = state.service.detail(session.principal(), &run).await?;
    let ended = d.view.state != rs::RUNNING;
    let mut response = layout::html_response(StatusCode::OK, live_part(&d, &session));
    response.headers_mut().insert(
        "x-run-ended",
        HeaderValue::from_static(if ended { "true" } else { "false" }),
    );
    Ok(response)
}

/// Collects a log's bytes.
struct Collect(Vec<u8>);

impl Sink for Collect {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
    fn note(&mut self, _: &str) {}
}

#[derive(Debug, Default, Deserialize)]
pub struct StepQuery {
    attempt: Option<i64>,
}

async fn log_of(
    state: &AppState,
    session: &Session,
    run: &str,
    step: &str,
    attempt: Option<i64>,
) -> Result<Vec<u8>, PageError> {
    let mut sink = Collect(Vec::new());
    let query = LogQuery {
        run: run.to_owned(),
        step: Some(step.to_owned()),
        follow: false,
        attempt,
        json: false,
    };
    match state
        .service
        .stream_logs(session.principal(), &query, &mut sink)
        .await
    {
        Ok(()) => Ok(sink.0),
        // A step that has not started has no log yet.
        Err(crate::service::Error::NotFound(_)) if !sink.0.is_empty() => Ok(sink.0),
        Err(e) => Err(e.into()),
    }
}

/// A step's page: its attempts, metrics, outputs and log.
pub async fn step_page(
    State(state): State<AppState>,
    session: Session,
    Path((run, step)): Path<(String, String)>,
    query: Result<Query<StepQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let d = state.service.detail(session.principal(), &run).await?;
    let v = &d.view;
    let Some(s) = v
        .steps
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|s| s.name == step)
    else {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            format!("run {} has no step '{step}'", v.id),
        ));
    };
    let attempt = query.ok().and_then(|Query(q)| q.attempt);
    let log = if s.attempts.is_empty() {
        None
    } else {
        Some(log_of(&state, &session, &v.id, &step, attempt).await?)
    };
    let outputs = d
        .rows
        .iter()
        .find(|r| r.name == step)
        .and_then(|r| r.outputs.clone());
    let live = s.state == st::RUNNING && attempt.is_none();
    let body = html! {
        p { a href={ "/runs/" (v.id) } { "← " (v.name) } }
        h1 { (s.name) " " (badge(&s.state)) }
        @if let Some(r) = &s.reason { p.reason { (r) } }
        h2 { "Attempts" }
        table #attempts {
            thead { tr { th.num { "#" } th { "State" } th { "Exit" } th { "Started (UTC)" } th.num { "Duration" } th { "Where" } th { "Reason" } } }
            tbody {
                @for a in &s.attempts {
                    tr data-state=(a.state) {
                        td.num { a href={ "?attempt=" (a.number) } { (a.number) } }
                        td { (badge(&a.state)) }
                        td { @if let Some(c) = a.exit_code { (c) } @if let Some(sig) = a.signal { "signal " (sig) } }
                        td { (time(&a.started_at)) }
                        td.num { (duration(&a.started_at, a.ended_at.as_deref(), v.taken_at)) }
                        td {
                            @if let Some(n) = &a.nodes { code { (serde_json::to_string(n).unwrap_or_default()) } }
                            @if let Some(g) = &a.gpus { " gpus " (g.iter().map(u32::to_string).collect::<Vec<_>>().join(",")) }
                        }
                        td.reason { (a.reason.clone().unwrap_or_default()) }
                    }
                }
            }
        }
        @if !s.metrics.is_empty() {
            h2 { "Metrics" }
            table #metrics { tbody { @for (k, m) in &s.metrics { tr { td { (k) } td.num { (number(*m)) } } } } }
        }
        @if let Some(o) = outputs { h2 { "Outputs" } pre.card { (o) } }
        h2 { "Log" @if let Some(n) = attempt { " of attempt " (n) } }
        @match &log {
            None => p.muted { "The step has not started: no log yet." },
            Some(bytes) => {
                @let from = bytes.len().saturating_sub(MAX_LOG);
                @if from > 0 { p.muted { "The last 200 KB; " a href={ "/runs/" (v.id) "/steps/" (crate::client::segment(&s.name)) "/log.txt" } { "the whole log" } "." } }
                @if live {
                    p.muted #log-state { "Live: new lines appear as the step writes them." }
                    pre.log #log data-live-log={ "/runs/" (v.id) "/steps/" (crate::client::segment(&s.name)) "/log.txt" } data-from=(bytes.len()) { (String::from_utf8_lossy(&bytes[from..])) }
                } @else {
                    pre.log #log { (String::from_utf8_lossy(&bytes[from..])) }
                }
            }
        }
    };
    Ok(layout::html_response(
        StatusCode::OK,
        layout::page(&session, &s.name, Nav::Runs, body),
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct FromQuery {
    from: Option<usize>,
}

/// A step's log as text, from byte `from` on; `x-log-end` is where the next read starts,
/// `x-step-ended` whether more can come.
pub async fn log_text(
    State(state): State<AppState>,
    session: Session,
    Path((run, step)): Path<(String, String)>,
    query: Result<Query<FromQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let d = state.service.detail(session.principal(), &run).await?;
    let ended = d
        .rows
        .iter()
        .find(|r| r.name == step)
        .is_none_or(|r| ![st::RUNNING, st::QUEUED, st::PENDING].contains(&r.state));
    let bytes = log_of(&state, &session, &d.view.id, &step, None).await?;
    let from = query
        .ok()
        .and_then(|Query(q)| q.from)
        .unwrap_or(0)
        .min(bytes.len());
    let end = bytes.len();
    let mut response = (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        bytes[from..].to_vec(),
    )
        .into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&end.to_string()) {
        h.insert("x-log-end", v);
    }
    h.insert(
        "x-step-ended",
        HeaderValue::from_static(if ended { "true" } else { "false" }),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// Checks the form, then makes the change as the API would (audited, the run driven again
/// when it has work) and goes back to the run's page saying what was done.
async fn change(
    state: &AppState,
    session: &Session,
    form: &CsrfForm,
    what: &str,
    run: &str,
    step: Option<&str>,
) -> Result<Response, PageError> {
    session.check_csrf(&form.csrf)?;
    let who = session.principal();
    let asked = match step {
        Some(s) => format!("run {run} step {s}"),
        None => format!("run {run}"),
    };
    let result: Result<(String, String, bool), ApiError> = async {
        Ok(match (what, step) {
            ("cancel", _) => {
                let id = state.service.cancel(who, run).await?;
                (id, "Cancellation requested.".to_owned(), false)
            }
            ("retry", _) => match state.service.retry(who, run).await? {
                Retried::NothingToRetry { id } => (id, "Nothing to retry.".to_owned(), false),
                Retried::Reopened { id, steps } => {
                    (id, format!("Reopened: {}.", steps.join(", ")), true)
                }
            },
            ("resume", _) => {
                let id = state.service.resume(who, run).await?;
                (id, "Resumed.".to_owned(), true)
            }
            (_, Some(s)) => {
                let done = state.service.preempt(who, run, s).await?;
                (
                    done.id,
                    format!(
                        "Attempt {} of {} preempted: it resumes from its latest checkpoint.",
                        done.attempt, done.step
                    ),
                    false,
                )
            }
            _ => {
                return Err(ApiError::BadRequest(format!("no such change: {what}")));
            }
        })
    }
    .await;
    let target = match &result {
        Ok((id, _, _)) => match step {
            Some(s) => format!("run {id} step {s}"),
            None => format!("run {id}"),
        },
        Err(_) => asked,
    };
    let action = if step.is_some() { "preempt" } else { what };
    crate::server::api::audit(state, &session.caller, action, &target, &result).await;
    match result {
        Ok((id, said, drive)) => {
            if drive {
                state.drivers.drive(&id);
            }
            Ok(Redirect::to(&format!(
                "/runs/{id}?said={}",
                crate::client::segment(&said)
            ))
            .into_response())
        }
        Err(ApiError::Service(e)) => Err(e.into()),
        Err(ApiError::BadRequest(m)) => Err(PageError::new(StatusCode::BAD_REQUEST, m)),
        Err(ApiError::TooLarge(m)) => Err(PageError::new(StatusCode::PAYLOAD_TOO_LARGE, m)),
        Err(ApiError::RateLimited(s) | ApiError::TooManyFailures(s)) => Err(PageError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("try again in {s} s"),
        )),
    }
}

pub async fn cancel(
    State(state): State<AppState>,
    session: Session,
    Path(run): Path<String>,
    form: ChangeForm,
) -> Result<Response, PageError> {
    change(&state, &session, &csrf_field(form), "cancel", &run, None).await
}

pub async fn retry(
    State(state): State<AppState>,
    session: Session,
    Path(run): Path<String>,
    form: ChangeForm,
) -> Result<Response, PageError> {
    change(&state, &session, &csrf_field(form), "retry", &run, None).await
}

pub async fn resume(
    State(state): State<AppState>,
    session: Session,
    Path(run): Path<String>,
    form: ChangeForm,
) -> Result<Response, PageError> {
    change(&state, &session, &csrf_field(form), "resume", &run, None).await
}

pub async fn preempt(
    State(state): State<AppState>,
    session: Session,
    Path((run, step)): Path<(String, String)>,
    form: ChangeForm,
) -> Result<Response, PageError> {
    change(
        &state,
        &session,
        &csrf_field(form),
        "preempt",
        &run,
        Some(&step),
    )
    .await
}
