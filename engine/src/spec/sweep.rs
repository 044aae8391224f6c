//! `kind: Sweep` decoding: objective, algorithm, early stopping, budget, the searched
//! parameters and the trial template, each problem reported where it was written.

use std::collections::BTreeMap;

use super::decode::Cx;
use super::model::{
    Budget, EarlyStopping, Goal, Metadata, Objective, Strategy, Sweep, SweepAlgorithm, SweepParam,
};
use super::template::{Ref, Scope};
use super::yaml::Node;

const FIELDS: &[&str] = &[
    "objective",
    "algorithm",
    "earlyStopping",
    "budget",
    "params",
    "trial",
];
pub(super) const ALGORITHMS: &[&str] = &["grid", "random", "sobol", "tpe", "hyperband", "asha"];
const PARAM_TYPES: &[&str] = &["float", "int", "categorical"];

/// Decodes a Sweep's `spec`; None when a required part is missing or wrong (every problem is
/// reported either way).
pub fn decode(cx: &mut Cx<'_>, metadata: Metadata, spec: &Node) -> Option<Sweep> {
    decode_in(cx, metadata, spec, None)
}

/// Decodes the `sweep:` of a pipeline step: there the trial may also read the pipeline's
/// parameters (`pipeline_params`, the names declared), as `{{pipeline.params.NAME}}`.
pub fn decode_nested(
    cx: &mut Cx<'_>,
    step: &str,
    spec: &Node,
    pipeline_params: &[String],
) -> Option<Sweep> {
    let metadata = Metadata {
        name: step.to_owned(),
        team: "default".into(),
        labels: BTreeMap::new(),
    };
    decode_in(cx, metadata, spec, Some(pipeline_params))
}

/// `pipeline_params` is `Some` for a sweep step's sweep.
fn decode_in(
    cx: &mut Cx<'_>,
    metadata: Metadata,
    spec: &Node,
    pipeline_params: Option<&[String]>,
) -> Option<Sweep> {
    let nested = pipeline_params.is_some();
    cx.fields(spec, "spec", FIELDS)?;
    let required = |cx: &mut Cx<'_>, key: &str, example: &str| {
        let node = spec.get(key);
        if node.is_none() {
            cx.d.error(spec.pos, format!("a sweep needs '{key}'"))
                .help(format!("add {key}: {example}"));
        }
        node
    };
    let objective = required(cx, "objective", "{metric: accuracy, goal: maximize}")
        .and_then(|n| objective(cx, n));
    let params = required(
        cx,
        "params",
        "{lr: {type: float, min: 1.0e-5, max: 0.1, scale: log}}",
    )
    .and_then(|n| params(cx, n));
    let algorithm = required(cx, "algorithm", "{name: tpe, seed: 42}")
        .and_then(|n| algorithm(cx, n, params.as_ref()));
    let grid = spec
        .get("algorithm")
        .and_then(|a| a.get("name"))
        .and_then(|n| n.as_scalar())
        .is_some_and(|n| n.text == "grid");
    let budget =
        required(cx, "budget", "{maxTrials: 50, parallelism: 4}").and_then(|n| budget(cx, n, grid));
    let early_stopping = spec
        .get("earlyStopping")
        .and_then(|n| early_stopping(cx, n));
    // Every parameter declared, valid or not: a trial's reference to one with an error is not
    // a second error, and one to a name never declared is found even when others are bad.
    let declared: Option<Vec<String>> = spec
        .get("params")
        .and_then(Node::as_map)
        .map(|m| m.iter().map(|e| e.key.clone()).collect());
    let scope = match pipeline_params {
        Some(pipeline) => Scope::Trial {
            sweep: declared.as_deref().unwrap_or_default(),
            pipeline,
        },
        None => Scope::Params,
    };
    let trial = required(cx, "trial", "{run: python train.py --lr {{params.lr}}}")
        .and_then(|n| super::pipeline::decode_trial_in(cx, n, scope));
    if let (Some(trial), Some(declared)) = (&trial, &declared) {
        for r in trial.refs() {
            match &r.reference {
                Ref::Param(name) if !declared.contains(name) => {
                    let d = cx.d.error(
                        r.pos,
                        format!("{}: the sweep has no parameter '{name}'", r.raw),
                    );
                    d.suggest(name, declared.iter().map(String::as_str));
                    if d.help.is_empty() && !declared.is_empty() {
                        d.help(format!("its parameters are: {}", declared.join(", ")));
                    }
                }
                Ref::Param(_) | Ref::RunId | Ref::RunName | Ref::Team => {}
                Ref::PipelineParam(_) if nested => {}
                _ => {
                    cx.d.error(
                        r.pos,
                        format!("{} is not available in a sweep's trial", r.raw),
                    )
                    .help("a trial reads its proposed values as {{params.NAME}}");
                }
            }
        }
    }
    Some(Sweep {
        metadata,
        objective: objective?,
        algorithm: algorithm?,
        early_stopping,
        budget: budget?,
        params: params?,
        trial: trial?,
    })
}

