//! Workload files for `sluice simulate`: the CSV of the cluster contract (`submit, team,
//! workers, gpu, cpu, memory, duration, priority, interruptible, checkpoint_every, flavor`,
//! extra columns ignored, optional ones defaulted). Fields hold no commas, so lines are split
//! on them; a bad value is an error naming its line and column.

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
        jobs.push(SimJob {
            job: Job {
                id: jobs.len() as u64,
                team,
                priority,
                workers: u32::try_from(uint("workers", 1)?.max(1)).unwrap_or(u32::MAX),
                per_worker: Res::new(
                    uint("gpu", 0)?,
                    if get("cpu").is_empty() {
                        1000
                    } else {
                        quantity("cpu", 1000.0)?
                    },
                    quantity("memory", 1.0)?,
                ),
                interruptible,
                checkpointed: checkpoint > 0,
                flavor,
                submitted: uint("submit", 0)?,
            },
            duration: uint("duration", 0)?,
            checkpoint_every: (checkpoint > 0).then_some(checkpoint),
        });
    }
    Ok(jobs)
}
