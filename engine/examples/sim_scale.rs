//! A large replay, for `bench/simulate_scale.sh`.
//!
//! `sim_scale [JOBS] [LOAD] [POLICY] [MAX_WORKERS] [STARVATION_S] [ESTIMATE]` (defaults
//! 1,000,000, 0.85, fair, 8, none, none): 1,250 nodes x 8 GPUs (10,000 GPUs), 1,000 teams with
//! a 10-GPU quota each, and JOBS jobs from the seeded generator: Poisson arrivals at the rate
//! that offers LOAD x the cluster's GPUs, 1-8 workers (1-16 with MAX_WORKERS 16: issue 18's
//! workload) of 1-8 GPUs, log-normal durations (median 30 min); STARVATION_S sets
//! `starvationLimit` (`none` for none); ESTIMATE `Nx` gives each job an estimate of N times its
//! duration (a timeout set with that much slack), for EASY backfill. Prints one
//! line of `key=value`: jobs, events, cycles, wall seconds (generation and replay apart), peak
//! RSS (VmHWM) and the replay's utilization.

use std::collections::BTreeMap;
use std::time::Instant;

use sluice_engine::scheduler::simulate;
use sluice_engine::scheduler::workload::{Dist, Generate};
use sluice_engine::scheduler::{Cluster, Node, Policy, Pool, Res, Settings, Team};

const GI: u64 = 1 << 30;

/// The allocator the `sluice` binary uses (engine/src/main.rs), so that the cycle is timed as
/// the engine runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let load: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.85);
    let policy = match args.next().as_deref() {
        Some("fifo") => Policy::Fifo,
        Some("priority") => Policy::Priority,
        _ => Policy::Fair,
    };
    let cluster = Cluster {
        pools: vec![Pool {
            name: "a100".into(),
            interruptible: false,
            labels: BTreeMap::new(),
        }],
        nodes: (0..1250)
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
    let max_workers: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(8);
    let starvation: Option<u64> = args.next().and_then(|a| a.parse().ok());
    let slack: Option<f64> = args
        .next()
        .and_then(|a| a.strip_suffix('x').and_then(|n| n.parse().ok()));
    let workers = if max_workers >= 16 {
        vec![(1, 0.70), (2, 0.15), (4, 0.08), (8, 0.05), (16, 0.02)]
    } else {
        vec![(1, 0.70), (2, 0.15), (4, 0.10), (8, 0.05)]
    };
    let gpu = vec![(1, 0.50), (2, 0.20), (4, 0.15), (8, 0.15)];
    let mean = |v: &[(u64, f64)]| v.iter().map(|(x, w)| *x as f64 * w).sum::<f64>();
    let (median, sigma) = (1800.0, 1.0);
    // Log-normal mean: median * e^(sigma^2 / 2).
    let gpu_seconds_per_job = mean(&workers) * mean(&gpu) * median * (sigma * sigma / 2.0f64).exp();
    let spec = Generate {
        seed: 1,
        jobs,
        mean_interarrival: gpu_seconds_per_job / (load * 10_000.0),
        // Team sizes vary: weights 1..=10.
        teams: (0..1000).map(|t| (t, 1.0 + (t % 10) as f64)).collect(),
        workers: Dist::Choice(workers),
        gpu: Dist::Choice(gpu),
        millicpu_per_gpu: 8000,
        memory_per_gpu: 64 * GI,
        duration: Dist::LogNormal { median, sigma },
        priorities: Vec::new(),
        interruptible: 0.0,
        checkpoint_every: Some(900),
    };
    let t0 = Instant::now();
    let mut workload = spec.jobs(100);
    if let Some(slack) = slack {
        for j in &mut workload {
            j.job.estimate = Some((j.duration as f64 * slack).ceil() as u64);
        }
    }
    let generated = t0.elapsed().as_secs_f64();
    let settings = Settings {
        policy,
        starvation_limit: starvation,
        ..Default::default()
    };
    let t1 = Instant::now();
    let report = simulate::run(&cluster, &workload, &settings, |_, _| {});
    let replay = t1.elapsed().as_secs_f64();
    let waits = simulate::waits(&report, &workload, |_| true);
    println!(
        "jobs={} events={} cycles={} generate_s={:.2} replay_s={:.2} peak_rss_mib={} utilization={:.4} fragmentation={:.4} wait_p50_s={} wait_p95_s={} preemptions={} never_started={}",
        workload.len(),
        report.events,
        report.cycles,
        generated,
        replay,
        peak_rss_kib() / 1024,
        report.gpu_utilization,
        report.fragmentation,
        simulate::quantile(&waits, 0.5).unwrap_or(0),
        simulate::quantile(&waits, 0.95).unwrap_or(0),
        report.preemptions,
        report.never_started,
    );
}

/// VmHWM from /proc/self/status, in KiB (0 where there is none).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
