//! Figures read from a replay's report: waits and their quantiles, Jain's index, GPU-seconds
//! per team.

use super::{Report, SimJob};
use crate::scheduler::{Cluster, Job};

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

/// Jain's fairness index (Jain, Chiu and Hawe, 1984) of per-team allocations already divided
/// by weight: 1 when all are equal (or fewer than two), 1/n when one team got everything.
pub fn jain(allocations: &[f64]) -> f64 {
    if allocations.len() < 2 {
        return 1.0;
    }
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
