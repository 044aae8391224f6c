//! What a `Cluster` file says about capacity, enough for `sluice lint --cluster` to refuse
//! steps that can never be placed: a gang larger than any pool, a GPU count no node has, a
//! flavor no pool offers, a priority class that does not exist; and, with `executor:
//! kubernetes`, paths the engine would resolve on its own machine ([`super::paths`]).
//!
//! The full `Cluster` kind (teams, quotas, preemption) is validated by the scheduler's own
//! decoder; this reads only pools and priorities.

use std::collections::BTreeMap;

use super::decode::Cx;
use super::diagnostic::Diagnostics;
use super::model::{Pending, Pipeline, Step};
use super::yaml::{Node, Source};
use super::{Document, Loaded};

#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub name: String,
    pub nodes: u32,
    pub gpu: u32,
    pub millicpu: Option<u64>,
    pub memory: Option<u64>,
    /// Extended resources per node, by name.
    pub extended: BTreeMap<String, u64>,
    pub labels: BTreeMap<String, String>,
    /// On Kubernetes with `nodes` omitted: the nodes and their resources are known only once
    /// the cluster is read, so no step is refused for not fitting this pool.
    pub from_cluster: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Capacity {
    pub pools: Vec<Pool>,
    pub priorities: Vec<String>,
    /// `executor: kubernetes`: steps run in containers ([`super::paths::check`]).
    pub on_kubernetes: bool,
}

const DEFAULT_PRIORITIES: [&str; 3] = ["production", "default", "best-effort"];

/// The first `Cluster` document of a loaded file.
pub fn cluster_document(loaded: &Loaded) -> Option<&Pending> {
    loaded.documents.iter().find_map(|d| match d {
        Document::Pending(p) if p.kind == "Cluster" => Some(p),
        _ => None,
    })
}

/// Reads the pools of the first `Cluster` document of a loaded file.
pub fn read(loaded: &Loaded, diags: &mut Diagnostics) -> Option<Capacity> {
    let Some(spec) = cluster_document(loaded).map(|p| p.spec.as_ref()) else {
        diags
            .error(
                super::Pos::START,
                "no 'kind: Cluster' document in this file",
            )
            .help("--cluster takes the engine's Cluster file");
        return None;
    };
    let spec = spec?;
    let mut cx = Cx {
        src: &loaded.source,
        d: diags,
    };
    Some(read_spec(&mut cx, spec))
}

fn read_spec(cx: &mut Cx<'_>, spec: &Node) -> Capacity {
    let on_kubernetes = spec
        .get("executor")
        .and_then(Node::as_scalar)
        .is_some_and(|e| e.text == "kubernetes");
    let mut cap = Capacity {
        pools: Vec::new(),
        priorities: DEFAULT_PRIORITIES.iter().map(|s| (*s).to_owned()).collect(),
        on_kubernetes,
    };
    if let Some(pools) = spec.get("pools") {
        match pools.as_seq() {
            Some(items) => {
                cap.pools = items
                    .iter()
                    .filter_map(|p| read_pool(cx, p, on_kubernetes))
                    .collect()
            }
            None => cx.expected(pools, "pools", "a list of pools"),
        }
    }
    if let Some(prios) = spec.get("priorities").and_then(Node::as_seq) {
        let names: Vec<String> = prios
            .iter()
            .filter_map(|p| p.get("name"))
            .filter_map(|n| cx.string(n, "priorities.name"))
            .collect();
        if !names.is_empty() {
            cap.priorities = names;
        }
    }
    cap
}

fn read_pool(cx: &mut Cx<'_>, node: &Node, on_kubernetes: bool) -> Option<Pool> {
    let name = cx.string(node.get("name")?, "pools.name")?;
    let from_cluster = on_kubernetes && node.get("nodes").is_none();
    let nodes = match node.get("nodes") {
        Some(n) => cx.u32(n, "pools.nodes", 1)?,
        None => 1,
    };
    let mut pool = Pool {
        name,
        nodes,
        gpu: 0,
        millicpu: None,
        memory: None,
        extended: BTreeMap::new(),
        labels: BTreeMap::new(),
        from_cluster,
    };
    if let Some(res) = node.get("resources") {
        if let Some(g) = res.get("gpu") {
            pool.gpu = cx.u32(g, "pools.resources.gpu", 0)?;
        }
        if let Some(c) = res.get("cpu") {
            pool.millicpu = cx
                .number(c, "pools.resources.cpu")
                .map(|c| (c * 1000.0) as u64);
        }
        if let Some(m) = res.get("memory") {
            let text = cx.text(m, "pools.resources.memory")?;
            pool.memory = super::units::parse_quantity(&text).ok().map(|b| b as u64);
        }
        for e in res.as_map().unwrap_or_default() {
            if crate::scheduler::extended::is_name(&e.key)
                && let Some(n) = cx.uint(&e.value, &format!("pools.resources.{}", e.key), 0)
            {
                pool.extended.insert(e.key.clone(), n);
            }
        }
    }
    if let Some(labels) = node.get("labels").and_then(Node::as_map) {
        for l in labels {
            if let Some(v) = l.value.as_scalar() {
                pool.labels.insert(l.key.clone(), v.text.clone());
            }
        }
    }
    Some(pool)
}

