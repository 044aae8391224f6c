//! The driver: one engine moving one run's steps through their states.
//!
//! Each pass reads what changed (attempts that ended, time that passed, a cancel asked for by
//! another process), decides the next states, commits them, and only then acts (launches
//! attempts, stops them) through the run's [`Executor`]. Attempts outlive the engine, so a
//! driver started on a run whose engine died (`sluice resume`) reattaches to attempts still
//! running and collects those that ended while it was away.
//!
//! The files: `drive` (the loop), `advance` (what a step whose needs changed does next),
//! `start` and `scheduled` (starting attempts on this machine's pool, or on a Cluster's nodes),
//! `attempts` (reattaching, and what an attempt's end means for its step), `rows` (the rows in
//! memory and their commits), `load` (the stored pipeline and parameters), `sweeping`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod advance;
mod attempts;
mod drive;
mod load;
mod rows;
mod scheduled;
mod start;
mod sweeping;

pub use load::pipeline_of;
pub use sweeping::{Best, Report, TrialReport, report};

use super::admission::{Scheduler, Schedulers};
use super::engine::{self, LEASE_MS};
use super::state::step as st;
use crate::clock::Clock;
use crate::executor::chosen::Chosen;
use crate::executor::kubernetes::Kube;
use crate::executor::local::Local;
use crate::executor::{self, AttemptId, Executor, Handle, Settings};
use crate::spec::model::{Pipeline, Step};
use crate::store::{self, AttemptRow, RunRow, StepRow, Store};
use rows::{Counts, Pending};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Objects(#[from] sluice_runtime::objects::Error),
    #[error(transparent)]
    Executor(#[from] executor::Error),
    /// The home (its state store) was removed or replaced while the run went on.
    #[error("{0}")]
    HomeGone(String),
}

/// How driving a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The run reached this state (`Succeeded`, `Failed`, `Cancelled`).
    Ended(super::state::RunState),
    /// A second Ctrl-C: the engine stops and leaves running steps to `sluice resume`.
    Detached,
    /// Another engine holds the run's lease (named).
    Busy(String),
}

/// What the engine's process was told from outside while it drives a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    /// Ctrl-C (or SIGTERM, SIGHUP to a foreground engine): the first cancels the run cleanly,
    /// a second leaves its running steps to `sluice resume`.
    Press,
    /// Stop driving at once and leave running steps to `sluice resume` (a background engine
    /// told to go away: its machine is shutting down, say; the work is not thrown away).
    Detach,
}

/// What the driver tells whoever watches it (the progress view).
pub trait Watcher: Send {
    fn step(&mut self, row: &StepRow, total: usize, done: usize);
    fn note(&mut self, text: &str);
    /// A sweep's progress changed: trials ended of its budget, and one line (trials done,
    /// running, failed, stopped; the best so far).
    fn sweep(&mut self, _done: u64, _total: u64, _line: &str) {}
}

/// A watcher that says nothing (`--detach`ed engines, tests).
pub struct Silent;

impl Watcher for Silent {
    fn step(&mut self, _: &StepRow, _: usize, _: usize) {}
    fn note(&mut self, _: &str) {}
}

/// An attempt running (or believed to), by its step instance's name.
struct Live {
    attempt: AttemptRow,
    handle: Handle,
}

impl Live {
    fn new(attempt: AttemptRow) -> Live {
        let handle = Handle::new(attempt.dir.clone());
        Live { attempt, handle }
    }
}

