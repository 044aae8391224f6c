//! Placement as it was before the performance work (`placement.rs` of commit 789570f), kept
//! only for the reference cycle.

use crate::scheduler::Job;
use crate::scheduler::cluster::{Cluster, Res};
use crate::scheduler::placement::Placement;

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
    let allowed: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&n| pool_admits(cluster, cluster.nodes[n].pool, job))
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
    tiers.push(allowed);
    for nodes in tiers {
        // One zone when the gang fits in one: the zone whose placement uses fewest nodes.
        let mut zones: Vec<Option<&str>> = nodes.iter().map(|&n| cluster.zone_of(n)).collect();
        zones.sort_unstable();
        zones.dedup();
        let mut best: Option<Vec<usize>> = None;
        for zone in &zones {
            let in_zone: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|&n| cluster.zone_of(n) == *zone)
                .collect();
            if let Some(p) = fill(&in_zone, free, job, how) {
                let used = distinct(&p);
                if best.as_ref().is_none_or(|b| used < distinct(b)) {
                    best = Some(p);
                }
            }
        }
        if best.is_none() && zones.len() > 1 {
            best = fill(&nodes, free, job, how);
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
