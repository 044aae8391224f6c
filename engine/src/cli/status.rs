//! `sluice status RUN` and `sluice runs`: the stable JSON shapes of the CLI contract, and
//! their text tables.

use std::io::Write;

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use crate::clock;
use crate::service::view::{AttemptView, RunView, StepView};
use crate::service::{Filter, Listing, Principal, Service};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// A run id, an unambiguous prefix of one, @latest or NAME@latest.
    pub run: String,
    /// Show at most this many steps, in the order they were created, and how many the run
    /// has in each state (for a run of thousands of steps; 0: all).
    #[arg(long, value_name = "N")]
    pub steps_limit: Option<i64>,
    /// Skip this many first steps (the next page of --steps-limit).
    #[arg(long, value_name = "N")]
    pub steps_offset: Option<i64>,
}

impl StatusArgs {
    /// The page of steps asked for, if one was.
    pub fn page(&self) -> Option<(i64, i64)> {
        match (self.steps_limit, self.steps_offset) {
            (None, None) => None,
            (limit, offset) => Some((limit.unwrap_or(0), offset.unwrap_or(0))),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct RunsArgs {
    /// Only runs of this team.
    #[arg(long)]
    pub team: Option<String>,
    /// Only runs in this state (Running, Succeeded, Failed, Cancelled; any case).
    #[arg(long)]
    pub state: Option<String>,
    /// Only runs of this pipeline or sweep (by name).
    #[arg(long)]
    pub pipeline: Option<String>,
    /// Only runs started at or after this: a date (2026-12-01, UTC) or an RFC 3339 time.
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many runs, newest first (0: all of them).
    #[arg(long, default_value_t = 20)]
    pub limit: i64,
}

impl RunsArgs {
    pub fn filter(&self) -> Filter {
        Filter {
            team: self.team.clone(),
            state: self.state.clone(),
            pipeline: self.pipeline.clone(),
            since: self.since.clone(),
            schedule: None,
            limit: self.limit,
            offset: 0,
        }
    }
}

/// How many trials a table lists in full; beyond it, only the best ones.
const TRIALS_SHOWN: usize = 20;

/// How long an attempt ran (a running one: until the view was taken); `-` when its times
/// cannot be read.
fn duration(a: &AttemptView, taken_at_ms: i64) -> String {
    let start = crate::time::parse_ms(&a.started_at);
    let end = match a.ended_at.as_deref() {
        Some(ended) => crate::time::parse_ms(ended),
        None => Ok(taken_at_ms),
    };
    match (start, end) {
        (Ok(s), Ok(e)) => {
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
    let mut origin = String::new();
    if let Some(n) = v.version {
        origin.push_str(&format!(", version {n}"));
    }
    if let Some(s) = &v.schedule {
        origin.push_str(&format!(", schedule {s}"));
    }
    writeln!(
        out,
        "run {} ({}, team {}{origin}): {}",
        v.id, v.name, v.team, v.state
    )?;
    if let Some(reason) = &v.reason {
        writeln!(out, "  {reason}")?;
    }
    if let (Some(total), Some(counts)) = (v.steps_total, &v.step_counts) {
        let by_state: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let shown = v.steps.as_ref().map_or(0, Vec::len);
        writeln!(
            out,
            "  {total} steps ({}), {shown} shown",
            by_state.join(", ")
        )?;
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
        let taken_at_ms = v.taken_at.timestamp_millis();
        let time = s
            .attempts
            .last()
            .map_or_else(|| "-".to_owned(), |a| duration(a, taken_at_ms));
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
    let count = |state: st::StepState| r.trials.iter().filter(|t| t.state == state).count();
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
    let service = Service::new(store.clone(), clock::system());
    let v = match args.page() {
        None => service.status(&Principal::local(), &args.run).await?,
        Some((limit, offset)) => {
            service
                .status_page(&Principal::local(), &args.run, limit, offset)
                .await?
        }
    };
    match format {
        Format::Json => output::json(&v),
        Format::Text => output::text(|out| write_view(out, &v)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

pub async fn runs(store: &Store, args: &RunsArgs, format: Format) -> Result<Outcome, Error> {
    let service = Service::new(store.clone(), clock::system());
    let filter = args.filter();
    let listing = service.list(&Principal::local(), &filter).await?;
    match format {
        Format::Json => output::json(&listing.runs),
        Format::Text => output::text(|out| write_runs(out, &listing, &filter)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// Prints a listing as a table (or why it is empty: no runs at all, or none matching).
pub fn write_runs(out: &mut dyn Write, listing: &Listing, filter: &Filter) -> std::io::Result<()> {
    let Listing {
        runs: views,
        state,
        any,
    } = listing;
    if views.is_empty() {
        if !any {
            return writeln!(out, "no runs yet");
        }
        let mut filters = Vec::new();
        if let Some(t) = &filter.team {
            filters.push(format!("--team {t}"));
        }
        if let Some(s) = state {
            filters.push(format!("--state {s}"));
        }
        if let Some(p) = &filter.pipeline {
            filters.push(format!("--pipeline {p}"));
        }
        if let Some(s) = &filter.since {
            filters.push(format!("--since {s}"));
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
