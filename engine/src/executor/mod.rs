//! The executor seam: where a run's attempts run, and how the driver learns that they ended.
//!
//! The driver decides and commits; an executor carries out what was committed and reports
//! back. It launches attempts, finds them again after an engine restart, stops them with a
//! reason, reads their metrics and logs, says how much room its machine has, and turns what
//! happens to attempts into [`Event`]s. It never writes run state.
//!
//! The types here name attempts by identity ([`AttemptId`]) and by an opaque, serialisable
//! [`Handle`] kept with the attempt's row, never by a folder, a process id or a file: the local
//! executor ([`local`]) keeps attempts in folders on this machine, a Kubernetes executor will
//! keep them in pods reached through the API and the object store, and the driver cannot
//! tell the difference. Methods return `Send` futures, so that a driver can be moved between
//! threads.

pub mod chosen;
pub mod kubernetes;
pub mod local;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_runtime::contract;

/// Which attempt: the run, the step instance (`train`, `evaluate[1]`) and its number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptId {
    pub run: String,
    pub step: String,
    pub number: i64,
}

/// How an executor finds an attempt again, from this process or another, before or after an
/// engine restart. Opaque to everyone but the executor that made it; kept with the attempt's
/// row (the store's `dir` column) so that any `sluice` on the home can reach the attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Handle(String);

impl Handle {
    /// A handle as stored with an attempt's row.
    pub fn new(stored: impl Into<String>) -> Handle {
        Handle(stored.into())
    }

    /// The text kept with the attempt's row.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an attempt is asked to stop. Each way ends it the same (SIGTERM, the grace period,
/// SIGKILL; the attempt ends `Terminated`); the reason is kept for whoever reads it later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The run was cancelled (or stopped by failFast), or a trial was asked to stop.
    Cancel,
    /// The scheduler (or `sluice preempt`) needs its room: it is queued again and resumes
    /// from its checkpoint.
    Preempt,
    /// The run's deadline passed.
    Timeout,
}

/// What an executor finds of an attempt it is asked about.
#[derive(Debug)]
pub enum Probe {
    /// It still runs: its end will come as an [`Event`].
    Running,
    /// It ended, as its runtime recorded.
    Ended(Box<contract::Result>),
    /// It is gone without a recorded end (its runtime died, or never started); why.
    Lost(String),
}

/// What happened to an attempt.
#[derive(Debug)]
pub enum Event {
    /// The attempt ended; how, as its runtime recorded it (None: it stopped without recording
    /// its end, which the driver treats as lost).
    Ended {
        attempt: AttemptId,
        result: Option<Box<contract::Result>>,
    },
    /// The attempt is gone without an end (its runtime died, or was silent past the heartbeat
    /// timeout and has been fenced off): the step may run again.
    Lost { attempt: AttemptId, reason: String },
    /// The attempt's workers do not run yet, and why (`Unschedulable: ...`), or (None) no
    /// longer wait: the step's reason, shown while it lasts.
    Waiting {
        attempt: AttemptId,
        reason: Option<String>,
    },
}

/// The room an executor's machine offers (the local pool); a cluster executor's room is its
/// Cluster's nodes, which the scheduler places onto.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Thousandths of a core.
    pub millicpu: i64,
    /// Bytes.
    pub memory: i64,
    /// GPU indices.
    pub gpus: Vec<u32>,
}

/// Where and in what an attempt's workers run, for executors that put them somewhere
/// themselves (Kubernetes); the local executor runs them here and ignores it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The Cluster node the scheduler chose for each worker, in rank order.
    pub nodes: Vec<crate::scheduler::NodeRef>,
    /// The step's `image` (None: the executor's default).
    pub image: Option<String>,
    /// Per worker.
    pub gpu: u32,
    pub millicpu: u64,
    pub memory: u64,
    /// The step's `flavor` (`admission: kueue`: its pool's labels select the nodes).
    pub flavor: Option<String>,
    /// Extended resources per worker, by name (Kubernetes limits).
    pub extended: BTreeMap<String, u64>,
}

/// The settings of a Cluster that an executor and its runtimes follow (`runtime.*` and
/// `preemption.gracePeriod`); their defaults without a Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// An attempt silent this long is declared lost (`runtime.heartbeatTimeout`, 60 s).
    pub heartbeat_timeout: Duration,
    /// SIGTERM to SIGKILL, for preemption, cancellation and timeouts
    /// (`preemption.gracePeriod`, 30 s).
    pub grace_period: Duration,
    /// Complete checkpoints kept per step (`runtime.keepCheckpoints`, 3).
    pub keep_checkpoints: usize,
    /// The engine's variables a step inherits beyond the default allow-list
    /// (`runtime.passEnv`; the local executor's, see `contract::Inherit`).
    pub pass_env: Vec<String>,
    /// Whose environment steps start from on the local executor.
    pub environment: StepEnvironment,
}

