//! Property tests: no input makes the loader, the validator, the DAG or the planner panic,
//! and every diagnostic points inside the file.

use proptest::prelude::*;
use sluice_engine::dag;
use sluice_engine::spec::{self, model::Document, params};

/// Runs every stage a `sluice lint --plan` runs, and checks the diagnostics' positions.
fn check(text: &str) {
    // Line breaks as YAML counts them: \r\n, \n, and a lone \r.
    let lines = text
        .replace("\r\n", "\n")
        .chars()
        .filter(|c| matches!(c, '\n' | '\r'))
        .count() as u32
        + 1;
    let loaded = spec::load("fuzz.yaml", text.to_owned());
    let mut d = loaded.diagnostics.clone();
    for doc in &loaded.documents {
        if let Document::Pipeline(p) = doc {
            let graph = dag::graph::build(p, &mut d);
            if let (Some(g), Ok(values)) = (graph, params::resolve(p, &[], false)) {
                let plan = dag::plan::expand(p, &g, values);
                // A level holds at least one step (a fan-out over an empty list may leave it
                // without instances), and the count is of the instances listed.
                assert!(plan.levels.len() <= plan.steps);
                let listed: usize = plan.levels.iter().map(|l| l.steps.len()).sum();
                assert_eq!(plan.instances, listed + plan.on_exit.len());
            }
        }
    }
    for diag in d.into_sorted() {
        let _ = diag.to_string();
        if let Some(pos) = diag.pos {
            assert!(
                pos.line >= 1 && pos.line <= lines,
                "line out of range: {diag}"
            );
            assert!(pos.column >= 1, "column out of range: {diag}");
        }
    }
}

const VALID: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: retrain, team: vision}
spec:
  params:
    lr: {type: float, default: 0.001}
    splits: {type: list, default: [val, test]}
  defaults:
    resources: {cpu: 1, memory: 1Gi}
    retry: {limit: 2, backoff: 10s}
  parallelism: 4
  onExit: [notify]
  steps:
    - name: prep
      run: python prep.py --out "$SLUICE_OUTPUT_DIR/dataset"
      outputs: [dataset]
      cache: true
    - name: train
      needs: [prep]
      run: python train.py --data {{steps.prep.outputs.dataset}} --lr {{params.lr}}
      resources: {gpu: 2, workers: 4}
      checkpoint: {every: 15m}
      outputs: [model]
    - name: evaluate
      needs: [train]
      forEach: "{{params.splits}}"
      run: python eval.py --split {{item}} --model {{steps.train.outputs.model}}
    - name: publish
      needs: [evaluate]
      when: "{{steps.train.metrics.accuracy}} >= 0.9 && !({{params.lr}} > 1)"
      command: [./publish.sh, "{{run.id}}"]
    - name: notify
      run: ./notify.sh "{{run.name}} ended {{run.state}}"
"#;

/// Words a pipeline file is made of, so that random files get deep into validation.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("apiVersion".to_owned()),
        Just("kind".to_owned()),
        Just("Pipeline".to_owned()),
        Just("sluice.dev/v1".to_owned()),
        Just("metadata".to_owned()),
        Just("name".to_owned()),
        Just("spec".to_owned()),
        Just("steps".to_owned()),
        Just("needs".to_owned()),
        Just("run".to_owned()),
        Just("command".to_owned()),
        Just("forEach".to_owned()),
        Just("when".to_owned()),
        Just("params".to_owned()),
        Just("resources".to_owned()),
        Just("retry".to_owned()),
        Just("outputs".to_owned()),
        Just("onExit".to_owned()),
        Just("defaults".to_owned()),
        Just("type".to_owned()),
        Just("default".to_owned()),
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("\"{{steps.a.outputs.x}}\"".to_owned()),
        Just("\"{{params.p}} > 1 && ((\"".to_owned()),
        Just("\"{{item.f}}\"".to_owned()),
        Just("15m".to_owned()),
        Just("4Gi".to_owned()),
        Just("-3".to_owned()),
        Just("true".to_owned()),
        Just("~".to_owned()),
        Just("&x".to_owned()),
        Just("*x".to_owned()),
        Just("<<".to_owned()),
        "[a-z{}\\[\\]:,\"' -]{0,12}",
    ]
}

fn node(depth: u32) -> BoxedStrategy<String> {
    let leaf = word().boxed();
    if depth == 0 {
        return leaf;
    }
    prop_oneof![
        2 => leaf,
        1 => prop::collection::vec(node(depth - 1), 0..5).prop_map(|v| format!("[{}]", v.join(", "))),
        2 => prop::collection::vec((word(), node(depth - 1)), 0..6).prop_map(|v| {
            let pairs: Vec<String> = v.into_iter().map(|(k, val)| format!("{k}: {val}")).collect();
            format!("{{{}}}", pairs.join(", "))
        }),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_yaml_never_panics(doc in node(4)) {
        check(&doc);
        check(&format!("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: p}}\nspec: {doc}\n"));
        check(&format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: p}}\nspec:\n  steps:\n    - {doc}\n    - {{name: a, run: x, needs: [b]}}\n    - {{name: b, run: y}}\n"
        ));
    }

    #[test]
    fn edits_of_a_valid_pipeline_never_panic(
        edits in prop::collection::vec((0usize..2000, 0usize..4, word()), 1..6)
    ) {
        let mut text = VALID.to_owned();
        for (at, kind, w) in edits {
            let mut at = at % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let end = (at + 1 + w.len() % 7).min(text.len());
            let end = (end..=text.len()).find(|&e| text.is_char_boundary(e)).unwrap_or(text.len());
            match kind {
                0 => text.insert_str(at, &w),
                1 => text.replace_range(at..end, ""),
                2 => text.replace_range(at..end, &w),
                _ => text.insert(at, '\n'),
            }
        }
        check(&text);
    }
}

#[test]
fn the_valid_pipeline_is_valid() {
    let loaded = spec::load("v.yaml", VALID.to_owned());
    let diags = loaded.diagnostics.into_sorted();
    assert!(diags.is_empty(), "{diags:?}");
}

/// Found by `arbitrary_bytes_never_panic`: lone carriage returns are line breaks to YAML, and
/// the diagnostic's line 3 is right.
#[test]
fn carriage_returns_count_as_line_breaks() {
    check("-\r\r.");
    check("a: [\r\r}");
}

/// A fan-out over an empty list is valid and plans a level with no instances (the edit
/// `engine/tests/no_panic.proptest-regressions` records broke an earlier, wrong invariant).
#[test]
fn a_fan_out_over_nothing_plans_no_instance() {
    check(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  steps:\n    - name: a\n      forEach: []\n      run: echo {{item}}\n",
    );
}