pub struct Driver<E: Executor = Chosen> {
    store: Store,
    objects: sluice_runtime::objects::Objects,
    executor: E,
    /// The Cluster's runtime settings (their defaults without one).
    settings: Settings,
    /// The executor's machine, as the store reserves from it.
    capacity: store::Capacity,
    home: PathBuf,
    run: RunRow,
    pipeline: Pipeline,
    step_index: HashMap<String, usize>,
    /// The pipeline's steps, shared: what a row's decision reads is its step, and a step may
    /// hold a fan-out's 100,000 items, which must not be copied for each of them.
    steps: Vec<Arc<Step>>,
    params: BTreeMap<String, crate::spec::model::ParamValue>,
    rows: Vec<StepRow>,
    by_name: HashMap<String, usize>,
    counts: HashMap<String, Counts>,
    /// Row indices of steps needing each step (by step name), to wake them when it ends.
    dependents: HashMap<String, Vec<usize>>,
    dirty: VecDeque<usize>,
    queued: BTreeSet<usize>,
    live: HashMap<String, Live>,
    pending: Pending,
    owner: String,
    cancelling: bool,
    failed_fast: bool,
    timed_out: bool,
    deadline: Option<i64>,
    on_exit_started: bool,
    /// Rows changed outside `advance` (attempt ends), still to show to the watcher.
    reports: Vec<usize>,
    /// Rows not yet in a terminal state: all of them, and those of main (not onExit) steps.
    open_all: usize,
    open_main: usize,
    /// Queued rows waiting out a retry backoff.
    backing_off: BTreeSet<usize>,
    /// The run's sweeps, and which of them each trial step and controller row belongs to.
    sweeps: Vec<sweeping::Sweeper>,
    trial_steps: HashMap<String, usize>,
    sweep_rows: HashMap<String, usize>,
    /// Trials asked to stop, committed and still to be told.
    to_terminate: Vec<String>,
    /// Each step's (of the file) estimate from history, once read (`history_of`).
    history: HashMap<String, Option<u64>>,
    /// Cluster mode (`--cluster`): the process's scheduler of the run's Cluster admits steps
    /// onto the file's nodes.
    scheduler: Option<Arc<Scheduler>>,
    /// Whether the run has a Cluster.
    cluster_mode: bool,
    /// Cluster mode: whether this run has steps in the store's waiting list.
    registered: bool,
    /// The waiting claims this run last wrote for the scheduler (cluster mode): while they
    /// hold and nothing is pending, it writes nothing, and asks for a verdict only when the
    /// scheduler says its verdict changed (`verdict_news`).
    last_mine: Option<Vec<(String, String)>>,
    verdict_news: bool,
    /// Cluster mode: when a trial held back by its team's rate limit may start (unix ms).
    rate_wake: Option<i64>,
    /// What a queued step needs of the machine's pool, when the last try found no room (it
    /// then waits in the pool's queue, `store::room`).
    no_room: Option<(usize, store::Need)>,
    /// The pool's queue said the blocked step may fit now (or the driver resyncs).
    room_may_be_free: bool,
    /// Where the time of day comes from (the system's; a test's to set).
    clock: Arc<dyn Clock>,
    /// The state store file's identity (device, inode) when the run was opened: a home removed
    /// or replaced under a running engine is an error, not a run that "succeeded" into a
    /// deleted file.
    store_file: Option<(u64, u64)>,
}

