//! A `kind: Workload` document for `sluice simulate`: `spec.jobs`, a list of jobs with the
//! CSV's fields in camelCase, or `spec.generate`, a seeded synthetic workload. Every problem
//! is reported where it is written; team and priority names are checked against the Cluster
//! by the scheduler's reader (`scheduler::workload::from_spec`), which keeps their positions.
//!
//! ```yaml
//! apiVersion: sluice.dev/v1
//! kind: Workload
//! metadata: {name: lab-week}
//! spec:
//!   generate:
//!     seed: 7                  # same seed, same jobs
//!     jobs: 500
//!     meanInterarrival: 30s    # or arrivalRate: 120 (jobs per hour); Poisson arrivals
//!     teams: [{name: vision, weight: 3}, {name: nlp, weight: 1}]   # or [vision, nlp]
//!     workers: {choice: [{value: 1, weight: 8}, {value: 4, weight: 2}]}
//!     gpu: 2                   # per worker: a number or a distribution
//!     cpuPerGpu: 8             # per worker, per GPU (default 4)
//!     memoryPerGpu: 64Gi       # (default 0: not reserved)
//!     duration: {lognormal: {median: 30m, sigma: 1}}
//!     priorities: [{name: production, weight: 1}, {name: default, weight: 4}]
//!     interruptible: 0.25      # share of jobs
//!     checkpointEvery: 15m
//! ```
//!
//! A distribution is a number (constant), `{choice: [{value, weight}]}`,
//! `{uniform: {min, max}}`, `{exponential: {mean}}` or `{lognormal: {median, sigma}}`; for
//! durations the values are durations (`90s`, `2h`) or whole seconds.

use super::Loaded;
use super::decode::Cx;
use super::diagnostic::{Diagnostics, Pos};
use super::model::Document;
use super::units;
use super::yaml::{Node, Typed};

/// A distribution of whole numbers (seconds, workers, GPUs).
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    Constant(u64),
    /// Values with relative weights.
    Choice(Vec<(u64, f64)>),
    Exponential {
        mean: f64,
    },
    /// `exp(ln(median) + sigma * N(0, 1))`.
    LogNormal {
        median: f64,
        sigma: f64,
    },
    Uniform {
        min: u64,
        max: u64,
    },
}

/// A name as written, with where.
#[derive(Clone, Debug, PartialEq)]
pub struct Named {
    pub name: String,
    pub pos: Pos,
}

/// One job of `spec.jobs`.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    pub submit: u64,
    pub team: Named,
    pub workers: u32,
    pub gpu: u64,
    /// Thousandths of a core; None: one core.
    pub millicpu: Option<u64>,
    pub memory: u64,
    pub duration: u64,
    pub priority: Option<Named>,
    pub interruptible: bool,
    pub checkpoint_every: Option<u64>,
    pub flavor: Option<String>,
    /// Seconds it runs at most, as a user or history tells (EASY backfill); None: unknown.
    pub estimate: Option<u64>,
    /// Extended resources per worker (`nvidia.com/mig-1g.10gb: 2`), by name.
    pub extended: std::collections::BTreeMap<String, u64>,
}

/// `spec.generate`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateSpec {
    pub seed: u64,
    pub jobs: u64,
    /// Mean seconds between submissions.
    pub mean_interarrival: f64,
    pub teams: Vec<(Named, f64)>,
    pub workers: Dist,
    pub gpu: Dist,
    pub millicpu_per_gpu: u64,
    pub memory_per_gpu: u64,
    pub duration: Dist,
    pub priorities: Vec<(Named, f64)>,
    pub interruptible: f64,
    pub checkpoint_every: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    Jobs(Vec<JobSpec>),
    Generate(GenerateSpec),
}

const JOB_FIELDS: &[&str] = &[
    "submit",
    "team",
    "workers",
    "gpu",
    "cpu",
    "memory",
    "duration",
    "priority",
    "interruptible",
    "checkpointEvery",
    "flavor",
    "estimate",
];

const GENERATE_FIELDS: &[&str] = &[
    "seed",
    "jobs",
    "meanInterarrival",
    "arrivalRate",
    "teams",
    "workers",
    "gpu",
    "cpuPerGpu",
    "memoryPerGpu",
    "duration",
    "priorities",
    "interruptible",
    "checkpointEvery",
];

