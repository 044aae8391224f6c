//! A discrete-event replay of a workload through the scheduler's own cycle, in virtual time:
//! jobs arrive, the cycle admits, preempts or keeps them waiting, admitted jobs run for their
//! duration, preempted ones lose the work since their last checkpoint and queue again. Under
//! the `fifo` policy pods are placed one by one as Kubernetes' default scheduler does, so a
//! gang may hold part of its GPUs while it waits for the rest.
//!
//! Events at one instant are handled together (all ends, then all arrivals, then cycles until
//! nothing changes). State is kept per job index: the running and waiting sets are vectors
//! handed to `admission::cycle` as they are (no copies per event), ends come from a heap, and
//! per-node free resources are kept up to date, so a replay costs about `events x cycle`.
//!
//! Measurements beyond utilization and waits:
//!
//! - **fragmentation**: of the GPU-seconds that sat free, the share that sat on nodes with
//!   fewer free GPUs than the largest per-worker GPU request among the waiting jobs (nothing
//!   is fragmented while nothing waits). It is the idle capacity the queue could not use
//!   because it was split across nodes: the notion of the FGD paper (Weng et al., "Beware of
//!   Fragmentation", USENIX ATC '23: a node's free GPUs are fragmented for a task that cannot
//!   fit in them), with the task taken as the largest waiting worker instead of an expectation
//!   over the workload's task mix, which keeps it O(distinct free counts) per event. GPUs only;
//!   pools and flavors the waiting job may not use are not told apart.
//! - **Jain's fairness index** (`jain_fairness`) of the service teams received while they
//!   wanted more: for each team, its weighted dominant share (DRF: the largest of its GPU, CPU
//!   and memory shares of the cluster, held by its fully placed jobs, divided by its weight;
//!   Ghodsi et al., "Dominant Resource Fairness", NSDI '11) averaged over the time it had a
//!   job waiting (backlogged, as fairness is judged among backlogged flows in fair queueing:
//!   Demers, Keshav and Shenker, SIGCOMM '89); then Jain, Chiu and Hawe's index (DEC-TR-301,
//!   1984), `(sum x)^2 / (n sum x^2)`, over the teams that were ever backlogged: 1 when every
//!   backlogged team got the same share per unit of weight, 1/n when one got everything. Kept
//!   per team and brought up to date only when the team's holdings or queue change: O(1) per
//!   start, stop, arrival or preemption. Quotas are not entitlements here: a fair schedule
//!   that gives a team with a quota more than a team without one scores below 1.
//! - a [`Series`] of GPUs held and jobs waiting over time, for charts.

mod figures;
pub mod never_fit;
mod series;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

pub use figures::{gpu_seconds_by_team, jain, quantile, wait_of, waits};
pub use series::{MAX_BUCKETS, Point, Series};

use super::admission::{self, Decision, Settings};
use super::cluster::{Cluster, Res};
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
    /// Events processed (instants at which something arrived or ended).
    pub events: u64,
    /// Scheduling cycles run.
    pub cycles: u64,
    /// What was held, by (team, pool): what cost is computed from.
    pub held: BTreeMap<(usize, usize), Held>,
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
    /// Of those, jobs that no schedule could ever start: larger than the empty cluster could
    /// hold, or (under `fair`) than their team may ever hold ([`never_fit`]).
    pub never_fit: u64,
    /// GPU-seconds free, until the replay stopped.
    pub free_gpu_seconds: u128,
    /// Free GPU-seconds on nodes too full for the largest waiting worker (module doc).
    pub fragmented_gpu_seconds: u128,
    /// `fragmented_gpu_seconds / free_gpu_seconds` (0 when nothing was free).
    pub fragmentation: f64,
    /// GPUs held and jobs waiting over time.
    pub series: Series,
    /// By team: seconds with a job waiting, and the mean weighted dominant share held then
    /// (0 for a team never backlogged). See the module doc.
    pub backlogged_seconds: Vec<u64>,
    pub share_while_backlogged: Vec<f64>,
    /// Jain's index of `share_while_backlogged` over the teams ever backlogged (1 if fewer
    /// than two).
    pub jain_fairness: f64,
}

/// One team's running account for Jain's index (module doc).
#[derive(Clone, Debug, Default)]
struct TeamAccount {
    held: Res,
    waiting: u64,
    /// `held`'s dominant share over the team's weight.
    share: f64,
    since: u64,
    backlogged: u64,
    share_seconds: f64,
}

const NONE: usize = usize::MAX;

/// Job ids to indices into the workload.
enum Ids {
    /// Job `i` has id `i` (workload files); the number of jobs.
    Identity(usize),
    Map(HashMap<u64, usize>),
}

