//! One step (or a sweep's trial): its command, `sweep:`, `forEach` and `when`, over the
//! shared settings merged with the pipeline's defaults.

use std::collections::HashMap;

use super::settings::{Settings, read_shared};
use super::{OWN_FIELDS, SHARED_FIELDS};
use crate::spec::decode::{self, Cx};
use crate::spec::diagnostic::Pos;
use crate::spec::expr::{self, Expr, Operand};
use crate::spec::model::*;
use crate::spec::template::{Ref, RefAt, Scope, Template};
use crate::spec::yaml::{Node, Typed, Value};

/// A sweep's `trial`: a step without a name (each trial is `trial[N]`), without `needs`,
/// `forEach`, `when` or a nested `sweep`. Returns it named `trial`.
pub(in crate::spec) fn decode_trial(cx: &mut Cx<'_>, node: &Node) -> Option<Step> {
    decode_trial_in(cx, node, Scope::Params)
}

/// A trial whose templates' parameters are named as `scope` says.
pub(in crate::spec) fn decode_trial_in(
    cx: &mut Cx<'_>,
    node: &Node,
    scope: Scope<'_>,
) -> Option<Step> {
    let Some(entries) = node.as_map() else {
        cx.expected(
            node,
            "trial",
            "a step template (a mapping with run or command)",
        );
        return None;
    };
    for e in entries {
        let why = match e.key.as_str() {
            "name" => "a trial is named by the sweep (trial[1], trial[2]...)",
            "needs" => "a trial runs on its own; put the sweep in a pipeline to order it",
            "forEach" => "the sweep itself proposes what each trial runs",
            "when" => "every proposed trial runs",
            "sweep" => "a trial cannot hold another sweep",
            _ => continue,
        };
        cx.d.error(
            e.key_pos,
            format!("'{}' is not allowed in a sweep's trial", e.key),
        )
        .help(why);
    }
    let mut named = node.clone();
    if let crate::spec::yaml::Value::Map(entries) = &mut named.value {
        entries.retain(|e| {
            !matches!(
                e.key.as_str(),
                "name" | "needs" | "forEach" | "when" | "sweep"
            )
        });
        entries.insert(
            0,
            crate::spec::yaml::Entry {
                key: "name".into(),
                key_pos: node.pos,
                value: Node {
                    pos: node.pos,
                    start: node.start,
                    end: node.start,
                    value: crate::spec::yaml::Value::Scalar(crate::spec::yaml::Scalar {
                        text: "trial".into(),
                        plain: true,
                    }),
                },
            },
        );
    }
    // Forbidden fields were reported and are left out: the rest is still checked.
    decode_step(cx, &named, &Settings::default(), scope, &[])
}

fn all_step_fields() -> Vec<&'static str> {
    OWN_FIELDS.iter().chain(SHARED_FIELDS).copied().collect()
}

