//! One scheduling cycle: which waiting steps start now, on which nodes, what is preempted to
//! make room, and why each of the others waits.
//!
//! `fair` (the default policy): teams under their quota first, then the team with the
//! smallest dominant resource share per unit of weight (weighted DRF), recomputed after each
//! admission; within a team, higher priority first, then the oldest. A team never holds more
//! than its quota plus its borrow limit. A team under its quota whose step does not fit takes
//! back capacity that other teams borrowed (their borrowed steps are preempted, the best
//! victims first). `priority`: one queue by priority then age. `fifo`: one queue by age. In
//! every policy a gang is admitted whole or not at all.

use std::collections::{BTreeMap, BTreeSet};

use super::cluster::{Cluster, Res};
use super::placement::{self, Placement};
use super::{Job, Running};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    Fifo,
    Priority,
    #[default]
    Fair,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub policy: Policy,
    pub placement: Placement,
    /// Steps behind one that does not fit may start meanwhile.
    pub backfill: bool,
    /// A team under its quota preempts what other teams borrowed.
    pub reclaim: bool,
    /// A step may preempt lower-priority steps of its own team (`withinTeam: lowerPriority`).
    pub within_team: bool,
    /// A step waiting longer than this (in the unit of `Job::submitted`) reserves capacity:
    /// until it starts, nothing else does. None: no reservations.
    pub starvation_limit: Option<u64>,
    /// The cycle's time, in the unit of `Job::submitted`.
    pub now: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: Policy::Fair,
            placement: Placement::Binpack,
            backfill: true,
            reclaim: true,
            within_team: true,
            starvation_limit: None,
            now: 0,
        }
    }
}

/// What the cycle decided for one step.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Start `job`, worker `i` on node `nodes[i]`.
    Admit { job: u64, nodes: Vec<usize> },
    /// Stop running `victim` (it resumes from its checkpoint later) to make room for `job`.
    Preempt { victim: u64, job: u64 },
    /// `job` keeps waiting, for this reason.
    Wait { job: u64, reason: String },
}

/// Each node's free resources, given what runs.
pub fn free_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut free: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    for r in running {
        for &n in &r.nodes {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
    }
    free
}

/// What each team holds.
pub fn usage_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut usage = vec![Res::ZERO; cluster.teams.len()];
    for r in running {
        usage[r.job.team] += r.job.demand();
    }
    usage
}

/// One cycle over the waiting steps. Deterministic: the same input gives the same decisions.
pub fn cycle(
    cluster: &Cluster,
    running: &[Running],
    waiting: &[Job],
    settings: &Settings,
) -> Vec<Decision> {
    let mut free = free_of(cluster, running);
    let mut usage = usage_of(cluster, running);
    if let Some(limit) = settings.starvation_limit
        && let Some(starving) = waiting
            .iter()
            .filter(|j| j.submitted.saturating_add(limit) <= settings.now)
            .filter(|j| {
                cluster.teams[j.team]
                    .ceiling()
                    .is_none_or(|c| (usage[j.team] + j.demand()).fits_in(c))
            })
            .min_by_key(|j| (j.submitted, j.id))
        && placement::place(cluster, &free, starving, settings.placement).is_none()
    {
        return reserve(cluster, &free, &usage, waiting, starving);
    }
    let total = cluster.total();
    // Queues: per team for `fair`, one for the others; each in its order.
    let key = |j: &Job| match settings.policy {
        Policy::Fifo => (0, j.submitted, j.id),
        _ => (-j.priority, j.submitted, j.id),
    };
    let mut queues: BTreeMap<usize, Vec<&Job>> = BTreeMap::new();
    for j in waiting {
        let q = if settings.policy == Policy::Fair {
            j.team
        } else {
            0
        };
        queues.entry(q).or_default().push(j);
    }
    for q in queues.values_mut() {
        q.sort_by_key(|j| key(j));
        q.reverse(); // popped from the end
    }
    let mut out = Vec::with_capacity(waiting.len());
    // Running steps already chosen as victims this cycle.
    let mut victims: BTreeSet<u64> = BTreeSet::new();
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
                    let under = (usage[t] + j.demand()).fits_in(team.quota);
                    let share = usage[t].dominant_share(total) / team.weight.max(1e-9);
                    (!under, share)
                };
                let (ra, rb) = (rank(**qa, ja), rank(**qb, jb));
                ra.0.cmp(&rb.0).then(ra.1.total_cmp(&rb.1)).then(qa.cmp(qb))
            })
            .map(|(q, _)| *q);
        let Some(q) = next else { break };
        let Some(job) = queues.get_mut(&q).and_then(Vec::pop) else {
            break;
        };
        let team = &cluster.teams[job.team];
        let demand = job.demand();
        if settings.policy == Policy::Fair
            && let Some(ceiling) = team.ceiling()
            && !(usage[job.team] + demand).fits_in(ceiling)
        {
            out.push(Decision::Wait {
                job: job.id,
                reason: format!(
                    "team {} at its limit: holds {}, may hold {} (quota + borrowLimit), this step needs {}",
                    team.name, usage[job.team], ceiling, demand
                ),
            });
            continue;
        }
        if let Some(nodes) = placement::place(cluster, &free, job, settings.placement) {
            for &n in &nodes {
                free[n] = free[n].saturating_sub(job.per_worker);
            }
            usage[job.team] += demand;
            out.push(Decision::Admit { job: job.id, nodes });
            continue;
        }
        let under_quota = (usage[job.team] + demand).fits_in(team.quota);
        if settings.policy == Policy::Fair
            && settings.reclaim
            && under_quota
            && let Some(chosen) = reclaim(cluster, running, &free, &usage, &victims, job, settings)
        {
            let n = chosen.len();
            for v in chosen {
                // Its team still holds it until it has stopped.
                victims.insert(v.job.id);
                out.push(Decision::Preempt {
                    victim: v.job.id,
                    job: job.id,
                });
            }
            // The room is this step's once the victims have stopped: hold it now.
            usage[job.team] += demand;
            out.push(Decision::Wait {
                job: job.id,
                reason: format!(
                    "team {} is under its quota: {n} borrowed step(s) of other teams are being preempted to make room",
                    team.name
                ),
            });
            continue;
        }
        if settings.within_team
            && settings.policy != Policy::Fifo
            && let Some(chosen) = lower_priority(cluster, running, &free, &victims, job, settings)
        {
            let n = chosen.len();
            for v in chosen {
                victims.insert(v.job.id);
                out.push(Decision::Preempt {
                    victim: v.job.id,
                    job: job.id,
                });
            }
            out.push(Decision::Wait {
                job: job.id,
                reason: format!(
                    "{n} lower-priority step(s) of team {} are being preempted to make room",
                    team.name
                ),
            });
            continue;
        }
        out.push(Decision::Wait {
            job: job.id,
            reason: why_not(cluster, &free, &usage, job),
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
                ),
            });
        }
    }
    out
}