/// The device and inode of the home's state store file.
fn store_file_id(home: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(home.join("sluice.db"))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// `SLUICE_HEARTBEAT_TIMEOUT` (a duration such as `5s`): overrides the heartbeat timeout of
/// the run's Cluster (or the default of 60 s without one), so that tests and a machine known
/// to stall can set it without a Cluster file.
fn heartbeat_override() -> Option<Duration> {
    std::env::var("SLUICE_HEARTBEAT_TIMEOUT")
        .ok()
        .and_then(|t| crate::spec::units::parse_duration(&t).ok())
        .filter(|d| !d.is_zero())
}

/// The runtime settings of a run: its Cluster's, else the defaults; the heartbeat timeout
/// overridden by `SLUICE_HEARTBEAT_TIMEOUT`.
fn settings_of(scheduler: Option<&Scheduler>) -> Settings {
    let mut settings = scheduler.map_or_else(Settings::default, |s| s.scheduling().settings());
    if let Some(timeout) = heartbeat_override() {
        settings.heartbeat_timeout = timeout;
    }
    settings
}

impl Driver<Chosen> {
    /// Loads a run to drive it on this machine. Takes the run's lease unless a live engine
    /// holds it. A run with a Cluster is scheduled by this process's scheduler of that
    /// Cluster, from `schedulers` (the process's, over `store`). The time is read from
    /// `clock`.
    /// Whose environment this run's steps start from (a server's drivers: the allow-list).
    pub fn set_step_environment(&mut self, environment: executor::StepEnvironment) {
        self.settings.environment = environment;
    }

    pub async fn open(
        store: Store,
        run_id: &str,
        schedulers: &Schedulers,
        clock: Arc<dyn Clock>,
    ) -> Result<Result<Driver, Ending>, Error> {
        // The times the store writes are the driver's clock's.
        let store = store.with_clock(clock.clone());
        let mut run = store.run(run_id).await?;
        if run.state != super::state::run::RUNNING {
            return Ok(Err(Ending::Ended(run.state)));
        }
        let scheduler = match &run.cluster {
            Some(c) => Some(schedulers.of(c).map_err(Error::Invalid)?),
            None => None,
        };
        let settings = settings_of(scheduler.as_deref());
        let objects = sluice_runtime::objects::Objects::open(&run.objects)?;
        let kubernetes = scheduler.as_deref().and_then(|s| {
            let spec = &s.scheduling().spec;
            (spec.executor == crate::spec::model::ExecutorKind::Kubernetes)
                .then(|| spec.kubernetes.clone().map(|k| (k, spec.pools.clone())))
                .flatten()
        });
        let executor = match kubernetes {
            Some((k, pools)) => {
                // Steps run in their containers: the run has no folder on this machine, so
                // nothing of it is resolved here (a run recorded with one before this held
                // included): see `spec::paths`.
                run.workdir.clear();
                let kube = Kube::new(
                    &k,
                    &pools,
                    run_id,
                    &run.team,
                    objects.clone(),
                    settings.clone(),
                )
                .await?;
                // Pools without declared nodes are the cluster's nodes, as its watch sees them.
                if let Some(s) = scheduler.as_deref()
                    && s.scheduling().reads_nodes()
                {
                    s.scheduling().follow_nodes(kube.node_source());
                }
                Chosen::Kubernetes(kube)
            }
            None => Chosen::Local(Local::new(
                &store.home,
                run_id,
                objects.clone(),
                settings.clone(),
            )),
        };
        Driver::open_with(store, run, objects, executor, scheduler, settings, clock).await
    }
}

impl<E: Executor> Driver<E> {
    /// Loads run `run` to drive it through `executor`, its objects in `objects`, reading the
    /// time from `clock`. Takes the run's lease unless a live engine holds it.
    pub async fn open_with(
        store: Store,
        run: RunRow,
        objects: sluice_runtime::objects::Objects,
        executor: E,
        scheduler: Option<Arc<Scheduler>>,
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<Result<Driver<E>, Ending>, Error> {
        let run_id = run.id.clone();
        if run.state != super::state::run::RUNNING {
            return Ok(Err(Ending::Ended(run.state)));
        }
        let now = clock.now_ms();
        let me = engine::me(now + LEASE_MS);
        let owner = me.owner.clone();
        // An engine whose lease ran out, or whose process is gone, holds nothing.
        let lease = store
            .take_lease(&run_id, &me, |h| engine::alive(h, now), false)
            .await?;
        if let Err(holder) = lease {
            return Ok(Err(Ending::Busy(holder.owner)));
        }
        let mut pipeline = pipeline_of(&run)?;
        let sweeps = sweeping::expand(&mut pipeline)?;
        let params = load::params_of(&run, &pipeline)?;
        let deadline = load::deadline_of(&run, &pipeline)?;
        let rows = store.steps(&run_id).await?;
        let attempts = store.attempts(&run_id).await?;
        let home = store.home.clone();
        let step_index = pipeline
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let steps = pipeline.steps.iter().cloned().map(Arc::new).collect();
        let capacity = executor.capacity().clone();
        let mut d = Driver {
            store,
            objects,
            executor,
            settings,
            capacity: store::Capacity {
                millicpu: capacity.millicpu,
                memory: capacity.memory,
                gpus: capacity.gpus,
            },
            store_file: store_file_id(&home),
            home,
            run,
            pipeline,
            step_index,
            steps,
            params,
            rows: Vec::new(),
            by_name: HashMap::new(),
            counts: HashMap::new(),
            dependents: HashMap::new(),
            dirty: VecDeque::new(),
            queued: BTreeSet::new(),
            live: HashMap::new(),
            pending: Pending::default(),
            owner,
            cancelling: false,
            failed_fast: false,
            timed_out: false,
            deadline,
            on_exit_started: false,
            reports: Vec::new(),
            open_all: 0,
            open_main: 0,
            backing_off: BTreeSet::new(),
            trial_steps: sweeps
                .iter()
                .enumerate()
                .map(|(i, s)| (s.trial_step.clone(), i))
                .collect(),
            sweep_rows: sweeps
                .iter()
                .enumerate()
                .map(|(i, s)| (s.row.clone(), i))
                .collect(),
            sweeps,
            to_terminate: Vec::new(),
            history: HashMap::new(),
            cluster_mode: scheduler.is_some(),
            // A run resumed may have rows there from its last engine: cleared at the first cycle.
            registered: true,
            last_mine: None,
            verdict_news: false,
            scheduler,
            rate_wake: None,
            no_room: None,
            room_may_be_free: false,
            clock,
        };
        d.cancelling = d.store.cancel_requested(&run_id).await?;
        for row in rows {
            if !d.step_index.contains_key(&row.step) {
                return Err(Error::Invalid(format!(
                    "run {run_id} has a row '{}' of step '{}', which its pipeline does not have",
                    row.name, row.step
                )));
            }
            d.add_row(row);
        }
        d.failed_fast = d.pipeline.fail_fast
            && d.rows
                .iter()
                .any(|r| r.state == st::FAILED && !d.is_on_exit(r));
        d.on_exit_started = d
            .rows
            .iter()
            .any(|r| d.is_on_exit(r) && r.state != st::PENDING);
        d.index_sweeps(&attempts);
        d.reattach(attempts).await?;
        if d.cancelling {
            // Cancelled while no engine drove it: what still runs is told now.
            d.stop_live(executor::Reason::Cancel).await;
        }
        Ok(Ok(d))
    }

    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    pub fn rows(&self) -> &[StepRow] {
        &self.rows
    }

    /// The step `row` is an instance of (every row's step is checked when the run is opened).
    fn step_of(&self, row: &StepRow) -> Result<&Step, Error> {
        self.shared_step(row).map(|s| &**s)
    }

    /// Row `row`'s step, to keep while the driver changes (shared, not copied).
    fn step_arc(&self, row: &StepRow) -> Result<Arc<Step>, Error> {
        self.shared_step(row).cloned()
    }

    fn shared_step(&self, row: &StepRow) -> Result<&Arc<Step>, Error> {
        self.step_index
            .get(&row.step)
            .and_then(|&i| self.steps.get(i))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "run {}: row '{}' is of step '{}', which its pipeline does not have",
                    self.run.id, row.name, row.step
                ))
            })
    }

    /// Whether one of the run's sweeps stops trials early (it reads running trials' curves).
    fn early_stopping(&self) -> bool {
        self.sweeps.iter().any(|s| s.spec.early_stopping.is_some())
    }

    fn is_on_exit(&self, row: &StepRow) -> bool {
        self.step_index
            .get(&row.step)
            .is_some_and(|&i| self.pipeline.steps[i].on_exit)
    }

    /// The row index of step instance `name`, or an error naming the run.
    fn index_of(&self, name: &str) -> Result<usize, Error> {
        self.by_name.get(name).copied().ok_or_else(|| {
            Error::Invalid(format!(
                "run {}: an attempt of '{name}' has no step row",
                self.run.id
            ))
        })
    }

    fn attempt_id(&self, step: &str, number: i64) -> AttemptId {
        AttemptId {
            run: self.run.id.clone(),
            step: step.to_owned(),
            number,
        }
    }

    /// Asks every running attempt of this run to stop (asking again is harmless).
    async fn stop_live(&self, reason: executor::Reason) {
        for live in self.live.values() {
            if let Err(e) = self.executor.stop(&live.handle, reason).await {
                tracing::warn!("cannot ask {} to stop: {e}", live.attempt.step);
            }
        }
    }

    /// Asks the attempt of step instance `name` to stop, if it runs.
    async fn stop_one(&self, name: &str, reason: executor::Reason) {
        if let Some(live) = self.live.get(name)
            && let Err(e) = self.executor.stop(&live.handle, reason).await
        {
            tracing::warn!("cannot ask {name} to stop: {e}");
        }
    }
}
