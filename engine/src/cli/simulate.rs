//! `sluice simulate`: a workload replayed through the scheduler in virtual time, once per
//! policy, side by side. The JSON is byte-identical for the same inputs (keys in a fixed
//! order, numbers rounded, no wall-clock values).

mod chart;
mod never_fit;
mod per_job;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde_json::{Value, json};

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use crate::scheduler::config::{self, Config};
use crate::scheduler::simulate::{self, Report, SimJob};
use crate::spec;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples, from the repository's root:\n  \
    sluice simulate --cluster examples/simulate/lab.yaml \\\n    \
    --workload examples/simulate/jobs.csv --policy fifo --policy fair\n  \
    sluice simulate --cluster examples/simulate/traces/kalos.yaml \\\n    \
    --workload examples/simulate/traces/acme-kalos-2023-gangs.csv")]
pub struct Args {
    /// The Cluster file: pools, teams, priorities, scheduling settings.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// The workload: a CSV with submit,team,workers,gpu,cpu,memory,duration,priority,
    /// interruptible,checkpoint_every,flavor (extra columns ignored), or a YAML file with
    /// kind: Workload (spec.jobs, or a seeded spec.generate); told apart by extension, else
    /// by content.
    #[arg(long, value_name = "FILE")]
    pub workload: PathBuf,
    /// A policy to replay (repeatable): fifo, priority, fair. Default: all three.
    #[arg(long = "policy", value_name = "POLICY")]
    pub policies: Vec<String>,
    /// Also write an SVG chart of GPU utilization and queue length over time, one line per
    /// policy (time-averaged over at most 1024 buckets).
    #[arg(long, value_name = "FILE")]
    pub chart: Option<PathBuf>,
    /// Also write a CSV of what happened to each job under each policy (submitted, first
    /// start, end, wait, preemptions, seconds of work lost): the jobs behind a percentile.
    #[arg(long, value_name = "FILE")]
    pub jobs: Option<PathBuf>,
}

