//! The warning about jobs no schedule could ever start (`scheduler::simulate::never_fit`):
//! said once, before the replays, since a replay only counts them as never started and they
//! would otherwise look like jobs a policy starved.

use crate::scheduler::Policy;
use crate::scheduler::cluster::Res;
use crate::scheduler::config::Config;
use crate::scheduler::simulate::SimJob;
use crate::scheduler::simulate::never_fit::{self, Why};

/// The warning's text (several lines), or None when every job could start on this cluster.
/// `policies`: those replayed.
pub fn warning(config: &Config, jobs: &[SimJob], policies: &[Policy]) -> Option<String> {
    let cluster = &config.cluster;
    let never = never_fit::unplaceable(cluster, jobs);
    let fair = policies.contains(&Policy::Fair);
    let mut skip = never.iter().map(|(i, _)| *i).peekable();
    let over: Vec<&SimJob> = jobs
        .iter()
        .enumerate()
        .filter(|(i, _)| skip.next_if_eq(i).is_none())
        .filter(|(_, j)| fair && never_fit::over_ceiling(cluster, &j.job, Policy::Fair))
        .map(|(_, j)| j)
        .collect();
    if never.is_empty() && over.is_empty() {
        return None;
    }
    let total = jobs.len();
    let mut text = if never.is_empty() {
        format!(
            "sluice: warning: under fair, {} of {total} jobs can never start",
            over.len()
        )
    } else {
        format!(
            "sluice: warning: {} of {total} jobs can never start on this cluster, under any policy",
            never.len()
        )
    };
    text.push_str("; they count as never started, waiting until the replay stops");
    for kind in [KIND_WORKER, KIND_GANG, KIND_NO_POOL] {
        let of: Vec<(&SimJob, Why)> = never
            .iter()
            .filter(|(_, w)| kind_of(w) == kind)
            .map(|(i, w)| (&jobs[*i], *w))
            .collect();
        let Some(&(big, why)) = of.iter().max_by_key(|(j, _)| size_key(j)) else {
            continue;
        };
        let n = of.len();
        let line = match why {
            Why::Worker { largest } => format!(
                "{n} with a worker larger than any node it may use: the largest asks for {} ({}); the largest node it may use holds {}",
                size(big),
                who(config, big),
                res(largest)
            ),
            Why::Gang { room } => format!(
                "{n} gang(s) larger than the nodes they may use hold together: the largest asks for {} ({}); those nodes have room for {room} of its workers",
                size(big),
                who(config, big)
            ),
            Why::NoPool => format!(
                "{n} that no pool may take (their flavor names none, or only spot pools match a job that is not interruptible): the largest asks for {} ({})",
                size(big),
                who(config, big)
            ),
        };
        text.push_str("\n  ");
        text.push_str(&line);
    }
    if let Some(big) = over.iter().copied().max_by_key(|j| size_key(j)) {
        let ceiling = cluster
            .teams
            .get(big.job.team)
            .and_then(|t| t.ceiling())
            .map(res)
            .unwrap_or_default();
        let (lead, more) = if never.is_empty() {
            ("", "")
        } else {
            ("under fair, ", " more")
        };
        text.push_str(&format!(
            "\n  {lead}{}{more} asking for more than their team may ever hold (quota + borrowLimit): the largest asks for {} ({}), above {ceiling}",
            over.len(),
            size(big),
            who(config, big)
        ));
    }
    text.push_str(
        "\n  help: make those jobs smaller, or give the Cluster file larger or more nodes (or a higher borrowLimit)",
    );
    Some(text)
}

const KIND_WORKER: u8 = 0;
const KIND_GANG: u8 = 1;
const KIND_NO_POOL: u8 = 2;

fn kind_of(w: &Why) -> u8 {
    match w {
        Why::Worker { .. } => KIND_WORKER,
        Why::Gang { .. } => KIND_GANG,
        Why::NoPool => KIND_NO_POOL,
    }
}

/// Larger demand first; among equals, the first submitted.
fn size_key(j: &SimJob) -> (u64, u64, u64, std::cmp::Reverse<u64>) {
    let d = j.job.demand();
    (d.gpu, d.millicpu, d.memory, std::cmp::Reverse(j.job.id))
}

fn size(j: &SimJob) -> String {
    let per = res(j.job.per_worker);
    if j.job.workers == 1 {
        format!("1 worker of {per}")
    } else {
        format!("{} workers x ({per})", j.job.workers)
    }
}

/// `8 GPU, 4 CPU, 16Gi`: as `Res` displays it, with memory in Gi when it is whole Gi.
fn res(r: Res) -> String {
    const GI: u64 = 1 << 30;
    let shown = Res { memory: 0, ..r }.to_string();
    if r.memory == 0 || r.memory == u64::MAX {
        return shown;
    }
    let memory = if r.memory.is_multiple_of(GI) {
        format!("{}Gi", r.memory / GI)
    } else {
        format!("{}Mi", r.memory >> 20)
    };
    if shown == "nothing" {
        memory
    } else {
        format!("{shown}, {memory}")
    }
}

/// Which job, in the workload's terms.
fn who(config: &Config, j: &SimJob) -> String {
    let team = config
        .cluster
        .teams
        .get(j.job.team)
        .map_or("?", |t| t.name.as_str());
    let flavor = j
        .job
        .flavor
        .as_deref()
        .map(|f| format!(", flavor {f}"))
        .unwrap_or_default();
    format!("team {team}, submitted at {}s{flavor}", j.job.submitted)
}
