//! `usage`: GPU-hours, CPU-hours, cost and wasted GPU-hours per team, pool or pipeline, from
//! the recorded attempts and the prices of the pools they ran on (`spec/server.md`, "Usage
//! and cost").
//!
//! An attempt's pool is read from what cluster mode records with it: each worker's node (an
//! index into the nodes of the Cluster file the run kept, in the file's order), whose pool
//! gives the name and `price`. Without a Cluster an attempt ran on this machine, the pool
//! `local`, which has no price. The arithmetic is [`account`]'s, pure and unit-tested; this
//! file gathers its inputs.

mod account;
pub mod days;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use account::{Figures, Key, Price, Row as UsageGroup, Share, Usage, Window, account, lost_ms};

use super::{Error, Principal, Service};
use crate::run::cluster::Ask;
use crate::run::state::attempt as at;
use crate::scheduler::NodeRef;
use crate::scheduler::config::Config;
use crate::spec::model::{Action, Pipeline};
use crate::store::{RunRow, UsageRow};

/// The pool of attempts run without a Cluster, on this machine.
pub const LOCAL_POOL: &str = "local";

/// What `usage` is asked: `--team`, `--since`, `--until` as given (a date, `2026-12-01`, UTC;
/// or an RFC 3339 time), and the keys of `--by` ([`parse_by`]; empty: `team`).
#[derive(Clone, Debug, Default)]
pub struct UsageQuery {
    pub team: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub by: Vec<Key>,
}

