//! Tree-structured Parzen Estimator, multivariate: one joint density over all parameters, as
//! Optuna's `TPESampler(multivariate=True)` models it.
//!
//! After `startup` random trials, the observations are split into the best `gamma` share
//! ("below", at most 25) and the rest ("above"). Each side is a mixture with one component
//! per observation plus a broad prior component; a component is a product over parameters of
//! a truncated normal (numeric, in internal coordinates) or a smoothed one-hot distribution
//! (categorical). `candidates` points are drawn from the "below" mixture and the one with the
//! highest `log l(x) - log g(x)` is proposed. Bandwidths come from the distances between
//! neighbouring observations, as Optuna 5 computes them (see [`neighbour_sigmas`]).
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

use rand::{RngExt, SeedableRng};

use super::space::{self, Param, Point, Space, Value};

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

/// One dimension of a mixture.
enum Kernel {
    /// Truncated normals on `[lo, hi]`, one `mu` per component, a common `sigma` per
    /// component.
    Numeric {
        lo: f64,
        hi: f64,
        mus: Vec<f64>,
        sigmas: Vec<f64>,
        /// Per component, `ln(sigma * sqrt(2 pi)) + ln(mass inside [lo, hi])`, computed once:
        /// densities are evaluated for every candidate against every component.
        log_norms: Vec<f64>,
    },
    /// Per component, the probability of each choice, and its logarithm.
    Choice {
        probs: Vec<Vec<f64>>,
        log_probs: Vec<Vec<f64>>,
    },
}

struct Mixture {
    weights: Vec<f64>,
    log_weights: Vec<f64>,
    kernels: Vec<Kernel>,
}

/// Optuna's default weights for `n` observations in the trials' order: flat below 25, older
/// ones ramped down from `1/n` above.
fn age_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp = n - 25;
    (0..n)
        .map(|i| {
            if i < ramp {
                1.0 / n as f64 + (1.0 - 1.0 / n as f64) * i as f64 / ramp.max(1) as f64
            } else {
                1.0
            }
        })
        .collect()
}

/// Weights of the "below" group in rank order (best first): `exp(-RANK_DECAY * r / n)`, so
/// that, next to the best, the group's median weighs about 0.14 and its worst about 0.02,
/// whatever the group's size. They are scaled to sum to `n`, so the prior's share stays
/// `1 / (n + 1)` as with equal weights.
///
/// Why: with `gamma` 0.25 and every good trial weighing the same, the "good" density is
/// spread over the best quarter of the trials, and TPE explores too much in 6 dimensions
/// (Hartmann-6 median -2.73 to -2.95 at 50 trials, Optuna's -2.92 to -2.99). Weighting by rank
/// keeps that quarter, so the kernels' widths and what `g` leaves out, but draws candidates
/// mostly near the best few trials. Chosen on seeds 1000..1399, where Hartmann-6's median went
/// from -2.91 to -3.04 with Branin and the log-lr function as good or better (0.44, -0.2999;
/// `gamma` 0.15 without rank weights reached -2.95 and lost on Branin, 0.49). Checked on
/// seeds not used to choose it (the tests' four sets, 2000..2199): Hartmann-6 -3.01 to -3.10,
/// better than Optuna on every set; and on seven other functions (Rosenbrock-4, Ackley-5,
/// Levy-4, ...), better on six and even on one at 50 trials, better or even at 200. Decays
/// from 2 to 12 were tried: greedier was a little better on Hartmann-6 each time; 4 keeps
/// some weight on the whole group. See docs/benchmarks.md.
fn rank_weights(n: usize) -> Vec<f64> {
    let w: Vec<f64> = (0..n)
        .map(|r| (-RANK_DECAY * r as f64 / n as f64).exp())
        .collect();
    let sum: f64 = w.iter().sum();
    w.iter().map(|x| x * n as f64 / sum).collect()
}

