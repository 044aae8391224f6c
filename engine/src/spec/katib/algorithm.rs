//! The Experiment's `algorithm` and its settings under Katib's names, Hyperband's budgets
//! from its resource parameter, and `medianstop` early stopping.

use super::params::Params;
use super::{ALGORITHMS, KATIB_CANDIDATES, KATIB_ETA, KATIB_STARTUP, number_text, whole};
use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::{EarlyStopping, SweepAlgorithm, SweepParam};
use crate::spec::yaml::Node;

/// The algorithm, and what is only known with the rest of the spec.
pub(super) struct Algorithm {
    pub(super) sweep: SweepAlgorithm,
    /// Katib's `tpe` (hyperopt) draws its first request at random: `n_startup_jobs` is the
    /// number of trials asked for, that is `parallelTrialCount`.
    pub(super) startup_is_parallelism: bool,
    /// Where Hyperband's `resource_name` was written.
    pub(super) resource_pos: Pos,
}

/// What a Katib algorithm setting becomes.
enum Setting {
    Seed,
    Candidates,
    Startup,
    /// hyperopt's `prior_weight`: sluice's TPE weighs its prior as 1, hyperopt's default.
    PriorWeight,
    Resource,
    Eta,
    MaxResource,
    /// A setting Katib reads that sluice cannot honour, and why.
    Refused(&'static str),
}

/// The settings Katib's service for `algorithm` reads, under Katib's names.
fn settings_of(algorithm: &str) -> &'static [(&'static str, Setting)] {
    use Setting::*;
    const SKOPT: &str = "it configures scikit-optimize's Gaussian process, and sluice runs TPE \
                         instead; remove it (and write algorithmName: tpe)";
    const HB_STATE: &str = "sluice makes Hyperband's brackets from r_l and eta alone";
    match algorithm {
        "tpe" => &[
            ("random_state", Seed),
            ("n_EI_candidates", Candidates),
            ("prior_weight", PriorWeight),
            (
                "gamma",
                Refused(
                    "hyperopt's gamma takes ceil(gamma * sqrt(n)) trials as the good ones; \
                     sluice's TPE takes a fixed share of them; remove the setting",
                ),
            ),
        ],
        "multivariate-tpe" => &[
            ("random_state", Seed),
            ("startup_trials", Startup),
            ("ei_candidates", Candidates),
        ],
        "bayesianoptimization" => &[
            ("random_state", Seed),
            ("n_initial_points", Startup),
            ("base_estimator", Refused(SKOPT)),
            ("acq_func", Refused(SKOPT)),
            ("acq_optimizer", Refused(SKOPT)),
        ],
        "hyperband" => &[
            ("resource_name", Resource),
            ("eta", Eta),
            ("r_l", MaxResource),
            ("b_l", Refused(HB_STATE)),
            ("s_max", Refused(HB_STATE)),
            ("n", Refused(HB_STATE)),
            ("r", Refused(HB_STATE)),
            ("current_s", Refused(HB_STATE)),
            ("current_i", Refused(HB_STATE)),
            ("evaluating_trials", Refused(HB_STATE)),
        ],
        _ => &[("random_state", Seed)],
    }
}

