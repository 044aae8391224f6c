//! The driver: one engine moving one run's steps through their states.
//!
//! Each pass reads what changed (attempts that ended, time that passed, a cancel asked for by
//! another process), decides the next states, commits them, and only then acts (starts
//! runtimes, signals them). Attempts run under `sluice-runtime` in their own process groups,
//! so they outlive the engine; a driver started on a run whose engine died (`sluice resume`)
//! reattaches to attempts still running and collects those that ended while it was away.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice_runtime::contract::{self, End, Launch};
use sluice_runtime::objects::Objects;

mod sweeping;

pub use sweeping::{Best, Report, TrialReport, report};

use super::server::{Note, Server};
use tokio::sync::mpsc;

use super::engine::{self, LEASE_MS};
use super::launch::{self, Scope, Stop};
use super::probe::{Probe, kill_programs, probe, read_result};
use super::state::{attempt as at, run as rs, step as st};
use crate::spec::model::{Document, ForEach, ParamType, ParamValue, Pipeline, RetryOn, Step};
use crate::store::{self, AttemptRow, Capacity, Change, Event, Placed, RunRow, StepRow, Store};
use crate::time::{now_ms, now_rfc3339};

/// How often attempts this engine did not start (reattached) are checked for their end.
const REATTACHED_POLL: Duration = Duration::from_millis(200);
/// How often the store is asked whether another process cancelled the run.
const CANCEL_POLL: Duration = Duration::from_millis(300);
/// How often a step waiting for CPU or memory held by other runs tries again.
const CAPACITY_POLL: Duration = Duration::from_millis(100);
/// How often, while steps wait for room, the attempts of runs whose engine died are collected
/// (`run::reap`), so that what they held is free again.
const REAP_EVERY: Duration = Duration::from_secs(1);
/// Cluster mode: at most this many steps of one run wait on the cluster at once.
const MAX_WAITING: usize = 256;
/// How long an attempt's runtime may stay silent (no heartbeat) before the attempt is declared
/// lost: `runtime.heartbeatTimeout` of the contract, 60 s; `SLUICE_HEARTBEAT_TIMEOUT` (a
/// duration such as `5s`) until Cluster files are read.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(60);

fn heartbeat_timeout() -> Duration {
    std::env::var("SLUICE_HEARTBEAT_TIMEOUT")
        .ok()
        .and_then(|t| crate::spec::units::parse_duration(&t).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(HEARTBEAT_TIMEOUT)
}

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
    /// The home (its state store) was removed or replaced while the run went on.
    #[error("{0}")]
    HomeGone(String),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// How driving a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The run reached this state (`Succeeded`, `Failed`, `Cancelled`).
    Ended(String),
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
pub trait Watcher {
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

struct Live {
    attempt: AttemptRow,
    /// The generation of this engine's runtime it was handed to: its end arrives as a note.
    /// None (reattached after a restart, or its runtime is gone): polled through its lock.
    ours: Option<u64>,
}

#[derive(Default, Clone, Copy)]
struct Counts {
    total: usize,
    terminal: usize,
    satisfied: usize,
    failed: usize,
    stopped: usize,
}

impl Counts {
    fn add(&mut self, state: &str, by: i64) {
        let bump = |c: &mut usize| *c = (*c as i64 + by) as usize;
        if st::is_terminal(state) {
            bump(&mut self.terminal);
        }
        if st::satisfies(state) {
            bump(&mut self.satisfied);
        }
        if state == st::FAILED {
            bump(&mut self.failed);
        }
        if state == st::STOPPED {
            bump(&mut self.stopped);
        }
    }
}

pub struct Driver {
    store: Store,
    objects: Objects,
    home: PathBuf,
    run: RunRow,
    pipeline: Pipeline,
    step_index: HashMap<String, usize>,
    params: BTreeMap<String, ParamValue>,
    rows: Vec<StepRow>,
    by_name: HashMap<String, usize>,
    counts: HashMap<String, Counts>,
    /// Row indices of steps needing each step (by step name), to wake them when it ends.
    dependents: HashMap<String, Vec<usize>>,
    dirty: VecDeque<usize>,
    queued: BTreeSet<usize>,
    live: HashMap<String, Live>,
    tx: mpsc::UnboundedSender<Note>,
    rx: mpsc::UnboundedReceiver<Note>,
    /// The run's `sluice-runtime serve`, started at the first attempt.
    server: Option<Server>,
    /// How many runtimes this engine has started.
    generations: u64,
    heartbeat_timeout: Duration,
    pending: Pending,
    owner: String,
    capacity: Capacity,
    grace_ms: u64,
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
    /// Logs being copied to the object store.
    uploads: tokio::task::JoinSet<()>,
    /// Cluster mode (`--cluster`): the scheduler admits steps onto the file's nodes.
    scheduling: Option<super::cluster::Scheduling>,
    /// Whether the run has a Cluster (`scheduling` is taken out while a cycle runs).
    cluster_mode: bool,
    /// Cluster mode: whether this run has steps in the store's waiting list.
    registered: bool,
    /// Cluster mode: when a trial held back by its team's rate limit may start (unix ms).
    rate_wake: Option<i64>,
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

/// CPU (millicores) and memory (bytes) of this machine: the local pool.
/// The GPUs of this machine, by index, as `nvidia-smi` lists them (none without it).
pub fn machine_gpus() -> Vec<u32> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// This machine's pool: its cores, memory and GPUs.
pub fn machine_capacity() -> Capacity {
    let (millicpu, memory) = machine_cpu_memory();
    Capacity {
        millicpu,
        memory,
        gpus: machine_gpus(),
    }
}

fn machine_cpu_memory() -> (i64, i64) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as i64;
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map_or(i64::MAX / 4, |kb| kb * 1024);
    (cores * 1000, mem)
}

/// The pipeline a run was submitted with, read again from the text it stored.
pub fn pipeline_of(run: &RunRow) -> Result<Pipeline, Error> {
    let loaded = crate::spec::load(&run.file, run.source.clone());
    if loaded.diagnostics.has_errors() {
        return Err(Error::Invalid(format!(
            "run {} holds a pipeline this version cannot read: {}",
            run.id,
            loaded
                .diagnostics
                .into_sorted()
                .first()
                .map(ToString::to_string)
                .unwrap_or_default()
        )));
    }
    loaded
        .documents
        .into_iter()
        .filter_map(|d| match d {
            Document::Pipeline(p) => Some(*p),
            Document::Sweep(mut s) => {
                // `-p NAME=SPEC` given with the file, kept as the run's parameters.
                let overrides: Vec<(String, String)> =
                    serde_json::from_str::<BTreeMap<String, String>>(&run.params)
                        .unwrap_or_default()
                        .into_iter()
                        .collect();
                crate::spec::oneline::apply(&mut s, &overrides).ok()?;
                Some(Pipeline::of_sweep(&s, &run.file))
            }
            Document::Pending(_) => None,
        })
        .find(|p| run.document.as_ref().is_none_or(|n| &p.metadata.name == n))
        .ok_or_else(|| Error::Invalid(format!("run {} holds no pipeline", run.id)))
}

fn params_of(run: &RunRow, p: &Pipeline) -> BTreeMap<String, ParamValue> {
    let json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&run.params).unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, v) in json {
        let ty = p.param(&name).map(|p| p.ty);
        let value = match (ty, v) {
            (Some(ParamType::Int), serde_json::Value::Number(n)) if n.is_i64() => {
                ParamValue::Int(n.as_i64().unwrap_or_default())
            }
            (_, serde_json::Value::Number(n)) => ParamValue::Float(n.as_f64().unwrap_or_default()),
            (_, serde_json::Value::Bool(b)) => ParamValue::Bool(b),
            (_, serde_json::Value::Array(a)) => ParamValue::List(a),
            (_, serde_json::Value::String(s)) => ParamValue::String(s),
            (_, other) => ParamValue::String(other.to_string()),
        };
        out.insert(name, value);
    }
    out
}