impl Mixture {
    /// A mixture over `obs` (internal coordinates) with their `weights`, and the prior.
    fn fit(params: &[(&String, &Param)], obs: &[&[f64]], mut weights: Vec<f64>) -> Mixture {
        let n = obs.len();
        weights.push(PRIOR_WEIGHT);
        let total: f64 = weights.iter().sum();
        weights.iter_mut().for_each(|w| *w /= total);
        let kernels = params
            .iter()
            .enumerate()
            .map(|(dim, (_, p))| {
                let coords: Vec<f64> = obs.iter().map(|o| o[dim]).collect();
                match p {
                    Param::Categorical { values } => {
                        let k = values.len().max(1);
                        let mut probs: Vec<Vec<f64>> = coords
                            .iter()
                            .map(|c| {
                                let mut row = vec![CHOICE_PRIOR / k as f64; k];
                                if let Some(cell) = row.get_mut(*c as usize) {
                                    *cell += 1.0;
                                }
                                let sum: f64 = row.iter().sum();
                                row.iter().map(|v| v / sum).collect()
                            })
                            .collect();
                        probs.push(vec![1.0 / k as f64; k]);
                        let log_probs = probs
                            .iter()
                            .map(|row| row.iter().map(|p| p.ln()).collect())
                            .collect();
                        Kernel::Choice { probs, log_probs }
                    }
                    _ => {
                        let (lo, hi) = p.bounds().unwrap_or((0.0, 1.0));
                        let range = (hi - lo).max(f64::MIN_POSITIVE);
                        let mut mus = coords;
                        mus.push(0.5 * (lo + hi));
                        let min_sigma = range / (1.0 + mus.len() as f64).min(100.0);
                        let mut sigmas = neighbour_sigmas(&mus[..n], lo, hi);
                        sigmas
                            .iter_mut()
                            .for_each(|s| *s = s.clamp(min_sigma, range));
                        sigmas.push(range);
                        let log_norms = mus
                            .iter()
                            .zip(&sigmas)
                            .scan((f64::NAN, 0.0), |last, (mu, sigma)| {
                                // With many trials most kernels share a sigma (the clip's
                                // minimum): take its logarithm once, not once per kernel.
                                if *sigma != last.0 {
                                    *last = (*sigma, log_normal_norm(*sigma));
                                }
                                Some(last.1 + log_mass_inside(*mu, *sigma, lo, hi))
                            })
                            .collect();
                        Kernel::Numeric {
                            lo,
                            hi,
                            mus,
                            sigmas,
                            log_norms,
                        }
                    }
                }
            })
            .collect();
        let log_weights = weights.iter().map(|w| w.ln()).collect();
        Mixture {
            weights,
            log_weights,
            kernels,
        }
    }

    fn sample(&self, rng: &mut impl rand::Rng) -> Vec<f64> {
        let r: f64 = rng.random();
        let mut acc = 0.0;
        let mut c = self.weights.len() - 1;
        for (i, w) in self.weights.iter().enumerate() {
            acc += w;
            if r < acc {
                c = i;
                break;
            }
        }
        self.kernels
            .iter()
            .map(|k| match k {
                Kernel::Numeric {
                    lo,
                    hi,
                    mus,
                    sigmas,
                    ..
                } => truncated_normal(rng, mus[c], sigmas[c], *lo, *hi),
                Kernel::Choice { probs, .. } => {
                    let r: f64 = rng.random();
                    let mut acc = 0.0;
                    let row = &probs[c];
                    let mut pick = row.len().saturating_sub(1);
                    for (i, p) in row.iter().enumerate() {
                        acc += p;
                        if r < acc {
                            pick = i;
                            break;
                        }
                    }
                    pick as f64
                }
            })
            .collect()
    }

    /// The mixture's log density at each of `xs`. One candidate at a time, dimension by
    /// dimension over every component at once (contiguous arrays, no allocation per
    /// component), in one row reused for every candidate: with 10,000 observations this is
    /// most of a proposal's time, and a matrix of every candidate's row (2 MB) cost more in
    /// page faults than its arithmetic.
    fn log_pdf(&self, xs: &[Vec<f64>]) -> Vec<f64> {
        let mut row = vec![0.0; self.weights.len()];
        xs.iter()
            .map(|x| {
                row.copy_from_slice(&self.log_weights);
                for (d, kernel) in self.kernels.iter().enumerate() {
                    let xd = x.get(d).copied().unwrap_or(0.0);
                    match kernel {
                        Kernel::Numeric {
                            mus,
                            sigmas,
                            log_norms,
                            ..
                        } => {
                            for (((a, mu), sigma), norm) in
                                row.iter_mut().zip(mus).zip(sigmas).zip(log_norms)
                            {
                                let z = (xd - mu) / sigma;
                                *a += -0.5 * z * z - norm;
                            }
                        }
                        Kernel::Choice { log_probs, .. } => {
                            let j = xd as usize;
                            for (a, lp) in row.iter_mut().zip(log_probs) {
                                *a += lp.get(j).copied().unwrap_or(-700.0);
                            }
                        }
                    }
                }
                log_sum_exp(&row)
            })
            .collect()
    }
}

