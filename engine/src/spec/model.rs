//! The validated model: the only spec types the rest of the engine imports.
//!
//! Everything here has been checked: names are valid and unique, references resolve,
//! durations and quantities are parsed, defaults are merged into steps. Positions are kept
//! only where later stages (the DAG) still report problems.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::diagnostic::Pos;
use super::expr::Expr;
use super::template::{RefAt, Template};
use super::yaml::Node;

/// What the runtime is told about collecting a step's metrics beyond `NAME=VALUE` lines (Katib's
/// collectors, filters and strategies): carried verbatim into `launch.json`.
pub use sluice_runtime::contract::{Collect, FileFormat, MetricsFile, Strategy};

/// Common to every document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metadata {
    pub name: String,
    pub team: String,
    pub labels: BTreeMap<String, String>,
}

/// One document of a file, by kind.
#[derive(Clone, Debug)]
pub enum Document {
    Pipeline(Box<Pipeline>),
    Sweep(Box<Sweep>),
    Schedule(Box<Schedule>),
    /// Recognised kinds whose own validation and execution come later; the raw spec is kept.
    Pending(Pending),
}

impl Document {
    pub fn metadata(&self) -> &Metadata {
        match self {
            Document::Pipeline(p) => &p.metadata,
            Document::Sweep(s) => &s.metadata,
            Document::Schedule(s) => &s.metadata,
            Document::Pending(p) => &p.metadata,
        }
    }

    pub fn kind(&self) -> &str {
        match self {
            Document::Pipeline(_) => "Pipeline",
            Document::Sweep(_) => "Sweep",
            Document::Schedule(_) => "Schedule",
            Document::Pending(p) => &p.kind,
        }
    }
}

/// A validated `kind: Schedule`: when a team's applied pipeline (or sweep) runs by itself.
/// The expression and the zone are checked (`schedule::cron` reads them again when it
/// computes fires); the parameters are checked against the pipeline when it is applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub metadata: Metadata,
    /// The applied pipeline or sweep of the same team it runs, and where it is named.
    pub pipeline: String,
    pub pipeline_pos: Pos,
    /// Five fields or an `@` form.
    pub cron: String,
    /// An IANA name; `UTC` by default.
    pub timezone: String,
    /// `NAME=VALUE` for the run, as `-p` gives them, with where each is written.
    pub params: Vec<(String, Pos)>,
    pub concurrency: Concurrency,
    pub catch_up: CatchUp,
    /// A tick later than this after its time is not run (recorded as missed).
    pub starting_deadline: Option<Duration>,
    /// How many of its ended runs to keep (older ones are deleted); all without.
    pub keep_runs: Option<u64>,
    pub suspend: bool,
}

/// What a tick does while the schedule's previous run still runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrency {
    /// Start it anyway.
    #[default]
    Allow,
    /// Skip the tick (recorded).
    Forbid,
    /// Cancel the previous run, then start this one.
    Replace,
}

/// Which ticks missed while no server ran are run when one starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CatchUp {
    /// None of them (each recorded as missed).
    None,
    /// The newest one; the others recorded as missed.
    #[default]
    Latest,
    /// All of them in order, at most 100; the rest recorded as missed.
    All,
}

