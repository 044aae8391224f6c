//! A discrete-event replay of a workload through the scheduler's own cycle, in virtual time:
//! jobs arrive, the cycle admits, preempts or keeps them waiting, admitted jobs run for their
//! duration, preempted ones lose the work since their last checkpoint and queue again.
//!
//! In progress (the scheduler issue): the core loop, its measurements and its invariants are
//! here; workload files, `sluice simulate`, the Kubernetes-like `fifo` with partial gangs,
//! charts and the trace replays are not yet.

use std::collections::BTreeMap;

use super::admission::{self, Decision, Settings};
use super::cluster::Cluster;
use super::placement;
use super::{Job, Running};

/// One job of a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    pub job: Job,
    /// Seconds of work.
    pub duration: u64,
    /// Seconds between checkpoints; None: a preempted job loses all its work.
    pub checkpoint_every: Option<u64>,
}

/// What happened to one job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOutcome {
    pub first_start: Option<u64>,
    pub end: Option<u64>,
    pub preemptions: u32,
    /// Seconds of work lost to preemption (times the job's GPUs, in `gpu_seconds_lost`).
    pub seconds_lost: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    pub jobs: BTreeMap<u64, JobOutcome>,
    /// When the last job ended.
    pub makespan: u64,
    /// GPU-seconds used over GPU-seconds available until the makespan.
    pub gpu_utilization: f64,
    pub preemptions: u64,
    pub gpu_seconds_lost: u64,
    /// Events processed.
    pub events: u64,
    /// GPU-seconds and CPU-core-seconds held, by (team, pool): what cost is computed from.
    pub held: BTreeMap<(usize, usize), (u64, u64)>,
    /// `fifo` (pods one by one): GPU-seconds held by gangs only partly placed.
    pub partial_gang_gpu_seconds: u64,
    /// Times the replay stopped with work waiting that could never progress (partial gangs
    /// holding what the others need).
    pub deadlocks: u32,
    /// When the replay stopped: the last end, or the point where nothing could progress any
    /// more (nothing runs, nothing arrives, something still waits). Jobs that never started
    /// count as waiting until then.
    pub stopped_at: u64,
    /// Jobs that never started.
    pub never_started: u64,
}

/// Adds what a job held from its start until `now` to the report's per team and pool sums.
fn charge(report: &mut Report, cluster: &Cluster, r: &Running, now: u64) {
    let secs = now.saturating_sub(r.started);
    for &n in &r.nodes {
        let e = report
            .held
            .entry((r.job.team, cluster.nodes[n].pool))
            .or_default();
        e.0 += secs * r.job.per_worker.gpu;
        e.1 += secs * r.job.per_worker.millicpu / 1000;
    }
}

struct Live {
    running: Running,
    /// Work done before this start (restored from a checkpoint).
    done_before: u64,
    duration: u64,
    checkpoint_every: Option<u64>,
}