/// Each kernel's bandwidth: the larger distance to its neighbours along this dimension (as
/// Optuna's Parzen estimator does, in one dimension or many): wide where observations are
/// sparse, narrow where they cluster. The outermost kernels use their inner neighbour's
/// distance on both sides rather than the distance to the bound (Optuna's
/// `consider_endpoints=False`), which would make them needlessly wide.
fn neighbour_sigmas(mus: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let k = mus.len();
    // (value, index) pairs sorted in place: with 10,000 observations a sort by index
    // through `mus` cost a fifth of a proposal.
    // Sorted by the value's bits made monotonic (integer compares are the cheap ones).
    let key = |x: f64| {
        let bits = x.to_bits();
        if bits >> 63 == 1 {
            !bits
        } else {
            bits | (1 << 63)
        }
    };
    let mut sorted: Vec<(u64, f64, usize)> = mus.iter().map(|&m| (key(m), m, 0)).collect();
    for (i, s) in sorted.iter_mut().enumerate() {
        s.2 = i;
    }
    sorted.sort_unstable_by_key(|s| s.0);
    let sorted: Vec<(f64, usize)> = sorted.into_iter().map(|(_, m, i)| (m, i)).collect();
    let mut sigmas = vec![hi - lo; k];
    for (j, &(mu, i)) in sorted.iter().enumerate() {
        let left = if j == 0 { lo } else { sorted[j - 1].0 };
        let right = if j + 1 == k { hi } else { sorted[j + 1].0 };
        let mut sigma = (mu - left).max(right - mu);
        if k >= 2 && j == 0 {
            sigma = sorted[1].0 - mu;
        } else if k >= 2 && j + 1 == k {
            sigma = mu - sorted[k - 2].0;
        }
        sigmas[i] = sigma;
    }
    sigmas
}

fn log_sum_exp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !m.is_finite() {
        return m;
    }
    // Terms more than 40 below the largest add less than 1e-17 of it; skipping them also
    // skips exp's slow underflow path, which narrow kernels made a tenth of a proposal.
    m + v
        .iter()
        .map(|x| x - m)
        .filter(|d| *d > -40.0)
        .map(f64::exp)
        .sum::<f64>()
        .ln()
}

fn phi(z: f64) -> f64 {
    0.5 * libm::erfc(-z / std::f64::consts::SQRT_2)
}

/// A normal's log normalising constant, `ln(sigma * sqrt(2 pi))`. A truncated normal's log
/// density is `-z^2/2` minus this and minus [`log_mass_inside`].
fn log_normal_norm(sigma: f64) -> f64 {
    (sigma * (2.0 * std::f64::consts::PI).sqrt()).ln()
}

/// The log of the mass of N(mu, sigma) inside `[lo, hi]`.
fn log_mass_inside(mu: f64, sigma: f64, lo: f64, hi: f64) -> f64 {
    let (a, b) = ((lo - mu) / sigma, (hi - mu) / sigma);
    // Beyond 8 sigmas the normal's tail is below 1e-15: no need for erfc.
    let upper = if b > 8.0 { 1.0 } else { phi(b) };
    let lower = if a < -8.0 { 0.0 } else { phi(a) };
    // Most kernels lie wholly inside the bounds: ln(1) is 0, no need for ln.
    if upper == 1.0 && lower == 0.0 {
        return 0.0;
    }
    (upper - lower).max(1e-300).ln()
}

/// A draw from N(mu, sigma) truncated to [lo, hi], by inverting the normal's distribution
/// function between the bounds' probabilities.
fn truncated_normal(rng: &mut impl rand::Rng, mu: f64, sigma: f64, lo: f64, hi: f64) -> f64 {
    let a = phi((lo - mu) / sigma);
    let b = phi((hi - mu) / sigma);
    let u: f64 = rng.random();
    let p = (a + u * (b - a)).clamp(1e-300, 1.0 - 1e-16);
    (mu + sigma * std::f64::consts::SQRT_2 * inverse_erf(2.0 * p - 1.0)).clamp(lo, hi)
}

/// The inverse error function, by Newton's method on `libm::erf` from a close start.
fn inverse_erf(y: f64) -> f64 {
    let y = y.clamp(-1.0 + 1e-15, 1.0 - 1e-15);
    // Giles' approximation as the start.
    let w = -((1.0 - y) * (1.0 + y)).ln();
    let mut x = if w < 5.0 {
        let w = w - 2.5;
        let mut p = 2.810_226_36e-08;
        for c in [
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ] {
            p = c + p * w;
        }
        p * y
    } else {
        let w = w.sqrt() - 3.0;
        let mut p = -0.000_200_214_257;
        for c in [
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ] {
            p = c + p * w;
        }
        p * y
    };
    for _ in 0..2 {
        let err = libm::erf(x) - y;
        x -= err / (2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp());
    }
    x
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

#[cfg(test)]
mod tests {
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
            let best = best_trial(&space, &Settings::default(), seed, 50, false, lr_fn)
                .expect("50 trials");
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
}
