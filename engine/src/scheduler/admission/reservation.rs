//! Starvation reservations: which waiting step is owed one (`starving`, among those that
//! `could_ever_start`), the nodes it reserves (`reservation_for`), and EASY backfill: when
//! those nodes will have drained (`shadow_of`) and whether a step ends by then
//! (`ends_before`), so that it may use them meanwhile.

use std::collections::BTreeSet;

use super::*;

/// Whether `job` could start on the empty cluster within its team's ceiling (quota plus
/// borrow limit, which only `fair` enforces). A step that never could gets no reservation.
pub(in crate::scheduler) fn could_ever_start(
    cluster: &Cluster,
    job: &Job,
    settings: &Settings,
) -> bool {
    let empty: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    placement::place(cluster, &empty, job, settings.placement).is_some()
        && (settings.policy != Policy::Fair
            || cluster.teams[job.team]
                .ceiling()
                .is_none_or(|c| job.demand().fits_in(c)))
}

/// When the reserved nodes will have drained at the latest: the last expected end of the
/// steps running on them (`now` when none runs there). None when one of them has no
/// estimate: then nothing may backfill the reservation.
pub(in crate::scheduler) fn shadow_of(
    running: &[Running],
    reserved: &BTreeSet<usize>,
    now: u64,
) -> Option<u64> {
    let mut shadow = now;
    for r in running {
        if r.nodes.iter().any(|n| reserved.contains(n)) {
            shadow = shadow.max(r.started.saturating_add(r.job.estimate?));
        }
    }
    Some(shadow)
}

/// EASY backfill: whether `job`, started `now`, ends by `shadow` (when the reservation's nodes
/// drain), so that it may use them meanwhile without delaying the starving step.
pub(in crate::scheduler) fn ends_before(job: &Job, shadow: Option<u64>, now: u64) -> bool {
    matches!((job.estimate, shadow), (Some(e), Some(s)) if now.saturating_add(e) <= s)
}

/// The step owed a reservation: the oldest (then lowest id) of those waiting past the
/// starvation limit that could ever start and that its team's ceiling lets start now.
pub(in crate::scheduler) fn starving<'a>(
    cluster: &Cluster,
    waiting: &'a [Job],
    usage: &[Res],
    settings: &Settings,
) -> Option<&'a Job> {
    let limit = settings.starvation_limit?;
    let mut past: Vec<&Job> = waiting
        .iter()
        .filter(|j| j.submitted.saturating_add(limit) <= settings.now)
        .filter(|j| {
            settings.policy != Policy::Fair
                || cluster.teams[j.team]
                    .ceiling()
                    .is_none_or(|c| (usage[j.team] + j.demand()).fits_in(c))
        })
        .collect();
    // Oldest first, and only as many placements on the empty cluster as it takes to find one
    // that could ever start (usually the first): with thousands of steps past the limit, a
    // placement for each, every cycle, was most of a long replay's time.
    past.sort_unstable_by_key(|j| (j.submitted, j.id));
    past.into_iter()
        .find(|j| could_ever_start(cluster, j, settings))
}

/// The nodes a starving step will take: those it fits on now, else those it will fit on once
/// what runs on them has stopped, chosen so. Its pools' nodes
/// are taken in order of when they are likely to free up (empty ones first, then those whose
/// youngest step started longest ago), then the most free now, then the lowest index, until
/// the gang fits on them as if they were empty; the nodes that placement uses are reserved.
/// Nodes so reserved only drain (nothing new starts there), so the step starts at the latest
/// once the steps running on them when the reservation was made have stopped.
pub(in crate::scheduler) fn reservation_for(
    cluster: &Cluster,
    running: &[Running],
    free: &[Res],
    job: &Job,
    settings: &Settings,
) -> BTreeSet<usize> {
    if let Some(nodes) = placement::place(cluster, free, job, settings.placement) {
        return nodes.into_iter().collect();
    }
    let mut youngest: Vec<Option<u64>> = vec![None; cluster.nodes.len()];
    for r in running {
        for &n in &r.nodes {
            youngest[n] = youngest[n].max(Some(r.started));
        }
    }
    let mut order: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&n| placement::pool_admits(cluster, cluster.nodes[n].pool, job))
        .collect();
    let allowed = placement::Allowed::new(cluster, job);
    let on_prefix = |order: &[usize], k: usize| {
        let mut empty = vec![Res::ZERO; cluster.nodes.len()];
        for &n in &order[..k] {
            empty[n] = cluster.nodes[n].capacity;
        }
        placement::place_on(&allowed, &empty, job, settings.placement)
    };
    // The shortest prefix of the order the gang fits on as if empty, found by bisection:
    // placement is monotone in the room (a node more never makes a gang that fit not fit), so
    // this is the first prefix a node-by-node scan would find, in a logarithmic number of
    // placements instead of one per node (which cost O(nodes^2) per cycle while a step starves).
    // Only the first `m` nodes of the order are sorted, `m` doubled until the gang fits on them
    // (a gang needs few nodes; sorting all of them each cycle was a sixth of a replay's time).
    // Keys end with the node, so they are unique: the first `m` are exactly the full sort's.
    let key = |&n: &usize| (youngest[n], std::cmp::Reverse(free[n]), n);
    let mut m = (2 * job.workers as usize).max(8).min(order.len());
    loop {
        if m < order.len() {
            order.select_nth_unstable_by_key(m - 1, key);
        }
        order[..m].sort_unstable_by_key(key);
        if m == order.len() || on_prefix(&order, m).is_some() {
            break;
        }
        m = (2 * m).min(order.len());
    }
    let on_prefix = |k: usize| on_prefix(&order, k);
    let (mut lo, mut hi) = (0, m);
    if on_prefix(hi).is_none() {
        return order.iter().copied().collect();
    }
    // Invariant: it does not fit on `lo` nodes (none fits on 0 nodes but an empty gang, which
    // fits anywhere and was placed above), it fits on `hi`.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if on_prefix(mid).is_some() {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    on_prefix(hi)
        .map(|nodes| nodes.into_iter().collect())
        .unwrap_or_else(|| order.iter().copied().collect())
}
