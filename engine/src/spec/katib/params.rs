//! The Experiment's `parameters` (Katib writes numbers as strings) and the trial template's
//! `trialParameters`, each checked against the parameter it references.

use std::collections::{BTreeMap, BTreeSet};

use super::number_text;
use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::SweepParam;
use crate::spec::yaml::{Node, Typed};

/// The experiment's parameters, and where each was written.
pub(super) struct Params {
    pub(super) map: BTreeMap<String, SweepParam>,
    pub(super) pos: BTreeMap<String, Pos>,
}

pub(super) fn parameters(cx: &mut Cx<'_>, node: &Node, resource: Option<&str>) -> Option<Params> {
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
pub(super) type TrialParams = BTreeMap<String, Option<String>>;

pub(super) fn trial_parameters(
    cx: &mut Cx<'_>,
    node: &Node,
    params: Option<&Params>,
) -> TrialParams {
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
