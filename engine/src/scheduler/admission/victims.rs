//! Choosing victims: who may be preempted (old enough, below in priority, over their
//! team's quota), in which order, and the fewest that make room.

use super::*;

/// Whether a running step is old enough to be preempted: it started at least one grace
/// period ago.
pub(super) fn preemptible(r: &Running, settings: &Settings) -> bool {
    settings.now >= r.started.saturating_add(settings.grace)
}

/// Whether team `t`, holding `quota_held` in its quota pools, may lose `r` to a reclaim: `r`
/// runs wholly outside its quota pools (borrowed, with `quotaPools`), or its part inside them
/// is beyond the quota, which stays whole in every resource it names.
pub(super) fn borrowed(cluster: &Cluster, r: &Running, quota_held: Res) -> bool {
    let t = r.job.team;
    let quota = cluster.teams[t].quota;
    let inside = cluster.quota_part(t, r.job.per_worker, &r.nodes);
    (cluster.teams[t].quota_pools.is_some() && inside == Res::ZERO)
        || (!quota_held.fits_in(quota) && !below(quota_held.saturating_sub(inside), quota))
}

/// Running steps of teams above their quota whose stopping lets `job` fit, best victims
/// first: interruptible and checkpointed, then the least work lost since the last checkpoint,
/// then the lowest priority, then the youngest. None when even all of them would not do.
/// With `quotaPools`, the step reclaims only in its quota pools: its room elsewhere would be
/// borrowed, and taken back in turn.
pub(super) fn reclaim<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    st: &mut State,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    st.index(cluster, running);
    let mask = quota_mask(cluster, job.team);
    if !st.over().iter().any(|&t| t != job.team) {
        // No candidates: it reclaims nothing, and needs no victims only if it fits soon.
        return match &mask {
            None => st.fits_soon(job, shape, closed, settings).then(Vec::new),
            Some(mask) => {
                let mut soon = st.soon(closed);
                apply_mask(&mut soon, mask);
                placement::place_on(&st.allowed[shape.2].2, &soon, job, settings.placement)
                    .map(|_| Vec::new())
            }
        };
    }
    let unmasked = Query::Reclaimable(closed, settings.grace, usize::MAX);
    let q = match mask {
        Some(_) => Query::Reclaimable(closed, settings.grace, job.team),
        None => unmasked,
    };
    // Steps that could preempt `job` across teams are not its victims (see `across`): the
    // room below, computed without that rule, is then no bound for it.
    let bounded = settings
        .across_below
        .is_none_or(|below| job.priority >= below);
    if bounded && st.known_to_fail(q, shape) {
        return None;
    }
    // The room once the pass below has taken every victim it may (what it takes of a team
    // depends only on that team, and the job's own team, under its quota, is not among
    // them): if the job does not fit there, it fits at no point of the pass (placement is
    // monotone in the room), and the pass fails. Independent of the job but for its shape.
    let key = (unmasked, st.grow, st.free_gen);
    let most = if let Some(most) = st.rooms.get(&key) {
        most.clone()
    } else {
        let closed_set = st.closed(closed);
        let most = Rc::new(most_room(
            cluster,
            running,
            st,
            &closed_set,
            closed,
            settings,
        ));
        st.rooms.retain(|k, _| k.1 == key.1 && k.2 == key.2);
        st.rooms.insert(key, most.clone());
        most
    };
    if bounded {
        match &mask {
            None => st.place(q, shape, &most, job, settings)?,
            Some(mask) => {
                let mut room = (*most).clone();
                apply_mask(&mut room, mask);
                st.place(q, shape, &room, job, settings)?
            }
        };
    }
    let mut closed_set = st.closed(closed);
    let mut free = st.soon(closed);
    if let Some(mask) = &mask {
        // Outside its quota pools nothing frees up for it.
        apply_mask(&mut free, mask);
        closed_set.extend((0..mask.len()).filter(|&n| !mask[n]));
    }
    // What each team will hold in its quota pools once the victims already chosen this
    // cycle have stopped.
    let mut usage: FxMap<usize, Res> = FxMap::default();
    let mut candidates: Vec<usize> = Vec::new();
    for &t in st.over().iter().filter(|&&t| t != job.team) {
        usage.insert(t, st.held(t).1);
        for &i in st.teams().of(t) {
            let r = &running[i];
            if !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
                && !across(&r.job, job, settings)
            {
                candidates.push(i);
            }
        }
    }
    candidates.sort_by_key(|&i| (victim_order(&running[i]), i));
    let allowed = &st.allowed[shape.2].2;
    let place = |free: &[Res]| placement::place_on(allowed, free, job, settings.placement);
    if place(&free).is_some() {
        return Some(Vec::new());
    }
    let mut chosen = Vec::new();
    for i in candidates {
        let r = &running[i];
        let t = r.job.team;
        // Only what the team borrowed: its quota stays whole (in every resource the quota
        // names; the others are unlimited, so never "held in full").
        if borrowed(cluster, r, usage[&t]) {
            release(&mut free, r, &closed_set);
            let u = usage.get_mut(&t).expect("listed");
            *u = u.saturating_sub(cluster.quota_part(t, r.job.per_worker, &r.nodes));
            chosen.push(r);
            if place(&free).is_some() {
                return Some(prune(allowed, free, chosen, &closed_set, job, settings));
            }
        }
    }
    None
}

