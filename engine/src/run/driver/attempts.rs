//! Attempts: reattached after a restart, and their ends (finished or lost) turned into what
//! their steps do next. Each end is decided here and committed before anything acts on it.

use std::collections::BTreeMap;

use sluice_runtime::contract::{self, End};

use super::{Driver, Error, Live, sweeping};
use crate::executor::{Event as Happened, Executor, Probe, Reason};
use crate::run::launch;
use crate::run::state::{attempt as at, step as st};
use crate::run::transitions::{self, Ended, Outcome};
use crate::spec::model::Step;
use crate::store::{AttemptRow, Change, Event, EventKind};

impl<E: Executor> Driver<E> {
    /// What the executor reports of an attempt: its end, or that it is lost.
    pub(super) async fn on_event(&mut self, event: Happened) -> Result<(), Error> {
        // What this run holds changed: its next turn in cluster mode writes its claims
        // again and takes a fresh verdict.
        self.last_mine = None;
        let (attempt, ended) = match event {
            Happened::Ended { attempt, result } => (attempt, Ok(result.map(|r| *r))),
            Happened::Lost { attempt, reason } => (attempt, Err(reason)),
            Happened::Waiting { attempt, reason } => {
                let live = self
                    .live
                    .get(&attempt.step)
                    .is_some_and(|l| l.attempt.number == attempt.number);
                if live && let Ok(idx) = self.index_of(&attempt.step) {
                    self.rows[idx].reason = reason;
                    self.pending.steps.push(self.rows[idx].clone());
                    self.reports.push(idx);
                }
                return Ok(());
            }
        };
        if self
            .live
            .get(&attempt.step)
            .is_none_or(|l| l.attempt.number != attempt.number)
        {
            return Ok(());
        }
        match ended {
            Ok(result) => self.finish_attempt(&attempt.step, result).await,
            Err(reason) => self.lose_attempt(&attempt.step, reason).await,
        }
    }

    /// After a restart: attempts still running are watched again; those that ended while no
    /// engine was there are collected.
    pub(super) async fn reattach(&mut self, attempts: Vec<AttemptRow>) -> Result<(), Error> {
        // Attempts whose end another `sluice` recorded while no engine drove the run
        // (`run::reap`): their steps still say Running, and what follows is decided now.
        let mut collected: Vec<AttemptRow> = Vec::new();
        for a in attempts.iter().filter(|a| a.state != at::RUNNING) {
            let Some(&idx) = self.by_name.get(&a.step) else {
                continue;
            };
            let row = &self.rows[idx];
            if row.state == st::RUNNING
                && row.attempts == a.number
                && !self.sweep_rows.contains_key(&row.name)
            {
                collected.push(a.clone());
            }
        }
        for a in collected {
            let step = a.step.clone();
            let lost = (a.state == at::LOST).then(|| a.reason.clone().unwrap_or_default());
            let live = Live::new(a);
            let recorded = self.executor.result(&live.handle).await;
            let result = crate::run::reap::result_of(&live.attempt, recorded, self.clock.as_ref());
            self.live.insert(step.clone(), live);
            match lost {
                Some(reason) => self.lose_attempt(&step, reason).await?,
                None => self.finish_attempt(&step, result).await?,
            }
        }
        for a in attempts.into_iter().filter(|a| a.state == at::RUNNING) {
            let live = Live::new(a);
            let id = self.attempt_id(&live.attempt.step, live.attempt.number);
            let step = id.step.clone();
            let found = self.executor.reattach(&id, &live.handle).await?;
            self.live.insert(step.clone(), live);
            match found {
                Probe::Running => {}
                Probe::Ended(result) => self.finish_attempt(&step, Some(*result)).await?,
                Probe::Lost(reason) => self.lose_attempt(&step, reason).await?,
            }
        }
        // A step Running with no attempt running (cannot happen, but never strand one).
        let stranded: Vec<usize> = (0..self.rows.len())
            .filter(|&i| {
                self.rows[i].state == st::RUNNING
                    && !self.live.contains_key(&self.rows[i].name)
                    && !self.sweep_rows.contains_key(&self.rows[i].name)
            })
            .collect();
        for i in stranded {
            self.set_state(i, st::QUEUED, None);
            let row = self.rows[i].clone();
            self.commit(Change {
                steps: vec![&row],
                ..Change::default()
            })
            .await?;
        }
        Ok(())
    }

    /// Records that an attempt is gone without an end, and what its step does next.
    pub(super) async fn lose_attempt(&mut self, name: &str, reason: String) -> Result<(), Error> {
        let Some(live) = self.live.remove(name) else {
            return Ok(());
        };
        let mut attempt = live.attempt;
        attempt.state = at::LOST;
        attempt.reason = Some(reason.clone());
        attempt.ended_at = Some(self.clock.now_rfc3339());
        let idx = self.index_of(name)?;
        let step = self.step_arc(&self.rows[idx])?;
        let outcome = self.decide(idx, &step, attempt.number, Ended::Lost(&reason), None);
        let stopped = outcome.state == st::STOPPED;
        self.apply(idx, outcome);
        if stopped {
            self.trial_ended(idx, &BTreeMap::new());
        }
        self.reports.push(idx);
        let row = self.rows[idx].clone();
        self.commit(Change {
            steps: vec![&row],
            attempts: vec![&attempt],
            events: vec![Event {
                step: Some(name.to_owned()),
                kind: EventKind::AttemptLost,
                detail: Some(reason),
            }],
            ..Change::default()
        })
        .await?;
        Ok(())
    }

