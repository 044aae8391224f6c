//! Deciding what each step whose needs changed does next: wait, skip, cancel, fan out, queue.

use std::path::PathBuf;

use super::{Driver, Error, Watcher};
use crate::executor::{Executor, Reason};
use crate::run::launch::{Scope, Stop};
use crate::run::state::{run as rs, step as st};
use crate::run::transitions::{self, Need, Next};
use crate::spec::model::{ForEach, Step};
use crate::store::{Change, StepRow};

impl<E: Executor> Driver<E> {
    /// Decides what every step whose needs changed does next, commits, then starts what can.
    pub(super) async fn advance(&mut self, watcher: &mut dyn Watcher) -> Result<(), Error> {
        // A pass can decide more than it looked at: a step started from the cache is done at
        // once (its dependents are to decide now), the last main steps cancelled or skipped
        // let the onExit steps go. Nothing else will wake the run for them (no attempt's end
        // is to come), so it decides again until nothing is left to decide. Each pass ends
        // steps or starts them, so this ends; the bound is a guard.
        for _ in 0..=self.rows.len() {
            self.advance_once(watcher).await?;
            if self.dirty.is_empty() && (self.on_exit_started || !self.main_done()) {
                break;
            }
        }
        Ok(())
    }

    async fn advance_once(&mut self, watcher: &mut dyn Watcher) -> Result<(), Error> {
        for idx in std::mem::take(&mut self.reports) {
            let done = self.rows.len() - self.open_all;
            watcher.step(&self.rows[idx], self.rows.len(), done);
        }
        let mut changed: Vec<usize> = Vec::new();
        let mut new_rows: Vec<StepRow> = Vec::new();
        let main_done = self.main_done();
        if main_done && !self.on_exit_started {
            self.on_exit_started = true;
            for i in 0..self.rows.len() {
                if self.is_on_exit(&self.rows[i]) && self.rows[i].state == st::PENDING {
                    self.dirty.push_back(i);
                }
            }
        }
        while let Some(idx) = self.dirty.pop_front() {
            if self.rows[idx].state != st::PENDING {
                continue;
            }
            let step = self.step_arc(&self.rows[idx])?;
            let needs = self.needs(&step);
            match transitions::next(
                &self.facts(),
                self.failed_fast,
                step.on_exit,
                main_done,
                &needs,
            ) {
                Next::Wait => continue,
                Next::Cancel(why) => {
                    self.set_state(idx, st::CANCELLED, Some(why));
                    changed.push(idx);
                    continue;
                }
                Next::Go => {}
            }
            // A fan-out over an upstream output: now that it exists, make the children.
            if self.rows[idx].name.ends_with("[*]") {
                match self.expand(&step).await {
                    Ok(children) => {
                        let n = children.len();
                        self.set_state(
                            idx,
                            st::SUCCEEDED,
                            Some(format!("fanned out into {n} step(s)")),
                        );
                        for c in children {
                            new_rows.push(c.clone());
                            self.add_row(c);
                        }
                    }
                    Err(why) => self.set_state(idx, st::FAILED, Some(why)),
                }
                changed.push(idx);
                continue;
            }
            if let Some(when) = &step.when {
                let scope = self.scope(idx);
                let row = &self.rows[idx];
                let mut sink = Vec::new();
                let dir = PathBuf::new();
                let verdict = when
                    .expr
                    .eval(&mut |r| scope.resolve(row, r, &mut sink, &dir));
                match verdict {
                    Ok(true) => {}
                    Ok(false) => {
                        // In the values it was decided on (`0.93 >= 0.99`), then as written.
                        let explained = when
                            .expr
                            .explain(&mut |r| scope.resolve(row, r, &mut sink, &dir))
                            .ok()
                            .filter(|e| e != &when.text);
                        let why = match explained {
                            Some(e) => format!("condition is false: {e} ({})", when.text),
                            None => format!("condition is false: {}", when.text),
                        };
                        self.set_state(idx, st::SKIPPED, Some(why));
                        changed.push(idx);
                        continue;
                    }
                    Err(Stop::Skip(why)) => {
                        self.set_state(idx, st::SKIPPED, Some(why));
                        changed.push(idx);
                        continue;
                    }
                    Err(Stop::Fail(why)) => {
                        self.fail_permanently(idx, why);
                        changed.push(idx);
                        continue;
                    }
                }
            }
            if self.sweep_rows.contains_key(&self.rows[idx].name) {
                self.start_sweep(idx);
            } else {
                self.set_state(idx, st::QUEUED, None);
            }
            changed.push(idx);
        }
        if !self.sweeps.is_empty() {
            let before = (changed.len(), new_rows.len());
            self.tick_sweeps(&mut changed, &mut new_rows);
            if (changed.len(), new_rows.len()) != before
                && let Some((done, total, line)) = self.sweep_summary()
            {
                watcher.sweep(done, total, &line);
            }
        }
        if !changed.is_empty() || !new_rows.is_empty() {
            let rows: Vec<StepRow> = changed.iter().map(|&i| self.rows[i].clone()).collect();
            self.commit(Change {
                steps: rows.iter().collect(),
                new_steps: new_rows.iter().collect(),
                ..Change::default()
            })
            .await?;
            let total = self.rows.len();
            let done = self.rows.len() - self.open_all;
            for r in &rows {
                watcher.step(r, total, done);
            }
        }
        // Trials asked to stop are told once that is committed.
        for name in std::mem::take(&mut self.to_terminate) {
            self.stop_one(&name, Reason::Cancel).await;
        }
        self.start_queued(watcher).await
    }

