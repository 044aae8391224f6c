//! Jobs that no schedule could ever start: larger than the cluster could hold even empty.
//! A replay counts them as never started, waiting until it stops, like jobs a policy starved;
//! `sluice simulate` says which are which (a warning, and `never_fit` in its JSON).
//!
//! A gang fits on the empty cluster exactly when the nodes it may use (its flavor's pools;
//! spot pools only for interruptible jobs) have room for all its workers together: as many
//! workers on each node as fit in every dimension, summed, which is what placement checks
//! before it places anything. Nodes are grouped by capacity per pair of (flavor,
//! interruptible), so a million-job workload costs a million lookups over a few groups.

use std::collections::HashMap;

use super::SimJob;
use crate::scheduler::cluster::{Cluster, Res};
use crate::scheduler::placement;
use crate::scheduler::{Job, Policy};

/// Why a job can never start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// No pool may take it (its flavor names none, or it is not interruptible and only spot
    /// pools match).
    NoPool,
    /// One worker is larger than every node it may use; the largest of those nodes.
    Worker { largest: Res },
    /// Each worker fits on a node, but the empty nodes it may use have room for only `room`
    /// of its workers at once.
    Gang { room: u64 },
}

/// The jobs (by index into `jobs`) no placement on the empty cluster can hold, and why.
pub fn unplaceable(cluster: &Cluster, jobs: &[SimJob]) -> Vec<(usize, Why)> {
    let mut groups: HashMap<(Option<&str>, bool), Capacities> = HashMap::new();
    let mut out = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let job = &j.job;
        let nodes = groups
            .entry((job.flavor.as_deref(), job.interruptible))
            .or_insert_with(|| capacities(cluster, job));
        if let Some(why) = why_not(nodes, job) {
            out.push((i, why));
        }
    }
    out
}

/// Whether `job` asks for more than its team may ever hold (its quota plus borrow limit),
/// which only the `fair` policy enforces: such a job waits for good there.
pub fn over_ceiling(cluster: &Cluster, job: &Job, policy: Policy) -> bool {
    policy == Policy::Fair
        && cluster
            .teams
            .get(job.team)
            .and_then(|t| t.ceiling())
            .is_some_and(|c| !job.demand().fits_in(c))
}

/// How many jobs of `jobs` can never start under `policy`: the unplaceable ones, and under
/// `fair` those larger than their team's ceiling.
pub fn count(cluster: &Cluster, jobs: &[SimJob], policy: Policy) -> u64 {
    let never = unplaceable(cluster, jobs);
    let mut n = never.len() as u64;
    if policy == Policy::Fair {
        let mut skip = never.iter().map(|(i, _)| *i).peekable();
        for (i, j) in jobs.iter().enumerate() {
            if skip.next_if_eq(&i).is_some() {
                continue;
            }
            n += u64::from(over_ceiling(cluster, &j.job, policy));
        }
    }
    n
}

/// Node capacities, grouped: (capacity, how many nodes).
type Capacities = Vec<(Res, u64)>;

/// The capacities of the nodes `job` may use.
fn capacities(cluster: &Cluster, job: &Job) -> Capacities {
    let mut out: Vec<(Res, u64)> = Vec::new();
    for node in &cluster.nodes {
        if !placement::pool_admits(cluster, node.pool, job) {
            continue;
        }
        match out.iter_mut().find(|(c, _)| *c == node.capacity) {
            Some((_, n)) => *n += 1,
            None => out.push((node.capacity, 1)),
        }
    }
    out
}

