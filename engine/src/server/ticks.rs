//! The schedule loop of the leader, a task of its own per lead: at each schedule's next tick
//! (and at least every second, to see what `apply` changed), each applied schedule's due ticks are
//! decided (`schedule::plan`) and recorded, a tick's run in the same transaction as its record
//! (`Service::record_fires`), so that a tick is decided once whatever crashes or second servers
//! happen. It writes through the leader's fenced store: a leader that was cut off records
//! nothing. It reads the time from the service's clock, so tests drive it.
//!
//! A schedule's ticks count from the later of its last decided tick and the time its current
//! version was applied: a schedule changed by `apply` fires from its next tick on, never at
//! once, and a new schedule fires nothing from before it existed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::drivers::Drivers;
use crate::schedule::{cron, plan};
use crate::service::submit::Decided;
use crate::service::{self, Principal, Service};
use crate::spec::model::{Concurrency, Schedule};
use crate::store::{AppliedRow, FireRow, Store};

/// The loop of one leader. It keeps each applied schedule parsed, with the last tick it has
/// decided, between passes: a pass reads only the schedules' versions (to see what `apply`
/// changed) and touches a schedule only when a tick of it is due, so 10,000 schedules cost a
/// pass one small query (`bench/schedule_scale.py`). The runs a pass starts are handed to
/// the drivers once the pass has recorded its fires.
///
/// The cache is this leader's: a new leader starts with an empty one and reads the last
/// decided ticks from the store. A stale cache (a second loop, a leader cut off) can only
/// try to decide a tick again, which the fires' key refuses.
#[derive(Debug)]
pub struct Ticks {
    /// The service over the leader's fenced store.
    pub service: Service,
    pub drivers: Arc<Drivers>,
    /// The server's Cluster file and object store, as for runs submitted through the API.
    pub cluster: Option<PathBuf>,
    pub objects: Option<String>,
    state: tokio::sync::Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    schedules: HashMap<(String, String), Entry>,
    /// What one pass gathers.
    work: Work,
    /// When the schedules' old runs were last looked for (`keepRuns`), and the task removing
    /// them: a minute's thousand removals must not hold up the next tick.
    swept: Option<DateTime<Utc>>,
    sweeping: Option<tokio::task::JoinHandle<()>>,
    /// The applied schedules' generation (`Store::applied_generation`) the cache is of.
    generation: Option<(i64, i64)>,
}

/// One applied schedule as the loop keeps it.
#[derive(Debug)]
struct Entry {
    row: AppliedRow,
    /// Parsed once per version; why not, when its text no longer reads (said once).
    parsed: Result<Parsed, String>,
    /// The last decided tick, or the time its version was applied: ticks after it are due
    /// once passed. None until read from the store.
    after: Option<DateTime<Utc>>,
}

/// What one pass gathers, emptied at its end.
#[derive(Debug, Default)]
struct Work {
    /// Ticks decided and not yet recorded.
    decided: Vec<Decided>,
    /// Runs started by this pass, driven once its fires are recorded (so their drivers do
    /// not compete with the pass for the store's write lock).
    started: Vec<String>,
    /// The applied pipelines the pass's fires run, by (team, name): read once per pass, as
    /// 100 schedules of one pipeline firing together would read it 100 times.
    pipelines: HashMap<(String, String), Option<AppliedRow>>,
}

#[derive(Debug)]
struct Parsed {
    schedule: Schedule,
    expr: cron::Expr,
    tz: Tz,
    applied: DateTime<Utc>,
}

impl Parsed {
    fn new(row: &AppliedRow) -> Result<Parsed, String> {
        let Some(schedule) = service::schedules::schedule_of(row) else {
            return Err(format!(
                "its applied text (version {}) no longer reads as a Schedule",
                row.version
            ));
        };
        let expr = cron::parse(&schedule.cron).map_err(|e| e.to_string())?;
        let tz = cron::zone(&schedule.timezone).map_err(|(m, _)| m)?;
        let applied = crate::time::parse(&row.applied_at).map_err(|e| e.to_string())?;
        Ok(Parsed {
            schedule,
            expr,
            tz,
            applied,
        })
    }
}

/// The most ticks of one schedule decided in one pass (a schedule every minute down for a
/// week is 10,080: decided over several passes).
const TICKS_PER_PASS: usize = 1_000;

