//! Workload files for `sluice simulate`: the CSV of the cluster contract (`submit, team,
//! workers, gpu, cpu, memory, duration, priority, interruptible, checkpoint_every, flavor`,
//! extra columns ignored, optional ones defaulted; `estimate`, and columns named as extended
//! resources, `DOMAIN/NAME`, per worker, are read too), and the seeded generator behind a
//! `kind: Workload` file's `spec.generate` (decoded in `spec::workload`). CSV fields hold no
//! commas, so lines are split on them; a bad value is an error naming its line and column.

use rand::{RngExt, SeedableRng};

use super::Job;
use super::cluster::Res;
use super::config::Config;
use super::simulate::SimJob;

/// Reads a workload CSV; teams it names that the cluster does not are added with defaults.
pub fn read_csv(path: &str, text: &str, config: &mut Config) -> Result<Vec<SimJob>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(format!(
            "{path}: empty; expected a header line (submit,team,workers,gpu,...)"
        ));
    };
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |name: &str| columns.iter().position(|c| *c == name);
    for required in ["submit", "team", "duration"] {
        if col(required).is_none() {
            return Err(format!(
                "{path}:1: the header has no '{required}' column (it has {})",
                columns.join(", ")
            ));
        }
    }
    let mut jobs = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let get = |name: &str| col(name).and_then(|c| fields.get(c)).copied().unwrap_or("");
        let at = |name: &str| {
            let c = col(name).unwrap_or(0);
            let column = 1 + fields.iter().take(c).map(|f| f.len() + 1).sum::<usize>();
            format!("{path}:{n}:{column}")
        };
        let uint = |name: &str, default: u64| -> Result<u64, String> {
            let v = get(name);
            if v.is_empty() {
                return Ok(default);
            }
            v.parse::<f64>()
                .ok()
                .filter(|x| *x >= 0.0 && x.is_finite())
                .map(|x| x.round() as u64)
                .ok_or_else(|| format!("{}: {name} '{v}' is not a non-negative number", at(name)))
        };
        let quantity = |name: &str, scale: f64| -> Result<u64, String> {
            let v = get(name);
            if v.is_empty() {
                return Ok(0);
            }
            crate::spec::units::parse_quantity(v)
                .ok()
                .filter(|x| *x >= 0.0)
                .map(|x| (x * scale).round() as u64)
                .ok_or_else(|| {
                    format!(
                        "{}: {name} '{v}' is not a quantity (8, 500m, 64Gi)",
                        at(name)
                    )
                })
        };
        let team_name = get("team");
        if team_name.is_empty() {
            return Err(format!("{}: a job needs a team", at("team")));
        }
        let priority = match get("priority") {
            "" => config.default_priority,
            p => *config.priorities.get(p).ok_or_else(|| {
                format!(
                    "{}: priority class '{p}' is not one of the cluster's ({})",
                    at("priority"),
                    config
                        .priorities
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?,
        };
        let interruptible = match get("interruptible") {
            "" | "false" => false,
            "true" => true,
            v => {
                return Err(format!(
                    "{}: interruptible '{v}' is not true or false",
                    at("interruptible")
                ));
            }
        };
        let checkpoint = uint("checkpoint_every", 0)?;
        let team = config.team(team_name);
        let flavor = Some(get("flavor"))
            .filter(|f| !f.is_empty())
            .map(str::to_owned);
        let mut per_worker = Res::new(
            uint("gpu", 0)?,
            if get("cpu").is_empty() {
                1000
            } else {
                quantity("cpu", 1000.0)?
            },
            quantity("memory", 1.0)?,
        );
        for name in columns.iter().filter(|c| super::extended::is_name(c)) {
            let n = uint(name, 0)?;
            if n > 0 {
                let slot = super::extended::slot(name).ok_or_else(|| {
                    format!(
                        "{path}:1: column '{name}': at most {} extended resources are scheduled",
                        super::extended::SLOTS
                    )
                })?;
                per_worker = per_worker.with_ext(slot, n);
            }
        }
        jobs.push(SimJob {
            job: Job {
                id: jobs.len() as u64,
                team,
                priority,
                workers: u32::try_from(uint("workers", 1)?.max(1)).unwrap_or(u32::MAX),
                per_worker,
                interruptible,
                checkpointed: checkpoint > 0,
                flavor,
                submitted: uint("submit", 0)?,
                estimate: if get("estimate").is_empty() {
                    None
                } else {
                    Some(uint("estimate", 0)?)
                },
            },
            duration: uint("duration", 0)?,
            checkpoint_every: (checkpoint > 0).then_some(checkpoint),
        });
    }
    Ok(jobs)
}

use crate::spec::Diagnostics;
pub use crate::spec::workload::Dist;
use crate::spec::workload::{GenerateSpec, Named, WorkloadSpec};

/// One draw from `d`.
pub fn sample(d: &Dist, rng: &mut rand_pcg::Pcg64) -> u64 {
    match d {
        Dist::Constant(v) => *v,
        Dist::Choice(items) => items
            .get(pick(rng, items.iter().map(|(_, w)| *w)))
            .map_or(0, |(v, _)| *v),
        Dist::Exponential { mean } => (exponential(rng) * mean).round() as u64,
        Dist::LogNormal { median, sigma } => {
            (median.ln() + sigma * normal(rng)).exp().round() as u64
        }
        Dist::Uniform { min, max } => {
            let span = max.saturating_sub(*min).saturating_add(1);
            min.saturating_add((rng.random::<f64>() * span as f64) as u64)
        }
    }
}

/// The jobs of a decoded Workload document: teams the cluster does not name are added with
/// defaults (as in the CSV); priority classes must be the cluster's (reported at their
/// position, with a suggestion). None after reporting.
pub fn from_spec(
    spec: &WorkloadSpec,
    config: &mut Config,
    diags: &mut Diagnostics,
) -> Option<Vec<SimJob>> {
    let priority = |p: &Named, d: &mut Diagnostics| -> Option<i64> {
        if let Some(v) = config.priorities.get(&p.name) {
            return Some(*v);
        }
        let names: Vec<&str> = config.priorities.keys().map(String::as_str).collect();
        let e = d.error(
            p.pos,
            format!(
                "priority class '{}' is not one of the cluster's ({})",
                p.name,
                names.join(", ")
            ),
        );
        e.suggest(&p.name, names.iter().copied());
        None
    };
    let before = diags.error_count();
    match spec {
        WorkloadSpec::Jobs(list) => {
            let prios: Vec<Option<i64>> = list
                .iter()
                .map(|j| match &j.priority {
                    Some(p) => priority(p, diags),
                    None => Some(config.default_priority),
                })
                .collect();
            if diags.error_count() != before {
                return None;
            }
            let mut out = Vec::with_capacity(list.len());
            for (id, (j, prio)) in list.iter().zip(prios).enumerate() {
                let team = config.team(&j.team.name);
                out.push(SimJob {
                    job: Job {
                        id: id as u64,
                        team,
                        priority: prio.unwrap_or(config.default_priority),
                        workers: j.workers.max(1),
                        per_worker: super::config::with_extended(
                            Res::new(j.gpu, j.millicpu.unwrap_or(1000), j.memory),
                            &j.extended,
                        ),
                        interruptible: j.interruptible,
                        checkpointed: j.checkpoint_every.is_some(),
                        flavor: j.flavor.clone(),
                        submitted: j.submit,
                        estimate: j.estimate,
                    },
                    duration: j.duration,
                    checkpoint_every: j.checkpoint_every,
                });
            }
            // Arrival order is by submission; ids follow the file's order.
            Some(out)
        }
        WorkloadSpec::Generate(g) => {
            let priorities: Vec<(i64, f64)> = g
                .priorities
                .iter()
                .filter_map(|(p, w)| Some((priority(p, diags)?, *w)))
                .collect();
            if diags.error_count() != before {
                return None;
            }
            let generate = Generate::from_spec(g, config, priorities);
            Some(generate.jobs(config.default_priority))
        }
    }
}

/// A seeded synthetic workload (`spec.generate` of a Workload file).
#[derive(Clone, Debug, PartialEq)]
pub struct Generate {
    pub seed: u64,
    pub jobs: u64,
    /// Mean seconds between submissions (exponential: a Poisson process).
    pub mean_interarrival: f64,
    /// Team indices with relative weights.
    pub teams: Vec<(usize, f64)>,
    pub workers: Dist,
    /// GPUs per worker.
    pub gpu: Dist,
    /// Per worker: thousandths of a CPU core, and memory bytes, per GPU (at least one GPU's
    /// worth for CPU-only workers).
    pub millicpu_per_gpu: u64,
    pub memory_per_gpu: u64,
    /// Seconds of work.
    pub duration: Dist,
    /// Priority values with relative weights (empty: the default class).
    pub priorities: Vec<(i64, f64)>,
    /// Share of jobs marked interruptible.
    pub interruptible: f64,
    pub checkpoint_every: Option<u64>,
}

impl Generate {
    fn from_spec(g: &GenerateSpec, config: &mut Config, priorities: Vec<(i64, f64)>) -> Generate {
        Generate {
            seed: g.seed,
            jobs: g.jobs,
            mean_interarrival: g.mean_interarrival,
            teams: g
                .teams
                .iter()
                .map(|(t, w)| (config.team(&t.name), *w))
                .collect(),
            workers: g.workers.clone(),
            gpu: g.gpu.clone(),
            millicpu_per_gpu: g.millicpu_per_gpu,
            memory_per_gpu: g.memory_per_gpu,
            duration: g.duration.clone(),
            priorities,
            interruptible: g.interruptible,
            checkpoint_every: g.checkpoint_every,
        }
    }

    /// The jobs, identical for the same settings (the RNG is PCG-64 seeded with `seed`).
    pub fn jobs(&self, default_priority: i64) -> Vec<SimJob> {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(self.seed);
        let mut t = 0.0f64;
        let n = usize::try_from(self.jobs).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(n.min(1 << 24));
        for id in 0..self.jobs {
            if id > 0 {
                t += exponential(&mut rng) * self.mean_interarrival;
            }
            let team = self
                .teams
                .get(pick(&mut rng, self.teams.iter().map(|(_, w)| *w)))
                .map_or(0, |(t, _)| *t);
            let workers = sample(&self.workers, &mut rng).clamp(1, u64::from(u32::MAX)) as u32;
            let gpu = sample(&self.gpu, &mut rng);
            let duration = sample(&self.duration, &mut rng).max(1);
            let priority = if self.priorities.is_empty() {
                default_priority
            } else {
                self.priorities
                    .get(pick(&mut rng, self.priorities.iter().map(|(_, w)| *w)))
                    .map_or(default_priority, |(p, _)| *p)
            };
            let interruptible = rng.random::<f64>() < self.interruptible;
            out.push(SimJob {
                job: Job {
                    id,
                    team,
                    priority,
                    workers,
                    per_worker: Res::new(
                        gpu,
                        self.millicpu_per_gpu * gpu.max(1),
                        self.memory_per_gpu * gpu.max(1),
                    ),
                    interruptible,
                    checkpointed: self.checkpoint_every.is_some(),
                    flavor: None,
                    submitted: t.round() as u64,
                    estimate: None,
                },
                duration,
                checkpoint_every: self.checkpoint_every,
            });
        }
        out
    }
}

/// An index drawn with probability proportional to its weight (weights are positive; the
/// decoder checks).
fn pick(rng: &mut rand_pcg::Pcg64, weights: impl Iterator<Item = f64> + Clone) -> usize {
    let total: f64 = weights.clone().sum();
    let mut x = rng.random::<f64>() * total;
    let mut last = 0;
    for (i, w) in weights.enumerate() {
        if x < w {
            return i;
        }
        x -= w;
        last = i;
    }
    last
}

/// Exponential with mean 1.
fn exponential(rng: &mut rand_pcg::Pcg64) -> f64 {
    -(1.0 - rng.random::<f64>()).ln()
}

/// Standard normal (Box-Muller).
fn normal(rng: &mut rand_pcg::Pcg64) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> Generate {
        Generate {
            seed,
            jobs: 2000,
            mean_interarrival: 10.0,
            teams: vec![(0, 3.0), (1, 1.0)],
            workers: Dist::Choice(vec![(1, 0.8), (4, 0.2)]),
            gpu: Dist::Constant(2),
            millicpu_per_gpu: 8000,
            memory_per_gpu: 1 << 30,
            duration: Dist::LogNormal {
                median: 600.0,
                sigma: 1.0,
            },
            priorities: Vec::new(),
            interruptible: 0.25,
            checkpoint_every: Some(60),
        }
    }

    #[test]
    fn generated_workloads_follow_the_seed_and_the_mix() {
        let a = spec(7).jobs(100);
        assert_eq!(a, spec(7).jobs(100));
        assert_ne!(a, spec(8).jobs(100));
        let share =
            |f: &dyn Fn(&SimJob) -> bool| a.iter().filter(|j| f(j)).count() as f64 / a.len() as f64;
        assert!((share(&|j| j.job.team == 0) - 0.75).abs() < 0.05);
        assert!((share(&|j| j.job.workers == 4) - 0.2).abs() < 0.05);
        assert!((share(&|j| j.job.interruptible) - 0.25).abs() < 0.05);
        // Poisson arrivals: the mean gap is close to 10 s; the median duration close to 600.
        let last = a.last().map_or(0, |j| j.job.submitted) as f64;
        assert!((last / 1999.0 - 10.0).abs() < 1.0, "{last}");
        let mut d: Vec<u64> = a.iter().map(|j| j.duration).collect();
        d.sort_unstable();
        assert!((d[1000] as f64 - 600.0).abs() < 60.0, "{}", d[1000]);
        assert!(
            a.windows(2)
                .all(|w| w[0].job.submitted <= w[1].job.submitted)
        );
    }
}