impl Driver {
    /// Loads a run to drive it. Takes the run's lease unless a live engine holds it.
    pub async fn open(store: Store, run_id: &str) -> Result<Result<Driver, Ending>, Error> {
        let run = store.run(run_id).await?;
        if run.state != rs::RUNNING {
            return Ok(Err(Ending::Ended(run.state)));
        }
        let now = now_ms();
        let me = engine::me(now + LEASE_MS);
        let owner = me.owner.clone();
        // An engine whose lease ran out, or whose process is gone, holds nothing.
        let lease = store
            .take_lease(run_id, &me, |h| engine::alive(h, now), false)
            .await?;
        if let Err(holder) = lease {
            return Ok(Err(Ending::Busy(holder.owner)));
        }
        let mut pipeline = pipeline_of(&run)?;
        let sweeps = sweeping::expand(&mut pipeline)?;
        let params = params_of(&run, &pipeline);
        let scheduling = match &run.cluster {
            Some(c) => Some(super::cluster::Scheduling::new(
                super::cluster::of_run(c).map_err(Error::Invalid)?,
            )),
            None => None,
        };
        let rows = store.steps(run_id).await?;
        let attempts = store.attempts(run_id).await?;
        let home = store.home.clone();
        let home_of_store = home.clone();
        let objects = Objects::open(&run.objects)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let deadline = pipeline.timeout.and_then(|t| {
            crate::time::parse_rfc3339(&run.created_at).map(|c| c + t.as_millis() as i64)
        });
        let step_index = pipeline
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        let mut d = Driver {
            store,
            objects,
            home,
            run,
            pipeline,
            step_index,
            params,
            rows: Vec::new(),
            by_name: HashMap::new(),
            counts: HashMap::new(),
            dependents: HashMap::new(),
            dirty: VecDeque::new(),
            queued: BTreeSet::new(),
            live: HashMap::new(),
            tx,
            rx,
            server: None,
            generations: 0,
            heartbeat_timeout: heartbeat_timeout(),
            pending: Pending::default(),
            owner,
            capacity: machine_capacity(),
            grace_ms: 30_000,
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
            uploads: tokio::task::JoinSet::new(),
            cluster_mode: scheduling.is_some(),
            // A run resumed may have rows there from its last engine: cleared at the first cycle.
            registered: true,
            store_file: store_file_id(&home_of_store),
            scheduling,
            rate_wake: None,
        };
        if let Some(s) = &d.scheduling {
            d.grace_ms =
                u64::try_from(s.spec.scheduling.grace_period.as_millis()).unwrap_or(30_000);
        }
        d.cancelling = d.store.cancel_requested(run_id).await?;
        for row in rows {
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
        Ok(Ok(d))
    }

    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    pub fn rows(&self) -> &[StepRow] {
        &self.rows
    }

    fn step_of(&self, row: &StepRow) -> &Step {
        &self.pipeline.steps[self.step_index[&row.step]]
    }

    fn is_on_exit(&self, row: &StepRow) -> bool {
        self.step_index
            .get(&row.step)
            .is_some_and(|&i| self.pipeline.steps[i].on_exit)
    }

    fn add_row(&mut self, row: StepRow) {
        let idx = self.rows.len();
        if !st::is_terminal(&row.state) {
            self.open_all += 1;
            if !self.is_on_exit(&row) {
                self.open_main += 1;
            }
        }
        if row.state == st::QUEUED && row.not_before.is_some() {
            self.backing_off.insert(idx);
        }
        let c = self.counts.entry(row.step.clone()).or_default();
        c.total += 1;
        c.add(&row.state, 1);
        if let Some(&si) = self.step_index.get(&row.step) {
            for need in &self.pipeline.steps[si].needs {
                self.dependents
                    .entry(need.step.clone())
                    .or_default()
                    .push(idx);
            }
        }
        match row.state.as_str() {
            st::PENDING => self.dirty.push_back(idx),
            st::QUEUED => {
                self.queued.insert(idx);
            }
            _ => {}
        }
        self.by_name.insert(row.name.clone(), idx);
        self.rows.push(row);
    }

    /// Moves row `idx` to `state`, keeping counts and queues; wakes dependents when its step
    /// is done. The caller commits the row.
    fn set_state(&mut self, idx: usize, state: &str, reason: Option<String>) {
        let old = std::mem::replace(&mut self.rows[idx].state, state.to_owned());
        self.rows[idx].reason = reason;
        let delta = i64::from(st::is_terminal(&old)) - i64::from(st::is_terminal(state));
        let main = !self.is_on_exit(&self.rows[idx]);
        self.open_all = (self.open_all as i64 + delta) as usize;
        if main {
            self.open_main = (self.open_main as i64 + delta) as usize;
        }
        if state == st::QUEUED && self.rows[idx].not_before.is_some() {
            self.backing_off.insert(idx);
        } else {
            self.backing_off.remove(&idx);
        }
        let step = self.rows[idx].step.clone();
        let c = self.counts.entry(step.clone()).or_default();
        c.add(&old, -1);
        c.add(state, 1);
        let done = c.terminal == c.total;
        if old == st::QUEUED {
            self.queued.remove(&idx);
        }
        match state {
            st::QUEUED => {
                self.queued.insert(idx);
            }
            st::PENDING => self.dirty.push_back(idx),
            _ => {}
        }
        if st::is_terminal(state) {
            self.rows[idx].ended_at = Some(now_rfc3339());
        }
        if done && let Some(deps) = self.dependents.get(&step) {
            self.dirty.extend(deps.iter().copied());
        }
    }

    /// After a restart: attempts still running are watched again; those that ended while no
    /// engine was there are collected.
    async fn reattach(&mut self, attempts: Vec<AttemptRow>) -> Result<(), Error> {
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
            let result = super::reap::collected_result(&a);
            self.live.insert(
                step.clone(),
                Live {
                    attempt: a,
                    ours: None,
                },
            );
            match lost {
                Some(reason) => self.lose_attempt(&step, reason).await?,
                None => self.finish_attempt(&step, result).await?,
            }
        }
        for a in attempts.into_iter().filter(|a| a.state == at::RUNNING) {
            let dir = PathBuf::from(&a.dir);
            match probe(&dir)
                .map_err(io(format!("cannot check attempt folder {}", dir.display())))?
            {
                Probe::Alive => {
                    self.live.insert(
                        a.step.clone(),
                        Live {
                            attempt: a,
                            ours: None,
                        },
                    );
                }
                Probe::Ended(result) => {
                    self.live.insert(
                        a.step.clone(),
                        Live {
                            attempt: a.clone(),
                            ours: None,
                        },
                    );
                    self.finish_attempt(&a.step, Some(*result)).await?;
                }
                Probe::Vanished(reason) => {
                    self.live.insert(
                        a.step.clone(),
                        Live {
                            attempt: a.clone(),
                            ours: None,
                        },
                    );
                    self.lose_attempt(&a.step, reason).await?;
                }
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

    /// Drives the run to its end. `interrupts` delivers Ctrl-C presses (and their kin).
    pub async fn drive(
        mut self,
        watcher: &mut dyn Watcher,
        mut interrupts: Option<mpsc::UnboundedReceiver<Interrupt>>,
    ) -> Result<Ending, Error> {
        let mut last_cancel_check = std::time::Instant::now();
        let mut last_lease = std::time::Instant::now();
        let mut last_heartbeats = std::time::Instant::now();
        let mut last_reap = std::time::Instant::now();
        let mut presses = 0;
        loop {
            // Nothing is decided or started over a home that is gone (one stat).
            self.check_home()?;
            self.advance(watcher).await?;
            if let Some(state) = self.finished() {
                self.end(&state, watcher).await?;
                return Ok(Ending::Ended(state));
            }
            let mut wait = Duration::from_secs(1);
            if self.live.values().any(|l| l.ours.is_none()) {
                wait = wait.min(REATTACHED_POLL);
            }
            if let Some(nb) = self.next_not_before() {
                wait = wait.min(Duration::from_millis(
                    nb.saturating_sub(now_ms()).max(0) as u64
                ));
            }
            if !self.queued.is_empty() && self.ready_queued() {
                wait = wait.min(CAPACITY_POLL);
            }
            if let Some(at) = self.rate_wake.filter(|&at| at > now_ms()) {
                // A trial held back by its team's rate limit starts on time, not a poll late.
                wait = wait.min(Duration::from_millis(
                    at.saturating_sub(now_ms()).max(0) as u64
                ));
            }
            if let Some(d) = self.deadline {
                wait = wait.min(Duration::from_millis(
                    d.saturating_sub(now_ms()).max(0) as u64
                ));
            }
            wait = wait.min(CANCEL_POLL);
            // Nothing more to start now: what was decided is committed before waiting.
            self.flush().await?;
            let interrupt = async {
                match interrupts.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                Some(note) = self.rx.recv() => match note {
                    Note::Ended { step, number } => {
                        if self.live.get(&step).is_some_and(|l| l.attempt.number == number) {
                            let result = read_result(Path::new(&self.live[&step].attempt.dir));
                            self.finish_attempt(&step, result).await?;
                        }
                    }
                    Note::Gone { generation } => self.runtime_gone(generation),
                },
                Some(kind) = interrupt => {
                    presses += match kind {
                        Interrupt::Press => 1,
                        Interrupt::Detach => 2,
                    };
                    if presses >= 2 {
                        self.uploads_done().await;
                        self.flush().await?;
                        self.store.release_lease(&self.run.id, &self.owner).await?;
                        watcher.note("second interrupt: leaving running steps to `sluice resume`");
                        return Ok(Ending::Detached);
                    }
                    watcher.note("cancelling: steps get SIGTERM (Ctrl-C again to leave them running)");
                    self.store.request_cancel(&self.run.id).await?;
                    self.cancel().await?;
                }
                () = tokio::time::sleep(wait) => {}
            }
            self.poll_reattached().await?;
            if !self.queued.is_empty() && self.ready_queued() && last_reap.elapsed() >= REAP_EVERY {
                // Steps wait for room: room held by runs whose engine died is given back.
                last_reap = std::time::Instant::now();
                if let Err(e) = super::reap::collect(&self.store, Some(&self.run.id)).await {
                    tracing::warn!("cannot collect the attempts of runs whose engine is gone: {e}");
                }
            }
            let beat_every = (self.heartbeat_timeout / 4).min(Duration::from_secs(1));
            if last_heartbeats.elapsed() >= beat_every {
                last_heartbeats = std::time::Instant::now();
                self.check_heartbeats().await?;
                self.check_early_stops().await?;
            }
            if last_cancel_check.elapsed() >= CANCEL_POLL {
                last_cancel_check = std::time::Instant::now();
                if !self.cancelling && self.store.cancel_requested(&self.run.id).await? {
                    watcher.note("the run was cancelled");
                    self.cancel().await?;
                }
                if let Some(d) = self.deadline
                    && now_ms() >= d
                    && !self.cancelling
                {
                    watcher.note("the run timed out");
                    self.timed_out = true;
                    self.cancel().await?;
                }
            }
            if last_lease.elapsed() >= Duration::from_millis((LEASE_MS / 3) as u64) {
                last_lease = std::time::Instant::now();
                self.check_home()?;
                let now = now_ms();
                if let Err(holder) = self
                    .store
                    .take_lease(
                        &self.run.id,
                        &engine::me(now + LEASE_MS),
                        |h| engine::alive(h, now),
                        false,
                    )
                    .await?
                {
                    self.uploads_done().await;
                    self.flush().await?;
                    return Ok(Ending::Busy(holder.owner));
                }
            }
        }
    }

    /// Fails when the home's state store is no longer the file this engine opened (the home
    /// was deleted or replaced): what the engine commits would be lost, so it stops its running
    /// steps (SIGTERM to its runtime, which stops them as it does on eviction) and says so.
    fn check_home(&mut self) -> Result<(), Error> {
        let now = store_file_id(&self.home);
        if self.store_file.is_none() || now == self.store_file {
            return Ok(());
        }
        if let Some(pid) = self
            .server
            .as_ref()
            .and_then(|s| s.pid)
            .and_then(|p| i32::try_from(p).ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        Err(Error::HomeGone(format!(
            "the sluice home {} was removed or replaced while run {} was going: its state is gone, so the run cannot go on ({} running step(s) stopped)",
            self.home.display(),
            self.run.id,
            self.live.len()
        )))
    }

    fn next_not_before(&self) -> Option<i64> {
        if self.backing_off.is_empty() {
            return None;
        }
        self.backing_off
            .iter()
            .filter_map(|&i| self.rows[i].not_before)
            .min()
    }

    fn ready_queued(&self) -> bool {
        if self.backing_off.is_empty() {
            return !self.queued.is_empty();
        }
        let now = now_ms();
        self.queued
            .iter()
            .any(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now))
    }

    /// Whether every step has ended and nothing runs: the run's final state.
    fn finished(&self) -> Option<String> {
        if !self.live.is_empty() || self.open_all > 0 {
            return None;
        }
        Some(self.final_state())
    }

    fn final_state(&self) -> String {
        if self.timed_out {
            return rs::FAILED.into();
        }
        if self.cancelling {
            return rs::CANCELLED.into();
        }
        let failed = self.rows.iter().any(|r| {
            !self.is_trial(r)
                && (r.state == st::FAILED || (r.state == st::CANCELLED && !self.is_on_exit(r)))
        });
        if failed {
            rs::FAILED.into()
        } else {
            rs::SUCCEEDED.into()
        }
    }

    async fn end(&mut self, state: &str, watcher: &mut dyn Watcher) -> Result<(), Error> {
        // The run's logs are all in the object store before it is said to have ended.
        self.uploads_done().await;
        self.check_home()?;
        let reason = if self.timed_out {
            Some("the run timed out".to_owned())
        } else {
            self.rows
                .iter()
                .find(|r| r.state == st::FAILED && !self.is_trial(r))
                .map(|r| match (&r.reason, self.pipeline.from_sweep) {
                    (Some(why), true) => why.clone(),
                    _ => format!("step '{}' failed", r.name),
                })
        };
        let reason = if state == rs::SUCCEEDED { None } else { reason };
        self.commit(Change {
            run_end: Some((state.to_owned(), reason)),
            events: vec![Event {
                step: None,
                kind: "ended".into(),
                detail: Some(state.to_owned()),
            }],
            ..Change::default()
        })
        .await?;
        self.store.release_lease(&self.run.id, &self.owner).await?;
        watcher.note(&format!("run {} {state}", self.run.id));
        Ok(())
    }

    /// Stops the run: nothing new starts; running attempts get SIGTERM (the runtime passes
    /// it on, waits the grace period, then kills); onExit steps still run.
    async fn cancel(&mut self) -> Result<(), Error> {
        if self.cancelling && self.live.is_empty() {
            return Ok(());
        }
        self.cancelling = true;
        for live in self.live.values() {
            terminate(live);
        }
        Ok(())
    }

    /// Decides what every step whose needs changed does next, commits, then starts what can.
    async fn advance(&mut self, watcher: &mut dyn Watcher) -> Result<(), Error> {
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
            let step = self.step_of(&self.rows[idx]).clone();
            if step.on_exit && !main_done {
                continue;
            }
            if !step.on_exit {
                if let Some(reason) = self.blocked(&step) {
                    match reason {
                        Blocked::Waiting => continue,
                        Blocked::Cancel(why) => {
                            self.set_state(idx, st::CANCELLED, Some(why));
                            changed.push(idx);
                            continue;
                        }
                    }
                }
                if self.cancelling || self.failed_fast {
                    let why = if self.cancelling {
                        "the run was cancelled"
                    } else {
                        "not started: a step failed (failFast)"
                    };
                    self.set_state(idx, st::CANCELLED, Some(why.into()));
                    changed.push(idx);
                    continue;
                }
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
            if let Some(l) = self.live.get(&name) {
                terminate(l);
            }
        }
        self.start_queued(watcher).await
    }

    fn main_done(&self) -> bool {
        self.open_main == 0
            && self.live.keys().all(|n| {
                self.by_name
                    .get(n)
                    .is_some_and(|&i| self.is_on_exit(&self.rows[i]))
            })
    }

    fn blocked(&self, step: &Step) -> Option<Blocked> {
        for need in &step.needs {
            let c = self.counts.get(&need.step).copied().unwrap_or_default();
            if c.terminal < c.total {
                return Some(Blocked::Waiting);
            }
        }
        for need in &step.needs {
            let c = self.counts.get(&need.step).copied().unwrap_or_default();
            if c.satisfied < c.total {
                let how = match self
                    .by_name
                    .get(&need.step)
                    .map(|&i| self.rows[i].state.as_str())
                {
                    Some(st::FAILED) => "failed",
                    Some(st::CANCELLED) => "was cancelled",
                    // A fan-out: some of its children did not succeed.
                    _ => "did not succeed",
                };
                return Some(Blocked::Cancel(format!("upstream '{}' {how}", need.step)));
            }
        }
        None
    }

    /// What templates of row `idx` can read. `{{run.state}}` is worked out (a scan of every
    /// row) only for onExit steps, the only ones that see the run's end; others read `Running`.
    fn scope(&self, idx: usize) -> Scope<'_> {
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
            run_state,
            trial: self.is_trial(&self.rows[idx]),
        }
    }

    fn run_state_so_far(&self) -> &'static str {
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
                state: st::PENDING.into(),
                ..StepRow::default()
            })
            .collect())
    }

    fn fail_permanently(&mut self, idx: usize, why: String) {
        self.set_state(idx, st::FAILED, Some(why));
        if self.pipeline.fail_fast
            && !self.is_on_exit(&self.rows[idx])
            && !self.is_trial(&self.rows[idx])
        {
            self.failed_fast = true;
        }
    }

    /// Starts queued steps while parallelism and the machine's pool allow.
    async fn start_queued(&mut self, watcher: &mut dyn Watcher) -> Result<(), Error> {
        if let Some(scheduling) = self.scheduling.take() {
            let mut scheduling = scheduling;
            let done = self.start_scheduled(&mut scheduling, watcher).await;
            self.scheduling = Some(scheduling);
            return done;
        }
        let limit = self.pipeline.parallelism.map_or(usize::MAX, |p| p as usize);
        let now = now_ms();
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
                    let r = &self.step_of(&self.rows[idx]).resources;
                    let workers = u64::from(r.workers.max(1));
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
                    return Ok(());
                }
            }
        }
    }

    /// Cluster mode: one scheduling cycle over every run's waiting and running steps; starts
    /// this run's admitted steps on their nodes, asks the victims chosen for them to stop,
    /// and gives the others their reasons. Queued rows past a cancellation or failFast end
    /// as in machine mode.
    async fn start_scheduled(
        &mut self,
        scheduling: &mut super::cluster::Scheduling,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        let now = now_ms();
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
            let ask = scheduling.ask(&self.run.team, self.step_of(&self.rows[idx]));
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
        let mut pending = std::mem::take(&mut self.pending);
        let before = pending.change();
        let (held, waiting) = self.store.claims(&self.run.id, before, &mine, now).await?;
        let verdict = scheduling.cycle(&self.run.id, &held, &waiting, now);
        for (dir, run, step, for_step) in &verdict.preempt {
            let file = Path::new(dir).join(contract::TERMINATE_FILE);
            if file.exists() {
                continue;
            }
            // As `sluice preempt` asks: the runtime stops it, syncs its checkpoint, and its
            // engine queues it again to resume from there.
            if std::fs::write(&file, b"preempt\n").is_ok() {
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
                    kind: "preempting".into(),
                    detail: Some(format!("{run}/{step}")),
                });
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
            if rate.is_some()
                && let Some(until) = self.rate_wake
                && until > now_ms()
            {
                // Known not due yet: no launch is prepared only to be put back.
                let reason = scheduling.rate_reason(&ask.team);
                self.show_wait(&name, reason, watcher);
                continue;
            }
            let Some(ready) = self.prepare_start(idx, watcher).await? else {
                continue;
            };
            let mut ready = *ready;
            ready.attempt.job = Some(serde_json::to_string(ask).unwrap_or_default());
            ready.attempt.nodes = Some(serde_json::to_string(&nodes).unwrap_or_default());
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
                        team: ask.team.as_str(),
                        interval_ms,
                        now: now_ms(),
                    }),
                    |held| scheduling.place(held, ask, &nodes),
                )
                .await?;
            let gpus = match placed {
                Placed::Started(gpus) => gpus,
                Placed::NoRoom => {
                    // Another engine took the room first: it waits for the next cycle.
                    let _ = std::fs::remove_dir_all(&ready.dir);
                    continue;
                }
                Placed::RateLimited { until } => {
                    let _ = std::fs::remove_dir_all(&ready.dir);
                    self.rate_wake = Some(until);
                    let reason = scheduling.rate_reason(&ask.team);
                    self.show_wait(&name, reason, watcher);
                    continue;
                }
            };
            let assigned: Vec<u32> = gpus.split(',').filter_map(|g| g.parse().ok()).collect();
            self.launch_started(idx, ready, assigned, watcher).await?;
        }
        Ok(())
    }

    /// A queued row of a run being cancelled, or stopped by failFast, ends `Cancelled` rather
    /// than starting (`onExit` steps still start). True when it did.
    async fn cancel_unstarted(
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

    /// A queued row's reason for waiting, committed with what comes next and shown when it
    /// changes.
    fn show_wait(&mut self, name: &str, reason: String, watcher: &mut dyn Watcher) {
        let Some(&idx) = self.by_name.get(name) else {
            return;
        };
        if self.rows[idx].reason.as_deref() == Some(reason.as_str()) {
            return;
        }
        self.rows[idx].reason = Some(reason);
        self.pending.steps.push(self.rows[idx].clone());
        watcher.step(&self.rows[idx], self.rows.len(), 0);
    }

    /// Starts one attempt of row `idx`, or ends it `Cached`. False: the pool has no room.
    async fn start(&mut self, idx: usize, watcher: &mut dyn Watcher) -> Result<bool, Error> {
        let Some(ready) = self.prepare_start(idx, watcher).await? else {
            return Ok(true);
        };
        let Ready {
            launch,
            attempt,
            row,
            dir,
            gpus,
        } = *ready;
        // Commit first: the attempt and its share of the pool exist before its runtime does.
        let mut pending = std::mem::take(&mut self.pending);
        let before = pending.change();
        let Some(assigned) = self
            .store
            .start_attempt(&self.run.id, &row, &attempt, &self.capacity, gpus, before)
            .await?
        else {
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(false);
        };
        let ready = Ready {
            launch,
            attempt,
            row,
            dir,
            gpus,
        };
        self.launch_started(idx, ready, assigned, watcher).await?;
        Ok(true)
    }

    /// The attempt row `idx` would start, its folder written; None when the row ended without
    /// one (skipped, failed before starting, or cached), which is committed.
    async fn prepare_start(
        &mut self,
        idx: usize,
        watcher: &mut dyn Watcher,
    ) -> Result<Option<Box<Ready>>, Error> {
        let step = self.step_of(&self.rows[idx]).clone();
        let number = self.rows[idx].attempts + 1;
        let built = launch::build(
            &self.scope(idx),
            &self.home,
            &step,
            &self.rows[idx],
            number,
            self.grace_ms,
            // Cluster mode: the scheduler has checked the GPUs against the Cluster's nodes.
            if self.cluster_mode {
                usize::MAX
            } else {
                self.capacity.gpus.len()
            },
        );
        let mut launch = match built {
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
        launch.heartbeat_ms = u64::try_from(self.heartbeat_timeout.as_millis() / 4)
            .unwrap_or(15_000)
            .max(50);
        if step.cache.is_some() && self.try_cache(idx, &step, &launch).await? {
            return self.commit_row(idx, watcher).await.map(|()| None);
        }
        let dir = launch::attempt_dir(&self.home, &self.run.id, &self.rows[idx].name, number);
        launch::prepare(&dir, &launch)
            .map_err(io(format!("cannot write attempt folder {}", dir.display())))?;
        let now = now_rfc3339();
        let attempt = AttemptRow {
            step: self.rows[idx].name.clone(),
            number,
            state: at::RUNNING.into(),
            dir: dir.display().to_string(),
            millicpu: step.resources.millicpu as i64 * i64::from(step.resources.workers),
            memory: step.resources.memory.unwrap_or(0) as i64 * i64::from(step.resources.workers),
            started_at: now.clone(),
            ..AttemptRow::default()
        };
        let mut row = self.rows[idx].clone();
        row.state = st::RUNNING.into();
        row.reason = None;
        row.attempts = number;
        row.not_before = None;
        if row.started_at.is_none() {
            row.started_at = Some(now);
        }
        let gpus = step.resources.gpu * step.resources.workers.max(1);
        Ok(Some(Box::new(Ready {
            launch,
            attempt,
            row,
            dir,
            gpus,
        })))
    }

    /// Hands a committed attempt (holding the GPUs `assigned`) to the runtime.
    async fn launch_started(
        &mut self,
        idx: usize,
        ready: Ready,
        assigned: Vec<u32>,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        let Ready {
            launch,
            mut attempt,
            row,
            dir,
            gpus: _,
        } = ready;
        if !assigned.is_empty() {
            // The GPUs are known once reserved: the launch is written again before the
            // runtime is handed it.
            let mut launch = launch.clone();
            launch.gpus = assigned.clone();
            launch::prepare(&dir, &launch)
                .map_err(io(format!("cannot write attempt folder {}", dir.display())))?;
            attempt.gpus = Some(
                assigned
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        let number = attempt.number;
        self.rows[idx].attempts = number;
        self.rows[idx].not_before = None;
        self.rows[idx].started_at = row.started_at.clone();
        self.set_state(idx, st::RUNNING, None);
        let handed = self.hand_over(number, &attempt.step, &dir).await;
        match handed {
            Ok(generation) => {
                self.live.insert(
                    attempt.step.clone(),
                    Live {
                        attempt,
                        ours: Some(generation),
                    },
                );
                watcher.step(&self.rows[idx], self.rows.len(), 0);
            }
            Err(e) => {
                // The runtime could not start: the attempt never ran; say why and fail it.
                self.live.insert(
                    attempt.step.clone(),
                    Live {
                        attempt: attempt.clone(),
                        ours: None,
                    },
                );
                let result = contract::Result {
                    end: End::Failed,
                    exit_code: None,
                    signal: None,
                    started_at: attempt.started_at.clone(),
                    ended_at: now_rfc3339(),
                    reason: Some(format!(
                        "cannot start the runtime ({}): {e}",
                        launch::runtime_command().map_or_else(|why| why, |r| r.to_string())
                    )),
                    metrics: BTreeMap::new(),
                };
                self.finish_attempt(&attempt.step, Some(result)).await?;
            }
        }
        Ok(())
    }

    async fn commit_row(&mut self, idx: usize, watcher: &mut dyn Watcher) -> Result<(), Error> {
        let row = self.rows[idx].clone();
        self.commit(Change {
            steps: vec![&row],
            ..Change::default()
        })
        .await?;
        watcher.step(&row, self.rows.len(), 0);
        Ok(())
    }

    /// Looks the step up in the cache; a hit whose outputs are gone is a miss.
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
        // No key (an input is missing, a cache file unreadable): the step runs and says why.
        let Ok(key) = super::cache::key(
            &self.objects,
            step,
            launch,
            key_text.as_deref(),
            Path::new(&self.run.workdir),
        )
        .await
        else {
            return Ok(false);
        };
        self.rows[idx].cache_key = Some(key.clone());
        if let Some(outputs) = self.store.cache_get(&self.run.team, &key).await? {
            if super::cache::outputs_exist(&self.objects, &outputs, &step.outputs).await {
                self.rows[idx].outputs = Some(outputs);
                self.set_state(idx, st::CACHED, Some(format!("cache hit {}", &key[..12])));
                return Ok(true);
            }
            self.store.delete_cache(&self.run.team, &key).await?;
        }
        Ok(false)
    }

    /// Commits what is pending, then `change`, in one transaction.
    async fn commit(&mut self, change: Change<'_>) -> Result<(), Error> {
        let Pending {
            steps,
            attempts,
            mut events,
        } = std::mem::take(&mut self.pending);
        events.extend(change.events);
        let all = Change {
            steps: steps.iter().chain(change.steps).collect(),
            new_steps: change.new_steps,
            attempts: attempts.iter().chain(change.attempts).collect(),
            run_end: change.run_end,
            events,
        };
        self.store.commit(&self.run.id, all).await?;
        Ok(())
    }

    /// Commits what is pending, if anything.
    async fn flush(&mut self) -> Result<(), Error> {
        if self.pending.steps.is_empty() && self.pending.events.is_empty() {
            return Ok(());
        }
        self.commit(Change::default()).await
    }

    /// Hands a prepared, committed attempt to the run's runtime, starting one if needed. A
    /// runtime that went away is replaced once.
    async fn hand_over(&mut self, number: i64, step: &str, dir: &Path) -> std::io::Result<u64> {
        for _ in 0..2 {
            if self.server.is_none() {
                self.generations += 1;
                let run_dir = self.home.join("attempts").join(&self.run.id);
                self.server = Some(Server::start(&run_dir, self.generations, self.tx.clone())?);
            }
            if let Some(server) = self.server.as_mut() {
                let generation = server.generation;
                match server.submit(number, step, dir).await {
                    Ok(()) => return Ok(generation),
                    Err(e) => {
                        tracing::warn!(
                            "the runtime stopped taking attempts ({e}); starting another"
                        );
                        self.runtime_gone(generation);
                    }
                }
            }
        }
        Err(std::io::Error::other("the runtime stopped taking attempts"))
    }

    /// The runtime process ended: what it was running is watched through the attempts' locks
    /// (a result if they ended, lost if not), and the next attempt starts a new one.
    fn runtime_gone(&mut self, generation: u64) {
        if self
            .server
            .as_ref()
            .is_some_and(|s| s.generation == generation)
        {
            self.server = None;
        }
        for live in self.live.values_mut() {
            if live.ours == Some(generation) {
                live.ours = None;
            }
        }
    }

    /// Declares lost the attempts whose runtime has been silent past the heartbeat timeout (it
    /// hangs, or its machine died): their programs are ended, a runtime of this engine that
    /// hangs is ended too, and each step is queued again at once, to resume from its
    /// checkpoint.
    async fn check_heartbeats(&mut self) -> Result<(), Error> {
        let now = std::time::SystemTime::now();
        let silent: Vec<(String, PathBuf, Option<u64>, Duration)> = self
            .live
            .iter()
            .filter_map(|(name, l)| {
                let dir = PathBuf::from(&l.attempt.dir);
                let modified = std::fs::metadata(dir.join(contract::LOCK_FILE))
                    .and_then(|m| m.modified())
                    .ok()?;
                let quiet = now.duration_since(modified).unwrap_or_default();
                (quiet > self.heartbeat_timeout).then(|| (name.clone(), dir, l.ours, quiet))
            })
            .collect();
        for (name, dir, ours, quiet) in silent {
            // A runtime that wakes up again must not sync over the next attempt's checkpoints.
            let _ = std::fs::write(dir.join(contract::LOST_FILE), b"");
            kill_programs(&dir);
            if let Some(generation) = ours {
                if let Some(server) = self.server.as_ref().filter(|s| s.generation == generation)
                    && let Some(pid) = server.pid.and_then(|p| i32::try_from(p).ok())
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                self.runtime_gone(generation);
            }
            self.lose_attempt(
                &name,
                format!(
                    "no heartbeat for {} (its runtime hangs or its machine died)",
                    crate::spec::units::format_duration(Duration::from_secs(
                        quiet.as_secs().max(1)
                    ))
                ),
            )
            .await?;
        }
        Ok(())
    }

    /// Keeps the attempt's log in the object store once it has ended (at
    /// `OBJECTS/logs/output.log`), in the background: the next trial or step need not wait for
    /// it (it cost about a tenth of a no-op step). The run waits for these uploads before it
    /// ends or lets go of its lease. A failure is logged, not fatal: the log stays readable in
    /// the attempt's folder, where `sluice logs` also looks.
    fn keep_log(&mut self, dir: &Path, objects: &str) {
        let from = dir.join(contract::LOG_FILE);
        if !std::fs::metadata(&from).is_ok_and(|m| m.len() > 0) {
            return;
        }
        let key = format!("{objects}/logs/output.log");
        let store = self.objects.clone();
        self.uploads.spawn(async move {
            if let Err(e) = store.put_path(&from, &key).await {
                tracing::warn!("cannot keep the log {}: {e}", from.display());
            }
        });
        // Collect the finished ones, so that the set stays small.
        while self.uploads.try_join_next().is_some() {}
    }

    /// Waits for the logs still being uploaded.
    async fn uploads_done(&mut self) {
        while self.uploads.join_next().await.is_some() {}
    }

    /// Checks attempts this engine did not start: an unlocked lock means the runtime ended.
    async fn poll_reattached(&mut self) -> Result<(), Error> {
        let watched: Vec<(String, PathBuf)> = self
            .live
            .iter()
            .filter(|(_, l)| l.ours.is_none())
            .map(|(n, l)| (n.clone(), PathBuf::from(&l.attempt.dir)))
            .collect();
        for (name, dir) in watched {
            match probe(&dir)
                .map_err(io(format!("cannot check attempt folder {}", dir.display())))?
            {
                Probe::Alive => {
                    if self.cancelling
                        && let Some(l) = self.live.get(&name)
                    {
                        terminate(l);
                    }
                }
                Probe::Ended(result) => self.finish_attempt(&name, Some(*result)).await?,
                Probe::Vanished(reason) => self.lose_attempt(&name, reason).await?,
            }
        }
        Ok(())
    }

    async fn lose_attempt(&mut self, name: &str, reason: String) -> Result<(), Error> {
        let Some(live) = self.live.remove(name) else {
            return Ok(());
        };
        let mut attempt = live.attempt;
        attempt.state = at::LOST.into();
        attempt.reason = Some(reason.clone());
        attempt.ended_at = Some(now_rfc3339());
        let idx = self.by_name[name];
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
    async fn finish_attempt(
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
        let mut attempt = live.attempt;
        let idx = self.by_name[name];
        let step = self.step_of(&self.rows[idx]).clone();
        super::probe::record_end(&mut attempt, &result);
        let dir = PathBuf::from(&attempt.dir);
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
        self.keep_log(&dir, &objects);
        let mut cache_put = None;
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
                if let Some(key) = &self.rows[idx].cache_key {
                    cache_put = Some((key.clone(), outputs.clone()));
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
        if let Some((key, outputs)) = cache_put {
            self.store
                .cache_put(&self.run.team, &key, &self.run.id, name, &outputs)
                .await?;
        }
        if self.cancelling {
            for l in self.live.values() {
                terminate(l);
            }
        }
        Ok(())
    }
}

/// Attempt ends decided but not yet committed, so that they share the transaction of the
/// next start instead of costing one of their own. Nothing is acted on because of them until
/// they are committed: a dependent's start commits them first, in its own transaction, and
/// the engine commits what is left before it waits or ends. An engine that dies first loses
/// nothing: each ended attempt's result is in its folder, and the next engine collects it.
/// An attempt about to start: its launch and folder written, not yet committed.
struct Ready {
    launch: sluice_runtime::contract::Launch,
    attempt: AttemptRow,
    row: StepRow,
    dir: PathBuf,
    /// GPUs the whole gang needs.
    gpus: u32,
}

#[derive(Default)]
struct Pending {
    steps: Vec<StepRow>,
    attempts: Vec<AttemptRow>,
    events: Vec<Event>,
}

impl Pending {
    /// What is pending, as a change to commit first in another transaction (the events are
    /// moved into it).
    fn change(&mut self) -> Change<'_> {
        Change {
            steps: self.steps.iter().collect(),
            attempts: self.attempts.iter().collect(),
            events: std::mem::take(&mut self.events),
            ..Change::default()
        }
    }
}

/// A stopped trial's reason: what it was asked to stop for.
fn stopped_reason(reason: Option<&str>) -> String {
    reason
        .and_then(|r| r.strip_prefix(sweeping::STOPPING))
        .unwrap_or("stopped")
        .to_owned()
}

enum Blocked {
    Waiting,
    Cancel(String),
}

/// Asks an attempt's runtime to stop it (SIGTERM to the program's group, the grace period,
/// SIGKILL; the attempt ends `Terminated`), through a file in its folder: that reaches a
/// runtime this engine started and one it reattached to alike.
fn terminate(live: &Live) {
    let file = Path::new(&live.attempt.dir).join(contract::TERMINATE_FILE);
    if let Err(e) = std::fs::write(&file, b"") {
        tracing::warn!("cannot ask {} to stop: {e}", live.attempt.dir);
    }
}
