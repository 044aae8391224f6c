//! `kind: Pipeline`: from the node tree to the validated [`Pipeline`].
//!
//! Fields shared by every step (`defaults`) and a step's own fields are both read into
//! [`Settings`], where every field is optional, then merged: maps (`resources`, `retry`,
//! `env`) field by field, everything else whole, a step's own value winning.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::decode::{self, Cx};
use super::diagnostic::Pos;
use super::expr::{self, Expr, Operand};
use super::model::*;
use super::params;
use super::template::{Ref, RefAt, Scope, Template};
use super::units;
use super::yaml::{Node, Typed, Value};

const SPEC_FIELDS: &[&str] = &[
    "params",
    "defaults",
    "parallelism",
    "failFast",
    "timeout",
    "onExit",
    "steps",
];

/// Fields that `defaults` may set (and a step too).
const SHARED_FIELDS: &[&str] = &[
    "workdir",
    "env",
    "image",
    "resources",
    "retry",
    "timeout",
    "checkpoint",
    "cache",
    "priority",
    "interruptible",
    "metrics",
];

/// Fields only a step may set.
const OWN_FIELDS: &[&str] = &[
    "name", "run", "command", "sweep", "needs", "outputs", "forEach", "when",
];

const RESOURCE_FIELDS: &[&str] = &["cpu", "memory", "gpu", "workers", "flavor"];
const RETRY_FIELDS: &[&str] = &["limit", "backoff", "factor", "maxBackoff", "on"];

/// Step settings before defaults are merged: every field optional.
#[derive(Clone, Debug, Default)]
struct Settings {
    workdir: Option<Template>,
    env: BTreeMap<String, Template>,
    image: Option<String>,
    millicpu: Option<u64>,
    memory: Option<u64>,
    gpu: Option<u32>,
    workers: Option<u32>,
    flavor: Option<String>,
    retry_limit: Option<u32>,
    retry_backoff: Option<Duration>,
    retry_factor: Option<f64>,
    retry_max_backoff: Option<Duration>,
    retry_on: Option<Vec<RetryOn>>,
    timeout: Option<Duration>,
    checkpoint: Option<Option<Duration>>,
    cache: Option<Option<Cache>>,
    priority: Option<String>,
    interruptible: Option<bool>,
    metrics_stdout: Option<bool>,
}

impl Settings {
    /// `self` (a step's own) over `defaults`.
    fn over(self, defaults: &Settings) -> Settings {
        let mut env = defaults.env.clone();
        env.extend(self.env);
        Settings {
            workdir: self.workdir.or_else(|| defaults.workdir.clone()),
            env,
            image: self.image.or_else(|| defaults.image.clone()),
            millicpu: self.millicpu.or(defaults.millicpu),
            memory: self.memory.or(defaults.memory),
            gpu: self.gpu.or(defaults.gpu),
            workers: self.workers.or(defaults.workers),
            flavor: self.flavor.or_else(|| defaults.flavor.clone()),
            retry_limit: self.retry_limit.or(defaults.retry_limit),
            retry_backoff: self.retry_backoff.or(defaults.retry_backoff),
            retry_factor: self.retry_factor.or(defaults.retry_factor),
            retry_max_backoff: self.retry_max_backoff.or(defaults.retry_max_backoff),
            retry_on: self.retry_on.or_else(|| defaults.retry_on.clone()),
            timeout: self.timeout.or(defaults.timeout),
            checkpoint: self.checkpoint.or(defaults.checkpoint),
            cache: self.cache.or_else(|| defaults.cache.clone()),
            priority: self.priority.or_else(|| defaults.priority.clone()),
            interruptible: self.interruptible.or(defaults.interruptible),
            metrics_stdout: self.metrics_stdout.or(defaults.metrics_stdout),
        }
    }
}

