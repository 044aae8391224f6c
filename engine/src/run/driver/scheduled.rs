//! Cluster mode: starting steps the process's scheduler admits onto the Cluster's nodes, and
//! asking the victims it chose for them to stop; or, with `admission: kueue`, starting them
//! unplaced for Kueue to admit.

use std::collections::HashMap;

use super::{Driver, Error, Watcher};
use crate::executor::{Executor, Handle, Reason};
use crate::run::admission::Scheduler;
use crate::run::cluster::Scheduling;
use crate::run::history;
use crate::store::{self, Event, EventKind, Placed};

/// At most this many steps of one run wait on the cluster at once.
const MAX_WAITING: usize = 256;

impl<E: Executor> Driver<E> {
    /// `admission: kueue`: Kueue admits the steps (each attempt a suspended Job), so the
    /// scheduler is not asked; ready steps start while the pipeline's parallelism allows, with
    /// no nodes, a trial only when its team's `maxTrialsPerMinute` allows (the rate shared by
    /// every engine on the home, as in cluster mode).
    pub(super) async fn start_for_kueue(
        &mut self,
        scheduler: &Scheduler,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        let scheduling = scheduler.scheduling();
        let limit = self.pipeline.parallelism.map_or(usize::MAX, |p| p as usize);
        let now = self.clock.now_ms();
        let ready: Vec<usize> = self
            .queued
            .iter()
            .copied()
            .filter(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now))
            .collect();
        for idx in ready {
            if self.cancel_unstarted(idx, watcher).await? {
                continue;
            }
            let name = self.rows[idx].name.clone();
            if self.live.len() >= limit {
                let reason = format!("waiting: the pipeline's parallelism ({limit}) is reached");
                self.show_wait(&name, reason, watcher);
                continue;
            }
            let team = self.run.team.clone();
            let rate = self
                .trial_steps
                .contains_key(&self.rows[idx].step)
                .then(|| scheduling.trial_interval_ms(&team))
                .flatten();
            // Nothing of sluice's nodes is held: Kueue's quota is Kueue's.
            self.start_one(
                idx,
                &name,
                &team,
                rate,
                None,
                |_| Some(String::new()),
                scheduling,
                watcher,
            )
            .await?;
        }
        Ok(())
    }

    /// Row `idx`'s step's estimate from history (`run::history`), read from the store once
    /// per step of the file for the life of this driver.
    async fn history_of(&mut self, idx: usize) -> Result<Option<u64>, Error> {
        let step = &self.rows[idx].step;
        if let Some(known) = self.history.get(step) {
            return Ok(*known);
        }
        let durations = self
            .store
            .durations(&self.run.team, &self.run.name, step, history::LATEST)
            .await?;
        let estimate = history::estimate(&durations);
        self.history.insert(step.clone(), estimate);
        Ok(estimate)
    }

    /// Cluster mode: this run's waiting steps handed to the process's scheduler, whose cycle
    /// over every run's waiting and running steps decides for them; starts this run's
    /// admitted steps on their nodes, asks the victims chosen for them to stop, and gives the
    /// others their reasons. Queued rows past a cancellation or failFast end as in machine
    /// mode.
    pub(super) async fn start_scheduled(
        &mut self,
        scheduler: &Scheduler,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        let scheduling = scheduler.scheduling();
        let now = self.clock.now_ms();
        let ready: Vec<usize> = self
            .queued
            .iter()
            .copied()
            .filter(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now))
            .collect();
        let mut candidates = Vec::with_capacity(ready.len());
        for idx in ready {
            if self.cancel_unstarted(idx, watcher).await? {
                continue;
            }
            let mut ask = scheduling.ask(&self.run.team, self.step_of(&self.rows[idx])?);
            if ask.timeout_ms.is_none() && scheduling.reserves() {
                ask.history_ms = self.history_of(idx).await?;
            }
            candidates.push((idx, ask));
        }
        // Only the steps this run could start now (its parallelism's room, at most
        // MAX_WAITING) wait on the cluster, highest priority first: the others could not start
        // whatever the cycle said, and leaving them out keeps each cycle's cost bounded.
        let limit = self.pipeline.parallelism.map_or(usize::MAX, |p| p as usize);
        let room = limit.saturating_sub(self.live.len()).min(MAX_WAITING);
        candidates.sort_by_key(|(idx, ask)| (std::cmp::Reverse(ask.priority), *idx));
        for (idx, _) in candidates.iter().skip(room) {
            let reason = if room < MAX_WAITING {
                format!("waiting: the pipeline's parallelism ({limit}) is reached")
            } else {
                format!("waiting: behind {MAX_WAITING} earlier steps of this run")
            };
            let name = self.rows[*idx].name.clone();
            self.show_wait(&name, reason, watcher);
        }
        candidates.truncate(room);
        if candidates.is_empty() && !self.registered {
            return Ok(());
        }
        self.registered = !candidates.is_empty();
        let mut mine = Vec::with_capacity(candidates.len());
        let mut asks = HashMap::with_capacity(candidates.len());
        for (idx, ask) in candidates {
            let json = serde_json::to_string(&ask).unwrap_or_default();
            mine.push((self.rows[idx].name.clone(), json));
            asks.insert(self.rows[idx].name.clone(), (ask, mine.len() - 1));
        }
        // Nothing of this run changed since it last wrote: the newest cycle's verdict, when
        // the scheduler said it changed, else nothing to do.
        let unchanged = self.pending.is_empty() && self.last_mine.as_ref() == Some(&mine);
        let news = std::mem::take(&mut self.verdict_news);
        let verdict = if unchanged {
            if !news {
                return Ok(());
            }
            match scheduler
                .decide_latest(&self.run.id)
                .await
                .map_err(Error::Invalid)?
            {
                Some(v) => v,
                None => return Ok(()),
            }
        } else {
            let mut pending = std::mem::take(&mut self.pending);
            let before = pending.change();
            let verdict = scheduler
                .verdict(&self.store, &self.run.id, before, &mine, now)
                .await?
                .map_err(Error::Invalid)?;
            self.last_mine = Some(mine);
            verdict
        };
        // Victims are told once their preemption is committed (its event), each once.
        let mut victims = Vec::new();
        for (dir, run, step, for_step) in &verdict.preempt {
            let handle = Handle::new(dir.clone());
            if self.executor.stop_asked(&handle).await {
                continue;
            }
            // As `sluice preempt` asks: the runtime stops it, syncs its checkpoint, and its
            // engine queues it again to resume from there.
            let whose = if *run == self.run.id {
                String::new()
            } else {
                format!(" of run {run}")
            };
            watcher.note(&format!(
                "preempting {step}{whose} to make room for {for_step}"
            ));
            self.pending.events.push(Event {
                step: Some(for_step.clone()),
                kind: EventKind::Preempting,
                detail: Some(format!("{run}/{step}")),
            });
            victims.push(handle);
        }
        if !victims.is_empty() {
            self.flush().await?;
        }
        for handle in victims {
            if let Err(e) = self.executor.stop(&handle, Reason::Preempt).await {
                tracing::warn!("cannot preempt {handle}: {e}");
            }
        }
        for (name, reason) in verdict.wait {
            self.show_wait(&name, reason, watcher);
        }
        let limit = self.pipeline.parallelism.map_or(usize::MAX, |p| p as usize);
        for (name, nodes) in verdict.admit {
            if self.live.len() >= limit {
                let reason = format!("waiting: the pipeline's parallelism ({limit}) is reached");
                self.show_wait(&name, reason, watcher);
                continue;
            }
            let (Some(&idx), Some((ask, _))) = (self.by_name.get(&name), asks.get(&name)) else {
                continue;
            };
            let rate = self
                .trial_steps
                .contains_key(&self.rows[idx].step)
                .then(|| scheduling.trial_interval_ms(&ask.team))
                .flatten();
            let claim = (
                serde_json::to_string(ask).unwrap_or_default(),
                serde_json::to_string(&nodes).unwrap_or_default(),
            );
            let place = |held: &[store::Claim]| scheduling.place(held, ask, &nodes);
            self.start_one(
                idx,
                &name,
                &ask.team,
                rate,
                Some(claim),
                place,
                scheduling,
                watcher,
            )
            .await?;
        }
        Ok(())
    }

    /// Starts step `idx` if its trial rate (`rate`, the interval in ms, for a trial) is due
    /// and `place` finds room among the running attempts, in the store's transaction that
    /// records its attempt (with `claim`: its request and nodes); otherwise the prepared
    /// launch is discarded and the step waits, a trial saying it waits for its team's rate.
    #[allow(clippy::too_many_arguments)]
    async fn start_one(
        &mut self,
        idx: usize,
        name: &str,
        team: &str,
        rate: Option<i64>,
        claim: Option<(String, String)>,
        place: impl FnOnce(&[store::Claim]) -> Option<String>,
        scheduling: &Scheduling,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        if rate.is_some()
            && let Some(until) = self.rate_wake
            && until > self.clock.now_ms()
        {
            // Known not due yet: no launch is prepared only to be put back.
            let reason = scheduling.rate_reason(team);
            self.show_wait(name, reason, watcher);
            return Ok(());
        }
        let Some(ready) = self.prepare_start(idx, watcher).await? else {
            return Ok(());
        };
        let mut ready = *ready;
        if let Some((job, nodes)) = claim {
            ready.attempt.job = Some(job);
            ready.attempt.nodes = Some(nodes);
        }
        let mut pending = std::mem::take(&mut self.pending);
        let before = pending.change();
        let placed = self
            .store
            .start_placed(
                &self.run.id,
                &ready.row,
                &ready.attempt,
                before,
                rate.map(|interval_ms| store::Rate {
                    team,
                    interval_ms,
                    now: self.clock.now_ms(),
                }),
                place,
            )
            .await?;
        match placed {
            Placed::Started(gpus) => {
                let assigned: Vec<u32> = gpus.split(',').filter_map(|g| g.parse().ok()).collect();
                self.launch_started(idx, ready, assigned, watcher).await?;
            }
            // Another engine took the room first: it waits for the next cycle, and writes its
            // claims again then.
            Placed::NoRoom => {
                self.executor.discard(&ready.handle).await;
                self.last_mine = None;
                // Woken to try again soon even if the cycle goes on deciding the same.
                self.rate_wake = Some(self.clock.now_ms() + 500);
            }
            Placed::RateLimited { until } => {
                self.executor.discard(&ready.handle).await;
                self.rate_wake = Some(until);
                let reason = scheduling.rate_reason(team);
                self.show_wait(name, reason, watcher);
            }
        }
        Ok(())
    }
}
