//! Sweeps inside the driver.
//!
//! A sweep is a step (its controller row: `sweep` for a `kind: Sweep` file, the step's own
//! name in a pipeline) whose trials are rows of their own, `PREFIX[N]`, made while the
//! sweep's parallelism and budget allow. A trial's proposal is its row's `item` (the
//! parameters, a JSON object), written in the transaction that creates the row: a sweep
//! resumed after a crash neither loses nor repeats a trial. Observations are the trials'
//! rows (state and metrics), so nothing else needs keeping.
//!
//! Same seed, same proposals, whatever the timing: trial N of a model-based algorithm (TPE)
//! sees exactly the results of trials 1..=N-parallelism, and waits until those have ended.
//! Grid, random and Sobol do not look at results at all. ASHA and early stopping decide on
//! the results present when a slot frees, so they follow the timing of the trials.
//!
//! When the sweep ends, the controller row takes the best trial's outputs and metrics, and
//! its `item` holds the best trial's parameters (what `{{steps.S.best.params.NAME}}` reads).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use sluice_runtime::contract;

use super::{Driver, Error};
use crate::run::launch;
use crate::run::state::step as st;
use crate::spec::model::{Action, Goal, Pipeline, Sweep, SweepParam};
use crate::store::{Change, Event, StepRow};
use crate::sweep::algorithm::{self, Algorithm};
use crate::sweep::asha;
use crate::sweep::early_stop;
use crate::sweep::space::{Point, Value};
use crate::sweep::tpe;
use crate::time::{now_ms, now_rfc3339};

/// Reasons of trials asked to stop start with this: their termination ends them `Stopped`
/// (kept in the row, so a resumed engine knows it too).
pub(super) const STOPPING: &str = "stopping: ";

/// One sweep of a run.
pub(super) struct Sweeper {
    /// The controller row's name.
    pub row: String,
    /// The step trials run (their rows' `step`).
    pub trial_step: String,
    /// Trial rows are named `PREFIX[N]`.
    pub prefix: String,
    pub spec: Sweep,
    kind: Kind,
    /// The highest trial number made so far.
    created: u64,
    /// Every trial made, by number: its row's index.
    trials: BTreeMap<u64, usize>,
    /// The smallest trial number not yet ended (TPE's window).
    first_open: u64,
    /// A grid with no more points.
    exhausted: bool,
    /// Why no more trials start, and whether the sweep fails for it.
    halted: Option<(String, bool)>,
    /// The best trial so far: (loss, trial number).
    best: Option<(f64, u64)>,
    /// Objective curves of ended trials, read once from their metrics files.
    curves: HashMap<u64, Vec<(u64, f64)>>,
    /// ASHA and Hyperband: each trial's losses at the rungs it finished, in order (each
    /// succeeded attempt of a trial finished one rung).
    results: BTreeMap<u64, Vec<f64>>,
    /// Trials asked to stop whose attempt has not ended yet.
    stopping: BTreeSet<u64>,
}

enum Kind {
    Propose(Algorithm),
    Asha {
        rungs: Vec<f64>,
        resource: String,
        eta: u64,
    },
    /// Brackets run one after another; within one, a round's best `1/eta` are promoted once
    /// the whole round has ended (so promotions do not depend on timing).
    Hyperband {
        brackets: Vec<Vec<asha::Round>>,
        resource: String,
    },
}

