//! What the scheduler schedules onto: nodes grouped in pools, teams with quotas, and the
//! resource vectors both are measured in. Plain data, no I/O: the local executor, Kubernetes
//! and the simulator build it from a Cluster file (or from this machine) alike.

use std::collections::BTreeMap;

use super::extended::SLOTS;

/// A resource vector: GPUs, CPU in thousandths of a core, memory in bytes, and the amounts of
/// the extended resources by their slot ([`extended`](super::extended)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Res {
    pub gpu: u64,
    pub millicpu: u64,
    pub memory: u64,
    /// In `u32` (4 billion slices is plenty), so that a `Res` stays 40 bytes: the cycle copies
    /// and hashes many; `u32::MAX` is a quota that does not name the resource.
    pub ext: [u32; SLOTS],
}

impl Res {
    pub const ZERO: Res = Res {
        gpu: 0,
        millicpu: 0,
        memory: 0,
        ext: [0; SLOTS],
    };

    pub fn new(gpu: u64, millicpu: u64, memory: u64) -> Res {
        Res {
            gpu,
            millicpu,
            memory,
            ext: [0; SLOTS],
        }
    }

    /// `self` with `amount` of the extended resource in `slot`.
    pub fn with_ext(mut self, slot: usize, amount: u64) -> Res {
        self.ext[slot] = super::extended::amount(amount);
        self
    }

    /// Whether `self` fits within `other`, in every dimension.
    pub fn fits_in(self, other: Res) -> bool {
        self.gpu <= other.gpu
            && self.millicpu <= other.millicpu
            && self.memory <= other.memory
            && self.ext[0] <= other.ext[0]
            && self.ext[1] <= other.ext[1]
            && self.ext[2] <= other.ext[2]
            && self.ext[3] <= other.ext[3]
    }

    /// How many of `self` fit in `room` at once (`u64::MAX` when `self` is nothing).
    pub fn count_in(self, room: Res) -> u64 {
        let div = |f: u64, p: u64| f.checked_div(p).unwrap_or(u64::MAX);
        let mut n = div(room.gpu, self.gpu)
            .min(div(room.millicpu, self.millicpu))
            .min(div(room.memory, self.memory));
        if self.ext != [0; SLOTS] {
            for (f, p) in room.ext.iter().zip(self.ext) {
                n = n.min(div(u64::from(*f), u64::from(p)));
            }
        }
        n
    }

    pub fn saturating_sub(self, o: Res) -> Res {
        Res {
            gpu: self.gpu.saturating_sub(o.gpu),
            millicpu: self.millicpu.saturating_sub(o.millicpu),
            memory: self.memory.saturating_sub(o.memory),
            ext: [
                self.ext[0].saturating_sub(o.ext[0]),
                self.ext[1].saturating_sub(o.ext[1]),
                self.ext[2].saturating_sub(o.ext[2]),
                self.ext[3].saturating_sub(o.ext[3]),
            ],
        }
    }

    pub fn times(self, n: u64) -> Res {
        Res {
            gpu: self.gpu * n,
            millicpu: self.millicpu * n,
            memory: self.memory * n,
            ext: self
                .ext
                .map(|x| x.saturating_mul(super::extended::amount(n))),
        }
    }

    /// The largest share of `total` this takes in any dimension (dominant resource share).
    pub fn dominant_share(self, total: Res) -> f64 {
        let share = |a: u64, t: u64| if t == 0 { 0.0 } else { a as f64 / t as f64 };
        let mut s = share(self.gpu, total.gpu)
            .max(share(self.millicpu, total.millicpu))
            .max(share(self.memory, total.memory));
        for (a, t) in self.ext.iter().zip(total.ext) {
            if *a > 0 {
                s = s.max(share(u64::from(*a), u64::from(t)));
            }
        }
        s
    }
}

/// By hand: the cycle's memos hash many of these, and a derived hash writes the extended
/// amounts as bytes (most often all zero) one by one.
impl std::hash::Hash for Res {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.gpu);
        state.write_u64(self.millicpu);
        state.write_u64(self.memory);
        if self.ext != [0; SLOTS] {
            for x in self.ext {
                state.write_u32(x);
            }
        }
    }
}

/// Saturating: a quota leaves the resources it does not name at `u64::MAX` (no limit).
impl std::ops::Add for Res {
    type Output = Res;
    fn add(self, o: Res) -> Res {
        Res {
            gpu: self.gpu.saturating_add(o.gpu),
            millicpu: self.millicpu.saturating_add(o.millicpu),
            memory: self.memory.saturating_add(o.memory),
            ext: [
                self.ext[0].saturating_add(o.ext[0]),
                self.ext[1].saturating_add(o.ext[1]),
                self.ext[2].saturating_add(o.ext[2]),
                self.ext[3].saturating_add(o.ext[3]),
            ],
        }
    }
}

impl std::ops::AddAssign for Res {
    fn add_assign(&mut self, o: Res) {
        *self = *self + o;
    }
}

