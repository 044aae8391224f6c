//! Katib files that run unchanged, and the metrics and reasons they rely on: metrics from
//! standard error (where Python's `logging` writes), Katib's `File` metrics collector (TEXT
//! with `metricsFormat` filters, and JSON), `metricStrategies` (and a sweep's
//! `objective.strategy`), and a failed attempt's reason carrying the last lines of its
//! standard error.

use sluice_e2e::Sandbox;

fn json_of(out: &sluice_e2e::Ran) -> serde_json::Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", out.stdout, out.stderr))
}

/// A Katib Experiment: random search over `lr` in [0.01, 0.05], `trials` trials two at a time,
/// maximizing `accuracy` (with `loss` beside it), its trial container running `command` (YAML
/// flow list items), `extra` added to the spec (a metrics collector, strategies).
fn experiment(trials: u32, objective: &str, extra: &str, command: &str) -> String {
    format!(
        r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  namespace: kubeflow
  name: katib-test
spec:
  objective:
    {objective}
  algorithm:
    algorithmName: random
    algorithmSettings:
      - name: random_state
        value: "3"
  parallelTrialCount: 2
  maxTrialCount: {trials}
  maxFailedTrialCount: 1
{extra}  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.05"
  trialTemplate:
    primaryContainerName: training-container
    trialParameters:
      - name: learningRate
        description: Learning rate for the training model
        reference: lr
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: training-container
                image: ghcr.io/kubeflow/katib/pytorch-mnist-cpu:latest
                command: [{command}]
            restartPolicy: Never
"#
    )
}

const MAXIMIZE_ACCURACY: &str =
    "{type: maximize, goal: 0.99, objectiveMetricName: accuracy, additionalMetricNames: [loss]}";

/// What every trial program here reports for learning rate `lr` at epoch `e` (1..=3): an
/// accuracy that rises with the epochs, so its best is its last.
fn accuracy(lr: f64, epoch: u32) -> f64 {
    let a = 1.0 - (lr - 0.03).abs() * 10.0 - 0.1 / f64::from(epoch);
    (a * 1e4).round() / 1e4
}

const ACCURACY_PY: &str =
    "def accuracy(lr, epoch):\n    return round(1.0 - abs(lr - 0.03) * 10.0 - 0.1 / epoch, 4)\n";

/// The sweep's trials, each checked to have succeeded with the value `expected(lr)`.
fn assert_trials(v: &serde_json::Value, count: usize, expected: impl Fn(f64) -> f64) {
    assert_eq!(v["state"], "Succeeded", "{v}");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), count, "{v}");
    for t in trials {
        assert_eq!(t["state"], "Succeeded", "{t}");
        let lr = t["params"]["lr"].as_f64().expect("lr");
        let value = t["value"].as_f64().expect("a value");
        assert!(
            (value - expected(lr)).abs() < 1e-9,
            "trial {t}: value {value}, expected {}",
            expected(lr)
        );
    }
}