/// Decodes a pipeline's `spec`. The result is always returned, with what could be read;
/// it may be run only when no error was reported.
pub fn decode(cx: &mut Cx<'_>, metadata: Metadata, spec: &Node) -> Pipeline {
    let mut pipeline = Pipeline {
        metadata,
        path: cx.src.path.clone(),
        params: Vec::new(),
        parallelism: None,
        fail_fast: true,
        timeout: None,
        steps: Vec::new(),
        from_sweep: false,
    };
    let Some(entries) = cx.fields(spec, "spec", SPEC_FIELDS) else {
        return pipeline;
    };
    let mut defaults = Settings::default();
    let mut steps_node = None;
    let mut on_exit = Vec::new();
    let mut declared_params = Vec::new();
    for e in entries {
        let v = &e.value;
        match e.key.as_str() {
            "params" => (pipeline.params, declared_params) = params::decode(cx, v),
            "defaults" => defaults = decode_defaults(cx, v),
            "parallelism" => {
                pipeline.parallelism = cx.u32(v, "parallelism", 1);
                if pipeline.parallelism.is_none()
                    && v.as_scalar().is_some_and(|s| s.typed() == Typed::Int(0))
                {
                    cx.d.push_help_last("leave parallelism out for no limit".into());
                }
            }
            "failFast" => pipeline.fail_fast = cx.bool(v, "failFast").unwrap_or(true),
            "timeout" => pipeline.timeout = cx.duration(v, "timeout"),
            "onExit" => {
                on_exit = cx
                    .string_list(v, "onExit", "a list of step names")
                    .unwrap_or_default();
            }
            "steps" => steps_node = Some(v),
            _ => {}
        }
    }
    let Some(steps_node) = steps_node else {
        cx.d.error(spec.pos, "a pipeline needs 'steps'")
            .help("add steps: a list of steps, each with a name and a run command");
        return pipeline;
    };
    let Some(items) = steps_node.as_seq() else {
        cx.expected(steps_node, "steps", "a list of steps");
        if steps_node.as_map().is_some() {
            cx.d.push_help_last(
                "write each step as a list item, starting with '- name: prep'".into(),
            );
        }
        return pipeline;
    };
    if items.is_empty() {
        cx.d.error(steps_node.pos, "a pipeline needs at least one step");
    }
    let mut first_at: HashMap<String, Pos> = HashMap::with_capacity(items.len());
    pipeline.steps.reserve_exact(items.len());
    for item in items {
        let Some(step) = decode_step(cx, item, &defaults, Scope::Params, &declared_params) else {
            continue;
        };
        if let Some(line) = first_at.get(&step.name) {
            cx.d.error(step.pos, format!("duplicate step name '{}'", step.name))
                .help(format!(
                    "a step named '{}' is first defined at {line}",
                    step.name
                ));
            continue;
        }
        first_at.insert(step.name.clone(), step.pos);
        pipeline.steps.push(step);
    }
    let index: HashMap<String, usize> = pipeline
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), i))
        .collect();
    let mut seen = HashMap::new();
    let mut known = Known {
        params: declared_params,
        on_exit_complete: true,
    };
    for (name, pos) in on_exit {
        if let Some(line) = seen.insert(name.clone(), pos) {
            cx.d.error(pos, format!("duplicate '{name}' in onExit"))
                .help(format!("'{name}' is first listed at {line}"));
            continue;
        }
        match index.get(&name) {
            Some(&i) => pipeline.steps[i].on_exit = true,
            None => {
                known.on_exit_complete = false;
                cx.d.error(
                    pos,
                    format!("onExit names '{name}', which is not a step of this pipeline"),
                )
                .suggest(&name, pipeline.steps.iter().map(|s| s.name.as_str()));
            }
        }
    }
    check_references(cx, &pipeline, &index, &known);
    pipeline
}

/// What reference checks must know beyond the model, to avoid reporting one mistake twice.
struct Known {
    /// Every declared parameter name, valid or not.
    params: Vec<String>,
    /// Every name in `onExit` was a step (else `{{run.state}}` errors would follow from it).
    on_exit_complete: bool,
}

