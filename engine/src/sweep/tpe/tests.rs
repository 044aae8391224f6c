//! TPE's quality on Branin, Hartmann-6 and the log-lr function against random search, its
//! stratified startup trials, reproducibility and weights.

use super::mixture::inverse_erf;
use super::*;

fn float(min: f64, max: f64, log: bool) -> Param {
    Param::Float {
        min,
        max,
        log,
        step: None,
    }
}

fn branin_space() -> Space {
    [
        ("x1".to_owned(), float(-5.0, 10.0, false)),
        ("x2".to_owned(), float(0.0, 15.0, false)),
    ]
    .into()
}

fn branin(p: &Point) -> f64 {
    let (x1, x2) = (num(p, "x1"), num(p, "x2"));
    let pi = std::f64::consts::PI;
    let b = 5.1 / (4.0 * pi * pi);
    let c = 5.0 / pi;
    let t = 1.0 / (8.0 * pi);
    (x2 - b * x1 * x1 + c * x1 - 6.0).powi(2) + 10.0 * (1.0 - t) * x1.cos() + 10.0
}

fn hartmann_space() -> Space {
    (1..=6)
        .map(|i| (format!("x{i}"), float(0.0, 1.0, false)))
        .collect()
}

fn hartmann6(p: &Point) -> f64 {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
        [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
        [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
    ];
    let x: Vec<f64> = (1..=6).map(|i| num(p, &format!("x{i}"))).collect();
    -(0..4)
        .map(|i| {
            let s: f64 = (0..6).map(|j| A[i][j] * (x[j] - P[i][j]).powi(2)).sum();
            ALPHA[i] * (-s).exp()
        })
        .sum::<f64>()
}

fn lr_space() -> Space {
    [
        ("lr".to_owned(), float(1e-5, 1e-1, true)),
        (
            "layers".to_owned(),
            Param::Int {
                min: 2,
                max: 8,
                log: false,
                step: 1,
            },
        ),
        (
            "opt".to_owned(),
            Param::Categorical {
                values: vec!["adam".into(), "sgd".into(), "adamw".into()],
            },
        ),
    ]
    .into()
}

fn lr_fn(p: &Point) -> f64 {
    let adamw = matches!(p.get("opt"), Some(Value::Choice(o)) if o == "adamw");
    (num(p, "lr").log10() + 2.5).powi(2) + 0.1 * (num(p, "layers") - 5.0).powi(2)
        - if adamw { 0.3 } else { 0.0 }
}

/// Optuna 5.1's multivariate TPE on the same functions, budgets and seeds: the median best
/// of seeds `first..first + 20` for Branin, Hartmann-6 and the log-lr function, as
/// `bench/tpe_vs_optuna.py 20 FIRST` printed them (Optuna is deterministic given a seed).
const OPTUNA_MEDIANS: [(u64, [f64; 3]); 4] = [
    (0, [0.5074, -2.9921, -0.2989]),
    (100, [0.6303, -2.9205, -0.2987]),
    (200, [0.6018, -2.9305, -0.2997]),
    (300, [0.5429, -2.9396, -0.2996]),
];

/// The targets hold on other seed sets too, not only on the one the default test uses,
/// and on each set the median is at least as good as Optuna's (slow: run with
/// `--ignored`). Prints the medians.
#[test]
#[ignore]
fn tpe_reaches_the_targets_on_four_seed_sets() {
    for (first, optuna) in OPTUNA_MEDIANS {
        for (i, (name, space, f, target)) in [
            ("branin", branin_space(), branin as fn(&Point) -> f64, 0.665),
            (
                "hartmann6",
                hartmann_space(),
                hartmann6 as fn(&Point) -> f64,
                -2.81,
            ),
            ("lr", lr_space(), lr_fn as fn(&Point) -> f64, -0.284),
        ]
        .into_iter()
        .enumerate()
        {
            // The target, or Optuna's median where that is better.
            let target = f64::min(target, optuna[i]);
            let mut bests: Vec<f64> = (first..first + 20)
                .map(|seed| best_of(&space, &Settings::default(), seed, 50, false, f))
                .collect();
            bests.sort_by(f64::total_cmp);
            let median = (bests[9] + bests[10]) / 2.0;
            eprintln!(
                "seeds {first}..{}: {name} {median:.4} (Optuna {})",
                first + 19,
                optuna[i]
            );
            assert!(
                median <= target,
                "{name}, seeds from {first}: {median} > {target}"
            );
        }
    }
}

fn median_best(space: &Space, f: fn(&Point) -> f64, random: bool) -> f64 {
    let mut bests: Vec<f64> = (0..20)
        .map(|seed| best_of(space, &Settings::default(), seed, 50, random, f))
        .collect();
    bests.sort_by(f64::total_cmp);
    (bests[9] + bests[10]) / 2.0
}

/// The quality bar of the sweep issue: over 20 seeds at 50 sequential trials, TPE's
/// median best beats random search's, and reaches Optuna-level medians.
#[test]
fn tpe_beats_random_and_reaches_the_targets() {
    for (name, space, f, target) in [
        ("branin", branin_space(), branin as fn(&Point) -> f64, 0.665),
        (
            "hartmann6",
            hartmann_space(),
            hartmann6 as fn(&Point) -> f64,
            -2.81,
        ),
        ("lr", lr_space(), lr_fn as fn(&Point) -> f64, -0.284),
    ] {
        let tpe = median_best(&space, f, false);
        let random = median_best(&space, f, true);
        eprintln!("{name}: tpe {tpe:.4} random {random:.4} target {target}");
        assert!(
            tpe < random,
            "{name}: tpe {tpe} is not better than random {random}"
        );
        assert!(
            tpe <= target,
            "{name}: tpe {tpe} misses the target {target}"
        );
    }
}

/// Optuna 5.1's multivariate TPE on the log-lr function over seeds 0..99 at 50 sequential
/// trials: the median and the mean of each seed's best, as `bench/tpe_vs_optuna.py 100 0
/// lr` printed them (-0.29929 and -0.29596; its best used `adamw` on all 100 seeds).
const OPTUNA_LR_100: (f64, f64) = (-0.2993, -0.2960);

/// The bar for categorical parameters (issue 13): on the log-lr function, where `adamw` is
/// 0.3 better whatever the other parameters are, over seeds 0..99 at 50 sequential trials
/// the best trial uses `adamw` on at least 99 seeds, and the median and mean of the best
/// values are at least as good as Optuna's. Before the stratified startup and the wider
/// categorical kernels, 98 seeds found it (mean -0.2860). Prints the line
/// `bench/tpe_vs_optuna.sh` reads.
#[test]
fn tpe_finds_every_choice_on_99_of_100_seeds() {
    let space = lr_space();
    let mut bests = Vec::new();
    let mut misses = Vec::new();
    for seed in 0..100 {
        let best =
            best_trial(&space, &Settings::default(), seed, 50, false, lr_fn).expect("50 trials");
        if !matches!(best.point.get("opt"), Some(Value::Choice(o)) if o == "adamw") {
            misses.push(seed);
        }
        bests.push(best.loss);
    }
    bests.sort_by(f64::total_cmp);
    let median = (bests[49] + bests[50]) / 2.0;
    let mean = bests.iter().sum::<f64>() / bests.len() as f64;
    let (optuna_median, optuna_mean) = OPTUNA_LR_100;
    eprintln!(
        "lr100: median {median:.4} mean {mean:.4} adamw {}/100 misses {misses:?}",
        100 - misses.len()
    );
    assert!(misses.len() <= 1, "seeds without adamw: {misses:?}");
    assert!(
        median <= optuna_median,
        "median {median} > Optuna's {optuna_median}"
    );
    assert!(mean <= optuna_mean, "mean {mean} > Optuna's {optuna_mean}");
}

/// The best trial of `n` trials run `parallel` at a time, as the engine runs TPE: trial
/// `N` sees the results of trials `1..=N-parallel`.
fn best_in_parallel(space: &Space, seed: u64, n: u64, parallel: u64) -> Observation {
    let mut history: Vec<Observation> = Vec::new();
    for number in 1..=n {
        let seen = number.saturating_sub(parallel) as usize;
        let point = propose(space, &Settings::default(), seed, number, &history[..seen]);
        let loss = lr_fn(&point);
        history.push(Observation { point, loss });
    }
    history
        .into_iter()
        .reduce(|best, o| if o.loss < best.loss { o } else { best })
        .expect("trials")
}

/// The categorical bar on seed sets other than the default test's, sequential and 2 or 3
/// at a time: the best trial uses `adamw` on at least 99% of each set's seeds (slow: run
/// with `--ignored`; the figures in docs/benchmarks.md). Prints each set's median, mean
/// and count.
#[test]
#[ignore]
fn tpe_finds_every_choice_on_other_seed_sets() {
    let space = lr_space();
    for (first, count, parallel) in [
        (100, 100, 1),
        (1000, 400, 1),
        (2000, 400, 1),
        (3000, 400, 1),
        (0, 100, 2),
        (2000, 200, 3),
    ] {
        let mut bests = Vec::new();
        let mut misses = Vec::new();
        for seed in first..first + count {
            let best = best_in_parallel(&space, seed, 50, parallel);
            if !matches!(best.point.get("opt"), Some(Value::Choice(o)) if o == "adamw") {
                misses.push(seed);
            }
            bests.push(best.loss);
        }
        bests.sort_by(f64::total_cmp);
        let n = bests.len();
        let median = (bests[n / 2 - 1] + bests[n / 2]) / 2.0;
        let mean = bests.iter().sum::<f64>() / n as f64;
        eprintln!(
            "seeds {first}..{}, {parallel} at a time: median {median:.4} mean {mean:.4} \
                 adamw {}/{count} misses {misses:?}",
            first + count - 1,
            count as usize - misses.len()
        );
        assert!(
            misses.len() as u64 * 100 <= count,
            "seeds {first}.., {parallel} at a time: without adamw {misses:?}"
        );
    }
}

/// The startup trials try each choice once per block of as many trials as there are
/// choices, in a shuffled order.
#[test]
fn startup_trials_try_every_choice_evenly() {
    let space = lr_space();
    let settings = Settings::default();
    for seed in [0, 42, 7777] {
        let opts: Vec<String> = (1..=9)
            .map(
                |n| match propose(&space, &settings, seed, n, &[]).get("opt") {
                    Some(Value::Choice(o)) => o.clone(),
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        for block in opts.chunks(3) {
            let mut b = block.to_vec();
            b.sort();
            assert_eq!(b, ["adam", "adamw", "sgd"], "seed {seed}: {opts:?}");
        }
        // Not the same order in every block of every seed.
        assert!(
            opts[..3] != opts[3..6] || opts[3..6] != opts[6..9],
            "seed {seed}: {opts:?}"
        );
    }
}

#[test]
fn same_seed_same_proposals() {
    let space = lr_space();
    let a = best_of(&space, &Settings::default(), 3, 30, false, lr_fn);
    let b = best_of(&space, &Settings::default(), 3, 30, false, lr_fn);
    assert_eq!(a.to_bits(), b.to_bits());
}

#[test]
fn rank_weights_fall_with_rank_and_keep_the_prior_share() {
    for n in [1, 2, 5, 13, 25] {
        let w = rank_weights(n);
        assert_eq!(w.len(), n);
        assert!((w.iter().sum::<f64>() - n as f64).abs() < 1e-9, "{n}");
        assert!(w.windows(2).all(|p| p[0] > p[1]), "{n}: {w:?}");
    }
    let w = rank_weights(25);
    assert!((w[24] / w[0] - (-4.0 * 24.0 / 25.0f64).exp()).abs() < 1e-12);
}

#[test]
fn inverse_erf_inverts_erf() {
    for y in [-0.999, -0.5, -0.01, 0.0, 0.3, 0.9, 0.999_999] {
        assert!((libm::erf(inverse_erf(y)) - y).abs() < 1e-9, "{y}");
    }
}