impl Ids {
    fn of(jobs: &[SimJob]) -> Ids {
        if jobs.iter().enumerate().all(|(i, j)| j.job.id == i as u64) {
            Ids::Identity(jobs.len())
        } else {
            Ids::Map(
                jobs.iter()
                    .enumerate()
                    .map(|(i, j)| (j.job.id, i))
                    .collect(),
            )
        }
    }

    fn get(&self, id: u64) -> Option<usize> {
        match self {
            Ids::Identity(n) => usize::try_from(id).ok().filter(|i| i < n),
            Ids::Map(m) => m.get(&id).copied(),
        }
    }
}

/// The replay's state, by job index.
struct Sim<'a> {
    cluster: &'a Cluster,
    jobs: &'a [SimJob],
    ids: Ids,
    running: Vec<Running>,
    run_slot: Vec<usize>,
    waiting: Vec<Job>,
    wait_slot: Vec<usize>,
    /// Work done before the current (or next) start: restored from a checkpoint.
    done_before: Vec<u64>,
    /// Starts so far: an end in the heap is stale once its job started again.
    generation: Vec<u32>,
    ends: BinaryHeap<Reverse<(u64, usize, u32)>>,
    outcomes: Vec<JobOutcome>,
    /// Free resources per node, and how many nodes have each count of free GPUs.
    free: Vec<Res>,
    free_nodes_by_gpus: BTreeMap<u64, u64>,
    free_gpu: u64,
    /// How many waiting jobs ask each count of GPUs per worker.
    waiting_by_gpus: BTreeMap<u64, u64>,
    running_gpu: u64,
    /// `fifo`: the pods of waiting gangs placed so far, and the GPUs they hold.
    partial: BTreeMap<u64, Vec<usize>>,
    partial_gpu: u64,
    /// The current instant, and each team's account for Jain's index.
    now: u64,
    teams: Vec<TeamAccount>,
    total: Res,
    report: Report,
}

