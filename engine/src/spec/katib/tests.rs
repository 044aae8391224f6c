//! Katib Experiments read as sweeps: what maps, what is refused, and where it is said.

use super::*;
use crate::spec::model::{Action, Document, EarlyStopping, Goal, Strategy};
use crate::spec::{Diagnostic, Severity};

const EXPERIMENT: &str = r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: e, namespace: vision}
spec:
  objective: {type: minimize, goal: 0.1, objectiveMetricName: loss}
  algorithm:
    algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]
  earlyStopping:
    algorithmName: medianstop
    algorithmSettings: [{name: min_trials_required, value: "2"}]
  maxTrialCount: 5
  parameters:
    - {name: lr, parameterType: double, feasibleSpace: {min: "0.001", max: "0.1", distribution: logUniform}}
    - {name: num-layers, parameterType: int, feasibleSpace: {min: "2", max: "6", step: "2"}}
    - {name: opt, parameterType: discrete, feasibleSpace: {list: ["1", "2"]}}
  trialTemplate:
    primaryContainerName: main
    trialParameters:
      - {name: learningRate, reference: lr}
      - {name: layers, reference: num-layers}
    trialSpec:
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            containers:
              - name: side
                image: busybox
              - name: main
                image: example/train:1
                command: [python3, train.py]
                args: ["--lr=${trialParameters.learningRate}", "--layers", "${trialParameters.layers}"]
                resources: {limits: {cpu: "2", nvidia.com/gpu: "1"}}
            restartPolicy: Never
"#;

pub(super) fn load(text: &str) -> (Option<Sweep>, Vec<Diagnostic>) {
    let loaded = crate::spec::load("e.yaml", text.to_owned());
    let sweep = loaded.documents.into_iter().find_map(|d| match d {
        Document::Sweep(s) => Some(*s),
        _ => None,
    });
    (sweep, loaded.diagnostics.into_sorted())
}

pub(super) fn clean(text: &str) -> (Sweep, Vec<Diagnostic>) {
    let (sweep, diags) = load(text);
    assert!(
        diags.iter().all(|d| d.severity != Severity::Error),
        "{diags:#?}"
    );
    (sweep.expect("a sweep"), diags)
}

/// The rendered messages (`LINE:COL: MESSAGE` and help lines).
pub(super) fn errors(text: &str) -> String {
    let (sweep, diags) = load(text);
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    assert!(!errors.is_empty(), "no error; decoded {sweep:?}");
    errors.join("\n")
}

pub(super) fn words(s: &Sweep) -> Vec<String> {
    let Action::Command(words) = &s.trial.action else {
        panic!("not a command");
    };
    words
        .iter()
        .map(|t| {
            t.render(|r| Ok::<_, ()>(format!("<{r}>")))
                .unwrap_or_default()
        })
        .collect()
}

/// The example with `old` replaced by `new` (which must be found).
fn edit(old: &str, new: &str) -> String {
    assert!(EXPERIMENT.contains(old), "{old}");
    EXPERIMENT.replacen(old, new, 1)
}

