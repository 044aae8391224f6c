//! The admission cycle as it was before the performance work (`admission.rs` and
//! `placement.rs` of commit 789570f, unchanged but for names), kept only for tests: the
//! optimised `cycle` must give exactly the same decisions.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use super::admission::{Decision, Policy, Settings};
use super::cluster::{Cluster, Res};
use super::{Job, Running};
use placement_reference as placement;

/// Each node's free resources, given what runs.
fn free_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut free: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    for r in running {
        for &n in &r.nodes {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
    }
    free
}

/// What each team holds.
fn usage_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut usage = vec![Res::ZERO; cluster.teams.len()];
    for r in running {
        usage[r.job.team] += r.job.demand();
    }
    usage
}

/// What a running step holds in its team's quota pools.
fn inside(cluster: &Cluster, r: &Running) -> Res {
    let t = r.job.team;
    let n = r
        .nodes
        .iter()
        .filter(|&&n| {
            cluster.teams[t]
                .quota_pools
                .as_ref()
                .is_none_or(|ps| ps.contains(&cluster.nodes[n].pool))
        })
        .count();
    r.job.per_worker.times(n as u64)
}

/// What each team holds in its quota pools.
fn quota_usage_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut usage = vec![Res::ZERO; cluster.teams.len()];
    for r in running {
        usage[r.job.team] += inside(cluster, r);
    }
    usage
}

/// Whether `job` may run in one of its team's quota pools.
fn may_use_quota(cluster: &Cluster, job: &Job) -> bool {
    match &cluster.teams[job.team].quota_pools {
        None => true,
        Some(ps) => ps.iter().any(|&p| placement::pool_admits(cluster, p, job)),
    }
}

/// Team `t`'s quota pools as a node mask (None: every pool).
fn mask_of(cluster: &Cluster, t: usize) -> Option<Vec<bool>> {
    let ps = cluster.teams[t].quota_pools.as_ref()?;
    Some(cluster.nodes.iter().map(|n| ps.contains(&n.pool)).collect())
}