/// The room once `reclaim`'s pass has taken every victim it may, whatever the job.
pub(super) fn most_room(
    cluster: &Cluster,
    running: &[Running],
    st: &State,
    closed_set: &BTreeSet<usize>,
    closed: bool,
    settings: &Settings,
) -> Vec<Res> {
    let mut most = st.soon(closed);
    for &t in st.over() {
        let mut held = st.held(t).1;
        for &i in st.teams().of(t) {
            let r = &running[i];
            if !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
                && borrowed(cluster, r, held)
            {
                release(&mut most, r, closed_set);
                held = held.saturating_sub(cluster.quota_part(t, r.job.per_worker, &r.nodes));
            }
        }
    }
    most
}

/// The team's own running steps of lower priority whose stopping lets `job` fit, in the
/// victim order; None when even all of them would not do.
pub(super) fn lower_priority<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    st: &mut State,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    // Nothing of its team's runs below it (most often: one priority): no victim order needed.
    if st.lowest_priority(cluster, running, job.team) >= job.priority {
        return fewest(st, Vec::new(), job, shape, closed, settings);
    }
    st.index(cluster, running);
    let candidates: Vec<&Running> = st
        .teams()
        .of(job.team)
        .iter()
        .map(|&i| &running[i])
        .filter(|r| {
            r.job.priority < job.priority
                && !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
        })
        .collect();
    fewest(st, candidates, job, shape, closed, settings)
}

/// The first of `candidates` (in the victim order) whose stopping lets `job` fit once the
/// victims chosen before have stopped, pruned to those it needs; no victims when it fits
/// already (or once they stop); None when even all of them would not do.
fn fewest<'a>(
    st: &mut State,
    candidates: Vec<&'a Running>,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    if candidates.is_empty() {
        return st.fits_soon(job, shape, closed, settings).then(Vec::new);
    }
    let closed_set = st.closed(closed);
    let mut free = st.soon(closed);
    let allowed = &st.allowed[shape.2].2;
    let place = |free: &[Res]| placement::place_on(allowed, free, job, settings.placement);
    if place(&free).is_some() {
        return Some(Vec::new());
    }
    let mut chosen = Vec::new();
    for r in candidates {
        release(&mut free, r, &closed_set);
        chosen.push(r);
        if place(&free).is_some() {
            return Some(prune(allowed, free, chosen, &closed_set, job, settings));
        }
    }
    None
}

/// Other teams' running steps whose class is below both `job`'s and `acrossTeams.below`
/// (even within their quota), whose stopping lets `job` fit, in the victim order; None when
/// even all of them would not do.
pub(super) fn across_teams<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    st: &mut State,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    st.index(cluster, running);
    let mut candidates: Vec<usize> = Vec::new();
    for t in (0..cluster.teams.len()).filter(|&t| t != job.team) {
        for &i in st.teams().of(t) {
            let r = &running[i];
            if across(job, &r.job, settings)
                && !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
            {
                candidates.push(i);
            }
        }
    }
    candidates.sort_by_key(|&i| (victim_order(&running[i]), i));
    let candidates = candidates.into_iter().map(|i| &running[i]).collect();
    fewest(st, candidates, job, shape, closed, settings)
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
    allowed: &Allowed,
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
        if placement::place_on(allowed, &free, job, settings.placement).is_some() {
            chosen.remove(i);
        } else {
            release(&mut free, r, closed);
        }
    }
    chosen
}