/// How many workers of `step` fit in `pool` at once (0: none).
fn workers_that_fit(step: &Step, pool: &Pool) -> u64 {
    let r = &step.resources;
    let mut per_node = u64::MAX;
    if let Some(n) = pool.gpu.checked_div(r.gpu) {
        per_node = per_node.min(u64::from(n));
    }
    if let (Some(have), true) = (pool.millicpu, r.millicpu > 0) {
        per_node = per_node.min(have / r.millicpu);
    }
    if let (Some(have), Some(want)) = (pool.memory, r.memory.filter(|m| *m > 0)) {
        per_node = per_node.min(have / want);
    }
    for (name, want) in r.extended.iter().filter(|(_, w)| **w > 0) {
        per_node = per_node.min(pool.extended.get(name).copied().unwrap_or(0) / want);
    }
    per_node.saturating_mul(u64::from(pool.nodes))
}

/// Reports the steps of `p` that no pool can ever hold, and on Kubernetes the paths it names
/// that the engine would resolve on its own machine.
pub fn check(p: &Pipeline, cap: &Capacity, source: &Source, diags: &mut Diagnostics) {
    if cap.on_kubernetes {
        super::paths::check(p, diags);
    }
    let cx = Cx {
        src: source,
        d: diags,
    };
    for step in &p.steps {
        if let Some(prio) = &step.priority
            && !cap.priorities.contains(prio)
        {
            cx.d.error(
                step.pos,
                format!(
                    "step '{}': the cluster has no priority class '{prio}'",
                    step.name
                ),
            )
            .suggest(prio, cap.priorities.iter().map(String::as_str));
        }
        let flavored: Vec<&Pool> = cap
            .pools
            .iter()
            .filter(|pool| {
                step.resources
                    .flavor
                    .as_ref()
                    .is_none_or(|f| pool.name == *f || pool.labels.values().any(|v| v == f))
            })
            .collect();
        if let Some(flavor) = &step.resources.flavor
            && flavored.is_empty()
        {
            let mut flavors: Vec<&str> = cap
                .pools
                .iter()
                .flat_map(|p| {
                    std::iter::once(p.name.as_str()).chain(p.labels.values().map(String::as_str))
                })
                .collect();
            flavors.sort_unstable();
            flavors.dedup();
            cx.d.error(
                step.pos,
                format!("step '{}': no pool offers flavor '{flavor}'", step.name),
            )
            .suggest(flavor, flavors.iter().copied());
            continue;
        }
        if flavored.iter().any(|pool| pool.from_cluster) {
            // Known once the cluster's nodes are read: the step waits, with its reason.
            continue;
        }
        let r = &step.resources;
        if let Some(name) = r
            .extended
            .iter()
            .find(|(name, w)| **w > 0 && flavored.iter().all(|p| !p.extended.contains_key(*name)))
            .map(|(name, _)| name)
        {
            let known: Vec<&str> = cap
                .pools
                .iter()
                .flat_map(|p| p.extended.keys().map(String::as_str))
                .collect();
            let d = cx.d.error(
                step.pos,
                format!("step '{}': no pool has {name}", step.name),
            );
            d.suggest(name, known.iter().copied());
            if d.help.is_empty() {
                d.help(if known.is_empty() {
                    "no pool of the cluster names an extended resource: add it to a pool's resources".to_owned()
                } else {
                    format!("the cluster's pools have: {}", known.join(", "))
                });
            }
            continue;
        }
        let best = flavored
            .iter()
            .map(|pool| (workers_that_fit(step, pool), pool))
            .max_by_key(|(n, _)| *n);
        match best {
            Some((n, _)) if n >= u64::from(r.workers) => {}
            Some((n, pool)) => {
                let (workers, verb) = match r.workers {
                    1 => ("1 worker".to_owned(), "does"),
                    w => (format!("{w} workers"), "do"),
                };
                cx.d.error(
                    step.pos,
                    format!(
                        "step '{}': {workers} of {} {verb} not fit in any pool",
                        step.name,
                        amounts(r.gpu, Some(r.millicpu), r.memory, &r.extended)
                    ),
                )
                .help(format!(
                    "the closest is pool '{}', {} node{} of {}, which holds {n} such worker{}",
                    pool.name,
                    pool.nodes,
                    if pool.nodes == 1 { "" } else { "s" },
                    amounts(pool.gpu, pool.millicpu, pool.memory, &pool.extended),
                    if n == 1 { "" } else { "s" },
                ));
            }
            None => {
                cx.d.error(
                    step.pos,
                    format!("step '{}': the cluster has no pools", step.name),
                );
            }
        }
    }
}

/// `4 GPU, 1 CPU, 512Gi memory`: what a worker asks or a node has.
fn amounts(
    gpu: u32,
    millicpu: Option<u64>,
    memory: Option<u64>,
    extended: &BTreeMap<String, u64>,
) -> String {
    let mut parts = Vec::new();
    if gpu > 0 {
        parts.push(format!("{gpu} GPU"));
    }
    if let Some(m) = millicpu {
        if m % 1000 == 0 {
            parts.push(format!("{} CPU", m / 1000));
        } else {
            parts.push(format!("{m}m CPU"));
        }
    }
    if let Some(bytes) = memory.filter(|b| *b > 0) {
        let gib = bytes as f64 / f64::from(1u32 << 30);
        if gib >= 1.0 {
            parts.push(format!("{}Gi memory", (gib * 10.0).round() / 10.0));
        } else {
            parts.push(format!("{}Mi memory", bytes >> 20));
        }
    }
    for (name, n) in extended.iter().filter(|(_, n)| **n > 0) {
        parts.push(format!("{n} {name}"));
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}