fn objective(cx: &mut Cx<'_>, node: &Node) -> Option<Objective> {
    cx.fields(
        node,
        "objective",
        &["metric", "goal", "target", "additionalMetrics", "strategy"],
    )?;
    let metric = match node.get("metric") {
        Some(m) => cx.string(m, "objective.metric"),
        None => {
            cx.d.error(node.pos, "objective needs 'metric'")
                .help("add metric: the name the trials report, as in accuracy=0.91");
            None
        }
    };
    let goal = match node.get("goal") {
        None => {
            cx.d.error(node.pos, "objective needs 'goal'")
                .help("add goal: maximize (or minimize)");
            None
        }
        Some(g) => match cx.string(g, "objective.goal").as_deref() {
            Some("maximize") => Some(Goal::Maximize),
            Some("minimize") => Some(Goal::Minimize),
            Some(other) => {
                cx.d.error(
                    g.pos,
                    format!("objective.goal '{other}' is not maximize or minimize"),
                )
                .suggest(other, ["maximize", "minimize"]);
                None
            }
            None => None,
        },
    };
    let target = node
        .get("target")
        .and_then(|t| cx.number(t, "objective.target"));
    let additional_metrics = node
        .get("additionalMetrics")
        .and_then(|m| cx.string_list(m, "objective.additionalMetrics", "a list of metric names"))
        .map(|l| l.into_iter().map(|(name, _)| name).collect())
        .unwrap_or_default();
    // Which observation is a trial's value: the last (the default), or its best as Katib's
    // `metricStrategies` pick it (`max`, `min`).
    let strategy = match node.get("strategy") {
        None => Some(Strategy::Latest),
        Some(n) => match cx.string(n, "objective.strategy").as_deref() {
            Some("latest") => Some(Strategy::Latest),
            Some("max") => Some(Strategy::Max),
            Some("min") => Some(Strategy::Min),
            Some(other) => {
                let d = cx.d.error(
                    n.pos,
                    format!("objective.strategy '{other}' is not latest, max or min"),
                );
                d.suggest(other, ["latest", "max", "min"]);
                d.help("a trial's value is its last observation (latest), or its largest (max) or smallest (min)");
                None
            }
            None => None,
        },
    };
    let metric = metric?;
    let strategies = match strategy? {
        Strategy::Latest => BTreeMap::new(),
        s => BTreeMap::from([(metric.clone(), s)]),
    };
    Some(Objective {
        metric,
        goal: goal?,
        target,
        additional_metrics,
        strategies,
    })
}