    pub(super) fn main_done(&self) -> bool {
        self.open_main == 0
            && self.live.keys().all(|n| {
                self.by_name
                    .get(n)
                    .is_some_and(|&i| self.is_on_exit(&self.rows[i]))
            })
    }

    /// How the steps `step` needs have ended, in the order it names them.
    fn needs<'s>(&'s self, step: &'s Step) -> Vec<Need<'s>> {
        step.needs
            .iter()
            .map(|need| {
                let c = self.counts.get(&need.step).copied().unwrap_or_default();
                if c.terminal < c.total {
                    return Need::Open(&need.step);
                }
                if c.satisfied == c.total {
                    return Need::Satisfied(&need.step);
                }
                let how = match self.by_name.get(&need.step).map(|&i| self.rows[i].state) {
                    Some(st::FAILED) => "failed",
                    Some(st::CANCELLED) => "was cancelled",
                    // A fan-out: some of its children did not succeed.
                    _ => "did not succeed",
                };
                Need::Unsatisfied(&need.step, how)
            })
            .collect()
    }

    /// The run, as the decisions about its steps see it.
    pub(super) fn facts(&self) -> transitions::Run {
        transitions::Run {
            cancelling: self.cancelling,
            fail_fast: self.pipeline.fail_fast,
        }
    }

    /// What templates of row `idx` can read. `{{run.state}}` is worked out (a scan of every
    /// row) only for onExit steps, the only ones that see the run's end; others read `Running`.
    pub(super) fn scope(&self, idx: usize) -> Scope<'_> {
        let run_state = if self.is_on_exit(&self.rows[idx]) {
            self.run_state_so_far()
        } else {
            rs::RUNNING
        };
        Scope {
            run: &self.run,
            params: &self.params,
            rows: &self.rows,
            by_name: &self.by_name,
            run_state: run_state.as_str(),
            trial: self.is_trial(&self.rows[idx]),
        }
    }

    pub(super) fn run_state_so_far(&self) -> rs::RunState {
        if self.timed_out {
            return rs::FAILED;
        }
        if self.cancelling {
            return rs::CANCELLED;
        }
        let failed = self.rows.iter().any(|r| {
            !self.is_on_exit(r)
                && !self.is_trial(r)
                && (r.state == st::FAILED || r.state == st::CANCELLED)
        });
        if failed { rs::FAILED } else { rs::SUCCEEDED }
    }

    /// The children of a fan-out over an upstream output (a JSON list in that file).
    async fn expand(&self, step: &Step) -> Result<Vec<StepRow>, String> {
        let Some(ForEach::Ref(r)) = &step.for_each else {
            return Err("not a fan-out over an output".into());
        };
        let crate::spec::template::Ref::Output { step: from, name } = &r.reference else {
            return Err("not a fan-out over an output".into());
        };
        let up = self
            .by_name
            .get(from)
            .map(|&i| &self.rows[i])
            .ok_or_else(|| format!("step '{from}' has no single instance"))?;
        let dir = up
            .outputs
            .as_ref()
            .ok_or_else(|| format!("step '{from}' has no outputs"))?;
        let key = format!("{dir}/{name}");
        let text = match self.objects.get_bytes(&key).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                return Err(format!(
                    "cannot read forEach items: nothing stored at {key}"
                ));
            }
            Err(e) => return Err(format!("cannot read forEach items: {e}")),
        };
        let items: Vec<serde_json::Value> = serde_json::from_slice(&text).map_err(|e| {
            format!("forEach: output '{name}' of step '{from}' is not a JSON list: {e}")
        })?;
        Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, item)| StepRow {
                name: format!("{}[{i}]", step.name),
                step: step.name.clone(),
                item: Some(item.to_string()),
                state: st::PENDING,
                ..StepRow::default()
            })
            .collect())
    }

    pub(super) fn fail_permanently(&mut self, idx: usize, why: String) {
        self.set_state(idx, st::FAILED, Some(why));
        if self.pipeline.fail_fast
            && !self.is_on_exit(&self.rows[idx])
            && !self.is_trial(&self.rows[idx])
        {
            self.failed_fast = true;
        }
    }
}
