//! Median early stopping (Katib's and Optuna's median rule): stop a trial whose best value so
//! far is worse than the median of the other trials' running averages at the same step.

/// Whether the objective is maximized or minimized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    Maximize,
    Minimize,
}

/// The rule's settings (`earlyStopping` of a sweep).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Median {
    /// Trials that must have reached the step before any is stopped there.
    pub min_trials: usize,
    /// No trial is stopped before this step.
    pub start_step: u64,
}

impl Default for Median {
    fn default() -> Self {
        Median {
            min_trials: 5,
            start_step: 3,
        }
    }
}

/// One trial's observations of the objective: (step, value), in the order reported.
pub type Curve = [(u64, f64)];

/// Whether `trial` should stop now, given the other trials' curves (finished or running).
pub fn should_stop(rule: &Median, goal: Goal, trial: &Curve, others: &[&Curve]) -> bool {
    let Some(&(step, _)) = trial.last() else {
        return false;
    };
    if step < rule.start_step {
        return false;
    }
    let mut averages: Vec<f64> = others
        .iter()
        .filter_map(|curve| {
            let upto: Vec<f64> = curve
                .iter()
                .filter(|(s, v)| *s <= step && v.is_finite())
                .map(|(_, v)| *v)
                .collect();
            // Only trials that have reached this step count.
            let reached = curve.iter().any(|(s, _)| *s >= step);
            (reached && !upto.is_empty()).then(|| upto.iter().sum::<f64>() / upto.len() as f64)
        })
        .collect();
    if averages.len() < rule.min_trials.max(1) {
        return false;
    }
    averages.sort_by(f64::total_cmp);
    let mid = averages.len() / 2;
    let median = if averages.len().is_multiple_of(2) {
        (averages[mid - 1] + averages[mid]) / 2.0
    } else {
        averages[mid]
    };
    let values = trial.iter().map(|(_, v)| *v).filter(|v| v.is_finite());
    match goal {
        Goal::Maximize => values.fold(f64::NEG_INFINITY, f64::max) < median,
        Goal::Minimize => values.fold(f64::INFINITY, f64::min) > median,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(values: &[f64]) -> Vec<(u64, f64)> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as u64 + 1, *v))
            .collect()
    }

    #[test]
    fn a_trial_below_the_median_of_others_is_stopped_after_the_start_step() {
        let rule = Median::default();
        let good: Vec<Vec<(u64, f64)>> = (0..5)
            .map(|k| curve(&[0.5, 0.6, 0.7, 0.75 + k as f64 * 0.01]))
            .collect();
        let others: Vec<&Curve> = good.iter().map(Vec::as_slice).collect();
        let bad = curve(&[0.1, 0.2, 0.3]);
        let fine = curve(&[0.6, 0.7, 0.8]);
        assert!(should_stop(&rule, Goal::Maximize, &bad, &others));
        assert!(!should_stop(&rule, Goal::Maximize, &fine, &others));
        // Before the start step, nothing is stopped.
        assert!(!should_stop(&rule, Goal::Maximize, &bad[..2], &others));
        // Minimizing, the same values are the best ones.
        assert!(!should_stop(&rule, Goal::Minimize, &bad, &others));
    }

    #[test]
    fn too_few_comparable_trials_stop_nothing() {
        let rule = Median::default();
        let few: Vec<Vec<(u64, f64)>> = (0..4).map(|_| curve(&[0.9, 0.9, 0.9])).collect();
        let others: Vec<&Curve> = few.iter().map(Vec::as_slice).collect();
        assert!(!should_stop(
            &rule,
            Goal::Maximize,
            &curve(&[0.1, 0.1, 0.1]),
            &others
        ));
        // Trials that never reached the step do not count.
        let short: Vec<Vec<(u64, f64)>> = (0..6).map(|_| curve(&[0.9])).collect();
        let others: Vec<&Curve> = short.iter().map(Vec::as_slice).collect();
        assert!(!should_stop(
            &rule,
            Goal::Maximize,
            &curve(&[0.1, 0.1, 0.1]),
            &others
        ));
    }
}
