//! The search algorithms: what trial `number` (from 1) tries, given the seed and the finished
//! trials. Each is a pure function of those, so a sweep resumed after a crash proposes what an
//! uninterrupted one would have.

use rand::SeedableRng;

use super::space::{self, Param, Point, Space, Value};
use super::tpe::{self, Observation};

/// An algorithm and its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum Algorithm {
    Grid,
    Random,
    Sobol,
    Tpe(tpe::Settings),
}

/// Why a space cannot be searched with an algorithm.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpaceError {
    #[error("grid search needs a step for float parameter '{0}' (step: 0.1, say)")]
    GridNeedsStep(String),
    #[error("the grid has more than {max} points ({points}); narrow it or use random search")]
    GridTooLarge { points: u128, max: u64 },
}

/// Every value of one parameter on a grid, in order.
fn grid_values(name: &str, p: &Param) -> Result<Vec<Value>, SpaceError> {
    Ok(match p {
        Param::Categorical { values } => values.iter().cloned().map(Value::Choice).collect(),
        Param::Int { min, max, step, .. } => {
            let step = (*step).max(1);
            (0..=((max - min) / step))
                .map(|k| Value::Int(min + k * step))
                .collect()
        }
        Param::Float { min, max, step, .. } => {
            let Some(step) = step.filter(|s| *s > 0.0) else {
                return Err(SpaceError::GridNeedsStep(name.to_owned()));
            };
            let n = ((max - min) / step + 1e-9).floor() as u64;
            (0..=n)
                .map(|k| Value::Float(min + k as f64 * step))
                .collect()
        }
    })
}

/// How many points the grid has (checked up to `max`).
pub fn grid_size(space: &Space, max: u64) -> Result<u64, SpaceError> {
    let mut points: u128 = 1;
    for (name, p) in space {
        points = points.saturating_mul(grid_values(name, p)?.len() as u128);
    }
    if points > u128::from(max) {
        return Err(SpaceError::GridTooLarge { points, max });
    }
    Ok(points as u64)
}