impl Sweeper {
    fn new(row: String, trial_step: String, prefix: String, spec: Sweep) -> Result<Self, Error> {
        let kind = match spec.algorithm.name.as_str() {
            "grid" => Kind::Propose(Algorithm::Grid),
            "random" => Kind::Propose(Algorithm::Random),
            "sobol" => Kind::Propose(Algorithm::Sobol),
            "tpe" => Kind::Propose(Algorithm::Tpe(tpe::Settings {
                startup: spec.algorithm.startup_trials as usize,
                candidates: spec.algorithm.candidates as usize,
                gamma: spec.algorithm.gamma,
            })),
            "asha" | "hyperband" => {
                let resource = spec.algorithm.resource.clone().unwrap_or_default();
                let (lo, hi) = match spec.params.get(&resource) {
                    Some(SweepParam::Int { min, max, .. }) => (*min as f64, *max as f64),
                    Some(SweepParam::Float { min, max, .. }) => (*min, *max),
                    _ => {
                        return Err(Error::Invalid(format!(
                            "sweep '{row}': asha needs a numeric resource parameter"
                        )));
                    }
                };
                let min = spec.algorithm.min_resource.unwrap_or(lo).max(lo);
                let max = spec.algorithm.max_resource.unwrap_or(hi).min(hi);
                if spec.algorithm.name == "hyperband" {
                    Kind::Hyperband {
                        brackets: asha::hyperband_brackets(min, max, spec.algorithm.eta),
                        resource,
                    }
                } else {
                    Kind::Asha {
                        rungs: asha::rungs(min, max, spec.algorithm.eta),
                        resource,
                        eta: spec.algorithm.eta,
                    }
                }
            }
            other => {
                return Err(Error::Invalid(format!(
                    "sweep '{row}': algorithm '{other}' cannot run in this version of sluice"
                )));
            }
        };
        Ok(Sweeper {
            row,
            trial_step,
            prefix,
            spec,
            kind,
            created: 0,
            trials: BTreeMap::new(),
            first_open: 1,
            exhausted: false,
            halted: None,
            best: None,
            curves: HashMap::new(),
            results: BTreeMap::new(),
            stopping: BTreeSet::new(),
        })
    }

    /// The trial number of a row named `PREFIX[N]`.
    pub fn number(&self, name: &str) -> Option<u64> {
        name.strip_prefix(self.prefix.as_str())?
            .strip_prefix('[')?
            .strip_suffix(']')?
            .parse()
            .ok()
    }

    fn max_trials(&self) -> u64 {
        let grid = match &self.kind {
            Kind::Propose(Algorithm::Grid) => {
                algorithm::grid_size(&self.spec.params, u64::MAX).unwrap_or(u64::MAX)
            }
            _ => u64::MAX,
        };
        self.spec.budget.max_trials.unwrap_or(grid).min(grid)
    }

    fn parallelism(&self) -> usize {
        self.spec.budget.parallelism.max(1) as usize
    }

    /// The objective as a value to minimize.
    fn loss(&self, value: f64) -> f64 {
        match self.spec.objective.goal {
            Goal::Maximize => -value,
            Goal::Minimize => value,
        }
    }

    fn reaches_target(&self, value: f64) -> bool {
        self.spec
            .objective
            .target
            .is_some_and(|t| match self.spec.objective.goal {
                Goal::Maximize => value >= t,
                Goal::Minimize => value <= t,
            })
    }

    /// The objective's last observation in a row's metrics.
    pub fn value(&self, row: &StepRow) -> Option<f64> {
        metric(row.metrics.as_deref(), &self.spec.objective.metric)
    }

    fn point_of(&self, item: Option<&str>) -> Option<Point> {
        let json: serde_json::Map<String, serde_json::Value> = serde_json::from_str(item?).ok()?;
        let mut point = Point::new();
        for (name, p) in &self.spec.params {
            let v = json.get(name)?;
            point.insert(
                name.clone(),
                match p {
                    SweepParam::Float { .. } => Value::Float(v.as_f64()?),
                    SweepParam::Int { .. } => Value::Int(v.as_i64()?),
                    SweepParam::Categorical { .. } => Value::Choice(v.as_str()?.to_owned()),
                },
            );
        }
        Some(point)
    }

    /// Whether trials climb rungs of budget (ASHA, Hyperband).
    fn staged(&self) -> bool {
        !matches!(self.kind, Kind::Propose(_))
    }

    /// The resource parameter and its value for budget `r`.
    fn budget(&self, r: f64) -> Option<(String, serde_json::Value)> {
        let resource = match &self.kind {
            Kind::Asha { resource, .. } | Kind::Hyperband { resource, .. } => resource,
            Kind::Propose(_) => return None,
        };
        let v = match self.spec.params.get(resource) {
            Some(SweepParam::Int { .. }) => serde_json::json!(r.round() as i64),
            _ => serde_json::json!(r),
        };
        Some((resource.clone(), v))
    }

    /// The rung (index into `budgets`) a trial's parameters put it on.
    fn rung_in(&self, budgets: &[f64], item: Option<&str>) -> usize {
        let resource = match &self.kind {
            Kind::Asha { resource, .. } | Kind::Hyperband { resource, .. } => resource,
            Kind::Propose(_) => return 0,
        };
        let v = item
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
            .and_then(|j| j.get(resource).and_then(serde_json::Value::as_f64));
        v.and_then(|v| {
            budgets
                .iter()
                .position(|r| (r - v).abs() <= 0.5 + 1e-9 * r.abs())
        })
        .unwrap_or(0)
    }
}

