//! The queue (what the team runs and what waits, with the scheduler's reasons; every team's
//! quota, holdings and borrowing), the schedules (next fires in their time zone, the last
//! with its outcome) and the usage (GPU-hours, cost and waste per team, pool and pipeline,
//! day by day).

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use super::PageError;
use super::layout::{self, Nav, badge, duration, number, time};
use super::session::Session;
use crate::client::segment;
use crate::run::state::{run as rs, step as st};
use crate::server::api::AppState;
use crate::service::Filter;

/// At most this many running runs are read for the queue page.
const MAX_RUNS: i64 = 200;
/// At most this many rows of usage per day and group (90 days of 50 pipelines would weigh
/// megabytes).
const MAX_DAY_ROWS: usize = 400;

/// One step of the queue page.
struct Entry {
    run: String,
    run_name: String,
    created: String,
    step: String,
    state: String,
    reason: Option<String>,
    started: Option<String>,
    gpus: Option<String>,
}

pub async fn queue(State(state): State<AppState>, session: Session) -> Result<Response, PageError> {
    let who = session.principal();
    let running = state
        .service
        .list(
            who,
            &Filter {
                state: Some(rs::RUNNING.into()),
                limit: MAX_RUNS,
                ..Filter::default()
            },
        )
        .await?;
    let mut entries = Vec::new();
    for r in &running.runs {
        let Ok(d) = state.service.detail(who, &r.id).await else {
            continue;
        };
        for s in d.view.steps.as_deref().unwrap_or_default() {
            if ![st::RUNNING, st::QUEUED].iter().any(|x| *x == s.state) {
                continue;
            }
            let last = s.attempts.last();
            entries.push(Entry {
                run: r.id.clone(),
                run_name: r.name.clone(),
                created: r.started_at.clone(),
                step: s.name.clone(),
                state: s.state.clone(),
                reason: s.reason.clone(),
                started: last.map(|a| a.started_at.clone()),
                gpus: last
                    .and_then(|a| a.gpus.as_ref())
                    .map(|g| g.len().to_string()),
            });
        }
    }
    // Oldest run first; then, on a cluster, the waiting steps in the scheduler's order within
    // the team (priority, then how long each has waited), those it does not consider after.
    entries.sort_by(|a, b| a.created.cmp(&b.created).then(a.run.cmp(&b.run)));
    let now = state.service.clock().now();
    let (runs_now, mut waiting): (Vec<&Entry>, Vec<&Entry>) =
        entries.iter().partition(|e| e.state == st::RUNNING);
    let cluster = cluster_spec(&state);
    let mut order: HashMap<(String, String), (usize, i64)> = HashMap::new();
    if let (Some(spec), Some(team)) = (&cluster, session.principal().bound_team()) {
        let fifo = spec.scheduling.policy == "fifo";
        for (i, w) in state
            .service
            .waiting_order(who, team, fifo)
            .await?
            .into_iter()
            .enumerate()
        {
            order.insert((w.run, w.step), (i, w.priority));
        }
        waiting.sort_by_key(|e| {
            order
                .get(&(e.run.clone(), e.step.clone()))
                .map_or(usize::MAX, |(i, _)| *i)
        });
    }
    let ordered = !order.is_empty();
    let priority_of = |e: &Entry| order.get(&(e.run.clone(), e.step.clone())).map(|(_, p)| *p);
    let held = state.service.gpus_held().await.unwrap_or_default();
    let quotas: Vec<(String, Option<u64>)> = cluster
        .as_ref()
        .map(|spec| {
            spec.teams
                .iter()
                .map(|t| (t.name.clone(), t.quota.as_ref().and_then(|q| q.gpu)))
                .collect()
        })
        .unwrap_or_default();
    let mut teams: BTreeMap<String, (Option<u64>, BTreeMap<String, u64>)> = BTreeMap::new();
    for (name, quota) in &quotas {
        teams.entry(name.clone()).or_default().0 = *quota;
    }
    for (team, pool, gpus) in &held {
        *teams
            .entry(team.clone())
            .or_default()
            .1
            .entry(pool.clone())
            .or_default() += gpus;
    }
    let body = html! {
        h1 { "Queue" }
        h2 { "Quotas and holdings (GPUs, every team)" }
        @if teams.is_empty() {
            p.muted { "Nothing runs, and the server has no Cluster file with quotas." }
        } @else {
            table #quotas {
                thead { tr { th { "Team" } th.num { "Quota" } th.num { "Holds" } th { "By pool" } th.num { "Borrowed" } th.num { "Unused quota (lent)" } } }
                tbody {
                    @for (team, (quota, pools)) in &teams {
                        @let holds: u64 = pools.values().sum();
                        tr data-team=(team) {
                            td { (team) }
                            td.num { @match quota { Some(q) => (q), None => "—" } }
                            td.num { (holds) }
                            td { @for (p, g) in pools { (p) ": " (g) " " } }
                            td.num { @if let Some(q) = quota { (holds.saturating_sub(*q)) } }
                            td.num { @if let Some(q) = quota { (q.saturating_sub(holds)) } }
                        }
                    }
                }
            }
        }
        h2 { "Running (" (runs_now.len()) ")" }
        (steps_table("running", &runs_now, now, false, &|_: &Entry| None))
        @if ordered {
            h2 { "Waiting (" (waiting.len()) "), in the order the scheduler takes them" }
            p.muted { "Within the team: higher priority first, then the longest waiting. Teams take turns by fair share. The reason is the scheduler's, as " code { "sluice status" } " gives it." }
        } @else {
            h2 { "Waiting (" (waiting.len()) "), oldest run first" }
            p.muted { "The reason is the scheduler's, as " code { "sluice status" } " gives it." }
        }
        (steps_table("waiting", &waiting, now, true, &priority_of))
        @if running.runs.len() as i64 >= MAX_RUNS { p.muted { "Only the newest " (MAX_RUNS) " running runs are shown." } }
    };
    Ok(layout::html_response(
        StatusCode::OK,
        layout::page(&session, "Queue", Nav::Queue, body),
    ))
}