/// One cycle over the waiting steps. Deterministic: the same input gives the same decisions,
/// whatever the order of `waiting`.
pub fn cycle_reference(
    cluster: &Cluster,
    running: &[Running],
    waiting: &[Job],
    settings: &Settings,
) -> Vec<Decision> {
    let mut st = State {
        free: free_of(cluster, running),
        usage: usage_of(cluster, running),
        quota_usage: quota_usage_of(cluster, running),
        victims: BTreeSet::new(),
        pending: vec![Res::ZERO; cluster.nodes.len()],
        reserved: BTreeSet::new(),
    };
    let mut out = Vec::with_capacity(waiting.len());
    // The oldest starving step that could ever start reserves the nodes it will take: those
    // it fits on now, or those it will fit on once what runs there has stopped. Nothing new
    // starts on them but it, and the steps that could preempt it anyway (its team's higher
    // priorities, teams reclaiming their quota): letting them in keeps the two from evicting
    // each other in turn.
    let holder = starving(cluster, waiting, &st.usage, settings);
    // EASY backfill: when the reserved nodes will have drained (every step running there has
    // an estimate), a step that ends by then may use them.
    let mut shadow: Option<u64> = None;
    if let Some(h) = holder {
        st.reserved = reservation_for(cluster, running, &st.free, h, settings);
        shadow = Some(settings.now);
        for r in running {
            if r.nodes.iter().any(|n| st.reserved.contains(n)) {
                shadow = match (shadow, r.job.estimate) {
                    (Some(s), Some(e)) => Some(s.max(r.started + e)),
                    _ => None,
                };
            }
        }
    }
    let total = cluster.total();
    // Queues: per team for `fair`, one for the others; each in its order.
    let key = |j: &Job| match settings.policy {
        Policy::Fifo => (0, j.submitted, j.id),
        _ => (-j.priority, j.submitted, j.id),
    };
    let mut queues: BTreeMap<usize, Vec<&Job>> = BTreeMap::new();
    for j in waiting {
        queues.entry(queue_of(j, settings)).or_default().push(j);
    }
    for q in queues.values_mut() {
        q.sort_by_key(|j| key(j));
        q.reverse(); // popped from the end
    }
    let mut blocked: BTreeSet<usize> = BTreeSet::new();
    let mut heads: BTreeMap<usize, u64> = BTreeMap::new();
    loop {
        let next = queues
            .iter()
            .filter(|(q, jobs)| !jobs.is_empty() && !blocked.contains(*q))
            .min_by(|(qa, a), (qb, b)| {
                let (ja, jb) = (a[a.len() - 1], b[b.len() - 1]);
                if settings.policy != Policy::Fair {
                    return key(ja).cmp(&key(jb));
                }
                let rank = |t: usize, j: &Job| {
                    let team = &cluster.teams[t];
                    // Below its quota, or its next step keeps it within: it goes first, even
                    // when that step is a gang that takes it past its quota.
                    let q = st.quota_usage[t];
                    let under = may_use_quota(cluster, j)
                        && (below(q, team.quota) || (q + j.demand()).fits_in(team.quota));
                    let share = st.usage[t].dominant_share(total) / team.weight.max(1e-9);
                    // With `acrossTeams`, lower classes after higher ones of every team.
                    let tier = settings
                        .across_below
                        .map_or(0, |below| -j.priority.min(below));
                    (tier, !under, share)
                };
                let (ra, rb) = (rank(**qa, ja), rank(**qb, jb));
                ra.0.cmp(&rb.0)
                    .then(ra.1.cmp(&rb.1))
                    .then(ra.2.total_cmp(&rb.2))
                    .then(qa.cmp(qb))
            })
            .map(|(q, _)| *q);
        let Some(q) = next else { break };
        let Some(job) = queues.get_mut(&q).and_then(Vec::pop) else {
            break;
        };
        let backfills = match (job.estimate, shadow) {
            (Some(e), Some(s)) => settings.now + e <= s,
            _ => false,
        };
        let closed = holder
            .filter(|h| !st.reserved.is_empty() && h.id != job.id)
            .filter(|h| !may_preempt(cluster, job, h, &st.quota_usage, settings))
            .filter(|_| !backfills)
            .map(|h| h.id);
        let why = match try_start(cluster, running, job, closed, &mut st, settings, &mut out) {
            Tried::Started => {
                if holder.is_some_and(|h| h.id == job.id) {
                    // It has its room: what else was reserved is open again.
                    st.reserved.clear();
                }
                continue;
            }
            Tried::Preempting(why) => {
                out.push(Decision::Wait {
                    job: job.id,
                    reason: why.into(),
                });
                continue;
            }
            Tried::Waits(why) if holder.is_some_and(|h| h.id == job.id) => {
                let nodes: Vec<String> = st.reserved.iter().map(usize::to_string).collect();
                format!(
                    "past the starvation limit: node(s) {} are reserved for it as they free up, nothing else starts there; {why}",
                    nodes.join(", ")
                )
            }
            Tried::Waits(why) => why,
        };
        out.push(Decision::Wait {
            job: job.id,
            reason: why.into(),
        });
        if !settings.backfill {
            blocked.insert(q);
            heads.insert(q, job.id);
        }
    }
    // Queues stopped behind a step that does not fit: the rest waits for it.
    for (q, jobs) in queues {
        for job in jobs.into_iter().rev() {
            let head = heads.get(&q).copied().unwrap_or_default();
            out.push(Decision::Wait {
                job: job.id,
                reason: format!(
                    "queued behind step {head}, which does not fit yet (backfill is off)"
                )
                .into(),
            });
        }
    }
    out
}

/// Whether `usage` is below `quota` in a resource the quota names (one it does not name is
/// `u64::MAX`).
fn below(usage: Res, quota: Res) -> bool {
    let lt = |u: u64, q: u64| q != u64::MAX && u < q;
    lt(usage.gpu, quota.gpu) || lt(usage.millicpu, quota.millicpu) || lt(usage.memory, quota.memory)
}

/// What the cycle has given away so far.
struct State {
    /// Each node's free resources, less what was admitted or held this cycle.
    free: Vec<Res>,
    /// What each team holds, with what was admitted or held this cycle.
    usage: Vec<Res>,
    /// Of that, what it holds in its quota pools.
    quota_usage: Vec<Res>,
    /// Running steps already chosen as victims this cycle.
    victims: BTreeSet<u64>,
    /// Per node, room those victims will free that no step of this cycle has taken yet.
    pending: Vec<Res>,
    /// Nodes reserved for a starving step: nothing else starts on them.
    reserved: BTreeSet<usize>,
}