/// The metric `name` in a JSON object of last values.
fn metric(metrics: Option<&str>, name: &str) -> Option<f64> {
    let m: BTreeMap<String, f64> = serde_json::from_str(metrics?).ok()?;
    m.get(name).copied()
}

/// Adds each sweep step's trial step to the pipeline, and returns the sweeps.
pub(super) fn expand(pipeline: &mut Pipeline) -> Result<Vec<Sweeper>, Error> {
    let mut out = Vec::new();
    let mut trial_steps = Vec::new();
    for step in &pipeline.steps {
        let Action::Sweep {
            sweep: Some(sweep), ..
        } = &step.action
        else {
            continue;
        };
        let (trial_step, prefix) = if pipeline.from_sweep {
            ("trial".to_owned(), "trial".to_owned())
        } else {
            (format!("{}.trial", step.name), step.name.clone())
        };
        let mut trial = sweep.trial.clone();
        // The runtime computes each metric's value as the objective's strategies say.
        trial
            .collect
            .strategies
            .extend(sweep.objective.strategies.clone());
        trial.name = trial_step.clone();
        trial.needs.clear();
        trial.on_exit = false;
        trial.for_each = None;
        trial.when = None;
        trial_steps.push(trial);
        out.push(Sweeper::new(
            step.name.clone(),
            trial_step,
            prefix,
            (**sweep).clone(),
        )?);
    }
    pipeline.steps.extend(trial_steps);
    Ok(out)
}

/// What `sluice status` and `sluice sweep` show of a sweep: its trials and the best one.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub best: Option<Best>,
    pub trials: Vec<TrialReport>,
    /// The best trials first (at most 10), for tables.
    #[serde(skip)]
    pub top: Vec<TrialReport>,
    /// The objective's metric.
    #[serde(skip)]
    pub metric: String,
}

/// The best trial, as the CLI contract shapes it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Best {
    pub trial: u64,
    pub params: serde_json::Value,
    pub value: Option<f64>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct TrialReport {
    /// The trial's row (`trial[3]`).
    #[serde(skip)]
    pub step: String,
    pub trial: u64,
    pub state: String,
    pub params: serde_json::Value,
    pub value: Option<f64>,
    /// Why it failed, was stopped or waits (a failed trial's ends with the last lines of its
    /// standard error), as its row says.
    pub reason: Option<String>,
}

/// The trials of the (first) sweep of a run, from its rows; None when the run has no sweep.
pub fn report(pipeline: &Pipeline, rows: &[StepRow]) -> Option<Report> {
    let mut pipeline = pipeline.clone();
    let sweeps = expand(&mut pipeline).ok()?;
    let s = sweeps.first()?;
    let mut trials: Vec<TrialReport> = rows
        .iter()
        .filter(|r| r.step == s.trial_step)
        .filter_map(|r| {
            Some(TrialReport {
                step: r.name.clone(),
                trial: s.number(&r.name)?,
                state: r.state.clone(),
                params: r
                    .item
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .unwrap_or(serde_json::Value::Null),
                value: s.value(r),
                reason: r.reason.clone(),
            })
        })
        .collect();
    trials.sort_by_key(|t| t.trial);
    let mut ranked: Vec<(f64, &TrialReport)> = trials
        .iter()
        .filter(|t| matches!(t.state.as_str(), st::SUCCEEDED | st::STOPPED))
        .filter_map(|t| t.value.map(|v| (s.loss(v), t)))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.trial.cmp(&b.1.trial)));
    let top: Vec<TrialReport> = ranked.iter().take(10).map(|(_, t)| (*t).clone()).collect();
    let best = top.first().map(|t| Best {
        trial: t.trial,
        params: t.params.clone(),
        value: t.value,
    });
    Some(Report {
        best,
        top,
        trials,
        metric: s.spec.objective.metric.clone(),
    })
}

/// A trial's objective: (step, value) in the order reported.
type Curve = Vec<(u64, f64)>;

/// The objective's curve in an attempt's metrics file: (step, value) in the order reported.
fn curve(dir: &Path, metric: &str) -> Vec<(u64, f64)> {
    let Ok(text) = std::fs::read_to_string(dir.join(contract::METRICS_FILE)) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|o| o.get("name").and_then(serde_json::Value::as_str) == Some(metric))
        .enumerate()
        .filter_map(|(i, o)| {
            let v = o.get("value")?.as_f64()?;
            let step = o
                .get("step")
                .and_then(serde_json::Value::as_f64)
                .map_or(i as u64 + 1, |s| s.max(0.0) as u64);
            Some((step, v))
        })
        .collect()
}