/// A validated `kind: Sweep` (see the sweep contract).
#[derive(Clone, Debug)]
pub struct Sweep {
    pub metadata: Metadata,
    pub objective: Objective,
    pub algorithm: SweepAlgorithm,
    pub early_stopping: Option<EarlyStopping>,
    pub budget: Budget,
    /// By name, in name order.
    pub params: BTreeMap<String, SweepParam>,
    /// The step each trial runs (named `trial`); `{{params.NAME}}` are the proposed values.
    pub trial: Step,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Objective {
    pub metric: String,
    pub goal: Goal,
    pub target: Option<f64>,
    pub additional_metrics: Vec<String>,
    /// Which observation of a metric is a trial's value, for the metrics that do not take the
    /// last one (a `kind: Sweep`'s `objective.strategy`, Katib's `metricStrategies` and its
    /// defaults). Given to each trial's runtime, which computes the value.
    pub strategies: BTreeMap<String, Strategy>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Goal {
    Maximize,
    Minimize,
}

/// The algorithm and its settings, defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepAlgorithm {
    /// `grid`, `random`, `sobol`, `tpe`, `hyperband` or `asha`.
    pub name: String,
    pub seed: u64,
    /// TPE.
    pub startup_trials: u64,
    pub candidates: u64,
    pub gamma: f64,
    /// Hyperband and ASHA: the parameter holding a trial's budget, and its range.
    pub resource: Option<String>,
    pub min_resource: Option<f64>,
    pub max_resource: Option<f64>,
    pub eta: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EarlyStopping {
    pub min_trials: u64,
    pub start_step: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    /// Required except for grid (the whole grid by default).
    pub max_trials: Option<u64>,
    pub parallelism: u32,
    pub max_failed_trials: Option<u64>,
    pub max_duration: Option<Duration>,
}

/// One searched parameter of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub enum SweepParam {
    /// A real number in `[min, max]`, on a log scale if `log`, a multiple of `step` from `min`
    /// if given.
    Float {
        min: f64,
        max: f64,
        log: bool,
        step: Option<f64>,
    },
    /// An integer in `[min, max]`, every `step` (default 1) from `min`.
    Int {
        min: i64,
        max: i64,
        log: bool,
        step: i64,
    },
    /// One of `values`.
    Categorical { values: Vec<String> },
}

/// A `Cluster`, `Schedule`, `Workload` or Katib `Experiment` document: recognised,
/// with valid metadata, but not yet something this version of sluice can validate or run.
#[derive(Clone, Debug)]
pub struct Pending {
    pub kind: String,
    pub metadata: Metadata,
    pub pos: Pos,
    pub spec: Option<Node>,
}

#[derive(Clone, Debug)]
pub struct Pipeline {
    pub metadata: Metadata,
    /// The file it came from; a step's default `workdir` is this file's folder.
    pub path: String,
    pub params: Vec<Param>,
    pub parallelism: Option<u32>,
    pub fail_fast: bool,
    pub timeout: Option<Duration>,
    /// All steps in file order; those named in `onExit` have `on_exit` set.
    pub steps: Vec<Step>,
    /// Made from a `kind: Sweep` file: one sweep step, named `sweep`, whose trials are
    /// `trial[N]`.
    pub from_sweep: bool,
}

impl Pipeline {
    /// The pipeline a `kind: Sweep` file runs as: one step holding the sweep.
    pub fn of_sweep(sweep: &Sweep, path: &str) -> Pipeline {
        let mut step = sweep.trial.clone();
        step.name = "sweep".into();
        step.action = Action::Sweep {
            params: sweep.params.keys().cloned().collect(),
            sweep: Some(Box::new(sweep.clone())),
        };
        Pipeline {
            metadata: sweep.metadata.clone(),
            path: path.to_owned(),
            params: Vec::new(),
            parallelism: None,
            fail_fast: false,
            timeout: None,
            steps: vec![step],
            from_sweep: true,
        }
    }
}

impl Pipeline {
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    Int,
    Float,
    String,
    Bool,
    List,
}

impl ParamType {
    pub const NAMES: [&'static str; 5] = ["int", "float", "string", "bool", "list"];

    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "int" => Self::Int,
            "float" => Self::Float,
            "string" => Self::String,
            "bool" => Self::Bool,
            "list" => Self::List,
            _ => return None,
        })
    }

    /// What a value of this type looks like, in words.
    pub fn expected(self) -> &'static str {
        match self {
            Self::Int => "an integer",
            Self::Float => "a number",
            Self::String => "a string",
            Self::Bool => "true or false",
            Self::List => "a list",
        }
    }
}

/// A parameter value, typed. Lists hold JSON values (they come from `-p` as JSON).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    Int(i64),
    Float(f64),
    String(String),
    Bool(bool),
    List(Vec<serde_json::Value>),
}

