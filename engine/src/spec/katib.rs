//! Katib `Experiment` files (`kubeflow.org/v1beta1`) read as sweeps.
//!
//! What maps: the objective (Katib's `type` is the goal, its `goal` the target), the
//! algorithm (`random`, `grid`, `sobol`, `tpe`, `multivariate-tpe`, `hyperband`;
//! `bayesianoptimization` runs as TPE with a warning) with the settings Katib's own services
//! read under the same names, the trial counts (with Katib's defaults), the parameters (Katib
//! writes numbers as strings), `medianstop` early stopping, and the primary container of the
//! trial's Job: its `command` and `args` become the trial's argument vector with each
//! `${trialParameters.NAME}` replaced by `{{params.REF}}` (and Kubernetes' `$(VAR)` expanded
//! from the container's `env`), its `image` is recorded, its `env` values are set, its
//! resources are asked for, and the Job's `backoffLimit` and `activeDeadlineSeconds` become the
//! trial's retries and timeout. Anything that would change the search or the trial and cannot
//! be honoured is an error naming it, at its line and column; fields with no effect on one
//! machine (descriptions, `restartPolicy`, labels and annotations, the Job's
//! `apiVersion`, `primaryPodLabels`, `retain`, the success and failure conditions) are
//! ignored.

use std::collections::{BTreeMap, BTreeSet};

use super::decode::Cx;
use super::diagnostic::Pos;
use super::model::{
    Budget, Collect, EarlyStopping, FileFormat, Goal, Metadata, MetricsFile, Objective, Step,
    Strategy, Sweep, SweepAlgorithm, SweepParam,
};
use super::yaml::{Entry, Node, Scalar, Typed, Value};

const SPEC_FIELDS: &[&str] = &[
    "objective",
    "algorithm",
    "parallelTrialCount",
    "maxTrialCount",
    "maxFailedTrialCount",
    "parameters",
    "trialTemplate",
    "metricsCollectorSpec",
    "resumePolicy",
    "earlyStopping",
    "nasConfig",
];

const TRIAL_TEMPLATE_FIELDS: &[&str] = &[
    "trialParameters",
    "trialSpec",
    "primaryContainerName",
    // Which pods of a distributed job are the trial's: one local process has no other.
    "primaryPodLabels",
    // Whether Katib keeps finished trials' Jobs: nothing is deleted here.
    "retain",
    // When the Job counts as succeeded or failed. A local trial succeeds when its command
    // exits 0, which is what the defaults (the Job's Complete and Failed conditions) mean.
    "successCondition",
    "failureCondition",
    "configMap",
];

/// Katib's default `parallelTrialCount`: its webhook sets 3 when the field is absent.
const KATIB_PARALLELISM: u32 = 3;

/// The defaults of Katib's algorithm services, where sluice's TPE has the same knob:
/// `n_EI_candidates` / `ei_candidates` 24 (hyperopt and Optuna), Optuna's `startup_trials` 10
/// and scikit-optimize's `n_initial_points` 10. Katib's `tpe` (hyperopt) draws its first
/// request (`parallelTrialCount` trials) at random: see [`Algorithm::startup_is_parallelism`].
const KATIB_CANDIDATES: u64 = 24;
const KATIB_STARTUP: u64 = 10;
/// Katib's Hyperband `eta` when the setting is absent.
const KATIB_ETA: u64 = 3;

const ALGORITHMS: &[&str] = &[
    "random",
    "grid",
    "sobol",
    "tpe",
    "multivariate-tpe",
    "bayesianoptimization",
    "hyperband",
];

/// Decodes an Experiment's `spec` into a sweep; None after reporting what is wrong.
pub fn decode(cx: &mut Cx<'_>, metadata: Metadata, spec: &Node) -> Option<Sweep> {
    let entries = cx.fields(spec, "spec", SPEC_FIELDS)?;
    for e in entries {
        let why = match e.key.as_str() {
            "nasConfig" => "neural architecture search is not supported",
            "resumePolicy" => match e.value.as_scalar().map(|s| s.text.as_str()) {
                // What happens to a finished experiment's suggestion service: a sluice sweep
                // keeps its state in its rows and always resumes from them.
                Some("Never" | "LongRunning" | "FromVolume") => continue,
                _ => "resumePolicy is Never, LongRunning or FromVolume",
            },
            _ => continue,
        };
        cx.d.error(
            e.key_pos,
            format!("spec.{} cannot be honoured by sluice", e.key),
        )
        .help(why);
    }
    let objective = required(cx, spec, "objective").and_then(|n| objective(cx, n));
    let mut algorithm = required(cx, spec, "algorithm").and_then(|n| algorithm(cx, n));
    let resource = algorithm.as_ref().and_then(|a| a.sweep.resource.clone());
    // Hyperband's resource is looked for among the names written, valid or not, so that a
    // misspelt name is said so before its parameter's range (which Katib ignores) is checked.
    if let (Some(r), Some(a)) = (&resource, &algorithm) {
        let written: Vec<&str> = spec
            .get("parameters")
            .and_then(Node::as_seq)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.get("name").and_then(Node::as_scalar))
            .map(|s| s.text.as_str())
            .collect();
        if !written.contains(&r.as_str()) {
            let d = cx.d.error(
                a.resource_pos,
                format!("hyperband's resource_name '{r}' is not a parameter of the experiment"),
            );
            d.suggest(r, written.iter().copied());
            if d.help.is_empty() {
                d.help(
                    "name an int or double parameter: the one holding a trial's budget (epochs)",
                );
            }
            algorithm = None;
        }
    }
    // A NAS experiment searches an architecture instead of parameters: its nasConfig is
    // refused above, and its missing parameters are no news.
    let params = if spec.get("nasConfig").is_some() && spec.get("parameters").is_none() {
        None
    } else {
        required(cx, spec, "parameters").and_then(|n| parameters(cx, n, resource.as_deref()))
    };
    let collector = match spec.get("metricsCollectorSpec") {
        Some(m) => metrics_collector(cx, m),
        None => Some(Collector::default()),
    };
    let count = |cx: &mut Cx<'_>, key: &str, min: u64| {
        spec.get(key)
            .and_then(|n| whole(cx, n, &format!("spec.{key}"), min))
    };
    let parallelism = count(cx, "parallelTrialCount", 1)
        .map_or(KATIB_PARALLELISM, |p| u32::try_from(p).unwrap_or(u32::MAX));
    let max_trials = count(cx, "maxTrialCount", 1);
    // Katib fails the experiment once `failed != 0 && failed >= maxFailedTrialCount`, so 0
    // acts as 1; sluice halts once `failed >= maxFailedTrials`.
    let max_failed_trials = count(cx, "maxFailedTrialCount", 0).map(|m| m.max(1));
    let grid = algorithm.as_ref().is_some_and(|a| a.sweep.name == "grid");
    if spec.get("maxTrialCount").is_none() && !grid {
        cx.d.error(spec.pos, "spec.maxTrialCount is required (except for grid)")
            .help("add maxTrialCount: 12");
    }
    let metrics_file = collector.as_ref().and_then(|c| c.file.as_ref());
    let trial = required(cx, spec, "trialTemplate")
        .and_then(|n| trial(cx, n, params.as_ref(), metrics_file));
    let early_stopping = spec
        .get("earlyStopping")
        .and_then(|n| early_stopping(cx, n));
    let algorithm = algorithm?;
    let mut params = params?;
    let mut alg = algorithm.sweep;
    if algorithm.startup_is_parallelism {
        alg.startup_trials = u64::from(parallelism);
    }
    let mut ok = true;
    if alg.name == "grid" {
        for (name, p) in &params.map {
            if matches!(p, SweepParam::Float { step: None, .. }) {
                cx.d.error(
                    params.pos[name],
                    format!("grid search needs feasibleSpace.step for double parameter '{name}'"),
                )
                .help("add step: \"0.01\" to its feasibleSpace, or use algorithmName: random");
                ok = false;
            }
        }
    }
    if alg.name == "hyperband" {
        ok &= hyperband_resource(cx, &mut alg, &mut params);
    }
    if !ok {
        return None;
    }
    let objective = objective?;
    let mut trial = trial?;
    let collector = collector?;
    // The File collector reads only its file (Katib's sidecar reads nothing else), and a JSON
    // line only for the experiment's metrics.
    trial.metrics_stdout = collector.file.is_none();
    trial.collect = Collect {
        filters: collector.filters,
        file: collector.file.map(|(mut f, _)| {
            if f.format == FileFormat::Json {
                f.names = std::iter::once(&objective.metric)
                    .chain(&objective.additional_metrics)
                    .cloned()
                    .collect();
            }
            f
        }),
        strategies: BTreeMap::new(),
    };
    Some(Sweep {
        metadata,
        objective,
        algorithm: alg,
        early_stopping,
        budget: Budget {
            max_trials,
            parallelism,
            max_failed_trials,
            max_duration: None,
        },
        params: params.map,
        trial,
    })
}