impl Driver {
    pub(super) fn is_trial(&self, row: &StepRow) -> bool {
        self.trial_steps.contains_key(&row.step)
    }

    /// Registers the rows of sweeps when a run is opened: trials by number, the best so far,
    /// ASHA's rungs (each succeeded attempt of a trial finished one rung), trials stopping.
    pub(super) fn index_sweeps(&mut self, attempts: &[crate::store::AttemptRow]) {
        for (idx, row) in self.rows.iter().enumerate() {
            let Some(&si) = self.trial_steps.get(&row.step) else {
                continue;
            };
            let s = &mut self.sweeps[si];
            let Some(n) = s.number(&row.name) else {
                continue;
            };
            s.trials.insert(n, idx);
            s.created = s.created.max(n);
        }
        for si in 0..self.sweeps.len() {
            let names: Vec<(u64, usize)> = self.sweeps[si]
                .trials
                .iter()
                .map(|(&n, &i)| (n, i))
                .collect();
            for (n, idx) in names {
                self.observe(si, n, idx);
                let row = &self.rows[idx];
                if row
                    .reason
                    .as_deref()
                    .is_some_and(|r| r.starts_with(STOPPING))
                    && !st::is_terminal(&row.state)
                {
                    self.sweeps[si].stopping_note(n);
                }
                let s = &mut self.sweeps[si];
                if s.staged() {
                    let losses: Vec<f64> = attempts
                        .iter()
                        .filter(|a| {
                            a.step == row.name && a.state == crate::run::state::attempt::SUCCEEDED
                        })
                        .filter_map(|a| metric(a.metrics.as_deref(), &s.spec.objective.metric))
                        .map(|v| s.loss(v))
                        .collect();
                    if !losses.is_empty() {
                        s.results.insert(n, losses);
                    }
                }
            }
        }
    }

    /// Notes a trial's result if it has ended with a value: the best so far, the target.
    pub(super) fn observe(&mut self, si: usize, n: u64, idx: usize) {
        let row = &self.rows[idx];
        let s = &mut self.sweeps[si];
        if !matches!(row.state.as_str(), st::SUCCEEDED | st::STOPPED) {
            return;
        }
        let Some(v) = s.value(row) else {
            return;
        };
        let loss = s.loss(v);
        if s.best.is_none_or(|(b, _)| loss < b) {
            s.best = Some((loss, n));
        }
        if s.halted.is_none() && s.reaches_target(v) {
            s.halted = Some((
                format!(
                    "trial {n} reached the target ({}={v})",
                    s.spec.objective.metric
                ),
                false,
            ));
        }
    }

    /// A controller row whose needs are met starts sweeping.
    pub(super) fn start_sweep(&mut self, idx: usize) {
        self.rows[idx].started_at = Some(now_rfc3339());
        self.set_state(idx, st::RUNNING, Some("sweeping".into()));
    }

    /// Makes trials while each running sweep's budget and parallelism allow, and ends the
    /// sweeps with nothing left to do. Changed rows go to `changed`, new ones to `new_rows`.
    pub(super) fn tick_sweeps(&mut self, changed: &mut Vec<usize>, new_rows: &mut Vec<StepRow>) {
        for si in 0..self.sweeps.len() {
            let Some(&ctl) = self.by_name.get(&self.sweeps[si].row) else {
                continue;
            };
            if self.rows[ctl].state != st::RUNNING {
                continue;
            }
            self.tick_sweep(si, ctl, changed, new_rows);
        }
    }