/// What a step's program inherits of the engine's environment on the local executor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StepEnvironment {
    /// An embedded engine's (`sluice run` on the user's machine, for the user): the user's
    /// environment, but the engine's own secrets (`contract::ENGINE_ONLY`).
    #[default]
    User,
    /// A server's, for many teams: the default allow-list and `runtime.passEnv` only, never
    /// the server's own variables.
    Allowed,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            heartbeat_timeout: Duration::from_secs(60),
            grace_period: Duration::from_secs(30),
            keep_checkpoints: 3,
            pass_env: Vec::new(),
            environment: StepEnvironment::User,
        }
    }
}

impl Settings {
    /// How often a runtime proves it is alive: a quarter of the timeout (at least every 50 ms).
    pub fn heartbeat_every(&self) -> Duration {
        (self.heartbeat_timeout / 4).max(Duration::from_millis(50))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The executor cannot run attempts now (its runtime cannot start, its API is down).
    #[error("{0}")]
    Unavailable(String),
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// Where attempts run. See the module's documentation.
pub trait Executor: Send {
    /// The room this executor's machine has (the local pool).
    fn capacity(&self) -> &Capacity;

    /// The handle attempt `id` has, or will have once prepared: a pure function of its
    /// identity, so that an ended attempt is found again without its row.
    fn handle(&self, id: &AttemptId) -> Handle;

    /// Where the attempt's files are as its runtime sees them (its outputs, inputs and
    /// checkpoint folders go under it in the launch): a folder on this machine for the local
    /// executor, a mount inside the pod for Kubernetes.
    fn runtime_dir(&self, id: &AttemptId) -> PathBuf;

    /// Makes ready what attempt `id` needs to run `launch`, before the attempt is committed;
    /// nothing runs yet.
    fn prepare(
        &mut self,
        id: &AttemptId,
        launch: &contract::Launch,
    ) -> impl Future<Output = Result<Handle, Error>> + Send;

    /// Throws away a prepared attempt that was not committed (no room after all).
    fn discard(&mut self, handle: &Handle) -> impl Future<Output = ()> + Send;

    /// Runs a prepared and committed attempt. `launch` is the one prepared, with what was
    /// decided at the commit (its GPUs) filled in; `placement` says where its workers go. Its
    /// end comes as an [`Event`].
    fn launch(
        &mut self,
        id: &AttemptId,
        handle: &Handle,
        launch: &contract::Launch,
        placement: &Placement,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// After an engine restart: what became of an attempt recorded as running. One still
    /// running is watched from now on, its end coming as an [`Event`].
    fn reattach(
        &mut self,
        id: &AttemptId,
        handle: &Handle,
    ) -> impl Future<Output = Result<Probe, Error>> + Send;

    /// How an ended attempt ended, as its runtime recorded it (None when that record is
    /// gone).
    fn result(&self, handle: &Handle) -> impl Future<Output = Option<contract::Result>> + Send;

    /// Whether a stop was already asked of this attempt (by any engine or command).
    fn stop_asked(&self, handle: &Handle) -> impl Future<Output = bool> + Send;

    /// Asks an attempt to stop (of this run or another), for `reason`. Asking again is
    /// harmless.
    fn stop(
        &self,
        handle: &Handle,
        reason: Reason,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The values of `metric` an attempt has reported so far: (step, value) in the order
    /// reported (a value without a step is numbered by its place).
    fn metrics(
        &self,
        handle: &Handle,
        metric: &str,
    ) -> impl Future<Output = Vec<(u64, f64)>> + Send;

    /// An attempt's log (its output, one line per line written) from byte `from` on.
    fn log(
        &self,
        handle: &Handle,
        from: u64,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send;

    /// An attempt's end is committed: what should outlive it (its log) is kept under the
    /// object-store prefix `objects`, in the background.
    fn ended(&mut self, handle: &Handle, objects: &str);

    /// Waits for what `ended` keeps in the background (before the run ends or is let go).
    fn settle(&mut self) -> impl Future<Output = ()> + Send;

    /// The next thing that happened to an attempt this executor watches. Cancel-safe: a
    /// dropped call loses nothing.
    fn next_event(&mut self) -> impl Future<Output = Event> + Send;

    /// The run can go on no more (its state is gone): everything this executor started for it
    /// is stopped, at once.
    fn halt(&mut self);
}