fn queue_of(j: &Job, settings: &Settings) -> usize {
    if settings.policy == Policy::Fair {
        j.team
    } else {
        0
    }
}

/// Whether `job` could preempt `holder` if that ran: a higher priority of its team (with
/// `withinTeam: lowerPriority`), or under `fair` with reclaim, a team under its quota while
/// `holder` would hold borrowed capacity.
fn may_preempt(
    cluster: &Cluster,
    job: &Job,
    holder: &Job,
    usage: &[Res],
    settings: &Settings,
) -> bool {
    if job.team == holder.team {
        return settings.within_team
            && settings.policy != Policy::Fifo
            && job.priority > holder.priority;
    }
    if across(job, holder, settings) {
        return true;
    }
    settings.policy == Policy::Fair
        && settings.reclaim
        && !across(holder, job, settings)
        && may_use_quota(cluster, job)
        && (usage[job.team] + job.demand()).fits_in(cluster.teams[job.team].quota)
        && (!may_use_quota(cluster, holder)
            || !(usage[holder.team] + holder.demand()).fits_in(cluster.teams[holder.team].quota))
}

/// Whether `job` may preempt `other` across teams (`acrossTeams`): another team's step whose
/// priority is below both `job`'s and the class named.
fn across(job: &Job, other: &Job, settings: &Settings) -> bool {
    settings.policy != Policy::Fifo
        && job.team != other.team
        && settings
            .across_below
            .is_some_and(|below| other.priority < below.min(job.priority))
}

/// Whether `job` could start on the empty cluster within its team's ceiling (quota plus
/// borrow limit, which only `fair` enforces). A step that never could gets no reservation.
fn could_ever_start(cluster: &Cluster, job: &Job, settings: &Settings) -> bool {
    let empty: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    placement::place(cluster, &empty, job, settings.placement).is_some()
        && (settings.policy != Policy::Fair
            || cluster.teams[job.team]
                .ceiling()
                .is_none_or(|c| job.demand().fits_in(c)))
}

/// The step owed a reservation: the oldest (then lowest id) of those waiting past the
/// starvation limit that could ever start and that its team's ceiling lets start now.
fn starving<'a>(
    cluster: &Cluster,
    waiting: &'a [Job],
    usage: &[Res],
    settings: &Settings,
) -> Option<&'a Job> {
    let limit = settings.starvation_limit?;
    waiting
        .iter()
        .filter(|j| j.submitted.saturating_add(limit) <= settings.now)
        .filter(|j| {
            settings.policy != Policy::Fair
                || cluster.teams[j.team]
                    .ceiling()
                    .is_none_or(|c| (usage[j.team] + j.demand()).fits_in(c))
        })
        .filter(|j| could_ever_start(cluster, j, settings))
        .min_by_key(|j| (j.submitted, j.id))
}

/// The nodes a starving step will take: those it fits on now, else those it will fit on once
/// what runs on them has stopped, chosen so. Its pools' nodes
/// are taken in order of when they are likely to free up (empty ones first, then those whose
/// youngest step started longest ago), then the most free now, then the lowest index, until
/// the gang fits on them as if they were empty; the nodes that placement uses are reserved.
/// Nodes so reserved only drain (nothing new starts there), so the step starts at the latest
/// once the steps running on them when the reservation was made have stopped.
fn reservation_for(
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
    order.sort_by_key(|&n| (youngest[n], std::cmp::Reverse(free[n]), n));
    let mut empty = vec![Res::ZERO; cluster.nodes.len()];
    for &n in &order {
        empty[n] = cluster.nodes[n].capacity;
        if let Some(nodes) = placement::place(cluster, &empty, job, settings.placement) {
            return nodes.into_iter().collect();
        }
    }
    order.into_iter().collect()
}

/// What `try_start` did.
enum Tried {
    Started,
    /// Steps are being preempted for it (or it holds room they free): it waits, saying so.
    Preempting(String),
    /// It waits, for this reason.
    Waits(String),
}

