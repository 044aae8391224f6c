//! The plan: step instances with stable names, by level.
//!
//! A fan-out step becomes one instance per item, named `NAME[0]`, `NAME[1]`...; when its items
//! are known only at run time (an upstream output), the plan holds one placeholder
//! `NAME[*]`. Dependents of a fan-out step wait for all its instances, so an instance's
//! `needs` name steps, not instances: the plan stays linear in size.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Dag;
use crate::spec::model::{Action, ForEach, ParamValue, Pipeline, Step};
use crate::spec::template::Ref;
use crate::spec::units::format_duration;

#[derive(Debug, Serialize)]
pub struct Plan {
    pub name: String,
    pub team: String,
    pub path: String,
    pub params: BTreeMap<String, ParamValue>,
    /// Parameters without a default that were not given.
    pub unset_params: Vec<String>,
    pub steps: usize,
    pub instances: usize,
    pub levels: Vec<Level>,
    pub on_exit: Vec<Instance>,
}

#[derive(Debug, Serialize)]
pub struct Level {
    pub level: u32,
    pub steps: Vec<Instance>,
}

#[derive(Debug, Serialize)]
pub struct Instance {
    /// `train`, `evaluate[1]`, or `evaluate[*]` when the items are known only at run time.
    pub name: String,
    pub step: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<serde_json::Value>,
    pub needs: Vec<String>,
    /// What the step runs: `run`, `command` or `sweep`.
    pub kind: &'static str,
    pub workers: u32,
    pub gpu: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    pub retries: u32,
    pub cache: bool,
}

/// Expands `pipeline` in the order of `dag`, with parameter values `params`.
pub fn expand(pipeline: &Pipeline, dag: &Dag, params: BTreeMap<String, ParamValue>) -> Plan {
    // Within a level, steps keep the order of the file: plans read like the YAML.
    let mut by_level: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut main = dag.order.clone();
    main.sort_unstable();
    for i in main {
        by_level.entry(dag.level[i]).or_default().push(i);
    }
    let mut instances = 0;
    let levels: Vec<Level> = by_level
        .into_iter()
        .map(|(level, steps)| {
            let steps: Vec<Instance> = steps
                .into_iter()
                .flat_map(|i| expand_step(&pipeline.steps[i], &params))
                .collect();
            instances += steps.len();
            Level { level, steps }
        })
        .collect();
    let on_exit: Vec<Instance> = dag
        .on_exit
        .iter()
        .flat_map(|&i| expand_step(&pipeline.steps[i], &params))
        .collect();
    instances += on_exit.len();
    let unset_params = pipeline
        .params
        .iter()
        .filter(|p| !params.contains_key(&p.name))
        .map(|p| p.name.clone())
        .collect();
    Plan {
        name: pipeline.metadata.name.clone(),
        team: pipeline.metadata.team.clone(),
        path: pipeline.path.clone(),
        params,
        unset_params,
        steps: pipeline.steps.len(),
        instances,
        levels,
        on_exit,
    }
}

fn expand_step(step: &Step, params: &BTreeMap<String, ParamValue>) -> Vec<Instance> {
    let items: Option<Vec<serde_json::Value>> = match &step.for_each {
        None => None,
        Some(ForEach::Items(items)) => Some(items.clone()),
        Some(ForEach::Ref(r)) => match (
            &r.reference,
            params.get(match &r.reference {
                Ref::Param(n) => n.as_str(),
                _ => "",
            }),
        ) {
            (Ref::Param(_), Some(ParamValue::List(items))) => Some(items.clone()),
            _ => {
                // Known only at run time: one placeholder.
                return vec![instance(step, format!("{}[*]", step.name), None, None)];
            }
        },
    };
    match items {
        None => vec![instance(step, step.name.clone(), None, None)],
        Some(items) => items
            .into_iter()
            .enumerate()
            .map(|(k, item)| instance(step, format!("{}[{k}]", step.name), Some(k), Some(item)))
            .collect(),
    }
}

fn instance(
    step: &Step,
    name: String,
    index: Option<usize>,
    item: Option<serde_json::Value>,
) -> Instance {
    Instance {
        name,
        step: step.name.clone(),
        index,
        item,
        needs: step.needs.iter().map(|n| n.step.clone()).collect(),
        kind: match step.action {
            Action::Run(_) => "run",
            Action::Command(_) => "command",
            Action::Sweep { .. } => "sweep",
        },
        workers: step.resources.workers,
        gpu: step.resources.gpu,
        when: step.when.as_ref().map(|w| w.text.clone()),
        timeout: step.timeout.map(format_duration),
        retries: step.retry.limit,
        cache: step.cache.is_some(),
    }
}
