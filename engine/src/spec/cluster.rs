//! The scheduling part of a `kind: Cluster` document: pools (nodes, resources, labels,
//! interruptible, price), teams (weight, quota, borrow limit, rate and queue limits), priority
//! classes, preemption, scheduling and runtime settings. Each problem is reported where it is
//! written; fields of other parts (executor, kubernetes, state, objects) are accepted here.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Loaded;
use super::decode::Cx;
use super::diagnostic::{Diagnostic, Diagnostics};
use super::model::{
    ClusterPool, ClusterSpec, ClusterTeam, ExecutorKind, PriorityClass, Quantities, RuntimeSpec,
    SchedulingSpec, Taint,
};
use super::yaml::Node;

const SPEC_FIELDS: &[&str] = &[
    "executor",
    "kubernetes",
    "state",
    "objects",
    "pools",
    "teams",
    "priorities",
    "preemption",
    "runtime",
    "scheduling",
];

/// A Cluster file's text (`shown` for messages), loaded, and its scheduling part; or every
/// error in it, sorted.
pub fn load(shown: &str, text: String) -> Result<(Loaded, ClusterSpec), Vec<Diagnostic>> {
    let loaded = super::load(shown, text);
    let mut diags = Diagnostics::new(shown.to_owned());
    let cluster = read(&loaded, &mut diags);
    let mut all = loaded.diagnostics.clone().into_sorted();
    all.extend(diags.into_sorted());
    all.retain(|d| d.severity == super::Severity::Error);
    match cluster {
        Some(c) if all.is_empty() => Ok((loaded, c)),
        _ => Err(all),
    }
}

/// Reads the first Cluster document of a loaded file; None when it has none or it is wrong
/// (every problem reported).
pub fn read(loaded: &Loaded, diags: &mut Diagnostics) -> Option<ClusterSpec> {
    let Some(doc) = super::capacity::cluster_document(loaded) else {
        diags
            .error(
                super::Pos::START,
                "no 'kind: Cluster' document in this file",
            )
            .help("--cluster takes a file holding kind: Cluster");
        return None;
    };
    let Some(spec) = doc.spec.as_ref() else {
        diags
            .error(doc.pos, "the Cluster has no spec")
            .help("add spec: with pools, teams and priorities");
        return None;
    };
    // `spec::load` has reported this document's problems already: decode it quietly.
    let mut quiet = Diagnostics::new(diags.path().to_owned());
    let mut cx = Cx {
        src: &loaded.source,
        d: &mut quiet,
    };
    let out = decode(&mut cx, &doc.metadata.name, spec);
    if quiet.has_errors() && !loaded.diagnostics.has_errors() {
        // Not expected (load decodes the same way); never drop a problem silently.
        for d in quiet.into_sorted() {
            diags.push(d);
        }
        return None;
    }
    if quiet.has_errors() || loaded.diagnostics.has_errors() {
        return None;
    }
    out
}

