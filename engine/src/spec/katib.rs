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
//! trial's retries and timeout. A Kubeflow `PyTorchJob` trial runs as a sluice gang of its Master
//! (one replica) and Worker replicas, each running the Master's primary container, read as a
//! Job's is (see [`pytorchjob`]). Anything that would change the search or the trial and cannot
//! be honoured is an error naming it, at its line and column; fields with no effect on one
//! machine (descriptions, `restartPolicy`, labels and annotations, the Job's
//! `apiVersion`, `primaryPodLabels`, `retain`, the success and failure conditions) are
//! ignored.

mod algorithm;
mod collector;
mod container;
mod objective;
mod params;
mod pytorchjob;
#[cfg(test)]
mod pytorchjob_tests;
#[cfg(test)]
mod tests;
mod trial;

use std::collections::BTreeMap;

use algorithm::{algorithm, early_stopping, hyperband_resource};
use collector::{Collector, metrics_collector};
use objective::objective;
use params::parameters;
use trial::trial;

use super::decode::Cx;
use super::diagnostic::Pos;
use super::model::{Budget, Collect, FileFormat, Metadata, Sweep, SweepParam};
use super::yaml::{Node, Scalar, Typed};

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
/// request (`parallelTrialCount` trials) at random: see
/// [`algorithm::Algorithm::startup_is_parallelism`].
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
