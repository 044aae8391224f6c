//! PyTorchJob trials read as gang steps: what maps, what is refused, and where it is said.

use super::tests::{clean, errors, words};

/// Katib's examples/v1beta1/kubeflow-training-operator/pytorchjob-mnist.yaml, with two Worker
/// replicas and the Master's resources.
const PYTORCHJOB: &str = r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata:
  namespace: kubeflow
  name: pytorchjob-mnist
spec:
  parallelTrialCount: 3
  maxTrialCount: 12
  maxFailedTrialCount: 3
  objective:
    type: minimize
    goal: 0.001
    objectiveMetricName: loss
  algorithm:
    algorithmName: random
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace:
        min: "0.01"
        max: "0.05"
    - name: momentum
      parameterType: double
      feasibleSpace:
        min: "0.5"
        max: "0.9"
  trialTemplate:
    primaryContainerName: pytorch
    trialParameters:
      - name: learningRate
        description: Learning rate for the training model
        reference: lr
      - name: momentum
        description: Momentum for the training model
        reference: momentum
    trialSpec:
      apiVersion: kubeflow.org/v1
      kind: PyTorchJob
      spec:
        pytorchReplicaSpecs:
          Master:
            replicas: 1
            restartPolicy: OnFailure
            template:
              spec:
                containers:
                  - name: pytorch
                    image: docker.io/kubeflowkatib/pytorch-mnist-cpu:latest
                    command:
                      - "python3"
                      - "/opt/pytorch-mnist/mnist.py"
                      - "--epochs=1"
                      - "--batch-size=16"
                      - "--lr=${trialParameters.learningRate}"
                      - "--momentum=${trialParameters.momentum}"
                    resources:
                      limits:
                        cpu: "1"
          Worker:
            replicas: 2
            restartPolicy: OnFailure
            template:
              spec:
                containers:
                  - name: pytorch
                    image: docker.io/kubeflowkatib/pytorch-mnist-cpu:latest
                    command:
                      - "python3"
                      - "/opt/pytorch-mnist/mnist.py"
                      - "--epochs=1"
                      - "--batch-size=16"
                      - "--lr=${trialParameters.learningRate}"
                      - "--momentum=${trialParameters.momentum}"
                    resources:
                      limits:
                        cpu: "1"
"#;

/// The example with `old` replaced by `new` (which must be found), `n` times at most.
fn edit(old: &str, new: &str, n: usize) -> String {
    assert!(PYTORCHJOB.contains(old), "{old}");
    PYTORCHJOB.replacen(old, new, n)
}

/// The line (1-based) of the `n`th (0-based) line of the example containing `needle`.
fn line_of(needle: &str, n: usize) -> usize {
    PYTORCHJOB
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .nth(n)
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("no {needle}"))
}

#[test]
fn katib_s_pytorchjob_example_is_a_gang_of_its_master_and_workers() {
    let (s, _) = clean(PYTORCHJOB);
    assert_eq!(s.trial.resources.workers, 3);
    assert_eq!(s.trial.resources.millicpu, 1000);
    assert_eq!(
        words(&s),
        [
            "python3",
            "/opt/pytorch-mnist/mnist.py",
            "--epochs=1",
            "--batch-size=16",
            "--lr=<params.lr>",
            "--momentum=<params.momentum>",
        ]
    );
    assert_eq!(
        s.trial.image.as_deref(),
        Some("docker.io/kubeflowkatib/pytorch-mnist-cpu:latest")
    );
    assert_eq!(s.budget.parallelism, 3);
    // No runPolicy: no retries, no timeout (restartPolicy is ignored).
    assert_eq!(s.trial.retry.limit, 0);
    assert_eq!(s.trial.timeout, None);

    // Without a Worker, the Master alone; a Worker without replicas is one, as the operator
    // defaults it.
    let worker_at = PYTORCHJOB.find("          Worker:").expect("Worker");
    let (alone, _) = clean(&PYTORCHJOB[..worker_at]);
    assert_eq!(alone.trial.resources.workers, 1);
    let (one, _) = clean(&edit("            replicas: 2\n", "", 1));
    assert_eq!(one.trial.resources.workers, 2);
}

#[test]
fn run_policy_gives_the_retries_and_the_deadline() {
    let text = edit(
        "        pytorchReplicaSpecs:",
        "        runPolicy:\n          backoffLimit: 3\n          activeDeadlineSeconds: 900\n          cleanPodPolicy: None\n        pytorchReplicaSpecs:",
        1,
    );
    let (s, _) = clean(&text);
    assert_eq!(s.trial.retry.limit, 3);
    assert_eq!(s.trial.timeout, Some(std::time::Duration::from_secs(900)));
    let suspend = errors(&edit(
        "        pytorchReplicaSpecs:",
        "        runPolicy:\n          suspend: true\n        pytorchReplicaSpecs:",
        1,
    ));
    assert!(
        suspend.contains("trialSpec.spec.runPolicy.suspend cannot be honoured by sluice"),
        "{suspend}"
    );
    let bad = errors(&edit(
        "        pytorchReplicaSpecs:",
        "        runPolicy:\n          backoffLimit: -1\n        pytorchReplicaSpecs:",
        1,
    ));
    assert!(
        bad.contains("trialSpec.spec.runPolicy.backoffLimit"),
        "{bad}"
    );
}

