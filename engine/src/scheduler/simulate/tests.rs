use super::*;
use crate::scheduler::cluster::{Node, Pool, Res, Team};

const GI: u64 = 1 << 30;

/// `nodes` nodes of `gpu` GPUs, one pool, one team without a quota.
pub(super) fn lab(nodes: usize, gpu: u64) -> Cluster {
    Cluster {
        pools: vec![Pool {
            name: "a".into(),
            interruptible: false,
            labels: BTreeMap::new(),
        }],
        nodes: (0..nodes)
            .map(|_| Node {
                pool: 0,
                capacity: Res::new(gpu, 32_000, 256 * GI),
            })
            .collect(),
        teams: vec![Team {
            name: "t".into(),
            weight: 1.0,
            quota: Res::ZERO,
            borrow_limit: None,
            quota_pools: None,
        }],
    }
}

pub(super) fn sim(id: u64, submitted: u64, workers: u32, gpu: u64, duration: u64) -> SimJob {
    SimJob {
        job: Job {
            id,
            team: 0,
            priority: 100,
            workers,
            per_worker: Res::new(gpu, 1000, GI),
            interruptible: false,
            checkpointed: false,
            flavor: None,
            submitted,
            estimate: None,
        },
        duration,
        checkpoint_every: None,
    }
}

#[test]
fn jobs_that_never_start_wait_until_the_replay_stops() {
    // One 4-GPU node: a 1-GPU job runs 0..100; a gang of 2 x 4 GPUs can never be placed.
    let c = lab(1, 4);
    let jobs = vec![sim(0, 0, 1, 1, 100), sim(1, 10, 2, 4, 50)];
    for policy in [admission::Policy::Fair, admission::Policy::Fifo] {
        let settings = Settings {
            policy,
            ..Settings::default()
        };
        let r = run(&c, &jobs, &settings, |_, _| {});
        assert_eq!(r.never_started, 1, "{policy:?}: {r:?}");
        assert_eq!(r.stopped_at, 100, "{policy:?}: {r:?}");
        // The gang waited from 10 until the replay stopped at 100.
        assert_eq!(waits(&r, &jobs, |_| true), vec![0, 90], "{policy:?}");
    }
}

#[test]
fn fragmentation_is_the_share_of_free_gpus_too_split_for_the_largest_waiting_worker() {
    // Two 4-GPU nodes. Two 3-GPU jobs run 0..100, one per node (binpack: 1 GPU is left on
    // each); a 4-GPU job waits for them. 0..100: 2 GPUs free, both fragmented.
    // 100..200: the 4-GPU job runs, 4 GPUs free, nothing waits, nothing fragmented.
    let c = lab(2, 4);
    let jobs = vec![
        sim(0, 0, 1, 3, 100),
        sim(1, 0, 1, 3, 100),
        sim(2, 0, 1, 4, 100),
    ];
    let r = run(&c, &jobs, &Settings::default(), |_, _| {});
    assert_eq!(r.makespan, 200, "{r:?}");
    assert_eq!(r.free_gpu_seconds, 2 * 100 + 4 * 100);
    assert_eq!(r.fragmented_gpu_seconds, 2 * 100);
    assert!((r.fragmentation - 1.0 / 3.0).abs() < 1e-12);
    // A 1-GPU job waiting instead (behind a quota, say) would find no fragmentation:
    // every free GPU fits it. With nothing waiting, nothing is fragmented.
    let r = run(&c, &jobs[..2], &Settings::default(), |_, _| {});
    assert_eq!(r.fragmented_gpu_seconds, 0);
    assert_eq!(r.fragmentation, 0.0);
}

#[test]
fn the_series_records_gpus_held_and_jobs_waiting() {
    let c = lab(2, 4);
    let jobs = vec![
        sim(0, 0, 1, 3, 100),
        sim(1, 0, 1, 3, 100),
        sim(2, 0, 1, 4, 100),
    ];
    let r = run(&c, &jobs, &Settings::default(), |_, _| {});
    let p = r.series.points(r.stopped_at);
    assert_eq!(p[0].gpus, 6.0);
    assert_eq!(p[0].queue, 1.0);
    assert_eq!(p.last().map(|p| (p.gpus, p.queue)), Some((4.0, 0.0)));
}

#[test]
fn jain_is_lower_when_one_team_is_served_first() {
    // One 4-GPU node, two teams of weight 1 without quotas; team 0 submits twelve 1-GPU
    // jobs at 0, team 1 four at 1, each 100 s. `priority` (one queue by age) runs team 0
    // first: it holds the whole node while backlogged (0..200), team 1 nothing while
    // backlogged (1..300): index 1/2. `fair` gives team 1 half the node from 100 on: team
    // 0 (100 x 1 + 200 x 0.5) / 300 = 2/3 over 0..300, team 1 (100 x 0.5) / 199 over
    // 1..200: index about 0.83.
    let mut c = lab(1, 4);
    c.teams.push(Team {
        name: "u".into(),
        weight: 1.0,
        quota: Res::ZERO,
        borrow_limit: None,
        quota_pools: None,
    });
    let mut jobs = Vec::new();
    for k in 0..16u64 {
        let mut j = sim(k, u64::from(k >= 12), 1, 1, 100);
        j.job.team = usize::from(k >= 12);
        jobs.push(j);
    }
    let at = |policy| {
        let settings = Settings {
            policy,
            ..Settings::default()
        };
        run(&c, &jobs, &settings, |_, _| {})
    };
    let (unfair, fair) = (at(admission::Policy::Priority), at(admission::Policy::Fair));
    assert_eq!(unfair.makespan, 400);
    assert_eq!(fair.makespan, 400);
    assert!((unfair.jain_fairness - 0.5).abs() < 1e-9, "{unfair:?}");
    assert_eq!(unfair.backlogged_seconds, vec![200, 299]);
    assert_eq!(fair.backlogged_seconds, vec![300, 199], "{fair:?}");
    let expected = {
        let x = [2.0 / 3.0, 50.0 / 199.0];
        (x[0] + x[1]) * (x[0] + x[1]) / (2.0 * (x[0] * x[0] + x[1] * x[1]))
    };
    assert!((fair.jain_fairness - expected).abs() < 1e-9, "{fair:?}");
    assert!(fair.jain_fairness > 0.8);
    // Over completed GPU-hours (the old definition) both would score 1.
    assert_eq!(jain(&[1.0, 1.0]), 1.0);
    assert_eq!(jain(&[2.0]), 1.0);
}
