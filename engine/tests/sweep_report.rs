//! What `sluice status` and `sluice sweep` show of a sweep, from its rows
//! (`run::driver::report`): every trial in order, the best among those that ended with a
//! value (Succeeded or Stopped), ranked by the objective's goal, ties to the earlier trial.

use sluice_engine::run::driver::report;
use sluice_engine::spec::{self, model::Document, model::Pipeline};
use sluice_engine::store::StepRow;

/// The pipeline a `kind: Sweep` file runs as, with the objective's goal given.
fn sweep_pipeline(goal: &str) -> Pipeline {
    let text = format!(
        "apiVersion: sluice.dev/v1\nkind: Sweep\nmetadata: {{name: s}}\nspec:\n  objective: {{metric: loss, goal: {goal}}}\n  algorithm: {{name: random, seed: 1}}\n  budget: {{maxTrials: 20, parallelism: 2}}\n  params:\n    x: {{type: float, min: 0, max: 1}}\n  trial:\n    run: echo loss={{{{params.x}}}}\n"
    );
    let loaded = spec::load("s.yaml", text);
    assert!(loaded.diagnostics.is_empty(), "{:?}", loaded.diagnostics);
    match loaded.documents.first() {
        Some(Document::Sweep(s)) => Pipeline::of_sweep(s, "s.yaml"),
        _ => panic!("a sweep document"),
    }
}

/// Row `trial[n]` in `state`, with parameter x and (when given) the objective's value.
fn trial(n: u64, state: &str, x: f64, loss: Option<f64>) -> StepRow {
    StepRow {
        name: format!("trial[{n}]"),
        step: "trial".into(),
        item: Some(format!(r#"{{"x":{x}}}"#)),
        state: state.parse().expect("a step state"),
        metrics: loss.map(|l| format!(r#"{{"loss":{l}}}"#)),
        ..StepRow::default()
    }
}

fn rows() -> Vec<StepRow> {
    vec![
        StepRow {
            name: "sweep".into(),
            step: "sweep".into(),
            state: sluice_engine::run::state::StepState::Running,
            ..StepRow::default()
        },
        trial(3, "Succeeded", 0.3, Some(0.3)),
        trial(1, "Succeeded", 0.5, Some(0.5)),
        // A failed trial's value never makes it the best, nor does a running one's.
        trial(2, "Failed", 0.01, Some(0.01)),
        trial(5, "Running", 0.02, Some(0.02)),
        // A stopped trial is a candidate with what it reported.
        trial(4, "Stopped", 0.2, Some(0.2)),
        // Succeeded without the objective: listed, never ranked.
        trial(6, "Succeeded", 0.9, None),
        trial(7, "Succeeded", 0.3, Some(0.3)),
    ]
}

#[test]
fn a_report_lists_every_trial_in_order_and_ranks_only_ended_ones_with_a_value() {
    let r = report(&sweep_pipeline("minimize"), &rows()).expect("a sweep's report");
    let numbers: Vec<u64> = r.trials.iter().map(|t| t.trial).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(r.trials[5].value, None);
    assert_eq!(r.trials[0].params, serde_json::json!({"x": 0.5}));
    // Ranked: 4 (0.2), then 3 and 7 tied at 0.3 (the earlier first), then 1.
    let top: Vec<u64> = r.top.iter().map(|t| t.trial).collect();
    assert_eq!(top, [4, 3, 7, 1]);
    let best = r.best.expect("a best trial");
    assert_eq!((best.trial, best.value), (4, Some(0.2)));
    assert_eq!(best.params, serde_json::json!({"x": 0.2}));
    assert_eq!(r.metric, "loss");
}

#[test]
fn maximizing_ranks_the_largest_value_first() {
    let r = report(&sweep_pipeline("maximize"), &rows()).expect("a sweep's report");
    let top: Vec<u64> = r.top.iter().map(|t| t.trial).collect();
    assert_eq!(top, [1, 3, 7, 4]);
}

#[test]
fn no_trial_with_a_value_is_no_best_and_a_pipeline_without_a_sweep_has_no_report() {
    let rows = vec![
        trial(1, "Failed", 0.1, Some(0.1)),
        trial(2, "Succeeded", 0.2, None),
    ];
    let r = report(&sweep_pipeline("minimize"), &rows).expect("a sweep's report");
    assert!(r.best.is_none() && r.top.is_empty());
    assert_eq!(r.trials.len(), 2);

    let loaded = spec::load(
        "p.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  steps:\n    - {name: a, run: \"true\"}\n".into(),
    );
    let Some(Document::Pipeline(p)) = loaded.documents.first() else {
        panic!("a pipeline document");
    };
    assert!(report(p, &[]).is_none());
}