/// Reads the first Workload document of a loaded file; None when it has none (reported) or
/// the file has errors (already in `loaded.diagnostics`).
pub fn read(loaded: &Loaded, diags: &mut Diagnostics) -> Option<WorkloadSpec> {
    let doc = loaded.documents.iter().find_map(|d| match d {
        Document::Pending(p) if p.kind == "Workload" => Some(p),
        _ => None,
    });
    let Some(doc) = doc else {
        diags
            .error(Pos::START, "no 'kind: Workload' document in this file")
            .help("--workload takes a CSV, or a YAML file holding kind: Workload");
        return None;
    };
    // `load` has checked the document (`check`) and holds its problems: report them once.
    if loaded.diagnostics.has_errors() {
        return None;
    }
    let spec = doc.spec.as_ref()?;
    let mut scratch = Diagnostics::new(diags.path().to_owned());
    let mut cx = Cx {
        src: &loaded.source,
        d: &mut scratch,
    };
    let out = decode(&mut cx, spec);
    (!scratch.has_errors()).then_some(out).flatten()
}

/// Reports every problem of a Workload's spec (called by `load`, for `sluice lint`).
pub(super) fn check(cx: &mut Cx<'_>, spec: &Node) {
    let _ = decode(cx, spec);
}

fn decode(cx: &mut Cx<'_>, spec: &Node) -> Option<WorkloadSpec> {
    cx.fields(spec, "spec", &["jobs", "generate"])?;
    match (spec.get("jobs"), spec.get("generate")) {
        (Some(_), Some(g)) => {
            cx.d.error(g.pos, "a Workload has either jobs or generate, not both")
                .help("split them into two Workload files");
            None
        }
        (Some(jobs), None) => {
            let Some(items) = jobs.as_seq() else {
                cx.expected(
                    jobs,
                    "jobs",
                    "a list of jobs ({submit, team, gpu, duration})",
                );
                return None;
            };
            if items.is_empty() {
                cx.d.error(jobs.pos, "jobs: the list is empty")
                    .help("add jobs: [{submit: 0, team: vision, gpu: 1, duration: 1h}]");
                return None;
            }
            let jobs: Vec<Option<JobSpec>> = items
                .iter()
                .enumerate()
                .map(|(i, j)| job(cx, j, i))
                .collect();
            jobs.into_iter()
                .collect::<Option<Vec<_>>>()
                .map(WorkloadSpec::Jobs)
        }
        (None, Some(g)) => generate(cx, g).map(WorkloadSpec::Generate),
        (None, None) => {
            cx.d.error(spec.pos, "the Workload has neither jobs nor generate")
                .help("add jobs: [{submit: 0, team: vision, gpu: 1, duration: 1h}], or generate: {seed: 1, jobs: 100, ...}");
            None
        }
    }
}

