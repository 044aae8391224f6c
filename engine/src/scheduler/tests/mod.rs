//! The scheduler's promises, on scenarios and on random clusters and queues.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::admission::{self, free_of, usage_of};
use super::*;

mod against_reference;
mod extended_resources;
mod random;
mod reservations;
mod sequences;
mod simulated;

use random::{arb_cluster, arb_jobs, arb_state, cases};
use simulated::arb_workload;

const GI: u64 = 1 << 30;

fn pool(name: &str, zone: &str, interruptible: bool) -> Pool {
    Pool {
        name: name.into(),
        interruptible,
        labels: BTreeMap::from([("zone".to_owned(), zone.to_owned())]),
    }
}

fn team(name: &str, weight: f64, quota_gpu: u64, borrow: Option<u64>) -> Team {
    Team {
        name: name.into(),
        weight,
        // As a Cluster file's quota `{gpu: N}` reads: what it does not name is not limited.
        quota: if quota_gpu > 0 {
            Res {
                ext: [u32::MAX; extended::SLOTS],
                ..Res::new(quota_gpu, u64::MAX, u64::MAX)
            }
        } else {
            Res::ZERO
        },
        borrow_limit: borrow.map(|b| Res {
            // Unlimited, as a Cluster file's borrowLimit `{gpu: N}` reads.
            ext: [u32::MAX; extended::SLOTS],
            ..Res::new(b, u64::MAX / 4, u64::MAX / 4)
        }),
        quota_pools: None,
    }
}

/// `nodes` nodes of 4 GPU, 32 CPU, 256Gi in one on-demand pool.
fn cluster(nodes: usize, teams: Vec<Team>) -> Cluster {
    Cluster {
        pools: vec![pool("a100", "a", false)],
        nodes: (0..nodes)
            .map(|_| Node {
                pool: 0,
                capacity: Res::new(4, 32_000, 256 * GI),
            })
            .collect(),
        teams,
    }
}

fn job(id: u64, team: usize, workers: u32, gpu: u64) -> Job {
    Job {
        id,
        team,
        priority: 100,
        workers,
        per_worker: Res::new(gpu, 1000, GI),
        interruptible: false,
        checkpointed: true,
        flavor: None,
        submitted: id,
        estimate: None,
    }
}

fn admitted(d: &[Decision]) -> BTreeMap<u64, Vec<usize>> {
    d.iter()
        .filter_map(|x| match x {
            Decision::Admit { job, nodes } => Some((*job, nodes.clone())),
            _ => None,
        })
        .collect()
}

/// The steps preempted to make room for step `id`.
fn victims_for(d: &[Decision], id: u64) -> Vec<u64> {
    d.iter()
        .filter_map(|x| match x {
            Decision::Preempt { victim, job } if *job == id => Some(*victim),
            _ => None,
        })
        .collect()
}

