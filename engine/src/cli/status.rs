//! `sluice status RUN` and `sluice runs`: the stable JSON shapes of the CLI contract, and
//! their text tables.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use crate::run::state::run as rs;
use crate::store::{RunRow, Store};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// A run id, an unambiguous prefix of one, @latest or NAME@latest.
    pub run: String,
}

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// Only runs of this team.
    #[arg(long)]
    pub team: Option<String>,
    /// Only runs in this state (Running, Succeeded, Failed, Cancelled; any case).
    #[arg(long)]
    pub state: Option<String>,
    /// At most this many runs, newest first (0: all of them).
    #[arg(long, default_value_t = 20)]
    pub limit: i64,
}

/// A running run's engine: who holds its lease, and whether it still runs.
#[derive(Debug, Serialize)]
pub struct EngineView {
    pub holder: Option<String>,
    pub alive: bool,
}

#[derive(Debug, Serialize)]
pub struct RunView {
    pub id: String,
    pub name: String,
    pub team: String,
    pub state: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Running runs: the engine driving it, and whether it is alive (a run whose engine died
    /// stays Running until `sluice resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepView>>,
    /// Sweeps: the best trial and every trial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<crate::run::driver::Best>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<crate::run::driver::TrialReport>>,
    #[serde(skip)]
    pub sweep: Option<crate::run::driver::Report>,
}

#[derive(Debug, Serialize)]
pub struct StepView {
    pub name: String,
    pub state: String,
    pub reason: Option<String>,
    pub metrics: BTreeMap<String, f64>,
    pub attempts: Vec<AttemptView>,
}

#[derive(Debug, Serialize)]
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
    /// Cluster mode: the node (index into the Cluster's nodes, pool by pool) of each worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<usize>>,
    /// The GPU indices it held, worker after worker (on its node, in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<u32>>,
}

fn summary(run: &RunRow) -> RunView {
    RunView {
        id: run.id.clone(),
        name: run.name.clone(),
        team: run.team.clone(),
        state: run.state.clone(),
        started_at: run.created_at.clone(),
        ended_at: run.ended_at.clone(),
        reason: run.reason.clone(),
        engine: (run.state == rs::RUNNING).then(|| EngineView {
            holder: run.lease_owner.clone(),
            alive: crate::run::engine::gone(run).is_none(),
        }),
        steps: None,
        best: None,
        trials: None,
        sweep: None,
    }
}

/// A run with its steps and attempts, as `status --output json` prints it.
pub async fn view(store: &Store, id: &str) -> Result<RunView, crate::store::Error> {
    let run = store.run(id).await?;
    let steps = store.steps(id).await?;
    let attempts = store.attempts(id).await?;
    let mut by_step: BTreeMap<&str, Vec<AttemptView>> = BTreeMap::new();
    for a in &attempts {
        by_step
            .entry(a.step.as_str())
            .or_default()
            .push(AttemptView {
                number: a.number,
                state: a.state.clone(),
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
            });
    }
    let mut v = summary(&run);
    v.steps = Some(
        steps
            .iter()
            .map(|s| StepView {
                name: s.name.clone(),
                state: s.state.clone(),
                reason: collected_reason(s, &attempts).or_else(|| s.reason.clone()),
                metrics: s
                    .metrics
                    .as_deref()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or_default(),
                attempts: by_step.remove(s.name.as_str()).unwrap_or_default(),
            })
            .collect(),
    );
    if let Ok(pipeline) = crate::run::driver::pipeline_of(&run)
        && let Some(r) = crate::run::driver::report(&pipeline, &steps)
    {
        v.best = r.best.clone();
        v.trials = Some(r.trials.clone());
        v.sweep = Some(r);
    }
    Ok(v)
}

/// A running step whose attempt ended while no engine drove the run (its end was collected by
/// another `sluice`): what follows is decided when the run is resumed.
fn collected_reason(
    s: &crate::store::StepRow,
    attempts: &[crate::store::AttemptRow],
) -> Option<String> {
    if s.state != crate::run::state::step::RUNNING {
        return None;
    }
    let a = attempts
        .iter()
        .filter(|a| a.step == s.name)
        .max_by_key(|a| a.number)?;
    (a.state != crate::run::state::attempt::RUNNING).then(|| {
        format!(
            "attempt {} ended ({}) while no engine drove the run; `sluice resume` carries on from it",
            a.number, a.state
        )
    })
}

