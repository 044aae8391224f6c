//! The contract between the engine and `sluice-runtime`: what the engine writes into an
//! attempt's folder before it starts the runtime, and what the runtime writes back.
//!
//! An attempt's folder (`$SLUICE_HOME/attempts/RUN/STEP/N/`) holds:
//!
//! | file | written by | when |
//! | --- | --- | --- |
//! | `launch.json` ([`Launch`]) | engine | before the runtime starts; never changed after |
//! | `lock` | runtime: created and locked (flock) first, held for the runtime's whole life, so "is the lock free?" tells whether it still runs; once the program is spawned the runtime writes [`Started`] into it as JSON (an empty lock: the program never started) | |
//! | `output.log` | runtime | while the program runs (created at the first line): one line per output line, `RFC3339 stream text` |
//! | `metrics.jsonl` | the program (`$SLUICE_METRICS_FILE`) and the runtime (`NAME=VALUE` on standard output and error, and the file of [`MetricsFile`]) | while the program runs |
//! | `collector/PATH` | the program: Katib's `File` collector's file ([`MetricsFile`]), at its path under the attempt's folder | while the program runs |
//! | `terminate` | engine | to stop the attempt: the runtime checks for it every 50 ms |
//! | `lost` | engine | the attempt was declared lost (no heartbeat): no more syncs for it |
//! | `result.json` ([`Result`]) | runtime | last, atomically (write, rename): the attempt has ended |
//!
//! The heartbeat is the lock's modification time, touched every `heartbeat_ms` from the
//! moment the runtime takes the lock.
//!
//! The engine never acts on an attempt without reading these files: after a crash it learns
//! everything it needs from them, which is how steps outlive the engine.
//!
//! # Pod mode (Kubernetes)
//!
//! On Kubernetes each worker of an attempt is a pod: an init container runs
//! `/sluice-runtime install /sluice-pod/bin/sluice-runtime` from the runtime image (a copy of
//! the binary, mode 0755, onto a volume shared with the step's container), and the step's
//! container runs `sluice-runtime pod`. The pod has no Kubernetes credentials and the engine
//! cannot read its files: everything goes through the object store ([`Launch::objects`],
//! S3 configured from the `AWS_*` environment).
//!
//! The environment of `sluice-runtime pod`:
//!
//! | variable | |
//! | --- | --- |
//! | `SLUICE_POD_LAUNCH` | required: this worker's [`Launch`] as JSON, `workers` 1 (a gang's `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ... are in its `env`, set by the engine). An empty `workdir` is the container's working directory. |
//! | `SLUICE_POD_KEY` | required: the key prefix of this worker's record, no trailing slash (`teams/T/attempts/RUN/STEP/N/w0`), written `KEY` below |
//! | `SLUICE_POD_DIR` | the local folder of the attempt's files above (default `/sluice-pod/attempt`), created if missing; `launch.json` is written into it |
//! | `JOB_COMPLETION_INDEX` | with `admission: kueue` only: the worker's rank, set by Kubernetes' Job controller in each pod of an Indexed Job (see below) |
//!
//! With `admission: kueue` every worker of an attempt is a pod of one Indexed Job, so all of
//! them share one pod template and one environment: the engine writes the worker's rank as
//! the placeholder [`INDEX`] (`{index}`) in `SLUICE_POD_KEY` (`.../pods/{index}`) and in the
//! launch's `env` values that differ by worker (`RANK`, `PET_NODE_RANK`), and writes rank 0's
//! launch. When `SLUICE_POD_KEY` holds the placeholder, the runtime reads
//! `JOB_COMPLETION_INDEX` (required then), replaces every `{index}` in the key and in the
//! `env` values with it, and for a rank above 0 applies [`Launch::for_rank`] (no outputs,
//! checkpoints restored only), as the engine does itself for a pod per worker.
//!
//! The attempt runs there exactly as `exec` runs it (inputs, checkpoints, outputs, timeout,
//! SIGTERM to the program's group, grace, SIGKILL, final checkpoint sync, `result.json`), and
//! the runtime writes under `KEY/`:
//!
//! | key | when |
//! | --- | --- |
//! | `KEY/heartbeat` | from the start, rewritten every `heartbeat_ms`: the current RFC 3339 time (how the engine tells whether a worker on an unreachable node is alive) |
//! | `KEY/started.json` ([`Started`]) | once the program is spawned (its pids are the pod's own, for information) |
//! | `KEY/metrics.jsonl` | while the program runs, when it grew (whole lines only), every `heartbeat_ms` or 2 s, whichever is shorter; at the end, whole |
//! | `KEY/output.log` | at the end (if the program printed anything) |
//! | `KEY/result.json` ([`Result`]) | at the end, LAST: its presence means the worker ended |
//!
//! At the end, in this order: `started.json` (if not yet there and the program started),
//! `output.log`, `metrics.jsonl`, then `result.json`. Each final upload is tried 4 times with
//! backoff (0.2, 0.4, 0.8 s), up to 30 s a try. While the attempt runs, each line of
//! `output.log` is also printed on the runtime's standard output as written (`TIME STREAM
//! TEXT`, as in the file), so the pod's log (`kubectl logs`) shows it live; the runtime's own
//! warnings go to standard error.
//!
//! The exit code is 0 once `result.json` is stored, whatever the attempt's end (the engine
//! reads the result); 2 when the pod is configured wrong (a variable missing or invalid); 1
//! when the runtime itself failed (the store cannot be opened, `result.json` cannot be
//! stored, ...), with the reason on standard error. SIGTERM (the kubelet, when the engine
//! deletes the pod to preempt or cancel it) ends the attempt `Terminated` as in `exec` and
//! still stores everything: the pod's `terminationGracePeriodSeconds` must cover
//! `grace_ms`, the final checkpoint sync and the final uploads. `terminate` and `lost` are not
//! used in pod mode (the engine deletes the pod instead). Only rank 0 of a gang syncs
//! checkpoints: the others have [`CheckpointSpec::restore_only`].
//!
//! This module has no dependencies beyond serde, so the engine can use it without linking
//! anything else of the runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub const LAUNCH_FILE: &str = "launch.json";
pub const LOCK_FILE: &str = "lock";

