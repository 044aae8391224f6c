//! Successive halving. ASHA (asynchronous): trials start on the smallest budget, and whenever
//! a worker is free the best `1/eta` of a rung that have not moved on are promoted to the next
//! rung, without waiting for the rung to fill. Hyperband: brackets of synchronous halving,
//! from many trials on small budgets to few on the full one. Either way a promoted trial
//! continues from its own checkpoint with the larger budget.

/// The rungs' budgets: `min`, `min * eta`, ... up to `max` (the last rung is `max`).
pub fn rungs(min: f64, max: f64, eta: u64) -> Vec<f64> {
    let eta = eta.max(2) as f64;
    let mut out = Vec::new();
    let mut r = min.max(f64::MIN_POSITIVE);
    while r < max * (1.0 - 1e-9) {
        out.push(r);
        r *= eta;
    }
    out.push(max);
    out
}

/// One trial's result on one rung, the value to minimize.
#[derive(Clone, Debug, PartialEq)]
pub struct Rung {
    /// Trials that finished this rung: (trial, loss, promoted already).
    pub results: Vec<(u64, f64, bool)>,
}

/// What a free worker should do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// Continue `trial` from its checkpoint up to rung `rung` (index into [`rungs`]).
    Promote { trial: u64, rung: usize },
    /// Start a new trial on the first rung.
    Start,
}

/// ASHA's decision: from the highest rung down, the best not-yet-promoted trial that is in the
/// top `1/eta` of its rung goes up one rung; if none qualifies, a new trial starts.
pub fn next(ladder: &[Rung], eta: u64) -> Next {
    let eta = eta.max(2) as usize;
    for k in (0..ladder.len().saturating_sub(1)).rev() {
        let mut sorted: Vec<&(u64, f64, bool)> = ladder[k].results.iter().collect();
        sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
        let top = sorted.len() / eta;
        if let Some((trial, _, _)) = sorted.iter().take(top).find(|(_, _, promoted)| !promoted) {
            return Next::Promote {
                trial: *trial,
                rung: k + 1,
            };
        }
    }
    Next::Start
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};

    use super::*;

    #[test]
    fn rungs_grow_by_eta_up_to_the_maximum() {
        assert_eq!(rungs(1.0, 81.0, 3), vec![1.0, 3.0, 9.0, 27.0, 81.0]);
        assert_eq!(rungs(2.0, 50.0, 3), vec![2.0, 6.0, 18.0, 50.0]);
    }

    #[test]
    fn promotes_the_top_third_without_waiting_for_the_rung_to_fill() {
        let mut ladder = vec![Rung { results: vec![] }; 3];
        ladder[0].results = vec![(1, 0.9, false), (2, 0.5, false)];
        // Two results: the top third is empty, so a new trial starts.
        assert_eq!(next(&ladder, 3), Next::Start);
        ladder[0].results.push((3, 0.7, false));
        // Three: the best (trial 2) moves up.
        assert_eq!(next(&ladder, 3), Next::Promote { trial: 2, rung: 1 });
        ladder[0].results[1].2 = true;
        assert_eq!(next(&ladder, 3), Next::Start);
    }

    /// The sweep issue's bar, on simulated learning curves: a trial's loss after `e` epochs is
    /// `q + (1 - q) * exp(-e / tau)`, where `q` (its final loss) and `tau` (how slowly it
    /// learns) come from its parameters. ASHA, given a third of the epochs full random search
    /// spends on 30 trials of 81 epochs, finds a final loss at least as good, in most seeds.
    #[test]
    fn asha_matches_random_search_on_a_third_of_the_epochs() {
        let loss = |q: f64, tau: f64, e: f64| q + (1.0 - q) * (-e / tau).exp();
        let draw = |rng: &mut rand_pcg::Pcg64| -> (f64, f64) {
            (rng.random::<f64>(), 5.0 + 20.0 * rng.random::<f64>())
        };
        let ladder_budgets = rungs(1.0, 81.0, 3);
        let mut wins = 0;
        for seed in 0..20u64 {
            // Full random search: 30 trials trained to 81 epochs.
            let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
            let random_best = (0..30)
                .map(|_| {
                    let (q, tau) = draw(&mut rng);
                    loss(q, tau, 81.0)
                })
                .fold(f64::INFINITY, f64::min);
            let budget = 30.0 * 81.0 / 3.0;
            // ASHA, one worker, until it has spent a third of those epochs.
            let mut rng = rand_pcg::Pcg64::seed_from_u64(seed + 1000);
            let mut ladder = vec![Rung { results: vec![] }; ladder_budgets.len()];
            let mut trials: Vec<(f64, f64)> = Vec::new();
            let mut spent = 0.0;
            let mut best = f64::INFINITY;
            while spent < budget {
                let (trial, rung) = match next(&ladder, 3) {
                    Next::Start => {
                        trials.push(draw(&mut rng));
                        spent += ladder_budgets[0];
                        (trials.len() as u64 - 1, 0)
                    }
                    Next::Promote { trial, rung } => {
                        if let Some(r) = ladder[rung - 1].results.iter_mut().find(|r| r.0 == trial)
                        {
                            r.2 = true;
                        }
                        // Continues from its checkpoint: only the extra epochs are spent.
                        spent += ladder_budgets[rung] - ladder_budgets[rung - 1];
                        (trial, rung)
                    }
                };
                let (q, tau) = trials[trial as usize];
                let l = loss(q, tau, ladder_budgets[rung]);
                ladder[rung].results.push((trial, l, false));
                if rung == ladder_budgets.len() - 1 {
                    best = best.min(l);
                }
            }
            if best <= random_best + 1e-9 {
                wins += 1;
            }
        }
        eprintln!("asha wins {wins} of 20");
        assert!(
            wins >= 14,
            "ASHA matched random search in {wins} of 20 seeds"
        );
    }
}