/// How many trials a table lists in full; beyond it, only the best ones.
const TRIALS_SHOWN: usize = 20;

fn duration(a: &AttemptView) -> String {
    let start = crate::time::parse_rfc3339(&a.started_at);
    let end = a
        .ended_at
        .as_deref()
        .and_then(crate::time::parse_rfc3339)
        .or_else(|| Some(crate::time::now_ms()));
    match (start, end) {
        (Some(s), Some(e)) => {
            let ms = (e - s).max(0);
            if ms < 10_000 {
                format!("{:.1}s", ms as f64 / 1000.0)
            } else {
                crate::spec::units::format_duration(std::time::Duration::from_secs(
                    (ms / 1000) as u64,
                ))
            }
        }
        _ => "-".into(),
    }
}

/// Prints a run's steps as a table.
pub fn write_view(out: &mut dyn Write, v: &RunView) -> std::io::Result<()> {
    writeln!(
        out,
        "run {} ({}, team {}): {}",
        v.id, v.name, v.team, v.state
    )?;
    if let Some(reason) = &v.reason {
        writeln!(out, "  {reason}")?;
    }
    if let Some(e) = v.engine.as_ref().filter(|e| !e.alive) {
        let whose = match &e.holder {
            Some(h) => format!("its engine {h} is gone"),
            None => "no engine drives it".to_owned(),
        };
        writeln!(
            out,
            "  {whose}: `sluice resume {}` continues it (steps still running are reattached, ended ones collected)",
            v.id
        )?;
    }
    let Some(steps) = &v.steps else {
        return Ok(());
    };
    // A long sweep's trials are summed up, then its best trials are listed.
    let hidden: std::collections::HashSet<&str> = match &v.sweep {
        Some(r) if r.trials.len() > TRIALS_SHOWN => {
            r.trials.iter().map(|t| t.step.as_str()).collect()
        }
        _ => std::collections::HashSet::new(),
    };
    let steps: Vec<&StepView> = steps
        .iter()
        .filter(|s| !hidden.contains(s.name.as_str()))
        .collect();
    let width = steps.iter().map(|s| s.name.len()).max().unwrap_or(4).max(4);
    writeln!(
        out,
        "{:width$}  {:9}  {:>8}  {:>8}  REASON / METRICS",
        "STEP", "STATE", "ATTEMPTS", "TIME"
    )?;
    for s in steps {
        let time = s.attempts.last().map_or_else(|| "-".to_owned(), duration);
        let mut detail = s.reason.clone().unwrap_or_default();
        if !s.metrics.is_empty() {
            let m: Vec<String> = s.metrics.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if !detail.is_empty() {
                detail.push_str("  ");
            }
            detail.push_str(&m.join(" "));
        }
        writeln!(
            out,
            "{:width$}  {:9}  {:>8}  {:>8}  {detail}",
            s.name,
            s.state,
            s.attempts.len(),
            time
        )?;
    }
    if let Some(r) = &v.sweep {
        write_trials(out, r, hidden.len())?;
    }
    Ok(())
}

/// The best trials of a sweep, best first.
fn write_trials(
    out: &mut dyn Write,
    r: &crate::run::driver::Report,
    hidden: usize,
) -> std::io::Result<()> {
    let count = |state: &str| r.trials.iter().filter(|t| t.state == state).count();
    use crate::run::state::step as st;
    writeln!(out)?;
    writeln!(
        out,
        "{} trial(s): {} succeeded, {} failed, {} stopped{}",
        r.trials.len(),
        count(st::SUCCEEDED),
        count(st::FAILED),
        count(st::STOPPED),
        if hidden > 0 {
            " (the best are listed)"
        } else {
            ""
        }
    )?;
    if r.top.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{:>6}  {:9}  {:>12}  PARAMS",
        "TRIAL",
        "STATE",
        r.metric.to_uppercase()
    )?;
    for t in &r.top {
        let params = match &t.params {
            serde_json::Value::Object(m) => m
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{k}={s}"),
                    other => format!("{k}={other}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            other => other.to_string(),
        };
        let value = t.value.map_or_else(|| "-".to_owned(), |v| format!("{v}"));
        writeln!(
            out,
            "{:>6}  {:9}  {:>12}  {params}",
            t.trial, t.state, value
        )?;
    }
    Ok(())
}

