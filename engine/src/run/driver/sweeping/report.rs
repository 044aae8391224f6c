//! What `sluice status` and `sluice sweep` show of a sweep, and the progress line of a
//! running one.

use super::expand;
use crate::executor::Executor;
use crate::run::driver::Driver;
use crate::run::state::step as st;
use crate::spec::model::Pipeline;
use crate::store::StepRow;

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
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Best {
    pub trial: u64,
    pub params: serde_json::Value,
    pub value: Option<f64>,
}

#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
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
                state: r.state.into(),
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
        .filter(|t| t.state == st::SUCCEEDED || t.state == st::STOPPED)
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

impl<E: Executor> Driver<E> {
    /// One line on the sweeps' progress: trials done, running, failed, stopped; the best.
    pub(in crate::run::driver) fn sweep_summary(&self) -> Option<(u64, u64, String)> {
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
