//! The simulator: the same cycle, event after event.

use super::*;

pub(super) fn arb_workload(n_teams: usize) -> impl Strategy<Value = Vec<simulate::SimJob>> {
    prop::collection::vec(
        (
            0..n_teams,
            1u32..=4,
            0u64..=4,
            any::<bool>(),
            0i64..3,
            0u64..500,
            1u64..300,
            prop::option::of(1u64..100),
        ),
        0..30,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, (team, workers, gpu, inter, prio, submit, duration, ckpt))| {
                    let mut j = job(i as u64, team, workers, gpu);
                    j.interruptible = inter;
                    j.priority = prio * 100;
                    j.submitted = submit;
                    j.checkpointed = ckpt.is_some();
                    simulate::SimJob {
                        job: j,
                        duration,
                        checkpoint_every: ckpt,
                    }
                },
            )
            .collect()
    })
}

proptest! {
    #![proptest_config(cases(200))]

    /// At every event: no node over capacity, every running gang whole. Every job that fits
    /// the empty cluster ends. The same workload gives the same report.
    #[test]
    fn a_simulated_workload_keeps_the_promises_at_every_event(
        (c, jobs, backfill, starve) in arb_cluster().prop_flat_map(|c| {
            let n = c.teams.len();
            (Just(c), arb_workload(n), any::<bool>(), prop::option::of(0u64..400))
        })
    ) {
        let settings = Settings { backfill, starvation_limit: starve, ..Settings::default() };
        // A step no pool could ever hold, or larger than its team may ever hold, is refused at
        // submission (as `lint --cluster` does for pools).
        let empty: Vec<Res> = c.nodes.iter().map(|n| n.capacity).collect();
        let jobs: Vec<simulate::SimJob> = jobs
            .into_iter()
            .filter(|j| placement::place(&c, &empty, &j.job, Placement::Binpack).is_some())
            .filter(|j| c.teams[j.job.team].ceiling().is_none_or(|m| j.job.demand().fits_in(m)))
            .collect();
        let mut broken: Option<String> = None;
        let report = simulate::run(&c, &jobs, &settings, |now, running| {
            let mut used = vec![Res::ZERO; c.nodes.len()];
            for r in running {
                if r.nodes.len() != r.job.workers as usize {
                    broken.get_or_insert(format!("t={now}: job {} runs partly", r.job.id));
                }
                for &n in &r.nodes {
                    used[n] += r.job.per_worker;
                }
            }
            for (n, node) in c.nodes.iter().enumerate() {
                if !used[n].fits_in(node.capacity) {
                    broken.get_or_insert(format!("t={now}: node {n} holds {} of {}", used[n], node.capacity));
                }
            }
        });
        prop_assert!(broken.is_none(), "{}", broken.unwrap_or_default());
        for j in &jobs {
            prop_assert!(report.jobs[&j.job.id].end.is_some(), "job {} never ended", j.job.id);
        }
        prop_assert_eq!(&report, &simulate::run(&c, &jobs, &settings, |_, _| {}));
        prop_assert!(report.gpu_utilization <= 1.0 + 1e-9);
    }
}

#[test]
fn fair_share_backfills_where_a_strict_queue_idles() {
    // 2 nodes x 4 GPU. A 2 x 4-GPU gang waits behind a 1-GPU job; small jobs keep arriving.
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    let mut jobs = vec![simulate::SimJob {
        job: job(0, 0, 1, 1),
        duration: 100,
        checkpoint_every: None,
    }];
    let mut gang = job(1, 0, 2, 4);
    gang.submitted = 1;
    jobs.push(simulate::SimJob {
        job: gang,
        duration: 100,
        checkpoint_every: None,
    });
    for i in 2..20 {
        let mut j = job(i, 0, 1, 1);
        j.submitted = 2;
        jobs.push(simulate::SimJob {
            job: j,
            duration: 50,
            checkpoint_every: None,
        });
    }
    let strict = Settings {
        backfill: false,
        ..Settings::default()
    };
    let a = simulate::run(&c, &jobs, &strict, |_, _| {});
    let b = simulate::run(&c, &jobs, &Settings::default(), |_, _| {});
    assert!(b.gpu_utilization > a.gpu_utilization, "{a:?}\n{b:?}");
    assert!(b.makespan <= a.makespan);
    assert_eq!(simulate::quantile(&[1, 2, 3, 4], 0.5), Some(2));
    assert!((simulate::jain(&[1.0, 1.0]) - 1.0).abs() < 1e-12);
    assert!((simulate::jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
}

#[test]
fn pod_by_pod_fifo_deadlocks_where_gang_admission_does_not() {
    // 2 nodes x 4 GPU; two 2 x 4-GPU gangs submitted together. Pod by pod, each gang gets
    // one node and waits forever for the other; admitted whole, they run one after the other.
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    let jobs: Vec<simulate::SimJob> = (1..=2)
        .map(|id| {
            let mut j = job(id, 0, 2, 4);
            j.submitted = 0;
            simulate::SimJob {
                job: j,
                duration: 100,
                checkpoint_every: None,
            }
        })
        .collect();
    let fifo = Settings {
        policy: Policy::Fifo,
        ..Settings::default()
    };
    let stuck = simulate::run(&c, &jobs, &fifo, |_, _| {});
    assert_eq!(stuck.deadlocks, 1, "{stuck:?}");
    assert!(stuck.jobs.values().all(|o| o.end.is_none()));
    let fair = simulate::run(&c, &jobs, &Settings::default(), |_, _| {});
    assert_eq!(fair.deadlocks, 0);
    assert_eq!(fair.makespan, 200);
    assert!((fair.gpu_utilization - 1.0).abs() < 1e-9, "{fair:?}");
}