pub(super) fn decode(cx: &mut Cx<'_>, name: &str, spec: &Node) -> Option<ClusterSpec> {
    cx.fields(spec, "spec", SPEC_FIELDS)?;
    // First: whether pools may leave their nodes to the cluster.
    let (executor, kubernetes) = super::kubernetes::decode(cx, spec);
    let on_kubernetes = executor == ExecutorKind::Kubernetes;
    let pools = match spec.get("pools") {
        Some(p) => match p.as_seq() {
            Some(items) if !items.is_empty() => items
                .iter()
                .filter_map(|i| pool(cx, i, on_kubernetes))
                .collect(),
            _ => {
                cx.expected(p, "pools", "a list of pools ({name, nodes, resources})");
                Vec::new()
            }
        },
        None => {
            cx.d.error(spec.pos, "the Cluster has no pools").help(
                "add pools: [{name: a100, nodes: 4, resources: {gpu: 8, cpu: 96, memory: 1000Gi}}]",
            );
            Vec::new()
        }
    };
    let teams: Vec<ClusterTeam> = spec
        .get("teams")
        .and_then(|t| {
            t.as_seq().or_else(|| {
                cx.expected(t, "teams", "a list of teams ({name, weight, quota})");
                None
            })
        })
        .map(|items| items.iter().filter_map(|i| team(cx, i, &pools)).collect())
        .unwrap_or_default();
    extended_names(cx, spec, &pools, &teams);
    let mut priorities = vec![
        PriorityClass {
            name: "production".into(),
            value: 1000,
            default: false,
        },
        PriorityClass {
            name: "default".into(),
            value: 100,
            default: true,
        },
        PriorityClass {
            name: "best-effort".into(),
            value: 0,
            default: false,
        },
    ];
    if let Some(p) = spec.get("priorities") {
        match p.as_seq() {
            Some(items) => {
                priorities = items.iter().filter_map(|i| priority(cx, i)).collect();
                if priorities.iter().filter(|p| p.default).count() > 1 {
                    cx.d.error(p.pos, "more than one priority class is the default");
                }
            }
            None => cx.expected(p, "priorities", "a list of {name, value}"),
        }
    }
    let mut scheduling = SchedulingSpec::default();
    if let Some(s) = spec.get("scheduling") {
        cx.fields(
            s,
            "scheduling",
            &["policy", "backfill", "placement", "starvationLimit"],
        );
        if let Some(p) = s.get("policy") {
            scheduling.policy = one_of(cx, p, "scheduling.policy", &["fifo", "priority", "fair"])
                .unwrap_or(scheduling.policy);
        }
        if let Some(b) = s.get("backfill") {
            scheduling.backfill = cx.bool(b, "scheduling.backfill").unwrap_or(true);
        }
        if let Some(p) = s.get("placement") {
            scheduling.placement = one_of(cx, p, "scheduling.placement", &["binpack", "spread"])
                .unwrap_or(scheduling.placement);
        }
        if let Some(d) = s.get("starvationLimit") {
            scheduling.starvation_limit = cx.duration(d, "scheduling.starvationLimit");
        }
    }
    if let Some(p) = spec.get("preemption") {
        cx.fields(
            p,
            "preemption",
            &[
                "withinTeam",
                "reclaimBorrowed",
                "gracePeriod",
                "acrossTeams",
            ],
        );
        if let Some(a) = p.get("acrossTeams") {
            scheduling.across_below = across_teams(cx, a, &priorities);
        }
        if let Some(w) = p.get("withinTeam") {
            scheduling.within_team =
                one_of(cx, w, "preemption.withinTeam", &["never", "lowerPriority"])
                    .is_none_or(|v| v == "lowerPriority");
        }
        if let Some(r) = p.get("reclaimBorrowed") {
            scheduling.reclaim = cx.bool(r, "preemption.reclaimBorrowed").unwrap_or(true);
        }
        if let Some(g) = p.get("gracePeriod") {
            scheduling.grace_period = cx
                .duration(g, "preemption.gracePeriod")
                .unwrap_or(scheduling.grace_period);
        }
    }
    let runtime = spec
        .get("runtime")
        .map(|r| runtime(cx, r))
        .unwrap_or_default();
    Some(ClusterSpec {
        name: name.to_owned(),
        pools,
        teams,
        priorities,
        scheduling,
        runtime,
        executor,
        kubernetes,
    })
}