fn required<'n>(cx: &mut Cx<'_>, node: &'n Node, key: &str) -> Option<&'n Node> {
    let found = node.get(key);
    if found.is_none() {
        cx.d.error(node.pos, format!("an Experiment needs spec.{key}"))
            .help("see Katib's Experiment reference; sluice reads it as a sweep");
    }
    found
}

/// A number written as a number or, as Katib writes them, as a string.
fn number_text(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<(f64, Pos)> {
    let parsed = match node.as_scalar().map(Scalar::typed) {
        Some(Typed::Int(i)) => Some(i as f64),
        Some(Typed::Float(f)) => Some(f),
        Some(Typed::Str(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match parsed.filter(|v| v.is_finite()) {
        Some(v) => Some((v, node.pos)),
        None => {
            cx.expected(
                node,
                field,
                "a number (Katib writes them as strings: \"0.01\")",
            );
            None
        }
    }
}

/// A whole number of at least `min`, written as a number or a string (`"3"`).
fn whole(cx: &mut Cx<'_>, node: &Node, field: &str, min: u64) -> Option<u64> {
    // Exactly, when it is written as digits (seeds above 2^53 stay what they are).
    if let Some(v) = node
        .as_scalar()
        .and_then(|s| s.text.trim().parse::<u64>().ok())
        && v >= min
    {
        return Some(v);
    }
    let (v, pos) = number_text(cx, node, field)?;
    if v.fract() == 0.0 && v >= min as f64 && v < 9.0e15 {
        return Some(v as u64);
    }
    cx.d.error(
        pos,
        format!(
            "{field}: expected a whole number of at least {min}, found {}",
            node.describe()
        ),
    );
    None
}

fn objective(cx: &mut Cx<'_>, node: &Node) -> Option<Objective> {
    cx.fields(
        node,
        "objective",
        &[
            "type",
            "goal",
            "objectiveMetricName",
            "additionalMetricNames",
            "metricStrategies",
        ],
    )?;
    let goal = match node.get("type") {
        None => {
            cx.d.error(node.pos, "objective needs 'type'")
                .help("add type: maximize (or minimize)");
            None
        }
        Some(t) => match cx.string(t, "objective.type").as_deref() {
            Some("maximize") => Some(Goal::Maximize),
            Some("minimize") => Some(Goal::Minimize),
            Some(other) => {
                cx.d.error(
                    t.pos,
                    format!("objective.type '{other}' is not maximize or minimize"),
                )
                .suggest(other, ["maximize", "minimize"]);
                None
            }
            None => None,
        },
    };
    let metric = match node.get("objectiveMetricName") {
        Some(m) => cx.string(m, "objective.objectiveMetricName"),
        None => {
            cx.d.error(node.pos, "objective needs 'objectiveMetricName'")
                .help("add objectiveMetricName: the metric the trials print, as in accuracy=0.91");
            None
        }
    };
    let target = node
        .get("goal")
        .and_then(|g| number_text(cx, g, "objective.goal"))
        .map(|(v, _)| v);
    let additional_metrics: Vec<String> = node
        .get("additionalMetricNames")
        .and_then(|m| {
            cx.string_list(
                m,
                "objective.additionalMetricNames",
                "a list of metric names",
            )
        })
        .map(|l| l.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_default();
    let strategies = node
        .get("metricStrategies")
        .map(|n| metric_strategies(cx, n, metric.as_deref(), &additional_metrics));
    let metric = metric?;
    let goal = goal?;
    // Katib's default for the objective (its webhook's `setDefaultObjective`): without a
    // written strategy a trial's value is its best observation, `min` when the objective is to
    // minimize and `max` when it is to maximize. An additional metric without one keeps its
    // last observation, as that function's comment says and as sluice does everywhere (its
    // code gives them the objective's too; they do not steer the search either way).
    let mut strategies = strategies.unwrap_or_default();
    strategies.entry(metric.clone()).or_insert(match goal {
        Goal::Maximize => Strategy::Max,
        Goal::Minimize => Strategy::Min,
    });
    strategies.retain(|_, s| *s != Strategy::Latest);
    Some(Objective {
        metric,
        goal,
        target,
        additional_metrics,
        strategies,
    })
}

/// `objective.metricStrategies`: `[{name, value: min|max|latest}]`, each naming the objective or
/// one of the additional metrics. What is wrong is reported; the rest is kept.
fn metric_strategies(
    cx: &mut Cx<'_>,
    node: &Node,
    metric: Option<&str>,
    additional: &[String],
) -> BTreeMap<String, Strategy> {
    let mut out = BTreeMap::new();
    let Some(items) = node.as_seq() else {
        cx.expected(
            node,
            "objective.metricStrategies",
            "a list of {name, value}",
        );
        return out;
    };
    let known: Vec<&str> = metric
        .into_iter()
        .chain(additional.iter().map(String::as_str))
        .collect();
    for item in items {
        if cx
            .fields(item, "metricStrategies", &["name", "value"])
            .is_none()
        {
            continue;
        }
        let name = match item.get("name") {
            Some(n) => cx.string(n, "metricStrategies.name").map(|s| (s, n.pos)),
            None => {
                cx.d.error(item.pos, "a metric strategy needs 'name'")
                    .help("write {name: accuracy, value: max}");
                None
            }
        };
        let value = match item.get("value") {
            Some(v) => match cx.string(v, "metricStrategies.value").as_deref() {
                Some("latest") => Some(Strategy::Latest),
                Some("max") => Some(Strategy::Max),
                Some("min") => Some(Strategy::Min),
                Some(other) => {
                    let d = cx.d.error(
                        v.pos,
                        format!("metricStrategies value '{other}' is not min, max or latest"),
                    );
                    d.suggest(other, ["min", "max", "latest"]);
                    d.help("a trial's value is its smallest (min), largest (max) or last (latest) observation");
                    None
                }
                None => None,
            },
            None => {
                cx.d.error(item.pos, "a metric strategy needs 'value'")
                    .help("value: min, max or latest");
                None
            }
        };
        let (Some((name, pos)), Some(value)) = (name, value) else {
            continue;
        };
        if metric.is_some() && !known.contains(&name.as_str()) {
            let d = cx.d.error(
                pos,
                format!("metricStrategies names '{name}', which is neither the objective nor an additional metric"),
            );
            d.suggest(&name, known.iter().copied());
            if d.help.is_empty() {
                d.help(format!(
                    "the experiment's metrics are: {}",
                    known.join(", ")
                ));
            }
            continue;
        }
        if out.insert(name.clone(), value).is_some() {
            cx.d.error(pos, format!("metricStrategies names '{name}' twice"));
        }
    }
    out
}

/// The algorithm, and what is only known with the rest of the spec.
struct Algorithm {
    sweep: SweepAlgorithm,
    /// Katib's `tpe` (hyperopt) draws its first request at random: `n_startup_jobs` is the
    /// number of trials asked for, that is `parallelTrialCount`.
    startup_is_parallelism: bool,
    /// Where Hyperband's `resource_name` was written.
    resource_pos: Pos,
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

fn algorithm(cx: &mut Cx<'_>, node: &Node) -> Option<Algorithm> {
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
fn hyperband_resource(cx: &mut Cx<'_>, alg: &mut SweepAlgorithm, params: &mut Params) -> bool {
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
fn early_stopping(cx: &mut Cx<'_>, node: &Node) -> Option<EarlyStopping> {
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

/// Katib's default path of the `File` collector's file (its webhook's `DefaultFilePath`).
const KATIB_METRICS_PATH: &str = "/var/log/katib/metrics.log";

/// What an Experiment's `metricsCollectorSpec` asks of its trials, when sluice can honour it.
#[derive(Default)]
struct Collector {
    /// `source.filter.metricsFormat`.
    filters: Vec<String>,
    /// The `File` collector's file, and where its path was written (the collector's kind
    /// when the path is Katib's default).
    file: Option<(MetricsFile, Pos)>,
}

/// `metricsCollectorSpec`: `StdOut` (the default; the trial's standard output and error) and
/// `File` (a file the trial writes, see [`MetricsFile`]), with `metricsFormat` filters, as
/// Katib validates and reads them. None after reporting what cannot be honoured.
fn metrics_collector(cx: &mut Cx<'_>, node: &Node) -> Option<Collector> {
    cx.fields(node, "metricsCollectorSpec", &["collector", "source"])?;
    let mut ok = true;
    let collector = node.get("collector");
    let kind_node = collector.and_then(|c| c.get("kind"));
    if let Some(c) = collector
        && let Some(fields) = cx.fields(
            c,
            "metricsCollectorSpec.collector",
            &["kind", "customCollector"],
        )
        && let Some(custom) = fields.iter().find(|e| e.key == "customCollector")
    {
        cx.d.error(custom.key_pos, "metricsCollectorSpec.collector.customCollector cannot be honoured by sluice")
            .help("sluice runs no collector container; print NAME=VALUE lines (kind: StdOut) or write them to a file (kind: File)");
        ok = false;
    }
    let kind = match kind_node {
        None => "StdOut".to_owned(),
        Some(k) => cx.string(k, "metricsCollectorSpec.collector.kind")?,
    };
    let kind_pos = kind_node.map_or(node.pos, |k| k.pos);
    let file_kind = match kind.as_str() {
        "StdOut" => false,
        "File" => true,
        other => {
            let why = match other {
                "None" | "Push" => {
                    "with this kind the trial sends its metrics to Katib's DB manager itself, which does not run here"
                }
                "TensorFlowEvent" => "sluice does not read TensorFlow event files",
                "PrometheusMetric" => "sluice does not scrape a trial's Prometheus endpoint",
                "Custom" => "sluice runs no collector container",
                _ => {
                    "Katib's collector kinds are StdOut, File, TensorFlowEvent, PrometheusMetric, Custom, None and Push"
                }
            };
            cx.d.error(kind_pos, format!("metrics collector '{other}' cannot be honoured by sluice"))
                .help(why)
                .help("sluice reads NAME=VALUE lines of the trial's output (kind: StdOut) or of a file it writes (kind: File), and $SLUICE_METRICS_FILE");
            return None;
        }
    };
    let mut out = Collector::default();
    let source = node.get("source");
    let mut path: Option<(String, Pos)> = None;
    let mut format = FileFormat::Text;
    let mut filter_at = None;
    if let Some(source) = source
        && let Some(fields) = cx.fields(
            source,
            "metricsCollectorSpec.source",
            &["filter", "fileSystemPath", "httpGet"],
        )
    {
        for e in fields {
            match e.key.as_str() {
                "httpGet" => {
                    cx.d.error(e.key_pos, "metricsCollectorSpec.source.httpGet cannot be honoured by sluice")
                        .help("it is where the PrometheusMetric collector scrapes; sluice reads the trial's output or its metrics file");
                    ok = false;
                }
                "filter" => {
                    filter_at = Some(e.key_pos);
                    let Some(f) = cx.fields(
                        &e.value,
                        "metricsCollectorSpec.source.filter",
                        &["metricsFormat"],
                    ) else {
                        ok = false;
                        continue;
                    };
                    let Some(formats) = f.iter().find(|x| x.key == "metricsFormat") else {
                        continue;
                    };
                    let Some(list) = cx.string_list(
                        &formats.value,
                        "metricsFormat",
                        "a list of regular expressions",
                    ) else {
                        ok = false;
                        continue;
                    };
                    for (re, pos) in list {
                        match sluice_runtime::metrics::check_filter(&re) {
                            Ok(()) => out.filters.push(re),
                            Err(e) => {
                                cx.d.error(pos, format!("metricsFormat '{re}' cannot be read: {e}"))
                                    .help("a filter is a regular expression with two groups: the metric's name, then its value, as in ([\\w|-]+)\\s*=\\s*([+-]?\\d*(\\.\\d+)?)");
                                ok = false;
                            }
                        }
                    }
                }
                "fileSystemPath" if !file_kind => {
                    // Katib's StdOut collector reads the container's log whatever this says.
                    cx.d.warning(e.key_pos, "fileSystemPath has no effect with the StdOut collector")
                        .help("Katib reads it for the File and TensorFlowEvent collectors; remove it, or write collector kind: File");
                }
                "fileSystemPath" => {
                    let Some(fs) = cx.fields(
                        &e.value,
                        "metricsCollectorSpec.source.fileSystemPath",
                        &["path", "kind", "format"],
                    ) else {
                        ok = false;
                        continue;
                    };
                    for x in fs {
                        match x.key.as_str() {
                            "path" => {
                                if let Some(p) = cx.string(&x.value, "fileSystemPath.path") {
                                    path = Some((p, x.value.pos));
                                } else {
                                    ok = false;
                                }
                            }
                            "kind" => match cx.string(&x.value, "fileSystemPath.kind").as_deref() {
                                Some("File") => {}
                                Some(other) => {
                                    cx.d.error(x.value.pos, format!("fileSystemPath kind '{other}' is not File"))
                                        .help("the File collector reads one file (kind: File); a Directory is for the TensorFlowEvent collector");
                                    ok = false;
                                }
                                None => ok = false,
                            },
                            _ => {
                                match cx.string(&x.value, "fileSystemPath.format").as_deref() {
                                    Some("TEXT") => format = FileFormat::Text,
                                    Some("JSON") => format = FileFormat::Json,
                                    Some(other) => {
                                        let d = cx.d.error(x.value.pos, format!("fileSystemPath format '{other}' is not TEXT or JSON"));
                                        d.suggest(other, ["TEXT", "JSON"]);
                                        if d.help.is_empty() {
                                            d.help("TEXT: lines of NAME=VALUE (or what source.filter matches); JSON: one object per line");
                                        }
                                        ok = false;
                                    }
                                    None => ok = false,
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if file_kind {
        if let (FileFormat::Json, Some(at)) = (format, filter_at) {
            cx.d.error(at, "source.filter is for TEXT metrics files")
                .help(
                    "a JSON metrics file is read by its keys, as Katib reads it; remove the filter",
                );
            ok = false;
        }
        let (path, pos) = path.unwrap_or_else(|| (KATIB_METRICS_PATH.to_owned(), kind_pos));
        let parts = std::path::Path::new(&path).components();
        if !path.starts_with('/')
            || parts
                .into_iter()
                .any(|c| c == std::path::Component::ParentDir)
        {
            cx.d.error(
                pos,
                format!("fileSystemPath.path '{path}' is not an absolute path without '..'"),
            )
            .help("Katib needs the metrics file's absolute path, as /var/log/katib/metrics.log");
            ok = false;
        }
        out.file = Some((
            MetricsFile {
                path,
                format,
                names: Vec::new(),
            },
            pos,
        ));
    }
    ok.then_some(out)
}

/// The experiment's parameters, and where each was written.
struct Params {
    map: BTreeMap<String, SweepParam>,
    pos: BTreeMap<String, Pos>,
}

fn parameters(cx: &mut Cx<'_>, node: &Node, resource: Option<&str>) -> Option<Params> {
    let Some(items) = node.as_seq() else {
        cx.expected(
            node,
            "parameters",
            "a list of {name, parameterType, feasibleSpace}",
        );
        return None;
    };
    let mut out = Params {
        map: BTreeMap::new(),
        pos: BTreeMap::new(),
    };
    let mut ok = true;
    for item in items {
        match parameter(cx, item, resource) {
            Some((name, p, pos)) => {
                if out.map.contains_key(&name) {
                    cx.d.error(pos, format!("parameter '{name}' is declared twice"));
                    ok = false;
                    continue;
                }
                out.map.insert(name.clone(), p);
                out.pos.insert(name, pos);
            }
            None => ok = false,
        }
    }
    if out.map.is_empty() && ok {
        cx.d.error(node.pos, "an Experiment searches at least one parameter");
        return None;
    }
    ok.then_some(out)
}

fn parameter(
    cx: &mut Cx<'_>,
    node: &Node,
    resource: Option<&str>,
) -> Option<(String, SweepParam, Pos)> {
    cx.fields(
        node,
        "parameters",
        &["name", "parameterType", "feasibleSpace"],
    )?;
    let Some(name_node) = node.get("name") else {
        cx.d.error(node.pos, "a parameter needs 'name'");
        return None;
    };
    let name = cx.string(name_node, "parameters.name")?;
    let at = name_node.pos;
    // Katib's names are Kubernetes-style (`num-layers`); a dot would split a template.
    let ok_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok_name {
        cx.d.error(at, format!("parameter name '{name}' is not a valid name"))
            .help("use letters, digits, - and _ (learning-rate)");
        return None;
    }
    let Some(ty_node) = node.get("parameterType") else {
        cx.d.error(
            node.pos,
            format!("parameter '{name}' needs 'parameterType'"),
        )
        .help("parameterType: int, double, categorical or discrete");
        return None;
    };
    let ty = cx.string(ty_node, "parameterType")?;
    let Some(space) = node.get("feasibleSpace") else {
        cx.d.error(
            node.pos,
            format!("parameter '{name}' needs 'feasibleSpace'"),
        );
        return None;
    };
    cx.fields(
        space,
        "feasibleSpace",
        &["min", "max", "step", "list", "distribution"],
    )?;
    let log = match space.get("distribution") {
        None => false,
        Some(d) => match cx.string(d, "feasibleSpace.distribution").as_deref() {
            Some("uniform") => false,
            Some("logUniform") => true,
            Some(other) => {
                let diag = cx.d.error(
                    d.pos,
                    format!("distribution '{other}' cannot be honoured by sluice"),
                );
                // Katib's own normal priors are not typos of the uniform ones.
                if !matches!(other, "normal" | "logNormal") {
                    diag.suggest(other, ["uniform", "logUniform"]);
                }
                diag.help("sluice samples uniform and logUniform");
                return None;
            }
            None => return None,
        },
    };
    let p = match ty.as_str() {
        "double" | "int" => {
            if let Some(l) = space.get("list") {
                cx.d.error(
                    l.pos,
                    format!("parameter '{name}' ({ty}): feasibleSpace.list is for categorical and discrete parameters"),
                )
                .help("give min and max (and step) for a number");
                return None;
            }
            number_param(cx, &name, &ty, space, log, resource == Some(name.as_str()))?
        }
        "categorical" | "discrete" => {
            for key in ["min", "max", "step"] {
                if let Some(v) = space.get(key) {
                    cx.d.error(
                        v.pos,
                        format!("parameter '{name}' ({ty}): feasibleSpace.{key} is for int and double parameters"),
                    )
                    .help("a categorical or discrete parameter lists its values");
                    return None;
                }
            }
            let Some(list) = space.get("list") else {
                cx.d.error(
                    space.pos,
                    format!("parameter '{name}' ({ty}) needs feasibleSpace.list"),
                )
                .help("add list: [\"sgd\", \"adam\"]");
                return None;
            };
            let Some(items) = list.as_seq() else {
                cx.expected(list, "feasibleSpace.list", "a list of values");
                return None;
            };
            // A trial sees each value's text: discrete numbers stay as written ("0.10").
            let mut values = Vec::with_capacity(items.len());
            let mut seen = BTreeSet::new();
            for item in items {
                let Some(text) = item
                    .as_scalar()
                    .filter(|s| s.typed() != Typed::Null)
                    .map(|s| s.text.clone())
                else {
                    cx.expected(item, "feasibleSpace.list", "a value (a string or a number)");
                    return None;
                };
                if !seen.insert(text.clone()) {
                    cx.d.error(
                        item.pos,
                        format!("parameter '{name}': value '{text}' is listed twice"),
                    );
                    return None;
                }
                values.push(text);
            }
            if values.is_empty() {
                cx.d.error(list.pos, format!("parameter '{name}': the list is empty"))
                    .help("list at least one value");
                return None;
            }
            SweepParam::Categorical { values }
        }
        other => {
            cx.d.error(
                ty_node.pos,
                format!("parameterType '{other}' is not int, double, categorical or discrete"),
            )
            .suggest(other, ["int", "double", "categorical", "discrete"]);
            return None;
        }
    };
    Some((name, p, at))
}

/// An `int` or `double` parameter, checked as a `kind: Sweep`'s would be. Hyperband's
/// resource parameter may have `min` equal to `max`: Katib ignores its range.
fn number_param(
    cx: &mut Cx<'_>,
    name: &str,
    ty: &str,
    space: &Node,
    log: bool,
    resource: bool,
) -> Option<SweepParam> {
    let bound = |cx: &mut Cx<'_>, key: &str| match space.get(key) {
        Some(n) => number_text(cx, n, &format!("feasibleSpace.{key}")),
        None => {
            cx.d.error(
                space.pos,
                format!("parameter '{name}' ({ty}) needs feasibleSpace.{key}"),
            )
            .help(format!(
                "add {key}: \"1\" (Katib writes numbers as strings)"
            ));
            None
        }
    };
    let (min, max) = (bound(cx, "min"), bound(cx, "max"));
    let ((min, _), (max, max_pos)) = (min?, max?);
    if min > max || (min == max && !resource) {
        cx.d.error(
            max_pos,
            format!("parameter '{name}': max ({max}) must be above min ({min})"),
        );
        return None;
    }
    if log && min <= 0.0 {
        cx.d.error(
            space.pos,
            format!("parameter '{name}': distribution logUniform needs min above 0 (it is {min})"),
        )
        .help("use distribution: uniform, or a small positive min such as \"1e-6\"");
        return None;
    }
    let step = match space.get("step") {
        None => None,
        Some(s) => {
            let (v, pos) = number_text(cx, s, "feasibleSpace.step")?;
            if v <= 0.0 || (v > max - min && !resource) {
                cx.d.error(
                    pos,
                    format!("parameter '{name}': feasibleSpace.step must be above 0 and at most max - min"),
                );
                return None;
            }
            if log {
                cx.d.error(
                    pos,
                    format!("parameter '{name}': step with distribution logUniform cannot be honoured by sluice"),
                )
                .help("a log scale is searched continuously; remove step or the distribution");
                return None;
            }
            Some(v)
        }
    };
    if ty == "int" {
        let whole = |v: f64| v.fract() == 0.0 && v.abs() < 9.0e15;
        if !whole(min) || !whole(max) || step.is_some_and(|s| !whole(s)) {
            cx.d.error(
                space.pos,
                format!("parameter '{name}' (int) needs whole min, max and step"),
            )
            .help("write them as whole numbers (\"2\"), or use parameterType: double");
            return None;
        }
        Some(SweepParam::Int {
            min: min as i64,
            max: max as i64,
            log,
            step: step.map_or(1, |s| s as i64),
        })
    } else {
        Some(SweepParam::Float {
            min,
            max,
            log,
            step,
        })
    }
}

/// A trial parameter: the experiment parameter it references, or None when the reference
/// was wrong (already reported).
type TrialParams = BTreeMap<String, Option<String>>;

fn trial_parameters(cx: &mut Cx<'_>, node: &Node, params: Option<&Params>) -> TrialParams {
    let mut refs = TrialParams::new();
    let Some(list) = node.get("trialParameters") else {
        return refs;
    };
    let Some(items) = list.as_seq() else {
        cx.expected(
            list,
            "trialTemplate.trialParameters",
            "a list of {name, reference}",
        );
        return refs;
    };
    for tp in items {
        if cx
            .fields(tp, "trialParameters", &["name", "reference", "description"])
            .is_none()
        {
            continue;
        }
        let Some(name) = tp
            .get("name")
            .and_then(|n| cx.string(n, "trialParameters.name"))
        else {
            if tp.get("name").is_none() {
                cx.d.error(tp.pos, "a trial parameter needs 'name'");
            }
            continue;
        };
        if refs.contains_key(&name) {
            let pos = tp.get("name").map_or(tp.pos, |n| n.pos);
            cx.d.error(pos, format!("trial parameter '{name}' is declared twice"));
            continue;
        }
        let Some(ref_node) = tp.get("reference") else {
            cx.d.error(
                tp.pos,
                format!("trial parameter '{name}' needs 'reference'"),
            )
            .help("reference: the name of one of spec.parameters");
            refs.insert(name, None);
            continue;
        };
        let Some(reference) = cx.string(ref_node, "trialParameters.reference") else {
            refs.insert(name, None);
            continue;
        };
        if reference.starts_with("${trialSpec.") {
            cx.d.error(
                ref_node.pos,
                format!("trial parameter '{name}' references the trial's metadata ({reference}), which sluice cannot honour"),
            )
            .help("a trial parameter references one of spec.parameters");
            refs.insert(name, None);
            continue;
        }
        if let Some(params) = params
            && !params.map.contains_key(&reference)
        {
            let d = cx.d.error(
                ref_node.pos,
                format!(
                    "trial parameter '{name}' references '{reference}', which is not a parameter"
                ),
            );
            d.suggest(&reference, params.map.keys().map(String::as_str));
            if d.help.is_empty() {
                let names: Vec<&str> = params.map.keys().map(String::as_str).collect();
                d.help(format!(
                    "the experiment's parameters are: {}",
                    names.join(", ")
                ));
            }
            refs.insert(name, None);
            continue;
        }
        refs.insert(name, Some(reference));
    }
    refs
}

/// The trial: the primary container of the trial's Job, as a sluice trial step.
fn trial(
    cx: &mut Cx<'_>,
    node: &Node,
    params: Option<&Params>,
    metrics_file: Option<&(MetricsFile, Pos)>,
) -> Option<Step> {
    cx.fields(node, "trialTemplate", TRIAL_TEMPLATE_FIELDS)?;
    if let Some(c) = node.get("configMap") {
        cx.d.error(
            c.pos,
            "trialTemplate.configMap cannot be honoured by sluice",
        )
        .help("write the trial's Job inline, under trialTemplate.trialSpec");
        return None;
    }
    let refs = trial_parameters(cx, node, params);
    let Some(job) = node.get("trialSpec") else {
        cx.d.error(node.pos, "trialTemplate needs trialSpec (a batch/v1 Job)")
            .help("sluice runs the primary container of the trial's Job on this machine");
        return None;
    };
    match job.get("kind").and_then(Node::as_scalar) {
        Some(k) if k.text == "Job" => {}
        Some(k) => {
            let pos = job.get("kind").map_or(job.pos, |n| n.pos);
            cx.d.error(
                pos,
                format!("trialSpec kind '{}' cannot be run by sluice", k.text),
            )
            .help(
                "sluice runs the primary container of a batch/v1 Job (kind: Job) on this machine",
            );
            return None;
        }
        None => {
            cx.d.error(job.pos, "trialSpec needs kind: Job")
                .help("sluice runs the primary container of a batch/v1 Job on this machine");
            return None;
        }
    }
    let mut step: Vec<Entry> = Vec::new();
    let mut ok = true;
    let job_spec = job.get("spec");
    for e in job_spec.and_then(Node::as_map).unwrap_or_default() {
        let field = format!("trialSpec.spec.{}", e.key);
        match e.key.as_str() {
            // Kubernetes retries a failed pod backoffLimit times. Unset, Kubernetes' 6 is not
            // copied: a sluice trial is not retried unless asked to.
            "backoffLimit" => match whole(cx, &e.value, &field, 0) {
                Some(n) => step.push(entry(
                    &e.value,
                    "retry",
                    map(
                        &e.value,
                        vec![entry(&e.value, "limit", plain(&e.value, n.to_string()))],
                    ),
                )),
                None => ok = false,
            },
            "activeDeadlineSeconds" => match whole(cx, &e.value, &field, 1) {
                Some(s) => step.push(entry(&e.value, "timeout", plain(&e.value, format!("{s}s")))),
                None => ok = false,
            },
            "parallelism" | "completions" => match whole(cx, &e.value, &field, 0) {
                Some(0 | 1) => {}
                Some(n) => {
                    cx.d.error(
                        e.value.pos,
                        format!("{field}: {n} pods per trial cannot be honoured by sluice"),
                    )
                    .help("a sluice trial runs one process; remove the field");
                    ok = false;
                }
                None => ok = false,
            },
            _ => {}
        }
    }
    let pod = job_spec
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"));
    if let Some(init) = pod.and_then(|p| p.as_map()).and_then(|m| {
        m.iter()
            .find(|e| e.key == "initContainers")
            .map(|e| e.key_pos)
    }) {
        cx.d.error(init, "initContainers cannot be honoured by sluice")
            .help("a sluice trial runs the primary container's command alone; run the setup in it");
        ok = false;
    }
    let Some(containers) = pod.and_then(|s| s.get("containers")).and_then(Node::as_seq) else {
        cx.d.error(job.pos, "trialSpec needs spec.template.spec.containers")
            .help("sluice reads the trial's command from a batch/v1 Job's container");
        return None;
    };
    let container = match node.get("primaryContainerName") {
        Some(p) => {
            let wanted = cx.string(p, "trialTemplate.primaryContainerName")?;
            let names: Vec<&str> = containers
                .iter()
                .filter_map(|c| c.get("name").and_then(Node::as_scalar))
                .map(|s| s.text.as_str())
                .collect();
            let found = containers.iter().find(|c| {
                c.get("name")
                    .and_then(Node::as_scalar)
                    .is_some_and(|n| n.text == wanted)
            });
            if found.is_none() {
                let d = cx.d.error(
                    p.pos,
                    format!("primaryContainerName '{wanted}' is not a container of trialSpec"),
                );
                d.suggest(&wanted, names.iter().copied());
                if d.help.is_empty() {
                    d.help(format!("its containers are: {}", names.join(", ")));
                }
            }
            found?
        }
        None if containers.len() == 1 => &containers[0],
        None => {
            cx.d.error(job.pos, "cannot tell the trial's container")
                .help("set trialTemplate.primaryContainerName to one of the Job's containers");
            return None;
        }
    };
    for e in container.as_map().unwrap_or_default() {
        let why = match e.key.as_str() {
            "envFrom" => {
                "a local trial cannot read Kubernetes config maps or secrets; write env values, or pass settings as arguments"
            }
            "volumeMounts" | "volumeDevices" => {
                "a local trial sees this machine's files; pass paths as arguments"
            }
            "workingDir" => {
                "a local trial runs in the experiment file's folder; pass paths as arguments"
            }
            _ => continue,
        };
        cx.d.error(
            e.key_pos,
            format!("container field '{}' cannot be honoured by sluice", e.key),
        )
        .help(why);
        ok = false;
    }
    // The container's env, with trial parameters replaced; `$(NAME)` in later values and in
    // the command reads them, as Kubernetes expands it.
    let mut env_text: BTreeMap<String, String> = BTreeMap::new();
    // The command's words and env values as written: where the File collector's path must be.
    let mut written: Vec<String> = Vec::new();
    let mut env: Vec<Entry> = Vec::new();
    if let Some(list) = container.get("env") {
        match list.as_seq() {
            None => {
                cx.expected(list, "env", "a list of {name, value}");
                ok = false;
            }
            Some(items) => {
                for item in items {
                    let Some(fields) = cx.fields(item, "env", &["name", "value", "valueFrom"])
                    else {
                        ok = false;
                        continue;
                    };
                    let Some(name) = item.get("name").and_then(|n| cx.string(n, "env.name")) else {
                        if item.get("name").is_none() {
                            cx.d.error(item.pos, "an env entry needs 'name'");
                        }
                        ok = false;
                        continue;
                    };
                    if let Some(from) = fields.iter().find(|e| e.key == "valueFrom") {
                        cx.d.error(
                            from.key_pos,
                            format!("env '{name}': valueFrom cannot be honoured by sluice"),
                        )
                        .help("a local trial cannot read Kubernetes secrets, config maps or pod fields; write value:, or pass it as an argument");
                        ok = false;
                        continue;
                    }
                    let (value_node, text) = match item.get("value") {
                        Some(v) => match v.as_scalar() {
                            Some(s) if s.typed() == Typed::Null => (v, String::new()),
                            Some(s) => (v, s.text.clone()),
                            None => {
                                cx.expected(v, &format!("env '{name}' value"), "a string");
                                ok = false;
                                continue;
                            }
                        },
                        None => (item, String::new()),
                    };
                    let Some(replaced) = substitute(cx, value_node, &text, &refs) else {
                        ok = false;
                        continue;
                    };
                    let replaced = expand_vars(&replaced, &env_text);
                    env_text.insert(name.clone(), replaced.clone());
                    written.push(text);
                    env.push(Entry {
                        key: name,
                        key_pos: item.pos,
                        value: quoted(value_node, replaced),
                    });
                }
            }
        }
    }
    // The argument vector, with ${trialParameters.NAME} turned into {{params.REF}}.
    let mut words: Vec<Node> = Vec::new();
    for key in ["command", "args"] {
        let Some(list) = container.get(key) else {
            continue;
        };
        let Some(items) = list.as_seq() else {
            cx.expected(list, key, "a list of strings");
            ok = false;
            continue;
        };
        for item in items {
            let Some(text) = item.as_scalar().map(|s| s.text.clone()) else {
                cx.expected(item, key, "a string");
                ok = false;
                continue;
            };
            match substitute(cx, item, &text, &refs) {
                Some(replaced) => words.push(quoted(item, expand_vars(&replaced, &env_text))),
                None => ok = false,
            }
            written.push(text);
        }
    }
    if words.is_empty() && ok {
        cx.d.error(container.pos, "the trial's container has no command")
            .help("give the container a command (and args) to run");
        return None;
    }
    if let Some((f, pos)) = metrics_file
        && !written.iter().any(|w| w.contains(&f.path))
    {
        cx.d.error(
            *pos,
            format!(
                "the File collector's path '{}' is not in the trial container's command, args or env",
                f.path
            ),
        )
        .help("sluice gives each trial its own metrics file by replacing the path where the container passes it (--log-path=PATH); pass the path to the program");
        ok = false;
    }
    if !ok {
        return None;
    }
    step.push(entry(container, "command", seq(container, words)));
    if let Some(image) = container.get("image") {
        step.push(entry(container, "image", image.clone()));
    }
    if !env.is_empty() {
        step.push(entry(container, "env", map(container, env)));
    }
    if let Some(resources) = container.get("resources").and_then(resources) {
        step.push(entry(container, "resources", resources));
    }
    super::pipeline::decode_trial(cx, &map(container, step))
}

/// Replaces each `${trialParameters.NAME}` by `{{params.REF}}`; the rest is kept literally
/// (a `{{` in it is escaped). None after reporting an unknown or unclosed name.
fn substitute(cx: &mut Cx<'_>, node: &Node, text: &str, refs: &TrialParams) -> Option<String> {
    const OPEN: &str = "${trialParameters.";
    let literal = |s: &str| s.replace("{{", "\\{{");
    let mut out = String::new();
    let mut rest = text;
    let mut ok = true;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&literal(&rest[..i]));
        let after = &rest[i + OPEN.len()..];
        let Some(end) = after.find('}') else {
            cx.d.error(
                node.pos,
                format!("unclosed ${{trialParameters...}} in '{text}'"),
            )
            .help("write ${trialParameters.NAME}");
            return None;
        };
        let name = &after[..end];
        match refs.get(name) {
            Some(Some(reference)) => out.push_str(&format!("{{{{params.{reference}}}}}")),
            // Its reference was wrong, and said so.
            Some(None) => ok = false,
            None => {
                let d = cx.d.error(
                    node.pos,
                    format!(
                        "${{trialParameters.{name}}}: trialTemplate.trialParameters has no '{name}'"
                    ),
                );
                d.suggest(name, refs.keys().map(String::as_str));
                if d.help.is_empty() {
                    d.help("declare it under trialTemplate.trialParameters with the parameter it references");
                }
                ok = false;
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(&literal(rest));
    ok.then_some(out)
}

/// Kubernetes' expansion of a container's command, args and env values: `$(NAME)` is the
/// value of an env variable defined before it (left as written when there is none), `$$` is
/// `$`.
fn expand_vars(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A container's `resources` as a sluice step's: what it requests, as Kubernetes schedules
/// it (a resource with a limit and no request requests its limit).
fn resources(node: &Node) -> Option<Node> {
    let mut found: BTreeMap<&str, Node> = BTreeMap::new();
    for part in ["limits", "requests"] {
        for e in node.get(part).and_then(Node::as_map).unwrap_or_default() {
            let key = match e.key.as_str() {
                "cpu" => "cpu",
                "memory" => "memory",
                "nvidia.com/gpu" => "gpu",
                _ => continue,
            };
            let mut value = e.value.clone();
            // `nvidia.com/gpu: "1"`: a count, however it was quoted.
            if key == "gpu"
                && let Value::Scalar(s) = &mut value.value
            {
                s.plain = true;
            }
            found.insert(key, value);
        }
    }
    if found.is_empty() {
        return None;
    }
    let entries = found.into_iter().map(|(k, v)| entry(node, k, v)).collect();
    Some(map(node, entries))
}

fn entry(at: &Node, key: &str, value: Node) -> Entry {
    Entry {
        key: key.into(),
        key_pos: at.pos,
        value,
    }
}

fn map(at: &Node, entries: Vec<Entry>) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Map(entries),
    }
}

fn seq(at: &Node, items: Vec<Node>) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Seq(items),
    }
}

/// A string, whatever it looks like (`"1"` stays text).
fn quoted(at: &Node, text: String) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Scalar(Scalar { text, plain: false }),
    }
}

/// A scalar read by its looks (`3` is a number).
fn plain(at: &Node, text: String) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Scalar(Scalar { text, plain: true }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{Action, Document};
    use super::*;
    use crate::spec::{Diagnostic, Severity};

    const EXPERIMENT: &str = r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: e, namespace: vision}
spec:
  objective: {type: minimize, goal: 0.1, objectiveMetricName: loss}
  algorithm:
    algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]
  earlyStopping:
    algorithmName: medianstop
    algorithmSettings: [{name: min_trials_required, value: "2"}]
  maxTrialCount: 5
  parameters:
    - {name: lr, parameterType: double, feasibleSpace: {min: "0.001", max: "0.1", distribution: logUniform}}
    - {name: num-layers, parameterType: int, feasibleSpace: {min: "2", max: "6", step: "2"}}
    - {name: opt, parameterType: discrete, feasibleSpace: {list: ["1", "2"]}}
  trialTemplate:
    primaryContainerName: main
    trialParameters:
      - {name: learningRate, reference: lr}
      - {name: layers, reference: num-layers}
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: side
                image: busybox
              - name: main
                image: example/train:1
                command: [python3, train.py]
                args: ["--lr=${trialParameters.learningRate}", "--layers", "${trialParameters.layers}"]
                resources: {limits: {cpu: "2", nvidia.com/gpu: "1"}}
            restartPolicy: Never
"#;

    fn load(text: &str) -> (Option<Sweep>, Vec<Diagnostic>) {
        let loaded = crate::spec::load("e.yaml", text.to_owned());
        let sweep = loaded.documents.into_iter().find_map(|d| match d {
            Document::Sweep(s) => Some(*s),
            _ => None,
        });
        (sweep, loaded.diagnostics.into_sorted())
    }

    fn clean(text: &str) -> (Sweep, Vec<Diagnostic>) {
        let (sweep, diags) = load(text);
        assert!(
            diags.iter().all(|d| d.severity != Severity::Error),
            "{diags:#?}"
        );
        (sweep.expect("a sweep"), diags)
    }

    /// The rendered messages (`LINE:COL: MESSAGE` and help lines).
    fn errors(text: &str) -> String {
        let (sweep, diags) = load(text);
        let errors: Vec<String> = diags
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| d.to_string())
            .collect();
        assert!(!errors.is_empty(), "no error; decoded {sweep:?}");
        errors.join("\n")
    }

    fn words(s: &Sweep) -> Vec<String> {
        let Action::Command(words) = &s.trial.action else {
            panic!("not a command");
        };
        words
            .iter()
            .map(|t| {
                t.render(|r| Ok::<_, ()>(format!("<{r}>")))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The example with `old` replaced by `new` (which must be found).
    fn edit(old: &str, new: &str) -> String {
        assert!(EXPERIMENT.contains(old), "{old}");
        EXPERIMENT.replacen(old, new, 1)
    }

    #[test]
    fn an_experiment_reads_as_a_sweep() {
        let (s, diags) = clean(EXPERIMENT);
        // bayesianoptimization runs as TPE, and says so with a warning.
        let warning = diags
            .iter()
            .find(|d| d.severity == Severity::Warning)
            .expect("a warning");
        assert!(warning.message.contains("runs as tpe"), "{warning:?}");
        assert_eq!(s.metadata.name, "e");
        assert_eq!(s.objective.goal, Goal::Minimize);
        assert_eq!(s.objective.target, Some(0.1));
        assert_eq!(s.objective.metric, "loss");
        assert_eq!(s.algorithm.name, "tpe");
        assert_eq!(s.algorithm.seed, 7);
        assert_eq!(s.algorithm.startup_trials, KATIB_STARTUP);
        assert_eq!(s.budget.max_trials, Some(5));
        // Katib's default parallelTrialCount.
        assert_eq!(s.budget.parallelism, 3);
        assert_eq!(s.budget.max_failed_trials, None);
        assert_eq!(
            s.early_stopping,
            Some(EarlyStopping {
                min_trials: 2,
                start_step: 4
            })
        );
        assert_eq!(
            s.params["lr"],
            SweepParam::Float {
                min: 0.001,
                max: 0.1,
                log: true,
                step: None
            }
        );
        assert_eq!(
            s.params["num-layers"],
            SweepParam::Int {
                min: 2,
                max: 6,
                log: false,
                step: 2
            }
        );
        assert_eq!(
            s.params["opt"],
            SweepParam::Categorical {
                values: vec!["1".into(), "2".into()]
            }
        );
        assert_eq!(
            words(&s),
            [
                "python3",
                "train.py",
                "--lr=<params.lr>",
                "--layers",
                "<params.num-layers>"
            ]
        );
        assert_eq!(s.trial.name, "trial");
        assert_eq!(s.trial.image.as_deref(), Some("example/train:1"));
        assert_eq!(s.trial.resources.millicpu, 2000);
        assert_eq!(s.trial.resources.gpu, 1);
        // As a `kind: Sweep` trial: metrics on stdout, no retries, no timeout.
        assert!(s.trial.metrics_stdout);
        assert_eq!(s.trial.retry.limit, 0);
        assert_eq!(s.trial.timeout, None);
    }

    #[test]
    fn numbers_are_read_as_numbers_or_strings() {
        let text = edit(
            r#"{min: "0.001", max: "0.1", distribution: logUniform}"#,
            r#"{min: 0.001, max: "1e-1", distribution: logUniform}"#,
        )
        .replace("goal: 0.1,", "goal: \"0.1\",")
        .replace(
            "maxTrialCount: 5",
            "maxTrialCount: \"5\"\n  parallelTrialCount: 2\n  maxFailedTrialCount: \"4\"",
        );
        let (s, _) = clean(&text);
        assert_eq!(s.objective.target, Some(0.1));
        assert_eq!(s.budget.max_trials, Some(5));
        assert_eq!(s.budget.parallelism, 2);
        assert_eq!(s.budget.max_failed_trials, Some(4));
        assert!(matches!(
            s.params["lr"],
            SweepParam::Float { min, max, log: true, .. } if min == 0.001 && max == 0.1
        ));
        let bad = edit(r#"min: "2""#, r#"min: "two""#);
        assert!(errors(&bad).contains("feasibleSpace.min: expected a number"));
        let fraction = edit(r#"min: "2""#, r#"min: "2.5""#);
        assert!(errors(&fraction).contains("'num-layers' (int) needs whole min, max and step"));
    }

    #[test]
    fn discrete_values_keep_their_text_and_doubles_take_steps() {
        let text = edit(r#"list: ["1", "2"]"#, "list: [0.10, 2, 1e-3]").replace(
            r#"{min: "2", max: "6", step: "2"}"#,
            r#"{min: "2", max: "6", step: "2", distribution: uniform}"#,
        );
        let (s, _) = clean(&text);
        assert_eq!(
            s.params["opt"],
            SweepParam::Categorical {
                values: vec!["0.10".into(), "2".into(), "1e-3".into()]
            }
        );
        let double = edit(
            r#"{name: num-layers, parameterType: int, feasibleSpace: {min: "2", max: "6", step: "2"}}"#,
            r#"{name: num-layers, parameterType: double, feasibleSpace: {min: "0.5", max: "1", step: "0.1"}}"#,
        );
        let (s, _) = clean(&double);
        assert_eq!(
            s.params["num-layers"],
            SweepParam::Float {
                min: 0.5,
                max: 1.0,
                log: false,
                step: Some(0.1)
            }
        );
        let twice = edit(r#"list: ["1", "2"]"#, r#"list: ["1", "1"]"#);
        assert!(errors(&twice).contains("value '1' is listed twice"));
        let empty = edit(r#"min: "2", max: "6""#, r#"min: "6", max: "6""#);
        assert!(errors(&empty).contains("max (6) must be above min (6)"));
    }

    #[test]
    fn distributions_other_than_uniform_are_errors() {
        let e = errors(&edit("distribution: logUniform", "distribution: normal"));
        assert!(
            e.contains("14:97: error: distribution 'normal' cannot be honoured by sluice"),
            "{e}"
        );
        assert!(
            e.contains("help: sluice samples uniform and logUniform"),
            "{e}"
        );
        let typo = errors(&edit(
            "distribution: logUniform",
            "distribution: loguniform",
        ));
        assert!(typo.contains("did you mean 'logUniform'?"), "{typo}");
    }

    #[test]
    fn trial_parameters_are_substituted_and_checked() {
        // Twice in one word, beside text with braces, and in env (with $(VAR) expansion).
        let text = edit(
            r#"args: ["--lr=${trialParameters.learningRate}", "--layers", "${trialParameters.layers}"]"#,
            r#"args: ["${trialParameters.layers}x${trialParameters.layers}", "{{x}}", "$(LR)", "$$(LR)", "$(NONE)"]
                env: [{name: LR, value: "${trialParameters.learningRate}"}, {name: EMPTY}]"#,
        );
        let (s, _) = clean(&text);
        assert_eq!(
            words(&s),
            [
                "python3",
                "train.py",
                "<params.num-layers>x<params.num-layers>",
                "{{x}}",
                "<params.lr>",
                "$(LR)",
                "$(NONE)"
            ]
        );
        let lr = s.trial.env["LR"]
            .render(|r| Ok::<_, ()>(format!("<{r}>")))
            .unwrap_or_default();
        assert_eq!(lr, "<params.lr>");
        assert!(s.trial.env.contains_key("EMPTY"));

        let unknown = errors(&edit(
            "${trialParameters.layers}",
            "${trialParameters.layer}",
        ));
        assert!(
            unknown
                .contains("${trialParameters.layer}: trialTemplate.trialParameters has no 'layer'"),
            "{unknown}"
        );
        assert!(
            unknown.contains("help: did you mean 'layers'?"),
            "{unknown}"
        );
        let reference = errors(&edit("reference: num-layers", "reference: num_layers"));
        assert!(
            reference.contains(
                "trial parameter 'layers' references 'num_layers', which is not a parameter"
            ),
            "{reference}"
        );
        assert!(
            reference.contains("did you mean 'num-layers'?"),
            "{reference}"
        );
        // The bad reference is reported once, not again where it is used.
        assert_eq!(reference.matches("error:").count(), 1, "{reference}");
        let secret = errors(&edit(
            r#"command: [python3, train.py]"#,
            r#"command: [python3, train.py]
                env: [{name: KEY, valueFrom: {secretKeyRef: {name: s, key: k}}}]"#,
        ));
        assert!(
            secret.contains("env 'KEY': valueFrom cannot be honoured by sluice"),
            "{secret}"
        );
    }

    #[test]
    fn algorithm_settings_map_under_katib_names() {
        let tpe = edit(
            r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
            r#"algorithmName: tpe
    algorithmSettings: [{name: n_EI_candidates, value: "30"}, {name: prior_weight, value: "1.0"}]"#,
        )
        .replace(
            "maxTrialCount: 5",
            "maxTrialCount: 5\n  parallelTrialCount: 4",
        );
        let (s, diags) = clean(&tpe);
        assert!(diags.is_empty(), "{diags:?}");
        assert_eq!(s.algorithm.name, "tpe");
        assert_eq!(s.algorithm.candidates, 30);
        // hyperopt draws the first request, parallelTrialCount trials, at random.
        assert_eq!(s.algorithm.startup_trials, 4);

        let optuna = edit(
            r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
            r#"algorithmName: multivariate-tpe
    algorithmSettings: [{name: startup_trials, value: "5"}, {name: ei_candidates, value: 12}, {name: random_state, value: "18446744073709551615"}]"#,
        );
        let (s, _) = clean(&optuna);
        assert_eq!(
            (
                s.algorithm.startup_trials,
                s.algorithm.candidates,
                s.algorithm.seed
            ),
            (5, 12, u64::MAX)
        );

        let skopt = edit(
            r#"[{name: random_state, value: "7"}]"#,
            r#"[{name: n_initial_points, value: "6"}, {name: acq_func, value: "EI"}]"#,
        );
        let e = errors(&skopt);
        assert!(
            e.contains(
                "algorithm setting 'acq_func' of bayesianoptimization cannot be honoured by sluice"
            ),
            "{e}"
        );
        let gamma = edit(
            r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
            r#"algorithmName: tpe
    algorithmSettings: [{name: gamma, value: "0.3"}, {name: n_startup_trials, value: "3"}]"#,
        );
        let e = errors(&gamma);
        assert!(e.contains("'gamma' of tpe cannot be honoured"), "{e}");
        assert!(
            e.contains("unknown algorithm setting 'n_startup_trials' for tpe"),
            "{e}"
        );
        let cmaes = errors(&edit(
            "algorithmName: bayesianoptimization",
            "algorithmName: cmaes",
        ));
        assert!(
            cmaes.contains("algorithm 'cmaes' cannot be run by sluice"),
            "{cmaes}"
        );
    }

    /// Katib's own Hyperband example: the resource parameter's range (1 to 1) is replaced by
    /// the brackets' budgets, from r_l and eta.
    #[test]
    fn hyperband_takes_its_budgets_from_r_l_and_eta() {
        let text = edit(
            r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
            r#"algorithmName: hyperband
    algorithmSettings:
      - {name: resource_name, value: num-epochs}
      - {name: eta, value: "3"}
      - {name: r_l, value: "9"}"#,
        )
        .replace(
            r#"    - {name: opt,"#,
            "    - {name: num-epochs, parameterType: int, feasibleSpace: {min: \"1\", max: \"1\"}}\n    - {name: opt,",
        );
        let (s, _) = clean(&text);
        assert_eq!(s.algorithm.name, "hyperband");
        assert_eq!(s.algorithm.resource.as_deref(), Some("num-epochs"));
        assert_eq!(s.algorithm.eta, 3);
        assert_eq!(s.algorithm.min_resource, Some(1.0));
        assert_eq!(s.algorithm.max_resource, Some(9.0));
        assert_eq!(
            s.params["num-epochs"],
            SweepParam::Int {
                min: 1,
                max: 9,
                log: false,
                step: 1
            }
        );
        let typo = errors(&text.replace("value: num-epochs}", "value: num-epoch}"));
        assert!(typo.contains("did you mean 'num-epochs'?"), "{typo}");
        let no_r_l = errors(&text.replace(r#"      - {name: r_l, value: "9"}"#, ""));
        assert!(
            no_r_l.contains("hyperband needs the setting r_l"),
            "{no_r_l}"
        );
    }

    #[test]
    fn the_job_maps_onto_the_trial_and_the_rest_is_refused() {
        let text = edit(
            "      spec:\n        template:",
            "      spec:\n        backoffLimit: 2\n        activeDeadlineSeconds: 600\n        template:",
        )
        .replace(
            r#"resources: {limits: {cpu: "2", nvidia.com/gpu: "1"}}"#,
            r#"resources: {limits: {cpu: "2", memory: 1Gi}, requests: {cpu: 500m}}"#,
        )
        .replace("maxTrialCount: 5", "maxTrialCount: 5\n  maxFailedTrialCount: 0");
        let (s, _) = clean(&text);
        assert_eq!(s.trial.retry.limit, 2);
        assert_eq!(s.trial.timeout, Some(std::time::Duration::from_secs(600)));
        // Requests, as Kubernetes schedules; limits where nothing is requested.
        assert_eq!(s.trial.resources.millicpu, 500);
        assert_eq!(s.trial.resources.memory, Some(1 << 30));
        // Katib fails at the first failed trial when maxFailedTrialCount is 0.
        assert_eq!(s.budget.max_failed_trials, Some(1));

        let pytorch = errors(&edit("kind: Job", "kind: PyTorchJob"));
        assert!(
            pytorch.contains("24:13: error: trialSpec kind 'PyTorchJob' cannot be run by sluice"),
            "{pytorch}"
        );
        let primary = errors(&edit(
            "primaryContainerName: main",
            "primaryContainerName: mian",
        ));
        assert!(primary.contains("did you mean 'main'?"), "{primary}");
        let workdir = errors(&edit(
            "image: example/train:1",
            "image: example/train:1\n                workingDir: /opt",
        ));
        assert!(
            workdir.contains("container field 'workingDir' cannot be honoured"),
            "{workdir}"
        );
        let early = errors(&edit(
            "algorithmName: medianstop",
            "algorithmName: hyperopt-stop",
        ));
        assert!(
            early.contains("early stopping 'hyperopt-stop' cannot be honoured"),
            "{early}"
        );
        let collector = errors(&edit(
            "  maxTrialCount: 5",
            "  maxTrialCount: 5\n  metricsCollectorSpec: {collector: {kind: TensorFlowEvent}}",
        ));
        assert!(
            collector.contains("metrics collector 'TensorFlowEvent' cannot be honoured"),
            "{collector}"
        );
        let strategy = errors(&edit(
            "objectiveMetricName: loss}",
            "objectiveMetricName: loss, metricStrategies: [{name: loss, value: best}, {name: acc, value: max}]}",
        ));
        assert!(
            strategy.contains("metricStrategies value 'best' is not min, max or latest"),
            "{strategy}"
        );
        assert!(
            strategy.contains("metricStrategies names 'acc', which is neither the objective nor an additional metric"),
            "{strategy}"
        );
    }

    #[test]
    fn the_objective_s_strategy_defaults_by_its_type_as_katib_s() {
        // Minimize: the objective's smallest observation; an additional metric's last.
        let (s, _) = clean(&edit(
            "objectiveMetricName: loss}",
            "objectiveMetricName: loss, additionalMetricNames: [acc]}",
        ));
        assert_eq!(
            s.objective.strategies,
            BTreeMap::from([("loss".into(), Strategy::Min)])
        );
        // Written ones win; latest is the runtime's default, so it is not carried.
        let (s, _) = clean(&edit(
            "objectiveMetricName: loss}",
            "objectiveMetricName: loss, additionalMetricNames: [acc], metricStrategies: [{name: acc, value: max}, {name: loss, value: latest}]}",
        ));
        assert_eq!(
            s.objective.strategies,
            BTreeMap::from([("acc".into(), Strategy::Max)])
        );
    }

    /// The example with a File collector and the trial's args passing its path.
    fn with_file_collector(source: &str) -> String {
        edit(
            "  maxTrialCount: 5",
            &format!("  maxTrialCount: 5\n  metricsCollectorSpec:\n    collector: {{kind: File}}\n{source}"),
        )
        .replacen(
            r#""--layers", "#,
            r#""--log-path=/katib/metrics.log", "--layers", "#,
            1,
        )
    }

    #[test]
    fn the_file_collector_reads_the_file_the_trial_is_given() {
        let (s, _) = clean(&with_file_collector(
            "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: File}\n      filter: {metricsFormat: [\"{metricName: ([\\\\w|-]+), metricValue: ((-?\\\\d+)(\\\\.\\\\d+)?)}\"]}\n",
        ));
        let file = s.trial.collect.file.as_ref().expect("a metrics file");
        assert_eq!(file.path, "/katib/metrics.log");
        assert_eq!(file.format, FileFormat::Text);
        assert_eq!(s.trial.collect.filters.len(), 1);
        // Katib's sidecar reads the file alone.
        assert!(!s.trial.metrics_stdout);
        // JSON: read by the experiment's metric names.
        let (s, _) = clean(&with_file_collector(
            "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: File, format: JSON}\n",
        ));
        let file = s.trial.collect.file.as_ref().expect("a metrics file");
        assert_eq!(
            (file.format, file.names.clone()),
            (FileFormat::Json, vec!["loss".to_owned()])
        );
        // The StdOut collector with filters reads the output through them.
        let (s, _) = clean(&edit(
            "  maxTrialCount: 5",
            "  maxTrialCount: 5\n  metricsCollectorSpec:\n    source: {filter: {metricsFormat: [\"(\\\\w+) is (\\\\d+)\"]}}\n",
        ));
        assert!(s.trial.metrics_stdout && s.trial.collect.file.is_none());
        assert_eq!(s.trial.collect.filters, vec!["(\\w+) is (\\d+)".to_owned()]);
    }

    #[test]
    fn a_file_system_path_with_the_stdout_collector_is_a_warning() {
        // Katib's StdOut collector reads the container's log whatever the path says.
        let (s, diags) = clean(&edit(
            "  maxTrialCount: 5",
            "  maxTrialCount: 5\n  metricsCollectorSpec:\n    source: {fileSystemPath: {path: /katib/x.log}}\n",
        ));
        assert!(
            diags.iter().any(|d| d.severity == Severity::Warning
                && d.message == "fileSystemPath has no effect with the StdOut collector"),
            "{diags:#?}"
        );
        assert!(s.trial.metrics_stdout && s.trial.collect.file.is_none());
    }

    #[test]
    fn a_file_collector_sluice_cannot_honour_is_refused() {
        // Katib's default path, which the trial is never given.
        let e = errors(&edit(
            "  maxTrialCount: 5",
            "  maxTrialCount: 5\n  metricsCollectorSpec: {collector: {kind: File}}",
        ));
        assert!(
            e.contains("the File collector's path '/var/log/katib/metrics.log' is not in the trial container's command, args or env"),
            "{e}"
        );
        let e = errors(&with_file_collector(
            "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: Directory, format: JSON}\n      filter: {metricsFormat: [\"(\\\\w+)\"]}\n",
        ));
        assert!(
            e.contains("fileSystemPath kind 'Directory' is not File"),
            "{e}"
        );
        assert!(
            e.contains("metricsFormat '(\\w+)' cannot be read: it has 1 group(s)"),
            "{e}"
        );
        let e = errors(&with_file_collector(
            "    source:\n      fileSystemPath: {path: /katib/metrics.log, format: JSON}\n      filter: {metricsFormat: [\"(a)(b)\"]}\n",
        ));
        assert!(e.contains("source.filter is for TEXT metrics files"), "{e}");
        let e = errors(&with_file_collector(
            "    source:\n      fileSystemPath: {path: katib/metrics.log}\n",
        ));
        assert!(e.contains("is not an absolute path"), "{e}");
    }

    #[test]
    fn unknown_fields_are_named_with_a_suggestion() {
        let e = errors(&edit(
            "  maxTrialCount: 5",
            "  maxTrialCount: 5\n  maxTrailCount: 5",
        ));
        assert!(e.contains("unknown field 'maxTrailCount' in spec"), "{e}");
        let top = errors(&format!("{EXPERIMENT}specs: {{}}\n"));
        assert!(top.contains("unknown field 'specs'"), "{top}");
        // `status`, as `kubectl get -o yaml` writes it, is not read.
        clean(&format!("{EXPERIMENT}status: {{trialsSucceeded: 3}}\n"));
    }
}