/// Admits `job`, or preempts for it, recording the decisions; otherwise says why it
/// waits. `reserved_for`: the starving step the reserved nodes are kept for (None when `job`
/// is that step, or nothing is reserved).
fn try_start(
    cluster: &Cluster,
    running: &[Running],
    job: &Job,
    reserved_for: Option<u64>,
    st: &mut State,
    settings: &Settings,
    out: &mut Vec<Decision>,
) -> Tried {
    let team = &cluster.teams[job.team];
    let demand = job.demand();
    if settings.policy == Policy::Fair
        && let Some(ceiling) = team.ceiling()
        && !(st.usage[job.team] + demand).fits_in(ceiling)
    {
        return Tried::Waits(format!(
            "team {} at its limit: holds {}, may hold {} (quota + borrowLimit), this step needs {}",
            team.name, st.usage[job.team], ceiling, demand
        ));
    }
    let open = BTreeSet::new();
    let closed: &BTreeSet<usize> = match reserved_for {
        Some(_) => &st.reserved,
        None => &open,
    };
    // What this step may use: reserved nodes look full.
    let mut visible = st.free.clone();
    for &n in closed {
        visible[n] = Res::ZERO;
    }
    if let Some(nodes) = placement::place(cluster, &visible, job, settings.placement) {
        for &n in &nodes {
            st.free[n] = st.free[n].saturating_sub(job.per_worker);
        }
        st.usage[job.team] += demand;
        st.quota_usage[job.team] += inside(
            cluster,
            &Running {
                job: job.clone(),
                nodes: nodes.clone(),
                started: 0,
                work_at_risk: 0,
            },
        );
        out.push(Decision::Admit { job: job.id, nodes });
        return Tried::Started;
    }
    let under_quota =
        may_use_quota(cluster, job) && (st.quota_usage[job.team] + demand).fits_in(team.quota);
    let may_reclaim = settings.policy == Policy::Fair && settings.reclaim && under_quota;
    let may_preempt = settings.within_team && settings.policy != Policy::Fifo;
    // What it could use once the victims chosen so far have stopped.
    let mut soon = visible.clone();
    for (n, room) in soon.iter_mut().enumerate() {
        if !closed.contains(&n) {
            *room += st.pending[n];
        }
    }
    let may_cross = settings.policy != Policy::Fifo && settings.across_below.is_some();
    let find = |settings: &Settings, st: &State| {
        if may_reclaim
            && let Some(chosen) = reclaim(cluster, running, &soon, closed, st, job, settings)
        {
            return Some((0, chosen));
        }
        if may_preempt
            && let Some(chosen) =
                lower_priority(cluster, running, &soon, closed, &st.victims, job, settings)
        {
            return Some((1, chosen));
        }
        if may_cross
            && let Some(chosen) =
                across_teams(cluster, running, &soon, closed, &st.victims, job, settings)
        {
            return Some((2, chosen));
        }
        None
    };
    if let Some((kind, chosen)) = find(settings, st) {
        let closed = closed.clone();
        let mask = if kind == 0 {
            mask_of(cluster, job.team)
        } else {
            None
        };
        let held = hold(
            cluster,
            st,
            &chosen,
            &closed,
            mask.as_deref(),
            job,
            settings,
        );
        let n = chosen.len();
        let what = if n == 0 {
            "room that preemptions already under way will free is held for it".to_owned()
        } else if kind == 0 {
            format!("{n} borrowed step(s) of other teams are being preempted to make room")
        } else if kind == 1 {
            format!(
                "{n} lower-priority step(s) of team {} are being preempted to make room",
                team.name
            )
        } else {
            format!("{n} lower-class step(s) of other teams are being preempted to make room")
        };
        let what = if kind == 2 {
            format!("{what} (acrossTeams)")
        } else {
            what
        };
        for v in chosen {
            // Its team still holds it until it has stopped.
            st.victims.insert(v.job.id);
            out.push(Decision::Preempt {
                victim: v.job.id,
                job: job.id,
            });
        }
        if kind != 1 {
            // The room is this step's once the victims have stopped: hold it now.
            st.usage[job.team] += demand;
            st.quota_usage[job.team] += match held {
                Some(nodes) => inside(
                    cluster,
                    &Running {
                        job: job.clone(),
                        nodes,
                        started: 0,
                        work_at_risk: 0,
                    },
                ),
                None => demand,
            };
            if kind == 0 {
                return Tried::Preempting(format!("team {} is under its quota: {what}", team.name));
            }
        }
        return Tried::Preempting(what);
    }
    if let Some(id) = reserved_for
        && placement::place(cluster, &st.free, job, settings.placement).is_some()
    {
        return Tried::Waits(format!(
            "capacity is reserved for step {id}, which has waited past the starvation limit"
        ));
    }
    if settings.grace > 0 {
        let patient = Settings {
            grace: 0,
            ..settings.clone()
        };
        if let Some((kind, _)) = find(&patient, st) {
            let whose = if kind == 0 {
                format!(
                    "team {} is under its quota, but the borrowed steps in its way",
                    team.name
                )
            } else if kind == 1 {
                format!("the lower-priority steps of team {} in its way", team.name)
            } else {
                "the lower-class steps of other teams in its way".to_owned()
            };
            let secs = settings.grace.saturating_mul(settings.unit_ms) as f64 / 1000.0;
            return Tried::Waits(format!(
                "{whose} started less than the grace period ({secs}s) ago; preempted after that"
            ));
        }
    }
    Tried::Waits(why_not(cluster, &st.free, &st.quota_usage, job))
}