impl Sim<'_> {
    /// Brings team `t`'s account up to `self.now`, then applies a change to what it holds
    /// (`add`/`sub`) and to how many of its jobs wait.
    fn team_change(&mut self, t: usize, add: Res, sub: Res, waiting: i64) {
        let now = self.now;
        let Some(a) = self.teams.get_mut(t) else {
            return;
        };
        if a.waiting > 0 {
            let dt = now.saturating_sub(a.since);
            a.backlogged += dt;
            a.share_seconds += a.share * dt as f64;
        }
        a.since = now;
        a.waiting = a.waiting.saturating_add_signed(waiting);
        if add != Res::ZERO || sub != Res::ZERO {
            a.held = (a.held + add).saturating_sub(sub);
            let weight = self
                .cluster
                .teams
                .get(t)
                .map_or(1.0, |t| t.weight.max(1e-9));
            a.share = a.held.dominant_share(self.total) / weight;
        }
    }

    fn set_free(&mut self, node: usize, to: Res) {
        let before = self.free[node].gpu;
        if let Some(c) = self.free_nodes_by_gpus.get_mut(&before) {
            *c -= 1;
            if *c == 0 {
                self.free_nodes_by_gpus.remove(&before);
            }
        }
        *self.free_nodes_by_gpus.entry(to.gpu).or_default() += 1;
        self.free_gpu = self.free_gpu - before + to.gpu;
        self.free[node] = to;
    }

    fn take(&mut self, node: usize, r: Res) {
        self.set_free(node, self.free[node].saturating_sub(r));
    }

    fn give(&mut self, node: usize, r: Res) {
        self.set_free(node, self.free[node] + r);
    }

    fn enqueue(&mut self, i: usize, done: u64) {
        let job = self.jobs[i].job.clone();
        self.team_change(job.team, Res::ZERO, Res::ZERO, 1);
        *self.waiting_by_gpus.entry(job.per_worker.gpu).or_default() += 1;
        self.done_before[i] = done;
        self.wait_slot[i] = self.waiting.len();
        self.waiting.push(job);
    }

    fn dequeue(&mut self, i: usize) -> Option<Job> {
        let slot = std::mem::replace(&mut self.wait_slot[i], NONE);
        if slot == NONE {
            return None;
        }
        let job = self.waiting.swap_remove(slot);
        self.team_change(job.team, Res::ZERO, Res::ZERO, -1);
        if let Some(moved) = self.waiting.get(slot)
            && let Some(m) = self.ids.get(moved.id)
        {
            self.wait_slot[m] = slot;
        }
        if let Some(c) = self.waiting_by_gpus.get_mut(&job.per_worker.gpu) {
            *c -= 1;
            if *c == 0 {
                self.waiting_by_gpus.remove(&job.per_worker.gpu);
            }
        }
        Some(job)
    }

    fn start(&mut self, i: usize, job: Job, nodes: Vec<usize>, now: u64) {
        for &n in &nodes {
            self.take(n, job.per_worker);
        }
        self.running_gpu += job.demand().gpu;
        self.team_change(job.team, job.demand(), Res::ZERO, 0);
        self.outcomes[i].first_start.get_or_insert(now);
        self.generation[i] += 1;
        let left = self.jobs[i].duration.saturating_sub(self.done_before[i]);
        self.ends.push(Reverse((now + left, i, self.generation[i])));
        self.run_slot[i] = self.running.len();
        self.running.push(Running {
            job,
            nodes,
            started: now,
            work_at_risk: 0,
        });
    }

    fn stop(&mut self, i: usize, now: u64) -> Option<Running> {
        let slot = std::mem::replace(&mut self.run_slot[i], NONE);
        if slot == NONE {
            return None;
        }
        let r = self.running.swap_remove(slot);
        if let Some(moved) = self.running.get(slot)
            && let Some(m) = self.ids.get(moved.job.id)
        {
            self.run_slot[m] = slot;
        }
        for &n in &r.nodes {
            self.give(n, r.job.per_worker);
        }
        self.running_gpu -= r.job.demand().gpu;
        self.team_change(r.job.team, Res::ZERO, r.job.demand(), 0);
        charge(&mut self.report, self.cluster, &r, now);
        Some(r)
    }

    fn preempt(&mut self, i: usize, now: u64) {
        let Some(r) = self.stop(i, now) else { return };
        let done = self.done_before[i] + (now - r.started);
        let kept = match self.jobs[i].checkpoint_every {
            Some(every) if every > 0 => done - done % every,
            _ => 0,
        };
        let lost = done - kept;
        let o = &mut self.outcomes[i];
        o.preemptions += 1;
        o.seconds_lost += lost;
        self.report.preemptions += 1;
        self.report.gpu_seconds_lost += lost * r.job.demand().gpu;
        self.enqueue(i, kept);
    }

    /// The time of the next end still due (stale entries dropped).
    fn next_end(&mut self) -> Option<u64> {
        while let Some(Reverse((t, i, g))) = self.ends.peek().copied() {
            if self.run_slot[i] != NONE && self.generation[i] == g {
                return Some(t);
            }
            self.ends.pop();
        }
        None
    }

    /// Cycles until nothing more changes at this instant (preemptions free room at once:
    /// the simulation has no grace period).
    fn cycles(&mut self, settings: &Settings, now: u64) {
        let mut settings = settings.clone();
        settings.now = now;
        // The replay reads no reason.
        settings.explain = false;
        for _ in 0..16 {
            if self.waiting.is_empty() {
                break;
            }
            let decisions = admission::cycle(self.cluster, &self.running, &self.waiting, &settings);
            self.report.cycles += 1;
            let mut changed = false;
            for d in decisions {
                match d {
                    Decision::Admit { job, nodes } => {
                        let Some(i) = self.ids.get(job) else { continue };
                        let Some(j) = self.dequeue(i) else { continue };
                        self.start(i, j, nodes, now);
                        changed = true;
                    }
                    Decision::Preempt { victim, .. } => {
                        let Some(i) = self.ids.get(victim) else {
                            continue;
                        };
                        if self.run_slot[i] != NONE {
                            self.preempt(i, now);
                            changed = true;
                        }
                    }
                    Decision::Wait { .. } => {}
                }
            }
            if !changed {
                break;
            }
        }
    }

    /// Work at risk, for the victim order: time since the last checkpoint, as of `at`. An
    /// instant's cycles see it as of the previous event (as the simulator always has; steps
    /// admitted at this instant have none), so it is set lazily before the first cycle of an
    /// instant, not after every event.
    fn update_work_at_risk(&mut self, at: u64) {
        for r in &mut self.running {
            let Some(i) = self.ids.get(r.job.id) else {
                continue;
            };
            let done = self.done_before[i] + at.saturating_sub(r.started);
            r.work_at_risk = match self.jobs[i].checkpoint_every {
                Some(every) if every > 0 => done % every,
                _ => done,
            };
        }
    }

    /// `fifo`: each waiting job's unplaced pods, in arrival order, onto the least allocated
    /// node that fits; jobs with every pod placed start.
    fn place_pods(&mut self, now: u64) {
        let mut order: Vec<(u64, u64)> = self.waiting.iter().map(|j| (j.submitted, j.id)).collect();
        order.sort_unstable();
        // Pods queue by creation: the first pod of every job, then the second... so the pods
        // of gangs submitted together interleave, as they do in Kubernetes' queue.
        let most = self.waiting.iter().map(|j| j.workers).max().unwrap_or(0) as usize;
        for k in 0..most {
            for &(_, id) in &order {
                let Some(i) = self.ids.get(id) else { continue };
                let Some(job) = self.waiting.get(self.wait_slot[i]) else {
                    continue;
                };
                let placed = self.partial.get(&id).map_or(0, Vec::len);
                if placed != k || k >= job.workers as usize {
                    continue;
                }
                let pod = Job {
                    workers: 1,
                    ..job.clone()
                };
                if let Some(n) =
                    placement::place(self.cluster, &self.free, &pod, placement::Placement::Spread)
                {
                    self.take(n[0], pod.per_worker);
                    self.partial_gpu += pod.per_worker.gpu;
                    self.partial.entry(id).or_default().push(n[0]);
                }
            }
        }
        for (_, id) in order {
            let Some(i) = self.ids.get(id) else { continue };
            let complete = match (self.waiting.get(self.wait_slot[i]), self.partial.get(&id)) {
                (Some(job), Some(p)) => p.len() == job.workers as usize,
                _ => false,
            };
            if !complete {
                continue;
            }
            let nodes = self.partial.remove(&id).unwrap_or_default();
            let Some(job) = self.dequeue(i) else { continue };
            // The pods' room passes from the partial gang to the running job.
            for &n in &nodes {
                self.give(n, job.per_worker);
            }
            self.partial_gpu -= job.per_worker.gpu * nodes.len() as u64;
            self.start(i, job, nodes, now);
        }
    }

    /// What holds nodes: running jobs, and (under `fifo`) the pods of gangs placed so far.
    fn with_partial(&self) -> Vec<Running> {
        let mut out = self.running.clone();
        for (id, nodes) in &self.partial {
            if let Some(i) = self.ids.get(*id)
                && let Some(job) = self.waiting.get(self.wait_slot[i])
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

    /// Adds the interval `[now, next)` to the time-weighted sums.
    fn account(&mut self, now: u64, next: u64) {
        let dt = next - now;
        self.report.partial_gang_gpu_seconds += self.partial_gpu * dt;
        let largest = self
            .waiting_by_gpus
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0);
        let fragmented: u64 = if largest > 1 {
            self.free_nodes_by_gpus
                .range(1..largest)
                .map(|(gpus, nodes)| gpus * nodes)
                .sum()
        } else {
            0
        };
        self.report.fragmented_gpu_seconds += u128::from(fragmented) * u128::from(dt);
        self.report.free_gpu_seconds += u128::from(self.free_gpu) * u128::from(dt);
        self.report
            .series
            .add(now, next, self.running_gpu, self.waiting.len() as u64);
    }
}