/// Replays `jobs` and returns what happened. `check` sees the running set after every event
/// (the tests' invariants). Deterministic.
pub fn run(
    cluster: &Cluster,
    jobs: &[SimJob],
    settings: &Settings,
    mut check: impl FnMut(u64, &[Running]),
) -> Report {
    let mut arrivals: Vec<&SimJob> = jobs.iter().collect();
    arrivals.sort_by_key(|j| (j.job.submitted, j.job.id));
    let mut next_arrival = 0;
    // id -> (job, duration, checkpoint interval, work done before)
    let mut waiting: Waiting = BTreeMap::new();
    let mut live: BTreeMap<u64, Live> = BTreeMap::new();
    // `fifo`: the pods of waiting gangs placed so far.
    let mut partial: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut report = Report::default();
    let total_gpu = cluster.total().gpu;
    let mut used_gpu_seconds: u128 = 0;
    let mut now = 0u64;
    loop {
        // Ends due now.
        let ended: Vec<u64> = live
            .iter()
            .filter(|(_, l)| l.running.started + (l.duration - l.done_before) <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            if let Some(l) = live.remove(&id) {
                charge(&mut report, cluster, &l.running, now);
            }
            report.jobs.entry(id).or_default().end = Some(now);
            report.makespan = report.makespan.max(now);
        }
        while next_arrival < arrivals.len() && arrivals[next_arrival].job.submitted <= now {
            let a = arrivals[next_arrival];
            waiting.insert(a.job.id, (a.job.clone(), a.duration, a.checkpoint_every, 0));
            report.jobs.entry(a.job.id).or_default();
            next_arrival += 1;
        }
        if settings.policy == admission::Policy::Fifo {
            // Kubernetes' default scheduler: pods one by one in arrival order, each on the
            // least allocated node that fits; a gang runs once all its pods are placed, and
            // the pods placed so far hold their resources meanwhile.
            place_pods(
                cluster,
                &mut waiting,
                &mut partial,
                &mut live,
                &mut report,
                now,
            );
            if live.is_empty() && next_arrival == arrivals.len() && !waiting.is_empty() {
                // Nothing runs, nothing arrives, nothing can start: stuck for good.
                report.deadlocks += u32::from(partial.values().any(|p| !p.is_empty()));
                report.makespan = report.makespan.max(now);
                report.stopped_at = now;
                let running = with_partial(&live, &waiting, &partial);
                check(now, &running);
                report.events += 1;
                break;
            }
        }
        // Cycles until nothing more changes at this instant (preemptions free room at once:
        // the simulation has no grace period).
        for _ in 0..16 {
            if settings.policy == admission::Policy::Fifo {
                break;
            }
            let running: Vec<Running> = live.values().map(|l| l.running.clone()).collect();
            let queue: Vec<Job> = waiting.values().map(|w| w.0.clone()).collect();
            let settings = Settings {
                now,
                ..settings.clone()
            };
            let decisions = admission::cycle(cluster, &running, &queue, &settings);
            let mut changed = false;
            for d in decisions {
                match d {
                    Decision::Admit { job, nodes } => {
                        let Some((j, duration, ckpt, done)) = waiting.remove(&job) else {
                            continue;
                        };
                        let o = report.jobs.entry(job).or_default();
                        o.first_start.get_or_insert(now);
                        live.insert(
                            job,
                            Live {
                                running: Running {
                                    job: j,
                                    nodes,
                                    started: now,
                                    work_at_risk: 0,
                                },
                                done_before: done,
                                duration,
                                checkpoint_every: ckpt,
                            },
                        );
                        changed = true;
                    }
                    Decision::Preempt { victim, .. } => {
                        let Some(l) = live.remove(&victim) else {
                            continue;
                        };
                        charge(&mut report, cluster, &l.running, now);
                        let done = l.done_before + (now - l.running.started);
                        let kept = match l.checkpoint_every {
                            Some(every) if every > 0 => done - done % every,
                            _ => 0,
                        };
                        let lost = done - kept;
                        let o = report.jobs.entry(victim).or_default();
                        o.preemptions += 1;
                        o.seconds_lost += lost;
                        report.preemptions += 1;
                        report.gpu_seconds_lost += lost * l.running.job.demand().gpu;
                        waiting.insert(
                            victim,
                            (l.running.job, l.duration, l.checkpoint_every, kept),
                        );
                        changed = true;
                    }
                    Decision::Wait { .. } => {}
                }
            }
            if !changed {
                break;
            }
        }
        // Work at risk, for the victim order: time since the last checkpoint.
        for l in live.values_mut() {
            let done = l.done_before + (now - l.running.started);
            l.running.work_at_risk = match l.checkpoint_every {
                Some(every) if every > 0 => done % every,
                _ => done,
            };
        }
        let running = with_partial(&live, &waiting, &partial);
        check(now, &running);
        report.events += 1;
        // The next event: an arrival or an end.
        let next_end = live
            .values()
            .map(|l| l.running.started + (l.duration - l.done_before))
            .min();
        let next_in = arrivals.get(next_arrival).map(|a| a.job.submitted);
        let Some(next) = [next_end, next_in].into_iter().flatten().min() else {
            report.stopped_at = now;
            break;
        };
        let gpus: u64 = live.values().map(|l| l.running.job.demand().gpu).sum();
        used_gpu_seconds += u128::from(gpus) * u128::from(next - now);
        let held: u64 = partial
            .iter()
            .filter_map(|(id, nodes)| Some(waiting.get(id)?.0.per_worker.gpu * nodes.len() as u64))
            .sum();
        report.partial_gang_gpu_seconds += held * (next - now);
        now = next;
    }
    report.stopped_at = report.stopped_at.max(report.makespan);
    report.never_started = report
        .jobs
        .values()
        .filter(|o| o.first_start.is_none())
        .count() as u64;
    if report.makespan > 0 && total_gpu > 0 {
        report.gpu_utilization =
            used_gpu_seconds as f64 / (u128::from(total_gpu) * u128::from(report.makespan)) as f64;
    }
    report
}