/// Decodes one step. `scope` says what its templates' parameters are; `pipeline_params`
/// holds the pipeline's declared parameters, which the trial of a `sweep:` may read.
pub(super) fn decode_step(
    cx: &mut Cx<'_>,
    node: &Node,
    defaults: &Settings,
    scope: Scope<'_>,
    pipeline_params: &[String],
) -> Option<Step> {
    let allowed = all_step_fields();
    let Some(entries) = node.as_map() else {
        cx.expected(
            node,
            "steps",
            "a step (a mapping with a name and a run command)",
        );
        return None;
    };
    // A step without a usable name is still read, so that its other mistakes are reported;
    // it is left out of the pipeline afterwards.
    let name = match node.get("name") {
        None => {
            cx.d.error(node.pos, "a step needs a 'name'")
                .help("add name: followed by a short lowercase name");
            None
        }
        Some(n) => cx.string(n, "name").inspect(|name| {
            cx.check_name(n, "step name", name);
        }),
    };
    let label = match &name {
        Some(name) => format!("step '{name}'"),
        None => "a step without a name".to_owned(),
    };
    let mut own = Settings::default();
    let mut action_fields: Vec<(&str, Pos)> = Vec::new();
    let mut action = None;
    let mut needs = Vec::new();
    let mut outputs: Vec<String> = Vec::new();
    let mut for_each = None;
    let mut when = None;
    for e in entries {
        let v = &e.value;
        match e.key.as_str() {
            "name" => {}
            "run" => {
                action_fields.push(("run", e.key_pos));
                action = cx
                    .template(v, "run", scope)
                    .map(|t| Action::Run(t.template))
                    .or(action);
            }
            "command" => {
                action_fields.push(("command", e.key_pos));
                action = read_command(cx, v, scope).map(Action::Command).or(action);
            }
            "sweep" => {
                action_fields.push(("sweep", e.key_pos));
                let step = name.as_deref().unwrap_or_default();
                action = read_sweep(cx, v, step, pipeline_params).or(action);
            }
            "needs" => {
                let mut seen: HashMap<String, Pos> = HashMap::new();
                for (need, pos) in cx
                    .string_list(v, "needs", "a list of step names")
                    .unwrap_or_default()
                {
                    if let Some(line) = seen.insert(need.clone(), pos) {
                        cx.d.error(pos, format!("duplicate '{need}' in needs"))
                            .help(format!("'{need}' is first listed at {line}"));
                        continue;
                    }
                    needs.push(Need { step: need, pos });
                }
            }
            "outputs" => {
                let mut seen: HashMap<String, Pos> = HashMap::new();
                for (out, pos) in cx
                    .string_list(v, "outputs", "a list of artifact names")
                    .unwrap_or_default()
                {
                    if !decode::is_output_name(&out) {
                        cx.d.error(pos, format!("output name '{out}' is not a valid file name"))
                            .help("use letters, digits, '_', '-' and '.', starting with a letter or digit");
                        continue;
                    }
                    if let Some(line) = seen.insert(out.clone(), pos) {
                        cx.d.error(pos, format!("duplicate output '{out}'"))
                            .help(format!("'{out}' is first listed at {line}"));
                        continue;
                    }
                    outputs.push(out);
                }
            }
            // A broken forEach still makes a fan-out step: `{{item}}` in it is not a second error.
            "forEach" => {
                for_each = read_for_each(cx, v, scope).or(Some(ForEach::Items(Vec::new())));
            }
            "when" => when = read_when(cx, v, scope),
            key => {
                if !read_shared(cx, &mut own, key, v, "", scope) {
                    cx.d.error(e.key_pos, format!("unknown field '{key}' in {label}"))
                        .suggest(key, allowed.iter().copied());
                }
            }
        }
    }
    match action_fields.as_slice() {
        [] => {
            cx.d.error(node.pos, format!("{label} has nothing to run"))
                .help("add run: (a shell command line), command: (an argument list) or sweep:");
        }
        [_] => {}
        [(first, _), (second, pos), ..] => {
            cx.d.error(*pos, format!("{label} sets both '{first}' and '{second}'"))
                .help("keep exactly one of run, command and sweep");
        }
    }
    let name = name?;
    let s = own.over(defaults);
    let retry_defaults = Retry::default();
    Some(Step {
        name,
        pos: node.pos,
        action: action.unwrap_or_else(|| Action::Run(Template::default())),
        needs,
        workdir_pos: s.workdir.as_ref().map(|(_, pos)| *pos),
        workdir: s.workdir.map(|(t, _)| t),
        env: s.env,
        image: s.image,
        resources: Resources {
            millicpu: s.millicpu.unwrap_or(1000),
            memory: s.memory,
            gpu: s.gpu.unwrap_or(0),
            workers: s.workers.unwrap_or(1),
            flavor: s.flavor,
            extended: s.extended,
        },
        outputs,
        retry: Retry {
            limit: s.retry_limit.unwrap_or(retry_defaults.limit),
            backoff: s.retry_backoff.unwrap_or(retry_defaults.backoff),
            factor: s.retry_factor.unwrap_or(retry_defaults.factor),
            max_backoff: s.retry_max_backoff.unwrap_or(retry_defaults.max_backoff),
            on: s.retry_on.unwrap_or(retry_defaults.on),
        },
        timeout: s.timeout,
        checkpoint: s.checkpoint.unwrap_or(Some(DEFAULT_CHECKPOINT_EVERY)),
        cache: s.cache.unwrap_or(None),
        for_each,
        when,
        priority: s.priority,
        interruptible: s.interruptible.unwrap_or(false),
        metrics_stdout: s.metrics_stdout.unwrap_or(true),
        collect: Default::default(),
        on_exit: false,
    })
}

fn read_command(cx: &mut Cx<'_>, v: &Node, scope: Scope<'_>) -> Option<Vec<Template>> {
    let Some(items) = v.as_seq() else {
        cx.expected(v, "command", "a list of arguments");
        if v.as_scalar().is_some() {
            cx.d.push_help_last(
                "write command: [prog, arg, ...], or use run: for a shell command line".into(),
            );
        }
        return None;
    };
    if items.is_empty() {
        cx.d.error(v.pos, "command: the argument list is empty")
            .help("give at least the program: command: [python3, train.py]");
        return None;
    }
    // Every argument is read: a bad one does not hide the next.
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if let Some(text) = cx.text(item, "command") {
            out.push(cx.template_of(item, &text, scope).template);
        }
    }
    Some(out)
}