pub(super) fn algorithm(cx: &mut Cx<'_>, node: &Node) -> Option<Algorithm> {
    cx.fields(node, "algorithm", &["algorithmName", "algorithmSettings"])?;
    let Some(name_node) = node.get("algorithmName") else {
        cx.d.error(node.pos, "algorithm needs 'algorithmName'")
            .help("add algorithmName: random");
        return None;
    };
    let katib = cx.string(name_node, "algorithm.algorithmName")?;
    let name = match katib.as_str() {
        "random" | "grid" | "sobol" | "tpe" | "hyperband" => katib.clone(),
        // Optuna's multivariate TPE: what sluice's TPE is.
        "multivariate-tpe" => "tpe".into(),
        "bayesianoptimization" => {
            cx.d.warning(name_node.pos, "bayesianoptimization runs as tpe in sluice")
                .help("write algorithmName: tpe to say so");
            "tpe".into()
        }
        other => {
            let d = cx.d.error(
                name_node.pos,
                format!("algorithm '{other}' cannot be run by sluice"),
            );
            d.suggest(other, ALGORITHMS.iter().copied());
            if d.help.is_empty() {
                d.help(format!("sluice runs {}", ALGORITHMS.join(", ")));
            }
            return None;
        }
    };
    let mut alg = Algorithm {
        sweep: SweepAlgorithm {
            name,
            // As a `kind: Sweep` without a seed.
            seed: 0,
            startup_trials: KATIB_STARTUP,
            candidates: KATIB_CANDIDATES,
            gamma: crate::sweep::tpe::DEFAULT_GAMMA,
            resource: None,
            min_resource: None,
            max_resource: None,
            eta: KATIB_ETA,
        },
        startup_is_parallelism: katib == "tpe",
        resource_pos: node.pos,
    };
    let known = settings_of(&katib);
    let mut ok = true;
    let mut r_l = None;
    let settings = node.get("algorithmSettings");
    let items = match settings {
        None => &[][..],
        Some(s) => match s.as_seq() {
            Some(items) => items,
            None => {
                cx.expected(s, "algorithm.algorithmSettings", "a list of {name, value}");
                return None;
            }
        },
    };
    for item in items {
        if cx
            .fields(item, "algorithmSettings", &["name", "value"])
            .is_none()
        {
            ok = false;
            continue;
        }
        let Some(n) = item.get("name") else {
            cx.d.error(item.pos, "an algorithm setting needs 'name'")
                .help("write {name: random_state, value: \"10\"}");
            ok = false;
            continue;
        };
        let Some(key) = cx.string(n, "algorithmSettings.name") else {
            ok = false;
            continue;
        };
        let Some((_, setting)) = known.iter().find(|(k, _)| *k == key) else {
            let d = cx.d.error(
                n.pos,
                format!("unknown algorithm setting '{key}' for {katib}"),
            );
            d.suggest(&key, known.iter().map(|(k, _)| *k));
            if d.help.is_empty() {
                let names: Vec<&str> = known.iter().map(|(k, _)| *k).collect();
                d.help(format!("Katib's {katib} settings are {}", names.join(", ")));
            }
            ok = false;
            continue;
        };
        if let Setting::Refused(why) = setting {
            cx.d.error(
                n.pos,
                format!("algorithm setting '{key}' of {katib} cannot be honoured by sluice"),
            )
            .help(*why);
            ok = false;
            continue;
        }
        let Some(value) = item.get("value") else {
            cx.d.error(item.pos, format!("algorithm setting '{key}' needs 'value'"));
            ok = false;
            continue;
        };
        let field = format!("algorithmSettings {key}");
        let s = &mut alg.sweep;
        let read = match setting {
            Setting::Seed => whole(cx, value, &field, 0).map(|v| s.seed = v),
            Setting::Candidates => whole(cx, value, &field, 1).map(|v| s.candidates = v),
            Setting::Startup => whole(cx, value, &field, 0).map(|v| {
                s.startup_trials = v.max(1);
                alg.startup_is_parallelism = false;
            }),
            Setting::PriorWeight => match number_text(cx, value, &field) {
                Some((1.0, _)) => Some(()),
                Some((w, pos)) => {
                    cx.d.error(
                        pos,
                        format!("prior_weight {w} cannot be honoured by sluice"),
                    )
                    .help("sluice's TPE weighs its prior as 1 (hyperopt's default); remove the setting");
                    None
                }
                None => None,
            },
            Setting::Resource => cx.string(value, &field).map(|r| {
                s.resource = Some(r);
                alg.resource_pos = value.pos;
            }),
            // Katib reads `int(float(eta))`.
            Setting::Eta => match number_text(cx, value, &field) {
                Some((e, _)) if e >= 2.0 => {
                    s.eta = e as u64;
                    Some(())
                }
                Some((_, pos)) => {
                    cx.d.error(pos, format!("{field}: eta must be at least 2"));
                    None
                }
                None => None,
            },
            Setting::MaxResource => match number_text(cx, value, &field) {
                Some((r, _)) if r >= 1.0 => {
                    r_l = Some(r);
                    Some(())
                }
                Some((_, pos)) => {
                    cx.d.error(
                        pos,
                        format!("{field}: r_l, a trial's largest budget, must be at least 1"),
                    );
                    None
                }
                None => None,
            },
            Setting::Refused(_) => None,
        };
        ok &= read.is_some();
    }
    if katib == "hyperband" {
        let at = settings.map_or(node.pos, |s| s.pos);
        if alg.sweep.resource.is_none() {
            cx.d.error(at, "hyperband needs the setting resource_name")
                .help("add {name: resource_name, value: epochs}, naming the parameter holding a trial's budget");
            ok = false;
        }
        match r_l {
            // Katib's brackets: s_max = floor(log_eta(r_l)); the smallest budget is
            // r_l / eta^s_max. sluice's brackets over [that, r_l] are the same ones.
            Some(r_l) => {
                let eta = alg.sweep.eta as f64;
                let s_max = ((r_l.ln() / eta.ln()) + 1e-9).floor().max(0.0);
                alg.sweep.min_resource = Some(r_l / eta.powf(s_max));
                alg.sweep.max_resource = Some(r_l);
            }
            None if ok => {
                cx.d.error(at, "hyperband needs the setting r_l")
                    .help("add {name: r_l, value: \"9\"}: the largest budget a trial gets (Katib requires it too)");
                ok = false;
            }
            None => {}
        }
    }
    ok.then_some(alg)
}