fn decode_defaults(cx: &mut Cx<'_>, node: &Node) -> Settings {
    let Some(entries) = node.as_map() else {
        cx.expected(node, "defaults", "a mapping");
        return Settings::default();
    };
    let mut s = Settings::default();
    for e in entries {
        if OWN_FIELDS.contains(&e.key.as_str()) {
            cx.d.error(e.key_pos, format!("'{}' cannot be set in defaults", e.key))
                .help(format!(
                    "defaults hold what every step shares: {}",
                    SHARED_FIELDS.join(", ")
                ));
        } else if !read_shared(cx, &mut s, &e.key, &e.value, "defaults.", Scope::Params) {
            cx.d.error(e.key_pos, format!("unknown field '{}' in defaults", e.key))
                .suggest(&e.key, SHARED_FIELDS.iter().copied());
        }
    }
    s
}

/// Reads one shared field into `s`; false if `key` is not a shared field.
fn read_shared(
    cx: &mut Cx<'_>,
    s: &mut Settings,
    key: &str,
    v: &Node,
    prefix: &str,
    scope: Scope<'_>,
) -> bool {
    let f = |name: &str| format!("{prefix}{name}");
    match key {
        "workdir" => s.workdir = cx.template(v, &f("workdir"), scope).map(|t| t.template),
        "env" => read_env(cx, s, v, &f("env"), scope),
        "image" => s.image = cx.plain_string(v, &f("image")),
        "resources" => read_resources(cx, s, v, &f("resources")),
        "retry" => read_retry(cx, s, v, &f("retry")),
        "timeout" => s.timeout = cx.duration(v, &f("timeout")),
        "checkpoint" => s.checkpoint = read_checkpoint(cx, v, &f("checkpoint")),
        "cache" => s.cache = read_cache(cx, v, &f("cache"), scope),
        "priority" => {
            s.priority = cx.plain_string(v, &f("priority"));
            if let Some(p) = &s.priority {
                cx.check_name(v, "priority", p);
            }
        }
        "interruptible" => s.interruptible = cx.bool(v, &f("interruptible")),
        "metrics" => {
            if let Some(entries) = cx.fields(v, &f("metrics"), &["stdout"]) {
                for e in entries {
                    if e.key == "stdout" {
                        s.metrics_stdout = cx.bool(&e.value, &f("metrics.stdout"));
                    }
                }
            }
        }
        _ => return false,
    }
    true
}

fn read_env(cx: &mut Cx<'_>, s: &mut Settings, v: &Node, field: &str, scope: Scope<'_>) {
    let Some(entries) = v.as_map() else {
        cx.expected(v, field, "a mapping of variable names to values");
        return;
    };
    for e in entries {
        if !decode::is_identifier(&e.key) {
            cx.d.error(
                e.key_pos,
                format!("'{}' is not a valid environment variable name", e.key),
            )
            .help("use letters, digits and '_', not starting with a digit");
            continue;
        }
        if e.key.starts_with("SLUICE_") {
            cx.d.error(
                e.key_pos,
                format!("'{}' is set by sluice and cannot be overridden", e.key),
            )
            .help("sluice sets the SLUICE_* variables for every step; choose another name");
            continue;
        }
        let field = format!("{field}.{}", e.key);
        if let Some(text) = cx.text(&e.value, &field) {
            let t = cx.template_of(&e.value, &text, scope);
            s.env.insert(e.key.clone(), t.template);
        }
    }
}

fn read_resources(cx: &mut Cx<'_>, s: &mut Settings, v: &Node, field: &str) {
    let Some(entries) = cx.fields(v, field, RESOURCE_FIELDS) else {
        return;
    };
    for e in entries {
        let v = &e.value;
        let f = format!("{field}.{}", e.key);
        match e.key.as_str() {
            "cpu" => s.millicpu = read_cpu(cx, v, &f),
            "memory" => s.memory = read_memory(cx, v, &f),
            "gpu" => s.gpu = cx.u32(v, &f, 0),
            "workers" => s.workers = cx.u32(v, &f, 1),
            "flavor" => s.flavor = cx.plain_string(v, &f),
            _ => {}
        }
    }
}