fn read_sweep(cx: &mut Cx<'_>, v: &Node, step: &str, pipeline_params: &[String]) -> Option<Action> {
    if v.as_map().is_none() {
        cx.expected(v, "sweep", "a mapping (the spec of a Sweep)");
        return None;
    }
    let params = v
        .get("params")
        .and_then(Node::as_map)
        .map(|m| m.iter().map(|e| e.key.clone()).collect())
        .unwrap_or_default();
    let sweep = crate::spec::sweep::decode_nested(cx, step, v, pipeline_params).map(Box::new);
    Some(Action::Sweep { params, sweep })
}

fn read_for_each(cx: &mut Cx<'_>, v: &Node, scope: Scope<'_>) -> Option<ForEach> {
    const WHAT: &str = "a list, a list parameter ({{params.NAME}}) or an output reference \
                        ({{steps.STEP.outputs.NAME}})";
    match &v.value {
        Value::Seq(items) => Some(ForEach::Items(items.iter().map(Node::to_json).collect())),
        Value::Scalar(s) if matches!(s.typed(), Typed::Str(_)) => {
            let t = cx.template_of(v, &s.text, scope);
            if !t.clean {
                return None;
            }
            match t.template.single_ref() {
                Some(
                    r @ RefAt {
                        reference: Ref::Param(_) | Ref::Output { .. },
                        ..
                    },
                ) => Some(ForEach::Ref(r.clone())),
                _ => {
                    cx.expected(v, "forEach", WHAT);
                    None
                }
            }
        }
        _ => {
            cx.expected(v, "forEach", WHAT);
            None
        }
    }
}

fn read_when(cx: &mut Cx<'_>, v: &Node, scope: Scope<'_>) -> Option<When> {
    let text = match v.as_scalar().map(|s| s.typed()) {
        Some(Typed::Str(s)) => s.to_owned(),
        Some(Typed::Bool(b)) => {
            return Some(When {
                text: b.to_string(),
                expr: Expr::Operand(Operand::Quoted(b.to_string())),
            });
        }
        _ => {
            cx.expected(
                v,
                "when",
                "a condition such as \"{{steps.train.metrics.accuracy}} >= 0.9\"",
            );
            if v.as_seq().is_some() {
                cx.d.push_help_last("write one condition; join several with '&&'".into());
            }
            return None;
        }
    };
    let parsed = expr::parse(&text, scope);
    cx.template_errors(v, &text, parsed.template_errors);
    let mut expr = match parsed.expr {
        Ok(expr) => expr,
        Err(errors) => {
            for e in errors {
                let tail: String = text[e.offset.min(text.len())..].chars().take(1).collect();
                let pos = cx.pos_in(v, &text, e.offset, &tail);
                let d = cx.d.error(pos, format!("when: {}", e.message));
                if let Some(h) = e.help {
                    d.help(h);
                }
            }
            // What the condition refers to is still checked: its words, joined. It never
            // runs, as the file has errors.
            parsed
                .words
                .into_iter()
                .map(|w| Expr::Operand(Operand::Word(w)))
                .reduce(|a, b| Expr::And(Box::new(a), Box::new(b)))?
        }
    };
    set_ref_positions(cx, v, &text, &mut expr);
    Some(When { text, expr })
}

/// Places each reference of the condition in the file, from its offset in the condition.
fn set_ref_positions(cx: &mut Cx<'_>, v: &Node, text: &str, expr: &mut Expr) {
    let mut fix = |o: &mut Operand| {
        if let Operand::Word(t) = o {
            for part in &mut t.parts {
                if let crate::spec::template::Part::Ref(r) = part {
                    r.pos = cx.pos_in(v, text, r.offset, &r.raw);
                }
            }
        }
    };
    fn walk(e: &mut Expr, fix: &mut dyn FnMut(&mut Operand)) {
        match e {
            Expr::Operand(o) => fix(o),
            Expr::Not(x) => walk(x, fix),
            Expr::And(a, b) | Expr::Or(a, b) => {
                walk(a, fix);
                walk(b, fix);
            }
            Expr::Compare(_, a, b) => {
                fix(a);
                fix(b);
            }
        }
    }
    walk(expr, &mut fix);
}