fn job(cx: &mut Cx<'_>, node: &Node, i: usize) -> Option<JobSpec> {
    let at = |key: &str| format!("jobs[{i}].{key}");
    let entries = cx.resource_fields(node, &format!("jobs[{i}]"), JOB_FIELDS)?;
    let mut extended = std::collections::BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| crate::scheduler::extended::is_name(&e.key))
    {
        extended.insert(e.key.clone(), cx.uint(&e.value, &at(&e.key), 0)?);
    }
    let mut ok = true;
    let need = |cx: &mut Cx<'_>, key: &str, help: &str| {
        let n = node.get(key);
        if n.is_none() {
            cx.d.error(node.pos, format!("jobs[{i}] has no '{key}'"))
                .help(help.to_owned());
        }
        n
    };
    let submit = need(
        cx,
        "submit",
        "add submit: 0 (seconds from the start, or 1h30m)",
    );
    let team = need(cx, "team", "add team: NAME");
    let duration = need(cx, "duration", "add duration: 2h (or whole seconds)");
    let submit = submit.and_then(|n| seconds(cx, n, &at("submit")));
    let team = team.and_then(|n| named(cx, n, &at("team")));
    let duration = duration.and_then(|n| seconds(cx, n, &at("duration")));
    ok &= submit.is_some() && team.is_some() && duration.is_some();
    // None: not written; Some(None): written wrong (reported).
    let mut opt = |r: Option<Option<u64>>| match r {
        Some(None) => {
            ok = false;
            None
        }
        Some(v) => v,
        None => None,
    };
    let workers = opt(node
        .get("workers")
        .map(|n| cx.u32(n, &at("workers"), 1).map(u64::from)));
    let gpu = opt(node
        .get("gpu")
        .map(|n| cx.u32(n, &at("gpu"), 0).map(u64::from)));
    let millicpu = opt(node.get("cpu").map(|n| quantity(cx, n, &at("cpu"), 1000.0)));
    let memory = opt(node
        .get("memory")
        .map(|n| quantity(cx, n, &at("memory"), 1.0)));
    let checkpoint = opt(node
        .get("checkpointEvery")
        .map(|n| seconds(cx, n, &at("checkpointEvery"))));
    let estimate = opt(node
        .get("estimate")
        .map(|n| seconds(cx, n, &at("estimate"))));
    let priority = match node.get("priority").map(|n| named(cx, n, &at("priority"))) {
        Some(None) => {
            ok = false;
            None
        }
        Some(p) => p,
        None => None,
    };
    let interruptible = match node
        .get("interruptible")
        .map(|n| cx.bool(n, &at("interruptible")))
    {
        Some(None) => {
            ok = false;
            false
        }
        Some(Some(b)) => b,
        None => false,
    };
    let flavor = match node.get("flavor").map(|n| cx.string(n, &at("flavor"))) {
        Some(None) => {
            ok = false;
            None
        }
        Some(f) => f,
        None => None,
    };
    if !ok {
        return None;
    }
    Some(JobSpec {
        submit: submit?,
        team: team?,
        workers: workers.unwrap_or(1) as u32,
        gpu: gpu.unwrap_or(0),
        millicpu,
        memory: memory.unwrap_or(0),
        duration: duration?,
        priority,
        interruptible,
        checkpoint_every: checkpoint.filter(|c| *c > 0),
        flavor,
        estimate,
        extended,
    })
}

fn generate(cx: &mut Cx<'_>, node: &Node) -> Option<GenerateSpec> {
    cx.fields(node, "generate", GENERATE_FIELDS)?;
    let before = cx.d.error_count();
    let required = |cx: &mut Cx<'_>, key: &str, help: &str| {
        let n = node.get(key);
        if n.is_none() {
            cx.d.error(node.pos, format!("generate has no '{key}'"))
                .help(help.to_owned());
        }
        n
    };
    let seed = node
        .get("seed")
        .and_then(|n| cx.uint(n, "generate.seed", 0));
    let jobs = required(cx, "jobs", "add jobs: 1000 (how many jobs to generate)")
        .and_then(|n| cx.uint(n, "generate.jobs", 1));
    let mean_interarrival = match (node.get("meanInterarrival"), node.get("arrivalRate")) {
        (Some(_), Some(r)) => {
            cx.d.error(r.pos, "generate has both meanInterarrival and arrivalRate")
                .help("keep one: meanInterarrival: 30s is arrivalRate: 120 (jobs per hour)");
            None
        }
        (Some(m), None) => seconds(cx, m, "generate.meanInterarrival").map(|s| s as f64),
        (None, Some(r)) => match cx.number(r, "generate.arrivalRate") {
            Some(rate) if rate > 0.0 => Some(3600.0 / rate),
            Some(_) => {
                cx.d.error(r.pos, "generate.arrivalRate: must be above 0")
                    .help("jobs per hour, such as 120");
                None
            }
            None => None,
        },
        (None, None) => {
            cx.d.error(node.pos, "generate has no arrival rate")
                .help("add meanInterarrival: 30s, or arrivalRate: 120 (jobs per hour)");
            None
        }
    };
    let teams = required(cx, "teams", "add teams: [{name: vision, weight: 1}]")
        .and_then(|n| weighted(cx, n, "generate.teams"));
    let workers = match node.get("workers") {
        Some(n) => dist(cx, n, "generate.workers", false),
        None => Some(Dist::Constant(1)),
    };
    let gpu = match node.get("gpu") {
        Some(n) => dist(cx, n, "generate.gpu", false),
        None => Some(Dist::Constant(0)),
    };
    let duration = required(
        cx,
        "duration",
        "add duration: {lognormal: {median: 30m, sigma: 1}}",
    )
    .and_then(|n| dist(cx, n, "generate.duration", true));
    let cpu = match node.get("cpuPerGpu") {
        Some(n) => quantity(cx, n, "generate.cpuPerGpu", 1000.0),
        None => Some(4000),
    };
    let memory = match node.get("memoryPerGpu") {
        Some(n) => quantity(cx, n, "generate.memoryPerGpu", 1.0),
        None => Some(0),
    };
    let priorities = match node.get("priorities") {
        Some(n) => weighted(cx, n, "generate.priorities"),
        None => Some(Vec::new()),
    };
    let interruptible = match node.get("interruptible") {
        Some(n) => match cx.number(n, "generate.interruptible") {
            Some(x) if (0.0..=1.0).contains(&x) => Some(x),
            Some(x) => {
                cx.d.error(
                    n.pos,
                    format!("generate.interruptible: {x} is not a share between 0 and 1"),
                )
                .help("the share of jobs marked interruptible, such as 0.25");
                None
            }
            None => None,
        },
        None => Some(0.0),
    };
    let checkpoint = match node.get("checkpointEvery") {
        Some(n) => seconds(cx, n, "generate.checkpointEvery").map(|s| (s > 0).then_some(s)),
        None => Some(None),
    };
    if cx.d.error_count() != before {
        return None;
    }
    Some(GenerateSpec {
        seed: seed.unwrap_or(0),
        jobs: jobs?,
        mean_interarrival: mean_interarrival?,
        teams: teams?,
        workers: workers?,
        gpu: gpu?,
        millicpu_per_gpu: cpu?,
        memory_per_gpu: memory?,
        duration: duration?,
        priorities: priorities?,
        interruptible: interruptible?,
        checkpoint_every: checkpoint?,
    })
}