pub const RESULT_FILE: &str = "result.json";
/// Created by the engine to stop an attempt (cancel, failFast, preemption): the runtime sends
/// SIGTERM to the program's group, waits the grace period, then SIGKILL, and ends `Terminated`.
pub const TERMINATE_FILE: &str = "terminate";
/// Created by the engine when it declares the attempt lost (silent past the heartbeat
/// timeout): a runtime that wakes up again syncs nothing more for it.
pub const LOST_FILE: &str = "lost";
pub const LOG_FILE: &str = "output.log";
/// In pod mode, the placeholder of the worker's rank (`JOB_COMPLETION_INDEX`), see "Pod mode".
pub const INDEX: &str = "{index}";
/// The variable Kubernetes' Job controller sets to a pod's index in an Indexed Job.
pub const ENV_JOB_INDEX: &str = "JOB_COMPLETION_INDEX";
pub const METRICS_FILE: &str = "metrics.jsonl";

/// What to run, and how. Written by the engine, read by the runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The program: an argument vector (`command:`, or a `run:` line with no shell syntax),
    /// or `["/bin/sh", "-c", LINE]`.
    pub argv: Vec<String>,
    /// Working directory of the program.
    pub workdir: PathBuf,
    /// The program's environment besides what it inherits (see [`Inherit`]): the `SLUICE_*`
    /// variables and the step's `env`.
    pub env: BTreeMap<String, String>,
    /// Which of the runtime's own variables the program inherits. Absent (a launch written
    /// before this field): the default allow-list.
    #[serde(default)]
    pub inherit: Inherit,
    /// Per-attempt timeout in milliseconds: SIGTERM to the program's process group, then
    /// `grace_ms`, then SIGKILL; the attempt ends `Timeout`.
    pub timeout_ms: Option<u64>,
    pub grace_ms: u64,
    /// Artifacts to place before the program starts: each object (or folder of objects) at
    /// `key` is downloaded to `to`.
    pub inputs: Vec<Input>,
    /// Output names the program must write into `output_dir`; after a successful exit each is
    /// uploaded to `outputs_key/NAME`, and a missing one fails the attempt.
    pub outputs: Vec<String>,
    pub output_dir: PathBuf,
    /// The object store's URL (`file:///...`), see [`crate::objects`].
    pub objects: String,
    /// Where outputs go: the attempt's `outputs` key in the object store.
    pub outputs_key: String,
    /// `$SLUICE_CHECKPOINT_DIR`: restored before the program starts, synced while it runs.
    pub checkpoint_dir: PathBuf,
    /// Checkpointing, when the step has it (the default): see [`crate::checkpoint`].
    pub checkpoint: Option<CheckpointSpec>,
    /// GPU indices held by the attempt, `gpus_per_worker` to each worker in rank order: the
    /// runtime sets each worker's `CUDA_VISIBLE_DEVICES` from them.
    #[serde(default)]
    pub gpus: Vec<u32>,
    #[serde(default)]
    pub gpus_per_worker: u32,
    /// The machine has GPUs and the step asked none: `CUDA_VISIBLE_DEVICES` is set empty, so
    /// that it does not take GPUs held by others.
    #[serde(default)]
    pub hide_gpus: bool,
    /// How often the runtime shows it is alive, by touching the lock's modification time; the
    /// engine declares an attempt lost when that time is older than its heartbeat timeout.
    #[serde(default = "heartbeat_default")]
    pub heartbeat_ms: u64,
    /// How many copies of the program run together (a gang, `workers:`); 1 for a step.
    #[serde(default = "one")]
    pub workers: u32,
    /// Read `NAME=VALUE` pairs from standard output and standard error as metrics (rank 0's,
    /// in a gang).
    pub metrics_stdout: bool,
    /// Katib's metrics collectors and strategies, when the step has them.
    #[serde(default, skip_serializing_if = "Collect::is_plain")]
    pub collect: Collect,
}

