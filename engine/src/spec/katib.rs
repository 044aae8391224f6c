//! Katib `Experiment` files (`kubeflow.org/v1beta1`) read as sweeps.
//!
//! What maps: the objective (Katib's `type` is the goal, its `goal` the target), the
//! algorithm (`random`, `grid`, `tpe`, `hyperband`; `bayesianoptimization` runs as TPE with a
//! warning), the trial counts, the parameters (Katib writes numbers as strings), and the
//! primary container of the trial's Job: its `command` and `args` become the trial's argument
//! vector with each `${trialParameters.NAME}` replaced by `{{params.REF}}`, its `image` is
//! recorded and its resources are asked for. Anything that would change the search or the
//! trial and cannot be honoured is an error naming it; fields with no effect on one machine
//! (descriptions, `restartPolicy`, labels and annotations, the Job's `apiVersion`/`kind`) are
//! ignored.

use std::collections::BTreeMap;

use super::decode::Cx;
use super::model::{
    Budget, EarlyStopping, Goal, Metadata, Objective, Sweep, SweepAlgorithm, SweepParam,
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

/// Katib's default `parallelTrialCount`.
const KATIB_PARALLELISM: u32 = 3;

/// Decodes an Experiment's `spec` into a sweep; None after reporting what is wrong.
pub fn decode(cx: &mut Cx<'_>, metadata: Metadata, spec: &Node) -> Option<Sweep> {
    let entries = cx.fields(spec, "spec", SPEC_FIELDS)?;
    for e in entries {
        let why = match e.key.as_str() {
            "nasConfig" => "neural architecture search is not supported",
            "resumePolicy" => match e.value.as_scalar().map(|s| s.text.as_str()) {
                // Katib's default; sluice sweeps always resume from their state.
                Some("Never" | "LongRunning" | "FromVolume") | None => continue,
                Some(_) => "resumePolicy is Never, LongRunning or FromVolume",
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
    let parameters = required(cx, spec, "parameters").and_then(|n| parameters(cx, n));
    let algorithm = required(cx, spec, "algorithm").and_then(|n| algorithm(cx, n));
    if let Some(m) = spec.get("metricsCollectorSpec") {
        metrics_collector(cx, m);
    }
    let count = |cx: &mut Cx<'_>, key: &str, min: u64| {
        spec.get(key)
            .and_then(|n| number_text(cx, n, &format!("spec.{key}")))
            .and_then(|(v, pos)| {
                if v.fract() == 0.0 && v >= min as f64 {
                    Some(v as u64)
                } else {
                    cx.d.error(pos, format!("spec.{key}: expected a whole number >= {min}"));
                    None
                }
            })
    };
    let parallelism = count(cx, "parallelTrialCount", 1)
        .map_or(KATIB_PARALLELISM, |p| u32::try_from(p).unwrap_or(u32::MAX));
    let max_trials = count(cx, "maxTrialCount", 1);
    let max_failed_trials = count(cx, "maxFailedTrialCount", 0);
    let grid = algorithm.as_ref().is_some_and(|a| a.name == "grid");
    if max_trials.is_none() && !grid && spec.get("maxTrialCount").is_none() {
        cx.d.error(spec.pos, "spec.maxTrialCount is required (except for grid)")
            .help("add maxTrialCount: 12");
    }
    let trial = required(cx, spec, "trialTemplate").and_then(|n| trial(cx, n, parameters.as_ref()));
    let mut algorithm = algorithm?;
    let params = parameters?;
    if matches!(algorithm.name.as_str(), "hyperband") {
        let resource = algorithm.resource.clone().unwrap_or_default();
        if !params.contains_key(&resource) {
            let pos = spec.get("algorithm").map_or(spec.pos, |a| a.pos);
            cx.d.error(
                pos,
                format!("hyperband's resource_name '{resource}' is not a parameter of the experiment"),
            )
            .help("set algorithmSettings: [{name: resource_name, value: epochs}], naming an int or double parameter");
            return None;
        }
        if algorithm.max_resource.is_none()
            && let Some(SweepParam::Int { max, .. }) = params.get(&resource)
        {
            algorithm.max_resource = Some(*max as f64);
        }
    }
    Some(Sweep {
        metadata,
        objective: objective?,
        algorithm,
        early_stopping: spec
            .get("earlyStopping")
            .and_then(|n| early_stopping(cx, n)),
        budget: Budget {
            max_trials,
            parallelism,
            max_failed_trials,
            max_duration: None,
        },
        params,
        trial: trial?,
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
fn number_text(cx: &mut Cx<'_>, node: &Node, field: &str) -> Option<(f64, super::diagnostic::Pos)> {
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
    let additional_metrics = node
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
    // A trial's value is its last observation: Katib's `latest` strategy. `min`/`max` would
    // pick another observation, so they cannot be honoured.
    if let Some(strategies) = node.get("metricStrategies").and_then(Node::as_seq) {
        for s in strategies {
            if let Some(v) = s.get("value")
                && let Some(text) = v.as_scalar().map(|x| x.text.as_str())
                && text != "latest"
            {
                cx.d.error(
                    v.pos,
                    format!("metricStrategies value '{text}' cannot be honoured by sluice"),
                )
                .help("sluice takes each trial's last observation (value: latest)");
            }
        }
    }
    Some(Objective {
        metric: metric?,
        goal: goal?,
        target,
        additional_metrics,
    })
}

fn algorithm(cx: &mut Cx<'_>, node: &Node) -> Option<SweepAlgorithm> {
    cx.fields(node, "algorithm", &["algorithmName", "algorithmSettings"])?;
    let name_node = node.get("algorithmName");
    let Some(name_node) = name_node else {
        cx.d.error(node.pos, "algorithm needs 'algorithmName'")
            .help("add algorithmName: random");
        return None;
    };
    let name = cx.string(name_node, "algorithm.algorithmName")?;
    let mut alg = SweepAlgorithm {
        name: name.clone(),
        seed: 0,
        startup_trials: 10,
        candidates: 24,
        gamma: crate::sweep::tpe::DEFAULT_GAMMA,
        resource: None,
        min_resource: None,
        max_resource: None,
        eta: 3,
    };
    let known = ["random", "grid", "tpe", "hyperband", "bayesianoptimization"];
    match name.as_str() {
        "random" | "grid" | "tpe" | "hyperband" => {}
        "bayesianoptimization" => {
            cx.d.warning(name_node.pos, "bayesianoptimization runs as tpe in sluice")
                .help("write algorithmName: tpe to say so");
            alg.name = "tpe".into();
        }
        other => {
            let d = cx.d.error(
                name_node.pos,
                format!("algorithm '{other}' cannot be run by sluice"),
            );
            d.suggest(other, known);
            if d.help.is_empty() {
                d.help(format!("sluice runs {}", known.join(", ")));
            }
            return None;
        }
    }
    let Some(settings) = node.get("algorithmSettings") else {
        return Some(alg);
    };
    let Some(items) = settings.as_seq() else {
        cx.expected(
            settings,
            "algorithm.algorithmSettings",
            "a list of {name, value}",
        );
        return None;
    };
    let mut ok = true;
    for item in items {
        let Some(n) = item.get("name") else {
            cx.expected(item, "algorithmSettings", "{name: ..., value: ...}");
            ok = false;
            continue;
        };
        let key = cx.string(n, "algorithmSettings.name").unwrap_or_default();
        let value = item.get("value");
        let num = |cx: &mut Cx<'_>| -> Option<f64> {
            value.and_then(|v| number_text(cx, v, &format!("algorithmSettings {key}")).map(|x| x.0))
        };
        match (alg.name.as_str(), key.as_str()) {
            (_, "random_state") => match num(cx) {
                Some(v) if v >= 0.0 => alg.seed = v as u64,
                _ => ok = false,
            },
            ("tpe", "n_startup_trials") => match num(cx) {
                Some(v) if v >= 1.0 => alg.startup_trials = v as u64,
                _ => ok = false,
            },
            ("tpe", "n_ei_candidates") => match num(cx) {
                Some(v) if v >= 1.0 => alg.candidates = v as u64,
                _ => ok = false,
            },
            ("hyperband", "resource_name") => {
                alg.resource = value.and_then(|v| cx.string(v, "algorithmSettings resource_name"));
            }
            ("hyperband", "eta") => match num(cx) {
                Some(v) if v >= 2.0 => alg.eta = v as u64,
                _ => ok = false,
            },
            ("hyperband", "r_l") => alg.max_resource = num(cx),
            (algorithm, _) => {
                cx.d.error(
                    n.pos,
                    format!(
                        "algorithm setting '{key}' of {algorithm} cannot be honoured by sluice"
                    ),
                )
                .help(match algorithm {
                    "tpe" => "sluice reads random_state, n_startup_trials and n_ei_candidates",
                    "hyperband" => "sluice reads random_state, resource_name, eta and r_l",
                    _ => "sluice reads random_state",
                });
                ok = false;
            }
        }
    }
    if alg.name == "hyperband" && alg.resource.is_none() {
        cx.d.error(settings.pos, "hyperband needs the setting resource_name")
            .help("add {name: resource_name, value: epochs}, naming the parameter holding a trial's budget");
        ok = false;
    }
    ok.then_some(alg)
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
    for item in node
        .get("algorithmSettings")
        .and_then(Node::as_seq)
        .unwrap_or_default()
    {
        let key = item
            .get("name")
            .and_then(|n| n.as_scalar())
            .map(|s| s.text.clone());
        let value = item
            .get("value")
            .and_then(|v| number_text(cx, v, "earlyStopping setting"))
            .map(|(v, _)| v.max(0.0) as u64);
        match (key.as_deref(), value) {
            (Some("min_trials_required"), Some(v)) => rule.min_trials = v,
            (Some("start_step"), Some(v)) => rule.start_step = v,
            (Some(other), _) => {
                cx.d.error(
                    item.pos,
                    format!("early stopping setting '{other}' cannot be honoured by sluice"),
                )
                .help("sluice reads min_trials_required and start_step");
            }
            (None, _) => cx.expected(item, "earlyStopping.algorithmSettings", "{name, value}"),
        }
    }
    Some(rule)
}

fn metrics_collector(cx: &mut Cx<'_>, node: &Node) {
    let kind = node.get("collector").and_then(|c| c.get("kind"));
    if let Some(k) = kind
        && let Some(text) = k.as_scalar().map(|s| s.text.clone())
        && text != "StdOut"
    {
        cx.d.error(
            k.pos,
            format!("metrics collector '{text}' cannot be honoured by sluice"),
        )
        .help("sluice reads NAME=VALUE lines on standard output (collector kind: StdOut) and $SLUICE_METRICS_FILE");
    }
    if let Some(source) = node.get("source") {
        cx.d.error(source.pos, "metricsCollectorSpec.source cannot be honoured by sluice")
            .help("print metrics as NAME=VALUE on standard output, as Katib's StdOut collector reads them");
    }
}

fn parameters(cx: &mut Cx<'_>, node: &Node) -> Option<BTreeMap<String, SweepParam>> {
    let Some(items) = node.as_seq() else {
        cx.expected(
            node,
            "parameters",
            "a list of {name, parameterType, feasibleSpace}",
        );
        return None;
    };
    let mut out = BTreeMap::new();
    let mut ok = true;
    for item in items {
        match parameter(cx, item) {
            Some((name, p)) => {
                out.insert(name, p);
            }
            None => ok = false,
        }
    }
    if out.is_empty() && ok {
        cx.d.error(node.pos, "an Experiment searches at least one parameter");
        return None;
    }
    ok.then_some(out)
}

fn parameter(cx: &mut Cx<'_>, node: &Node) -> Option<(String, SweepParam)> {
    cx.fields(
        node,
        "parameters",
        &["name", "parameterType", "feasibleSpace"],
    )?;
    let name = match node.get("name") {
        Some(n) => cx.string(n, "parameters.name")?,
        None => {
            cx.d.error(node.pos, "a parameter needs 'name'");
            return None;
        }
    };
    // Katib's names are Kubernetes-style (`num-layers`); a dot would split a template.
    let ok_name = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !ok_name {
        let pos = node.get("name").map_or(node.pos, |n| n.pos);
        cx.d.error(pos, format!("parameter name '{name}' is not a valid name"))
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
                cx.d.error(
                    d.pos,
                    format!("distribution '{other}' cannot be honoured by sluice"),
                )
                .help("sluice samples uniform and logUniform");
                return None;
            }
            None => return None,
        },
    };
    let num = |cx: &mut Cx<'_>, key: &str| -> Option<f64> {
        match space.get(key) {
            Some(n) => number_text(cx, n, &format!("feasibleSpace.{key}")).map(|x| x.0),
            None => {
                cx.d.error(
                    space.pos,
                    format!("parameter '{name}' ({ty}) needs feasibleSpace.{key}"),
                );
                None
            }
        }
    };
    let p = match ty.as_str() {
        "double" | "int" => {
            let (min, max) = (num(cx, "min")?, num(cx, "max")?);
            if min >= max || (log && min <= 0.0) {
                cx.d.error(
                    space.pos,
                    format!(
                        "parameter '{name}': min must be less than max, and above 0 on a log scale"
                    ),
                );
                return None;
            }
            let step = match space.get("step") {
                Some(s) => Some(number_text(cx, s, "feasibleSpace.step")?.0).filter(|s| *s > 0.0),
                None => None,
            };
            if ty == "int" {
                SweepParam::Int {
                    min: min as i64,
                    max: max as i64,
                    log,
                    step: step.map_or(1, |s| (s as i64).max(1)),
                }
            } else {
                SweepParam::Float {
                    min,
                    max,
                    log,
                    step,
                }
            }
        }
        "categorical" | "discrete" => {
            let Some(list) = space.get("list").and_then(Node::as_seq) else {
                cx.d.error(
                    space.pos,
                    format!("parameter '{name}' ({ty}) needs feasibleSpace.list"),
                );
                return None;
            };
            let values: Vec<String> = list
                .iter()
                .filter_map(|v| v.as_scalar().map(|s| s.text.clone()))
                .collect();
            if values.is_empty() {
                cx.d.error(space.pos, format!("parameter '{name}': the list is empty"));
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
    Some((name, p))
}

/// The trial: the primary container of the trial's Job, as a sluice trial step.
fn trial(
    cx: &mut Cx<'_>,
    node: &Node,
    params: Option<&BTreeMap<String, SweepParam>>,
) -> Option<super::model::Step> {
    cx.fields(
        node,
        "trialTemplate",
        &[
            "trialParameters",
            "trialSpec",
            "primaryContainerName",
            "primaryPodLabels",
            "retain",
            "successCondition",
            "failureCondition",
            "configMap",
        ],
    )?;
    if let Some(c) = node.get("configMap") {
        cx.d.error(
            c.pos,
            "trialTemplate.configMap cannot be honoured by sluice",
        )
        .help("write the trial's Job inline, under trialTemplate.trialSpec");
        return None;
    }
    // trialParameters: NAME -> the experiment parameter it references.
    let mut refs: BTreeMap<String, String> = BTreeMap::new();
    for tp in node
        .get("trialParameters")
        .and_then(Node::as_seq)
        .unwrap_or_default()
    {
        let name = tp
            .get("name")
            .and_then(|n| cx.string(n, "trialParameters.name"));
        let reference = tp
            .get("reference")
            .and_then(|n| cx.string(n, "trialParameters.reference"));
        if let (Some(name), Some(reference)) = (name, reference) {
            if let Some(params) = params
                && !params.contains_key(&reference)
            {
                let pos = tp.get("reference").map_or(tp.pos, |r| r.pos);
                cx.d.error(pos, format!("trial parameter '{name}' references '{reference}', which is not a parameter"))
                    .suggest(&reference, params.keys().map(String::as_str));
            }
            refs.insert(name, reference);
        }
    }
    let Some(spec) = node.get("trialSpec") else {
        cx.d.error(node.pos, "trialTemplate needs trialSpec (a Job)");
        return None;
    };
    let containers = spec
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"))
        .and_then(Node::as_seq);
    let Some(containers) = containers else {
        cx.d.error(spec.pos, "trialSpec needs spec.template.spec.containers")
            .help("sluice reads the trial's command from a batch/v1 Job's container");
        return None;
    };
    let primary = node
        .get("primaryContainerName")
        .and_then(|n| n.as_scalar())
        .map(|s| s.text.clone());
    let container = match &primary {
        Some(p) => containers.iter().find(|c| {
            c.get("name")
                .and_then(Node::as_scalar)
                .is_some_and(|n| &n.text == p)
        }),
        None if containers.len() == 1 => containers.first(),
        None => None,
    };
    let Some(container) = container else {
        cx.d.error(spec.pos, "cannot tell the trial's container")
            .help("set trialTemplate.primaryContainerName to one of the Job's containers");
        return None;
    };
    for e in container.as_map().unwrap_or_default() {
        if matches!(
            e.key.as_str(),
            "env" | "envFrom" | "volumeMounts" | "workingDir"
        ) {
            cx.d.error(e.key_pos, format!("container field '{}' cannot be honoured by sluice", e.key))
                .help("a local trial runs in the experiment file's folder with sluice's environment; pass settings as arguments");
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
            return None;
        };
        for item in items {
            let Some(text) = item.as_scalar().map(|s| s.text.clone()) else {
                cx.expected(item, key, "a string");
                return None;
            };
            let replaced = substitute(cx, item, &text, &refs)?;
            words.push(scalar(item, replaced));
        }
    }
    if words.is_empty() {
        cx.d.error(container.pos, "the trial's container has no command")
            .help("give the container a command (and args) to run");
        return None;
    }
    let mut entries = vec![entry(
        container,
        "command",
        Node {
            pos: container.pos,
            start: container.start,
            end: container.end,
            value: Value::Seq(words),
        },
    )];
    if let Some(image) = container.get("image") {
        entries.push(entry(container, "image", image.clone()));
    }
    if let Some(resources) = container.get("resources").and_then(resources) {
        entries.push(entry(container, "resources", resources));
    }
    let step = Node {
        pos: container.pos,
        start: container.start,
        end: container.end,
        value: Value::Map(entries),
    };
    super::pipeline::decode_trial(cx, &step)
}

/// Replaces each `${trialParameters.NAME}` by `{{params.REF}}`.
fn substitute(
    cx: &mut Cx<'_>,
    node: &Node,
    text: &str,
    refs: &BTreeMap<String, String>,
) -> Option<String> {
    const OPEN: &str = "${trialParameters.";
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&rest[..i]);
        let after = &rest[i + OPEN.len()..];
        let Some(end) = after.find('}') else {
            cx.d.error(
                node.pos,
                format!("unclosed ${{trialParameters...}} in '{text}'"),
            );
            return None;
        };
        let name = &after[..end];
        match refs.get(name) {
            Some(reference) => out.push_str(&format!("{{{{params.{reference}}}}}")),
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
                return None;
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// A container's `resources` as a sluice step's: the larger of limits and requests.
fn resources(node: &Node) -> Option<Node> {
    let mut found: BTreeMap<&str, Node> = BTreeMap::new();
    for part in ["requests", "limits"] {
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
    Some(Node {
        pos: node.pos,
        start: node.start,
        end: node.end,
        value: Value::Map(entries),
    })
}

fn entry(at: &Node, key: &str, value: Node) -> Entry {
    Entry {
        key: key.into(),
        key_pos: at.pos,
        value,
    }
}

fn scalar(at: &Node, text: String) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Scalar(Scalar { text, plain: false }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{Action, Document};
    use super::*;

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

    #[test]
    fn an_experiment_reads_as_a_sweep() {
        let loaded = crate::spec::load("e.yaml", EXPERIMENT.to_owned());
        let diags = loaded.diagnostics.into_sorted();
        assert!(
            diags
                .iter()
                .all(|d| d.severity != crate::spec::Severity::Error),
            "{diags:?}"
        );
        // bayesianoptimization runs as TPE, and says so.
        assert!(
            diags.iter().any(|d| d.message.contains("runs as tpe")),
            "{diags:?}"
        );
        let Some(Document::Sweep(s)) = loaded.documents.first() else {
            panic!("not a sweep");
        };
        assert_eq!(s.objective.goal, Goal::Minimize);
        assert_eq!(s.objective.target, Some(0.1));
        assert_eq!(s.algorithm.name, "tpe");
        assert_eq!(s.algorithm.seed, 7);
        assert_eq!(s.budget.max_trials, Some(5));
        assert_eq!(s.budget.parallelism, KATIB_PARALLELISM);
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
        let Action::Command(words) = &s.trial.action else {
            panic!("not a command");
        };
        let words: Vec<String> = words
            .iter()
            .map(|t| {
                t.render(|r| Ok::<_, ()>(format!("<{r}>")))
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(
            words,
            [
                "python3",
                "train.py",
                "--lr=<params.lr>",
                "--layers",
                "<params.num-layers>"
            ]
        );
        assert_eq!(s.trial.image.as_deref(), Some("example/train:1"));
        assert_eq!(s.trial.resources.millicpu, 2000);
        assert_eq!(s.trial.resources.gpu, 1);
    }
}