type Waiting = BTreeMap<u64, (Job, u64, Option<u64>, u64)>;

/// What holds nodes: running jobs, and (under `fifo`) the pods of gangs placed so far.
fn with_partial(
    live: &BTreeMap<u64, Live>,
    waiting: &Waiting,
    partial: &BTreeMap<u64, Vec<usize>>,
) -> Vec<Running> {
    let mut out: Vec<Running> = live.values().map(|l| l.running.clone()).collect();
    for (id, nodes) in partial {
        if let Some((job, ..)) = waiting.get(id)
            && !nodes.is_empty()
        {
            out.push(Running {
                job: job.clone(),
                nodes: nodes.clone(),
                started: 0,
                work_at_risk: 0,
            });
        }
    }
    out
}

/// `fifo`: each waiting job's unplaced pods, in arrival order, onto the least allocated node
/// that fits; jobs with every pod placed start.
fn place_pods(
    cluster: &Cluster,
    waiting: &mut Waiting,
    partial: &mut BTreeMap<u64, Vec<usize>>,
    live: &mut BTreeMap<u64, Live>,
    report: &mut Report,
    now: u64,
) {
    let held = with_partial(live, waiting, partial);
    let mut free = admission::free_of(cluster, &held);
    let mut order: Vec<(u64, u64)> = waiting.values().map(|w| (w.0.submitted, w.0.id)).collect();
    order.sort_unstable();
    // Pods queue by creation: the first pod of every job, then the second... so the pods of
    // gangs submitted together interleave, as they do in Kubernetes' queue.
    let most = waiting.values().map(|w| w.0.workers).max().unwrap_or(0) as usize;
    for k in 0..most {
        for &(_, id) in &order {
            let Some((job, ..)) = waiting.get(&id) else {
                continue;
            };
            let placed = partial.entry(id).or_default();
            if placed.len() != k || k >= job.workers as usize {
                continue;
            }
            let pod = Job {
                workers: 1,
                ..job.clone()
            };
            if let Some(n) = placement::place(cluster, &free, &pod, placement::Placement::Spread) {
                free[n[0]] = free[n[0]].saturating_sub(job.per_worker);
                placed.push(n[0]);
            }
        }
    }
    for (_, id) in order {
        let complete = match (waiting.get(&id), partial.get(&id)) {
            (Some((job, ..)), Some(p)) => p.len() == job.workers as usize,
            _ => false,
        };
        if !complete {
            continue;
        }
        let nodes = partial.remove(&id).unwrap_or_default();
        let Some((job, duration, ckpt, done)) = waiting.remove(&id) else {
            continue;
        };
        report
            .jobs
            .entry(id)
            .or_default()
            .first_start
            .get_or_insert(now);
        live.insert(
            id,
            Live {
                running: Running {
                    job,
                    nodes,
                    started: now,
                    work_at_risk: 0,
                },
                done_before: done,
                duration,
                checkpoint_every: ckpt,
            },
        );
    }
}

