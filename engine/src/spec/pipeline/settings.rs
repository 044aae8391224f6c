//! The fields `defaults` and a step share, read into [`Settings`] (every field optional) and
//! merged, a step's own value over the defaults: env, image, resources, retry, timeout,
//! checkpoint, cache, priority, interruptible, metrics.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{OWN_FIELDS, RESOURCE_FIELDS, RETRY_FIELDS, SHARED_FIELDS};
use crate::spec::Pos;
use crate::spec::decode::{self, Cx};
use crate::spec::model::*;
use crate::spec::template::{Scope, Template};
use crate::spec::units;
use crate::spec::yaml::{Node, Typed, Value};

/// Step settings before defaults are merged: every field optional.
#[derive(Clone, Debug, Default)]
pub(super) struct Settings {
    pub(super) workdir: Option<(Template, Pos)>,
    pub(super) env: BTreeMap<String, Template>,
    pub(super) image: Option<String>,
    pub(super) millicpu: Option<u64>,
    pub(super) memory: Option<u64>,
    pub(super) gpu: Option<u32>,
    pub(super) workers: Option<u32>,
    pub(super) flavor: Option<String>,
    /// Extended resources per worker, by name: merged key by key, a step's own over the
    /// defaults'.
    pub(super) extended: BTreeMap<String, u64>,
    pub(super) retry_limit: Option<u32>,
    pub(super) retry_backoff: Option<Duration>,
    pub(super) retry_factor: Option<f64>,
    pub(super) retry_max_backoff: Option<Duration>,
    pub(super) retry_on: Option<Vec<RetryOn>>,
    pub(super) timeout: Option<Duration>,
    pub(super) checkpoint: Option<Option<Duration>>,
    pub(super) cache: Option<Option<Cache>>,
    pub(super) priority: Option<String>,
    pub(super) interruptible: Option<bool>,
    pub(super) metrics_stdout: Option<bool>,
}

impl Settings {
    /// `self` (a step's own) over `defaults`.
    pub(super) fn over(self, defaults: &Settings) -> Settings {
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
            extended: {
                let mut e = defaults.extended.clone();
                e.extend(self.extended);
                e
            },
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

pub(super) fn decode_defaults(cx: &mut Cx<'_>, node: &Node) -> Settings {
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
pub(super) fn read_shared(
    cx: &mut Cx<'_>,
    s: &mut Settings,
    key: &str,
    v: &Node,
    prefix: &str,
    scope: Scope<'_>,
) -> bool {
    let f = |name: &str| format!("{prefix}{name}");
    match key {
        "workdir" => {
            s.workdir = cx
                .template(v, &f("workdir"), scope)
                .map(|t| (t.template, v.pos));
        }
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
    let Some(entries) = cx.resource_fields(v, field, RESOURCE_FIELDS) else {
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
            k if crate::scheduler::extended::is_name(k) => {
                if let Some(n) = cx.uint(v, &f, 0) {
                    s.extended.insert(k.to_owned(), n);
                }
            }
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
                            .unwrap_or_default();
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