/// The oldest step has starved and does not fit: it keeps the capacity that frees up, and
/// nothing else starts until it has.
fn reserve(
    cluster: &Cluster,
    free: &[Res],
    usage: &[Res],
    waiting: &[Job],
    starving: &Job,
) -> Vec<Decision> {
    waiting
        .iter()
        .map(|j| Decision::Wait {
            job: j.id,
            reason: if j.id == starving.id {
                format!(
                    "past the starvation limit: capacity is reserved for it as it frees up; {}",
                    why_not(cluster, free, usage, j)
                )
            } else {
                format!(
                    "capacity is reserved for step {}, which has waited past the starvation limit",
                    starving.id
                )
            },
        })
        .collect()
}

/// Running steps of teams above their quota whose stopping lets `job` fit, best victims
/// first: interruptible and checkpointed, then the least work lost since the last checkpoint,
/// then the lowest priority, then the youngest. None when even all of them would not do.
fn reclaim<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    free: &[Res],
    usage: &[Res],
    taken: &BTreeSet<u64>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    // What each team will hold once the victims already chosen this cycle have stopped.
    let mut usage = usage.to_vec();
    for r in running.iter().filter(|r| taken.contains(&r.job.id)) {
        usage[r.job.team] = usage[r.job.team].saturating_sub(r.job.demand());
    }
    let mut candidates: Vec<&Running> = running
        .iter()
        .filter(|r| r.job.team != job.team && !taken.contains(&r.job.id))
        .filter(|r| !usage[r.job.team].fits_in(cluster.teams[r.job.team].quota))
        .collect();
    candidates.sort_by_key(|r| victim_order(r));
    let mut free = free.to_vec();
    let mut chosen = Vec::new();
    for r in candidates {
        // Only what the team borrowed: its quota stays whole.
        if !(usage[r.job.team]).fits_in(cluster.teams[r.job.team].quota)
            && cluster.teams[r.job.team]
                .quota
                .fits_in(usage[r.job.team].saturating_sub(r.job.demand()))
        {
            for &n in &r.nodes {
                free[n] += r.job.per_worker;
            }
            usage[r.job.team] = usage[r.job.team].saturating_sub(r.job.demand());
            chosen.push(r);
            if placement::place(cluster, &free, job, settings.placement).is_some() {
                return Some(prune(cluster, free, chosen, job, settings));
            }
        }
    }
    None
}

/// The team's own running steps of lower priority whose stopping lets `job` fit, in the
/// victim order; None when even all of them would not do.
fn lower_priority<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    free: &[Res],
    taken: &BTreeSet<u64>,
    job: &Job,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    let mut candidates: Vec<&Running> = running
        .iter()
        .filter(|r| {
            r.job.team == job.team && r.job.priority < job.priority && !taken.contains(&r.job.id)
        })
        .collect();
    candidates.sort_by_key(|r| victim_order(r));
    let mut free = free.to_vec();
    let mut chosen = Vec::new();
    for r in candidates {
        for &n in &r.nodes {
            free[n] += r.job.per_worker;
        }
        chosen.push(r);
        if placement::place(cluster, &free, job, settings.placement).is_some() {
            return Some(prune(cluster, free, chosen, job, settings));
        }
    }
    None
}

/// The spec's victim order: interruptible and checkpointed first, then the least work lost
/// since the last checkpoint, then the lowest priority, then the youngest.
fn victim_order(r: &Running) -> (bool, u64, i64, std::cmp::Reverse<u64>, u64) {
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
fn prune<'a>(
    cluster: &Cluster,
    mut free: Vec<Res>,
    mut chosen: Vec<&'a Running>,
    job: &Job,
    settings: &Settings,
) -> Vec<&'a Running> {
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let r = chosen[i];
        for &n in &r.nodes {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
        if placement::place(cluster, &free, job, settings.placement).is_some() {
            chosen.remove(i);
        } else {
            for &n in &r.nodes {
                free[n] += r.job.per_worker;
            }
        }
    }
    chosen
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
    div(free.gpu, per.gpu)
        .min(div(free.millicpu, per.millicpu))
        .min(div(free.memory, per.memory))
        .min(1024)
}