/// `runtime: {heartbeatTimeout, keepCheckpoints, passEnv}`; what is wrong is reported and its
/// default kept.
fn runtime(cx: &mut Cx<'_>, node: &Node) -> RuntimeSpec {
    let mut out = RuntimeSpec::default();
    if cx
        .fields(
            node,
            "runtime",
            &["heartbeatTimeout", "keepCheckpoints", "passEnv"],
        )
        .is_none()
    {
        return out;
    }
    if let Some(list) = node.get("passEnv") {
        out.pass_env = pass_env(cx, list);
    }
    if let Some(h) = node.get("heartbeatTimeout")
        && let Some(d) = cx.duration(h, "runtime.heartbeatTimeout")
    {
        if d.is_zero() {
            cx.d.error(h.pos, "runtime.heartbeatTimeout: must be longer than 0s")
                .help("a runtime touches its heartbeat every quarter of this: 60s is the default");
        } else {
            out.heartbeat_timeout = d;
        }
    }
    if let Some(k) = node.get("keepCheckpoints")
        && let Some(n) = cx.u32(k, "runtime.keepCheckpoints", 1)
    {
        out.keep_checkpoints = n;
    }
    out
}

/// `runtime.passEnv`: variable names (`HF_HOME`) or prefixes ending in `*` (`WANDB_*`).
fn pass_env(cx: &mut Cx<'_>, list: &Node) -> Vec<String> {
    let Some(items) = cx.string_list(list, "runtime.passEnv", "a list of variable names") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, pos) in items {
        let stem = name.strip_suffix('*').unwrap_or(&name);
        let valid = stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !stem.starts_with(|c: char| c.is_ascii_digit())
            && !stem.contains('*');
        if !valid {
            cx.d.error(
                pos,
                format!("runtime.passEnv: '{name}' is not a variable name"),
            )
            .help("a name is letters, digits and '_', not starting with a digit; end it with '*' to pass every variable it begins");
            continue;
        }
        out.push(name);
    }
    out
}

pub(super) fn one_of(
    cx: &mut Cx<'_>,
    node: &Node,
    field: &str,
    allowed: &[&str],
) -> Option<String> {
    let v = cx.string(node, field)?;
    if allowed.contains(&v.as_str()) {
        return Some(v);
    }
    cx.d.error(
        node.pos,
        format!("{field}: '{v}' is not one of {}", allowed.join(", ")),
    )
    .suggest(&v, allowed.iter().copied());
    None
}