fn read_cpu(cx: &mut Cx<'_>, v: &Node, field: &str) -> Option<u64> {
    const WHAT: &str = "a number of cores such as 2, 0.5 or 500m";
    let cores = match v.as_scalar().map(|s| s.typed()) {
        Some(Typed::Int(i)) if i >= 0 => Some(i as f64),
        Some(Typed::Float(f)) if f.is_finite() && f >= 0.0 => Some(f),
        Some(Typed::Str(t)) => units::parse_quantity(t).ok(),
        _ => None,
    };
    match cores {
        Some(c) if c * 1000.0 <= u64::MAX as f64 => Some((c * 1000.0).round() as u64),
        _ => {
            cx.expected(v, field, WHAT);
            None
        }
    }
}

fn read_memory(cx: &mut Cx<'_>, v: &Node, field: &str) -> Option<u64> {
    const WHAT: &str = "a quantity such as 512Mi or 4Gi";
    let bytes = match v.as_scalar().map(|s| s.typed()) {
        Some(Typed::Int(i)) if i >= 0 => Some(i as f64),
        Some(Typed::Str(t)) => units::parse_quantity(t).ok(),
        _ => None,
    };
    match bytes {
        Some(b) if b <= u64::MAX as f64 => Some(b.round() as u64),
        _ => {
            cx.expected(v, field, WHAT);
            if let Some(Typed::Str(t)) = v.as_scalar().map(|s| s.typed())
                && let Some(stripped) = t.strip_suffix(['B', 'b'])
            {
                let base = stripped.trim_end_matches('i');
                cx.d.push_help_last(format!(
                        "quantities have no 'B': write '{base}' (powers of 1000) or '{base}i' (powers of 1024)"
                    ));
            }
            None
        }
    }
}

fn read_retry(cx: &mut Cx<'_>, s: &mut Settings, v: &Node, field: &str) {
    let Some(entries) = cx.fields(v, field, RETRY_FIELDS) else {
        return;
    };
    for e in entries {
        let v = &e.value;
        let f = format!("{field}.{}", e.key);
        match e.key.as_str() {
            "limit" => s.retry_limit = cx.u32(v, &f, 0),
            "backoff" => s.retry_backoff = cx.duration(v, &f),
            "maxBackoff" => s.retry_max_backoff = cx.duration(v, &f),
            "factor" => match cx.number(v, &f) {
                Some(x) if x >= 1.0 => s.retry_factor = Some(x),
                Some(_) => {
                    cx.d.error(
                        v.pos,
                        format!(
                            "{f}: expected a number of at least 1, found {}",
                            v.describe()
                        ),
                    );
                }
                None => {}
            },
            "on" => {
                let Some(items) = v.as_seq() else {
                    cx.expected(v, &f, "a list of failure and timeout");
                    continue;
                };
                let mut on = Vec::new();
                for item in items {
                    match item.as_scalar().map(|s| s.typed()) {
                        Some(Typed::Str("failure")) => on.push(RetryOn::Failure),
                        Some(Typed::Str("timeout")) => on.push(RetryOn::Timeout),
                        Some(Typed::Str(other)) => {
                            let d =
                                cx.d.error(item.pos, format!("{f}: unknown reason '{other}'"));
                            d.suggest(other, ["failure", "timeout"]);
                            d.help(
                                "retry.on lists failure and/or timeout; preemption always resumes",
                            );
                        }
                        _ => cx.expected(item, &f, "failure or timeout"),
                    }
                }
                s.retry_on = Some(on);
            }
            _ => {}
        }
    }
}

