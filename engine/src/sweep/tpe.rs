//! Tree-structured Parzen Estimator, multivariate: one joint density over all parameters, as
//! Optuna's `TPESampler(multivariate=True)` models it.
//!
//! After `startup` random trials, the observations are split into the best `gamma` share
//! ("below", at most 25) and the rest ("above"). Each side is a mixture with one component
//! per observation plus a broad prior component; a component is a product over parameters of
//! a truncated normal (numeric, in internal coordinates) or a smoothed one-hot distribution
//! (categorical). `candidates` points are drawn from the "below" mixture and the one with the
//! highest `log l(x) - log g(x)` is proposed. Bandwidths come from the distances between
//! neighbouring observations, as Optuna 5 computes them (see
//! [`mixture::neighbour_sigmas`]).
//!
//! Departures from Optuna: inside the "below" group, better trials weigh more (see
//! [`rank_weights`]); the "above" group keeps Optuna's weights (older trials weigh less).
//! Categorical parameters are tried evenly during the random startup trials (see
//! [`stratify_choices`]), and each observation's categorical kernel keeps more weight on the
//! other choices (see [`CHOICE_PRIOR`]), so that a choice first tried with poor values of the
//! other parameters is tried again near the good ones.
//!
//! Proposals are a pure function of the seed, the trial's number and the observations given,
//! so a sweep resumed after a crash proposes what it would have.

mod mixture;
#[cfg(test)]
mod tests;

use rand::{RngExt, SeedableRng};

use super::space::{self, Param, Point, Space, Value};
use mixture::{Mixture, age_weights, rank_weights};

/// TPE's settings, with the defaults of the sweep contract (`startupTrials` 10, `candidates`
/// 24, `gamma` 0.25).
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub startup: usize,
    pub candidates: usize,
    pub gamma: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            startup: 10,
            candidates: 24,
            gamma: DEFAULT_GAMMA,
        }
    }
}

/// The fraction of finished trials that form the "good" density (at most 25 trials).
pub const DEFAULT_GAMMA: f64 = 0.25;

/// How fast weights fall with rank inside the "good" group: the `r`-th best of `n` weighs
/// `exp(-RANK_DECAY * r / n)` (see [`rank_weights`]).
const RANK_DECAY: f64 = 4.0;

const PRIOR_WEIGHT: f64 = 1.0;

/// The prior weight in each observation's categorical kernel, spread evenly over the choices;
/// the observation's own choice adds 1. With 3 choices the kernel gives its own choice 0.44
/// and each other 0.28; with 8, 0.27 and 0.10. (The mixture's prior component is still
/// uniform and weighs [`PRIOR_WEIGHT`].)
///
/// Why: TPE's joint density only learns that a choice is good where it has seen it with good
/// values of the other parameters. With a weight of 1, a good trial's kernel gave its own
/// choice 0.67 of 3, so once a few good trials shared a choice, candidates with another one
/// scored lower and were hardly ever proposed: on the log-lr function (`adamw` is 0.3 better
/// whatever `lr` is) about one seed in twenty never tried `adamw` near the good `lr` again
/// after the startup trials (the best used it on 380 of seeds 1000..1399, 375 of 2000..2399,
/// 377 of 3000..3399). With 5, and the startup trials stratified: 399, 399 and 400, and 100
/// of seeds 0..99, the mean best -0.2991 against Optuna's -0.2960. The other categorical
/// functions tried (an 8-way choice moving a float's optimum, four 4-way choices with an
/// interaction, a graded 5-way choice, a log float with an int and a 5-way choice) were as
/// good or better at 50 and 200 trials. Weights 2 to 12 were tried (docs/benchmarks.md).
/// Spaces without categorical parameters are unchanged.
const CHOICE_PRIOR: f64 = 5.0;

/// One finished trial: its parameters and its objective value, as a value to minimize.
#[derive(Clone, Debug)]
pub struct Observation {
    pub point: Point,
    pub loss: f64,
}

