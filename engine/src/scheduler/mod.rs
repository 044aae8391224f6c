//! The scheduler: which waiting steps start, where, and what is preempted for them.
//!
//! Pure functions over plain data (`cluster`: nodes, pools, teams; `Job`: what a step asks
//! for; `Running`: what holds nodes now), so that the local executor, Kubernetes and the
//! simulator share one implementation, and property tests can check its promises on random
//! clusters. Here: gang admission, binpack/spread placement, quotas with borrow limits and
//! reclaim, weighted dominant-resource fair share, priorities with within-team preemption,
//! the preemption grace period (a step that started less than `gracePeriod` ago is never a
//! victim), starvation reservations (the oldest step past `starvationLimit` that could ever
//! start reserves the nodes it will take; others backfill around them), the human-readable
//! reasons, the Cluster file's translation (`config`) and the simulator (`simulate`). Not yet:
//! rate limits (`maxTrialsPerMinute`, `maxQueued`), and any executor calling the cycle (only
//! `sluice simulate` does). A cycle keeps no state between calls: a victim told to stop is
//! still in `running` until it has, and the room it frees is held for its step only within
//! the cycle that chose it.

pub mod admission;
pub mod cluster;
pub mod config;
pub mod extended;
pub mod placement;
#[cfg(test)]
mod reference;
pub mod simulate;
#[cfg(test)]
mod tests;
pub mod workload;

pub use admission::{Decision, Policy, Settings, cycle};
pub use cluster::{Cluster, LiveNode, Node, NodeRef, NodeSource, Pool, Res, Team};
pub use placement::Placement;

/// What a waiting (or running) step asks of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub id: u64,
    /// Index into the cluster's teams.
    pub team: usize,
    pub priority: i64,
    /// Gang size: all workers start together or none does.
    pub workers: u32,
    pub per_worker: Res,
    /// May run on interruptible pools (and prefers them).
    pub interruptible: bool,
    /// Writes checkpoints: preempting it loses little.
    pub checkpointed: bool,
    /// A pool name or label value the pool must have.
    pub flavor: Option<String>,
    /// When it was submitted (any monotonic unit): the order within a priority.
    pub submitted: u64,
    /// The longest it runs once started (same unit), when known: its `timeout`, after which
    /// it is stopped, or a workload's `estimate`. A step that ends before a starving gang's
    /// reserved nodes would free may use them (EASY backfill).
    pub estimate: Option<u64>,
}

impl Job {
    /// What the whole gang holds.
    pub fn demand(&self) -> Res {
        self.per_worker.times(u64::from(self.workers))
    }
}

/// A step holding nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Running {
    pub job: Job,
    /// The node of each worker.
    pub nodes: Vec<usize>,
    /// When it started (same unit as `submitted`).
    pub started: u64,
    /// Work that preempting it now would lose (time since its last checkpoint).
    pub work_at_risk: u64,
}