fn read_checkpoint(cx: &mut Cx<'_>, v: &Node, field: &str) -> Option<Option<Duration>> {
    match &v.value {
        Value::Scalar(sc) => match sc.typed() {
            Typed::Bool(false) => Some(None),
            Typed::Bool(true) => Some(Some(DEFAULT_CHECKPOINT_EVERY)),
            _ => {
                cx.expected(v, field, "{every: DURATION} or false");
                if let Typed::Str(t) = sc.typed()
                    && units::parse_duration(t).is_ok()
                {
                    cx.d.push_help_last(format!("write {field}: {{every: {t}}}"));
                }
                None
            }
        },
        Value::Map(_) => {
            let entries = cx.fields(v, field, &["every"])?;
            let mut every = DEFAULT_CHECKPOINT_EVERY;
            for e in entries {
                if e.key == "every" {
                    every = cx.duration(&e.value, &format!("{field}.every"))?;
                    if every.is_zero() {
                        cx.d.error(e.value.pos, format!("{field}.every must be longer than 0s"))
                            .help(format!("write {field}: false to turn checkpointing off"));
                        return None;
                    }
                }
            }
            Some(Some(every))
        }
        Value::Seq(_) => {
            cx.expected(v, field, "{every: DURATION} or false");
            None
        }
    }
}

fn read_cache(cx: &mut Cx<'_>, v: &Node, field: &str, scope: Scope<'_>) -> Option<Option<Cache>> {
    match &v.value {
        Value::Scalar(sc) => match sc.typed() {
            Typed::Bool(b) => Some(b.then(Cache::default)),
            _ => {
                cx.expected(v, field, "true, false or {key: STRING, files: [PATHS]}");
                None
            }
        },
        Value::Map(_) => {
            let entries = cx.fields(v, field, &["key", "files"])?;
            // A bad key does not hide a bad files list: both are read, whatever they hold.
            let mut cache = Cache::default();
            for e in entries {
                match e.key.as_str() {
                    "key" => {
                        cache.key = cx
                            .template(&e.value, &format!("{field}.key"), scope)
                            .map(|t| t.template);
                    }
                    "files" => {
                        cache.files = cx
                            .string_list(
                                &e.value,
                                &format!("{field}.files"),
                                "a list of file paths",
                            )
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(s, _)| s)
                            .collect();
                    }
                    _ => {}
                }
            }
            Some(Some(cache))
        }
        Value::Seq(_) => {
            cx.expected(v, field, "true, false or {key: STRING, files: [PATHS]}");
            None
        }
    }
}

/// A sweep's `trial`: a step without a name (each trial is `trial[N]`), without `needs`,
/// `forEach`, `when` or a nested `sweep`. Returns it named `trial`.
pub(super) fn decode_trial(cx: &mut Cx<'_>, node: &Node) -> Option<Step> {
    decode_trial_in(cx, node, Scope::Params)
}

