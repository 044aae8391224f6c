//! The reading operations: `status`, `list` and `logs` (which attempts a run's log is read
//! from; the CLI streams them).

use super::view::{self, RunView};
use super::{Error, Principal, Service};
use crate::run::state::run as rs;
use crate::store::{AttemptRow, StepRow};

/// Which runs `list` returns.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only runs of this team.
    pub team: Option<String>,
    /// Only runs in this state, in any case (`running`, `Failed`).
    pub state: Option<String>,
    /// Only runs of this pipeline (or sweep), by name.
    pub pipeline: Option<String>,
    /// Only runs created at or after this time: RFC 3339, or a date (`2026-12-01`, UTC).
    pub since: Option<String>,
    /// Only runs a schedule of this name started.
    pub schedule: Option<String>,
    /// At most this many runs, newest first; 0 for all of them.
    pub limit: i64,
    /// Skip this many first (the next page: `offset` + `limit`).
    pub offset: i64,
}

/// `--since` as the store writes times: RFC 3339 in UTC, or a date at midnight UTC (past
/// year 9999, the last moment of it: see [`crate::time::LATEST_MS`]).
fn since(given: &str) -> Result<String, Error> {
    let written = |at: chrono::DateTime<chrono::Utc>| {
        let latest = chrono::DateTime::from_timestamp_millis(crate::time::LATEST_MS);
        crate::time::format(latest.map_or(at, |l| at.min(l)))
    };
    if let Ok(at) = crate::time::parse(given) {
        return Ok(written(at));
    }
    if let Ok(day) = chrono::NaiveDate::parse_from_str(given, "%Y-%m-%d")
        && let Some(midnight) = day.and_hms_opt(0, 0, 0)
    {
        return Ok(written(midnight.and_utc()));
    }
    Err(Error::invalid(format!(
        "--since {given}: give a date (2026-12-01) or an RFC 3339 time (2026-12-01T08:00:00Z)"
    )))
}

/// What `list` found.
#[derive(Debug)]
pub struct Listing {
    /// The matching runs, newest first, without their steps.
    pub runs: Vec<RunView>,
    /// The filter's state as the store spells it.
    pub state: Option<&'static str>,
    /// Whether the principal sees any run at all (when none matched: an empty home is not a
    /// filter that matched nothing).
    pub any: bool,
}

/// A run as a page draws it (see [`Service::detail`]).
#[derive(Debug)]
pub struct Detail {
    pub view: RunView,
    pub rows: Vec<StepRow>,
    pub pipeline: Option<crate::spec::model::Pipeline>,
}

/// A step waiting for the cluster's scheduler (see [`Service::waiting_order`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub run: String,
    pub step: String,
    /// Its priority class's value.
    pub priority: i64,
    /// GPUs it asks for, all workers together.
    pub gpus: u64,
    /// Since when it waits (unix ms).
    pub since_ms: i64,
}

/// The states `--state` accepts.
const RUN_STATES: [&str; 4] = [
    rs::RUNNING.as_str(),
    rs::SUCCEEDED.as_str(),
    rs::FAILED.as_str(),
    rs::CANCELLED.as_str(),
];

/// A state as the store spells it (any case), or `Invalid` naming the states.
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
    Err(Error::invalid(format!(
        "--state {given}: a run is {}{hint}",
        RUN_STATES.join(", ")
    )))
}

impl Service {
    /// A run with its steps, attempts and (sweeps) trials. The ends of attempts whose engine
    /// died are collected first, so that what is shown is what happened.
    pub async fn status(&self, who: &Principal, reference: &str) -> Result<RunView, Error> {
        let id = self.resolve(who, reference).await?;
        self.collect_quietly().await;
        let run = self.by_id(who, &id, reference).await?;
        Ok(view::full(&self.store, &run, self.clock.now()).await?)
    }

    /// As [`Service::status`], with a page of the run's steps (`status --steps N`, the API's
    /// `steps_limit`): at most `limit` steps (0: all) after the first `offset`, and the
    /// number of steps in all and in each state. Only the page's rows are read.
    pub async fn status_page(
        &self,
        who: &Principal,
        reference: &str,
        limit: i64,
        offset: i64,
    ) -> Result<RunView, Error> {
        if limit < 0 {
            return Err(Error::invalid(format!(
                "steps limit {limit}: give a number of steps (0 for all)"
            )));
        }
        if offset < 0 {
            return Err(Error::invalid(format!(
                "steps offset {offset}: give a number of steps to skip"
            )));
        }
        let id = self.resolve(who, reference).await?;
        self.collect_quietly().await;
        let run = self.by_id(who, &id, reference).await?;
        Ok(view::page(&self.store, &run, self.clock.now(), limit, offset).await?)
    }

    /// Run `id` as `status` shows it, without collecting other runs' attempts first (the
    /// engine that just drove it reports its end).
    pub async fn view(&self, who: &Principal, id: &str) -> Result<RunView, Error> {
        let run = self.by_id(who, id, id).await?;
        Ok(view::full(&self.store, &run, self.clock.now()).await?)
    }

