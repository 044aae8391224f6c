//! One scheduling cycle on a large cluster, for `bench/sched_cycle.sh`.
//!
//! `sched_cycle [WAITING]` (default 100,000): 1,250 nodes x 8 GPUs, 1,000 teams with a
//! 10-GPU quota each, half the GPUs held by running steps, WAITING steps queued (seeded mix of
//! 1-8 workers of 1-8 GPUs, so most do not fit); times `admission::cycle` and prints the
//! median and the slowest of the repetitions in milliseconds, with how many were admitted and
//! how many running steps were preempted.

use std::collections::BTreeMap;
use std::time::Instant;

use rand::{RngExt, SeedableRng};
use sluice_engine::scheduler::{Cluster, Decision, Job, Node, Pool, Res, Running, Settings, Team};

const GI: u64 = 1 << 30;

/// The allocator the `sluice` binary uses (engine/src/main.rs), so that the cycle is timed as
/// the engine runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let waiting: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let reps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let nodes = 1250;
    let cluster = Cluster {
        pools: vec![Pool {
            name: "a100".into(),
            interruptible: false,
            labels: BTreeMap::new(),
        }],
        nodes: (0..nodes)
            .map(|_| Node {
                pool: 0,
                capacity: Res::new(8, 96_000, 1000 * GI),
            })
            .collect(),
        teams: (0..1000)
            .map(|t| Team {
                name: format!("team-{t}"),
                weight: 1.0,
                quota: Res::new(10, u64::MAX, u64::MAX),
                borrow_limit: None,
                quota_pools: None,
            })
            .collect(),
    };
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
    let job = |id: u64, team: usize, workers: u32, gpu: u64| Job {
        id,
        team,
        priority: 100,
        workers,
        per_worker: Res::new(gpu, 8000 * gpu, 64 * GI * gpu),
        interruptible: false,
        checkpointed: true,
        flavor: None,
        submitted: id,
        estimate: None,
    };
    // Half the GPUs busy: 4 of 8 on every node, one 4-GPU step each.
    let running: Vec<Running> = (0..nodes)
        .map(|n| Running {
            job: job(n as u64, n % 1000, 1, 4),
            nodes: vec![n],
            started: 0,
            work_at_risk: 0,
        })
        .collect();
    let sizes = [1u64, 2, 4, 8];
    let queue: Vec<Job> = (0..waiting)
        .map(|i| {
            let workers = sizes[rng.random_range(0..4)] as u32;
            let gpu = sizes[rng.random_range(0..4)];
            let mut j = job(nodes as u64 + i, rng.random_range(0..1000), workers, gpu);
            j.submitted = i;
            j
        })
        .collect();
    let settings = Settings {
        now: waiting,
        ..Default::default()
    };
    let mut admitted = 0;
    let mut preempted = 0;
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            let d = sluice_engine::scheduler::cycle(&cluster, &running, &queue, &settings);
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            admitted = d
                .iter()
                .filter(|d| matches!(d, Decision::Admit { .. }))
                .count();
            preempted = d
                .iter()
                .filter(|d| matches!(d, Decision::Preempt { .. }))
                .count();
            ms
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "waiting={waiting} reps={reps} admitted={admitted} preempted={preempted} median_ms={:.2} max_ms={:.2}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