impl ParamValue {
    /// The value as JSON, as `SLUICE_PARAMS` holds it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// The text a template inserts: numbers and booleans as written, lists as JSON.
    pub fn to_text(&self) -> String {
        match self {
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Float(f) => f.to_string(),
            ParamValue::String(s) => s.clone(),
            ParamValue::Bool(b) => b.to_string(),
            ParamValue::List(l) => serde_json::Value::Array(l.clone()).to_string(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub pos: Pos,
    pub ty: ParamType,
    /// `None`: the parameter is required.
    pub default: Option<ParamValue>,
    /// The allowed values, when restricted.
    pub values: Option<Vec<ParamValue>>,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    pub pos: Pos,
    pub action: Action,
    pub needs: Vec<Need>,
    pub workdir: Option<Template>,
    /// Where `workdir` is written (the step's own, or the defaults').
    pub workdir_pos: Option<Pos>,
    pub env: BTreeMap<String, Template>,
    pub image: Option<String>,
    pub resources: Resources,
    pub outputs: Vec<String>,
    pub retry: Retry,
    pub timeout: Option<Duration>,
    /// `None`: checkpointing is off.
    pub checkpoint: Option<Duration>,
    pub cache: Option<Cache>,
    pub for_each: Option<ForEach>,
    pub when: Option<When>,
    pub priority: Option<String>,
    pub interruptible: bool,
    /// Read `NAME=VALUE` pairs on standard output and standard error (`metrics: {stdout: false}`
    /// turns it off).
    pub metrics_stdout: bool,
    /// Katib's metrics collector (filters, a metrics file) and the strategies of a sweep's
    /// trial; the default for everything else.
    pub collect: Collect,
    /// Listed in the pipeline's `onExit`: runs after everything else, outside the DAG.
    pub on_exit: bool,
}

/// A `needs` entry with where it was written, so the DAG can point at it.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    pub step: String,
    pub pos: Pos,
}

#[derive(Clone, Debug)]
pub enum Action {
    Run(Template),
    Command(Vec<Template>),
    /// A nested sweep. The names of its parameters are kept so that
    /// `{{steps.S.best.params.NAME}}` can be checked even when the sweep itself is invalid;
    /// `sweep` is the validated sweep (None when it had errors, which were reported).
    Sweep {
        params: Vec<String>,
        sweep: Option<Box<Sweep>>,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resources {
    /// Cores per worker, in thousandths (`500m` is 500).
    pub millicpu: u64,
    /// Bytes per worker; `None`: not reserved.
    pub memory: Option<u64>,
    pub gpu: u32,
    pub workers: u32,
    pub flavor: Option<String>,
    /// Extended resources per worker (`nvidia.com/mig-1g.10gb: 2`), by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            millicpu: 1000,
            memory: None,
            gpu: 0,
            workers: 1,
            flavor: None,
            extended: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RetryOn {
    Failure,
    Timeout,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Retry {
    pub limit: u32,
    pub backoff: Duration,
    pub factor: f64,
    pub max_backoff: Duration,
    pub on: Vec<RetryOn>,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            limit: 0,
            backoff: Duration::from_secs(10),
            factor: 2.0,
            max_backoff: Duration::from_secs(600),
            on: vec![RetryOn::Failure, RetryOn::Timeout],
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cache {
    pub key: Option<Template>,
    /// Each path with where it is written.
    pub files: Vec<(String, Pos)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ForEach {
    /// Items written in the file.
    Items(Vec<serde_json::Value>),
    /// `{{params.NAME}}` (a list parameter, known when the run starts) or
    /// `{{steps.S.outputs.NAME}}` (a JSON list, known only when that step has ended).
    Ref(RefAt),
}

impl Step {
    /// Every template reference of the step, wherever it is written.
    pub fn refs(&self) -> Vec<&RefAt> {
        let mut out: Vec<&RefAt> = Vec::new();
        match &self.action {
            Action::Run(t) => out.extend(t.refs()),
            Action::Command(args) => out.extend(args.iter().flat_map(Template::refs)),
            Action::Sweep { .. } => {}
        }
        out.extend(self.env.values().flat_map(Template::refs));
        if let Some(w) = &self.workdir {
            out.extend(w.refs());
        }
        if let Some(w) = &self.when {
            out.extend(w.expr.refs());
        }
        if let Some(Cache { key: Some(k), .. }) = &self.cache {
            out.extend(k.refs());
        }
        if let Some(ForEach::Ref(r)) = &self.for_each {
            out.push(r);
        }
        out
    }

    pub fn is_fan_out(&self) -> bool {
        self.for_each.is_some()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct When {
    pub text: String,
    pub expr: Expr,
}

pub const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// The scheduling part of a `kind: Cluster` (see `spec::cluster`).
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSpec {
    pub name: String,
    pub pools: Vec<ClusterPool>,
    pub teams: Vec<ClusterTeam>,
    pub priorities: Vec<PriorityClass>,
    pub scheduling: SchedulingSpec,
    pub runtime: RuntimeSpec,
    /// Where steps run (`executor:`).
    pub executor: ExecutorKind,
    /// `kubernetes:`, for `executor: kubernetes`.
    pub kubernetes: Option<KubernetesSpec>,
}

/// A Cluster's `executor:`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutorKind {
    /// Steps run as processes of this machine (the default).
    #[default]
    Local,
    /// Steps run as pods of the Kubernetes cluster the engine's kubeconfig (or service account)
    /// reaches.
    Kubernetes,
}

/// A Cluster's `kubernetes:` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesSpec {
    /// Where step pods run (default: the kubeconfig's, or the server's own, namespace).
    pub namespace: Option<String>,
    /// The pods' service account (default: the namespace's `default`).
    pub service_account: Option<String>,
    /// The image holding `sluice-runtime`, which an init container copies into each pod.
    pub runtime_image: String,
    /// The image of steps that name none (`defaultImage`, default python:3.12-slim).
    pub default_image: String,
    pub admission: Admission,
    /// A Secret whose keys become the environment of each step's container (`envFrom`): the
    /// object store's credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_ENDPOINT_URL`...), so that pods need no Kubernetes credentials to reach it.
    pub objects_secret: Option<String>,
    /// A pod not running this long after its creation is a failed placement (default 5m).
    pub pod_start_timeout: std::time::Duration,
}

/// Who admits pods: sluice itself, or Kueue (`admission: kueue`: each attempt a suspended
/// Job that Kueue admits, see `docs/kubernetes.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Sluice,
    Kueue,
}

/// `runtime:` of a Cluster: what the engine expects of its attempts' runtimes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeSpec {
    /// An attempt silent this long is declared lost (`heartbeatTimeout`, default 60 s).
    pub heartbeat_timeout: Duration,
    /// Complete checkpoints kept per step (`keepCheckpoints`, default 3).
    pub keep_checkpoints: u32,
    /// Variables of the engine's environment steps inherit on the local executor beyond the
    /// default allow-list (`passEnv`: names, or prefixes ending in `*`).
    pub pass_env: Vec<String>,
}

impl Default for RuntimeSpec {
    fn default() -> Self {
        RuntimeSpec {
            heartbeat_timeout: Duration::from_secs(60),
            keep_checkpoints: 3,
            pass_env: Vec::new(),
        }
    }
}

/// Resources as written: each may be absent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quantities {
    pub gpu: Option<u64>,
    pub millicpu: Option<u64>,
    pub memory: Option<u64>,
    /// Extended resources named (`nvidia.com/mig-1g.10gb: 7`); those not named are absent.
    pub extended: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPool {
    pub name: String,
    /// Declared nodes; 0 when the nodes are read from the cluster (`from_cluster`).
    pub nodes: u32,
    /// On Kubernetes with `nodes` omitted: the pool is whichever of the cluster's nodes carry
    /// its labels, with their allocatable resources, followed as they come and go.
    pub from_cluster: bool,
    /// Per node. For a pool read from the cluster, a cap on each node's allocatable (what is
    /// not named is not capped).
    pub resources: Quantities,
    pub labels: BTreeMap<String, String>,
    pub interruptible: bool,
    pub gpu_hour: f64,
    pub cpu_hour: f64,
    /// Price of one unit-hour of each extended resource (`price: {nvidia.com/mig-1g.10gb: 0.4}`).
    pub extended_hour: BTreeMap<String, f64>,
    /// The nodes' taints, which the pool's pods tolerate on Kubernetes.
    pub taints: Vec<Taint>,
}

/// A node taint of a pool (`{key, value, effect}`), as Kubernetes writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`; None: every effect.
    pub effect: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ClusterTeam {
    pub name: String,
    pub weight: f64,
    pub quota: Option<Quantities>,
    pub borrow_limit: Option<Quantities>,
    pub max_trials_per_minute: Option<u64>,
    pub max_queued: Option<u64>,
    /// `quotaPools`: the pools where the quota is guaranteed and counted (None: every pool);
    /// use of other pools is borrowed.
    pub quota_pools: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PriorityClass {
    pub name: String,
    pub value: i64,
    pub default: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulingSpec {
    /// `fifo`, `priority` or `fair`.
    pub policy: String,
    pub backfill: bool,
    /// `binpack` or `spread`.
    pub placement: String,
    pub starvation_limit: Option<Duration>,
    /// `preemption.withinTeam: lowerPriority`.
    pub within_team: bool,
    /// `preemption.reclaimBorrowed`.
    pub reclaim: bool,
    /// `preemption.acrossTeams.below`: a step may preempt other teams' steps whose class is
    /// lower than both its own and this one (a priority class name; None: never).
    pub across_below: Option<String>,
    pub grace_period: Duration,
}
