//! Cluster mode: a run given `--cluster FILE` has its steps admitted by the scheduler onto the
//! file's nodes (virtual on one machine: a node is a share of this machine with its own GPU
//! indices), instead of the machine's CPU and memory pool.
//!
//! A cycle runs over every run's waiting and running steps on this home (the store keeps
//! them) and decides for every run at once; the process's scheduler (`run::admission`) runs
//! it for all the runs the process drives and hands each driver its run's [`Verdict`]. A
//! driver acts only for its own run: it starts the steps admitted, asks the runtimes of the
//! victims chosen for its steps to stop (the `preempt` terminate file, as `sluice preempt`
//! does), and shows the others' reasons. The cycle is deterministic, so engines looking at
//! the same rows decide alike; starting an attempt re-checks its nodes in the transaction
//! that records it, so no node is ever overcommitted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::scheduler::config::Config;
use crate::scheduler::{self, Decision, Job, Node, NodeRef, NodeSource, Res, Running};
use crate::spec::model::{ClusterSpec, Step};
use crate::store::Claim;

/// What a step asks of the scheduler, as stored with its waiting row and its attempt. The team
/// is kept by name, so that every engine reads it the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ask {
    pub team: String,
    pub priority: i64,
    pub workers: u32,
    pub gpu: u64,
    pub millicpu: u64,
    pub memory: u64,
    pub interruptible: bool,
    pub checkpointed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
    /// Extended resources per worker, by name (`nvidia.com/mig-1g.10gb`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extended: BTreeMap<String, u64>,
    /// The step's `timeout` in ms: it runs no longer, so it may backfill a starving gang's
    /// reservation that drains later (EASY backfill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Without a `timeout`: its estimate from history (`history::estimate`), when the Cluster
    /// reserves for starving gangs and earlier runs of its pipeline ran the step. Not
    /// enforced: a step that runs longer than that delays the gang by as much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_ms: Option<u64>,
}

impl Ask {
    /// Per worker, as the scheduler counts it. An extended resource that gets no slot (more
    /// names than the process can count: submission refuses steps naming resources their
    /// Cluster does not have) is asked for in full, so the step never fits.
    fn per_worker(&self) -> Res {
        let mut r = Res::new(self.gpu, self.millicpu, self.memory);
        for (name, n) in &self.extended {
            match crate::scheduler::extended::slot(name) {
                Some(i) => r.ext[i] = crate::scheduler::extended::amount(*n),
                None => r.memory = u64::MAX,
            }
        }
        r
    }
}

/// The Cluster a run was submitted with, as the scheduler uses it.
pub struct Scheduling {
    pub spec: ClusterSpec,
    config: Config,
    /// For pools whose nodes are read from the cluster (`nodes` omitted on Kubernetes): what
    /// follows those nodes, once the run's executor connected.
    live: OnceLock<Arc<dyn NodeSource>>,
}

/// The nodes as one decision sees them: the declared ones, then the nodes of the pools read
/// from the cluster as it reports them now (and any node a claim names that it no longer
/// reports, with no room), each with its [`NodeRef`].
struct Nodes {
    config: Config,
    refs: Vec<NodeRef>,
    index: HashMap<NodeRef, usize>,
    declared: usize,
}

impl Nodes {
    /// The index of `r` in this decision, adding a node with no room for a node of a pool read
    /// from the cluster that the cluster does not report (gone, or not listed yet): what runs
    /// there is still counted against its team. None: a declared index out of range, or a
    /// pool the Cluster does not have.
    fn resolve(&mut self, r: &NodeRef) -> Option<usize> {
        match r {
            NodeRef::Declared(i) => (*i < self.declared).then_some(*i),
            NodeRef::Named { pool, .. } => {
                if let Some(&i) = self.index.get(r) {
                    return Some(i);
                }
                let p = self
                    .config
                    .cluster
                    .pools
                    .iter()
                    .position(|x| x.name == *pool)?;
                self.config.cluster.nodes.push(Node {
                    pool: p,
                    capacity: Res::ZERO,
                });
                self.refs.push(r.clone());
                let i = self.refs.len() - 1;
                self.index.insert(r.clone(), i);
                Some(i)
            }
        }
    }

