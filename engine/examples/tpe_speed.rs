//! TPE proposal time with many observations, for `bench/tpe_speed.sh`.
//!
//! `tpe_speed [OBSERVATIONS]` (default 10,000): a 7-parameter space (six floats, one
//! categorical), that many finished trials with random values, then 25 proposals; prints the
//! median and the slowest in milliseconds.

use std::time::Instant;

use rand::{RngExt, SeedableRng};
use sluice_engine::sweep::space::{self, Param, Space};
use sluice_engine::sweep::tpe::{self, Observation, Settings};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut space: Space = (1..=6)
        .map(|i| {
            (
                format!("x{i}"),
                Param::Float {
                    min: 0.0,
                    max: 1.0,
                    log: i == 1,
                    step: None,
                },
            )
        })
        .collect();
    if let Some(Param::Float { min, .. }) = space.get_mut("x1") {
        *min = 1e-5;
    }
    space.insert(
        "opt".into(),
        Param::Categorical {
            values: vec!["adam".into(), "sgd".into(), "adamw".into()],
        },
    );
    let mut rng = rand_pcg::Pcg64::seed_from_u64(1);
    let history: Vec<Observation> = (0..n)
        .map(|_| Observation {
            point: space::sample(&space, &mut rng),
            loss: rng.random::<f64>(),
        })
        .collect();
    let mut times: Vec<f64> = (0..25)
        .map(|k| {
            let t = Instant::now();
            let p = tpe::propose(&space, &Settings::default(), 7, n as u64 + 1 + k, &history);
            assert_eq!(p.len(), space.len());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "observations={n} median_ms={:.2} max_ms={:.2}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