#[test]
fn an_experiment_reads_as_a_sweep() {
    let (s, diags) = clean(EXPERIMENT);
    // bayesianoptimization runs as TPE, and says so with a warning.
    let warning = diags
        .iter()
        .find(|d| d.severity == Severity::Warning)
        .expect("a warning");
    assert!(warning.message.contains("runs as tpe"), "{warning:?}");
    assert_eq!(s.metadata.name, "e");
    assert_eq!(s.objective.goal, Goal::Minimize);
    assert_eq!(s.objective.target, Some(0.1));
    assert_eq!(s.objective.metric, "loss");
    assert_eq!(s.algorithm.name, "tpe");
    assert_eq!(s.algorithm.seed, 7);
    assert_eq!(s.algorithm.startup_trials, KATIB_STARTUP);
    assert_eq!(s.budget.max_trials, Some(5));
    // Katib's default parallelTrialCount.
    assert_eq!(s.budget.parallelism, 3);
    assert_eq!(s.budget.max_failed_trials, None);
    assert_eq!(
        s.early_stopping,
        Some(EarlyStopping {
            min_trials: 2,
            start_step: 4
        })
    );
    assert_eq!(
        s.params["lr"],
        SweepParam::Float {
            min: 0.001,
            max: 0.1,
            log: true,
            step: None
        }
    );
    assert_eq!(
        s.params["num-layers"],
        SweepParam::Int {
            min: 2,
            max: 6,
            log: false,
            step: 2
        }
    );
    assert_eq!(
        s.params["opt"],
        SweepParam::Categorical {
            values: vec!["1".into(), "2".into()]
        }
    );
    assert_eq!(
        words(&s),
        [
            "python3",
            "train.py",
            "--lr=<params.lr>",
            "--layers",
            "<params.num-layers>"
        ]
    );
    assert_eq!(s.trial.name, "trial");
    assert_eq!(s.trial.image.as_deref(), Some("example/train:1"));
    assert_eq!(s.trial.resources.millicpu, 2000);
    assert_eq!(s.trial.resources.gpu, 1);
    // As a `kind: Sweep` trial: metrics on stdout, no retries, no timeout.
    assert!(s.trial.metrics_stdout);
    assert_eq!(s.trial.retry.limit, 0);
    assert_eq!(s.trial.timeout, None);
}