    /// Only the nodes of this decision: a node added by [`Nodes::resolve`] is not one.
    fn known(&self, r: &NodeRef) -> Option<usize> {
        match r {
            NodeRef::Declared(i) => (*i < self.declared).then_some(*i),
            NodeRef::Named { .. } => self.index.get(r).copied(),
        }
    }
}

/// What one cycle decided for one run's steps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Step name, the node of each worker.
    pub admit: Vec<(String, Vec<NodeRef>)>,
    /// Step name, why it waits.
    pub wait: Vec<(String, String)>,
    /// Attempt folders of steps (of any run) to preempt for this run's steps, with the
    /// victim's run and step and the step it makes room for.
    pub preempt: Vec<(String, String, String, String)>,
}

/// What one cycle decided, by run id: every run with a step waiting has its verdict.
pub type Verdicts = HashMap<String, Verdict>;

impl Scheduling {
    pub fn new(spec: ClusterSpec) -> Scheduling {
        let mut config = Config::from_spec(&spec);
        // The executor's unit is the millisecond (the simulator's is the second).
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        config.settings.starvation_limit = spec.scheduling.starvation_limit.map(ms);
        config.settings.grace = ms(spec.scheduling.grace_period);
        config.settings.unit_ms = 1;
        Scheduling {
            spec,
            config,
            live: OnceLock::new(),
        }
    }

    /// Whether some pool's nodes are read from the cluster rather than declared.
    pub fn reads_nodes(&self) -> bool {
        self.spec.pools.iter().any(|p| p.from_cluster)
    }

    /// From now on, the nodes of the pools read from the cluster are what `source` reports
    /// (the first source given is kept: one Cluster, one cluster).
    pub fn follow_nodes(&self, source: Arc<dyn NodeSource>) {
        let _ = self.live.set(source);
    }

    /// The nodes now. A node of the cluster belongs to the first pool read from the cluster
    /// whose labels it all carries; it offers its allocatable resources (capped by the pool's
    /// `resources`, where given) while it is schedulable, and no room while cordoned or not
    /// ready, so that what runs there is still counted.
    fn nodes_now(&self) -> Nodes {
        let mut config = self.config.clone();
        let declared = config.cluster.nodes.len();
        let mut refs: Vec<NodeRef> = (0..declared).map(NodeRef::Declared).collect();
        if let Some(source) = self.live.get() {
            let mut found: Vec<(usize, String, Res)> = Vec::new();
            source.each_node(&mut |n| {
                let Some(p) = self.spec.pools.iter().position(|pool| {
                    pool.from_cluster && pool.labels.iter().all(|(k, v)| n.labels.get(k) == Some(v))
                }) else {
                    return;
                };
                let cap = &self.spec.pools[p].resources;
                let capacity = if n.schedulable {
                    let mut r = Res::new(
                        cap.gpu
                            .map_or(n.allocatable.gpu, |c| c.min(n.allocatable.gpu)),
                        cap.millicpu
                            .map_or(n.allocatable.millicpu, |c| c.min(n.allocatable.millicpu)),
                        cap.memory
                            .map_or(n.allocatable.memory, |c| c.min(n.allocatable.memory)),
                    );
                    r.ext = n.allocatable.ext;
                    for (name, c) in &cap.extended {
                        if let Some(i) = crate::scheduler::extended::lookup(name) {
                            r.ext[i] = r.ext[i].min(crate::scheduler::extended::amount(*c));
                        }
                    }
                    r
                } else {
                    Res::ZERO
                };
                found.push((p, n.name.to_owned(), capacity));
            });
            found.sort();
            for (pool, node, capacity) in found {
                config.cluster.nodes.push(Node { pool, capacity });
                refs.push(NodeRef::Named {
                    pool: self.spec.pools[pool].name.clone(),
                    node,
                });
            }
        }
        let index = refs.iter().cloned().zip(0..).collect();
        Nodes {
            config,
            refs,
            index,
            declared,
        }
    }