fn reason(d: &[Decision], id: u64) -> String {
    d.iter()
        .find_map(|x| match x {
            Decision::Wait { job, reason } if *job == id => Some(reason.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_gang_starts_whole_or_not_at_all() {
    // 2 nodes x 4 GPU; 2 GPUs already taken on node 0: a 2 x 4 GPU gang cannot start.
    let c = cluster(2, vec![team("vision", 1.0, 0, None)]);
    let running = vec![Running {
        job: job(1, 0, 1, 2),
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let d = cycle(&c, &running, &[job(2, 0, 2, 4)], &Settings::default());
    assert!(admitted(&d).is_empty(), "{d:?}");
    let why = reason(&d, 2);
    assert!(why.contains("gang of 2 x (4 GPU"), "{why}");
    assert!(why.contains("free room for 1 of 2"), "{why}");
    // Once it ends, the gang takes both nodes.
    let d = cycle(&c, &[], &[job(2, 0, 2, 4)], &Settings::default());
    let mut nodes = admitted(&d)[&2].clone();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![0, 1]);
}

#[test]
fn binpack_keeps_a_whole_node_free_for_a_big_gang() {
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    // Four 1-GPU steps, one after the other: all on the same node.
    let mut running = Vec::new();
    for id in 1..=4 {
        let d = cycle(&c, &running, &[job(id, 0, 1, 1)], &Settings::default());
        let nodes = admitted(&d)[&id].clone();
        running.push(Running {
            job: job(id, 0, 1, 1),
            nodes,
            started: id,
            work_at_risk: 0,
        });
    }
    let used: BTreeSet<usize> = running.iter().flat_map(|r| r.nodes.clone()).collect();
    assert_eq!(used.len(), 1, "{running:?}");
    // So a 4-GPU step still fits.
    let d = cycle(&c, &running, &[job(9, 0, 1, 4)], &Settings::default());
    assert!(admitted(&d).contains_key(&9));
    // Spread would have used both nodes.
    let spread = Settings {
        placement: Placement::Spread,
        ..Settings::default()
    };
    let d = cycle(&c, &running[..1], &[job(5, 0, 1, 1)], &spread);
    assert_ne!(admitted(&d)[&5], running[0].nodes);
}

#[test]
fn weighted_fair_share_splits_idle_capacity_by_weight() {
    // 12 GPUs, no quotas; vision weighs 2, nlp 1; both queue many 1-GPU steps.
    let c = cluster(
        3,
        vec![team("vision", 2.0, 0, None), team("nlp", 1.0, 0, None)],
    );
    let waiting: Vec<Job> = (0..40).map(|i| job(i, (i % 2) as usize, 1, 1)).collect();
    let d = cycle(&c, &[], &waiting, &Settings::default());
    let a = admitted(&d);
    let vision = a.keys().filter(|id| **id % 2 == 0).count();
    let nlp = a.keys().filter(|id| **id % 2 == 1).count();
    assert_eq!((vision, nlp), (8, 4));
}

#[test]
fn a_borrower_with_a_quota_of_its_own_gives_back_only_what_it_borrowed() {
    // nlp's quota is 4 GPUs (CPU and memory unnamed: unlimited) and it holds all 8 with two
    // 4-GPU steps; vision (quota 4) waits for 4. One of nlp's steps is borrowed: that one
    // goes, and nlp keeps its quota.
    let c = cluster(
        2,
        vec![team("vision", 1.0, 4, None), team("nlp", 1.0, 4, None)],
    );
    let running: Vec<Running> = (0..2)
        .map(|i| Running {
            job: job(10 + i, 1, 1, 4),
            nodes: vec![i as usize],
            started: i,
            work_at_risk: i,
        })
        .collect();
    let later = Settings {
        now: 3600,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[job(1, 0, 1, 4)], &later);
    let victims = victims_for(&d, 1);
    assert_eq!(victims.len(), 1, "{d:?}");
    // With only its quota's worth running, nlp keeps it.
    let d = cycle(&c, &running[..1], &[job(1, 0, 2, 4)], &later);
    assert!(
        !d.iter().any(|x| matches!(x, Decision::Preempt { .. })),
        "{d:?}"
    );
}

#[test]
fn reclaim_in_the_cycle_a_gang_took_a_team_past_its_quota_leaves_it_its_quota() {
    // Found by `fair_share_respects_limits_and_reclaims_only_borrowed` with a random seed (the
    // case proptest shrank to, written out). t0 (quota 6 GPU, borrow limit 5) runs a 2-GPU
    // step on the only on-demand node and a 0-GPU one on spot; t1 (quota 4) runs nothing.
    // In one cycle t1's 2-GPU spot step starts, then t0, below its quota, goes first and its
    // 2 x 3 GPU spot gang starts, taking it to 8 GPU: 2 borrowed. t1's 2 x 1 GPU on-demand
    // gang is under t1's quota and only fits where t0's old step runs: that step is reclaimed,
    // and t0 ends the cycle with its 6 GPU, its whole quota. (The property had counted t0's
    // holdings without the gang it was admitted in the same cycle.)
    let mut c = cluster(
        0,
        vec![team("t0", 3.0, 6, Some(5)), team("t1", 2.0, 4, None)],
    );
    c.pools = vec![pool("on-demand", "a", false), pool("spot", "b", true)];
    c.nodes = [(1, 5), (1, 3), (0, 3), (1, 2), (1, 1)]
        .into_iter()
        .map(|(pool, gpu)| Node {
            pool,
            capacity: Res::new(gpu, 16_000 * gpu, 64 * GI * gpu),
        })
        .collect();
    let step = |id: u64, team: usize, workers: u32, gpu: u64, prio: i64, spot: bool| Job {
        priority: prio,
        interruptible: spot,
        ..job(id, team, workers, gpu)
    };
    let running = vec![
        Running {
            job: step(0, 0, 1, 0, 0, true),
            nodes: vec![4],
            started: 1190,
            work_at_risk: 0,
        },
        Running {
            job: step(1, 0, 1, 2, 0, false),
            nodes: vec![2],
            started: 1,
            work_at_risk: 1,
        },
    ];
    let queue = vec![
        step(1000, 1, 2, 1, 0, false),
        step(1001, 1, 1, 2, 100, true),
        step(1002, 0, 2, 3, 0, true),
    ];
    let s = Settings {
        backfill: false,
        within_team: false,
        starvation_limit: Some(500),
        now: 1200,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &queue, &s);
    assert_eq!(
        d,
        vec![
            Decision::Admit {
                job: 1001,
                nodes: vec![3]
            },
            Decision::Admit {
                job: 1002,
                nodes: vec![1, 0]
            },
            Decision::Preempt {
                victim: 1,
                job: 1000
            },
            Decision::Wait {
                job: 1000,
                reason: "team t1 is under its quota: 1 borrowed step(s) of other teams are being \
                         preempted to make room"
                    .into()
            },
        ]
    );
    assert_eq!(
        d,
        super::reference::cycle_reference(&c, &running, &queue, &s)
    );
    // t0 once step 1 has stopped: step 0 and the gang, its quota exactly.
    assert_eq!(
        running[0].job.demand() + queue[2].demand(),
        Res::new(6, 3000, 3 * GI)
    );
    // Without the gang, t0 holds 2 GPU of its 6, borrows nothing, and keeps its step.
    let d = cycle(&c, &running, &queue[..2], &s);
    assert!(victims_for(&d, 1000).is_empty(), "{d:?}");
}

#[test]
fn a_team_under_quota_reclaims_what_another_borrowed() {
    // 8 GPUs. nlp (no quota) borrowed all 8; vision's quota is 4 and it now waits for 4.
    let c = cluster(
        2,
        vec![team("vision", 1.0, 4, None), team("nlp", 1.0, 0, None)],
    );
    let mut running = Vec::new();
    for (i, node) in [0, 0, 1, 1].into_iter().enumerate() {
        let mut j = job(10 + i as u64, 1, 1, 2);
        j.interruptible = i == 3;
        running.push(Running {
            job: j,
            nodes: vec![node],
            started: i as u64,
            work_at_risk: 100 * i as u64,
        });
    }
    // An hour on: the borrowed steps are older than the grace period.
    let later = Settings {
        now: 3600,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[job(1, 0, 1, 4)], &later);
    let victims = victims_for(&d, 1);
    // Two steps sharing one node are enough, and no more are taken.
    assert_eq!(victims.len(), 2, "{d:?}");
    let nodes: BTreeSet<usize> = running
        .iter()
        .filter(|r| victims.contains(&r.job.id))
        .flat_map(|r| r.nodes.clone())
        .collect();
    assert_eq!(nodes.len(), 1, "{d:?}");
    assert!(reason(&d, 1).contains("under its quota"), "{d:?}");
    // Without reclaim it only waits, saying what its quota holds.
    let no = Settings {
        reclaim: false,
        ..later.clone()
    };
    let d = cycle(&c, &running, &[job(1, 0, 1, 4)], &no);
    assert!(!d.iter().any(|x| matches!(x, Decision::Preempt { .. })));
    assert!(
        reason(&d, 1).contains("holds nothing of its quota 4 GPU"),
        "{d:?}"
    );
    // Within the grace period of their start, borrowed steps are not preempted, and it says so.
    let soon = Settings {
        now: 20,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[job(1, 0, 1, 4)], &soon);
    assert!(
        !d.iter().any(|x| matches!(x, Decision::Preempt { .. })),
        "{d:?}"
    );
    assert!(
        reason(&d, 1).contains("started less than the grace period (30s) ago"),
        "{d:?}"
    );
}

#[test]
fn the_best_victim_is_the_interruptible_checkpointed_one() {
    // One node of 4 GPUs, borrowed by nlp with two 2-GPU steps; vision needs 2.
    let c = cluster(
        1,
        vec![team("vision", 1.0, 2, None), team("nlp", 1.0, 0, None)],
    );
    let mut spot = job(11, 1, 1, 2);
    spot.interruptible = true;
    let running = vec![
        Running {
            job: job(10, 1, 1, 2),
            nodes: vec![0],
            started: 0,
            work_at_risk: 0,
        },
        Running {
            job: spot,
            nodes: vec![0],
            started: 1,
            work_at_risk: 500,
        },
    ];
    let later = Settings {
        now: 3600,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[job(1, 0, 1, 2)], &later);
    assert_eq!(d[0], Decision::Preempt { victim: 11, job: 1 }, "{d:?}");
    assert_eq!(d.len(), 2, "{d:?}");
}

#[test]
fn a_higher_priority_step_preempts_a_lower_one_of_its_team_only() {
    let c = cluster(
        1,
        vec![team("vision", 1.0, 0, None), team("nlp", 1.0, 0, None)],
    );
    let mut low = job(10, 0, 1, 4);
    low.priority = 0;
    let running = vec![Running {
        job: low,
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let later = Settings {
        now: 3600,
        ..Settings::default()
    };
    let mut prod = job(1, 0, 1, 4);
    prod.priority = 1000;
    let d = cycle(&c, &running, std::slice::from_ref(&prod), &later);
    assert_eq!(d[0], Decision::Preempt { victim: 10, job: 1 }, "{d:?}");
    // Another team's production step does not preempt across teams (nothing is borrowed
    // beyond a quota here: neither team has one).
    let mut other = prod.clone();
    other.team = 1;
    let d = cycle(&c, &running, &[other], &later);
    assert!(
        !d.iter().any(|x| matches!(x, Decision::Preempt { .. })),
        "{d:?}"
    );
    // withinTeam: never.
    let never = Settings {
        within_team: false,
        ..later.clone()
    };
    let d = cycle(&c, &running, std::slice::from_ref(&prod), &never);
    assert!(
        !d.iter().any(|x| matches!(x, Decision::Preempt { .. })),
        "{d:?}"
    );
    // A step that started less than a grace period ago is not preempted.
    let soon = Settings {
        now: 29,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[prod], &soon);
    assert!(
        !d.iter().any(|x| matches!(x, Decision::Preempt { .. })),
        "{d:?}"
    );
    assert!(reason(&d, 1).contains("grace period (30s)"), "{d:?}");
}

#[test]
fn a_borrow_limit_caps_a_team() {
    let c = cluster(4, vec![team("vision", 1.0, 2, Some(2))]);
    let waiting: Vec<Job> = (0..8).map(|i| job(i, 0, 1, 1)).collect();
    let d = cycle(&c, &[], &waiting, &Settings::default());
    assert_eq!(admitted(&d).len(), 4);
    assert!(reason(&d, 7).contains("at its limit"), "{d:?}");
}

#[test]
fn interruptible_pools_take_only_interruptible_steps_and_those_prefer_them() {
    let mut c = cluster(1, vec![team("t", 1.0, 0, None)]);
    c.pools.push(pool("spot", "b", true));
    c.nodes.push(Node {
        pool: 1,
        capacity: Res::new(4, 32_000, 256 * GI),
    });
    let mut spot = job(1, 0, 1, 1);
    spot.interruptible = true;
    let d = cycle(&c, &[], &[spot, job(2, 0, 1, 1)], &Settings::default());
    let a = admitted(&d);
    assert_eq!(a[&1], vec![1]);
    assert_eq!(a[&2], vec![0]);
    let d = cycle(&c, &[], &[job(3, 0, 2, 4)], &Settings::default());
    assert!(
        admitted(&d).is_empty(),
        "an on-demand gang never lands on spot"
    );
}

/// `acrossTeams: {below: default}`: another team's production (or default) step preempts
/// best-effort steps held within that team's quota, never its default or production work,
/// and only once they have run a grace period; without the setting it waits.
#[test]
fn across_teams_production_displaces_other_teams_best_effort_only() {
    // Two nodes of 4 GPUs; team 0 holds both within its quota of 8.
    let c = cluster(2, vec![team("b", 1.0, 8, None), team("a", 1.0, 4, None)]);
    let run = |id: u64, prio: i64, node: usize, started: u64| {
        let mut j = job(id, 0, 1, 2);
        j.priority = prio;
        Running {
            job: j,
            nodes: vec![node],
            started,
            work_at_risk: 0,
        }
    };
    // Node 0: a best-effort and a default step; node 1: two best-effort, one young.
    let running = vec![
        run(1, 0, 0, 0),
        run(2, 100, 0, 0),
        run(3, 0, 1, 0),
        run(4, 0, 1, 990),
    ];
    let mut urgent = job(10, 1, 1, 4);
    urgent.priority = 1000;
    let mut settings = Settings {
        now: 1000,
        ..Settings::default()
    };
    let d = cycle(&c, &running, std::slice::from_ref(&urgent), &settings);
    assert!(victims_for(&d, 10).is_empty(), "{d:?}");
    assert!(!reason(&d, 10).contains("acrossTeams"), "{d:?}");
    settings.across_below = Some(100);
    let d = cycle(&c, &running, std::slice::from_ref(&urgent), &settings);
    // Node 1 is free of the default step; of its two best-effort steps, one started less than a
    // grace period ago: nothing is preempted yet, and it says why.
    assert!(victims_for(&d, 10).is_empty(), "{d:?}");
    let why = reason(&d, 10);
    assert!(
        why.contains("lower-class steps of other teams") && why.contains("grace period"),
        "{why}"
    );
    // Later, both best-effort steps on node 1 go; the default step on node 0 never does.
    settings.now = 2000;
    let d = cycle(&c, &running, std::slice::from_ref(&urgent), &settings);
    let mut victims = victims_for(&d, 10);
    victims.sort_unstable();
    assert_eq!(victims, vec![3, 4], "{d:?}");
    assert!(reason(&d, 10).ends_with("(acrossTeams)"), "{d:?}");
    // A default step of team a may too (best-effort is below both), a best-effort one not.
    let mut plain = urgent.clone();
    plain.priority = 100;
    let d = cycle(&c, &running, &[plain.clone()], &settings);
    assert_eq!(victims_for(&d, 10).len(), 2, "{d:?}");
    plain.priority = 0;
    let d = cycle(&c, &running, &[plain], &settings);
    assert!(victims_for(&d, 10).is_empty(), "{d:?}");
    // Nor may anything preempt another team's production or default work.
    let mut prod = running.clone();
    for r in &mut prod {
        r.job.priority = 100;
    }
    let d = cycle(&c, &prod, std::slice::from_ref(&urgent), &settings);
    assert!(victims_for(&d, 10).is_empty(), "{d:?}");
}