/// The most decided ticks recorded in one transaction: a minute's thousand fires take the
/// store's write lock five times, not a thousand, while the runs of the minute before are
/// still being driven.
const BATCH: usize = 200;

/// The longest the loop sleeps between passes.
const MOST_ASLEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the schedules' ended runs beyond `keepRuns` are removed.
const SWEEP_EVERY: chrono::Duration = chrono::Duration::seconds(60);

impl Ticks {
    pub fn new(
        service: Service,
        drivers: Arc<Drivers>,
        cluster: Option<PathBuf>,
        objects: Option<String>,
    ) -> Ticks {
        Ticks {
            service,
            drivers,
            cluster,
            objects,
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Decides every schedule's due ticks once, and returns the earliest tick still to come
    /// (None when no schedule has one), so that the loop wakes for it.
    pub async fn pass(&self) -> Result<Option<DateTime<Utc>>, service::Error> {
        let mut guard = self.state.lock().await;
        let state = &mut *guard;
        let store = self.service.store().clone();
        let now = self.service.clock().now();
        self.refresh(&store, state).await?;
        let mut next_due: Option<DateTime<Utc>> = None;
        let mut failed = None;
        for entry in state.schedules.values_mut() {
            let Ok(p) = &entry.parsed else { continue };
            if p.schedule.suspend {
                continue;
            }
            let Some(after) = entry.after else { continue };
            match p.expr.next_after(p.tz, after) {
                Some(next) if next <= now => {}
                Some(next) => {
                    next_due = Some(next_due.map_or(next, |n| n.min(next)));
                    continue;
                }
                None => continue,
            }
            match self
                .schedule(&store, &entry.row, p, after, now, &mut state.work)
                .await
            {
                Ok(decided) => {
                    entry.after = Some(decided);
                    if let Some(next) = p.expr.next_after(p.tz, decided) {
                        next_due = Some(next_due.map_or(next, |n| n.min(next)));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        "schedule {} of team {}: {e}",
                        entry.row.name,
                        entry.row.team
                    );
                    // Read again from the store on the next pass.
                    entry.after = None;
                    failed = Some(e);
                }
            }
        }
        if failed.is_none()
            && let Err(e) = self.flush(&mut state.work).await
        {
            failed = Some(e);
        }
        let work = std::mem::take(&mut state.work);
        for id in &work.started {
            self.drivers.drive(id);
        }
        if let Some(e) = failed {
            // Decisions not recorded are dropped, and every schedule's last decided tick is
            // read again from the store: what was recorded stands, the rest is decided again.
            for entry in state.schedules.values_mut() {
                entry.after = None;
            }
            return Err(e);
        }
        let idle = state.sweeping.as_ref().is_none_or(|t| t.is_finished());
        if idle && state.swept.is_none_or(|t| now - t >= SWEEP_EVERY) {
            let keep: HashMap<(String, String), u64> = state
                .schedules
                .iter()
                .filter_map(|(k, e)| {
                    let keep = e.parsed.as_ref().ok()?.schedule.keep_runs?;
                    Some((k.clone(), keep))
                })
                .collect();
            state.sweeping = Some(tokio::spawn(sweep(store, keep)));
            state.swept = Some(now);
        }
        Ok(next_due)
    }

    /// Waits for the removal of old runs that a pass started, if any (tests, and a loop that
    /// stops).
    pub async fn swept(&self) {
        let task = self.state.lock().await.sweeping.take();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            tracing::warn!("removing the schedules' old runs ended badly: {e}");
        }
    }

    /// Runs passes until `stop` turns true: at each schedule's next tick, and at least every
    /// [`MOST_ASLEEP`] (to see what `apply` changed, or a clock a test moved).
    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let wait = match self.pass().await {
                Ok(Some(next)) => (next - self.service.clock().now())
                    .to_std()
                    .unwrap_or_default()
                    .min(MOST_ASLEEP),
                Ok(None) => MOST_ASLEEP,
                Err(e) => {
                    tracing::warn!("cannot decide the schedules' ticks: {e}");
                    MOST_ASLEEP
                }
            };
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.swept().await;
    }

    /// Brings the cache up to what is applied: new and changed schedules parsed, pruned ones
    /// dropped, and the last decided tick read for those that lack it.
    async fn refresh(&self, store: &Store, state: &mut State) -> Result<(), service::Error> {
        let generation = store.applied_generation("Schedule").await?;
        if state.generation != Some(generation) {
            self.relist(store, state).await?;
            state.generation = Some(generation);
        }
        self.read_ticks(store, state).await
    }

