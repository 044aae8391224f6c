//! The reference cycle's choice of victims (reclaim, within-team and across-team
//! preemption), kept beside it for the same reason: the optimised `admission::victims` must
//! choose exactly as these do.

use super::*;

/// Whether a running step is old enough to be preempted: it started at least one grace
/// period ago.
pub(super) fn preemptible(r: &Running, settings: &Settings) -> bool {
    settings.now >= r.started.saturating_add(settings.grace)
}

/// Running steps of teams above their quota whose stopping lets `job` fit, best victims
/// first: interruptible and checkpointed, then the least work lost since the last checkpoint,
/// then the lowest priority, then the youngest. None when even all of them would not do.
pub(super) fn reclaim<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    free: &[Res],
    closed: &BTreeSet<usize>,
    st: &State,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    // What each team will hold once the victims already chosen this cycle have stopped: in
    // all, and in its quota pools.
    let taken = &st.victims;
    let mut usage = st.usage.clone();
    let mut quota_usage = st.quota_usage.clone();
    for r in running.iter().filter(|r| taken.contains(&r.job.id)) {
        usage[r.job.team] = usage[r.job.team].saturating_sub(r.job.demand());
        quota_usage[r.job.team] = quota_usage[r.job.team].saturating_sub(inside(cluster, r));
    }
    // A team lends: beyond its quota in its quota pools, or anything outside them.
    let lends = |t: usize| {
        !quota_usage[t].fits_in(cluster.teams[t].quota)
            || (cluster.teams[t].quota_pools.is_some()
                && usage[t].saturating_sub(quota_usage[t]) != Res::ZERO)
    };
    let mut candidates: Vec<&Running> = running
        .iter()
        .filter(|r| r.job.team != job.team && !taken.contains(&r.job.id))
        .filter(|r| preemptible(r, settings))
        // Never a step that could preempt `job` across teams (no preemption loops).
        .filter(|r| !across(&r.job, job, settings))
        .filter(|r| lends(r.job.team))
        .collect();
    candidates.sort_by_key(|r| victim_order(r));
    // With `quotaPools`, it reclaims only in its quota pools.
    let mut free = free.to_vec();
    let mut closed = closed.clone();
    if let Some(mask) = mask_of(cluster, job.team) {
        for (n, f) in free.iter_mut().enumerate() {
            if !mask[n] {
                *f = Res::ZERO;
                closed.insert(n);
            }
        }
    }
    let closed = &closed;
    if placement::place(cluster, &free, job, settings.placement).is_some() {
        return Some(Vec::new());
    }
    let mut chosen = Vec::new();
    for r in candidates {
        let t = r.job.team;
        let quota = cluster.teams[t].quota;
        let part = inside(cluster, r);
        // Only what the team borrowed: wholly outside its quota pools, or beyond its quota
        // there, which stays whole (in every resource the quota names; the others are
        // unlimited, so never "held in full").
        let borrowed = (cluster.teams[t].quota_pools.is_some() && part == Res::ZERO)
            || (!quota_usage[t].fits_in(quota)
                && !below(quota_usage[t].saturating_sub(part), quota));
        if borrowed {
            release(&mut free, r, closed);
            quota_usage[t] = quota_usage[t].saturating_sub(part);
            chosen.push(r);
            if placement::place(cluster, &free, job, settings.placement).is_some() {
                return Some(prune(cluster, free, chosen, closed, job, settings));
            }
        }
    }
    None
}

/// The team's own running steps of lower priority whose stopping lets `job` fit, in the
/// victim order; None when even all of them would not do.
pub(super) fn lower_priority<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    free: &[Res],
    closed: &BTreeSet<usize>,
    taken: &BTreeSet<u64>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    let mut candidates: Vec<&Running> = running
        .iter()
        .filter(|r| {
            r.job.team == job.team
                && r.job.priority < job.priority
                && !taken.contains(&r.job.id)
                && preemptible(r, settings)
        })
        .collect();
    candidates.sort_by_key(|r| victim_order(r));
    fewest(cluster, free, closed, candidates, job, settings)
}

/// The first of `candidates` (in order) whose stopping lets `job` fit, pruned to those it
/// needs; none when it fits already; None when even all of them would not do.
pub(super) fn fewest<'a>(
    cluster: &Cluster,
    free: &[Res],
    closed: &BTreeSet<usize>,
    candidates: Vec<&'a Running>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    if placement::place(cluster, free, job, settings.placement).is_some() {
        return Some(Vec::new());
    }
    let mut free = free.to_vec();
    let mut chosen = Vec::new();
    for r in candidates {
        release(&mut free, r, closed);
        chosen.push(r);
        if placement::place(cluster, &free, job, settings.placement).is_some() {
            return Some(prune(cluster, free, chosen, closed, job, settings));
        }
    }
    None
}

/// Other teams' running steps whose class is below both `job`'s and `acrossTeams.below`,
/// whose stopping lets `job` fit, in the victim order; None when even all would not do.
pub(super) fn across_teams<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    free: &[Res],
    closed: &BTreeSet<usize>,
    taken: &BTreeSet<u64>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    let mut candidates: Vec<&Running> = running
        .iter()
        .filter(|r| {
            across(job, &r.job, settings) && !taken.contains(&r.job.id) && preemptible(r, settings)
        })
        .collect();
    candidates.sort_by_key(|r| victim_order(r));
    fewest(cluster, free, closed, candidates, job, settings)
}

/// Adds what `r` holds to `free`, except on `closed` (reserved) nodes, which stay full.
pub(super) fn release(free: &mut [Res], r: &Running, closed: &BTreeSet<usize>) {
    for &n in r.nodes.iter().filter(|n| !closed.contains(n)) {
        free[n] += r.job.per_worker;
    }
}

/// The spec's victim order: interruptible and checkpointed first, then the least work lost
/// since the last checkpoint, then the lowest priority, then the youngest.
pub(super) fn victim_order(r: &Running) -> (bool, u64, i64, std::cmp::Reverse<u64>, u64) {
    (
        !(r.job.interruptible && r.job.checkpointed),
        r.work_at_risk,
        r.job.priority,
        std::cmp::Reverse(r.started),
        r.job.id,
    )
}

/// Drops the victims the step does not need after all (the greedy pass may take steps on
/// nodes the placement ends up not using), the least preferred victims first.
pub(super) fn prune<'a>(
    cluster: &Cluster,
    mut free: Vec<Res>,
    mut chosen: Vec<&'a Running>,
    closed: &BTreeSet<usize>,
    job: &Job,
    settings: &Settings,
) -> Vec<&'a Running> {
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let r = chosen[i];
        for &n in r.nodes.iter().filter(|n| !closed.contains(n)) {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
        if placement::place(cluster, &free, job, settings.placement).is_some() {
            chosen.remove(i);
        } else {
            release(&mut free, r, closed);
        }
    }
    chosen
}
