//! `sluice simulate --jobs FILE`: what happened to each job under each policy, one CSV row per
//! job and policy, so that a percentile in the summary can be traced to the jobs behind it.

use std::io::Write;
use std::path::Path;

use crate::scheduler::config::Config;
use crate::scheduler::simulate::{self, Report, SimJob};

/// The CSV's header.
const HEADER: &str = "policy,job,team,priority,workers,gpu,submit,first_start,end,wait_seconds,preemptions,seconds_lost";

/// The rows of one policy's replay: `job` is the workload's job number (its row, from 0, in a
/// CSV workload); `first_start` and `end` are empty for a job that never started or ended;
/// `wait_seconds` counts a job that never started as waiting until the replay stopped.
pub fn rows(policy: &str, config: &Config, jobs: &[SimJob], report: &Report) -> Vec<String> {
    let class = |value: i64| {
        config
            .priorities
            .iter()
            .find(|(_, v)| **v == value)
            .map_or_else(|| value.to_string(), |(name, _)| name.clone())
    };
    jobs.iter()
        .map(|s| {
            let j = &s.job;
            let outcome = report.jobs.get(&j.id);
            let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
            format!(
                "{policy},{},{},{},{},{},{},{},{},{},{},{}",
                j.id,
                config.cluster.teams[j.team].name,
                class(j.priority),
                j.workers,
                j.per_worker.gpu,
                j.submitted,
                opt(outcome.and_then(|o| o.first_start)),
                opt(outcome.and_then(|o| o.end)),
                simulate::wait_of(report, j),
                outcome.map_or(0, |o| o.preemptions),
                outcome.map_or(0, |o| o.seconds_lost),
            )
        })
        .collect()
}

/// Writes the header and `rows` to `path`.
pub fn write(path: &Path, rows: &[String]) -> Result<(), String> {
    let shown = path.display();
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).map_err(|e| format!("cannot write {shown}: {e}"))?,
    );
    let mut all = || -> std::io::Result<()> {
        writeln!(f, "{HEADER}")?;
        for r in rows {
            writeln!(f, "{r}")?;
        }
        f.flush()
    };
    all().map_err(|e| format!("cannot write {shown}: {e}"))
}