    /// Reads the applied schedules' versions: new and changed ones parsed, pruned ones dropped.
    async fn relist(&self, store: &Store, state: &mut State) -> Result<(), service::Error> {
        let listed = store.applied_versions("Schedule").await?;
        let mut keep = std::collections::HashSet::with_capacity(listed.len());
        for (team, name, version) in listed {
            let key = (team, name);
            let fresh = state
                .schedules
                .get(&key)
                .is_some_and(|e| e.row.version == version);
            if !fresh
                && let Some(row) = store
                    .applied_version(&key.0, "Schedule", &key.1, version)
                    .await?
            {
                let parsed = Parsed::new(&row);
                if let Err(e) = &parsed {
                    tracing::warn!("schedule {} of team {}: {e}", row.name, row.team);
                }
                state.schedules.insert(
                    key.clone(),
                    Entry {
                        row,
                        parsed,
                        after: None,
                    },
                );
            }
            keep.insert(key);
        }
        state.schedules.retain(|k, _| keep.contains(k));
        Ok(())
    }

    /// Reads the last decided tick of the schedules that lack it (new, changed, or whose
    /// last pass failed).
    async fn read_ticks(&self, store: &Store, state: &mut State) -> Result<(), service::Error> {
        if state.schedules.values().any(|e| e.after.is_none()) {
            let last: HashMap<(String, String), String> = store
                .last_ticks()
                .await?
                .into_iter()
                .map(|(team, schedule, tick)| ((team, schedule), tick))
                .collect();
            for (key, entry) in &mut state.schedules {
                let Ok(p) = &entry.parsed else { continue };
                if entry.after.is_some() {
                    continue;
                }
                let tick = match last.get(key) {
                    Some(t) => Some(
                        crate::time::parse(t)
                            .map_err(|e| service::Error::invalid(e.to_string()))?,
                    ),
                    None => None,
                };
                entry.after = Some(tick.map_or(p.applied, |t| t.max(p.applied)));
            }
        }
        Ok(())
    }

    /// Decides the ticks of one schedule due after `after`, and returns the last one decided.
    /// The decisions join the pass's batch, recorded at [`BATCH`] and at the pass's end.
    async fn schedule(
        &self,
        store: &Store,
        row: &AppliedRow,
        p: &Parsed,
        after: DateTime<Utc>,
        now: DateTime<Utc>,
        work: &mut Work,
    ) -> Result<DateTime<Utc>, service::Error> {
        let s = &p.schedule;
        let due = p.expr.fires_between(p.tz, after, now, TICKS_PER_PASS);
        let rules = plan::Rules {
            catch_up: s.catch_up,
            starting_deadline: s.starting_deadline,
        };
        let mut decided = after;
        let mut started_one = false;
        for (tick, decision) in plan::decide(rules, &due, now) {
            let fire = FireRow {
                team: row.team.clone(),
                schedule: row.name.clone(),
                tick: crate::time::format(tick),
                outcome: String::new(),
                run_id: None,
                reason: None,
                version: row.version,
                recorded_at: self.service.clock().now_rfc3339(),
            };
            match decision {
                plan::Decision::Missed(why) => {
                    work.decided.push(Decided::record(FireRow {
                        outcome: "missed".into(),
                        reason: Some(why),
                        ..fire
                    }));
                }
                plan::Decision::Run => {
                    // A later tick of the same pass (catch-up) sees the run of an earlier one
                    // as running, as its concurrency needs: recorded first.
                    if started_one {
                        self.flush(work).await?;
                    }
                    let d = self.start(store, row, s, fire, &mut work.pipelines).await?;
                    started_one = d.fire.run_id.is_some();
                    work.decided.push(d);
                }
            }
            decided = decided.max(tick);
        }
        if work.decided.len() >= BATCH {
            self.flush(work).await?;
        }
        Ok(decided)
    }