/// `{gpu: 8, cpu: 96, memory: 1000Gi}`.
fn quantities(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<Quantities> {
    let entries = cx.resource_fields(node, field, &["gpu", "cpu", "memory"])?;
    let mut q = Quantities::default();
    for e in entries
        .iter()
        .filter(|e| crate::scheduler::extended::is_name(&e.key))
    {
        let n = cx.uint(&e.value, &format!("{field}.{}", e.key), 0)?;
        q.extended.insert(e.key.clone(), n);
    }
    if let Some(g) = node.get("gpu") {
        q.gpu = Some(u64::from(cx.u32(g, &format!("{field}.gpu"), 0)?));
    }
    for (key, slot) in [("cpu", &mut q.millicpu), ("memory", &mut q.memory)] {
        if let Some(v) = node.get(key) {
            let text = cx.text(v, &format!("{field}.{key}"))?;
            match super::units::parse_quantity(&text) {
                Ok(x) if x >= 0.0 => {
                    *slot = Some(if key == "cpu" {
                        (x * 1000.0).round() as u64
                    } else {
                        x as u64
                    });
                }
                _ => {
                    cx.d.error(v.pos, format!("{field}.{key}: '{text}' is not a quantity"))
                        .help(if key == "cpu" {
                            "cores, as a number or in thousandths: 96, 500m"
                        } else {
                            "bytes with a unit: 512Mi, 1000Gi"
                        });
                    return None;
                }
            }
        }
    }
    Some(q)
}

/// One pool. On Kubernetes (`on_kubernetes`) a pool may omit `nodes` (and `resources`): its
/// nodes are then the cluster's nodes carrying its labels.
fn pool(cx: &mut Cx<'_>, node: &Node, on_kubernetes: bool) -> Option<ClusterPool> {
    cx.fields(
        node,
        "pools",
        &[
            "name",
            "nodes",
            "resources",
            "labels",
            "interruptible",
            "price",
            "taints",
        ],
    )?;
    let Some(name) = node.get("name").and_then(|n| cx.string(n, "pools.name")) else {
        cx.d.error(node.pos, "a pool needs a name");
        return None;
    };
    let from_cluster = on_kubernetes && node.get("nodes").is_none();
    let nodes = match node.get("nodes") {
        Some(n) => cx.u32(n, "pools.nodes", 1)?,
        None if from_cluster => 0,
        None => 1,
    };
    let resources = match node.get("resources") {
        Some(r) => quantities(cx, r, "pools.resources")?,
        None if from_cluster => Quantities::default(),
        None => {
            cx.d.error(node.pos, format!("pool '{name}' needs resources"))
                .help(if on_kubernetes {
                    "add resources: {gpu: 8, cpu: 96, memory: 1000Gi}, or omit nodes: to read the nodes and their resources from the cluster"
                } else {
                    "add resources: {gpu: 8, cpu: 96, memory: 1000Gi}"
                });
            return None;
        }
    };
    let mut labels = BTreeMap::new();
    if let Some(l) = node.get("labels") {
        match l.as_map() {
            Some(entries) => {
                for e in entries {
                    if let Some(v) = e.value.as_scalar() {
                        labels.insert(e.key.clone(), v.text.clone());
                    }
                }
            }
            None => cx.expected(l, "pools.labels", "a mapping (gpu: a100, zone: zone-a)"),
        }
    }
    let interruptible = node
        .get("interruptible")
        .and_then(|i| cx.bool(i, "pools.interruptible"))
        .unwrap_or(false);
    let mut gpu_hour = 0.0;
    let mut cpu_hour = 0.0;
    let mut extended_hour = BTreeMap::new();
    if let Some(p) = node.get("price") {
        for e in cx
            .resource_fields(p, "pools.price", &["gpuHour", "cpuHour"])
            .unwrap_or_default()
            .iter()
            .filter(|e| crate::scheduler::extended::is_name(&e.key))
        {
            let price = cx.number(&e.value, &format!("pools.price.{}", e.key));
            extended_hour.insert(e.key.clone(), price.unwrap_or(0.0));
        }
        if let Some(g) = p.get("gpuHour") {
            gpu_hour = cx.number(g, "pools.price.gpuHour").unwrap_or(0.0);
        }
        if let Some(c) = p.get("cpuHour") {
            cpu_hour = cx.number(c, "pools.price.cpuHour").unwrap_or(0.0);
        }
    }
    let taints = node
        .get("taints")
        .map(|t| taints(cx, t))
        .unwrap_or_default();
    Some(ClusterPool {
        name,
        nodes,
        from_cluster,
        resources,
        labels,
        interruptible,
        gpu_hour,
        cpu_hour,
        extended_hour,
        taints,
    })
}

/// `taints: [{key, value, effect}]`: each one's mistakes reported where they are.
fn taints(cx: &mut Cx<'_>, node: &Node) -> Vec<Taint> {
    let Some(items) = node.as_seq() else {
        cx.expected(
            node,
            "pools.taints",
            "a list of taints ({key: nvidia.com/gpu, effect: NoSchedule})",
        );
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        if cx
            .fields(item, "pools.taints", &["key", "value", "effect"])
            .is_none()
        {
            continue;
        }
        let Some(key) = item
            .get("key")
            .and_then(|k| cx.string(k, "pools.taints.key"))
        else {
            if item.get("key").is_none() {
                cx.d.error(item.pos, "a taint needs a key")
                    .help("write {key: nvidia.com/gpu, effect: NoSchedule}");
            }
            continue;
        };
        let value = item
            .get("value")
            .and_then(|v| cx.string(v, "pools.taints.value"));
        let effect = item.get("effect").and_then(|e| {
            one_of(
                cx,
                e,
                "pools.taints.effect",
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            )
        });
        out.push(Taint { key, value, effect });
    }
    out
}

/// A field the contract has that this version does not honour yet: an error saying so (not
/// "unknown field", and never accepted and ignored).
/// `acrossTeams: {below: CLASS}`: the class, which must be one of the Cluster's.
fn across_teams(cx: &mut Cx<'_>, node: &Node, priorities: &[PriorityClass]) -> Option<String> {
    cx.fields(node, "preemption.acrossTeams", &["below"])?;
    let Some(below) = node.get("below") else {
        cx.d.error(node.pos, "preemption.acrossTeams needs below: a priority class")
            .help("write acrossTeams: {below: default}: steps of a class above it preempt other teams' steps below it");
        return None;
    };
    let class = cx.string(below, "preemption.acrossTeams.below")?;
    if !priorities.iter().any(|p| p.name == class) {
        cx.d.error(
            below.pos,
            format!("preemption.acrossTeams.below: the Cluster has no priority class '{class}'"),
        )
        .suggest(&class, priorities.iter().map(|p| p.name.as_str()));
        return None;
    }
    Some(class)
}

/// `quotaPools: [POOL, ...]`: each a pool of the Cluster, at least one.
fn quota_pools(cx: &mut Cx<'_>, node: &Node, pools: &[ClusterPool]) -> Option<Vec<String>> {
    let Some(items) = node.as_seq().filter(|i| !i.is_empty()) else {
        cx.expected(
            node,
            "teams.quotaPools",
            "a list of pool names ([a100-ondemand])",
        );
        return None;
    };
    let mut out = Vec::new();
    for item in items {
        let name = cx.string(item, "teams.quotaPools")?;
        if !pools.iter().any(|p| p.name == name) {
            cx.d.error(
                item.pos,
                format!("teams.quotaPools: the Cluster has no pool '{name}'"),
            )
            .suggest(&name, pools.iter().map(|p| p.name.as_str()));
            return None;
        }
        out.push(name);
    }
    Some(out)
}

fn team(cx: &mut Cx<'_>, node: &Node, pools: &[ClusterPool]) -> Option<ClusterTeam> {
    cx.fields(
        node,
        "teams",
        &[
            "name",
            "weight",
            "quota",
            "borrowLimit",
            "maxTrialsPerMinute",
            "maxQueued",
            "quotaPools",
        ],
    )?;
    let Some(name) = node.get("name").and_then(|n| cx.string(n, "teams.name")) else {
        cx.d.error(node.pos, "a team needs a name");
        return None;
    };
    let weight = match node.get("weight") {
        Some(w) => match cx.number(w, "teams.weight") {
            Some(v) if v > 0.0 => v,
            Some(_) => {
                cx.d.error(w.pos, "teams.weight must be above 0");
                return None;
            }
            None => return None,
        },
        None => 1.0,
    };
    let quota = match node.get("quota") {
        Some(q) => Some(quantities(cx, q, "teams.quota")?),
        None => None,
    };
    let borrow_limit = match node.get("borrowLimit") {
        Some(b) => Some(quantities(cx, b, "teams.borrowLimit")?),
        None => None,
    };
    let max_trials_per_minute = node
        .get("maxTrialsPerMinute")
        .and_then(|m| cx.uint(m, "teams.maxTrialsPerMinute", 1));
    let max_queued = node
        .get("maxQueued")
        .and_then(|m| cx.uint(m, "teams.maxQueued", 1));
    let quota_pools = match node.get("quotaPools") {
        Some(q) => Some(quota_pools(cx, q, pools)?),
        None => None,
    };
    Some(ClusterTeam {
        name,
        weight,
        quota,
        borrow_limit,
        max_trials_per_minute,
        max_queued,
        quota_pools,
    })
}

fn priority(cx: &mut Cx<'_>, node: &Node) -> Option<PriorityClass> {
    cx.fields(node, "priorities", &["name", "value", "default"])?;
    let name = cx.string(node.get("name")?, "priorities.name")?;
    let value = match node.get("value") {
        Some(v) => cx.number(v, "priorities.value")? as i64,
        None => {
            cx.d.error(node.pos, format!("priority class '{name}' needs a value"));
            return None;
        }
    };
    let default = node
        .get("default")
        .and_then(|d| cx.bool(d, "priorities.default"))
        .unwrap_or(false);
    Some(PriorityClass {
        name,
        value,
        default,
    })
}

impl Default for SchedulingSpec {
    fn default() -> Self {
        SchedulingSpec {
            policy: "fair".into(),
            backfill: true,
            placement: "binpack".into(),
            starvation_limit: None,
            within_team: true,
            reclaim: true,
            across_below: None,
            grace_period: Duration::from_secs(30),
        }
    }
}

/// Refuses a Cluster naming more extended resources than the scheduler counts
/// ([`SLOTS`](crate::scheduler::extended::SLOTS)), and a quota or limit naming one that no
/// pool declares (it could never be used; pools read from the cluster may have any).
fn extended_names(cx: &mut Cx<'_>, spec: &Node, pools: &[ClusterPool], teams: &[ClusterTeam]) {
    use crate::scheduler::extended::SLOTS;
    fn add<'a>(names: &mut Vec<&'a str>, q: &'a Quantities) {
        for n in q.extended.keys() {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
    }
    let mut names: Vec<&str> = Vec::new();
    for p in pools {
        add(&mut names, &p.resources);
    }
    let in_pools = names.len();
    let mut unknown: Vec<(&str, &str)> = Vec::new();
    for t in teams {
        for q in [&t.quota, &t.borrow_limit].into_iter().flatten() {
            for n in q.extended.keys() {
                if !names[..in_pools].contains(&n.as_str()) {
                    unknown.push((&t.name, n));
                }
            }
            add(&mut names, q);
        }
    }
    if names.len() > SLOTS {
        cx.d.error(
            spec.pos,
            format!(
                "the Cluster names {} extended resources ({}); sluice schedules at most {SLOTS}",
                names.len(),
                names.join(", ")
            ),
        )
        .help("keep the ones steps ask for; Kubernetes still runs pods needing others");
    }
    if !pools.iter().any(|p| p.from_cluster) {
        for (team, extra) in unknown {
            cx.d.error(
                spec.pos,
                format!("team '{team}': its quota or borrowLimit names {extra}, which no pool has"),
            )
            .suggest(extra, names[..in_pools].iter().copied())
            .help("add it to the resources of the pools that have it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n    - {name: p, nodes: 1, resources: {cpu: 4}}\n";

    fn loaded(extra: &str) -> Result<ClusterSpec, Vec<String>> {
        load("c.yaml", format!("{HEAD}{extra}"))
            .map(|(_, c)| c)
            .map_err(|d| d.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn runtime_settings_are_read_with_their_defaults() {
        let c = loaded("").expect("a valid Cluster");
        assert_eq!(c.runtime, RuntimeSpec::default());
        assert_eq!(c.runtime.heartbeat_timeout, Duration::from_secs(60));
        assert_eq!(c.runtime.keep_checkpoints, 3);
        let c = loaded("  runtime: {heartbeatTimeout: 5s, keepCheckpoints: 1}\n")
            .expect("a valid Cluster");
        assert_eq!(c.runtime.heartbeat_timeout, Duration::from_secs(5));
        assert_eq!(c.runtime.keep_checkpoints, 1);
    }

    #[test]
    fn wrong_runtime_settings_are_errors_at_their_line() {
        let errors = loaded("  runtime:\n    keepCheckpoints: 0\n    heartbeatTimeout: 0s\n")
            .expect_err("invalid settings");
        assert!(
            errors
                .iter()
                .any(|e| e.contains(":8:") && e.contains("keepCheckpoints")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.contains(":9:") && e.contains("heartbeatTimeout")),
            "{errors:?}"
        );
        let errors = loaded("  runtime: {keepCheckpoint: 2}\n").expect_err("a typo");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("unknown field 'keepCheckpoint'")),
            "{errors:?}"
        );
    }
}