fn params(cx: &mut Cx<'_>, node: &Node) -> Option<BTreeMap<String, SweepParam>> {
    let Some(entries) = node.as_map() else {
        cx.expected(
            node,
            "params",
            "a mapping of parameter names to their spaces",
        );
        return None;
    };
    if entries.is_empty() {
        cx.d.error(node.pos, "a sweep searches at least one parameter")
            .help("add lr: {type: float, min: 1.0e-5, max: 0.1, scale: log}");
        return None;
    }
    let mut out = BTreeMap::new();
    let mut ok = true;
    for e in entries {
        if !super::decode::is_identifier(&e.key) {
            cx.d.error(
                e.key_pos,
                format!("parameter name '{}' is not an identifier", e.key),
            )
            .help("use letters, digits and _ (lr, num_layers)");
            ok = false;
            continue;
        }
        match param(cx, &e.key, &e.value) {
            Some(p) => {
                out.insert(e.key.clone(), p);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// One searched parameter. Each problem is reported, not only the first: a bad scale does
/// not hide bad bounds, nor one misplaced key the next. A check that needs a value another
/// check refused is skipped (a step's range needs valid bounds).
fn param(cx: &mut Cx<'_>, name: &str, node: &Node) -> Option<SweepParam> {
    let field = format!("params.{name}");
    cx.fields(
        node,
        &field,
        &["type", "min", "max", "scale", "step", "values"],
    )?;
    let Some(t) = node.get("type") else {
        cx.d.error(node.pos, format!("{field} needs 'type'"))
            .help("add type: float, int or categorical");
        return None;
    };
    let ty = cx.string(t, &format!("{field}.type"))?;
    let mut ok = true;
    match ty.as_str() {
        "float" | "int" => {
            let log = match node.get("scale") {
                None => false,
                Some(s) => match cx.string(s, &format!("{field}.scale")).as_deref() {
                    Some("log") => true,
                    Some("linear") => false,
                    Some(other) => {
                        cx.d.error(
                            s.pos,
                            format!("{field}.scale '{other}' is not linear or log"),
                        )
                        .suggest(other, ["linear", "log"]);
                        ok = false;
                        false
                    }
                    None => {
                        ok = false;
                        false
                    }
                },
            };
            if let Some(v) = node.get("values") {
                cx.d.error(
                    v.pos,
                    format!("{field}: values are for categorical parameters"),
                )
                .help("give min and max (and step) for a number");
                ok = false;
            }
            let bound = |cx: &mut Cx<'_>, key: &str| match node.get(key) {
                Some(n) => cx.number(n, &format!("{field}.{key}")).map(|v| (v, n.pos)),
                None => {
                    cx.d.error(node.pos, format!("{field} needs '{key}'"))
                        .help(format!("add {key}: a number"));
                    None
                }
            };
            let (min, max) = (bound(cx, "min"), bound(cx, "max"));
            // The bounds, when both are numbers in order: what a step is measured against.
            let mut range = None;
            if let (Some((lo, _)), Some((hi, hi_pos))) = (min, max) {
                if lo >= hi {
                    cx.d.error(
                        hi_pos,
                        format!("{field}: max ({hi}) must be above min ({lo})"),
                    );
                } else {
                    range = Some((lo, hi));
                }
            }
            if log
                && let Some((lo, _)) = min
                && lo <= 0.0
            {
                cx.d.error(
                    node.pos,
                    format!("{field}: a log scale needs min above 0 (it is {lo})"),
                )
                .help("use scale: linear, or a small positive min such as 1.0e-6");
                ok = false;
            }
            let step = match node.get("step") {
                Some(s) => {
                    let v = cx.number(s, &format!("{field}.step"));
                    if let Some(v) = v
                        && (v <= 0.0 || range.is_some_and(|(lo, hi)| v > hi - lo))
                    {
                        cx.d.error(
                            s.pos,
                            format!("{field}.step must be above 0 and at most max - min"),
                        );
                        ok = false;
                    }
                    if log {
                        cx.d.error(
                            s.pos,
                            format!("{field}: step and scale: log do not go together"),
                        )
                        .help("a log scale is searched continuously; remove step or the scale");
                        ok = false;
                    }
                    ok &= v.is_some();
                    v
                }
                None => None,
            };
            if ty == "int" {
                let whole = |v: f64| v.fract() == 0.0 && v.abs() < 9.0e15;
                if min.is_some_and(|(v, _)| !whole(v))
                    || max.is_some_and(|(v, _)| !whole(v))
                    || step.is_some_and(|s| !whole(s))
                {
                    cx.d.error(
                        node.pos,
                        format!("{field}: an int parameter needs whole min, max and step"),
                    );
                    ok = false;
                }
            }
            let (min, max) = range.filter(|_| ok)?;
            if ty == "int" {
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
        "categorical" => {
            for key in ["min", "max", "step", "scale"] {
                if let Some(v) = node.get(key) {
                    cx.d.error(
                        v.pos,
                        format!("{field}: {key} is for float and int parameters"),
                    )
                    .help("a categorical parameter lists its values");
                    ok = false;
                }
            }
            let Some(v) = node.get("values") else {
                cx.d.error(node.pos, format!("{field} needs 'values'"))
                    .help("add values: [adam, sgd]");
                return None;
            };
            // Any scalars: [adam, sgd], [32, 64, 128]; a trial sees the value's text.
            let Some(items) = v.as_seq() else {
                cx.expected(v, &format!("{field}.values"), "a list of values");
                return None;
            };
            let mut listed = Vec::with_capacity(items.len());
            for item in items {
                match item.as_scalar() {
                    Some(sc) => listed.push((sc.text.clone(), item.pos)),
                    None => {
                        cx.expected(
                            item,
                            &format!("{field}.values"),
                            "a value (a string or a number)",
                        );
                        ok = false;
                    }
                }
            }
            if items.is_empty() {
                cx.d.error(v.pos, format!("{field}: values is empty"))
                    .help("list at least one value");
                return None;
            }
            let mut seen = std::collections::BTreeSet::new();
            for (value, pos) in &listed {
                if !seen.insert(value) {
                    cx.d.error(*pos, format!("{field}: value '{value}' is listed twice"));
                    ok = false;
                }
            }
            ok.then(|| SweepParam::Categorical {
                values: listed.into_iter().map(|(v, _)| v).collect(),
            })
        }
        other => {
            cx.d.error(
                t.pos,
                format!("{field}.type '{other}' is not a sweep parameter type"),
            )
            .suggest(other, PARAM_TYPES.iter().copied());
            None
        }
    }
}

fn algorithm(
    cx: &mut Cx<'_>,
    node: &Node,
    params: Option<&BTreeMap<String, SweepParam>>,
) -> Option<SweepAlgorithm> {
    cx.fields(node, "algorithm", &["name", "seed", "settings"])?;
    let Some(n) = node.get("name") else {
        cx.d.error(node.pos, "algorithm needs 'name'")
            .help(format!("add name: one of {}", ALGORITHMS.join(", ")));
        return None;
    };
    let name = cx.string(n, "algorithm.name");
    // The seed means the same to every algorithm: checked even when the name is wrong.
    let seed = node
        .get("seed")
        .and_then(|s| cx.uint(s, "algorithm.seed", 0))
        .unwrap_or(0);
    let name = name?;
    if !ALGORITHMS.contains(&name.as_str()) {
        let d = cx.d.error(n.pos, format!("unknown algorithm '{name}'"));
        d.suggest(&name, ALGORITHMS.iter().copied());
        if d.help.is_empty() {
            d.help(format!("algorithms are {}", ALGORITHMS.join(", ")));
        }
        return None;
    }
    let mut alg = SweepAlgorithm {
        name: name.clone(),
        seed,
        startup_trials: 10,
        candidates: 24,
        gamma: crate::sweep::tpe::DEFAULT_GAMMA,
        resource: None,
        min_resource: None,
        max_resource: None,
        eta: 3,
    };
    let allowed: &[&str] = match name.as_str() {
        "tpe" => &["startupTrials", "candidates", "gamma"],
        "hyperband" | "asha" => &["resource", "minResource", "maxResource", "eta"],
        _ => &[],
    };
    let mut ok = true;
    if let Some(settings) = node.get("settings") {
        if allowed.is_empty() && settings.as_map().is_some_and(|m| !m.is_empty()) {
            cx.d.error(
                settings.pos,
                format!("algorithm '{name}' takes no settings"),
            )
            .help("settings are for tpe, hyperband and asha");
            ok = false;
        }
        let entries = if ok {
            cx.fields(settings, "algorithm.settings", allowed)
        } else {
            None
        };
        for e in entries.unwrap_or_default() {
            let f = format!("algorithm.settings.{}", e.key);
            match e.key.as_str() {
                "startupTrials" => alg.startup_trials = cx.uint(&e.value, &f, 1).unwrap_or(10),
                "candidates" => alg.candidates = cx.uint(&e.value, &f, 1).unwrap_or(24),
                "gamma" => match cx.number(&e.value, &f) {
                    Some(g) if g > 0.0 && g < 1.0 => alg.gamma = g,
                    Some(g) => {
                        cx.d.error(
                            e.value.pos,
                            format!("{f} must be between 0 and 1 (it is {g})"),
                        );
                        ok = false;
                    }
                    None => ok = false,
                },
                "resource" => alg.resource = cx.string(&e.value, &f),
                "minResource" => alg.min_resource = cx.number(&e.value, &f),
                "maxResource" => alg.max_resource = cx.number(&e.value, &f),
                "eta" => alg.eta = cx.uint(&e.value, &f, 2).unwrap_or(3),
                _ => {}
            }
        }
    }
    if matches!(name.as_str(), "hyperband" | "asha") {
        match &alg.resource {
            None => {
                cx.d.error(node.pos, format!("{name} needs settings.resource"))
                    .help("name the parameter holding a trial's budget: resource: epochs");
                ok = false;
            }
            Some(r) if params.is_some_and(|p| !p.contains_key(r)) => {
                let d = cx.d.error(
                    node.get("settings").map_or(node.pos, |s| s.pos),
                    format!("algorithm.settings.resource '{r}' is not a parameter of the sweep"),
                );
                d.suggest(
                    r,
                    params
                        .into_iter()
                        .flat_map(|p| p.keys().map(String::as_str)),
                );
                ok = false;
            }
            Some(r) => {
                let settings = node.get("settings").map_or(node.pos, |s| s.pos);
                match params.and_then(|p| p.get(r)) {
                    Some(SweepParam::Categorical { .. }) => {
                        cx.d.error(
                            settings,
                            format!("algorithm.settings.resource '{r}' is a categorical parameter; a trial's budget is a number"),
                        )
                        .help(format!("make '{r}' an int or float parameter (epochs: {{type: int, min: 1, max: 27}})"));
                        ok = false;
                    }
                    // Budgets grow by `eta` from the smallest: a smallest budget of 0 (or less)
                    // never grows into the largest one.
                    Some(SweepParam::Int { min, .. })
                        if alg.min_resource.is_none() && *min <= 0 =>
                    {
                        cx.d.error(settings, format!("the resource '{r}' starts at {min}: {name} needs a smallest budget above 0"))
                            .help("give the parameter a min of at least 1, or set settings.minResource");
                        ok = false;
                    }
                    Some(SweepParam::Float { min, .. })
                        if alg.min_resource.is_none() && *min <= 0.0 =>
                    {
                        cx.d.error(settings, format!("the resource '{r}' starts at {min}: {name} needs a smallest budget above 0"))
                            .help("give the parameter a min above 0, or set settings.minResource");
                        ok = false;
                    }
                    _ => {}
                }
            }
        }
        if let Some(lo) = alg.min_resource
            && lo <= 0.0
        {
            cx.d.error(
                node.pos,
                format!("algorithm.settings.minResource ({lo}) must be above 0: budgets grow from it by eta"),
            );
            ok = false;
        }
        if let (Some(lo), Some(hi)) = (alg.min_resource, alg.max_resource)
            && lo >= hi
        {
            cx.d.error(
                node.pos,
                format!("algorithm.settings: maxResource ({hi}) must be above minResource ({lo})"),
            );
            ok = false;
        }
    }
    if name == "grid"
        && let Some(params) = params
        && let Some((p, _)) = params
            .iter()
            .find(|(_, p)| matches!(p, SweepParam::Float { step: None, .. }))
    {
        cx.d.error(
            n.pos,
            format!("grid search needs a step for float parameter '{p}'"),
        )
        .help(format!("add step: to params.{p}, or use random or sobol"));
        ok = false;
    }
    ok.then_some(alg)
}

fn budget(cx: &mut Cx<'_>, node: &Node, grid: bool) -> Option<Budget> {
    cx.fields(
        node,
        "budget",
        &["maxTrials", "parallelism", "maxFailedTrials", "maxDuration"],
    )?;
    // Every field is read (and its problems reported) before the missing maxTrials is.
    let budget = Budget {
        max_trials: node
            .get("maxTrials")
            .and_then(|n| cx.uint(n, "budget.maxTrials", 1)),
        parallelism: node
            .get("parallelism")
            .and_then(|n| cx.u32(n, "budget.parallelism", 1))
            .unwrap_or(1),
        max_failed_trials: node
            .get("maxFailedTrials")
            .and_then(|n| cx.uint(n, "budget.maxFailedTrials", 1)),
        max_duration: node
            .get("maxDuration")
            .and_then(|n| cx.duration(n, "budget.maxDuration")),
    };
    if node.get("maxTrials").is_none() && !grid {
        cx.d.error(node.pos, "budget needs 'maxTrials'")
            .help("add maxTrials: how many trials to run (only grid search may omit it)");
        return None;
    }
    Some(budget)
}

fn early_stopping(cx: &mut Cx<'_>, node: &Node) -> Option<EarlyStopping> {
    cx.fields(node, "earlyStopping", &["name", "minTrials", "startStep"])?;
    let named = match node.get("name") {
        None => {
            cx.d.error(node.pos, "earlyStopping needs 'name'")
                .help("add name: median");
            false
        }
        Some(n) => match cx.string(n, "earlyStopping.name") {
            Some(name) if name == "median" => true,
            Some(name) => {
                cx.d.error(n.pos, format!("unknown early stopping rule '{name}'"))
                    .help("the rule is median");
                false
            }
            None => false,
        },
    };
    // The rule's settings are checked whatever its name.
    let stopping = EarlyStopping {
        min_trials: node
            .get("minTrials")
            .and_then(|n| cx.uint(n, "earlyStopping.minTrials", 1))
            .unwrap_or(5),
        start_step: node
            .get("startStep")
            .and_then(|n| cx.uint(n, "earlyStopping.startStep", 0))
            .unwrap_or(3),
    };
    named.then_some(stopping)
}
