//! Starting queued steps on this machine's pool. An attempt is prepared by the executor,
//! committed with its share of the pool (and what was pending), and only then launched.

use std::collections::BTreeMap;
use std::path::Path;

use sluice_runtime::contract::{self, End, Launch};

use super::{Driver, Error, Watcher};
use crate::executor::{AttemptId, Executor, Handle, Placement};
use crate::run::launch::{self, Stop};
use crate::run::state::{attempt as at, step as st};
use crate::spec::model::Step;
use crate::store::{AttemptRow, StepRow};

/// An attempt about to start: its launch prepared by the executor, not yet committed.
pub(super) struct Ready {
    pub launch: Launch,
    pub id: AttemptId,
    pub handle: Handle,
    pub attempt: AttemptRow,
    pub row: StepRow,
    /// GPUs the whole gang needs.
    pub gpus: u32,
}

impl<E: Executor> Driver<E> {
    /// Starts queued steps while parallelism and the machine's pool allow.
    pub(super) async fn start_queued(&mut self, watcher: &mut dyn Watcher) -> Result<(), Error> {
        if let Some(scheduler) = self.scheduler.clone() {
            if scheduler.scheduling().admitted_by_kueue() {
                return self.start_for_kueue(&scheduler, watcher).await;
            }
            return self.start_scheduled(&scheduler, watcher).await;
        }
        let limit = self.pipeline.parallelism.map_or(usize::MAX, |p| p as usize);
        let now = self.clock.now_ms();
        // The step that found no room waits in the pool's queue: it is tried again when the
        // queue says it may fit (or the driver resyncs), not at every pass of the loop.
        if let Some((blocked, _)) = self.no_room {
            let head = self
                .queued
                .iter()
                .copied()
                .find(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now));
            if head == Some(blocked) && !std::mem::take(&mut self.room_may_be_free) {
                return Ok(());
            }
        }
        self.no_room = None;
        // In batches: collecting the whole queue each time would make long queues quadratic.
        loop {
            let room = limit.saturating_sub(self.live.len()).min(64);
            if room == 0 {
                return Ok(());
            }
            let batch: Vec<usize> = self
                .queued
                .iter()
                .copied()
                .filter(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now))
                .take(room)
                .collect();
            if batch.is_empty() {
                return Ok(());
            }
            for idx in batch {
                if self.cancel_unstarted(idx, watcher).await? {
                    continue;
                }
                if !self.start(idx, watcher).await? {
                    // No room in the pool: wait for an attempt to end, and say so.
                    let r = &self.step_of(&self.rows[idx])?.resources;
                    let workers = u64::from(r.workers.max(1));
                    let need = crate::store::Need {
                        millicpu: i64::try_from(r.millicpu * workers).unwrap_or(i64::MAX),
                        memory: r
                            .memory
                            .map_or(0, |m| i64::try_from(m * workers).unwrap_or(i64::MAX)),
                        gpus: r.gpu.saturating_mul(r.workers.max(1)),
                    };
                    let mut needs = vec![format!("{} CPU", (r.millicpu * workers) as f64 / 1000.0)];
                    if let Some(m) = r.memory {
                        needs.push(format!("{} MiB memory", m * workers / (1 << 20)));
                    }
                    if r.gpu > 0 {
                        needs.push(format!("{} GPU", u64::from(r.gpu) * workers));
                    }
                    let reason = format!(
                        "waiting: needs {}; this machine's pool is held by running steps",
                        needs.join(", ")
                    );
                    let name = self.rows[idx].name.clone();
                    self.show_wait(&name, reason, watcher);
                    self.no_room = Some((idx, need));
                    return Ok(());
                }
            }
        }
    }

    /// A queued row of a run being cancelled, or stopped by failFast, ends `Cancelled` rather
    /// than starting (`onExit` steps still start). True when it did.
    pub(super) async fn cancel_unstarted(
        &mut self,
        idx: usize,
        watcher: &mut dyn Watcher,
    ) -> Result<bool, Error> {
        if !(self.cancelling || self.failed_fast) || self.is_on_exit(&self.rows[idx]) {
            return Ok(false);
        }
        let why = if self.cancelling {
            "the run was cancelled"
        } else {
            "not started: a step failed (failFast)"
        };
        self.set_state(idx, st::CANCELLED, Some(why.into()));
        self.commit_row(idx, watcher).await?;
        Ok(true)
    }

    /// Starts one attempt of row `idx`, or ends it `Cached`. False: the pool has no room.
    async fn start(&mut self, idx: usize, watcher: &mut dyn Watcher) -> Result<bool, Error> {
        let Some(ready) = self.prepare_start(idx, watcher).await? else {
            return Ok(true);
        };
        // Commit first: the attempt and its share of the pool exist before its runtime does.
        let mut pending = std::mem::take(&mut self.pending);
        let before = pending.change();
        let started = self
            .store
            .start_attempt(
                &self.run.id,
                &ready.row,
                &ready.attempt,
                &self.capacity,
                ready.gpus,
                before,
            )
            .await?;
        let Some(assigned) = started else {
            self.executor.discard(&ready.handle).await;
            return Ok(false);
        };
        self.launch_started(idx, *ready, assigned, watcher).await?;
        Ok(true)
    }

    /// The attempt row `idx` would start, prepared by the executor; None when the row ended
    /// without one (skipped, failed before starting, or cached), which is committed.
    pub(super) async fn prepare_start(
        &mut self,
        idx: usize,
        watcher: &mut dyn Watcher,
    ) -> Result<Option<Box<Ready>>, Error> {
        let step = self.step_arc(&self.rows[idx])?;
        let number = self.rows[idx].attempts + 1;
        let id = self.attempt_id(&self.rows[idx].name, number);
        let built = launch::build(
            &self.scope(idx),
            &self.executor.runtime_dir(&id),
            &step,
            &self.rows[idx],
            number,
            &self.settings,
            // Cluster mode: the scheduler has checked the GPUs against the Cluster's nodes.
            if self.cluster_mode {
                usize::MAX
            } else {
                self.capacity.gpus.len()
            },
        );
        let launch = match built {
            Ok(l) => l,
            Err(Stop::Skip(why)) => {
                self.set_state(idx, st::SKIPPED, Some(why));
                return self.commit_row(idx, watcher).await.map(|()| None);
            }
            Err(Stop::Fail(why)) => {
                self.fail_permanently(idx, why);
                return self.commit_row(idx, watcher).await.map(|()| None);
            }
        };
        if step.cache.is_some() && self.try_cache(idx, &step, &launch).await? {
            return self.commit_row(idx, watcher).await.map(|()| None);
        }
        let handle = self.executor.prepare(&id, &launch).await?;
        let now = self.clock.now_rfc3339();
        let attempt = AttemptRow {
            step: self.rows[idx].name.clone(),
            number,
            state: at::RUNNING,
            dir: handle.as_str().to_owned(),
            millicpu: step.resources.millicpu as i64 * i64::from(step.resources.workers),
            memory: step.resources.memory.unwrap_or(0) as i64 * i64::from(step.resources.workers),
            started_at: now.clone(),
            ..AttemptRow::default()
        };
        let mut row = self.rows[idx].clone();
        row.state = st::RUNNING;
        row.reason = None;
        row.attempts = number;
        row.not_before = None;
        if row.started_at.is_none() {
            row.started_at = Some(now);
        }
        let gpus = step.resources.gpu * step.resources.workers.max(1);
        Ok(Some(Box::new(Ready {
            launch,
            id,
            handle,
            attempt,
            row,
            gpus,
        })))
    }

    /// Launches a committed attempt (holding the GPUs `assigned`) through the executor.
    pub(super) async fn launch_started(
        &mut self,
        idx: usize,
        ready: Ready,
        assigned: Vec<u32>,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        self.last_mine = None;
        let Ready {
            mut launch,
            id,
            handle,
            mut attempt,
            row,
            gpus: _,
        } = ready;
        if !assigned.is_empty() {
            // The GPUs are known once reserved.
            launch.gpus = assigned.clone();
            attempt.gpus = Some(
                assigned
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        self.rows[idx].attempts = id.number;
        self.rows[idx].not_before = None;
        self.rows[idx].started_at = row.started_at.clone();
        self.set_state(idx, st::RUNNING, None);
        let placement = {
            let step = self.step_of(&self.rows[idx])?;
            Placement {
                nodes: attempt
                    .nodes
                    .as_deref()
                    .and_then(|n| serde_json::from_str(n).ok())
                    .unwrap_or_default(),
                image: step.image.clone(),
                gpu: step.resources.gpu,
                millicpu: step.resources.millicpu,
                memory: step.resources.memory.unwrap_or(0),
                flavor: step.resources.flavor.clone(),
                extended: step.resources.extended.clone(),
            }
        };
        let launched = self
            .executor
            .launch(&id, &handle, &launch, &placement)
            .await;
        let step = attempt.step.clone();
        let started_at = attempt.started_at.clone();
        self.live
            .insert(step.clone(), super::Live { attempt, handle });
        match launched {
            Ok(()) => watcher.step(&self.rows[idx], self.rows.len(), 0),
            Err(e) => {
                // The attempt could not start: it never ran; say why and fail it.
                let result = contract::Result {
                    end: End::Failed,
                    exit_code: None,
                    signal: None,
                    started_at,
                    ended_at: self.clock.now_rfc3339(),
                    reason: Some(e.to_string()),
                    metrics: BTreeMap::new(),
                };
                self.finish_attempt(&step, Some(result)).await?;
            }
        }
        Ok(())
    }

    /// Looks the step up in the cache; a hit whose outputs are gone is a miss. True when the
    /// row ended here: a hit, or a cache the step may not have (it fails, saying why).
    async fn try_cache(&mut self, idx: usize, step: &Step, launch: &Launch) -> Result<bool, Error> {
        let mut sink = Vec::new();
        let key_text = step
            .cache
            .as_ref()
            .and_then(|c| c.key.as_ref())
            .and_then(|t| {
                self.scope(idx)
                    .render(&self.rows[idx], t, &mut sink, Path::new(""))
                    .ok()
            });
        let key = match crate::run::cache::key(
            &self.objects,
            step,
            launch,
            key_text.as_deref(),
            Path::new(&self.run.workdir),
        )
        .await
        {
            Ok(key) => key,
            Err(crate::run::cache::NoKey::Refused(why)) => {
                self.fail_permanently(idx, why);
                return Ok(true);
            }
            // No key (an input is missing, a cache file unreadable): the step runs and says why.
            Err(_) => return Ok(false),
        };
        self.rows[idx].cache_key = Some(key.clone());
        if let Some(outputs) = self.store.cache_get(&self.run.team, &key).await? {
            if crate::run::cache::outputs_exist(&self.objects, &outputs, &step.outputs).await {
                self.rows[idx].outputs = Some(outputs);
                let short = key.get(..12).unwrap_or(&key);
                self.set_state(idx, st::CACHED, Some(format!("cache hit {short}")));
                return Ok(true);
            }
            self.store.delete_cache(&self.run.team, &key).await?;
        }
        Ok(false)
    }
}