/// The variables of the runtime's own environment a program inherits. The runtime holds what
/// the engine holds (the state store's URL, a server's token, the object store's credentials),
/// and none of that is the program's: it gets only what is named here, then the launch's `env`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Inherit {
    /// The local executor of a server: only these names; a name ending in `*` passes every
    /// variable that begins with what comes before it (`LC_*`). The engine writes
    /// [`DEFAULT_INHERIT`] and the Cluster's `runtime.passEnv`.
    Only(Vec<String>),
    /// The local executor of an embedded engine (`sluice run` on the user's own machine):
    /// the user's environment but these names (the engine's own secrets, [`ENGINE_ONLY`]).
    AllBut(Vec<String>),
    /// Pod mode: the container's environment is the image's and the pod's, so all of it
    /// but the runtime's own variables ([`RUNTIME_ONLY`]).
    AllButRuntime,
}

impl Default for Inherit {
    fn default() -> Self {
        Inherit::Only(DEFAULT_INHERIT.iter().map(|s| (*s).to_owned()).collect())
    }
}

/// What every program inherits from the runtime's environment on the local executor: what a
/// program needs to find its tools and speak the user's language, nothing that holds a secret.
pub const DEFAULT_INHERIT: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR", "TERM",
];

/// The engine's variables an embedded run's steps do not get though they get the rest of the
/// user's environment: the store's URL (with its password) and a server's token.
pub const ENGINE_ONLY: &[&str] = &[
    "SLUICE_STATE",
    "SLUICE_TOKEN",
    "SLUICE_POD_*",
    "SLUICE_OBJECTS_*",
];

/// The runtime's own variables in pod mode, never passed to the program: the worker's launch
/// and record key, and the object store's credentials (the Secret the pod's environment takes
/// under this prefix, see `objects`).
pub const RUNTIME_ONLY: &[&str] = &["SLUICE_POD_*", "SLUICE_OBJECTS_*"];

/// Whether `name` matches `pattern` (a name, or a prefix followed by `*`).
pub fn env_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

