//! From a validated Cluster document to what the scheduler works on: one node per pool node,
//! teams with their quotas (resources a quota does not name are not limited by it), the
//! priority classes, and the cycle's settings.

use std::collections::BTreeMap;

use crate::spec::model::{ClusterSpec, Quantities};

use super::admission::{Policy, Settings};
use super::cluster::{Cluster, Node, Pool, Res, Team};
use super::extended;
use super::placement::Placement;

/// A Cluster ready for the scheduler, with what workloads and reports need of it.
#[derive(Clone, Debug)]
pub struct Config {
    pub cluster: Cluster,
    pub settings: Settings,
    /// Priority class values by name, and the default class's value.
    pub priorities: BTreeMap<String, i64>,
    pub default_priority: i64,
    /// Per pool: price of a GPU-hour and a CPU-hour.
    pub prices: Vec<(f64, f64)>,
    /// Per pool: price of a unit-hour of each extended resource, by name.
    pub extended_prices: Vec<BTreeMap<String, f64>>,
}

impl Config {
    pub fn from_spec(spec: &ClusterSpec) -> Config {
        let mut cluster = Cluster {
            pools: Vec::new(),
            nodes: Vec::new(),
            teams: Vec::new(),
        };
        let mut prices = Vec::new();
        let mut extended_prices = Vec::new();
        for (i, p) in spec.pools.iter().enumerate() {
            cluster.pools.push(Pool {
                name: p.name.clone(),
                interruptible: p.interruptible,
                labels: p.labels.clone(),
            });
            prices.push((p.gpu_hour, p.cpu_hour));
            extended_prices.push(p.extended_hour.clone());
            let capacity = with_extended(
                Res::new(
                    p.resources.gpu.unwrap_or(0),
                    p.resources.millicpu.unwrap_or(u64::MAX / 1024),
                    p.resources.memory.unwrap_or(u64::MAX / 1024),
                ),
                &p.resources.extended,
            );
            for _ in 0..p.nodes {
                cluster.nodes.push(Node { pool: i, capacity });
            }
        }
        for t in &spec.teams {
            cluster.teams.push(Team {
                name: t.name.clone(),
                weight: t.weight,
                quota: t.quota.as_ref().map_or(Res::ZERO, limit),
                borrow_limit: t.borrow_limit.as_ref().map(limit),
                // Validated: each names a pool.
                quota_pools: t.quota_pools.as_ref().map(|names| {
                    names
                        .iter()
                        .filter_map(|n| spec.pools.iter().position(|p| p.name == *n))
                        .collect()
                }),
            });
        }
        let priorities: BTreeMap<String, i64> = spec
            .priorities
            .iter()
            .map(|p| (p.name.clone(), p.value))
            .collect();
        let default_priority = spec
            .priorities
            .iter()
            .find(|p| p.default)
            .map_or(100, |p| p.value);
        let s = &spec.scheduling;
        Config {
            cluster,
            settings: Settings {
                policy: policy(&s.policy).unwrap_or_default(),
                placement: if s.placement == "spread" {
                    Placement::Spread
                } else {
                    Placement::Binpack
                },
                backfill: s.backfill,
                reclaim: s.reclaim,
                within_team: s.within_team,
                // Validated: the class exists.
                across_below: s
                    .across_below
                    .as_ref()
                    .and_then(|c| priorities.get(c).copied()),
                // Seconds: the simulator's unit (the executor sets milliseconds: run::cluster).
                starvation_limit: s.starvation_limit.map(|d| d.as_secs()),
                grace: s.grace_period.as_secs(),
                now: 0,
                unit_ms: 1000,
                explain: true,
            },
            priorities,
            default_priority,
            prices,
            extended_prices,
        }
    }

    /// The index of team `name`, added with the defaults (weight 1, no quota) if the Cluster
    /// does not name it.
    pub fn team(&mut self, name: &str) -> usize {
        if let Some(i) = self.cluster.teams.iter().position(|t| t.name == name) {
            return i;
        }
        self.cluster.teams.push(Team {
            name: name.to_owned(),
            weight: 1.0,
            quota: Res::ZERO,
            borrow_limit: None,
            quota_pools: None,
        });
        self.cluster.teams.len() - 1
    }
}

/// A policy by its name in files and on the command line.
pub fn policy(name: &str) -> Option<Policy> {
    Some(match name {
        "fifo" => Policy::Fifo,
        "priority" => Policy::Priority,
        "fair" => Policy::Fair,
        _ => return None,
    })
}

/// A quota or limit: resources it does not name are not limited by it.
fn limit(q: &Quantities) -> Res {
    let mut r = Res::new(
        q.gpu.unwrap_or(u64::MAX),
        q.millicpu.unwrap_or(u64::MAX),
        q.memory.unwrap_or(u64::MAX),
    );
    r.ext = [u32::MAX; extended::SLOTS];
    with_extended(r, &q.extended)
}

/// `r` with the amounts of the extended resources `named`, each in its slot. A name that gets
/// no slot (more extended resources than [`extended::SLOTS`] in this process: the Cluster's
/// decoder refuses that many) is left out.
pub fn with_extended(mut r: Res, named: &BTreeMap<String, u64>) -> Res {
    for (name, n) in named {
        if let Some(i) = extended::slot(name) {
            r.ext[i] = extended::amount(*n);
        }
    }
    r
}