#[test]
fn numbers_are_read_as_numbers_or_strings() {
    let text = edit(
        r#"{min: "0.001", max: "0.1", distribution: logUniform}"#,
        r#"{min: 0.001, max: "1e-1", distribution: logUniform}"#,
    )
    .replace("goal: 0.1,", "goal: \"0.1\",")
    .replace(
        "maxTrialCount: 5",
        "maxTrialCount: \"5\"\n  parallelTrialCount: 2\n  maxFailedTrialCount: \"4\"",
    );
    let (s, _) = clean(&text);
    assert_eq!(s.objective.target, Some(0.1));
    assert_eq!(s.budget.max_trials, Some(5));
    assert_eq!(s.budget.parallelism, 2);
    assert_eq!(s.budget.max_failed_trials, Some(4));
    assert!(matches!(
        s.params["lr"],
        SweepParam::Float { min, max, log: true, .. } if min == 0.001 && max == 0.1
    ));
    let bad = edit(r#"min: "2""#, r#"min: "two""#);
    assert!(errors(&bad).contains("feasibleSpace.min: expected a number"));
    let fraction = edit(r#"min: "2""#, r#"min: "2.5""#);
    assert!(errors(&fraction).contains("'num-layers' (int) needs whole min, max and step"));
}

#[test]
fn discrete_values_keep_their_text_and_doubles_take_steps() {
    let text = edit(r#"list: ["1", "2"]"#, "list: [0.10, 2, 1e-3]").replace(
        r#"{min: "2", max: "6", step: "2"}"#,
        r#"{min: "2", max: "6", step: "2", distribution: uniform}"#,
    );
    let (s, _) = clean(&text);
    assert_eq!(
        s.params["opt"],
        SweepParam::Categorical {
            values: vec!["0.10".into(), "2".into(), "1e-3".into()]
        }
    );
    let double = edit(
        r#"{name: num-layers, parameterType: int, feasibleSpace: {min: "2", max: "6", step: "2"}}"#,
        r#"{name: num-layers, parameterType: double, feasibleSpace: {min: "0.5", max: "1", step: "0.1"}}"#,
    );
    let (s, _) = clean(&double);
    assert_eq!(
        s.params["num-layers"],
        SweepParam::Float {
            min: 0.5,
            max: 1.0,
            log: false,
            step: Some(0.1)
        }
    );
    let twice = edit(r#"list: ["1", "2"]"#, r#"list: ["1", "1"]"#);
    assert!(errors(&twice).contains("value '1' is listed twice"));
    let empty = edit(r#"min: "2", max: "6""#, r#"min: "6", max: "6""#);
    assert!(errors(&empty).contains("max (6) must be above min (6)"));
}

#[test]
fn distributions_other_than_uniform_are_errors() {
    let e = errors(&edit("distribution: logUniform", "distribution: normal"));
    assert!(
        e.contains("14:97: error: distribution 'normal' cannot be honoured by sluice"),
        "{e}"
    );
    assert!(
        e.contains("help: sluice samples uniform and logUniform"),
        "{e}"
    );
    let typo = errors(&edit(
        "distribution: logUniform",
        "distribution: loguniform",
    ));
    assert!(typo.contains("did you mean 'logUniform'?"), "{typo}");
}

#[test]
fn trial_parameters_are_substituted_and_checked() {
    // Twice in one word, beside text with braces, and in env (with $(VAR) expansion).
    let text = edit(
        r#"args: ["--lr=${trialParameters.learningRate}", "--layers", "${trialParameters.layers}"]"#,
        r#"args: ["${trialParameters.layers}x${trialParameters.layers}", "{{x}}", "$(LR)", "$$(LR)", "$(NONE)"]
                env: [{name: LR, value: "${trialParameters.learningRate}"}, {name: EMPTY}]"#,
    );
    let (s, _) = clean(&text);
    assert_eq!(
        words(&s),
        [
            "python3",
            "train.py",
            "<params.num-layers>x<params.num-layers>",
            "{{x}}",
            "<params.lr>",
            "$(LR)",
            "$(NONE)"
        ]
    );
    let lr = s.trial.env["LR"]
        .render(|r| Ok::<_, ()>(format!("<{r}>")))
        .unwrap_or_default();
    assert_eq!(lr, "<params.lr>");
    assert!(s.trial.env.contains_key("EMPTY"));

    let unknown = errors(&edit(
        "${trialParameters.layers}",
        "${trialParameters.layer}",
    ));
    assert!(
        unknown.contains("${trialParameters.layer}: trialTemplate.trialParameters has no 'layer'"),
        "{unknown}"
    );
    assert!(
        unknown.contains("help: did you mean 'layers'?"),
        "{unknown}"
    );
    let reference = errors(&edit("reference: num-layers", "reference: num_layers"));
    assert!(
        reference
            .contains("trial parameter 'layers' references 'num_layers', which is not a parameter"),
        "{reference}"
    );
    assert!(
        reference.contains("did you mean 'num-layers'?"),
        "{reference}"
    );
    // The bad reference is reported once, not again where it is used.
    assert_eq!(reference.matches("error:").count(), 1, "{reference}");
    let secret = errors(&edit(
        r#"command: [python3, train.py]"#,
        r#"command: [python3, train.py]
                env: [{name: KEY, valueFrom: {secretKeyRef: {name: s, key: k}}}]"#,
    ));
    assert!(
        secret.contains("env 'KEY': valueFrom cannot be honoured by sluice"),
        "{secret}"
    );
}

#[test]
fn algorithm_settings_map_under_katib_names() {
    let tpe = edit(
        r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
        r#"algorithmName: tpe
    algorithmSettings: [{name: n_EI_candidates, value: "30"}, {name: prior_weight, value: "1.0"}]"#,
    )
    .replace(
        "maxTrialCount: 5",
        "maxTrialCount: 5\n  parallelTrialCount: 4",
    );
    let (s, diags) = clean(&tpe);
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(s.algorithm.name, "tpe");
    assert_eq!(s.algorithm.candidates, 30);
    // hyperopt draws the first request, parallelTrialCount trials, at random.
    assert_eq!(s.algorithm.startup_trials, 4);

    let optuna = edit(
        r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
        r#"algorithmName: multivariate-tpe
    algorithmSettings: [{name: startup_trials, value: "5"}, {name: ei_candidates, value: 12}, {name: random_state, value: "18446744073709551615"}]"#,
    );
    let (s, _) = clean(&optuna);
    assert_eq!(
        (
            s.algorithm.startup_trials,
            s.algorithm.candidates,
            s.algorithm.seed
        ),
        (5, 12, u64::MAX)
    );

    let skopt = edit(
        r#"[{name: random_state, value: "7"}]"#,
        r#"[{name: n_initial_points, value: "6"}, {name: acq_func, value: "EI"}]"#,
    );
    let e = errors(&skopt);
    assert!(
        e.contains(
            "algorithm setting 'acq_func' of bayesianoptimization cannot be honoured by sluice"
        ),
        "{e}"
    );
    let gamma = edit(
        r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
        r#"algorithmName: tpe
    algorithmSettings: [{name: gamma, value: "0.3"}, {name: n_startup_trials, value: "3"}]"#,
    );
    let e = errors(&gamma);
    assert!(e.contains("'gamma' of tpe cannot be honoured"), "{e}");
    assert!(
        e.contains("unknown algorithm setting 'n_startup_trials' for tpe"),
        "{e}"
    );
    let cmaes = errors(&edit(
        "algorithmName: bayesianoptimization",
        "algorithmName: cmaes",
    ));
    assert!(
        cmaes.contains("algorithm 'cmaes' cannot be run by sluice"),
        "{cmaes}"
    );
}

/// Katib's own Hyperband example: the resource parameter's range (1 to 1) is replaced by
/// the brackets' budgets, from r_l and eta.
#[test]
fn hyperband_takes_its_budgets_from_r_l_and_eta() {
    let text = edit(
            r#"algorithmName: bayesianoptimization
    algorithmSettings: [{name: random_state, value: "7"}]"#,
            r#"algorithmName: hyperband
    algorithmSettings:
      - {name: resource_name, value: num-epochs}
      - {name: eta, value: "3"}
      - {name: r_l, value: "9"}"#,
        )
        .replace(
            r#"    - {name: opt,"#,
            "    - {name: num-epochs, parameterType: int, feasibleSpace: {min: \"1\", max: \"1\"}}\n    - {name: opt,",
        );
    let (s, _) = clean(&text);
    assert_eq!(s.algorithm.name, "hyperband");
    assert_eq!(s.algorithm.resource.as_deref(), Some("num-epochs"));
    assert_eq!(s.algorithm.eta, 3);
    assert_eq!(s.algorithm.min_resource, Some(1.0));
    assert_eq!(s.algorithm.max_resource, Some(9.0));
    assert_eq!(
        s.params["num-epochs"],
        SweepParam::Int {
            min: 1,
            max: 9,
            log: false,
            step: 1
        }
    );
    let typo = errors(&text.replace("value: num-epochs}", "value: num-epoch}"));
    assert!(typo.contains("did you mean 'num-epochs'?"), "{typo}");
    let no_r_l = errors(&text.replace(r#"      - {name: r_l, value: "9"}"#, ""));
    assert!(
        no_r_l.contains("hyperband needs the setting r_l"),
        "{no_r_l}"
    );
}

#[test]
fn the_job_maps_onto_the_trial_and_the_rest_is_refused() {
    let text = edit(
            "      spec:\n        template:",
            "      spec:\n        backoffLimit: 2\n        activeDeadlineSeconds: 600\n        template:",
        )
        .replace(
            r#"resources: {limits: {cpu: "2", nvidia.com/gpu: "1"}}"#,
            r#"resources: {limits: {cpu: "2", memory: 1Gi}, requests: {cpu: 500m}}"#,
        )
        .replace("maxTrialCount: 5", "maxTrialCount: 5\n  maxFailedTrialCount: 0");
    let (s, _) = clean(&text);
    assert_eq!(s.trial.retry.limit, 2);
    assert_eq!(s.trial.timeout, Some(std::time::Duration::from_secs(600)));
    // Requests, as Kubernetes schedules; limits where nothing is requested.
    assert_eq!(s.trial.resources.millicpu, 500);
    assert_eq!(s.trial.resources.memory, Some(1 << 30));
    // Katib fails at the first failed trial when maxFailedTrialCount is 0.
    assert_eq!(s.budget.max_failed_trials, Some(1));

    let mpi = errors(&edit("kind: Job", "kind: MPIJob"));
    assert!(
        mpi.contains("24:13: error: trialSpec kind 'MPIJob' cannot be run by sluice"),
        "{mpi}"
    );
    assert!(mpi.contains("kind: PyTorchJob) as a gang"), "{mpi}");
    let primary = errors(&edit(
        "primaryContainerName: main",
        "primaryContainerName: mian",
    ));
    assert!(primary.contains("did you mean 'main'?"), "{primary}");
    let workdir = errors(&edit(
        "image: example/train:1",
        "image: example/train:1\n                workingDir: /opt",
    ));
    assert!(
        workdir.contains("container field 'workingDir' cannot be honoured"),
        "{workdir}"
    );
    let early = errors(&edit(
        "algorithmName: medianstop",
        "algorithmName: hyperopt-stop",
    ));
    assert!(
        early.contains("early stopping 'hyperopt-stop' cannot be honoured"),
        "{early}"
    );
    let collector = errors(&edit(
        "  maxTrialCount: 5",
        "  maxTrialCount: 5\n  metricsCollectorSpec: {collector: {kind: TensorFlowEvent}}",
    ));
    assert!(
        collector.contains("metrics collector 'TensorFlowEvent' cannot be honoured"),
        "{collector}"
    );
    let strategy = errors(&edit(
        "objectiveMetricName: loss}",
        "objectiveMetricName: loss, metricStrategies: [{name: loss, value: best}, {name: acc, value: max}]}",
    ));
    assert!(
        strategy.contains("metricStrategies value 'best' is not min, max or latest"),
        "{strategy}"
    );
    assert!(
        strategy.contains(
            "metricStrategies names 'acc', which is neither the objective nor an additional metric"
        ),
        "{strategy}"
    );
}

#[test]
fn the_objective_s_strategy_defaults_by_its_type_as_katib_s() {
    // Minimize: the objective's smallest observation; an additional metric's last.
    let (s, _) = clean(&edit(
        "objectiveMetricName: loss}",
        "objectiveMetricName: loss, additionalMetricNames: [acc]}",
    ));
    assert_eq!(
        s.objective.strategies,
        BTreeMap::from([("loss".into(), Strategy::Min)])
    );
    // Written ones win; latest is the runtime's default, so it is not carried.
    let (s, _) = clean(&edit(
        "objectiveMetricName: loss}",
        "objectiveMetricName: loss, additionalMetricNames: [acc], metricStrategies: [{name: acc, value: max}, {name: loss, value: latest}]}",
    ));
    assert_eq!(
        s.objective.strategies,
        BTreeMap::from([("acc".into(), Strategy::Max)])
    );
}

/// The example with a File collector and the trial's args passing its path.
fn with_file_collector(source: &str) -> String {
    edit(
        "  maxTrialCount: 5",
        &format!(
            "  maxTrialCount: 5\n  metricsCollectorSpec:\n    collector: {{kind: File}}\n{source}"
        ),
    )
    .replacen(
        r#""--layers", "#,
        r#""--log-path=/katib/metrics.log", "--layers", "#,
        1,
    )
}

#[test]
fn the_file_collector_reads_the_file_the_trial_is_given() {
    let (s, _) = clean(&with_file_collector(
        "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: File}\n      filter: {metricsFormat: [\"{metricName: ([\\\\w|-]+), metricValue: ((-?\\\\d+)(\\\\.\\\\d+)?)}\"]}\n",
    ));
    let file = s.trial.collect.file.as_ref().expect("a metrics file");
    assert_eq!(file.path, "/katib/metrics.log");
    assert_eq!(file.format, FileFormat::Text);
    assert_eq!(s.trial.collect.filters.len(), 1);
    // Katib's sidecar reads the file alone.
    assert!(!s.trial.metrics_stdout);
    // JSON: read by the experiment's metric names.
    let (s, _) = clean(&with_file_collector(
        "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: File, format: JSON}\n",
    ));
    let file = s.trial.collect.file.as_ref().expect("a metrics file");
    assert_eq!(
        (file.format, file.names.clone()),
        (FileFormat::Json, vec!["loss".to_owned()])
    );
    // The StdOut collector with filters reads the output through them.
    let (s, _) = clean(&edit(
        "  maxTrialCount: 5",
        "  maxTrialCount: 5\n  metricsCollectorSpec:\n    source: {filter: {metricsFormat: [\"(\\\\w+) is (\\\\d+)\"]}}\n",
    ));
    assert!(s.trial.metrics_stdout && s.trial.collect.file.is_none());
    assert_eq!(s.trial.collect.filters, vec!["(\\w+) is (\\d+)".to_owned()]);
}

#[test]
fn a_file_system_path_with_the_stdout_collector_is_a_warning() {
    // Katib's StdOut collector reads the container's log whatever the path says.
    let (s, diags) = clean(&edit(
        "  maxTrialCount: 5",
        "  maxTrialCount: 5\n  metricsCollectorSpec:\n    source: {fileSystemPath: {path: /katib/x.log}}\n",
    ));
    assert!(
        diags.iter().any(|d| d.severity == Severity::Warning
            && d.message == "fileSystemPath has no effect with the StdOut collector"),
        "{diags:#?}"
    );
    assert!(s.trial.metrics_stdout && s.trial.collect.file.is_none());
}

#[test]
fn a_file_collector_sluice_cannot_honour_is_refused() {
    // Katib's default path, which the trial is never given.
    let e = errors(&edit(
        "  maxTrialCount: 5",
        "  maxTrialCount: 5\n  metricsCollectorSpec: {collector: {kind: File}}",
    ));
    assert!(
            e.contains("the File collector's path '/var/log/katib/metrics.log' is not in the trial container's command, args or env"),
            "{e}"
        );
    let e = errors(&with_file_collector(
        "    source:\n      fileSystemPath: {path: /katib/metrics.log, kind: Directory, format: JSON}\n      filter: {metricsFormat: [\"(\\\\w+)\"]}\n",
    ));
    assert!(
        e.contains("fileSystemPath kind 'Directory' is not File"),
        "{e}"
    );
    assert!(
        e.contains("metricsFormat '(\\w+)' cannot be read: it has 1 group(s)"),
        "{e}"
    );
    let e = errors(&with_file_collector(
        "    source:\n      fileSystemPath: {path: /katib/metrics.log, format: JSON}\n      filter: {metricsFormat: [\"(a)(b)\"]}\n",
    ));
    assert!(e.contains("source.filter is for TEXT metrics files"), "{e}");
    let e = errors(&with_file_collector(
        "    source:\n      fileSystemPath: {path: katib/metrics.log}\n",
    ));
    assert!(e.contains("is not an absolute path"), "{e}");
}

#[test]
fn unknown_fields_are_named_with_a_suggestion() {
    let e = errors(&edit(
        "  maxTrialCount: 5",
        "  maxTrialCount: 5\n  maxTrailCount: 5",
    ));
    assert!(e.contains("unknown field 'maxTrailCount' in spec"), "{e}");
    let top = errors(&format!("{EXPERIMENT}specs: {{}}\n"));
    assert!(top.contains("unknown field 'specs'"), "{top}");
    // `status`, as `kubectl get -o yaml` writes it, is not read.
    clean(&format!("{EXPERIMENT}status: {{trialsSucceeded: 3}}\n"));
}
