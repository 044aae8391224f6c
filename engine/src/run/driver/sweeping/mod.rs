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
//! `trials` holds the driver's side (making, promoting and ending trials), `early` the
//! median stopping rule, `report` what status shows.
//!
//! When the sweep ends, the controller row takes the best trial's outputs and metrics, and
//! its `item` holds the best trial's parameters (what `{{steps.S.best.params.NAME}}` reads).

mod early;
mod report;
mod trials;

pub use report::{Best, Report, TrialReport, report};

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Error;
use crate::spec::model::{Action, Goal, Pipeline, Sweep, SweepParam};
use crate::store::StepRow;
use crate::sweep::algorithm::{self, Algorithm};
use crate::sweep::asha;
use crate::sweep::space::{Point, Value};
use crate::sweep::tpe;

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
