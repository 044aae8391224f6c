//! The Experiment's `objective` (Katib's `type` is the goal, its `goal` the target) and its
//! `metricStrategies`, with Katib's default strategy for the objective metric.

use std::collections::BTreeMap;

use super::number_text;
use crate::spec::decode::Cx;
use crate::spec::model::{Goal, Objective, Strategy};
use crate::spec::yaml::Node;

pub(super) fn objective(cx: &mut Cx<'_>, node: &Node) -> Option<Objective> {
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