/// How long `job` waited: first start minus submission, or, for a job that never started,
/// the time the replay stopped minus submission (a stuck queue must not look fast).
pub fn wait_of(report: &Report, job: &Job) -> u64 {
    let start = report
        .jobs
        .get(&job.id)
        .and_then(|o| o.first_start)
        .unwrap_or(report.stopped_at);
    start.saturating_sub(job.submitted)
}

/// Waits (see [`wait_of`]) of the jobs matching `keep`, sorted; jobs that never started
/// count as waiting until the replay stopped.
pub fn waits(report: &Report, jobs: &[SimJob], keep: impl Fn(&Job) -> bool) -> Vec<u64> {
    let mut w: Vec<u64> = jobs
        .iter()
        .filter(|j| keep(&j.job))
        .map(|j| wait_of(report, &j.job))
        .collect();
    w.sort_unstable();
    w
}

/// The `q` quantile (0..=1) of sorted values, by nearest rank.
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Jain's fairness index of per-team allocations divided by weight: 1 when every team got
/// capacity in proportion to its weight, 1/n when one team got everything.
pub fn jain(allocations: &[f64]) -> f64 {
    let n = allocations.len() as f64;
    let sum: f64 = allocations.iter().sum();
    let sq: f64 = allocations.iter().map(|x| x * x).sum();
    if sq == 0.0 { 1.0 } else { sum * sum / (n * sq) }
}

/// GPU-seconds each team ran (a job's GPUs times its duration, for jobs that ended).
pub fn gpu_seconds_by_team(cluster: &Cluster, report: &Report, jobs: &[SimJob]) -> Vec<f64> {
    let mut out = vec![0.0; cluster.teams.len()];
    for j in jobs {
        if report.jobs.get(&j.job.id).is_some_and(|o| o.end.is_some()) {
            out[j.job.team] += (j.job.demand().gpu * j.duration) as f64;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::cluster::{Node, Pool, Res, Team};

    const GI: u64 = 1 << 30;

    /// `nodes` nodes of `gpu` GPUs, one pool, one team without a quota.
    pub(super) fn lab(nodes: usize, gpu: u64) -> Cluster {
        Cluster {
            pools: vec![Pool {
                name: "a".into(),
                interruptible: false,
                labels: BTreeMap::new(),
            }],
            nodes: (0..nodes)
                .map(|_| Node {
                    pool: 0,
                    capacity: Res::new(gpu, 32_000, 256 * GI),
                })
                .collect(),
            teams: vec![Team {
                name: "t".into(),
                weight: 1.0,
                quota: Res::ZERO,
                borrow_limit: None,
            }],
        }
    }

    pub(super) fn sim(id: u64, submitted: u64, workers: u32, gpu: u64, duration: u64) -> SimJob {
        SimJob {
            job: Job {
                id,
                team: 0,
                priority: 100,
                workers,
                per_worker: Res::new(gpu, 1000, GI),
                interruptible: false,
                checkpointed: false,
                flavor: None,
                submitted,
            },
            duration,
            checkpoint_every: None,
        }
    }

    #[test]
    fn jobs_that_never_start_wait_until_the_replay_stops() {
        // One 4-GPU node: a 1-GPU job runs 0..100; a gang of 2 x 4 GPUs can never be placed.
        let c = lab(1, 4);
        let jobs = vec![sim(0, 0, 1, 1, 100), sim(1, 10, 2, 4, 50)];
        for policy in [admission::Policy::Fair, admission::Policy::Fifo] {
            let settings = Settings {
                policy,
                ..Settings::default()
            };
            let r = run(&c, &jobs, &settings, |_, _| {});
            assert_eq!(r.never_started, 1, "{policy:?}: {r:?}");
            assert_eq!(r.stopped_at, 100, "{policy:?}: {r:?}");
            // The gang waited from 10 until the replay stopped at 100.
            assert_eq!(waits(&r, &jobs, |_| true), vec![0, 90], "{policy:?}");
        }
    }
}