    /// Records how an attempt ended and what its step does next.
    pub(super) async fn finish_attempt(
        &mut self,
        name: &str,
        result: Option<contract::Result>,
    ) -> Result<(), Error> {
        let Some(result) = result else {
            return self
                .lose_attempt(name, "the runtime stopped without recording the end".into())
                .await;
        };
        let Some(live) = self.live.remove(name) else {
            return Ok(());
        };
        let Live {
            mut attempt,
            handle,
        } = live;
        let idx = self.index_of(name)?;
        let step = self.step_arc(&self.rows[idx])?;
        crate::run::reap::record_end(&mut attempt, &result);
        if !result.metrics.is_empty() {
            let mut metrics: BTreeMap<String, f64> = self.rows[idx]
                .metrics
                .as_deref()
                .and_then(|m| serde_json::from_str(m).ok())
                .unwrap_or_default();
            metrics.extend(result.metrics.clone());
            self.rows[idx].metrics = serde_json::to_string(&metrics).ok();
        }
        let objects = launch::object_key(&self.run.team, &self.run.id, name, attempt.number);
        self.executor.ended(&handle, &objects);
        let missing_objective = self
            .trial_objective(idx)
            .filter(|m| result.end == End::Succeeded && !result.metrics.contains_key(m));
        let ended = Ended::Recorded {
            end: result.end,
            reason: result.reason.as_deref(),
            exit_code: result.exit_code,
            signal: result.signal,
        };
        let outcome = self.decide(
            idx,
            &step,
            attempt.number,
            ended,
            missing_objective.as_deref(),
        );
        attempt.state = outcome.attempt;
        if outcome.keep_outputs {
            let outputs = format!("{objects}/outputs");
            if let Some(key) = self.rows[idx].cache_key.clone() {
                // The cache entry is committed before the step's `Succeeded` is (that goes
                // with the next commit): a step said to have succeeded always left its
                // entry, and an engine that dies between the two writes the same entry again
                // when the next engine collects the attempt.
                self.store
                    .cache_put(&self.run.team, &key, &self.run.id, name, &outputs)
                    .await?;
            }
            self.rows[idx].outputs = Some(outputs);
        }
        self.apply(idx, outcome);
        if self.is_trial(&self.rows[idx]) {
            self.trial_ended(idx, &result.metrics);
        }
        self.reports.push(idx);
        let row = self.rows[idx].clone();
        // Deferred: committed with the next start, or before the engine waits (see `Pending`).
        self.pending.events.push(Event {
            step: Some(name.to_owned()),
            kind: EventKind::AttemptEnded,
            detail: Some(attempt.state.into()),
        });
        self.pending.steps.push(row);
        self.pending.attempts.push(attempt);
        if self.cancelling {
            self.stop_live(Reason::Cancel).await;
        }
        Ok(())
    }

    /// What row `idx` (an instance of `step`) knows of itself, for the decisions.
    fn step_facts<'s>(
        &'s self,
        idx: usize,
        step: &'s Step,
        missing_objective: Option<&'s str>,
    ) -> transitions::Step<'s> {
        transitions::Step {
            on_exit: step.on_exit,
            trial: self.is_trial(&self.rows[idx]),
            stopping: self
                .trial_stopping(idx)
                .then(|| self.rows[idx].reason.as_deref().unwrap_or_default()),
            retry: &step.retry,
            retries_used: self.rows[idx].retries_used,
            timeout: step.timeout,
            missing_objective,
        }
    }

    /// What attempt `number` of row `idx` ending as `ended` means for the row (a trial that
    /// succeeded without its objective: `missing_objective`).
    fn decide(
        &self,
        idx: usize,
        step: &Step,
        number: i64,
        ended: Ended<'_>,
        missing_objective: Option<&str>,
    ) -> Outcome {
        transitions::attempt_ended(
            &self.facts(),
            &self.step_facts(idx, step, missing_objective),
            number,
            ended,
            sweeping::STOPPING,
            self.clock.now_ms(),
        )
    }

    /// Applies a decision to row `idx` in memory; the caller commits it.
    fn apply(&mut self, idx: usize, outcome: Outcome) {
        self.rows[idx].not_before = outcome.not_before;
        self.rows[idx].retries_used = outcome.retries_used;
        if outcome.fail_fast {
            self.failed_fast = true;
        }
        self.set_state(idx, outcome.state, outcome.reason);
    }
}
