//! Reference checks over a decoded pipeline: needed steps, parameters, outputs, sweep
//! parameters and `{{item}}` fields exist, each mistake reported once.

use std::collections::HashMap;

use crate::spec::decode::Cx;
use crate::spec::model::*;
use crate::spec::template::{Ref, RefAt};

/// What reference checks must know beyond the model, to avoid reporting one mistake twice.
pub(super) struct Known {
    /// Every declared parameter name, valid or not.
    pub(super) params: Vec<String>,
    /// Every name in `onExit` was a step (else `{{run.state}}` errors would follow from it).
    pub(super) on_exit_complete: bool,
}

/// Checks that every name a step uses exists: needed steps, parameters, outputs, sweep
/// parameters, `{{item}}` fields. Whether a referenced step is upstream is the DAG's check.
pub(super) fn check_references(
    cx: &mut Cx<'_>,
    p: &Pipeline,
    index: &HashMap<String, usize>,
    known: &Known,
) {
    let step_names = || p.steps.iter().map(|s| s.name.as_str());
    for step in &p.steps {
        for need in &step.needs {
            match index.get(&need.step) {
                None => {
                    cx.d.error(
                        need.pos,
                        format!(
                            "step '{}' needs '{}', which is not a step of this pipeline",
                            step.name, need.step
                        ),
                    )
                    .suggest(&need.step, step_names());
                }
                Some(&i) if p.steps[i].on_exit && !step.on_exit => {
                    cx.d.error(need.pos, format!("step '{}' needs '{}', which runs on exit", step.name, need.step))
                        .help("onExit steps run after everything else; remove it from needs or from onExit");
                }
                Some(_) => {}
            }
        }
        for r in step.refs() {
            check_ref(cx, p, index, known, step, r);
        }
        // A sweep step's trial reads the pipeline's parameters as {{pipeline.params.NAME}}.
        if let Action::Sweep {
            sweep: Some(sweep), ..
        } = &step.action
        {
            for r in sweep.trial.refs() {
                if let Ref::PipelineParam(name) = &r.reference
                    && p.param(name).is_none()
                    && !known.params.contains(name)
                {
                    let d = cx.d.error(
                        r.pos,
                        format!("{}: the pipeline has no parameter '{name}'", r.raw),
                    );
                    d.suggest(name, p.params.iter().map(|p| p.name.as_str()));
                    if d.help.is_empty() {
                        d.help(format!(
                            "declare it under spec.params: {name}: {{type: string, default: ...}}"
                        ));
                    }
                }
            }
        }
    }
}

fn check_ref(
    cx: &mut Cx<'_>,
    p: &Pipeline,
    index: &HashMap<String, usize>,
    known: &Known,
    step: &Step,
    r: &RefAt,
) {
    let raw = &r.raw;
    match &r.reference {
        Ref::Param(name) => {
            if p.param(name).is_none() && known.params.contains(name) {
                // Declared with an error, reported at the declaration.
            } else if p.param(name).is_none() {
                let d = cx.d.error(
                    r.pos,
                    format!("{raw}: the pipeline has no parameter '{name}'"),
                );
                d.suggest(name, p.params.iter().map(|p| p.name.as_str()));
                if d.help.is_empty() {
                    d.help(format!(
                        "declare it under spec.params: {name}: {{type: string, default: ...}}"
                    ));
                }
            } else if let Some(ForEach::Ref(f)) = &step.for_each
                && f == r
                && p.param(name).is_some_and(|x| x.ty != ParamType::List)
            {
                cx.d.error(r.pos, format!("forEach: parameter '{name}' is not a list"))
                    .help("declare it with type: list, or write the items here".to_string());
            }
        }
        Ref::PipelineParam(name) => {
            cx.d.error(
                r.pos,
                format!("{raw} is only available in a sweep step's trial"),
            )
            .help(format!("in a pipeline step write {{{{params.{name}}}}}"));
        }
        Ref::Item(path) => match &step.for_each {
            None => {
                cx.d.error(
                    r.pos,
                    format!("{raw} is only available in a step with forEach"),
                )
                .help("add forEach: a list of items, to run this step once per item");
            }
            Some(ForEach::Items(items)) if !path.is_empty() => {
                let field = &path[0];
                if let Some((i, _)) = items
                    .iter()
                    .enumerate()
                    .find(|(_, it)| it.get(field.as_str()).is_none())
                {
                    cx.d.error(
                        r.pos,
                        format!(
                            "{raw}: the forEach item of '{}[{i}]' has no field '{field}'",
                            step.name
                        ),
                    )
                    .help(format!(
                        "give every item a '{field}', or use {{{{item}}}} for the whole item"
                    ));
                }
            }
            Some(_) => {}
        },
        Ref::RunState if !step.on_exit && known.on_exit_complete => {
            cx.d.error(r.pos, format!("{raw} is only known in onExit steps"))
                .help("list this step in spec.onExit to run it after everything else");
        }
        Ref::Output { step: from, name }
        | Ref::Metric { step: from, name }
        | Ref::BestParam { step: from, name } => {
            let Some(&i) = index.get(from) else {
                cx.d.error(r.pos, format!("{raw}: there is no step '{from}'"))
                    .suggest(from, p.steps.iter().map(|s| s.name.as_str()));
                return;
            };
            let source = &p.steps[i];
            if source.name == step.name {
                cx.d.error(
                    r.pos,
                    format!("{raw}: a step cannot read its own outputs or metrics"),
                )
                .help("to carry work over between attempts, use $SLUICE_CHECKPOINT_DIR");
                return;
            }
            match &r.reference {
                Ref::Output { .. } => {
                    if source.is_fan_out() {
                        cx.d.error(r.pos, format!("{raw}: outputs of fan-out step '{from}' cannot be referenced downstream"))
                            .help("write the combined result in a step that needs the fan-out step");
                    } else if !matches!(source.action, Action::Sweep { .. })
                        && !source.outputs.contains(name)
                    {
                        let d = cx.d.error(
                            r.pos,
                            format!("{raw}: step '{from}' has no output '{name}'"),
                        );
                        d.suggest(name, source.outputs.iter().map(String::as_str));
                        if d.help.is_empty() {
                            d.help(format!("declare it in the outputs of step '{from}'"));
                        }
                    }
                }
                Ref::BestParam { .. } => {
                    match &source.action {
                        Action::Sweep { params, .. } => {
                            if !params.contains(name) {
                                cx.d.error(r.pos, format!("{raw}: the sweep of step '{from}' has no parameter '{name}'"))
                                .suggest(name, params.iter().map(String::as_str));
                            }
                        }
                        _ => {
                            cx.d.error(r.pos, format!("{raw}: step '{from}' is not a sweep"))
                                .help("best.params is available after a step with sweep:");
                        }
                    }
                }
                _ => {}
            }
        }
        Ref::RunState | Ref::RunId | Ref::RunName | Ref::Team => {}
    }
}
