//! Median early stopping inside the driver: running trials' curves read through the
//! executor, the decision committed (in the trial's reason) before the trial is told.

use super::STOPPING;
use crate::executor::{Executor, Reason};
use crate::run::driver::{Driver, Error};
use crate::run::state::step as st;
use crate::spec::model::Goal;
use crate::store::{Change, Event, EventKind};
use crate::sweep::early_stop;

/// A trial's objective: (step, value) in the order reported.
type Curve = Vec<(u64, f64)>;

impl<E: Executor> Driver<E> {
    /// The median rule: running trials whose best value so far is worse than the median of
    /// the others' running averages at the same step are asked to stop. The decision is
    /// committed (in the row's reason) before the trial is told.
    pub(in crate::run::driver) async fn check_early_stops(&mut self) -> Result<(), Error> {
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
                let c = self.executor.metrics(&l.handle, &metric).await;
                running.push((n, name.clone(), c));
            }
            if running.is_empty() {
                continue;
            }
            let ended: Vec<(u64, usize)> = self.sweeps[si]
                .trials
                .iter()
                .filter(|(n, i)| {
                    st::is_terminal(self.rows[**i].state) && !self.sweeps[si].curves.contains_key(n)
                })
                .map(|(&n, &i)| (n, i))
                .collect();
            for (n, i) in ended {
                let row = &self.rows[i];
                let handle = self
                    .executor
                    .handle(&self.attempt_id(&row.name, row.attempts));
                let c = self.executor.metrics(&handle, &metric).await;
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
                let idx = self.index_of(&name)?;
                self.sweeps[si].stopping_note(n);
                self.rows[idx].reason = Some(format!(
                    "{STOPPING}early stopping at step {at}: worse than the median of the other trials"
                ));
                let row = self.rows[idx].clone();
                self.commit(Change {
                    steps: vec![&row],
                    events: vec![Event {
                        step: Some(name.clone()),
                        kind: EventKind::EarlyStop,
                        detail: Some(format!("step {at}")),
                    }],
                    ..Change::default()
                })
                .await?;
                self.stop_one(&name, Reason::Cancel).await;
            }
        }
        Ok(())
    }
}