pub async fn status(store: &Store, args: &StatusArgs, format: Format) -> Result<Outcome, Error> {
    let id = store.resolve(&args.run).await?;
    collect_quietly(store).await;
    let v = view(store, &id).await?;
    match format {
        Format::Json => output::json(&v),
        Format::Text => output::text(|out| write_view(out, &v)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// Records the ends of attempts whose engine died (`run::reap`), so that what is shown is
/// what happened; a store that cannot be written to still shows what it holds.
async fn collect_quietly(store: &Store) {
    if let Err(e) = crate::run::reap::collect(store, None).await {
        tracing::info!("cannot collect the attempts of runs whose engine is gone: {e}");
    }
}

const RUN_STATES: [&str; 4] = [rs::RUNNING, rs::SUCCEEDED, rs::FAILED, rs::CANCELLED];

/// A `--state` as the store spells it (any case), or a usage error naming the states.
fn run_state(given: &str) -> Result<&'static str, Error> {
    if let Some(s) = RUN_STATES.iter().find(|s| s.eq_ignore_ascii_case(given)) {
        return Ok(s);
    }
    let hint = crate::spec::diagnostic::nearest(
        &given.to_ascii_lowercase(),
        ["running", "succeeded", "failed", "cancelled"],
    )
    .and_then(|n| RUN_STATES.iter().find(|s| s.eq_ignore_ascii_case(n)))
    .map(|n| format!(" (did you mean '{n}'?)"))
    .unwrap_or_default();
    Err(Error::Usage(format!(
        "--state {given}: a run is {}{hint}",
        RUN_STATES.join(", ")
    )))
}

pub async fn runs(store: &Store, args: &RunsArgs, format: Format) -> Result<Outcome, Error> {
    let state = args.state.as_deref().map(run_state).transpose()?;
    if args.limit < 0 {
        return Err(Error::Usage(format!(
            "--limit {}: give a number of runs (0 for all)",
            args.limit
        )));
    }
    collect_quietly(store).await;
    let limit = if args.limit == 0 {
        i64::MAX
    } else {
        args.limit
    };
    let runs = store.runs(args.team.as_deref(), state, limit).await?;
    let views: Vec<RunView> = runs.iter().map(summary).collect();
    // Nothing matched: say whether there are runs at all, so that a filter is not taken for
    // an empty home.
    let all = if views.is_empty() {
        store.runs(None, None, 1).await?.len()
    } else {
        views.len()
    };
    match format {
        Format::Json => output::json(&views),
        Format::Text => output::text(|out| {
            if views.is_empty() {
                if all == 0 {
                    return writeln!(out, "no runs yet");
                }
                let mut filters = Vec::new();
                if let Some(t) = &args.team {
                    filters.push(format!("--team {t}"));
                }
                if let Some(s) = state {
                    filters.push(format!("--state {s}"));
                }
                return writeln!(
                    out,
                    "no runs match {}; `sluice runs` lists every run",
                    filters.join(" ")
                );
            }
            let state_of = |v: &RunView| match &v.engine {
                Some(e) if !e.alive => format!("{} (engine gone)", v.state),
                _ => v.state.clone(),
            };
            let states: Vec<String> = views.iter().map(state_of).collect();
            let name_w = views.iter().map(|v| v.name.len()).max().unwrap_or(0).max(4);
            let team_w = views.iter().map(|v| v.team.len()).max().unwrap_or(0).max(4);
            let state_w = states.iter().map(String::len).max().unwrap_or(0).max(5);
            writeln!(
                out,
                "{:12}  {:name_w$}  {:team_w$}  {:state_w$}  STARTED",
                "ID", "NAME", "TEAM", "STATE"
            )?;
            for (v, state) in views.iter().zip(&states) {
                writeln!(
                    out,
                    "{:12}  {:name_w$}  {:team_w$}  {:state_w$}  {}",
                    v.id, v.name, v.team, state, v.started_at
                )?;
            }
            if views
                .iter()
                .any(|v| v.engine.as_ref().is_some_and(|e| !e.alive))
            {
                writeln!(
                    out,
                    "(engine gone: its engine died; `sluice resume RUN` continues it)"
                )?;
            }
            Ok(())
        }),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// `sluice runs` where there is no home: nothing is created.
pub fn no_runs(home: &super::home::Home, format: Format) -> Result<Outcome, Error> {
    match format {
        Format::Json => output::json(&Vec::<RunView>::new()),
        Format::Text => output::text(|out| writeln!(out, "no runs yet ({})", home.missing())),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}
