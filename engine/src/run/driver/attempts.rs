//! Attempts: reattached after a restart, and their ends (finished or lost) turned into what
//! their steps do next. Each end is decided here and committed before anything acts on it.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_runtime::contract::{self, End};

use super::{Driver, Error, Live, sweeping};
use crate::executor::{Event as Happened, Executor, Probe, Reason};
use crate::run::launch;
use crate::run::state::{attempt as at, step as st};
use crate::spec::model::RetryOn;
use crate::store::{AttemptRow, Change, Event};
use crate::time::{now_ms, now_rfc3339};

impl<E: Executor> Driver<E> {
    /// What the executor reports of an attempt: its end, or that it is lost.
    pub(super) async fn on_event(&mut self, event: Happened) -> Result<(), Error> {
        let (attempt, ended) = match event {
            Happened::Ended { attempt, result } => (attempt, Ok(result.map(|r| *r))),
            Happened::Lost { attempt, reason } => (attempt, Err(reason)),
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
            let result = crate::run::reap::result_of(&live.attempt, recorded);
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
        attempt.state = at::LOST.into();
        attempt.reason = Some(reason.clone());
        attempt.ended_at = Some(now_rfc3339());
        let idx = self.index_of(name)?;
        if self.cancelling && !self.is_on_exit(&self.rows[idx]) {
            self.set_state(idx, st::CANCELLED, Some("the run was cancelled".into()));
        } else if self.trial_stopping(idx) {
            let why = stopped_reason(self.rows[idx].reason.as_deref());
            self.set_state(idx, st::STOPPED, Some(why));
            self.trial_ended(idx, &BTreeMap::new());
        } else {
            // Lost work resumes at once and never counts against retry.limit.
            self.rows[idx].not_before = None;
            self.set_state(
                idx,
                st::QUEUED,
                Some(format!("attempt {} lost: {reason}", attempt.number)),
            );
        }
        self.reports.push(idx);
        let row = self.rows[idx].clone();
        self.commit(Change {
            steps: vec![&row],
            attempts: vec![&attempt],
            events: vec![Event {
                step: Some(name.to_owned()),
                kind: "attempt-lost".into(),
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
        let step = self.step_of(&self.rows[idx])?.clone();
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
        let stopping = self.trial_stopping(idx);
        let missing_objective = self
            .trial_objective(idx)
            .filter(|m| result.end == End::Succeeded && !result.metrics.contains_key(m));
        match result.end {
            _ if stopping => {
                attempt.state = if result.end == End::Succeeded {
                    at::SUCCEEDED
                } else {
                    at::CANCELLED
                }
                .into();
                let why = stopped_reason(self.rows[idx].reason.as_deref());
                self.set_state(idx, st::STOPPED, Some(why));
            }
            End::Succeeded if missing_objective.is_some() => {
                attempt.state = at::FAILED.into();
                let metric = missing_objective.unwrap_or_default();
                self.fail_permanently(
                    idx,
                    format!(
                        "the trial exited 0 without reporting its objective '{metric}' (print `{metric}=VALUE` or append to $SLUICE_METRICS_FILE)"
                    ),
                );
            }
            End::Succeeded => {
                attempt.state = at::SUCCEEDED.into();
                let outputs = format!("{objects}/outputs");
                if let Some(key) = self.rows[idx].cache_key.clone() {
                    // The cache entry is committed before the step's `Succeeded` is (that
                    // goes with the next commit): a step said to have succeeded always left
                    // its entry, and an engine that dies between the two writes the same
                    // entry again when the next engine collects the attempt.
                    self.store
                        .cache_put(&self.run.team, &key, &self.run.id, name, &outputs)
                        .await?;
                }
                self.rows[idx].outputs = Some(outputs);
                self.set_state(idx, st::SUCCEEDED, None);
            }
            End::Terminated => {
                if self.cancelling {
                    attempt.state = at::CANCELLED.into();
                    self.set_state(idx, st::CANCELLED, Some("the run was cancelled".into()));
                } else {
                    // Stopped from outside (a preemption): back to the queue at once.
                    attempt.state = at::PREEMPTED.into();
                    self.rows[idx].not_before = None;
                    self.set_state(
                        idx,
                        st::QUEUED,
                        Some(format!("attempt {} preempted", attempt.number)),
                    );
                }
            }
            End::Failed | End::Timeout => {
                let timeout = result.end == End::Timeout;
                attempt.state = if timeout { at::TIMEOUT } else { at::FAILED }.into();
                let why = result.reason.clone().unwrap_or_else(|| {
                    match (result.exit_code, result.signal) {
                        (_, Some(sig)) => format!("killed by signal {sig}"),
                        (Some(code), _) => format!("exit code {code}"),
                        _ => "failed".to_owned(),
                    }
                });
                let why = if timeout {
                    format!(
                        "timed out after {}",
                        step.timeout
                            .map(crate::spec::units::format_duration)
                            .unwrap_or_default()
                    )
                } else {
                    why
                };
                let on = if timeout {
                    RetryOn::Timeout
                } else {
                    RetryOn::Failure
                };
                let used = self.rows[idx].retries_used;
                if self.cancelling && !step.on_exit {
                    self.set_state(idx, st::CANCELLED, Some("the run was cancelled".into()));
                } else if step.retry.on.contains(&on) && used < i64::from(step.retry.limit) {
                    let backoff =
                        step.retry.backoff.as_secs_f64() * step.retry.factor.powi(used as i32);
                    let backoff = backoff.min(step.retry.max_backoff.as_secs_f64());
                    self.rows[idx].retries_used = used + 1;
                    self.rows[idx].not_before = Some(now_ms() + (backoff * 1000.0) as i64);
                    self.set_state(
                        idx,
                        st::QUEUED,
                        Some(format!(
                            "retry in {} ({why})",
                            crate::spec::units::format_duration(Duration::from_secs_f64(backoff))
                        )),
                    );
                } else {
                    self.fail_permanently(idx, why);
                }
            }
        }
        if self.is_trial(&self.rows[idx]) {
            self.trial_ended(idx, &result.metrics);
        }
        self.reports.push(idx);
        let row = self.rows[idx].clone();
        // Deferred: committed with the next start, or before the engine waits (see `Pending`).
        self.pending.events.push(Event {
            step: Some(name.to_owned()),
            kind: "attempt-ended".into(),
            detail: Some(attempt.state.clone()),
        });
        self.pending.steps.push(row);
        self.pending.attempts.push(attempt);
        if self.cancelling {
            self.stop_live(Reason::Cancel).await;
        }
        Ok(())
    }
}

/// A stopped trial's reason: what it was asked to stop for.
fn stopped_reason(reason: Option<&str>) -> String {
    reason
        .and_then(|r| r.strip_prefix(sweeping::STOPPING))
        .unwrap_or("stopped")
        .to_owned()
}