    /// The Cluster's settings for attempts and their runtimes: `runtime.heartbeatTimeout`,
    /// `runtime.keepCheckpoints`, `runtime.passEnv`, `preemption.gracePeriod`.
    pub fn settings(&self) -> crate::executor::Settings {
        crate::executor::Settings {
            heartbeat_timeout: self.spec.runtime.heartbeat_timeout,
            grace_period: self.spec.scheduling.grace_period,
            keep_checkpoints: self.spec.runtime.keep_checkpoints as usize,
            pass_env: self.spec.runtime.pass_env.clone(),
            environment: crate::executor::StepEnvironment::default(),
        }
    }

    /// The request of one worker gang of `step`, for a run of `team`.
    pub fn ask(&self, team: &str, step: &Step) -> Ask {
        let r = &step.resources;
        // Its extended resources get their slots now, so that nodes read from the cluster
        // count them from the first cycle that sees the step.
        for name in r.extended.keys() {
            crate::scheduler::extended::slot(name);
        }
        Ask {
            team: team.to_owned(),
            priority: step
                .priority
                .as_ref()
                .and_then(|p| self.config.priorities.get(p).copied())
                .unwrap_or(self.config.default_priority),
            workers: r.workers.max(1),
            gpu: u64::from(r.gpu),
            millicpu: r.millicpu,
            memory: r.memory.unwrap_or(0),
            interruptible: step.interruptible,
            checkpointed: step.checkpoint.is_some(),
            flavor: r.flavor.clone(),
            extended: r.extended.clone(),
            timeout_ms: step
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            history_ms: None,
        }
    }

    /// Whether the Cluster sets `starvationLimit`: only then do estimates matter (EASY
    /// backfill), so only then is a step's history read.
    pub fn reserves(&self) -> bool {
        self.config.settings.starvation_limit.is_some()
    }