    /// Records the pass's decided ticks in one transaction; the runs they start are driven at
    /// the pass's end.
    async fn flush(&self, work: &mut Work) -> Result<(), service::Error> {
        if work.decided.is_empty() {
            return Ok(());
        }
        let decided = std::mem::take(&mut work.decided);
        let started = self.service.record_fires(&decided).await?;
        for d in &decided {
            if let Some(id) = &d.fire.run_id
                && started.contains(id)
            {
                tracing::info!(
                    "schedule {} of team {}: tick {} started run {id}",
                    d.fire.schedule,
                    d.fire.team,
                    d.fire.tick,
                );
            }
        }
        work.started.extend(started);
        Ok(())
    }

    /// Decides one tick that is to run: its run's rows made, or skipped as its concurrency or
    /// its pipeline say, with why.
    async fn start(
        &self,
        store: &Store,
        row: &AppliedRow,
        s: &Schedule,
        fire: FireRow,
        pipelines: &mut HashMap<(String, String), Option<AppliedRow>>,
    ) -> Result<Decided, service::Error> {
        let running = store.schedule_running(&row.team, &row.name).await?;
        if !running.is_empty() {
            match s.concurrency {
                Concurrency::Forbid => {
                    return Ok(Decided::record(FireRow {
                        outcome: "skipped".into(),
                        reason: Some(format!(
                            "run {} is still running (concurrency: forbid)",
                            running.join(", ")
                        )),
                        ..fire
                    }));
                }
                Concurrency::Replace => {
                    // Cancelled as `cancel` does; the new run starts at once.
                    for id in &running {
                        store.request_cancel(id).await?;
                    }
                }
                Concurrency::Allow => {}
            }
        }
        let who = Principal::new(row.team.clone(), service::Role::Member);
        let key = (row.team.clone(), s.pipeline.clone());
        let pipeline = match pipelines.get(&key) {
            Some(p) => p.clone(),
            None => {
                let p = store
                    .applied_named(&row.team, &["Pipeline", "Sweep"], &s.pipeline)
                    .await?;
                pipelines.insert(key, p.clone());
                p
            }
        };
        let Some(pipeline) = pipeline else {
            return Ok(Decided::record(FireRow {
                outcome: "skipped".into(),
                reason: Some(format!(
                    "no pipeline or sweep named '{}' is applied (pruned?)",
                    s.pipeline
                )),
                ..fire
            }));
        };
        let request = service::Request {
            shown: pipeline.path.clone(),
            text: pipeline.source.clone(),
            workdir: PathBuf::from(&pipeline.workdir),
            params: s.params.iter().map(|(p, _)| p.clone()).collect(),
            name: None,
            cluster: self.cluster.clone(),
            objects: self.objects.clone(),
            applied_version: Some(pipeline.version),
            schedule: Some(row.name.clone()),
        };
        let mut quiet = |_: &[crate::spec::Diagnostic]| {};
        let started = FireRow {
            outcome: "started".into(),
            ..fire.clone()
        };
        let decided = match service::submit::check(&who, request, &mut quiet) {
            Ok(checked) => self.service.decide_fire(&who, checked, started).await,
            Err(e) => Err(e),
        };
        match decided {
            Ok(d) => Ok(d),
            // The run cannot be made (its pipeline no longer checks): the tick is recorded as
            // skipped, saying why.
            Err(e @ (service::Error::Invalid { .. } | service::Error::Conflict { .. })) => {
                Ok(Decided::record(FireRow {
                    outcome: "skipped".into(),
                    reason: Some(e.to_string()),
                    ..fire
                }))
            }
            Err(e) => Err(e),
        }
    }
}

/// Removes each schedule's ended runs beyond its newest `keepRuns` (`keep`, by team and
/// schedule), as `sluice delete` removes a run (its files and objects, then its rows).
async fn sweep(store: Store, keep: HashMap<(String, String), u64>) {
    let ended = match store.schedules_ended().await {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!("cannot look for the schedules' old runs: {e}");
            return;
        }
    };
    for (team, name, count) in ended {
        let Some(&keep) = keep.get(&(team.clone(), name.clone())) else {
            continue;
        };
        if count <= i64::try_from(keep).unwrap_or(i64::MAX) {
            continue;
        }
        let ids = match store.schedule_ended(&team, &name).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!("schedule {name} of team {team}: cannot list its old runs: {e}");
                continue;
            }
        };
        for id in ids.iter().skip(usize::try_from(keep).unwrap_or(usize::MAX)) {
            if let Err(e) = crate::cli::delete::remove(&store, id).await {
                tracing::warn!("schedule {name}: cannot remove old run {id}: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests;
