//! The optimised cycle against the reference copy of the cycle as it was before (reference.rs).

use super::*;

proptest! {
    #![proptest_config(cases(1000))]

    /// Every decision, reason and order is the reference cycle's, under every policy,
    /// placement and switch.
    #[test]
    fn the_cycle_decides_exactly_as_the_reference_cycle(
        (c, running, queue, settings) in arb_state(),
        variant in 0u8..24,
    ) {
        let mut s = settings.clone();
        prop_assert_eq!(
            cycle(&c, &running, &queue, &s),
            super::reference::cycle_reference(&c, &running, &queue, &s)
        );
        s.policy = [Policy::Fair, Policy::Priority, Policy::Fifo][usize::from(variant % 3)];
        s.backfill = variant % 2 == 0;
        s.within_team = variant % 4 < 2;
        s.reclaim = variant % 8 < 4;
        s.grace = if variant >= 12 { 0 } else { 30 };
        s.across_below = [None, Some(100), Some(200)][usize::from(variant / 3 % 3)];
        prop_assert_eq!(
            cycle(&c, &running, &queue, &s),
            super::reference::cycle_reference(&c, &running, &queue, &s)
        );
    }
}

proptest! {
    #![proptest_config(cases(300))]

    /// With `explain` off (the simulator) every decision is the same but the reasons, which
    /// are all "waiting": explaining never changes what is decided.
    #[test]
    fn explaining_changes_only_the_reasons(
        (c, running, queue, settings) in arb_state(),
        variant in 0u8..8,
    ) {
        let mut s = settings.clone();
        s.policy = [Policy::Fair, Policy::Priority, Policy::Fifo][usize::from(variant % 3)];
        s.grace = if variant < 4 { 30 } else { 0 };
        let told = cycle(&c, &running, &queue, &s);
        s.explain = false;
        let quiet = cycle(&c, &running, &queue, &s);
        let plain: Vec<Decision> = told
            .into_iter()
            .map(|d| match d {
                Decision::Wait { job, .. } => Decision::Wait { job, reason: "waiting".into() },
                d => d,
            })
            .collect();
        prop_assert_eq!(quiet, plain);
    }
}

/// A larger seeded state: zones, flavors, spot pools, teams with quotas and borrow limits,
/// priorities, running steps of every age, thousands of waiting steps.
fn big_state(
    seed: u64,
    nodes: usize,
    teams: usize,
    waiting: usize,
) -> (Cluster, Vec<Running>, Vec<Job>) {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut pools = vec![
        pool("a100-a", "a", false),
        pool("a100-b", "b", false),
        pool("h100-a", "a", false),
        pool("spot-b", "b", true),
        pool("spot-c", "c", true),
    ];
    pools[0].labels.insert("gpu".into(), "a100".into());
    pools[1].labels.insert("gpu".into(), "a100".into());
    pools[2].labels.insert("gpu".into(), "h100".into());
    pools[3].labels.insert("gpu".into(), "a100".into());
    pools[4].labels.insert("gpu".into(), "h100".into());
    let c = Cluster {
        pools,
        nodes: (0..nodes)
            .map(|_| {
                let gpu = [4u64, 8][rng.random_range(0..2)];
                Node {
                    pool: rng.random_range(0..5),
                    capacity: Res::new(gpu, 12_000 * gpu, 80 * GI * gpu),
                }
            })
            .collect(),
        teams: (0..teams)
            .map(|i| {
                let q = [0u64, 4, 8, 16][rng.random_range(0..4)];
                let b = [None, Some(8), Some(32)][rng.random_range(0..3)];
                team(
                    &format!("t{i}"),
                    f64::from(rng.random_range(1u32..=5)),
                    q,
                    b,
                )
            })
            .collect(),
    };
    let flavors = [
        None,
        Some("a100"),
        Some("h100"),
        Some("spot-c"),
        Some("tpu"),
    ];
    let make = |id: u64, rng: &mut rand_pcg::Pcg64| {
        let mut j = job(
            id,
            rng.random_range(0..teams),
            [1u32, 1, 1, 2, 4, 8][rng.random_range(0..6)],
            [0u64, 1, 1, 2, 4, 8][rng.random_range(0..6)],
        );
        j.per_worker.millicpu = j.per_worker.gpu * 8_000 + 1000;
        j.priority = [0i64, 100, 100, 200][rng.random_range(0..4)];
        j.interruptible = rng.random_range(0..3) == 0;
        j.checkpointed = rng.random_range(0..2) == 0;
        j.flavor = flavors[rng.random_range(0..5)].map(str::to_owned);
        j.submitted = rng.random_range(0..2000);
        j
    };
    // Running: placed by a first cycle on the empty cluster.
    let first: Vec<Job> = (0..(nodes as u64 * 2)).map(|i| make(i, &mut rng)).collect();
    let d = cycle(&c, &[], &first, &Settings::default());
    let a = admitted(&d);
    let running: Vec<Running> = first
        .into_iter()
        .filter_map(|j| {
            let nodes = a.get(&j.id)?.clone();
            Some(Running {
                started: 1900 + j.id % 120,
                work_at_risk: j.id % 13,
                job: j,
                nodes,
            })
        })
        .collect();
    let queue = (0..waiting as u64)
        .map(|i| make(100_000 + i, &mut rng))
        .collect();
    (c, running, queue)
}

#[test]
fn a_large_cycle_decides_exactly_as_the_reference_cycle() {
    for (seed, nodes, teams, waiting) in
        [(1, 300, 100, 3000), (2, 200, 100, 2000), (3, 400, 50, 4000)]
    {
        let (c, running, queue) = big_state(seed, nodes, teams, waiting);
        for policy in [Policy::Fair, Policy::Priority, Policy::Fifo] {
            for (variant, starvation) in [(0u8, None), (1, Some(500)), (2, Some(1500)), (3, None)] {
                let s = Settings {
                    policy,
                    placement: if variant % 2 == 0 {
                        Placement::Binpack
                    } else {
                        Placement::Spread
                    },
                    backfill: variant != 3,
                    reclaim: true,
                    within_team: variant != 2,
                    across_below: [None, Some(100), None, Some(200)][usize::from(variant)],
                    starvation_limit: starvation,
                    grace: if variant == 1 { 0 } else { 30 },
                    now: 2020,
                    unit_ms: 1000,
                    explain: true,
                };
                let d = cycle(&c, &running, &queue, &s);
                assert_eq!(
                    d,
                    super::reference::cycle_reference(&c, &running, &queue, &s),
                    "seed {seed} {policy:?} variant {variant}"
                );
            }
        }
    }
}