impl std::fmt::Display for Res {
    /// `8 GPU, 4 CPU, 16Gi, 2 nvidia.com/mig-1g.10gb`: the dimensions that are not zero.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Written straight to `f` (reasons format many of these per cycle).
        let mut sep = "";
        // `u64::MAX`: a quota that does not name this resource.
        if self.gpu > 0 && self.gpu != u64::MAX {
            write!(f, "{} GPU", self.gpu)?;
            sep = ", ";
        }
        if self.millicpu > 0 && self.millicpu != u64::MAX {
            if self.millicpu.is_multiple_of(1000) {
                write!(f, "{sep}{} CPU", self.millicpu / 1000)?;
            } else {
                write!(f, "{sep}{}m CPU", self.millicpu)?;
            }
            sep = ", ";
        }
        if self.memory > 0 && self.memory != u64::MAX {
            write!(f, "{sep}{}Mi", self.memory / (1 << 20))?;
            sep = ", ";
        }
        for (i, x) in self.ext.iter().enumerate() {
            if *x > 0 && *x != u32::MAX {
                let name = super::extended::name(i).unwrap_or_else(|| format!("resource #{i}"));
                write!(f, "{sep}{x} {name}")?;
                sep = ", ";
            }
        }
        if sep.is_empty() {
            f.write_str("nothing")?;
        }
        Ok(())
    }
}

/// A group of identical nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub name: String,
    /// Takes only steps marked `interruptible` (spot capacity).
    pub interruptible: bool,
    /// Flavor labels (`gpu: a100`), and the zone under `zone`.
    pub labels: BTreeMap<String, String>,
}

/// One node: where a gang's workers go.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pool: usize,
    pub capacity: Res,
}

/// A team's share of the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Team {
    pub name: String,
    /// Share of idle capacity, relative to other teams.
    pub weight: f64,
    /// Guaranteed. Resources a quota does not name are `u64::MAX` (not limited by it); a team
    /// without a quota has `Res::ZERO` (it lives on borrowed capacity).
    pub quota: Res,
    /// How far beyond its quota it may borrow; None: no limit.
    pub borrow_limit: Option<Res>,
    /// The pools (indices) where its quota is guaranteed and counted (`quotaPools`); what it
    /// holds elsewhere is borrowed. None: every pool.
    pub quota_pools: Option<Vec<usize>>,
}

impl Team {
    /// The most this team may hold at once.
    pub fn ceiling(&self) -> Option<Res> {
        self.borrow_limit.map(|b| self.quota + b)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Cluster {
    pub pools: Vec<Pool>,
    pub nodes: Vec<Node>,
    pub teams: Vec<Team>,
}

impl Cluster {
    pub fn total(&self) -> Res {
        self.nodes.iter().fold(Res::ZERO, |a, n| a + n.capacity)
    }

    /// Whether node `n` is in team `t`'s quota pools (what it holds there counts against its
    /// quota; elsewhere it is borrowed).
    pub fn in_quota(&self, t: usize, n: usize) -> bool {
        self.teams[t]
            .quota_pools
            .as_ref()
            .is_none_or(|ps| ps.contains(&self.nodes[n].pool))
    }

    /// What workers of `per_worker` on `nodes` count against team `t`'s quota.
    pub fn quota_part(&self, t: usize, per_worker: Res, nodes: &[usize]) -> Res {
        if self.teams[t].quota_pools.is_none() {
            return per_worker.times(nodes.len() as u64);
        }
        let inside = nodes.iter().filter(|&&n| self.in_quota(t, n)).count();
        per_worker.times(inside as u64)
    }

    pub fn zone_of(&self, node: usize) -> Option<&str> {
        self.pools[self.nodes[node].pool]
            .labels
            .get("zone")
            .map(String::as_str)
    }
}

/// Where a worker runs, as an attempt stores it: a declared node by its index into the
/// Cluster's declared nodes (pool by pool, in the file's order), or a node read from
/// Kubernetes by its pool and name. Names, because the indices of nodes read from a cluster
/// change as nodes come and go, and every server reading the store must agree on a claim.
#[derive(
    Clone,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(untagged)]
pub enum NodeRef {
    Declared(usize),
    Named { pool: String, node: String },
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRef::Declared(i) => write!(f, "node {i}"),
            NodeRef::Named { pool, node } => write!(f, "{pool}/{node}"),
        }
    }
}

/// A node as the cluster reports it, for the pools whose nodes are read from it.
pub struct LiveNode<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// What pods may request on it (`status.allocatable`).
    pub allocatable: Res,
    /// Ready, not cordoned, not gone: new work may be placed on it.
    pub schedulable: bool,
}

/// What follows a cluster's nodes (the Kubernetes executor's node watch).
pub trait NodeSource: Send + Sync {
    /// Calls `each` for every node known, schedulable or not (a node that was seen to go
    /// stays known for a while: attempts placed on it still hold their claims).
    fn each_node(&self, each: &mut dyn FnMut(LiveNode<'_>));
}