    fn tick_sweep(
        &mut self,
        si: usize,
        ctl: usize,
        changed: &mut Vec<usize>,
        new_rows: &mut Vec<StepRow>,
    ) {
        let trial_step = self.sweeps[si].trial_step.clone();
        let counts = self.counts.get(&trial_step).copied().unwrap_or_default();
        let mut active = counts.total - counts.terminal;
        // Halting: the failure budget, the time budget (the target is noted as trials end).
        let s = &self.sweeps[si];
        if s.halted.is_none() {
            if let Some(max) = s.spec.budget.max_failed_trials
                && counts.failed as u64 >= max
            {
                let why = format!("{} trial(s) failed (maxFailedTrials: {max})", counts.failed);
                self.sweeps[si].halted = Some((why, true));
            } else if let Some(d) = s.spec.budget.max_duration
                && let Some(started) = self.rows[ctl]
                    .started_at
                    .as_deref()
                    .and_then(crate::time::parse_rfc3339)
                && now_ms() >= started + d.as_millis() as i64
            {
                let why = format!(
                    "maxDuration {} reached",
                    crate::spec::units::format_duration(d)
                );
                self.sweeps[si].halted = Some((why, false));
            }
        }
        if self.cancelling {
            if active == 0 {
                self.set_state(ctl, st::CANCELLED, Some("the run was cancelled".into()));
                changed.push(ctl);
            }
            return;
        }
        if let Some((why, _)) = self.sweeps[si].halted.clone() {
            // Whatever has not ended stops now.
            let open: Vec<(u64, usize)> = self.sweeps[si]
                .trials
                .iter()
                .filter(|(_, i)| !st::is_terminal(&self.rows[**i].state))
                .map(|(&n, &i)| (n, i))
                .collect();
            for (n, idx) in open {
                let name = self.rows[idx].name.clone();
                if self.live.contains_key(&name) {
                    if !self.sweeps[si].stopping_has(n) {
                        self.sweeps[si].stopping_note(n);
                        self.rows[idx].reason = Some(format!("{STOPPING}{why}"));
                        changed.push(idx);
                        self.to_terminate.push(name);
                    }
                } else {
                    self.set_state(idx, st::STOPPED, Some(format!("not started: {why}")));
                    changed.push(idx);
                }
            }
        } else {
            let limit = self.sweeps[si].parallelism();
            while active < limit {
                if !self.sweeps[si].staged() {
                    let Some(row) = self.propose(si) else { break };
                    new_rows.push(row);
                } else {
                    let next = if matches!(self.sweeps[si].kind, Kind::Asha { .. }) {
                        self.asha_next(si)
                    } else {
                        self.hyperband_next(si)
                    };
                    match next {
                        Some(Ok(idx)) => changed.push(idx),
                        Some(Err(row)) => new_rows.push(row),
                        None => break,
                    }
                }
                active += 1;
            }
        }
        if active == 0 {
            self.end_sweep(si, ctl);
            changed.push(ctl);
        }
    }