/// The keys of `--by` (`team,pool,pipeline`, any of them, in any order; each counts once),
/// or `Invalid` naming the bad one.
pub fn parse_by(text: &str) -> Result<Vec<Key>, Error> {
    let mut keys = Vec::new();
    for word in text.split(',').map(str::trim) {
        let Some(key) = Key::ALL.into_iter().find(|k| k.as_str() == word) else {
            let hint = crate::spec::diagnostic::nearest(word, Key::ALL.map(Key::as_str))
                .map(|n| format!(" (did you mean '{n}'?)"))
                .unwrap_or_default();
            return Err(Error::invalid(format!(
                "--by {text}: '{word}' is not a key; group by team, pool or pipeline, comma-separated{hint}"
            )));
        };
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// A `--since` or `--until` bound in unix ms: an RFC 3339 time, or a date (UTC), which
/// `--since` takes from its first moment and `--until` to its last (the day is included).
fn bound(flag: &str, given: &str, end_of_day: bool) -> Result<i64, Error> {
    if let Ok(ms) = crate::time::parse_ms(given) {
        return Ok(ms.min(crate::time::LATEST_MS));
    }
    let day = chrono::NaiveDate::parse_from_str(given, "%Y-%m-%d").map_err(|_| {
        Error::invalid(format!(
            "{flag} {given}: give a date (2026-12-01, UTC) or an RFC 3339 time (2026-12-01T09:00:00Z)"
        ))
    })?;
    let day = if end_of_day {
        day.succ_opt().unwrap_or(day)
    } else {
        day
    };
    Ok(day
        .and_hms_opt(0, 0, 0)
        .map_or(0, |t| t.and_utc().timestamp_millis())
        .min(crate::time::LATEST_MS))
}

/// The window `query.since` and `query.until` give, or `Invalid` (a bad date, or an empty
/// window).
pub fn window(query: &UsageQuery) -> Result<Window, Error> {
    let window = Window {
        since: query
            .since
            .as_deref()
            .map(|s| bound("--since", s, false))
            .transpose()?,
        until: query
            .until
            .as_deref()
            .map(|u| bound("--until", u, true))
            .transpose()?,
    };
    if let (Some(since), Some(until)) = (window.since, window.until)
        && since >= until
    {
        return Err(Error::invalid(format!(
            "--since {} is not before --until {}",
            query.since.as_deref().unwrap_or_default(),
            query.until.as_deref().unwrap_or_default()
        )));
    }
    Ok(window)
}

/// What usage needs of a run beyond its attempt rows: its pools and each step's checkpoint
/// interval, read once per run.
#[derive(Default)]
struct Runs {
    rows: HashMap<String, RunRow>,
    /// By the stored Cluster's text: the pool of each node, and each pool's name and price.
    pools: HashMap<String, Arc<Pools>>,
    /// By run id, then step of the file: its checkpoint interval.
    checkpoints: HashMap<String, HashMap<String, Option<Duration>>>,
}

struct Pools {
    /// Node index to pool index.
    node_pool: Vec<usize>,
    pools: Vec<(String, Price)>,
}

impl Pools {
    fn of(config: &Config) -> Pools {
        Pools {
            node_pool: config.cluster.nodes.iter().map(|n| n.pool).collect(),
            pools: config
                .cluster
                .pools
                .iter()
                .zip(&config.prices)
                .zip(&config.extended_prices)
                .map(|((p, &(gpu_hour, cpu_hour)), extended_hour)| {
                    let price = Price {
                        gpu_hour,
                        cpu_hour,
                        extended_hour: extended_hour.clone(),
                    };
                    (p.name.clone(), price)
                })
                .collect(),
        }
    }
}

/// Stored data usage cannot read: the row named, nothing guessed.
fn corrupt(message: String) -> Error {
    crate::store::Error::Corrupt(message).into()
}

impl Service {
    /// GPU-hours, CPU-hours, cost and wasted GPU-hours of the attempts that held resources in
    /// the window, grouped by `query.by` (default: team). A team-bound principal (member,
    /// viewer) sees its own team's usage only: `--team` naming another matches nothing.
    /// Running attempts count up to now (the service's clock); attempts of dead engines are
    /// collected first, so that they do not count on. Runs removed by `delete` or `gc` are
    /// gone from it with their attempts.
    pub async fn usage(&self, who: &Principal, query: &UsageQuery) -> Result<Usage, Error> {
        let window = window(query)?;
        let mut all = self.usage_within(who, query, &[window]).await?;
        Ok(all.pop().unwrap_or_default())
    }

    /// `usage` of `query`, cut into each of `parts` (windows inside the query's, such as its
    /// days): the attempts are read and priced once, then accounted per part.
    pub async fn usage_within(
        &self,
        who: &Principal,
        query: &UsageQuery,
        parts: &[Window],
    ) -> Result<Vec<Usage>, Error> {
        let window = window(query)?;
        let by = if query.by.is_empty() {
            vec![Key::Team]
        } else {
            query.by.clone()
        };
        if let Some(problem) = query.team.as_deref().and_then(super::tokens::team_problem) {
            return Err(Error::invalid(problem));
        }
        let team = match (query.team.as_deref(), who.bound_team()) {
            (Some(asked), Some(own)) if asked != own => {
                return Err(Error::Forbidden(format!(
                    "{who} sees its own team's usage only: ask for --team {own}, or none"
                )));
            }
            (asked, own) => asked.or(own),
        };
        self.collect_quietly().await;
        let text = |ms: Option<i64>| {
            ms.and_then(chrono::DateTime::from_timestamp_millis)
                .map(crate::time::format)
        };
        let (since, until) = (text(window.since), text(window.until));
        let attempts = self
            .store
            .usage(team, since.as_deref(), until.as_deref())
            .await?;
        let now = self.clock.now_ms();
        let mut runs = Runs::default();
        let mut shares = Vec::with_capacity(attempts.len());
        for a in &attempts {
            self.shares(a, now, &mut runs, &mut shares).await?;
        }
        Ok(parts
            .iter()
            .map(|part| {
                let inside = Window {
                    since: match (part.since, window.since) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    },
                    until: match (part.until, window.until) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                };
                account(&shares, inside, &by)
            })
            .collect())
    }

    /// The GPUs running attempts hold now, by team and pool (`/metrics`), with the same
    /// reading of each worker's pool as usage.
    pub async fn gpus_held(&self) -> Result<Vec<(String, String, u64)>, Error> {
        let now = self.clock.now_ms();
        let attempts = self.store.usage_running().await?;
        let mut runs = Runs::default();
        let mut shares = Vec::new();
        for a in attempts.iter().filter(|a| a.state == at::RUNNING) {
            self.shares(a, now, &mut runs, &mut shares).await?;
        }
        let mut held: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for s in shares {
            *held.entry((s.team, s.pool)).or_default() += s.gpus;
        }
        Ok(held.into_iter().map(|((t, p), g)| (t, p, g)).collect())
    }

    /// Attempt `a`'s shares, one per pool its workers ran on.
    async fn shares(
        &self,
        a: &UsageRow,
        now: i64,
        runs: &mut Runs,
        out: &mut Vec<Share>,
    ) -> Result<(), Error> {
        let what = || {
            format!(
                "attempt {} of step {} of run {}",
                a.number, a.step, a.run_id
            )
        };
        let time =
            |t: &str| crate::time::parse_ms(t).map_err(|e| corrupt(format!("{}: {e}", what())));
        let start_ms = time(&a.started_at)?;
        let end_ms = match &a.ended_at {
            Some(t) if a.state != at::RUNNING => time(t)?,
            _ => now,
        }
        .max(start_ms);
        let lost_ms = if a.state == at::PREEMPTED || a.state == at::LOST {
            let every = self.checkpoint(a, runs).await?;
            lost_ms(&a.state, end_ms - start_ms, every)
        } else {
            0
        };
        let ask: Option<Ask> =
            match &a.job {
                Some(job) => Some(serde_json::from_str(job).map_err(|e| {
                    corrupt(format!("{}: its request cannot be read ({e})", what()))
                })?),
                None => None,
            };
        let share = |pool: &str, price: Price, gpus: u64, millicpu: u64, workers: u64| Share {
            team: a.team.clone(),
            pool: pool.to_owned(),
            pipeline: a.pipeline.clone(),
            gpus,
            millicpu,
            extended: ask
                .iter()
                .flat_map(|a| &a.extended)
                .map(|(name, n)| (name.clone(), n * workers))
                .collect(),
            price,
            start_ms,
            end_ms,
            lost_ms,
        };
        let (Some(ask), Some(nodes)) = (&ask, &a.nodes) else {
            let gpus = a
                .gpus
                .as_deref()
                .unwrap_or("")
                .split(',')
                .filter(|g| !g.trim().is_empty())
                .count() as u64;
            let millicpu = u64::try_from(a.millicpu).unwrap_or(0);
            out.push(share(LOCAL_POOL, Price::default(), gpus, millicpu, 1));
            return Ok(());
        };
        let nodes: Vec<NodeRef> = serde_json::from_str(nodes)
            .map_err(|e| corrupt(format!("{}: its nodes cannot be read ({e})", what())))?;
        let pools = self.pools(&a.run_id, runs).await?;
        // Workers per pool, in the Cluster's order of pools.
        let mut workers = vec![0u64; pools.pools.len()];
        for n in nodes {
            let pool = match &n {
                NodeRef::Declared(i) => pools.node_pool.get(*i).copied(),
                NodeRef::Named { pool, .. } => pools.pools.iter().position(|(p, _)| p == pool),
            };
            let pool = pool.and_then(|p| workers.get_mut(p)).ok_or_else(|| {
                corrupt(format!(
                    "{}: {n} is not a node of the run's Cluster",
                    what()
                ))
            })?;
            *pool += 1;
        }
        for ((name, price), count) in pools.pools.iter().zip(workers) {
            if count > 0 {
                out.push(share(
                    name,
                    price.clone(),
                    ask.gpu * count,
                    ask.millicpu * count,
                    count,
                ));
            }
        }
        Ok(())
    }

    /// Run `id`'s row, read once.
    async fn run_row<'r>(&self, id: &str, runs: &'r mut Runs) -> Result<&'r RunRow, Error> {
        if !runs.rows.contains_key(id) {
            let row = self.store.run(id).await?;
            runs.rows.insert(id.to_owned(), row);
        }
        runs.rows
            .get(id)
            .ok_or_else(|| corrupt(format!("run {id} vanished while usage read it")))
    }

    /// The pools of the Cluster run `id` kept.
    async fn pools(&self, id: &str, runs: &mut Runs) -> Result<Arc<Pools>, Error> {
        let stored = self
            .run_row(id, runs)
            .await?
            .cluster
            .clone()
            .ok_or_else(|| {
                corrupt(format!(
                    "run {id} has attempts placed on a Cluster's nodes but keeps no Cluster file"
                ))
            })?;
        if let Some(p) = runs.pools.get(&stored) {
            return Ok(p.clone());
        }
        let spec =
            crate::run::cluster::of_run(&stored).map_err(|e| corrupt(format!("run {id}: {e}")))?;
        let pools = Arc::new(Pools::of(&Config::from_spec(&spec)));
        runs.pools.insert(stored, pools.clone());
        Ok(pools)
    }

    /// The checkpoint interval of attempt `a`'s step, from the pipeline its run kept.
    async fn checkpoint(&self, a: &UsageRow, runs: &mut Runs) -> Result<Option<Duration>, Error> {
        if !runs.checkpoints.contains_key(&a.run_id) {
            let run = self.run_row(&a.run_id, runs).await?;
            let pipeline = crate::run::driver::pipeline_of(run)
                .map_err(|e| corrupt(format!("run {}: {e}", a.run_id)))?;
            runs.checkpoints
                .insert(a.run_id.clone(), checkpoints(&pipeline));
        }
        Ok(runs
            .checkpoints
            .get(&a.run_id)
            .and_then(|c| c.get(&a.file_step))
            .copied()
            .flatten())
    }
}

/// Each step's checkpoint interval by the name its rows carry: a sweep's trials are rows of
/// `SWEEP.trial` (`trial` for a sweep file), which checkpoint as the sweep's trial template
/// says.
fn checkpoints(pipeline: &Pipeline) -> HashMap<String, Option<Duration>> {
    let mut out = HashMap::new();
    for step in &pipeline.steps {
        out.insert(step.name.clone(), step.checkpoint);
        if let Action::Sweep {
            sweep: Some(sweep), ..
        } = &step.action
        {
            let trial = if pipeline.from_sweep {
                "trial".to_owned()
            } else {
                format!("{}.trial", step.name)
            };
            out.insert(trial, sweep.trial.checkpoint);
        }
    }
    out
}

#[cfg(test)]
mod tests;

/// The operation over a real SQLite store: pools read from the run's Cluster, prices, lost
/// work from the pipeline's checkpoints, running attempts up to the clock's now, and who
/// sees what.
#[cfg(test)]
mod service_tests;