/// The proposal for trial `number`, or None when a grid is exhausted.
pub fn propose(
    algorithm: &Algorithm,
    space: &Space,
    seed: u64,
    number: u64,
    history: &[Observation],
) -> Result<Option<Point>, SpaceError> {
    let index = number.saturating_sub(1);
    Ok(Some(match algorithm {
        Algorithm::Grid => {
            // Mixed radix over the parameters in name order, the last one varying fastest.
            let axes: Vec<(&String, Vec<Value>)> = space
                .iter()
                .map(|(n, p)| grid_values(n, p).map(|v| (n, v)))
                .collect::<Result<_, _>>()?;
            let total: u128 = axes.iter().map(|(_, v)| v.len() as u128).product();
            if u128::from(index) >= total {
                return Ok(None);
            }
            let mut rest = u128::from(index);
            let mut point = Point::new();
            for (name, values) in axes.iter().rev() {
                let k = values.len() as u128;
                point.insert((*name).clone(), values[(rest % k) as usize].clone());
                rest /= k;
            }
            point
        }
        Algorithm::Random => {
            let mut rng =
                rand_pcg::Pcg64::seed_from_u64(seed ^ number.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            space::sample(space, &mut rng)
        }
        Algorithm::Sobol => {
            // Owen-scrambled Sobol points, one dimension per parameter in name order.
            let scramble = (seed ^ (seed >> 32)) as u32;
            space
                .iter()
                .enumerate()
                .map(|(d, (name, p))| {
                    let u = f64::from(sobol_burley::sample(
                        u32::try_from(index).unwrap_or(u32::MAX),
                        u32::try_from(d).unwrap_or(0),
                        scramble,
                    ));
                    let x = match p {
                        Param::Categorical { values } => (u * values.len() as f64).floor(),
                        _ => {
                            let (lo, hi) = p.bounds().unwrap_or((0.0, 1.0));
                            lo + u * (hi - lo)
                        }
                    };
                    (name.clone(), p.value_at(x))
                })
                .collect()
        }
        Algorithm::Tpe(settings) => tpe::propose(space, settings, seed, number, history),
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn space() -> Space {
        [
            (
                "dropout".to_owned(),
                Param::Float {
                    min: 0.0,
                    max: 0.5,
                    log: false,
                    step: Some(0.1),
                },
            ),
            (
                "layers".to_owned(),
                Param::Int {
                    min: 2,
                    max: 8,
                    log: false,
                    step: 2,
                },
            ),
            (
                "opt".to_owned(),
                Param::Categorical {
                    values: vec!["adam".into(), "sgd".into()],
                },
            ),
        ]
        .into()
    }

    fn key(p: &Point) -> String {
        format!("{p:?}")
    }

    #[test]
    fn grid_visits_exactly_the_grid() {
        let space = space();
        // 6 dropouts x 4 layer counts x 2 optimizers.
        assert_eq!(grid_size(&space, 1000), Ok(48));
        let mut seen = BTreeSet::new();
        let mut layers = BTreeSet::new();
        let mut dropouts = BTreeSet::new();
        for n in 1..=48 {
            let p = propose(&Algorithm::Grid, &space, 0, n, &[])
                .expect("a grid")
                .expect("a point");
            assert!(seen.insert(key(&p)), "point {n} repeats");
            if let Some(Value::Int(l)) = p.get("layers") {
                layers.insert(*l);
            }
            if let Some(Value::Float(d)) = p.get("dropout") {
                dropouts.insert((d * 10.0).round() as i64);
            }
        }
        assert_eq!(propose(&Algorithm::Grid, &space, 0, 49, &[]), Ok(None));
        // 48 distinct points of a 48-point grid: exactly the grid.
        assert_eq!(layers, [2, 4, 6, 8].into());
        assert_eq!(dropouts, (0..=5).collect());
        let no_step: Space = [(
            "lr".to_owned(),
            Param::Float {
                min: 0.0,
                max: 1.0,
                log: false,
                step: None,
            },
        )]
        .into();
        assert_eq!(
            grid_size(&no_step, 10),
            Err(SpaceError::GridNeedsStep("lr".into()))
        );
    }

    #[test]
    fn random_and_sobol_are_deterministic_per_seed_and_cover_the_space() {
        let space = space();
        for alg in [Algorithm::Random, Algorithm::Sobol] {
            let a: Vec<String> = (1..=64)
                .map(|n| {
                    key(&propose(&alg, &space, 5, n, &[])
                        .expect("ok")
                        .expect("a point"))
                })
                .collect();
            let b: Vec<String> = (1..=64)
                .map(|n| {
                    key(&propose(&alg, &space, 5, n, &[])
                        .expect("ok")
                        .expect("a point"))
                })
                .collect();
            assert_eq!(a, b, "{alg:?}: same seed, same proposals");
            let c: Vec<String> = (1..=64)
                .map(|n| {
                    key(&propose(&alg, &space, 6, n, &[])
                        .expect("ok")
                        .expect("a point"))
                })
                .collect();
            assert_ne!(a, c, "{alg:?}: another seed, other proposals");
            // 64 draws over 48 grid points reach most of them.
            let distinct: BTreeSet<&String> = a.iter().collect();
            assert!(distinct.len() >= 30, "{alg:?}: {} distinct", distinct.len());
        }
    }

    #[test]
    fn sobol_spreads_points_more_evenly_than_random() {
        // The largest empty gap among the first 64 points of a 1-D float: Sobol's is about
        // 1/64, random's several times larger.
        let space: Space = [(
            "x".to_owned(),
            Param::Float {
                min: 0.0,
                max: 1.0,
                log: false,
                step: None,
            },
        )]
        .into();
        let gap = |alg: &Algorithm| {
            let mut xs: Vec<f64> = (1..=64)
                .map(|n| {
                    match propose(alg, &space, 9, n, &[])
                        .expect("ok")
                        .expect("a point")
                        .get("x")
                    {
                        Some(Value::Float(f)) => *f,
                        _ => f64::NAN,
                    }
                })
                .collect();
            xs.sort_by(f64::total_cmp);
            xs.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max)
        };
        let (s, r) = (gap(&Algorithm::Sobol), gap(&Algorithm::Random));
        assert!(s < 0.04 && s < r, "sobol {s}, random {r}");
    }
}