fn steps_table(
    id: &str,
    entries: &[&Entry],
    now: chrono::DateTime<chrono::Utc>,
    waiting: bool,
    priority: &dyn Fn(&Entry) -> Option<i64>,
) -> maud::Markup {
    html! {
        @if entries.is_empty() { p.muted { "None." } } @else {
            table id=(id) {
                thead { tr { th.num { "#" } th { "Run" } th { "Step" } @if waiting { th.num { "Priority" } th { "Why it waits" } } @else { th.num { "GPUs" } th.num { "For" } } } }
                tbody {
                    @for (i, e) in entries.iter().enumerate() {
                        tr data-step=(e.step) {
                            td.num { (i + 1) }
                            td { a href={ "/runs/" (e.run) } { (e.run_name) } " " span.muted { (e.run.get(..8).unwrap_or(&e.run)) } }
                            td { a href={ "/runs/" (e.run) "/steps/" (segment(&e.step)) } { (e.step) } }
                            @if waiting {
                                td.num { @if let Some(p) = priority(e) { (p) } }
                                td.reason { (e.reason.clone().unwrap_or_default()) }
                            } @else {
                                td.num { (e.gpus.clone().unwrap_or_else(|| "0".into())) }
                                td.num { @if let Some(s) = &e.started { (duration(s, None, now)) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The server's Cluster file, read as submissions read it; None without one (or one that
/// no longer reads: its runs keep the copy they were submitted with).
fn cluster_spec(state: &AppState) -> Option<crate::spec::model::ClusterSpec> {
    let path = state.cluster.as_ref()?;
    let text = std::fs::read_to_string(path).ok()?;
    crate::spec::cluster::load(&path.display().to_string(), text)
        .ok()
        .map(|(_, spec)| spec)
}

pub async fn schedules(
    State(state): State<AppState>,
    session: Session,
) -> Result<Response, PageError> {
    let list = state.service.schedules(session.principal()).await?;
    let body = html! {
        h1 { "Schedules" }
        @if list.is_empty() {
            p.muted { "No schedule. Apply one with " code { "sluice apply -f schedule.yaml" } "." }
        } @else {
            table #schedules {
                thead { tr { th { "Schedule" } th { "Pipeline" } th { "Cron" } th { "Time zone" } th { "Next fire" } th { "Last fire" } th { "Outcome" } } }
                tbody {
                    @for s in &list {
                        tr data-schedule=(s.name) {
                            td { a href={ "/runs?schedule=" (segment(&s.name)) } { (s.name) } @if s.suspend { " " span.badge { "suspended" } } }
                            td { (s.pipeline) }
                            td { code { (s.cron) } }
                            td { (s.timezone) }
                            td { @if let Some(n) = &s.next { (local(n, &s.timezone)) } @else { span.muted { "none" } } }
                            td { @if let Some(l) = &s.last { (local(&l.tick, &s.timezone)) } }
                            td {
                                @if let Some(l) = &s.last {
                                    (badge(&l.outcome))
                                    @if let Some(run) = &l.run { " " a href={ "/runs/" (run) } { "run" } }
                                    @if let Some(r) = &l.reason { " " span.reason { (r) } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::html_response(
        StatusCode::OK,
        layout::page(&session, "Schedules", Nav::Schedules, body),
    ))
}

/// A fire time in its schedule's time zone (`2026-12-05 02:30 PST`), UTC in its tooltip.
fn local(at: &str, zone: &str) -> maud::Markup {
    let tz: Option<chrono_tz::Tz> = zone.parse().ok();
    match (crate::time::parse(at).ok(), tz) {
        (Some(t), Some(tz)) => {
            let shown = t.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string();
            html! { time datetime=(at) title=(at) { (shown) } }
        }
        _ => time(at),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct UsageForm {
    days: Option<u32>,
}

pub async fn usage(
    State(state): State<AppState>,
    session: Session,
    query: Result<Query<UsageForm>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, PageError> {
    let days = query
        .ok()
        .and_then(|Query(q)| q.days)
        .unwrap_or(7)
        .clamp(1, 90);
    let who = session.principal();
    let today = state.service.clock().now().date_naive();
    let first = today - chrono::Days::new(u64::from(days) - 1);
    // Day by day (past days are kept once read: `service::usage::days`), and the window
    // as their sum.
    let days_list: Vec<chrono::NaiveDate> = (0..days)
        .map(|k| first + chrono::Days::new(u64::from(k)))
        .collect();
    let daily = state.service.usage_by_day(who, &days_list).await?;
    let whole = crate::service::usage::days::merge(&daily);
    let per_day: Vec<(chrono::NaiveDate, crate::service::usage::Figures)> = days_list
        .iter()
        .copied()
        .zip(daily.iter().map(|u| u.total.clone()))
        .collect();
    // Newest day first.
    let by_day_group: Vec<(chrono::NaiveDate, &crate::service::usage::UsageGroup)> = days_list
        .iter()
        .zip(&daily)
        .rev()
        .flat_map(|(d, u)| u.rows.iter().map(move |r| (*d, r)))
        .collect();
    let peak = per_day
        .iter()
        .map(|(_, f)| f.gpu_hours)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let body = html! {
        h1 { "Usage" }
        form.filters method="get" action="/usage" {
            label { "Days" select name="days" { @for d in [1u32, 7, 30, 90] { option value=(d) selected[d == days] { (d) } } } }
            button type="submit" { "Show" }
        }
        h2 { "Day by day (UTC)" }
        table #per-day {
            thead { tr { th { "Day" } th.num { "GPU-hours" } th {} th.num { "CPU-hours" } th.num { "Cost" } th.num { "Wasted GPU-hours" } } }
            tbody {
                @for (day, f) in &per_day {
                    tr {
                        td { (day) }
                        td.num { (number(f.gpu_hours)) }
                        // A bar as SVG: its width an attribute (the policy allows no `style=`).
                        td { svg.bar width="200" height="11" aria-hidden="true" { rect height="11" width=(format!("{:.0}", 200.0 * f.gpu_hours / peak)) {} } }
                        td.num { (number(f.cpu_hours)) }
                        td.num { (format!("{:.2}", f.cost)) }
                        td.num { (number(f.wasted_gpu_hours)) }
                    }
                }
            }
        }
        h2 { "Day by day, by team, pool and pipeline" }
        table #per-day-group {
            thead { tr { th { "Day" } th { "Team" } th { "Pool" } th { "Pipeline" } th.num { "GPU-hours" } th.num { "CPU-hours" } th.num { "Cost" } th.num { "Wasted GPU-hours" } } }
            tbody {
                @for (day, r) in by_day_group.iter().take(MAX_DAY_ROWS) {
                        tr { td { (day) } (group_cells(r)) }
                }
            }
        }
        @if by_day_group.len() > MAX_DAY_ROWS {
            p.muted { "The newest " (MAX_DAY_ROWS) " rows of " (by_day_group.len()) "; " code { "sluice usage --since DAY --until DAY --by team,pool,pipeline" } " gives any day." }
        }
        h2 { "By team, pool and pipeline, the last " (days) " day(s)" }
        table #usage {
            thead { tr { th { "Team" } th { "Pool" } th { "Pipeline" } th.num { "GPU-hours" } th.num { "CPU-hours" } th.num { "Cost" } th.num { "Wasted GPU-hours" } } }
            tbody {
                @for r in &whole.rows {
                    tr { (group_cells(r)) }
                }
                tr {
                    th colspan="3" { "Total" }
                    th.num { (number(whole.total.gpu_hours)) }
                    th.num { (number(whole.total.cpu_hours)) }
                    th.num { (format!("{:.2}", whole.total.cost)) }
                    th.num { (number(whole.total.wasted_gpu_hours)) }
                }
            }
        }
    };
    Ok(layout::html_response(
        StatusCode::OK,
        layout::page(&session, "Usage", Nav::Usage, body),
    ))
}

/// A usage group's cells: its team, pool and pipeline, then its figures.
fn group_cells(r: &crate::service::usage::UsageGroup) -> maud::Markup {
    html! {
        td { (r.team.clone().unwrap_or_default()) }
        td { (r.pool.clone().unwrap_or_default()) }
        td { (r.pipeline.clone().unwrap_or_default()) }
        td.num { (number(r.figures.gpu_hours)) }
        td.num { (number(r.figures.cpu_hours)) }
        td.num { (format!("{:.2}", r.figures.cost)) }
        td.num { (number(r.figures.wasted_gpu_hours)) }
    }
}