impl Inherit {
    /// The variables of `own` (the runtime's environment, `std::env::vars_os()`) a program
    /// inherits. A name that is not UTF-8 matches no pattern: only `AllButRuntime` passes it.
    pub fn select<I>(&self, own: I) -> Vec<(std::ffi::OsString, std::ffi::OsString)>
    where
        I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    {
        own.into_iter()
            .filter(|(name, _)| {
                let name = name.to_str();
                match self {
                    Inherit::Only(names) => {
                        name.is_some_and(|n| names.iter().any(|p| env_matches(p, n)))
                    }
                    Inherit::AllBut(names) => {
                        name.is_none_or(|n| !names.iter().any(|p| env_matches(p, n)))
                    }
                    Inherit::AllButRuntime => {
                        name.is_none_or(|n| !RUNTIME_ONLY.iter().any(|p| env_matches(p, n)))
                    }
                }
            })
            .collect()
    }
}

/// How metrics are collected besides `NAME=VALUE` pairs and `$SLUICE_METRICS_FILE`, and how a
/// metric's observations become the attempt's value: what a Katib `Experiment`'s
/// `metricsCollectorSpec` and `objective.metricStrategies` say (a `kind: Sweep`'s
/// `objective.strategy` too).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Collect {
    /// Katib's `source.filter.metricsFormat`: regular expressions, each with a metric's name in
    /// its first group and its value in its second. When there are any, they replace the
    /// `NAME=VALUE` convention, for output lines and for a `Text` [`MetricsFile`] alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<String>,
    /// Katib's `File` collector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<MetricsFile>,
    /// Per metric, which observation is the attempt's value (`Latest` when absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub strategies: BTreeMap<String, Strategy>,
}

impl Launch {
    /// The launch of rank `rank` of a gang from rank 0's: only rank 0 keeps the outputs and
    /// syncs the checkpoint; the others restore it.
    pub fn for_rank(&mut self, rank: u32) {
        if rank > 0 {
            self.outputs.clear();
            if let Some(c) = self.checkpoint.as_mut() {
                c.restore_only = true;
            }
        }
    }
}

impl Collect {
    /// Nothing beyond the defaults.
    pub fn is_plain(&self) -> bool {
        self == &Collect::default()
    }
}

/// A file the program writes its metrics to, read as Katib's file metrics collector reads it.
///
/// Katib mounts a volume of the trial's own at the file's folder; a laptop has no such
/// folder, and parallel trials would share it. So the runtime gives each attempt its own: the
/// file is `collector/PATH` in the attempt's folder (its parent folders made before the
/// program starts), and each occurrence of `path` in the argument vector and in the
/// environment's values is replaced by it. The file is read while the program runs (early
/// stopping sees it) and once more after it ends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsFile {
    /// The path as the experiment names it (`/var/log/katib/metrics.log`).
    pub path: String,
    pub format: FileFormat,
    /// `Json`: the keys read, each a metric (Katib reads the objective and the additional
    /// metrics, and nothing else of a line).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

impl MetricsFile {
    /// Where the attempt in `dir` finds the file.
    pub fn local(&self, dir: &std::path::Path) -> PathBuf {
        let relative: PathBuf = std::path::Path::new(&self.path)
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        dir.join(COLLECTOR_DIR).join(relative)
    }
}

/// The attempt's folder for the files of [`MetricsFile`].
pub const COLLECTOR_DIR: &str = "collector";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileFormat {
    /// Lines of `NAME=VALUE` pairs, or what [`Collect::filters`] match.
    Text,
    /// One JSON object per line, metrics as keys (values numbers or numeric strings, as
    /// `cloudml-hypertune` writes them); `step`, `global_step` or `epoch` gives the step.
    Json,
}

/// Which of a metric's observations is the attempt's value (Katib's `metricStrategies`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    #[default]
    Latest,
    Max,
    Min,
}

fn one() -> u32 {
    1
}

fn heartbeat_default() -> u64 {
    15_000
}

/// Where and how often a step's checkpoints are synced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSpec {
    /// Sync every this many milliseconds when something changed, and once after the program.
    pub every_ms: u64,
    /// The step's checkpoints in the object store (`teams/TEAM/checkpoints/RUN/STEP`).
    pub prefix: String,
    /// Complete checkpoints kept.
    pub keep: usize,
    /// Restore before the program starts, never sync: the other workers of a gang on
    /// Kubernetes, where only rank 0 syncs.
    #[serde(default)]
    pub restore_only: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// An object store key: one object, or a folder of objects under `key/`.
    pub key: String,
    pub to: PathBuf,
}