    /// The runs the principal sees, newest first. A team-bound principal sees its team's
    /// runs only: a filter naming another team matches nothing.
    pub async fn list(&self, who: &Principal, filter: &Filter) -> Result<Listing, Error> {
        let state = filter.state.as_deref().map(run_state).transpose()?;
        if filter.limit < 0 {
            return Err(Error::invalid(format!(
                "--limit {}: give a number of runs (0 for all)",
                filter.limit
            )));
        }
        if filter.offset < 0 {
            return Err(Error::invalid(format!(
                "offset {}: give a number of runs to skip",
                filter.offset
            )));
        }
        let since = filter.since.as_deref().map(since).transpose()?;
        self.collect_quietly().await;
        let limit = if filter.limit == 0 {
            i64::MAX
        } else {
            filter.limit
        };
        if let Some(problem) = filter.team.as_deref().and_then(super::tokens::team_problem) {
            return Err(Error::invalid(problem));
        }
        let own = who.bound_team();
        let team = match (filter.team.as_deref(), own) {
            (Some(asked), Some(own)) if asked != own => {
                let any = !self.store.runs(Some(own), None, 1).await?.is_empty();
                return Ok(Listing {
                    runs: Vec::new(),
                    state,
                    any,
                });
            }
            (asked, own) => asked.or(own),
        };
        let now = self.clock.now();
        let runs: Vec<RunView> = self
            .store
            .runs_matching(&crate::store::RunQuery {
                team,
                state,
                name: filter.pipeline.as_deref(),
                since: since.as_deref(),
                schedule: filter.schedule.as_deref(),
                limit,
                offset: filter.offset,
            })
            .await?
            .iter()
            .map(|r| view::summary(r, now))
            .collect();
        let any = !runs.is_empty() || !self.store.runs(own, None, 1).await?.is_empty();
        Ok(Listing { runs, state, any })
    }

    /// The run whose logs are read, its steps and its attempts; with `step`, that step must
    /// exist (not found, with the nearest name, otherwise).
    pub async fn logs(
        &self,
        who: &Principal,
        reference: &str,
        step: Option<&str>,
    ) -> Result<(String, Vec<StepRow>, Vec<AttemptRow>), Error> {
        let run = self.lookup(who, reference).await?;
        let steps = self.store.steps(&run.id).await?;
        if let Some(step) = step {
            known_step(&run.id, &steps, step)?;
        }
        let attempts = self.store.attempts(&run.id).await?;
        Ok((run.id, steps, attempts))
    }

    /// Run `reference` for a page that draws it: its view, its step rows (each instance with
    /// the step it is an instance of) and its pipeline (None when this version cannot read
    /// it). Another team's run is not found.
    pub async fn detail(&self, who: &Principal, reference: &str) -> Result<Detail, Error> {
        let run = self.lookup(who, reference).await?;
        let rows = self.store.steps(&run.id).await?;
        let attempts = self.store.attempts(&run.id).await?;
        let view = view::of_rows(&run, &rows, &attempts, self.clock.now());
        let pipeline = crate::run::driver::pipeline_of(&run).ok();
        Ok(Detail {
            view,
            rows,
            pipeline,
        })
    }

    /// `team`'s steps waiting for the cluster's scheduler, in the order it takes them within
    /// the team: by priority, then how long they have waited (`fifo`: by how long only), as
    /// `scheduler::admission` orders a team's queue. A principal bound to another team gets
    /// none.
    pub async fn waiting_order(
        &self,
        who: &Principal,
        team: &str,
        fifo: bool,
    ) -> Result<Vec<Waiting>, Error> {
        if !who.sees(team) {
            return Ok(Vec::new());
        }
        let claims = self.store.waiting_of(team).await?;
        let mut out: Vec<(usize, Waiting)> = claims
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let ask: Option<crate::run::cluster::Ask> = serde_json::from_str(&c.job).ok();
                let (priority, gpus) = ask.map_or((0, 0), |a| {
                    (a.priority, a.gpu * u64::from(a.workers.max(1)))
                });
                (
                    i,
                    Waiting {
                        run: c.run_id,
                        step: c.step,
                        priority,
                        gpus,
                        since_ms: c.since,
                    },
                )
            })
            .collect();
        out.sort_by_key(|(i, w)| {
            let p = if fifo { 0 } else { -w.priority };
            (p, w.since_ms, *i)
        });
        Ok(out.into_iter().map(|(_, w)| w).collect())
    }

    /// Who submitted each of `runs` (ids the principal sees): the name of the token (its id
    /// when it has none) of the run's `submit` in the audit record; runs submitted on the
    /// server's host, or started by a schedule, have none.
    pub async fn submitters(
        &self,
        runs: &[String],
    ) -> Result<std::collections::HashMap<String, String>, Error> {
        Ok(self.store.submitters(runs).await?)
    }

    /// Records the ends of attempts whose engine died (`run::reap`); a store that cannot be
    /// written to still shows what it holds. A server's reads skip it: its leader adopts runs
    /// whose engine died within a second, and a scan of every running attempt on each request
    /// would make reads cost what the whole cluster runs.
    pub(super) async fn collect_quietly(&self) {
        if !self.shows_home {
            return;
        }
        if let Err(e) = crate::run::reap::collect(&self.store, None, self.clock.as_ref()).await {
            tracing::info!("cannot collect the attempts of runs whose engine is gone: {e}");
        }
    }
}

/// `NotFound` unless run `id` has a step named `step`, suggesting the nearest name.
pub(super) fn known_step(id: &str, steps: &[StepRow], step: &str) -> Result<(), Error> {
    if steps.iter().any(|s| s.name == step) {
        return Ok(());
    }
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    let hint = crate::spec::diagnostic::nearest(step, names.iter().copied())
        .map(|n| format!(" (did you mean '{n}'?)"))
        .unwrap_or_default();
    Err(Error::NotFound(format!(
        "run {id} has no step '{step}'{hint}"
    )))
}

#[cfg(test)]
mod since_tests {
    /// Past year 9999, `--since` is its last moment: the store compares times as text, and
    /// `+10000-01-01...` sorts before every time it holds (so every run was listed).
    #[test]
    fn a_since_past_year_9999_is_its_last_moment() {
        assert_eq!(
            super::since("+10000-01-01").expect("a date"),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            super::since("2026-12-01").expect("a date"),
            "2026-12-01T00:00:00.000Z"
        );
    }
}