/// Katib gives Hyperband's resource parameter its budgets whatever its feasible space says
/// (its own example declares `num-epochs` with min and max 1): the parameter's range becomes
/// the brackets' budgets.
pub(super) fn hyperband_resource(
    cx: &mut Cx<'_>,
    alg: &mut SweepAlgorithm,
    params: &mut Params,
) -> bool {
    let resource = alg.resource.clone().unwrap_or_default();
    let (Some(lo), Some(hi)) = (alg.min_resource, alg.max_resource) else {
        return false;
    };
    match params.map.get_mut(&resource) {
        // Said in `decode`.
        None => false,
        Some(SweepParam::Categorical { .. }) => {
            cx.d.error(
                params.pos[&resource],
                format!("hyperband's resource parameter '{resource}' is categorical"),
            )
            .help("the parameter holding a trial's budget is an int or a double");
            false
        }
        Some(p @ SweepParam::Int { .. }) => {
            *p = SweepParam::Int {
                min: lo.floor() as i64,
                max: hi.floor() as i64,
                log: false,
                step: 1,
            };
            true
        }
        Some(p @ SweepParam::Float { .. }) => {
            *p = SweepParam::Float {
                min: lo,
                max: hi,
                log: false,
                step: None,
            };
            true
        }
    }
}

/// Katib's `medianstop`, with its defaults (`min_trials_required` 3, `start_step` 4).
pub(super) fn early_stopping(cx: &mut Cx<'_>, node: &Node) -> Option<EarlyStopping> {
    cx.fields(
        node,
        "earlyStopping",
        &["algorithmName", "algorithmSettings"],
    )?;
    let name = node.get("algorithmName");
    match name.and_then(|n| n.as_scalar()).map(|s| s.text.as_str()) {
        Some("medianstop") => {}
        other => {
            let pos = name.map_or(node.pos, |n| n.pos);
            cx.d.error(
                pos,
                format!(
                    "early stopping '{}' cannot be honoured by sluice",
                    other.unwrap_or("")
                ),
            )
            .help("sluice stops trials by the median rule: algorithmName: medianstop");
            return None;
        }
    }
    let mut rule = EarlyStopping {
        min_trials: 3,
        start_step: 4,
    };
    let mut ok = true;
    let items = match node.get("algorithmSettings") {
        None => &[][..],
        Some(s) => match s.as_seq() {
            Some(items) => items,
            None => {
                cx.expected(
                    s,
                    "earlyStopping.algorithmSettings",
                    "a list of {name, value}",
                );
                return None;
            }
        },
    };
    for item in items {
        let key = item
            .get("name")
            .and_then(|n| n.as_scalar())
            .map(|s| s.text.clone());
        let Some(key) = key else {
            cx.expected(item, "earlyStopping.algorithmSettings", "{name, value}");
            ok = false;
            continue;
        };
        let target = match key.as_str() {
            "min_trials_required" => &mut rule.min_trials,
            "start_step" => &mut rule.start_step,
            other => {
                let d = cx.d.error(
                    item.pos,
                    format!("early stopping setting '{other}' cannot be honoured by sluice"),
                );
                d.suggest(other, ["min_trials_required", "start_step"]);
                d.help("sluice reads min_trials_required and start_step");
                ok = false;
                continue;
            }
        };
        match item
            .get("value")
            .and_then(|v| whole(cx, v, &format!("earlyStopping setting {key}"), 0))
        {
            Some(v) => *target = v,
            None => ok = false,
        }
    }
    ok.then_some(rule)
}
