//! The driver's side of sweeps: registering trials when a run is opened, making new trials
//! while parallelism and budget allow, ASHA and Hyperband promotions, and the sweep's end.

use std::collections::BTreeMap;

use super::{Kind, STOPPING, metric};
use crate::executor::Executor;
use crate::run::driver::Driver;
use crate::run::state::step as st;
use crate::run::transitions;
use crate::store::StepRow;
use crate::sweep::algorithm::{self, Algorithm};
use crate::sweep::asha;
use crate::sweep::space::Point;
use crate::sweep::tpe;

impl<E: Executor> Driver<E> {
    pub(in crate::run::driver) fn is_trial(&self, row: &StepRow) -> bool {
        self.trial_steps.contains_key(&row.step)
    }

    /// Registers the rows of sweeps when a run is opened: trials by number, the best so far,
    /// ASHA's rungs (each succeeded attempt of a trial finished one rung), trials stopping.
    pub(in crate::run::driver) fn index_sweeps(&mut self, attempts: &[crate::store::AttemptRow]) {
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
                    && !st::is_terminal(row.state)
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
    pub(in crate::run::driver) fn observe(&mut self, si: usize, n: u64, idx: usize) {
        let row = &self.rows[idx];
        let s = &mut self.sweeps[si];
        if !matches!(row.state, st::SUCCEEDED | st::STOPPED) {
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
    pub(in crate::run::driver) fn start_sweep(&mut self, idx: usize) {
        self.rows[idx].started_at = Some(self.clock.now_rfc3339());
        self.set_state(idx, st::RUNNING, Some("sweeping".into()));
    }

    /// Makes trials while each running sweep's budget and parallelism allow, and ends the
    /// sweeps with nothing left to do. Changed rows go to `changed`, new ones to `new_rows`.
    pub(in crate::run::driver) fn tick_sweeps(
        &mut self,
        changed: &mut Vec<usize>,
        new_rows: &mut Vec<StepRow>,
    ) {
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
                && self.clock.now_ms() >= started + d.as_millis() as i64
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
                .filter(|(_, i)| !st::is_terminal(self.rows[**i].state))
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
                    if !matches!(r.state, st::SUCCEEDED | st::STOPPED) {
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
            if !st::is_terminal(self.rows[i].state) {
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
            state: st::QUEUED,
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
                                || !st::is_terminal(self.rows[i].state)
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
        let p = transitions::promote(self.rows[idx].item.as_deref(), rung, &name, &value);
        self.rows[idx].item = Some(p.item);
        self.rows[idx].not_before = None;
        self.set_state(idx, p.state, Some(p.reason));
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
                    .any(|(_, i, rung)| *rung == k && !st::is_terminal(self.rows[*i].state))
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
                .any(|(_, i, _)| !st::is_terminal(self.rows[*i].state))
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
    pub(in crate::run::driver) fn trial_ended(
        &mut self,
        idx: usize,
        attempt_metrics: &BTreeMap<String, f64>,
    ) {
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
    pub(in crate::run::driver) fn trial_stopping(&self, idx: usize) -> bool {
        let row = &self.rows[idx];
        self.trial_steps.get(&row.step).is_some_and(|&si| {
            self.sweeps[si]
                .number(&row.name)
                .is_some_and(|n| self.sweeps[si].stopping_has(n))
        })
    }

    /// The objective a trial must report, when `idx` is a trial.
    pub(in crate::run::driver) fn trial_objective(&self, idx: usize) -> Option<String> {
        let si = *self.trial_steps.get(&self.rows[idx].step)?;
        Some(self.sweeps[si].spec.objective.metric.clone())
    }
}