/// Holds for `job` the room its victims (and those chosen earlier this cycle) will free, and
/// what else its placement needs of the free room now, so that no later step of this cycle
/// takes it; what the victims free beyond that stays pending for later steps.
fn hold(
    cluster: &Cluster,
    st: &mut State,
    victims: &[&Running],
    closed: &BTreeSet<usize>,
    mask: Option<&[bool]>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<usize>> {
    let mut room = st.pending.clone();
    for v in victims {
        release(&mut room, v, closed);
    }
    let mut after: Vec<Res> = st.free.iter().zip(&room).map(|(f, r)| *f + *r).collect();
    for &n in closed {
        after[n] = Res::ZERO;
    }
    if let Some(mask) = mask {
        for (n, a) in after.iter_mut().enumerate() {
            if !mask[n] {
                *a = Res::ZERO;
            }
        }
    }
    let placed = placement::place(cluster, &after, job, settings.placement);
    if let Some(nodes) = &placed {
        for &n in nodes {
            let rest = job.per_worker.saturating_sub(room[n]);
            room[n] = room[n].saturating_sub(job.per_worker);
            st.free[n] = st.free[n].saturating_sub(rest);
        }
    }
    st.pending = room;
    placed
}

/// Why a step that did not fit waits, in words.
fn why_not(cluster: &Cluster, free: &[Res], usage: &[Res], job: &Job) -> String {
    let team = &cluster.teams[job.team];
    let pools: Vec<usize> = (0..cluster.pools.len())
        .filter(|&p| placement::pool_admits(cluster, p, job))
        .collect();
    let fits_empty = cluster
        .nodes
        .iter()
        .filter(|n| pools.contains(&n.pool))
        .any(|n| job.per_worker.fits_in(n.capacity));
    if !fits_empty {
        return format!(
            "no node of a pool it may use ({}) can hold one worker ({})",
            pools
                .iter()
                .map(|&p| cluster.pools[p].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            job.per_worker
        );
    }
    let room: u64 = cluster
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| pools.contains(&n.pool))
        .map(|(i, _)| workers_that_fit(job.per_worker, free[i]))
        .sum();
    let gang = if job.workers > 1 {
        format!("gang of {} x ({})", job.workers, job.per_worker)
    } else {
        format!("{}", job.per_worker)
    };
    let quota = if team.quota == Res::ZERO {
        String::new()
    } else {
        format!(
            "; team {} holds {} of its quota {}",
            team.name, usage[job.team], team.quota
        )
    };
    format!(
        "waiting: needs {gang}; free room for {room} of {} worker(s) now{quota}",
        job.workers
    )
}

fn workers_that_fit(per: Res, free: Res) -> u64 {
    let div = |f: u64, p: u64| f.checked_div(p).unwrap_or(u64::MAX);
    let ext = (0..per.ext.len())
        .map(|i| div(u64::from(free.ext[i]), u64::from(per.ext[i])))
        .min()
        .unwrap_or(u64::MAX);
    div(free.gpu, per.gpu)
        .min(div(free.millicpu, per.millicpu))
        .min(div(free.memory, per.memory))
        .min(ext)
        .min(1024)
}

mod placement_reference;
mod victims_reference;
use victims_reference::*;
