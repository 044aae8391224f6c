//! The shapes of a run as `sluice status --output json` and `sluice runs --output json` print
//! them (pinned by the CLI contract; the server's API answers with the same), built from the
//! store's rows.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::run::state::{attempt, run as rs, step as st};
use crate::scheduler::NodeRef;
use crate::store::{AttemptRow, RunRow, StepRow, Store};

/// A running run's engine: who holds its lease, and whether it still runs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct EngineView {
    pub holder: Option<String>,
    pub alive: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunView {
    pub id: String,
    pub name: String,
    pub team: String,
    pub state: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The version of the applied pipeline it ran (`sluice submit NAME`, a schedule).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// The schedule that started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Running runs: the engine driving it, and whether it is alive (a run whose engine died
    /// stays Running until `sluice resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepView>>,
    /// With a page of the steps asked for (`status --steps N`, `steps_limit`): how many steps
    /// the run has in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps_total: Option<i64>,
    /// With a page of the steps asked for: how many steps are in each state (states with
    /// none left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_counts: Option<BTreeMap<String, i64>>,
    /// Sweeps: the best trial and every trial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<crate::run::driver::Best>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<crate::run::driver::TrialReport>>,
    #[serde(skip)]
    pub sweep: Option<crate::run::driver::Report>,
    /// When the view was taken (by the service's clock): how long a running attempt has run
    /// is measured to it.
    #[serde(skip)]
    pub taken_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct StepView {
    pub name: String,
    pub state: String,
    pub reason: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    pub attempts: Vec<AttemptView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub number: i64,
    pub state: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub started_at: String,
    pub ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The last value of each metric this attempt reported.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, f64>,
    /// Cluster mode: the node of each worker: an index into the Cluster's declared nodes (pool
    /// by pool), or `{pool, node}` for a node read from Kubernetes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<NodeRef>>,
    /// The GPU indices it held, worker after worker (on its node, in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<u32>>,
}

/// A run without its steps, as `runs` lists it.
pub fn summary(run: &RunRow, taken_at: DateTime<Utc>) -> RunView {
    RunView {
        id: run.id.clone(),
        name: run.name.clone(),
        team: run.team.clone(),
        state: run.state.into(),
        started_at: run.created_at.clone(),
        ended_at: run.ended_at.clone(),
        reason: run.reason.clone(),
        version: run.applied_version,
        schedule: run.schedule.clone(),
        engine: (run.state == rs::RUNNING).then(|| EngineView {
            holder: run.lease_owner.clone(),
            alive: crate::run::engine::gone(run).is_none(),
        }),
        steps: None,
        steps_total: None,
        step_counts: None,
        best: None,
        trials: None,
        sweep: None,
        taken_at,
    }
}

/// A run with its steps and attempts, as `status --output json` prints it.
pub async fn full(
    store: &Store,
    run: &RunRow,
    taken_at: DateTime<Utc>,
) -> Result<RunView, crate::store::Error> {
    let id = run.id.as_str();
    let steps = store.steps(id).await?;
    let attempts = store.attempts(id).await?;
    Ok(of_rows(run, &steps, &attempts, taken_at))
}

/// A run with its steps and attempts, from rows already read.
pub fn of_rows(
    run: &RunRow,
    steps: &[StepRow],
    attempts: &[AttemptRow],
    taken_at: DateTime<Utc>,
) -> RunView {
    let mut v = summary(run, taken_at);
    v.steps = Some(step_views(steps, attempts));
    add_report(&mut v, run, steps);
    v
}

/// The steps' views, each with its attempts.
fn step_views(steps: &[StepRow], attempts: &[AttemptRow]) -> Vec<StepView> {
    let mut by_step: BTreeMap<&str, Vec<AttemptView>> = BTreeMap::new();
    for a in attempts {
        by_step
            .entry(a.step.as_str())
            .or_default()
            .push(attempt_view(a));
    }
    steps
        .iter()
        .map(|s| StepView {
            name: s.name.clone(),
            state: s.state.into(),
            reason: collected_reason(s, attempts).or_else(|| s.reason.clone()),
            metrics: s
                .metrics
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok())
                .unwrap_or_default(),
            attempts: by_step.remove(s.name.as_str()).unwrap_or_default(),
        })
        .collect()
}

/// A sweep's best trial and trials, from all of its run's steps.
fn add_report(v: &mut RunView, run: &RunRow, steps: &[StepRow]) {
    if let Ok(pipeline) = crate::run::driver::pipeline_of(run)
        && let Some(r) = crate::run::driver::report(&pipeline, steps)
    {
        v.best = r.best.clone();
        v.trials = Some(r.trials.clone());
        v.sweep = Some(r);
    }
}

/// Run `run` with a page of its steps: at most `limit` (0: all) after the first `offset`, in
/// the order they were created, with their attempts, the number of steps in all and in each
/// state. Only the page's steps and attempts are read (a sweep's report still reads every
/// trial).
pub async fn page(
    store: &Store,
    run: &RunRow,
    taken_at: DateTime<Utc>,
    limit: i64,
    offset: i64,
) -> Result<RunView, crate::store::Error> {
    let id = run.id.as_str();
    let limit = if limit == 0 { i64::MAX } else { limit };
    let steps = store.steps_page(id, limit, offset).await?;
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    let attempts = store.attempts_of(id, &names).await?;
    let mut v = summary(run, taken_at);
    v.steps = Some(step_views(&steps, &attempts));
    if crate::run::driver::pipeline_of(run).is_ok_and(|p| p.from_sweep) {
        add_report(&mut v, run, &store.steps(id).await?);
    }
    let counts = store.step_counts(id).await?;
    v.steps_total = Some(counts.iter().map(|(_, n)| n).sum());
    v.step_counts = Some(
        counts
            .into_iter()
            .map(|(state, n)| (state.as_str().to_owned(), n))
            .collect(),
    );
    Ok(v)
}

fn attempt_view(a: &AttemptRow) -> AttemptView {
    AttemptView {
        number: a.number,
        state: a.state.into(),
        exit_code: a.exit_code,
        signal: a.signal,
        started_at: a.started_at.clone(),
        ended_at: a.ended_at.clone(),
        reason: a.reason.clone(),
        metrics: a
            .metrics
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok())
            .unwrap_or_default(),
        nodes: a
            .nodes
            .as_deref()
            .and_then(|n| serde_json::from_str(n).ok()),
        gpus: a
            .gpus
            .as_deref()
            .map(|g| g.split(',').filter_map(|x| x.parse().ok()).collect()),
    }
}

/// A running step whose attempt ended while no engine drove the run (its end was collected by
/// another `sluice`): what follows is decided when the run is resumed.
fn collected_reason(s: &StepRow, attempts: &[AttemptRow]) -> Option<String> {
    if s.state != st::RUNNING {
        return None;
    }
    let a = attempts
        .iter()
        .filter(|a| a.step == s.name)
        .max_by_key(|a| a.number)?;
    (a.state != attempt::RUNNING).then(|| {
        format!(
            "attempt {} ended ({}) while no engine drove the run; `sluice resume` carries on from it",
            a.number, a.state
        )
    })
}