pub fn run(args: &Args, format: Format) -> Result<Outcome, Error> {
    let shown = args.cluster.display().to_string();
    let text = std::fs::read_to_string(&args.cluster)
        .map_err(|e| Error::Usage(format!("cannot read {shown}: {e}")))?;
    let cluster = match spec::cluster::load(&shown, text) {
        Ok((_, cluster)) => cluster,
        Err(all) => {
            output::diagnostics(&all);
            return Ok(Outcome::Invalid);
        }
    };
    if let Some(p) = cluster.pools.iter().find(|p| p.from_cluster) {
        return Err(Error::Usage(format!(
            "{shown}: pool '{}' reads its nodes from Kubernetes (no nodes: given); the simulator needs them declared: add nodes: N and resources: to it",
            p.name
        )));
    }
    let mut config = Config::from_spec(&cluster);
    let wl = args.workload.display().to_string();
    let text = std::fs::read_to_string(&args.workload)
        .map_err(|e| Error::Usage(format!("cannot read {wl}: {e}")))?;
    let jobs = if is_yaml(&args.workload, &text) {
        let loaded = spec::load(&wl, text);
        let mut diags = spec::Diagnostics::new(wl.clone());
        let jobs = spec::workload::read(&loaded, &mut diags)
            .and_then(|w| crate::scheduler::workload::from_spec(&w, &mut config, &mut diags));
        let mut all = loaded.diagnostics.into_sorted();
        all.extend(diags.into_sorted());
        all.retain(|d| d.severity == spec::Severity::Error);
        match jobs.filter(|_| all.is_empty()) {
            Some(jobs) => jobs,
            None => {
                output::diagnostics(&all);
                return Ok(Outcome::Invalid);
            }
        }
    } else {
        crate::scheduler::workload::read_csv(&wl, &text, &mut config).map_err(Error::Usage)?
    };
    let names: Vec<String> = if args.policies.is_empty() {
        vec!["fifo".into(), "priority".into(), "fair".into()]
    } else {
        args.policies.clone()
    };
    let mut chosen = Vec::with_capacity(names.len());
    for name in &names {
        let Some(policy) = config::policy(name) else {
            return Err(Error::Usage(format!(
                "--policy {name}: expected fifo, priority or fair"
            )));
        };
        chosen.push(policy);
    }
    if let Some(text) = never_fit::warning(&config, &jobs, &chosen) {
        // A closed standard error is no reason to fail the replay.
        let _ = writeln!(std::io::stderr().lock(), "{text}");
    }
    let mut policies = serde_json::Map::new();
    let mut lines = Vec::new();
    let mut per_job = Vec::new();
    for (name, &policy) in names.iter().zip(&chosen) {
        let mut settings = config.settings.clone();
        settings.policy = policy;
        let report = simulate::run(&config.cluster, &jobs, &settings, |_, _| {});
        policies.insert(name.clone(), summary(&config, &jobs, &report));
        if args.jobs.is_some() {
            per_job.extend(per_job::rows(name, &config, &jobs, &report));
        }
        lines.push(chart::Line {
            policy: name,
            points: report.series.points(report.stopped_at),
        });
    }
    if let Some(path) = &args.chart {
        chart::write(path, &lines, config.cluster.total().gpu).map_err(Error::Usage)?;
    }
    if let Some(path) = &args.jobs {
        per_job::write(path, &per_job).map_err(Error::Usage)?;
    }
    let doc = json!({ "policies": Value::Object(policies) });
    match format {
        Format::Json => output::json(&doc),
        Format::Text => output::text(|out| write_table(out, &doc, &names)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// A workload is YAML (`kind: Workload`) when its name ends in .yaml or .yml, or, with
/// another extension than .csv, when its first line that is not blank or a comment looks like
/// YAML (`---`, `apiVersion:`, `kind:`); otherwise it is the CSV.
fn is_yaml(path: &std::path::Path, text: &str) -> bool {
    match path.extension().and_then(|e| e.to_str()) {
        Some("yaml" | "yml") => return true,
        Some("csv") => return false,
        _ => {}
    }
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| {
            l.starts_with("---") || l.starts_with("apiVersion:") || l.starts_with("kind:")
        })
}

fn round(x: f64, digits: i32) -> Value {
    let f = 10f64.powi(digits);
    json!((x * f).round() / f)
}

fn waits(w: &[u64]) -> Value {
    let q = |p| simulate::quantile(w, p).map_or(Value::Null, |v| json!(v));
    json!({"p50": q(0.5), "p95": q(0.95), "p99": q(0.99)})
}

/// One policy's measurements, in the shape of the CLI contract. One pass over the jobs: a
/// million-job replay with a thousand teams must not be teams x jobs.
fn summary(config: &Config, jobs: &[SimJob], report: &Report) -> Value {
    let cluster = &config.cluster;
    let by_team = simulate::gpu_seconds_by_team(cluster, report, jobs);
    let mut all = Vec::with_capacity(jobs.len());
    let mut team_waits: Vec<Vec<u64>> = vec![Vec::new(); cluster.teams.len()];
    let mut team_never = vec![0u64; cluster.teams.len()];
    let mut class_waits: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    for j in jobs {
        let w = simulate::wait_of(report, &j.job);
        all.push(w);
        if let Some(t) = team_waits.get_mut(j.job.team) {
            t.push(w);
        }
        if report
            .jobs
            .get(&j.job.id)
            .is_none_or(|o| o.first_start.is_none())
            && let Some(n) = team_never.get_mut(j.job.team)
        {
            *n += 1;
        }
        class_waits.entry(j.job.priority).or_default().push(w);
    }
    all.sort_unstable();
    let mut team_cost = vec![0.0; cluster.teams.len()];
    for ((t, pool), held) in &report.held {
        let (gh, ch) = config.prices.get(*pool).copied().unwrap_or_default();
        // Extended resources at their price in this pool, by name (none: free).
        let extended: f64 = held
            .extended_seconds
            .iter()
            .enumerate()
            .filter(|(_, s)| **s > 0)
            .filter_map(|(slot, s)| {
                let name = crate::scheduler::extended::name(slot)?;
                let price = config.extended_prices.get(*pool)?.get(&name)?;
                Some(*s as f64 * price)
            })
            .sum();
        if let Some(c) = team_cost.get_mut(*t) {
            *c += (held.gpu_seconds as f64 * gh + held.cpu_seconds as f64 * ch + extended) / 3600.0;
        }
    }
    let mut teams = serde_json::Map::new();
    for (t, team) in cluster.teams.iter().enumerate() {
        let w = &mut team_waits[t];
        if w.is_empty() {
            continue;
        }
        w.sort_unstable();
        teams.insert(
            team.name.clone(),
            json!({
                "jobs": w.len(),
                "gpu_hours": round(by_team[t] / 3600.0, 2),
                "cost": round(team_cost[t], 2),
                "wait_seconds": waits(w),
                "never_started": team_never[t],
            }),
        );
    }
    let mut priorities = serde_json::Map::new();
    let mut classes: Vec<(&String, &i64)> = config.priorities.iter().collect();
    classes.sort_by_key(|(n, v)| (std::cmp::Reverse(**v), (*n).clone()));
    for (name, value) in classes {
        if let Some(w) = class_waits.get_mut(value) {
            w.sort_unstable();
            priorities.insert(name.clone(), json!({"wait_seconds": waits(w)}));
        }
    }
    let completed = report.jobs.values().filter(|o| o.end.is_some()).count();
    json!({
        "gpu_utilization": round(report.gpu_utilization, 4),
        "partial_gang_gpu_hours": round(report.partial_gang_gpu_seconds as f64 / 3600.0, 2),
        "deadlocks": report.deadlocks,
        "jain_fairness": round(report.jain_fairness, 4),
        "wait_seconds": waits(&all),
        "jobs": jobs.len(),
        "completed": completed,
        "never_started": report.never_started,
        "never_fit": report.never_fit,
        "makespan_seconds": report.makespan,
        "stopped_at_seconds": report.stopped_at,
        "preemptions": report.preemptions,
        "gpu_hours_lost": round(report.gpu_seconds_lost as f64 / 3600.0, 2),
        "fragmentation": round(report.fragmentation, 4),
        "fragmented_gpu_hours": round(report.fragmented_gpu_seconds as f64 / 3600.0, 2),
        "teams": Value::Object(teams),
        "priorities": Value::Object(priorities),
    })
}

fn write_table(out: &mut dyn std::io::Write, doc: &Value, names: &[String]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:10} {:>8} {:>7} {:>10} {:>10} {:>10} {:>11} {:>10} {:>13} {:>9} {:>6} {:>9} {:>13}",
        "POLICY",
        "GPU UTIL",
        "JAIN",
        "WAIT P50",
        "WAIT P95",
        "WAIT P99",
        "PREEMPTIONS",
        "GPU-H LOST",
        "PARTIAL GPU-H",
        "DEADLOCKS",
        "FRAG",
        "COMPLETED",
        "NEVER STARTED"
    )?;
    let s = |v: &Value| match v {
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    };
    let wait = |v: &Value| {
        v.as_u64()
            .map_or_else(|| "-".to_owned(), crate::time::human)
    };
    for name in names {
        let p = &doc["policies"][name];
        writeln!(
            out,
            "{:10} {:>7.1}% {:>7} {:>10} {:>10} {:>10} {:>11} {:>10} {:>13} {:>9} {:>5.1}% {:>4}/{:<4} {:>13}",
            name,
            p["gpu_utilization"].as_f64().unwrap_or(0.0) * 100.0,
            s(&p["jain_fairness"]),
            wait(&p["wait_seconds"]["p50"]),
            wait(&p["wait_seconds"]["p95"]),
            wait(&p["wait_seconds"]["p99"]),
            s(&p["preemptions"]),
            s(&p["gpu_hours_lost"]),
            s(&p["partial_gang_gpu_hours"]),
            s(&p["deadlocks"]),
            p["fragmentation"].as_f64().unwrap_or(0.0) * 100.0,
            s(&p["completed"]),
            s(&p["jobs"]),
            s(&p["never_started"]),
        )?;
    }
    let mut per_team: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in names {
        if let Some(teams) = doc["policies"][name]["teams"].as_object() {
            for (team, t) in teams {
                per_team.entry(team.clone()).or_default().push(format!(
                    "{name}: p95 wait {}, {} GPU-h, cost {}",
                    wait(&t["wait_seconds"]["p95"]),
                    s(&t["gpu_hours"]),
                    s(&t["cost"])
                ));
            }
        }
    }
    writeln!(out)?;
    for (team, lines) in per_team {
        writeln!(out, "team {team}: {}", lines.join("; "))?;
    }
    Ok(())
}