    /// One scheduling cycle over what `held` and `waiting` say (every run's), at `now` (unix
    /// ms); the decisions for the steps of every run that has one waiting. A running attempt
    /// whose request or nodes cannot be read is an error naming it: leaving it out would give
    /// its room away twice.
    pub fn cycle(&self, held: &[Claim], waiting: &[Claim], now: i64) -> Result<Verdicts, String> {
        let mut table = self.nodes_now();
        let now = u64::try_from(now).unwrap_or(0);
        let mut running = Vec::with_capacity(held.len());
        for (i, c) in held.iter().enumerate() {
            let (ask, nodes) = held_claim(c, &mut table)?;
            let started = u64::try_from(c.since).unwrap_or(0);
            running.push(Running {
                job: job(&mut table.config, i as u64, &ask, started),
                nodes,
                started,
                // Time since it started: the executor does not know when it last checkpointed.
                work_at_risk: now.saturating_sub(started),
            });
        }
        let base = held.len() as u64;
        let mut jobs = Vec::with_capacity(waiting.len());
        // Steps naming an extended resource past the slots the process counts never fit: they
        // wait, saying so, without asking the scheduler.
        let mut uncounted = Vec::new();
        for (i, c) in waiting.iter().enumerate() {
            if let Ok(ask) = serde_json::from_str::<Ask>(&c.job) {
                if let Some(name) = ask
                    .extended
                    .keys()
                    .find(|n| crate::scheduler::extended::slot(n).is_none())
                {
                    uncounted.push((c, name.clone()));
                    continue;
                }
                let submitted = u64::try_from(c.since).unwrap_or(0);
                jobs.push(job(&mut table.config, base + i as u64, &ask, submitted));
            }
        }
        let mut settings = table.config.settings.clone();
        settings.now = now;
        let decisions = scheduler::cycle(&table.config.cluster, &running, &jobs, &settings);
        let waiter = |id: u64| id.checked_sub(base).and_then(|i| waiting.get(i as usize));
        let mut verdicts = Verdicts::new();
        for c in waiting {
            verdicts.entry(c.run_id.clone()).or_default();
        }
        for (c, name) in uncounted {
            if let Some(verdict) = verdicts.get_mut(&c.run_id) {
                let counted: Vec<String> = (0..crate::scheduler::extended::SLOTS)
                    .filter_map(crate::scheduler::extended::name)
                    .collect();
                verdict.wait.push((
                    c.step.clone(),
                    format!(
                        "waiting: it asks for {name}, and this server already schedules {} extended resources ({}), the most it counts",
                        counted.len(),
                        counted.join(", ")
                    ),
                ));
            }
        }
        for d in decisions {
            match d {
                Decision::Admit { job, nodes } => {
                    if let Some(c) = waiter(job)
                        && let Some(verdict) = verdicts.get_mut(&c.run_id)
                    {
                        let nodes = nodes.iter().map(|&n| table.refs[n].clone()).collect();
                        verdict.admit.push((c.step.clone(), nodes));
                    }
                }
                Decision::Wait { job, reason } => {
                    if let Some(c) = waiter(job)
                        && let Some(verdict) = verdicts.get_mut(&c.run_id)
                    {
                        let reason = if reason.starts_with("waiting") {
                            reason.to_string()
                        } else {
                            format!("waiting: {reason}")
                        };
                        verdict.wait.push((c.step.clone(), reason));
                    }
                }
                Decision::Preempt { victim, job } => {
                    if let (Some(c), Some(v)) = (waiter(job), held.get(victim as usize))
                        && let Some(dir) = &v.dir
                        && let Some(verdict) = verdicts.get_mut(&c.run_id)
                    {
                        verdict.preempt.push((
                            dir.clone(),
                            v.run_id.clone(),
                            v.step.clone(),
                            c.step.clone(),
                        ));
                    }
                }
            }
        }
        Ok(verdicts)
    }

    /// Whether `ask`'s workers still fit on `nodes` given what runs (`held`), and if so the GPU
    /// indices each worker gets on its node (the lowest free), worker after worker,
    /// comma-separated.
    pub fn place(&self, held: &[Claim], ask: &Ask, nodes: &[NodeRef]) -> Option<String> {
        let mut table = self.nodes_now();
        // A node chosen that the cluster no longer reports has no room.
        let nodes: Vec<usize> = nodes
            .iter()
            .map(|r| table.known(r))
            .collect::<Option<_>>()?;
        let mut claims = Vec::with_capacity(held.len());
        for c in held {
            // One that cannot be read: no room is known to be free (the cycle said why).
            claims.push(held_claim(c, &mut table).ok()?);
        }
        let cluster = &table.config.cluster;
        let mut free: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
        let mut taken: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
        for (c, (other, on)) in held.iter().zip(claims) {
            let gpus: Vec<u32> = c
                .gpus
                .as_deref()
                .unwrap_or("")
                .split(',')
                .filter_map(|g| g.parse().ok())
                .collect();
            let per = usize::try_from(other.gpu).unwrap_or(0);
            for (w, &n) in on.iter().enumerate() {
                if let Some(f) = free.get_mut(n) {
                    *f = f.saturating_sub(other.per_worker());
                }
                if per > 0 {
                    taken
                        .entry(n)
                        .or_default()
                        .extend(gpus.iter().skip(w * per).take(per));
                }
            }
        }
        let mut out = Vec::new();
        for &n in &nodes {
            let f = free.get_mut(n)?;
            if !ask.per_worker().fits_in(*f) {
                return None;
            }
            *f = f.saturating_sub(ask.per_worker());
            let capacity = u32::try_from(cluster.nodes[n].capacity.gpu).unwrap_or(u32::MAX);
            let held_here = taken.entry(n).or_default();
            let mine: Vec<u32> = (0..capacity)
                .filter(|g| !held_here.contains(g))
                .take(usize::try_from(ask.gpu).unwrap_or(0))
                .collect();
            if (mine.len() as u64) < ask.gpu {
                return None;
            }
            held_here.extend(&mine);
            out.extend(mine);
        }
        Some(out.iter().map(u32::to_string).collect::<Vec<_>>().join(","))
    }