/// A trial that reports with Python's `logging` (standard error, as Katib's pytorch-mnist
/// example does when it has no --log-path) is read as Katib's StdOut collector reads the
/// container's log: it succeeds with its objective.
#[test]
fn a_trial_that_logs_its_metrics_with_python_logging_succeeds() {
    let sb = Sandbox::new("katib-stderr");
    sb.write(
        "mnist.py",
        &format!(
            r#"import argparse, logging
{ACCURACY_PY}
logging.basicConfig(format="%(asctime)s %(levelname)-8s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ", level=logging.DEBUG)
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
a = p.parse_args()
for epoch in (1, 2, 3):
    logging.info("Train Epoch: %d\tloss=%.4f", epoch, 1.0 / epoch)
    logging.info("Validation-accuracy=%.4f", accuracy(a.lr, epoch))
    logging.info("epoch=%d accuracy=%.4f", epoch, accuracy(a.lr, epoch))
"#
        ),
    );
    sb.write(
        "e.yaml",
        &experiment(
            4,
            MAXIMIZE_ACCURACY,
            "",
            r#""python3", "mnist.py", "--lr=${trialParameters.learningRate}""#,
        ),
    );
    let out = sb.run(&["sweep", "e.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_trials(&v, 4, |lr| accuracy(lr, 3));
    // Nothing was printed on standard output: the metrics came from standard error.
    let id = v["id"].as_str().expect("id");
    let log = sb.run(&["logs", id, "trial[1]"]);
    assert!(log.stdout.contains(" err "), "{}", log.stdout);
    assert!(!log.stdout.contains(" out "), "{}", log.stdout);
}

/// Katib's `File` collector with its own example's `metricsFormat` filter: the trial is given
/// its own file where the experiment names `/katib/mnist.log`, writes its metrics there with
/// `logging`, and only that file is read (what it prints on standard output is not a metric).
#[test]
fn the_file_collector_reads_the_file_each_trial_is_given_through_its_filter() {
    let sb = Sandbox::new("katib-file-text");
    sb.write(
        "mnist.py",
        &format!(
            r#"import argparse, logging, os
{ACCURACY_PY}
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--log-path", default="")
a = p.parse_args()
assert a.log_path != "/katib/mnist.log" and a.log_path.endswith("/katib/mnist.log"), a.log_path
assert os.path.isdir(os.path.dirname(a.log_path)), "the file's folder exists, as Katib's volume does"
logging.basicConfig(format="%(asctime)s %(levelname)-8s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ", level=logging.DEBUG, filename=a.log_path)
print("accuracy=7.5", flush=True)
for epoch in (1, 2, 3):
    logging.info("{{metricName: accuracy, metricValue: %.4f}};{{metricName: loss, metricValue: %.4f}}", accuracy(a.lr, epoch), 1.0 / epoch)
"#
        ),
    );
    let collector = r#"  metricsCollectorSpec:
    source:
      filter:
        metricsFormat:
          - "{metricName: ([\\w|-]+), metricValue: ((-?\\d+)(\\.\\d+)?)}"
      fileSystemPath:
        path: "/katib/mnist.log"
        kind: File
    collector:
      kind: File
"#;
    sb.write(
        "e.yaml",
        &experiment(
            4,
            MAXIMIZE_ACCURACY,
            collector,
            r#""python3", "mnist.py", "--log-path=/katib/mnist.log", "--lr=${trialParameters.learningRate}""#,
        ),
    );
    let out = sb.run(&["sweep", "e.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_trials(&v, 4, |lr| accuracy(lr, 3));
    // The file is in the trial's attempt folder.
    let id = v["id"].as_str().expect("id");
    let file = sb.home().join(format!(
        "attempts/{id}/trial[1].1/collector/katib/mnist.log"
    ));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(text.lines().count(), 3, "{text}");
    // The additional metric is read too (its last observation).
    let steps = v["steps"].as_array().expect("steps");
    let trial = steps
        .iter()
        .find(|s| s["name"] == "trial[1]")
        .expect("trial[1]");
    assert_eq!(trial["metrics"]["loss"].as_f64(), Some(0.3333), "{trial}");
}

/// The `File` collector in JSON (cloudml-hypertune's lines, values as strings): the
/// experiment's metrics are read by key, and the file is read while the trial runs (this trial
/// waits until its first line has been read before it goes on, as median stopping needs).
#[test]
fn the_json_file_collector_reads_the_experiment_s_metrics_while_the_trial_runs() {
    let sb = Sandbox::new("katib-file-json");
    sb.write(
        "hpt.py",
        &format!(
            r#"import argparse, json, os, sys, time
{ACCURACY_PY}
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float)
p.add_argument("--log-path", default="")
a = p.parse_args()
def report(epoch):
    line = {{"timestamp": time.time(), "trial": "0", "accuracy": str(accuracy(a.lr, epoch)),
            "loss": str(round(1.0 / epoch, 4)), "global_step": str(epoch)}}
    with open(a.log_path, "a") as f:
        f.write(json.dumps(line) + "\n")
report(1)
# sluice has read the first line before the trial ends, or the trial fails.
deadline = time.time() + 60
seen = os.environ["SLUICE_METRICS_FILE"]
while not (os.path.exists(seen) and '"accuracy"' in open(seen).read()):
    if time.time() > deadline:
        sys.exit("the metrics file was not read while the trial ran")
    time.sleep(0.05)
report(2)
report(3)
"#
        ),
    );
    let collector = r#"  metricsCollectorSpec:
    source:
      fileSystemPath:
        path: "/katib/mnist.json"
        kind: File
        format: JSON
    collector:
      kind: File
"#;
    sb.write(
        "e.yaml",
        &experiment(
            2,
            MAXIMIZE_ACCURACY,
            collector,
            r#""python3", "hpt.py", "--log-path=/katib/mnist.json", "--lr=${trialParameters.learningRate}""#,
        ),
    );
    let out = sb.run(&["sweep", "e.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_trials(&v, 2, |lr| accuracy(lr, 3));
    // Only the experiment's metrics: not the line's timestamp, trial or step.
    let id = v["id"].as_str().expect("id");
    let status = sb.status(id);
    let trial = status["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["name"] == "trial[1]")
        .cloned()
        .expect("trial[1]");
    let names: Vec<&String> = trial["metrics"]
        .as_object()
        .expect("metrics")
        .keys()
        .collect();
    assert_eq!(names, ["accuracy", "loss"], "{trial}");
    // Observations carry the line's global_step.
    let observed = std::fs::read_to_string(
        sb.home()
            .join(format!("attempts/{id}/trial[1].1/metrics.jsonl")),
    )
    .expect("metrics.jsonl");
    assert!(observed.contains(r#""step":3.0"#), "{observed}");
}

/// A trial printing accuracy 0.5, then 0.9, then 0.7: its value is what the strategy picks.
#[test]
fn metric_strategies_pick_the_trial_s_value() {
    let sb = Sandbox::new("katib-strategies");
    sb.write(
        "t.py",
        "import sys\nfor a in (0.5, 0.9, 0.7):\n    print(f\"accuracy={a} loss={1 - a:.1f}\", flush=True)\n",
    );
    let value = |file: &str, text: &str| {
        sb.write(file, text);
        let out = sb.run(&["sweep", file, "--output", "json"]);
        assert_eq!(out.code, Some(0), "{file}: {}", out.stderr);
        let v = json_of(&out);
        assert_eq!(v["state"], "Succeeded", "{file}: {v}");
        v["best"]["value"].as_f64().expect("a best value")
    };
    let command = r#""python3", "t.py", "--lr=${trialParameters.learningRate}""#;
    // Katib's default for a maximized objective: its largest observation.
    assert_eq!(
        value("max.yaml", &experiment(1, MAXIMIZE_ACCURACY, "", command)),
        0.9
    );
    // Written: the last one, or the smallest.
    for (file, strategy, want) in [("latest.yaml", "latest", 0.7), ("min.yaml", "min", 0.5)] {
        let objective = format!(
            "{{type: maximize, objectiveMetricName: accuracy, metricStrategies: [{{name: accuracy, value: {strategy}}}]}}"
        );
        assert_eq!(
            value(file, &experiment(1, &objective, "", command)),
            want,
            "{strategy}"
        );
    }
    // Minimized: its smallest, by default.
    let objective = "{type: minimize, objectiveMetricName: accuracy}";
    assert_eq!(
        value("minimize.yaml", &experiment(1, objective, "", command)),
        0.5
    );
    // A sluice Sweep keeps the last observation unless its objective says otherwise.
    let sweep = |strategy: &str| {
        format!(
            r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {{name: s}}
spec:
  objective: {{metric: accuracy, goal: maximize{strategy}}}
  algorithm: {{name: random, seed: 1}}
  budget: {{maxTrials: 1}}
  params:
    lr: {{type: float, min: 0.01, max: 0.05}}
  trial:
    command: [python3, t.py]
"#
        )
    };
    assert_eq!(value("sweep.yaml", &sweep("")), 0.7);
    assert_eq!(value("sweep-max.yaml", &sweep(", strategy: max")), 0.9);
}

/// A failed trial says why in its reason: its exit code and the last line of its standard
/// error, in `sluice status --output json` (the trial's row) and in the sweep's trials.
#[test]
fn a_failed_trial_s_reason_carries_its_standard_error() {
    let sb = Sandbox::new("katib-reason");
    sb.write(
        "e.yaml",
        &experiment(
            1,
            MAXIMIZE_ACCURACY,
            "",
            r#""python3", "/opt/mxnet-mnist/mnist.py", "--lr=${trialParameters.learningRate}""#,
        ),
    );
    let out = sb.run(&["sweep", "e.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let id = json_of(&out)["id"].as_str().expect("id").to_owned();
    let status = sb.status(&id);
    let trial = status["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["name"] == "trial[1]")
        .cloned()
        .expect("trial[1]");
    assert_eq!(trial["state"], "Failed", "{trial}");
    // python3 names itself as it was found (a full path under pyenv).
    let reason = trial["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("exit code 2: ")
            && reason.ends_with(
                "python3: can't open file '/opt/mxnet-mnist/mnist.py': [Errno 2] No such file or directory"
            ),
        "{trial}"
    );
    assert_eq!(
        status["trials"][0]["reason"].as_str(),
        Some(reason),
        "{status}"
    );
}

/// In any step: the last three lines of standard error, bounded, after the exit code; a
/// retried step's waiting reason says it too.
#[test]
fn a_failed_step_s_reason_quotes_the_end_of_its_standard_error_bounded() {
    let sb = Sandbox::new("katib-reason-step");
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: failing}
spec:
  steps:
    - name: lines
      command: [sh, -c, "echo out-line; for i in 1 2 3 4 5; do echo line$i >&2; done; exit 3"]
      resources: {cpu: 100m}
    - name: long
      command: [python3, -c, "import sys; sys.stderr.write('x' * 5000 + ' the end\\n'); sys.exit(4)"]
      resources: {cpu: 100m}
    - name: signal
      command: [sh, -c, "echo about to die >&2; kill -9 $$"]
      resources: {cpu: 100m}
"#,
    );
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let v = json_of(&out);
    let reason = |name: &str| -> String {
        v["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["name"] == name)
            .and_then(|s| s["reason"].as_str())
            .unwrap_or_else(|| panic!("no reason for {name}: {v}"))
            .to_owned()
    };
    assert_eq!(reason("lines"), "exit code 3: line3 | line4 | line5");
    let long = reason("long");
    assert!(
        long.starts_with("exit code 4: …") && long.ends_with("xxx the end"),
        "{long}"
    );
    assert!(
        long.chars().count() <= 320,
        "{} chars",
        long.chars().count()
    );
    assert_eq!(reason("signal"), "killed by signal 9: about to die");
}

/// Standard error's metrics come from rank 0 of a gang, as standard output's do, and
/// `metrics: {stdout: false}` turns both streams off.
#[test]
fn standard_error_metrics_come_from_rank_0_and_stdout_false_turns_them_off() {
    let sb = Sandbox::new("katib-stderr-gang");
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: streams}
spec:
  steps:
    - name: gang
      resources: {cpu: 100m, workers: 2}
      command: [sh, -c, "echo loss=$((RANK * 100 + 1)) >&2; echo acc=0.$((RANK + 5))"]
    - name: off
      metrics: {stdout: false}
      resources: {cpu: 100m}
      command: [sh, -c, "echo loss=1 >&2; echo acc=0.5"]
"#,
    );
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let metrics = |name: &str| {
        v["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["metrics"].clone())
            .unwrap_or_else(|| panic!("no step {name}: {v}"))
    };
    assert_eq!(
        metrics("gang"),
        serde_json::json!({"loss": 1.0, "acc": 0.5})
    );
    assert_eq!(metrics("off"), serde_json::json!({}));
}

/// The Katib example with a File collector runs as written, each trial's value the accuracy
/// `train.py` wrote to its file at its last epoch.
#[test]
fn the_file_collector_example_runs_as_written() {
    let sb = Sandbox::new("katib-example-file");
    let path = sluice_e2e::root()
        .join("examples/sweeps/katib-file-collector.yaml")
        .display()
        .to_string();
    let out = sb.run(&["sweep", &path, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["name"], "file-metrics-collector");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 12, "maxTrialCount");
    for t in trials {
        assert_eq!(t["state"], "Succeeded", "{t}");
        let lr = t["params"]["lr"].as_f64().expect("lr");
        let layers = t["params"]["num-layers"].as_f64().expect("num-layers");
        // train.py, epoch 3 of 3.
        let loss =
            (lr.log10() + 2.5).powi(2) + 0.1 * (layers - 5.0).powi(2) + 2.0 * (-1.5f64).exp();
        let accuracy = 1.0 / (1.0 + loss.exp());
        let value = t["value"].as_f64().expect("a value");
        assert!((value - accuracy).abs() < 1e-5, "{t}: expected {accuracy}");
    }
    let max = trials
        .iter()
        .filter_map(|t| t["value"].as_f64())
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(v["best"]["value"].as_f64(), Some(max));
}

/// The Katib PyTorchJob example runs as written: each trial is a gang of the Master and its
/// two Workers (ranks 0, 1 and 2 of WORLD_SIZE 3, meeting at MASTER_ADDR:MASTER_PORT), whose
/// value is the `loss=` rank 0 printed; the best trial is reported.
#[test]
fn the_pytorchjob_example_runs_each_trial_as_a_gang_of_3() {
    let sb = Sandbox::new("katib-example-pytorchjob");
    let path = sluice_e2e::root()
        .join("examples/sweeps/katib-pytorchjob.yaml")
        .display()
        .to_string();
    let out = sb.run(&["sweep", &path, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["name"], "pytorchjob-mnist");
    assert_eq!(v["state"], "Succeeded", "{v}");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 4, "maxTrialCount");
    let id = v["id"].as_str().expect("id");
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["state"], "Succeeded", "{t}");
        assert!(t["value"].as_f64().is_some_and(|l| l >= 0.0), "{t}");
        let log = sb.run(&["logs", id, &format!("trial[{}]", i + 1)]);
        assert_eq!(log.code, Some(0), "{}", log.stderr);
        for rank in 0..3 {
            assert!(
                log.stdout.contains(&format!("rank {rank} of 3")),
                "trial[{}] has no rank {rank} of 3:\n{}",
                i + 1,
                log.stdout
            );
        }
        assert_eq!(log.stdout.matches("loss=").count(), 1, "{}", log.stdout);
    }
    let min = trials
        .iter()
        .filter_map(|t| t["value"].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(v["best"]["value"].as_f64(), Some(min), "{v}");
}