/// The proposal for trial `number` (from 1) given the finished trials.
pub fn propose(
    space: &Space,
    settings: &Settings,
    seed: u64,
    number: u64,
    history: &[Observation],
) -> Point {
    // One stream per trial: the proposal does not depend on how many numbers earlier
    // proposals happened to draw.
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed ^ number.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let usable: Vec<&Observation> = history.iter().filter(|o| o.loss.is_finite()).collect();
    if usable.len() < settings.startup.max(2) {
        let mut point = space::sample(space, &mut rng);
        stratify_choices(space, seed, number, &mut point);
        return point;
    }
    let params: Vec<(&String, &Param)> = space.iter().collect();
    // Internal coordinates, once per observation (in the order the trials came).
    let coords: Vec<Vec<f64>> = usable
        .iter()
        .map(|o| {
            // Points and the space are both in name order: walk them together.
            let mut values = o.point.iter().peekable();
            params
                .iter()
                .map(|(name, p)| {
                    while values.peek().is_some_and(|(k, _)| k < name) {
                        values.next();
                    }
                    match values.peek() {
                        Some((k, v)) if k == name => p.coordinate(v),
                        _ => 0.0,
                    }
                })
                .collect()
        })
        .collect();
    let n_below = ((settings.gamma * usable.len() as f64).ceil() as usize)
        .clamp(1, 25)
        .min(usable.len() - 1);
    // "Below": the best `n_below` in rank order (a tie goes to the earlier trial), weighted
    // by rank; only they need sorting, not all 10,000 trials of a long sweep. "Above": the
    // rest in the trials' order, so that Optuna's weights apply to age (older trials weigh
    // less), not to rank.
    let by_loss = |a: &usize, b: &usize| usable[*a].loss.total_cmp(&usable[*b].loss).then(a.cmp(b));
    let mut order: Vec<usize> = (0..usable.len()).collect();
    order.select_nth_unstable_by(n_below, by_loss);
    let mut below: Vec<usize> = order[..n_below].to_vec();
    below.sort_unstable_by(by_loss);
    let mut is_below = vec![false; usable.len()];
    for i in &below {
        is_below[*i] = true;
    }
    let above: Vec<usize> = (0..usable.len()).filter(|i| !is_below[*i]).collect();
    let pick = |idx: &[usize]| {
        idx.iter()
            .map(|i| coords[*i].as_slice())
            .collect::<Vec<_>>()
    };
    let l = Mixture::fit(&params, &pick(&below), rank_weights(below.len()));
    let g = Mixture::fit(&params, &pick(&above), age_weights(above.len()));
    let candidates: Vec<Vec<f64>> = (0..settings.candidates.max(1))
        .map(|_| l.sample(&mut rng))
        .collect();
    let (below_pdf, above_pdf) = (l.log_pdf(&candidates), g.log_pdf(&candidates));
    let mut best: Option<(f64, usize)> = None;
    for (i, (lx, gx)) in below_pdf.iter().zip(&above_pdf).enumerate() {
        let score = lx - gx;
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, i));
        }
    }
    let x = best
        .and_then(|(_, i)| candidates.get(i).cloned())
        .unwrap_or_default();
    params
        .iter()
        .zip(x)
        .map(|((name, p), xi)| ((*name).clone(), p.value_at(xi)))
        .collect()
}

/// A random trial's categorical values, stratified: trials `k*b + 1 ..= k*b + k` of a
/// `k`-way parameter try each of its choices once, in an order shuffled per block `b` (and per
/// parameter, so that parameters are not paired). So the 10 startup trials try each of 3
/// choices 3 or 4 times, where with independent draws a given choice was missing from one
/// sweep in 60 and came up at most twice in 3 sweeps in 10. Numeric values stay the uniform
/// draws they were (the same numbers as before this was added).
///
/// A pure function of the seed and the trial's number, like the rest of a proposal: which
/// trials ended, failed or are still running does not change it.
fn stratify_choices(space: &Space, seed: u64, number: u64, point: &mut Point) {
    let index = number.saturating_sub(1);
    for (d, (name, p)) in space.iter().enumerate() {
        let Param::Categorical { values } = p else {
            continue;
        };
        let k = values.len();
        if k < 2 {
            continue;
        }
        let block = index / k as u64;
        let mut rng = rand_pcg::Pcg64::seed_from_u64(
            seed ^ block.wrapping_add(1).wrapping_mul(0xbf58_476d_1ce4_e5b9)
                ^ (d as u64)
                    .wrapping_add(1)
                    .wrapping_mul(0x94d0_49bb_1331_11eb),
        );
        let mut order: Vec<usize> = (0..k).collect();
        for i in (1..k).rev() {
            order.swap(i, rng.random_range(0..=i));
        }
        let choice = order[(index % k as u64) as usize];
        point.insert(name.clone(), p.value_at(choice as f64));
    }
}

/// The best loss of a space's points under `f`, for tests and benchmarks: runs `n`
/// sequential trials of `propose` (TPE) or of uniform draws (`random`).
pub fn best_of(
    space: &Space,
    settings: &Settings,
    seed: u64,
    n: u64,
    random: bool,
    f: impl Fn(&Point) -> f64,
) -> f64 {
    best_trial(space, settings, seed, n, random, f).map_or(f64::INFINITY, |o| o.loss)
}

/// The best trial (its point and loss) of `n` sequential trials, as [`best_of`] runs them; the
/// earliest of equal ones. None when `n` is 0. (`best_of` is its loss, infinite for none.)
pub fn best_trial(
    space: &Space,
    settings: &Settings,
    seed: u64,
    n: u64,
    random: bool,
    f: impl Fn(&Point) -> f64,
) -> Option<Observation> {
    let mut history: Vec<Observation> = Vec::new();
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    for number in 1..=n {
        let point = if random {
            space::sample(space, &mut rng)
        } else {
            propose(space, settings, seed, number, &history)
        };
        let loss = f(&point);
        history.push(Observation { point, loss });
    }
    // A NaN loss (a trial without a value) is never the best while another has one.
    history.into_iter().reduce(|best, o| {
        if o.loss < best.loss || (best.loss.is_nan() && !o.loss.is_nan()) {
            o
        } else {
            best
        }
    })
}

/// A value's number (ints and floats), for objective functions.
pub fn num(p: &Point, name: &str) -> f64 {
    match p.get(name) {
        Some(Value::Float(f)) => *f,
        Some(Value::Int(i)) => *i as f64,
        _ => f64::NAN,
    }
}