/// Resource-seconds held by one team in one pool.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    pub gpu_seconds: u64,
    pub cpu_seconds: u64,
    /// Unit-seconds of each extended resource, by its slot (`extended::name`).
    pub extended_seconds: [u64; super::extended::SLOTS],
}

/// Adds what a job held from its start until `now` to the report's per team and pool sums.
fn charge(report: &mut Report, cluster: &Cluster, r: &Running, now: u64) {
    let secs = now.saturating_sub(r.started);
    for &n in &r.nodes {
        let e = report
            .held
            .entry((r.job.team, cluster.nodes[n].pool))
            .or_default();
        e.gpu_seconds += secs * r.job.per_worker.gpu;
        e.cpu_seconds += secs * r.job.per_worker.millicpu / 1000;
        for (held, &amount) in e.extended_seconds.iter_mut().zip(&r.job.per_worker.ext) {
            *held += secs * u64::from(amount);
        }
    }
}

/// Replays `jobs` and returns what happened. `check` sees what holds nodes after every event
/// (the tests' invariants). Deterministic.
pub fn run(
    cluster: &Cluster,
    jobs: &[SimJob],
    settings: &Settings,
    mut check: impl FnMut(u64, &[Running]),
) -> Report {
    let n = jobs.len();
    let mut arrivals: Vec<usize> = (0..n).collect();
    arrivals.sort_by_key(|&i| (jobs[i].job.submitted, jobs[i].job.id));
    let free: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    let mut free_nodes_by_gpus = BTreeMap::new();
    for f in &free {
        *free_nodes_by_gpus.entry(f.gpu).or_default() += 1;
    }
    let total_gpu = cluster.total().gpu;
    let mut sim = Sim {
        cluster,
        jobs,
        ids: Ids::of(jobs),
        running: Vec::new(),
        run_slot: vec![NONE; n],
        waiting: Vec::new(),
        wait_slot: vec![NONE; n],
        done_before: vec![0; n],
        generation: vec![0; n],
        ends: BinaryHeap::new(),
        outcomes: vec![JobOutcome::default(); n],
        free,
        free_nodes_by_gpus,
        free_gpu: total_gpu,
        waiting_by_gpus: BTreeMap::new(),
        running_gpu: 0,
        partial: BTreeMap::new(),
        partial_gpu: 0,
        now: 0,
        teams: vec![TeamAccount::default(); cluster.teams.len()],
        total: cluster.total(),
        report: Report::default(),
    };
    let fifo = settings.policy == admission::Policy::Fifo;
    let mut next_arrival = 0;
    let mut used_gpu_seconds: u128 = 0;
    let mut now = 0u64;
    // The previous event's time: what work at risk is measured at (`update_work_at_risk`).
    let mut previous = 0u64;
    loop {
        sim.now = now;
        // Ends due now.
        while let Some(Reverse((t, i, g))) = sim.ends.peek().copied()
            && t <= now
        {
            sim.ends.pop();
            if sim.run_slot[i] == NONE || sim.generation[i] != g {
                continue;
            }
            sim.stop(i, now);
            sim.outcomes[i].end = Some(now);
            sim.report.makespan = sim.report.makespan.max(now);
        }
        while next_arrival < n && jobs[arrivals[next_arrival]].job.submitted <= now {
            sim.enqueue(arrivals[next_arrival], 0);
            next_arrival += 1;
        }
        if fifo {
            // Kubernetes' default scheduler: pods one by one in arrival order, each on the
            // least allocated node that fits; a gang runs once all its pods are placed, and
            // the pods placed so far hold their resources meanwhile.
            sim.place_pods(now);
            if sim.running.is_empty() && next_arrival == n && !sim.waiting.is_empty() {
                // Nothing runs, nothing arrives, nothing can start: stuck for good.
                sim.report.deadlocks += u32::from(sim.partial.values().any(|p| !p.is_empty()));
                sim.report.makespan = sim.report.makespan.max(now);
                sim.report.stopped_at = now;
                check(now, &sim.with_partial());
                sim.report.events += 1;
                break;
            }
            check(now, &sim.with_partial());
        } else {
            if !sim.waiting.is_empty() {
                sim.update_work_at_risk(previous);
            }
            sim.cycles(settings, now);
            check(now, &sim.running);
        }
        sim.report.events += 1;
        // The next event: an arrival or an end.
        let next_in = arrivals.get(next_arrival).map(|&i| jobs[i].job.submitted);
        let Some(next) = [sim.next_end(), next_in].into_iter().flatten().min() else {
            sim.report.stopped_at = now;
            break;
        };
        used_gpu_seconds += u128::from(sim.running_gpu) * u128::from(next - now);
        sim.account(now, next);
        previous = now;
        now = next;
    }
    sim.report.stopped_at = sim.report.stopped_at.max(sim.report.makespan);
    sim.now = sim.report.stopped_at;
    for t in 0..sim.teams.len() {
        sim.team_change(t, Res::ZERO, Res::ZERO, 0);
    }
    let mut report = sim.report;
    report.backlogged_seconds = sim.teams.iter().map(|a| a.backlogged).collect();
    report.share_while_backlogged = sim
        .teams
        .iter()
        .map(|a| {
            if a.backlogged > 0 {
                a.share_seconds / a.backlogged as f64
            } else {
                0.0
            }
        })
        .collect();
    let backlogged: Vec<f64> = sim
        .teams
        .iter()
        .zip(&report.share_while_backlogged)
        .filter(|(a, _)| a.backlogged > 0)
        .map(|(_, s)| *s)
        .collect();
    report.jain_fairness = jain(&backlogged);
    report.never_started = sim
        .outcomes
        .iter()
        .filter(|o| o.first_start.is_none())
        .count() as u64;
    report.never_fit = never_fit::count(cluster, jobs, settings.policy);
    report.jobs = jobs.iter().map(|j| j.job.id).zip(sim.outcomes).collect();
    if report.makespan > 0 && total_gpu > 0 {
        report.gpu_utilization =
            used_gpu_seconds as f64 / (u128::from(total_gpu) * u128::from(report.makespan)) as f64;
    }
    if report.free_gpu_seconds > 0 {
        report.fragmentation =
            report.fragmented_gpu_seconds as f64 / report.free_gpu_seconds as f64;
    }
    report
}

#[cfg(test)]
mod tests;