fn why_not(nodes: &[(Res, u64)], job: &Job) -> Option<Why> {
    if nodes.is_empty() {
        return Some(Why::NoPool);
    }
    let per = job.per_worker;
    if per == Res::ZERO {
        return None;
    }
    let mut room: u64 = 0;
    for (cap, n) in nodes {
        if per.fits_in(*cap) {
            let each = per.count_in(*cap);
            room = room.saturating_add(each.saturating_mul(*n));
        }
    }
    if room >= u64::from(job.workers) {
        return None;
    }
    if !nodes.iter().any(|(cap, _)| per.fits_in(*cap)) {
        let largest = nodes
            .iter()
            .map(|(c, _)| *c)
            .max_by_key(|c| (c.gpu, c.millicpu, c.memory))
            .unwrap_or(Res::ZERO);
        return Some(Why::Worker { largest });
    }
    Some(Why::Gang { room })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::scheduler::cluster::{Node, Pool, Team};
    use crate::scheduler::placement::Placement;

    fn cluster(pools: &[(bool, &str, u64, Res)]) -> Cluster {
        let mut c = Cluster {
            pools: Vec::new(),
            nodes: Vec::new(),
            teams: vec![Team {
                name: "t".into(),
                weight: 1.0,
                quota: Res::new(8, u64::MAX, u64::MAX),
                borrow_limit: Some(Res::ZERO),
                quota_pools: None,
            }],
        };
        for (p, (spot, name, nodes, cap)) in pools.iter().enumerate() {
            c.pools.push(Pool {
                name: (*name).into(),
                interruptible: *spot,
                labels: BTreeMap::new(),
            });
            for _ in 0..*nodes {
                c.nodes.push(Node {
                    pool: p,
                    capacity: *cap,
                });
            }
        }
        c
    }

    fn job(workers: u32, per: Res, flavor: Option<&str>, interruptible: bool) -> SimJob {
        SimJob {
            job: Job {
                id: 0,
                team: 0,
                priority: 0,
                workers,
                per_worker: per,
                interruptible,
                checkpointed: false,
                flavor: flavor.map(str::to_owned),
                submitted: 0,
                estimate: None,
            },
            duration: 1,
            checkpoint_every: None,
        }
    }

    #[test]
    fn says_why_a_job_can_never_start() {
        let node = Res::new(8, 96_000, 1 << 40);
        let c = cluster(&[(false, "a100", 2, node), (true, "spot", 2, node)]);
        let jobs = [
            job(1, Res::new(8, 1000, 1), None, false),
            job(1, Res::new(16, 1000, 1), None, false),
            job(3, Res::new(8, 1000, 1), None, false),
            job(3, Res::new(8, 1000, 1), None, true),
            job(1, Res::new(1, 1000, 1), Some("h100"), false),
            job(1, Res::new(1, 1000, 1), Some("spot"), false),
        ];
        assert_eq!(
            unplaceable(&c, &jobs),
            [
                (1, Why::Worker { largest: node }),
                (2, Why::Gang { room: 2 }),
                (4, Why::NoPool),
                (5, Why::NoPool),
            ]
        );
        // Under fair, the 3 x 8 GPU interruptible gang is above its team's 8 GPU ceiling.
        assert_eq!(count(&c, &jobs, Policy::Fifo), 4);
        assert_eq!(count(&c, &jobs, Policy::Fair), 5);
    }

    proptest! {
        /// The grouped count agrees with placement itself on the empty cluster.
        #[test]
        fn agrees_with_placement_on_the_empty_cluster(
            pools in prop::collection::vec((any::<bool>(), 0u64..4, 0u64..9, 1u64..64), 1..4),
            gangs in prop::collection::vec((1u32..12, 0u64..10, 0u64..70, any::<bool>(), 0usize..5), 1..20),
        ) {
            let names = ["p0", "p1", "p2", "p3"];
            let spec: Vec<(bool, &str, u64, Res)> = pools
                .iter()
                .enumerate()
                .map(|(i, (spot, n, gpu, cpu))| (*spot, names[i], *n, Res::new(*gpu, cpu * 1000, 1 << 30)))
                .collect();
            let c = cluster(&spec);
            let jobs: Vec<SimJob> = gangs
                .iter()
                .map(|(w, gpu, cpu, spot, flavor)| {
                    job(*w, Res::new(*gpu, cpu * 1000, 1 << 20), names.get(*flavor).copied(), *spot)
                })
                .collect();
            let never: Vec<usize> = unplaceable(&c, &jobs).into_iter().map(|(i, _)| i).collect();
            let empty: Vec<Res> = c.nodes.iter().map(|n| n.capacity).collect();
            let want: Vec<usize> = jobs
                .iter()
                .enumerate()
                .filter(|(_, j)| placement::place(&c, &empty, &j.job, Placement::Binpack).is_none())
                .map(|(i, _)| i)
                .collect();
            prop_assert_eq!(never, want);
        }
    }
}
