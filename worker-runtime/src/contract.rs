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
//! | `metrics.jsonl` | the program (`$SLUICE_METRICS_FILE`) and the runtime (stdout `NAME=VALUE`) | while the program runs |
//! | `terminate` | engine | to stop the attempt: the runtime checks for it every 50 ms |
//! | `lost` | engine | the attempt was declared lost (no heartbeat): no more syncs for it |
//!
//! The heartbeat is the lock's modification time, touched every `heartbeat_ms` from the
//! moment the runtime takes the lock.
//! | `result.json` ([`Result`]) | runtime | last, atomically (write, rename): the attempt has ended |
//!
//! The engine never acts on an attempt without reading these files: after a crash it learns
//! everything it needs from them, which is how steps outlive the engine.
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
pub const METRICS_FILE: &str = "metrics.jsonl";

/// What to run, and how. Written by the engine, read by the runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The program: an argument vector (`command:`, or a `run:` line with no shell syntax),
    /// or `["/bin/sh", "-c", LINE]`.
    pub argv: Vec<String>,
    /// Working directory of the program.
    pub workdir: PathBuf,
    /// Environment added to the runtime's own (the `SLUICE_*` variables and the step's `env`).
    pub env: BTreeMap<String, String>,
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
    /// Read `NAME=VALUE` pairs from standard output as metrics.
    pub metrics_stdout: bool,
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
    /// Why it failed, in words, when the exit code alone does not say
    /// (`output 'model' was not written`, `cannot start 'pyhton': not found`).
    pub reason: Option<String>,
    /// Last value of each metric.
    pub metrics: BTreeMap<String, f64>,
}
