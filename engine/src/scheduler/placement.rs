//! Where a gang's workers go: all of them or none, on nodes of pools that may take the job,
//! filling the fullest nodes first (binpack, which keeps whole nodes free for big gangs) or the
//! emptiest (spread), in one zone when they fit in one.

use super::Job;
use super::cluster::{Cluster, Res};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    #[default]
    Binpack,
    Spread,
}

/// Whether a pool may take the job: its flavor, and interruptible pools only for
/// interruptible jobs.
pub fn pool_admits(cluster: &Cluster, pool: usize, job: &Job) -> bool {
    let p = &cluster.pools[pool];
    if p.interruptible && !job.interruptible {
        return false;
    }
    job.flavor
        .as_ref()
        .is_none_or(|f| p.name == *f || p.labels.values().any(|v| v == f))
}

/// A node for each worker of `job`, given each node's free resources; None when the whole
/// gang does not fit. Interruptible jobs try interruptible pools first.
pub fn place(cluster: &Cluster, free: &[Res], job: &Job, how: Placement) -> Option<Vec<usize>> {
    place_on(&Allowed::new(cluster, job), free, job, how)
}

/// The nodes a job may use, as `place` tries them: per tier (an interruptible job's
/// interruptible pools first, then all it may use), the tier's nodes and each of its zones'
/// nodes (zones in order, nodes by index). It depends on the job only through its flavor and
/// whether it is interruptible, so one cycle builds it once per such pair.
#[derive(Clone, Debug)]
pub struct Allowed {
    tiers: Vec<Tier>,
    /// Every node the job may use, by index.
    pub nodes: Vec<usize>,
}

#[derive(Clone, Debug)]
struct Tier {
    nodes: Vec<usize>,
    zones: Vec<Vec<usize>>,
}

impl Allowed {
    pub fn new(cluster: &Cluster, job: &Job) -> Allowed {
        let admits: Vec<bool> = (0..cluster.pools.len())
            .map(|p| pool_admits(cluster, p, job))
            .collect();
        // A node's zone is its pool's.
        let zone: Vec<Option<&str>> = cluster
            .pools
            .iter()
            .map(|p| p.labels.get("zone").map(String::as_str))
            .collect();
        let allowed: Vec<usize> = (0..cluster.nodes.len())
            .filter(|&n| admits[cluster.nodes[n].pool])
            .collect();
        let mut tiers: Vec<Vec<usize>> = Vec::new();
        if job.interruptible {
            let spot: Vec<usize> = allowed
                .iter()
                .copied()
                .filter(|&n| cluster.pools[cluster.nodes[n].pool].interruptible)
                .collect();
            if !spot.is_empty() && spot.len() < allowed.len() {
                tiers.push(spot);
            }
        }
        tiers.push(allowed.clone());
        // Zones in order, each pool mapped to its zone's place in that order.
        let mut names: Vec<Option<&str>> = zone.clone();
        names.sort_unstable();
        names.dedup();
        let zone_at: Vec<usize> = zone
            .iter()
            .map(|z| names.binary_search(z).unwrap_or_default())
            .collect();
        let tiers = tiers
            .into_iter()
            .map(|nodes| {
                let mut zones: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
                for &n in &nodes {
                    zones[zone_at[cluster.nodes[n].pool]].push(n);
                }
                zones.retain(|z| !z.is_empty());
                Tier { zones, nodes }
            })
            .collect();
        Allowed {
            tiers,
            nodes: allowed,
        }
    }
}

/// `place` on the nodes `allowed` (built for `job`'s flavor and interruptibility).
pub fn place_on(allowed: &Allowed, free: &[Res], job: &Job, how: Placement) -> Option<Vec<usize>> {
    for tier in &allowed.tiers {
        // One zone when the gang fits in one: the zone whose placement uses fewest nodes.
        let mut best: Option<Vec<usize>> = None;
        for in_zone in &tier.zones {
            if let Some(p) = fill(in_zone, free, job, how) {
                let used = distinct(&p);
                if best.as_ref().is_none_or(|b| used < distinct(b)) {
                    best = Some(p);
                }
            }
        }
        if best.is_none() && tier.zones.len() > 1 {
            best = fill(&tier.nodes, free, job, how);
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

fn distinct(nodes: &[usize]) -> usize {
    let mut v = nodes.to_vec();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// Greedy: nodes in order of free resources (fullest first for binpack), as many workers on
/// each as fit.
fn fill(nodes: &[usize], free: &[Res], job: &Job, how: Placement) -> Option<Vec<usize>> {
    let need = job.workers as usize;
    if job.per_worker != Res::ZERO {
        // Whether the gang fits at all, before sorting: as many workers as fit on each node.
        let per = job.per_worker;
        let mut room: u64 = 0;
        for &n in nodes {
            let f = free[n];
            if !per.fits_in(f) {
                continue;
            }
            room = room.saturating_add(per.count_in(f));
            if room >= need as u64 {
                break;
            }
        }
        if room < need as u64 {
            return None;
        }
    }
    let mut order: Vec<usize> = nodes
        .iter()
        .copied()
        .filter(|&n| job.per_worker.fits_in(free[n]))
        .collect();
    match how {
        Placement::Binpack => order.sort_by_key(|&n| (free[n], n)),
        Placement::Spread => order.sort_by_key(|&n| (std::cmp::Reverse(free[n]), n)),
    }
    let mut out = Vec::with_capacity(need);
    for n in order {
        let mut left = free[n];
        while out.len() < need && job.per_worker.fits_in(left) {
            out.push(n);
            left = left.saturating_sub(job.per_worker);
            if job.per_worker == Res::ZERO {
                break;
            }
        }
        if out.len() == need {
            return Some(out);
        }
    }
    // Workers asking for nothing fit anywhere.
    if job.per_worker == Res::ZERO
        && let Some(&n) = nodes.first()
    {
        return Some(vec![n; need]);
    }
    None
}