    /// The interval between trial starts of `team` (ms), from its `maxTrialsPerMinute`.
    /// Whether Kueue admits this Cluster's steps (`executor: kubernetes` with
    /// `admission: kueue`): sluice then neither admits nor places them.
    pub fn admitted_by_kueue(&self) -> bool {
        self.spec.executor == crate::spec::model::ExecutorKind::Kubernetes
            && self
                .spec
                .kubernetes
                .as_ref()
                .is_some_and(|k| k.admission == crate::spec::model::Admission::Kueue)
    }

    pub fn trial_interval_ms(&self, team: &str) -> Option<i64> {
        self.trial_rate(team)
            .map(|per_minute| ((60_000.0 / per_minute.max(1) as f64).round() as i64).max(1))
    }

    /// Why a trial of `team` waits for its rate limit.
    pub fn rate_reason(&self, team: &str) -> String {
        format!(
            "waiting: team {team} at its trial rate limit ({} per minute)",
            self.trial_rate(team).unwrap_or(0)
        )
    }

    /// The team's `maxTrialsPerMinute`, if it has one.
    pub fn trial_rate(&self, team: &str) -> Option<u64> {
        self.spec
            .teams
            .iter()
            .find(|t| t.name == team)
            .and_then(|t| t.max_trials_per_minute)
    }
}

/// The request and nodes of a running attempt, as its engine stored them, its nodes as
/// indices into `table`.
fn held_claim(c: &Claim, table: &mut Nodes) -> Result<(Ask, Vec<usize>), String> {
    let unreadable = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "run {}: the {what} stored with the running attempt of '{}' cannot be read ({e})",
            c.run_id, c.step
        )
    };
    let ask = serde_json::from_str::<Ask>(&c.job).map_err(|e| unreadable("request", &e))?;
    let refs: Vec<NodeRef> = c
        .nodes
        .as_deref()
        .ok_or_else(|| unreadable("nodes", &"none"))
        .and_then(|n| serde_json::from_str(n).map_err(|e| unreadable("nodes", &e)))?;
    let nodes = refs
        .iter()
        .map(|r| {
            table
                .resolve(r)
                .ok_or_else(|| unreadable("nodes", &format!("the Cluster has no {r}")))
        })
        .collect::<Result<_, _>>()?;
    Ok((ask, nodes))
}

/// How a run keeps its Cluster file: `{"file", "source"}`.
pub fn stored(file: &str, source: &str) -> String {
    serde_json::json!({ "file": file, "source": source }).to_string()
}

/// The Cluster a run was submitted with, read again from what it stored.
pub fn of_run(stored: &str) -> Result<ClusterSpec, String> {
    let v: serde_json::Value =
        serde_json::from_str(stored).map_err(|e| format!("the run's stored Cluster file: {e}"))?;
    let file = v["file"].as_str().unwrap_or("cluster.yaml");
    let source = v["source"].as_str().unwrap_or("");
    crate::spec::cluster::load(file, source.to_owned())
        .map(|(_, spec)| spec)
        .map_err(|diags| {
            diags
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
}

fn job(config: &mut Config, id: u64, ask: &Ask, submitted: u64) -> Job {
    Job {
        id,
        team: config.team(&ask.team),
        priority: ask.priority,
        workers: ask.workers,
        per_worker: ask.per_worker(),
        interruptible: ask.interruptible,
        checkpointed: ask.checkpointed,
        flavor: ask.flavor.clone(),
        submitted,
        estimate: ask.timeout_ms.or(ask.history_ms),
    }
}

#[cfg(test)]
mod tests;