#[test]
fn a_master_has_one_replica() {
    let e = errors(&edit(
        "            replicas: 1",
        "            replicas: 2",
        1,
    ));
    let line = line_of("replicas: 1", 0);
    assert!(
        e.contains(&format!(
            "{line}:23: error: pytorchReplicaSpecs.Master.replicas: 2 Masters cannot be run by sluice"
        )),
        "{e}"
    );
    assert!(e.contains("count the others as Worker replicas"), "{e}");
}

/// The example with its `n`th (0-based) line containing `needle` replaced by `new`.
fn edit_line(needle: &str, n: usize, new: &str) -> String {
    let at = line_of(needle, n);
    let mut lines: Vec<&str> = PYTORCHJOB.lines().collect();
    lines[at - 1] = new;
    lines.join("\n")
}

#[test]
fn master_and_worker_run_the_same_container() {
    let at = line_of("- name: pytorch", 1);
    let e = errors(&edit_line(
        "\"--epochs=1\"",
        1,
        "                      - \"--epochs=2\"",
    ));
    assert!(
        e.contains(&format!(
            "{at}:21: error: sluice runs one command for every worker of a gang; Master and Worker must run the same container"
        )),
        "{e}"
    );
    assert!(e.contains("the Worker's command differs"), "{e}");
    let image = errors(&edit_line(
        "image:",
        1,
        "                    image: docker.io/kubeflowkatib/pytorch-mnist-gpu:latest",
    ));
    assert!(image.contains("the Worker's image differs"), "{image}");
    // Written differently, the same: flow style, plain or quoted.
    let flow = edit_line("cpu: \"1\"", 1, "                        cpu: 1");
    clean(&flow);
}

#[test]
fn what_a_gang_cannot_honour_is_refused_with_help() {
    let elastic = errors(&edit(
        "        pytorchReplicaSpecs:",
        "        elasticPolicy: {minReplicas: 1, maxReplicas: 4}\n        nprocPerNode: \"2\"\n        pytorchReplicaSpecs:",
        1,
    ));
    assert!(
        elastic.contains("trialSpec.spec.elasticPolicy cannot be honoured by sluice"),
        "{elastic}"
    );
    assert!(
        elastic.contains("a sluice gang has a fixed size"),
        "{elastic}"
    );
    assert!(
        elastic.contains("trialSpec.spec.nprocPerNode cannot be honoured by sluice"),
        "{elastic}"
    );
    let unknown = errors(&edit(
        "          Worker:",
        "          Worker:\n            dnsPolicy: None",
        1,
    ));
    let at = line_of("Worker:", 0) + 1;
    assert!(
        unknown.contains(&format!(
            "{at}:13: error: pytorchReplicaSpecs.Worker.dnsPolicy cannot be honoured by sluice"
        )),
        "{unknown}"
    );
    assert!(
        unknown.contains("its restartPolicy is ignored"),
        "{unknown}"
    );
    let typo = errors(&edit(
        "            replicas: 2",
        "            replica: 2",
        1,
    ));
    assert!(typo.contains("did you mean 'replicas'?"), "{typo}");
    let launcher = errors(&edit("          Worker:", "          Launcher:", 1));
    assert!(
        launcher.contains("unknown field 'Launcher' in trialSpec.spec.pytorchReplicaSpecs"),
        "{launcher}"
    );
    // A Job's shape under kind: PyTorchJob says where a PyTorchJob's pods are, once.
    let job_shaped = errors(&edit(
        "        pytorchReplicaSpecs:",
        "        template: {}\n        pytorchReplicaSpecs:",
        1,
    ));
    assert!(
        job_shaped.contains("unknown field 'template' in a PyTorchJob's spec"),
        "{job_shaped}"
    );
    assert!(
        job_shaped.contains("spec.pytorchReplicaSpecs.Master.template"),
        "{job_shaped}"
    );
    assert_eq!(job_shaped.matches("error:").count(), 1, "{job_shaped}");
    // The Job's container rules hold for the Master's.
    let workdir = errors(&edit(
        "                    command:",
        "                    workingDir: /opt\n                    command:",
        1,
    ));
    assert!(
        workdir.contains("container field 'workingDir' cannot be honoured"),
        "{workdir}"
    );
    let primary = errors(&edit(
        "primaryContainerName: pytorch",
        "primaryContainerName: pytorh",
        1,
    ));
    assert!(primary.contains("did you mean 'pytorch'?"), "{primary}");
}
