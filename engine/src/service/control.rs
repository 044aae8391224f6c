//! The operations that change a run: cancel, retry, resume and preempt. Each records what is
//! asked; the engine driving the run (or, when none does, whoever drives it next) carries it
//! out.

use std::path::Path;

use super::read::known_step;
use super::{Error, Principal, Service};
use crate::executor::Reason;
use crate::run::state::{attempt, run as rs, step as st};
use crate::run::transitions::{self, Reopen};

/// What `retry` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Retried {
    /// The run had succeeded: nothing to do.
    NothingToRetry { id: String },
    /// These steps went back to Pending and the run is Running again.
    Reopened { id: String, steps: Vec<String> },
}

/// A preempt request recorded for the running attempt of a step.
#[derive(Debug, PartialEq, Eq)]
pub struct Preempted {
    pub id: String,
    pub step: String,
    pub attempt: i64,
}

impl Service {
    /// Asks the run's engine to cancel it; returns its id. A run that has ended is a
    /// conflict (carrying its state: the CLI says so and exits 0).
    pub async fn cancel(&self, who: &Principal, reference: &str) -> Result<String, Error> {
        let run = self.lookup_to_change(who, reference, "cancel runs").await?;
        if run.state != rs::RUNNING {
            return Err(Error::conflict(
                format!("run {} already ended: {}", run.id, run.state),
                &run.id,
                run.state.as_str(),
            ));
        }
        self.store.request_cancel(&run.id).await?;
        Ok(run.id)
    }

    /// Failed and cancelled steps (and placeholders of fan-outs over outputs that were
    /// skipped) go back to Pending with a fresh retry budget, their attempt numbers going on;
    /// `onExit` steps run again too (the run will end again). The run is Running again under
    /// its id, for an engine to drive. A running run is a conflict.
    pub async fn retry(&self, who: &Principal, reference: &str) -> Result<Retried, Error> {
        let run = self.lookup_to_change(who, reference, "retry runs").await?;
        let id = run.id.clone();
        if run.state == rs::RUNNING {
            let how = match crate::run::engine::gone(&run) {
                Some(gone) => format!("{gone}; `sluice resume {id}` continues it"),
                None => "retry it once it has ended".to_owned(),
            };
            return Err(Error::conflict(
                format!("run {id} is still running; {how}"),
                &id,
                run.state.as_str(),
            ));
        }
        if run.state == rs::SUCCEEDED {
            return Ok(Retried::NothingToRetry { id });
        }
        let mut steps = self.store.steps(&id).await?;
        let pipeline = crate::run::driver::pipeline_of(&run)?;
        let decided: Vec<Reopen> = steps
            .iter()
            .map(|s| {
                let on_exit = pipeline.step(&s.step).is_some_and(|p| p.on_exit);
                transitions::reopen(s.state, s.name.ends_with("[*]"), on_exit)
            })
            .collect();
        // Those with a fresh budget first, then the onExit steps, each in the file's order.
        let mut again = Vec::new();
        for (s, how) in steps.iter_mut().zip(&decided) {
            if *how == Reopen::Fresh {
                s.state = st::PENDING;
                s.reason = None;
                s.retries_used = 0;
                s.not_before = None;
                s.ended_at = None;
                again.push(s.clone());
            }
        }
        for (s, how) in steps.iter_mut().zip(&decided) {
            if *how == Reopen::Again {
                s.state = st::PENDING;
                s.reason = None;
                s.ended_at = None;
                again.push(s.clone());
            }
        }
        self.store.reopen(&id, &again).await?;
        Ok(Retried::Reopened {
            id,
            steps: again.into_iter().map(|s| s.name).collect(),
        })
    }

    /// Checks that the principal may resume run `reference` and returns its id; the caller
    /// drives it (an ended run is not an error: driving it reports how it ended).
    pub async fn resume(&self, who: &Principal, reference: &str) -> Result<String, Error> {
        Ok(self
            .lookup_to_change(who, reference, "resume runs")
            .await?
            .id)
    }

    /// Asks the runtime of `step`'s running attempt to stop it as the scheduler would
    /// (SIGTERM, the grace period, SIGKILL, a final checkpoint sync); its engine queues the
    /// step again and it resumes from that checkpoint. A step that is not running is a
    /// conflict carrying the step's state.
    pub async fn preempt(
        &self,
        who: &Principal,
        reference: &str,
        step: &str,
    ) -> Result<Preempted, Error> {
        let run = self
            .lookup_to_change(who, reference, "preempt steps")
            .await?;
        let id = run.id;
        let steps = self.store.steps(&id).await?;
        known_step(&id, &steps, step)?;
        let state = steps
            .iter()
            .find(|s| s.name == step)
            .map_or(st::PENDING, |s| s.state);
        let running = self
            .store
            .attempts(&id)
            .await?
            .into_iter()
            .filter(|a| a.step == step && a.state == attempt::RUNNING)
            .max_by_key(|a| a.number);
        let (Some(running), st::RUNNING) = (running, state) else {
            return Err(Error::conflict(
                format!("step '{step}' of run {id} is not running (it is {state})"),
                &id,
                state.as_str(),
            ));
        };
        if crate::executor::kubernetes::is_handle(&running.dir) {
            crate::executor::kubernetes::stop(&running.dir, Reason::Preempt).await?;
        } else {
            crate::executor::local::stop::ask(Path::new(&running.dir), Reason::Preempt)?;
        }
        Ok(Preempted {
            id,
            step: step.to_owned(),
            attempt: running.number,
        })
    }
}