/// `[{name, weight}]` or bare names: weights are positive (default 1).
fn weighted(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<Vec<(Named, f64)>> {
    let what = "a list of {name, weight}";
    let Some(items) = node.as_seq().filter(|i| !i.is_empty()) else {
        cx.expected(node, field, what);
        return None;
    };
    let mut out = Vec::new();
    let mut ok = true;
    for item in items {
        // A bare name: weight 1.
        if item.as_scalar().is_some() {
            match named(cx, item, &format!("{field}[]")) {
                Some(n) => out.push((n, 1.0)),
                None => ok = false,
            }
            continue;
        }
        if cx.fields(item, field, &["name", "weight"]).is_none() {
            ok = false;
            continue;
        }
        let name = match item.get("name") {
            Some(n) => named(cx, n, &format!("{field}[].name")),
            None => {
                cx.d.error(item.pos, format!("{field}: an entry has no 'name'"))
                    .help("write {name: vision, weight: 1}");
                None
            }
        };
        let weight = match item.get("weight") {
            Some(w) => positive(cx, w, &format!("{field}[].weight")),
            None => Some(1.0),
        };
        match (name, weight) {
            (Some(n), Some(w)) => out.push((n, w)),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

fn positive(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<f64> {
    let x = cx.number(node, field)?;
    if x > 0.0 {
        return Some(x);
    }
    cx.d.error(node.pos, format!("{field}: {x} is not above 0"))
        .help("weights are relative and positive, such as 1 or 2.5");
    None
}

fn named(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<Named> {
    let name = cx.string(node, field)?;
    Some(Named {
        name,
        pos: node.pos,
    })
}

/// Whole seconds, or a duration with a unit (`90s`, `1h30m`).
fn seconds(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<u64> {
    match node.as_scalar().map(|s| s.typed()) {
        Some(Typed::Int(i)) if i >= 0 => Some(i as u64),
        Some(Typed::Str(s)) => match units::parse_duration(s) {
            Ok(d) => Some(d.as_secs()),
            Err(why) => {
                cx.d.error(
                    node.pos,
                    format!("{field}: expected whole seconds or a duration such as 90s or 1h30m, found {s:?}"),
                )
                .help(why);
                None
            }
        },
        _ => {
            cx.expected(
                node,
                field,
                "whole seconds or a duration such as 90s or 1h30m",
            );
            None
        }
    }
}

/// A Kubernetes-style quantity (`8`, `500m`, `64Gi`) times `scale`.
fn quantity(cx: &mut Cx<'_>, node: &Node, field: &str, scale: f64) -> Option<u64> {
    let text = cx.text(node, field)?;
    match units::parse_quantity(&text) {
        Ok(x) if x >= 0.0 => Some((x * scale).round() as u64),
        _ => {
            cx.d.error(node.pos, format!("{field}: '{text}' is not a quantity"))
                .help(if scale > 1.0 {
                    "cores, as a number or in thousandths: 8, 500m"
                } else {
                    "bytes with a unit: 512Mi, 64Gi"
                });
            None
        }
    }
}

/// A number, or `{choice | uniform | exponential | lognormal: ...}`; values are seconds
/// (durations allowed) when `time`.
fn dist(cx: &mut Cx<'_>, node: &Node, field: &str, time: bool) -> Option<Dist> {
    const KINDS: &[&str] = &["choice", "uniform", "exponential", "lognormal"];
    let value = |cx: &mut Cx<'_>, n: &Node, f: &str| {
        if time {
            seconds(cx, n, f)
        } else {
            cx.uint(n, f, 0)
        }
    };
    if node.as_scalar().is_some() {
        return value(cx, node, field).map(Dist::Constant);
    }
    let Some(entries) = cx.fields(node, field, KINDS) else {
        cx.d.push_help_last(
            "write a number, or one of {choice: [{value, weight}]}, {uniform: {min, max}}, {exponential: {mean}}, {lognormal: {median, sigma}}".to_owned(),
        );
        return None;
    };
    if entries.len() != 1 {
        cx.d.error(
            node.pos,
            format!(
                "{field}: expected one of {}, found {}",
                KINDS.join(", "),
                entries.len()
            ),
        )
        .help("a distribution has exactly one kind, such as {exponential: {mean: 1h}}");
        return None;
    }
    let e = &entries[0];
    if !KINDS.contains(&e.key.as_str()) {
        // Reported by `fields`.
        return None;
    }
    let f = format!("{field}.{}", e.key);
    let n = &e.value;
    match e.key.as_str() {
        "choice" => {
            let Some(items) = n.as_seq().filter(|i| !i.is_empty()) else {
                cx.expected(n, &f, "a list of {value, weight}");
                return None;
            };
            let mut out = Vec::new();
            for item in items {
                cx.fields(item, &f, &["value", "weight"])?;
                let Some(v) = item.get("value") else {
                    cx.d.error(item.pos, format!("{f}: an entry has no 'value'"))
                        .help("write {value: 4, weight: 1}");
                    return None;
                };
                let v = value(cx, v, &format!("{f}[].value"))?;
                let w = match item.get("weight") {
                    Some(w) => positive(cx, w, &format!("{f}[].weight"))?,
                    None => 1.0,
                };
                out.push((v, w));
            }
            Some(Dist::Choice(out))
        }
        "uniform" => {
            cx.fields(n, &f, &["min", "max"])?;
            let (Some(lo), Some(hi)) = (n.get("min"), n.get("max")) else {
                cx.d.error(n.pos, format!("{f}: needs min and max"))
                    .help("write {uniform: {min: 1, max: 8}}");
                return None;
            };
            let (min, max) = (
                value(cx, lo, &format!("{f}.min"))?,
                value(cx, hi, &format!("{f}.max"))?,
            );
            if min > max {
                cx.d.error(hi.pos, format!("{f}: max {max} is below min {min}"));
                return None;
            }
            Some(Dist::Uniform { min, max })
        }
        "exponential" => {
            cx.fields(n, &f, &["mean"])?;
            let Some(m) = n.get("mean") else {
                cx.d.error(n.pos, format!("{f}: needs mean"))
                    .help("write {exponential: {mean: 1h}}");
                return None;
            };
            let mean = value(cx, m, &format!("{f}.mean"))?;
            Some(Dist::Exponential { mean: mean as f64 })
        }
        _ => {
            cx.fields(n, &f, &["median", "sigma"])?;
            let (Some(m), Some(s)) = (n.get("median"), n.get("sigma")) else {
                cx.d.error(n.pos, format!("{f}: needs median and sigma"))
                    .help("write {lognormal: {median: 30m, sigma: 1}}");
                return None;
            };
            let median = value(cx, m, &format!("{f}.median"))?;
            if median == 0 {
                cx.d.error(m.pos, format!("{f}.median: must be above 0"));
                return None;
            }
            let sigma = cx.number(s, &format!("{f}.sigma"))?;
            if !(0.0..=10.0).contains(&sigma) {
                cx.d.error(s.pos, format!("{f}.sigma: {sigma} is not between 0 and 10"))
                    .help("the standard deviation of the log: 0.5 is narrow, 2 is very wide");
                return None;
            }
            Some(Dist::LogNormal {
                median: median as f64,
                sigma,
            })
        }
    }
}

#[cfg(test)]
mod tests;