/// One round of a Hyperband bracket: how many trials run, on what budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Round {
    pub trials: u64,
    pub budget: f64,
}

/// Hyperband's brackets (Li et al., 2018), most exploratory first: bracket `s` starts
/// `ceil((s_max + 1) / (s + 1) * eta^s)` trials on `max / eta^s` and keeps the best
/// `1/eta` of them at each following round, up to `max`.
pub fn hyperband_brackets(min: f64, max: f64, eta: u64) -> Vec<Vec<Round>> {
    let eta_f = eta.max(2) as f64;
    let s_max = ((max / min.max(f64::MIN_POSITIVE)).ln() / eta_f.ln() + 1e-9).floor() as i32;
    (0..=s_max.max(0))
        .rev()
        .map(|s| {
            let n = ((f64::from(s_max + 1) / f64::from(s + 1)) * eta_f.powi(s)).ceil();
            (0..=s)
                .map(|i| Round {
                    trials: (n / eta_f.powi(i)).floor().max(1.0) as u64,
                    budget: max / eta_f.powi(s - i),
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod hyperband_tests {
    use super::*;

    /// The table of the Hyperband paper for R = 81, eta = 3.
    #[test]
    fn brackets_match_the_paper() {
        let b = hyperband_brackets(1.0, 81.0, 3);
        let table: Vec<Vec<(u64, f64)>> = b
            .iter()
            .map(|bracket| bracket.iter().map(|r| (r.trials, r.budget)).collect())
            .collect();
        assert_eq!(
            table,
            vec![
                vec![(81, 1.0), (27, 3.0), (9, 9.0), (3, 27.0), (1, 81.0)],
                vec![(34, 3.0), (11, 9.0), (3, 27.0), (1, 81.0)],
                vec![(15, 9.0), (5, 27.0), (1, 81.0)],
                vec![(8, 27.0), (2, 81.0)],
                vec![(5, 81.0)],
            ]
        );
    }
}