    /// The next new trial of a proposing algorithm, made and added; None when there is
    /// none to make now.
    fn propose(&mut self, si: usize) -> Option<StepRow> {
        let n = self.sweeps[si].created + 1;
        if n > self.sweeps[si].max_trials() || self.sweeps[si].exhausted {
            return None;
        }
        let history = if let Kind::Propose(Algorithm::Tpe(_)) = &self.sweeps[si].kind {
            // Trial N sees trials 1..=N-parallelism, all ended.
            let window = n.saturating_sub(self.sweeps[si].parallelism() as u64);
            self.advance_window(si);
            if self.sweeps[si].first_open <= window {
                return None;
            }
            let s = &self.sweeps[si];
            s.trials
                .range(..=window)
                .filter_map(|(_, &i)| {
                    let r = &self.rows[i];
                    if !matches!(r.state.as_str(), st::SUCCEEDED | st::STOPPED) {
                        return None;
                    }
                    Some(tpe::Observation {
                        point: s.point_of(r.item.as_deref())?,
                        loss: s.loss(s.value(r)?),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        let s = &self.sweeps[si];
        let Kind::Propose(alg) = &s.kind else {
            return None;
        };
        let point =
            match algorithm::propose(alg, &s.spec.params, s.spec.algorithm.seed, n, &history) {
                Ok(Some(p)) => p,
                Ok(None) | Err(_) => {
                    self.sweeps[si].exhausted = true;
                    return None;
                }
            };
        Some(self.make_trial(si, n, &point, None))
    }

    /// Moves TPE's window start past trials that have ended.
    fn advance_window(&mut self, si: usize) {
        let s = &mut self.sweeps[si];
        while let Some(&i) = s.trials.get(&s.first_open) {
            if !st::is_terminal(&self.rows[i].state) {
                break;
            }
            s.first_open += 1;
        }
    }

    /// A new trial row, added to the run (committed by the caller).
    fn make_trial(
        &mut self,
        si: usize,
        n: u64,
        point: &Point,
        extra: Option<(String, serde_json::Value)>,
    ) -> StepRow {
        let s = &mut self.sweeps[si];
        let mut params: serde_json::Map<String, serde_json::Value> = point
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect();
        if let Some((k, v)) = extra {
            params.insert(k, v);
        }
        let row = StepRow {
            name: format!("{}[{n}]", s.prefix),
            step: s.trial_step.clone(),
            item: Some(serde_json::Value::Object(params).to_string()),
            state: st::QUEUED.into(),
            ..StepRow::default()
        };
        s.created = n;
        let idx = self.rows.len();
        self.sweeps[si].trials.insert(n, idx);
        self.add_row(row.clone());
        row
    }

    /// ASHA: promote a trial (Ok: its row, queued again with the next rung's budget), start
    /// a new one on the first rung (Err: the new row), or nothing (None).
    fn asha_next(&mut self, si: usize) -> Option<Result<usize, StepRow>> {
        let s = &self.sweeps[si];
        let Kind::Asha { eta, rungs, .. } = &s.kind else {
            return None;
        };
        let ladder: Vec<asha::Rung> = (0..rungs.len())
            .map(|k| asha::Rung {
                results: s
                    .results
                    .iter()
                    .filter_map(|(&n, losses)| {
                        let loss = *losses.get(k)?;
                        let promoted = s.trials.get(&n).is_some_and(|&i| {
                            s.rung_in(rungs, self.rows[i].item.as_deref()) > k
                                || !st::is_terminal(&self.rows[i].state)
                        });
                        Some((n, loss, promoted))
                    })
                    .collect(),
            })
            .collect();
        match asha::next(&ladder, *eta) {
            asha::Next::Promote { trial, rung } => {
                let idx = *s.trials.get(&trial)?;
                let budget = s.budget(*rungs.get(rung)?)?;
                Some(Ok(self.promote(idx, rung, budget)))
            }
            asha::Next::Start => {
                let first = *rungs.first()?;
                self.new_staged_trial(si, first).map(Err)
            }
        }
    }

    /// A new trial of a staged algorithm, on budget `r`: random proposals.
    fn new_staged_trial(&mut self, si: usize, r: f64) -> Option<StepRow> {
        let s = &self.sweeps[si];
        let n = s.created + 1;
        if n > s.max_trials() {
            return None;
        }
        let seed = s.spec.algorithm.seed;
        let point = algorithm::propose(&Algorithm::Random, &s.spec.params, seed, n, &[]).ok()??;
        let budget = s.budget(r);
        Some(self.make_trial(si, n, &point, budget))
    }

    /// Queues trial row `idx` again with the budget of rung `rung`: it continues from its
    /// own checkpoint.
    fn promote(
        &mut self,
        idx: usize,
        rung: usize,
        (name, value): (String, serde_json::Value),
    ) -> usize {
        let mut params: serde_json::Map<String, serde_json::Value> = self.rows[idx]
            .item
            .as_deref()
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or_default();
        params.insert(name.clone(), value.clone());
        self.rows[idx].item = Some(serde_json::Value::Object(params).to_string());
        self.rows[idx].not_before = None;
        self.set_state(
            idx,
            st::QUEUED,
            Some(format!("promoted to rung {} ({name}={value})", rung + 1)),
        );
        idx
    }

    /// Hyperband: fill the current bracket's first round, then, each time a round has wholly
    /// ended, promote its best to the next round; then the next bracket.
    fn hyperband_next(&mut self, si: usize) -> Option<Result<usize, StepRow>> {
        let s = &self.sweeps[si];
        let Kind::Hyperband { brackets, .. } = &s.kind else {
            return None;
        };
        let max = s.max_trials();
        let mut first = 1;
        for rounds in brackets {
            let size = rounds.first().map_or(0, |r| r.trials);
            let last = (first + size).saturating_sub(1).min(max);
            if first > last {
                return None;
            }
            if s.created < last {
                let r = rounds.first()?.budget;
                return self.new_staged_trial(si, r).map(Err);
            }
            let budgets: Vec<f64> = rounds.iter().map(|r| r.budget).collect();
            let members: Vec<(u64, usize, usize)> = (first..=last)
                .filter_map(|n| {
                    let i = *s.trials.get(&n)?;
                    Some((n, i, s.rung_in(&budgets, self.rows[i].item.as_deref())))
                })
                .collect();
            for k in 0..rounds.len().saturating_sub(1) {
                let at_k: Vec<&(u64, usize, usize)> =
                    members.iter().filter(|(_, _, rung)| *rung >= k).collect();
                if at_k
                    .iter()
                    .any(|(_, i, rung)| *rung == k && !st::is_terminal(&self.rows[*i].state))
                {
                    return None; // the round has not ended
                }
                let mut ranked: Vec<(f64, u64, usize, usize)> = at_k
                    .iter()
                    .filter_map(|&&(n, i, rung)| {
                        let loss = *s.results.get(&n)?.get(k)?;
                        Some((loss, n, i, rung))
                    })
                    .collect();
                ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let keep = rounds[k + 1].trials as usize;
                if let Some(&(_, _, idx, _)) =
                    ranked.iter().take(keep).find(|(_, _, _, rung)| *rung == k)
                {
                    let budget = s.budget(rounds[k + 1].budget)?;
                    return Some(Ok(self.promote(idx, k + 1, budget)));
                }
            }
            // Every round of this bracket is decided: its last round must end too.
            if members
                .iter()
                .any(|(_, i, _)| !st::is_terminal(&self.rows[*i].state))
            {
                return None;
            }
            first += size;
        }
        None
    }

    /// Every trial has ended and none is left to make: the sweep ends with its best trial.
    fn end_sweep(&mut self, si: usize, ctl: usize) {
        let s = &self.sweeps[si];
        let failed = self.counts.get(&s.trial_step).map_or(0, |c| c.failed);
        let best = s.best.and_then(|(_, n)| s.trials.get(&n).map(|&i| (n, i)));
        let metric = s.spec.objective.metric.clone();
        match (&s.halted, best) {
            (Some((why, true)), _) => {
                let why = format!("the sweep failed: {why}");
                self.set_state(ctl, st::FAILED, Some(why));
            }
            (_, None) => {
                let why = if failed > 0 {
                    format!("no trial reported '{metric}' ({failed} failed)")
                } else {
                    format!("no trial reported '{metric}'")
                };
                self.set_state(ctl, st::FAILED, Some(why));
            }
            (halted, Some((n, i))) => {
                let best = self.rows[i].clone();
                let value = s.value(&best).unwrap_or(f64::NAN);
                let mut why = format!("best: trial {n} with {metric}={value}");
                if let Some((h, _)) = halted {
                    why.push_str(&format!(" ({h})"));
                }
                self.rows[ctl].item = best.item.clone();
                self.rows[ctl].outputs = best.outputs.clone();
                self.rows[ctl].metrics = best.metrics.clone();
                self.set_state(ctl, st::SUCCEEDED, Some(why));
            }
        }
    }

    /// The trial an attempt belonged to ended: note its result, and for ASHA its rung.
    pub(super) fn trial_ended(&mut self, idx: usize, attempt_metrics: &BTreeMap<String, f64>) {
        let Some(&si) = self.trial_steps.get(&self.rows[idx].step) else {
            return;
        };
        let Some(n) = self.sweeps[si].number(&self.rows[idx].name) else {
            return;
        };
        if self.rows[idx].state == st::SUCCEEDED && self.sweeps[si].staged() {
            let s = &self.sweeps[si];
            if let Some(v) = attempt_metrics.get(&s.spec.objective.metric) {
                let loss = s.loss(*v);
                self.sweeps[si].results.entry(n).or_default().push(loss);
            }
        }
        self.sweeps[si].stopping_done(n);
        self.observe(si, n, idx);
    }

    /// Whether a trial's ended attempt was asked to stop (early stopping, the sweep halting).
    pub(super) fn trial_stopping(&self, idx: usize) -> bool {
        let row = &self.rows[idx];
        self.trial_steps.get(&row.step).is_some_and(|&si| {
            self.sweeps[si]
                .number(&row.name)
                .is_some_and(|n| self.sweeps[si].stopping_has(n))
        })
    }

    /// The objective a trial must report, when `idx` is a trial.
    pub(super) fn trial_objective(&self, idx: usize) -> Option<String> {
        let si = *self.trial_steps.get(&self.rows[idx].step)?;
        Some(self.sweeps[si].spec.objective.metric.clone())
    }

    /// The median rule: running trials whose best value so far is worse than the median of
    /// the others' running averages at the same step are asked to stop. The decision is
    /// committed (in the row's reason) before the trial is told.
    pub(super) async fn check_early_stops(&mut self) -> Result<(), Error> {
        for si in 0..self.sweeps.len() {
            let Some(rule) = self.sweeps[si].spec.early_stopping else {
                continue;
            };
            let rule = early_stop::Median {
                min_trials: rule.min_trials as usize,
                start_step: rule.start_step,
            };
            let goal = match self.sweeps[si].spec.objective.goal {
                Goal::Maximize => early_stop::Goal::Maximize,
                Goal::Minimize => early_stop::Goal::Minimize,
            };
            let metric = self.sweeps[si].spec.objective.metric.clone();
            let trial_step = self.sweeps[si].trial_step.clone();
            // Running trials' curves, read now; ended ones' once.
            let mut running: Vec<(u64, String, Curve)> = Vec::new();
            for (name, l) in &self.live {
                let Some(&idx) = self.by_name.get(name) else {
                    continue;
                };
                if self.rows[idx].step != trial_step {
                    continue;
                }
                let Some(n) = self.sweeps[si].number(name) else {
                    continue;
                };
                if self.sweeps[si].stopping_has(n) {
                    continue;
                }
                running.push((n, name.clone(), curve(Path::new(&l.attempt.dir), &metric)));
            }
            if running.is_empty() {
                continue;
            }
            let ended: Vec<(u64, usize)> = self.sweeps[si]
                .trials
                .iter()
                .filter(|(n, i)| {
                    st::is_terminal(&self.rows[**i].state)
                        && !self.sweeps[si].curves.contains_key(n)
                })
                .map(|(&n, &i)| (n, i))
                .collect();
            for (n, i) in ended {
                let row = &self.rows[i];
                let dir = launch::attempt_dir(&self.home, &self.run.id, &row.name, row.attempts);
                let c = curve(&dir, &metric);
                self.sweeps[si].curves.insert(n, c);
            }
            let mut stop = Vec::new();
            for (n, name, c) in &running {
                let others: Vec<&[(u64, f64)]> = self.sweeps[si]
                    .curves
                    .iter()
                    .filter(|(m, _)| *m != n)
                    .map(|(_, c)| c.as_slice())
                    .chain(
                        running
                            .iter()
                            .filter(|(m, _, _)| m != n)
                            .map(|(_, _, c)| c.as_slice()),
                    )
                    .collect();
                if early_stop::should_stop(&rule, goal, c, &others) {
                    let at = c.last().map_or(0, |(s, _)| *s);
                    stop.push((*n, name.clone(), at));
                }
            }
            for (n, name, at) in stop {
                let idx = self.by_name[&name];
                self.sweeps[si].stopping_note(n);
                self.rows[idx].reason = Some(format!(
                    "{STOPPING}early stopping at step {at}: worse than the median of the other trials"
                ));
                let row = self.rows[idx].clone();
                self.commit(Change {
                    steps: vec![&row],
                    events: vec![Event {
                        step: Some(name.clone()),
                        kind: "early-stop".into(),
                        detail: Some(format!("step {at}")),
                    }],
                    ..Change::default()
                })
                .await?;
                if let Some(l) = self.live.get(&name) {
                    super::terminate(l);
                }
            }
        }
        Ok(())
    }

    /// One line on the sweeps' progress: trials done, running, failed, stopped; the best.
    pub(super) fn sweep_summary(&self) -> Option<(u64, u64, String)> {
        let s = self.sweeps.first()?;
        let c = self.counts.get(&s.trial_step).copied().unwrap_or_default();
        let mut line = format!(
            "trials: {} done, {} running, {} failed, {} stopped",
            c.terminal - c.failed - c.stopped,
            c.total - c.terminal,
            c.failed,
            c.stopped
        );
        if let Some((_, n)) = s.best
            && let Some(&i) = s.trials.get(&n)
        {
            let row = &self.rows[i];
            line.push_str(&format!(
                "; best {}={} (trial {n}: {})",
                s.spec.objective.metric,
                s.value(row).map_or_else(|| "?".into(), |v| v.to_string()),
                row.item.as_deref().unwrap_or("{}")
            ));
        }
        let total = if s.halted.is_some() || s.exhausted {
            s.created
        } else {
            s.max_trials()
        };
        Some((c.terminal as u64, total, line))
    }
}

impl Sweeper {
    fn stopping_note(&mut self, n: u64) {
        self.stopping.insert(n);
    }

    fn stopping_has(&self, n: u64) -> bool {
        self.stopping.contains(&n)
    }

    fn stopping_done(&mut self, n: u64) {
        self.stopping.remove(&n);
    }
}
