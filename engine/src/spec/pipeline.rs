//! `kind: Pipeline`: from the node tree to the validated [`Pipeline`].
//!
//! Fields shared by every step (`defaults`) and a step's own fields are both read into
//! [`Settings`], where every field is optional, then merged: maps (`resources`, `retry`,
//! `env`) field by field, everything else whole, a step's own value winning.

mod references;
mod settings;
mod step;

use std::collections::HashMap;

use super::decode::Cx;
use super::diagnostic::Pos;
use super::model::*;
use super::params;
use super::template::Scope;
use super::yaml::{Node, Typed};
use references::{Known, check_references};
use settings::{Settings, decode_defaults};
use step::decode_step;
pub(super) use step::{decode_trial, decode_trial_in};

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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    /// Extended resources in `defaults` are merged key by key under a step's own.
    #[test]
    fn extended_resources_merge_with_the_defaults_key_by_key() {
        let text = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  \
                    defaults:\n    resources: {nvidia.com/mig-1g.10gb: 1, cpu: 2}\n  steps:\n    \
                    - {name: a, run: 'true'}\n    \
                    - {name: b, run: 'true', resources: {nvidia.com/mig-1g.10gb: 3, example.com/fpga: 1}}\n";
        let loaded = crate::spec::load("p.yaml", text.to_owned());
        assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
        let p = loaded
            .documents
            .iter()
            .find_map(|d| match d {
                crate::spec::Document::Pipeline(p) => Some(p),
                _ => None,
            })
            .expect("a pipeline");
        let ext = |i: usize| {
            p.steps[i]
                .resources
                .extended
                .iter()
                .map(|(k, v)| (k.as_str(), *v))
                .collect::<Vec<_>>()
        };
        assert_eq!(ext(0), [("nvidia.com/mig-1g.10gb", 1)]);
        assert_eq!(
            ext(1),
            [("example.com/fpga", 1), ("nvidia.com/mig-1g.10gb", 3)]
        );
        assert_eq!(p.steps[1].resources.millicpu, 2000);
    }

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