/// A trial whose templates' parameters are named as `scope` says.
pub(super) fn decode_trial_in(cx: &mut Cx<'_>, node: &Node, scope: Scope<'_>) -> Option<Step> {
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
    if let super::yaml::Value::Map(entries) = &mut named.value {
        entries.retain(|e| {
            !matches!(
                e.key.as_str(),
                "name" | "needs" | "forEach" | "when" | "sweep"
            )
        });
        entries.insert(
            0,
            super::yaml::Entry {
                key: "name".into(),
                key_pos: node.pos,
                value: Node {
                    pos: node.pos,
                    start: node.start,
                    end: node.start,
                    value: super::yaml::Value::Scalar(super::yaml::Scalar {
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
fn decode_step(
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
        workdir: s.workdir,
        env: s.env,
        image: s.image,
        resources: Resources {
            millicpu: s.millicpu.unwrap_or(1000),
            memory: s.memory,
            gpu: s.gpu.unwrap_or(0),
            workers: s.workers.unwrap_or(1),
            flavor: s.flavor,
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
    let sweep = super::sweep::decode_nested(cx, step, v, pipeline_params).map(Box::new);
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
                if let super::template::Part::Ref(r) = part {
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

/// Checks that every name a step uses exists: needed steps, parameters, outputs, sweep
/// parameters, `{{item}}` fields. Whether a referenced step is upstream is the DAG's check.
fn check_references(cx: &mut Cx<'_>, p: &Pipeline, index: &HashMap<String, usize>, known: &Known) {
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// References that are right in the pipeline below.
    const GOOD: &[&str] = &[
        "{{params.lr}}",
        "{{run.id}}",
        "{{steps.prep.outputs.data}}",
        "x",
    ];
    /// References that are each exactly one mistake there.
    const BAD: &[&str] = &[
        "{{inputs.parameters.lr}}",
        "{{params.nope}}",
        "{{param.lr}}",
        "{{steps.nope.outputs.x}}",
        "{{tasks.prep.outputs.parameters.data}}",
        "{{workflow.name}}",
        "{{steps.prep.outputs.model}}",
    ];

    fn token() -> impl Strategy<Value = (bool, &'static str)> {
        prop_oneof![
            prop::sample::select(GOOD).prop_map(|t| (false, t)),
            prop::sample::select(BAD).prop_map(|t| (true, t)),
        ]
    }

    /// The columns (from 1) where the bad tokens start once joined by `sep` after `prefix`.
    fn bad_columns(prefix: &str, tokens: &[(bool, &str)], sep: &str) -> Vec<u32> {
        let mut at = prefix.len();
        let mut out = Vec::new();
        for (bad, t) in tokens {
            if *bad {
                out.push(at as u32 + 1);
            }
            at += t.len() + sep.len();
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// However bad templates and good ones mix in a `run` line, a `when` condition and a
        /// `command`, each bad one is reported once at its own column and nothing else is.
        #[test]
        fn every_bad_template_of_a_field_is_reported_at_its_column(
            tokens in prop::collection::vec(token(), 1..8),
        ) {
            let words: Vec<&str> = tokens.iter().map(|(_, t)| *t).collect();
            let run_prefix = "      run: \"";
            let when_prefix = "      when: \"";
            let run = format!("{run_prefix}{}\"", words.join(" "));
            let when = format!("{when_prefix}{}\"", words.join(" && "));
            let args: Vec<String> = words.iter().map(|w| format!("\"{w}\"")).collect();
            let command_prefix = "      command: [";
            let command = format!("{command_prefix}{}]", args.join(", "));
            let text = format!(
                "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: p}}\nspec:\n  \
                 params:\n    lr: {{type: float, default: 0.1}}\n  steps:\n    - name: prep\n      \
                 run: python prep.py\n      outputs: [data]\n    - name: train\n      \
                 needs: [prep]\n{run}\n{when}\n    - name: evaluate\n      needs: [prep]\n\
                 {command}\n"
            );
            let loaded = crate::spec::load("p.yaml", text);
            let found: Vec<(u32, u32)> = loaded
                .diagnostics
                .into_sorted()
                .iter()
                .map(|d| d.pos.map_or((0, 0), |p| (p.line, p.column)))
                .collect();
            let mut expected: Vec<(u32, u32)> = Vec::new();
            expected.extend(bad_columns(run_prefix, &tokens, " ").into_iter().map(|c| (13, c)));
            expected.extend(bad_columns(when_prefix, &tokens, " && ").into_iter().map(|c| (14, c)));
            // Each argument is quoted: its template starts one column after its quote.
            let quoted: Vec<(bool, &str)> =
                tokens.iter().zip(&args).map(|((b, _), a)| (*b, a.as_str())).collect();
            expected.extend(
                bad_columns(command_prefix, &quoted, ", ").into_iter().map(|c| (17, c + 1)),
            );
            prop_assert_eq!(found, expected);
        }
    }
}
