//! A sweep's search space: typed parameters, and the internal coordinates the algorithms
//! work in (a log scale becomes linear in log space; a step becomes a grid to round to).

use std::collections::BTreeMap;

use rand::RngExt;

/// One searched parameter: the validated spec's type, with what algorithms need of it.
pub use crate::spec::model::SweepParam as Param;

/// A parameter's value as a trial sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Float(f64),
    Int(i64),
    Choice(String),
}

impl Value {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Float(f) => serde_json::json!(f),
            Value::Int(i) => serde_json::json!(i),
            Value::Choice(s) => serde_json::json!(s),
        }
    }
}

/// The space: parameters by name (in name order, so that proposals do not depend on the
/// order of a file).
pub type Space = BTreeMap<String, Param>;

/// Proposed values, by parameter name.
pub type Point = BTreeMap<String, Value>;

impl Param {
    /// The interval the algorithms see for a numeric parameter: log-transformed when on a
    /// log scale; ints are widened by half a step at each end so that each integer gets an
    /// equal share.
    pub fn bounds(&self) -> Option<(f64, f64)> {
        match self {
            Param::Float { min, max, log, .. } => Some(if *log {
                (min.ln(), max.ln())
            } else {
                (*min, *max)
            }),
            Param::Int {
                min,
                max,
                log,
                step,
            } => {
                let half = *step as f64 / 2.0;
                Some(if *log {
                    ((*min as f64 - 0.5).max(0.5).ln(), (*max as f64 + 0.5).ln())
                } else {
                    (*min as f64 - half, *max as f64 + half)
                })
            }
            Param::Categorical { .. } => None,
        }
    }

    /// The value at internal coordinate `x` (clamped, rounded to the parameter's grid).
    pub fn value_at(&self, x: f64) -> Value {
        match self {
            Param::Float {
                min,
                max,
                log,
                step,
            } => {
                let v = if *log { x.exp() } else { x };
                let v = match step {
                    Some(s) if *s > 0.0 => min + ((v - min) / s).round() * s,
                    _ => v,
                };
                Value::Float(v.clamp(*min, *max))
            }
            Param::Int {
                min,
                max,
                log,
                step,
            } => {
                let v = if *log { x.exp() } else { x };
                let k = ((v - *min as f64) / *step as f64).round() as i64;
                Value::Int((min + k * step).clamp(*min, *max))
            }
            Param::Categorical { values } => {
                let i = (x.max(0.0) as usize).min(values.len().saturating_sub(1));
                Value::Choice(values.get(i).cloned().unwrap_or_default())
            }
        }
    }

    /// The internal coordinate of a value (the inverse of [`Param::value_at`]).
    pub fn coordinate(&self, v: &Value) -> f64 {
        match (self, v) {
            (Param::Float { log, .. }, Value::Float(f)) => {
                if *log {
                    f.ln()
                } else {
                    *f
                }
            }
            (Param::Int { log, .. }, Value::Int(i)) => {
                if *log {
                    (*i as f64).ln()
                } else {
                    *i as f64
                }
            }
            (Param::Categorical { values }, Value::Choice(c)) => {
                values.iter().position(|x| x == c).unwrap_or(0) as f64
            }
            _ => 0.0,
        }
    }

    /// A uniform draw (uniform in log space on a log scale).
    pub fn sample(&self, rng: &mut impl rand::Rng) -> Value {
        match self {
            Param::Categorical { values } => {
                let i = rng.random_range(0..values.len().max(1));
                self.value_at(i as f64)
            }
            _ => {
                let (lo, hi) = self.bounds().unwrap_or((0.0, 1.0));
                self.value_at(lo + rng.random::<f64>() * (hi - lo))
            }
        }
    }
}

/// A uniform draw of every parameter.
pub fn sample(space: &Space, rng: &mut impl rand::Rng) -> Point {
    space
        .iter()
        .map(|(name, p)| (name.clone(), p.sample(rng)))
        .collect()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn draws_honour_bounds_scale_and_step() {
        let mut rng = rand_pcg::Pcg64::seed_from_u64(7);
        let lr = Param::Float {
            min: 1e-5,
            max: 1e-1,
            log: true,
            step: None,
        };
        let drop = Param::Float {
            min: 0.0,
            max: 0.5,
            log: false,
            step: Some(0.1),
        };
        let layers = Param::Int {
            min: 2,
            max: 8,
            log: false,
            step: 1,
        };
        let mut small = 0;
        let mut seen_layers = std::collections::BTreeSet::new();
        for _ in 0..4000 {
            let Value::Float(v) = lr.sample(&mut rng) else {
                panic!("a float")
            };
            assert!((1e-5..=1e-1).contains(&v));
            if v < 1e-3 {
                small += 1;
            }
            let Value::Float(d) = drop.sample(&mut rng) else {
                panic!("a float")
            };
            assert!(((d * 10.0).round() - d * 10.0).abs() < 1e-9 && (0.0..=0.5).contains(&d));
            let Value::Int(l) = layers.sample(&mut rng) else {
                panic!("an int")
            };
            seen_layers.insert(l);
        }
        // Log scale: half the draws fall in the lower two of four decades.
        assert!((1700..2300).contains(&small), "{small}");
        assert_eq!(seen_layers, (2..=8).collect());
    }
}