/// Written into `lock` once the program has been spawned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// The runtime's own process id.
    pub runtime_pid: u32,
    /// The program's process id, which is also its process group (rank 0's for a gang).
    pub pid: u32,
    /// Every worker's process group (one for a step, `workers` for a gang).
    #[serde(default)]
    pub groups: Vec<u32>,
    /// RFC 3339.
    pub started_at: String,
}

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    Succeeded,
    Failed,
    Timeout,
    /// SIGTERM reached the runtime (cancel or preemption) and the program was stopped.
    Terminated,
}

/// The attempt's end. Written last; its presence means the attempt is over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Result {
    pub end: End,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub started_at: String,
    pub ended_at: String,
    /// Why it failed, in words (`output 'model' was not written`, `cannot start 'pyhton': not
    /// found`); a program that failed gets its exit code or signal followed by the last lines
    /// of its standard error (`exit code 2: python3: can't open file 'x.py'`), bounded.
    pub reason: Option<String>,
    /// The value of each metric: its last observation, or its largest or smallest as
    /// [`Collect::strategies`] says.
    pub metrics: BTreeMap<String, f64>,
}

#[cfg(test)]
mod inherit_tests {
    use std::ffi::OsString;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn names(selected: Vec<(OsString, OsString)>) -> Vec<String> {
        selected
            .into_iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_local_executor_passes_only_the_allow_list_and_its_patterns() {
        let own = env(&[
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("SLUICE_STATE", "postgres://u:p@h/db"),
            ("SLUICE_TOKEN", "t"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("WANDB_API_KEY", "w"),
            ("WANDBX", "x"),
        ]);
        assert_eq!(
            names(Inherit::default().select(own.clone())),
            ["PATH", "LC_ALL"]
        );
        let mut more = Inherit::default();
        if let Inherit::Only(names) = &mut more {
            names.push("WANDB_*".into());
        }
        assert_eq!(names(more.select(own)), ["PATH", "LC_ALL", "WANDB_API_KEY"]);
    }

    #[test]
    fn an_embedded_run_passes_the_user_s_environment_but_the_engine_s_secrets() {
        let own = env(&[
            ("PATH", "/bin"),
            ("LD_LIBRARY_PATH", "/usr/local/cuda/lib64"),
            ("SLUICE_STATE", "postgres://u:p@h/db"),
            ("SLUICE_TOKEN", "t"),
            ("SLUICE_HOME", "/h"),
        ]);
        let inherit = Inherit::AllBut(ENGINE_ONLY.iter().map(|s| (*s).to_owned()).collect());
        assert_eq!(
            names(inherit.select(own)),
            ["PATH", "LD_LIBRARY_PATH", "SLUICE_HOME"]
        );
    }

    #[test]
    fn pod_mode_passes_all_but_the_runtime_s_own() {
        let own = env(&[
            ("PATH", "/bin"),
            ("NVIDIA_VISIBLE_DEVICES", "all"),
            ("SLUICE_POD_LAUNCH", "{}"),
            ("SLUICE_OBJECTS_AWS_SECRET_ACCESS_KEY", "s"),
        ]);
        assert_eq!(
            names(Inherit::AllButRuntime.select(own)),
            ["PATH", "NVIDIA_VISIBLE_DEVICES"]
        );
    }

    #[test]
    fn a_launch_without_the_field_takes_the_default_allow_list() {
        let old = r#"{"argv": ["true"], "workdir": "/", "env": {}, "timeout_ms": null, "grace_ms": 1,
            "inputs": [], "outputs": [], "output_dir": "/o", "objects": "file:///o",
            "outputs_key": "k", "checkpoint_dir": "/c", "checkpoint": null, "metrics_stdout": false}"#;
        let launch: Launch = serde_json::from_str(old).expect("an older launch.json");
        assert_eq!(launch.inherit, Inherit::default());
    }
}
