//! The Kubernetes executor end to end: the real `sluice server` with a Cluster saying
//! `executor: kubernetes`, driving pods on the FAKE cluster of `fake-kube` (an HTTP server
//! speaking the Kubernetes JSON protocol, and a kubelet that runs each pod's command as a
//! process of this machine), the real `sluice-runtime` copied into each pod by its init
//! container, and objects in a real S3-compatible server (moto) on loopback.

mod kubernetes {
    mod extended;
    mod host_paths;
    mod kueue;
    pub mod setup;
}

use kubernetes::setup::{Cluster, NAMESPACE, steps, wait_run, wait_state};
use serde_json::Value;
use sluice_e2e::wait_for;

/// The examples run unchanged: artifacts pass between steps through S3, each pod is created
/// once, pinned to a node of the pool, and a finished step's log is read from the object store
/// after its pod was deleted.
#[test]
fn the_diamond_and_fan_out_examples_run_unchanged_on_kubernetes() {
    let k = Cluster::start("k8s-examples", &["node-a", "node-b"], "");
    for example in ["diamond", "fan-out"] {
        let source = std::fs::read_to_string(
            sluice_e2e::root().join(format!("examples/pipelines/{example}.yaml")),
        )
        .expect("the example");
        let id = k.submit(&source, &[]);
        wait_state(&k, &id, "Succeeded");
        let run = k.run(&id);
        for step in run["steps"].as_array().expect("steps") {
            assert_eq!(step["state"], "Succeeded", "{run}");
        }
    }
    let pods = k.kube.pods();
    let pods = pods.as_array().expect("pods");
    assert!(pods.len() >= 4, "{pods:?}");
    for p in pods {
        assert_eq!(p["created"], 1, "a pod created twice: {p}");
        assert!(
            ["node-a", "node-b"].contains(&p["node"].as_str().unwrap_or("")),
            "a pod not pinned to a node of the pool: {p}"
        );
        // Finished pods are deleted; what outlives them is in the object store.
        wait_for(&format!("pod {} to be deleted", p["name"]), || {
            k.kube
                .pods()
                .as_array()
                .and_then(|all| all.iter().find(|q| q["name"] == p["name"]).cloned())
                .is_some_and(|q| q["deleted"] == true)
        });
    }
    let runs = k.runs();
    let diamond = runs
        .iter()
        .find(|r| r["name"] == "diamond")
        .and_then(|r| r["id"].as_str())
        .expect("the diamond run")
        .to_owned();
    let logs = k.cli(&["logs", &diamond, "report"]);
    assert_eq!(logs.code, Some(0), "{}", logs.stderr);
    assert!(logs.stdout.contains("mean=50.5"), "{}", logs.stdout);
    // API calls per step are bounded: a create and a delete per pod, everything else from
    // the watches (no per-pod GET); and the server reports its own count.
    let calls = k.kube.calls();
    let created = calls["by"]["create pods"].as_u64().unwrap_or(0);
    assert_eq!(created, pods.len() as u64, "{calls}");
    assert_eq!(calls["by"]["delete pods"], created, "{calls}");
    assert!(
        calls["by"]["get pods"].is_null(),
        "a pod was polled: {calls}"
    );
    assert!(
        calls["by"]["watch pods"].as_u64().unwrap_or(0) <= 2,
        "one watch of pods: {calls}"
    );
    let metrics = k.server.call("GET", "/metrics", None, None).text();
    assert!(
        metrics.lines().any(|l| l
            .starts_with("sluice_kubernetes_api_calls{verb=\"create\",resource=\"pods\"}")
            && l.ends_with(&format!(" {created}"))),
        "{metrics}"
    );
    k.assert_calls_within_the_role();
}

/// A running step's log is read live through the pod log API, and once the step ended (and
/// its pod was deleted) from the object store.
#[test]
fn logs_are_live_from_the_pod_then_kept_in_the_object_store() {
    let k = Cluster::start("k8s-logs", &["node-a", "node-b"], "");
    let release = k.sb.path().join("release");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: talk}
spec:
  params:
    release: {type: string}
  steps:
    - name: talk
      env: {RELEASE: "{{params.release}}"}
      run: |
        echo "hello from the pod"
        while [ ! -e "$RELEASE" ]; do sleep 0.05; done
        echo "goodbye"
"#;
    let param = format!("release={}", release.display());
    let id = k.submit(source, &[&param]);
    k.running_pod(&id, "talk");
    wait_run(&k, &id, "the live log", || {
        k.cli(&["logs", &id, "talk"])
            .stdout
            .contains("hello from the pod")
    });
    assert!(k.kube.calls()["by"]["get pods/log"].as_u64().unwrap_or(0) > 0);
    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    wait_for("the pod to be deleted", || k.live_pods(&id).is_empty());
    let logs = k.cli(&["logs", &id, "talk"]);
    assert!(
        logs.stdout.contains("hello from the pod") && logs.stdout.contains("goodbye"),
        "{}",
        logs.stdout
    );
    k.assert_calls_within_the_role();
}

/// Two gangs of 2 workers x 4 GPUs on two 4-GPU nodes: the second has no pod at all while the
/// first holds the nodes; each worker's pod is pinned to its own node, with the PyTorch
/// launcher's variables and worker 0's stable name behind the gang's headless Service.
#[test]
fn a_gang_is_created_whole_pinned_to_its_nodes_only_once_admitted() {
    let k = Cluster::start("k8s-gang", &["node-a", "node-b"], "");
    let release = k.sb.path().join("release");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: gangs}
spec:
  params:
    release: {type: string}
  steps:
    - name: first
      resources: {workers: 2, gpu: 4, cpu: 1}
      env: {RELEASE: "{{params.release}}"}
      run: |
        echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT nnodes=$PET_NNODES"
        while [ ! -e "$RELEASE" ]; do sleep 0.05; done
    - name: second
      resources: {workers: 2, gpu: 4, cpu: 1}
      run: echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR"
"#;
    let param = format!("release={}", release.display());
    let id = k.submit(source, &[&param]);
    wait_run(&k, &id, "the first gang to run on both nodes", || {
        let pods = k.live_pods(&id);
        pods.iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == 2
    });
    let pods = k.live_pods(&id);
    let mut nodes: Vec<&str> = pods
        .iter()
        .map(|p| p["spec"]["nodeName"].as_str().unwrap_or(""))
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["node-a", "node-b"], "one worker per node: {pods:?}");
    for p in &pods {
        assert_eq!(
            p["metadata"]["annotations"]["sluice.dev/step-name"], "first",
            "nothing of the second gang before it is admitted: {p}"
        );
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"], "4",
            "{p}"
        );
        // The pool's taints, tolerated (a NoExecute one would evict a pinned pod).
        assert_eq!(
            p["spec"]["tolerations"],
            serde_json::json!([
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}
            ]),
            "{p}"
        );
    }
    let run = k.run(&id);
    let second = steps(&run)["second"].clone();
    assert_eq!(second["state"], "Queued", "{run}");
    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    let services = k.kube.calls();
    assert_eq!(services["by"]["create services"], 2, "{services}");
    for step in ["first", "second"] {
        let logs = k.cli(&["logs", &id, step]);
        assert_eq!(logs.code, Some(0), "{}", logs.stderr);
        let master = |rank: u32| -> String {
            let line = logs
                .stdout
                .lines()
                .find(|l| l.contains(&format!("rank={rank} ")))
                .unwrap_or_else(|| panic!("no line of rank {rank}: {}", logs.stdout));
            assert!(line.contains("world=2"), "{line}");
            let addr = line.split("master=").nth(1).unwrap_or("");
            addr.split([' ', ':']).next().unwrap_or("").to_owned()
        };
        // Worker 0's pod under the gang's Service: POD.SERVICE.NAMESPACE.svc, POD = SERVICE-0.
        let m = master(0);
        let service = m.split('.').nth(1).unwrap_or("");
        assert!(service.contains(&id), "{m}");
        assert_eq!(m, format!("{service}-0.{service}.default.svc"));
        assert_eq!(master(1), m, "every worker meets at worker 0");
    }
    let first = k.cli(&["logs", &id, "first"]);
    assert!(first.stdout.contains(":29500 nnodes=2"), "{}", first.stdout);
}

/// A checkpointing step whose pod is evicted, then deleted, then whose node is lost, resumes
/// from its S3 checkpoint each time; the losses do not count against its retries (it has
/// none).
#[test]
fn a_step_resumes_from_its_checkpoint_after_eviction_deletion_and_node_loss() {
    let k = Cluster::start_with("k8s-resume", &["node-a", "node-b", "node-c"], 1, "");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: resume}
spec:
  steps:
    - name: train
      checkpoint: {every: 200ms}
      command:
        - python3
        - -c
        - |
          import json, os, time
          ckpt = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "state.json")
          state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"epoch": 0}
          print(f"attempt {os.environ['SLUICE_ATTEMPT']} starts at epoch {state['epoch']} resumed={os.environ['SLUICE_RESUMED']}", flush=True)
          while state["epoch"] < 60:
              state["epoch"] += 1
              with open(ckpt + ".tmp", "w") as f:
                  json.dump(state, f)
              os.replace(ckpt + ".tmp", ckpt)
              time.sleep(0.1)
"#;
    let id = k.submit(source, &[]);
    // Each interruption comes once the attempt has run for a while (and synced).
    let pod = k.running_pod(&id, "train");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    k.kube.evict(NAMESPACE, &pod);
    let pod = wait_new_pod(&k, &id, &pod);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    k.kube.delete_pod(NAMESPACE, &pod, None);
    let pod = wait_new_pod(&k, &id, &pod);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let node = k
        .live_pods(&id)
        .iter()
        .find(|p| p["metadata"]["name"] == pod.as_str())
        .expect("the pod")["spec"]["nodeName"]
        .as_str()
        .expect("a node")
        .to_owned();
    k.kube.lose_node(&node, false);
    wait_state(&k, &id, "Succeeded");
    let run = k.run(&id);
    let train = steps(&run)["train"].clone();
    let states: Vec<&str> = train["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["Lost", "Lost", "Lost", "Succeeded"], "{run}");
    let logs = k.cli(&["logs", &id, "train", "--attempt", "4"]);
    let line = logs
        .stdout
        .lines()
        .find(|l| l.contains("starts at epoch"))
        .unwrap_or_else(|| panic!("{}", logs.stdout));
    let epoch: u32 = line
        .split("epoch ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(epoch >= 20 && line.contains("resumed=1"), "{line}");
    let kept =
        k.s3.keys(&format!("sluice/teams/vision/checkpoints/{id}/train/"));
    assert!(!kept.is_empty(), "the checkpoints are in S3");
    k.assert_calls_within_the_role();
}

/// Waits for a running pod of `train` other than `old`.
fn wait_new_pod(k: &Cluster, id: &str, old: &str) -> String {
    let mut name = String::new();
    wait_for("the next attempt's pod to run", || {
        name = k.running_pod(id, "train");
        name != old
    });
    name
}

/// What Kubernetes says becomes the step's reason: an OOM kill and an image that cannot be
/// pulled fail the step with it; a pod that cannot be scheduled says so while it waits, and
/// is placed again once its start times out.
#[test]
fn kubernetes_reasons_become_the_steps_reasons() {
    let k = Cluster::start_with("k8s-reasons", &["node-a", "node-b"], 1, "");
    k.kube.bad_image("registry.invalid/nope:1");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: reasons}
spec:
  failFast: false
  steps:
    - name: hungry
      run: sleep 30
    - name: pull
      image: registry.invalid/nope:1
      run: "true"
"#;
    let id = k.submit(source, &[]);
    let pod = k.running_pod(&id, "hungry");
    k.kube.oom(NAMESPACE, &pod);
    wait_state(&k, &id, "Failed");
    let run = k.run(&id);
    let s = steps(&run);
    assert_eq!(s["hungry"]["state"], "Failed", "{run}");
    assert_eq!(s["hungry"]["reason"], "OOMKilled (exit code 137)", "{run}");
    assert_eq!(s["pull"]["state"], "Failed", "{run}");
    let why = s["pull"]["reason"].as_str().unwrap_or("");
    assert!(
        why.starts_with("ImagePullBackOff: ") && why.contains("registry.invalid/nope:1"),
        "{run}"
    );
    let out = k.cli(&["status", &id]);
    assert!(
        out.stdout.contains("OOMKilled (exit code 137)"),
        "{}",
        out.stdout
    );

    // node-a stops answering: for the heartbeat timeout it is still the pool's node, and a pod
    // pinned there cannot be scheduled (the fake says so, as Kubernetes would for a node it
    // cannot use); the step shows it, and its next attempt goes to node-b.
    k.kube.lose_node("node-a", false);
    let id = k.submit(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: later}\nspec:\n  steps:\n    - name: work\n      run: \"true\"\n",
        &[],
    );
    wait_for("the step to say it cannot be scheduled", || {
        steps(&k.run(&id))["work"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("Unschedulable: "))
    });
    wait_state(&k, &id, "Succeeded");
    k.assert_calls_within_the_role();
}

/// The server is killed (SIGKILL) while steps run, three times, and started again: it adopts
/// the pods it made; none is created twice and every step's program ran exactly once (an
/// attempt whose pod the dying server never created is lost, and the next one is its only
/// run).
#[test]
fn a_server_killed_mid_run_adopts_its_pods_and_creates_none_twice() {
    let mut k = Cluster::start("k8s-kill", &["node-a", "node-b"], "");
    let marks = k.sb.path().join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: steady}
spec:
  params:
    marks: {type: string}
  steps:
    - name: a
      env: {MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; sleep 1.5
    - name: b
      needs: [a]
      env: {MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; sleep 1
    - name: c
      needs: [a]
      env: {MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; sleep 1
    - name: d
      needs: [b, c]
      env: {MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; sleep 1
"#;
    let param = format!("marks={}", marks.display());
    let id = k.submit(source, &[&param]);
    // Killed once a starts, once b and c start, once d starts: each time with pods in flight
    // (or just made, or about to be).
    for step in ["a", "b", "d"] {
        wait_for(&format!("step {step} to start"), || {
            let state = &steps(&k.run(&id))[step]["state"];
            state != "Pending" && state != "Queued"
        });
        k.restart_server();
    }
    wait_state(&k, &id, "Succeeded");
    let run = k.run(&id);
    for (name, step) in steps(&run) {
        assert_eq!(step["state"], "Succeeded", "{run}");
        let ran = std::fs::read_to_string(marks.join(&name)).unwrap_or_default();
        assert_eq!(
            ran.lines().count(),
            1,
            "step {name} ran {} times: {run}",
            ran.lines().count()
        );
        for a in step["attempts"].as_array().expect("attempts") {
            assert!(
                a["state"] == "Succeeded"
                    || a["reason"]
                        .as_str()
                        .is_some_and(|r| r.contains("never created")),
                "{run}"
            );
        }
    }
    let pods = k.kube.pods();
    for p in pods.as_array().expect("pods") {
        assert_eq!(p["created"], 1, "a pod created twice: {p}");
    }
    k.assert_calls_within_the_role();
}

/// `sluice preempt` deletes the step's pod with the grace period: its runtime syncs the last
/// checkpoint and the step resumes from it; `sluice cancel` ends the run with its pod gone.
#[test]
fn preempt_and_cancel_delete_the_pod_gracefully() {
    let k = Cluster::start("k8s-preempt", &["node-a", "node-b"], "");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: long}
spec:
  steps:
    - name: train
      checkpoint: {every: 10s}
      command:
        - python3
        - -c
        - |
          import json, os, signal, sys, time
          ckpt = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "state.json")
          state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"epoch": 0}
          print(f"starts at epoch {state['epoch']}", flush=True)
          def save(*_):
              with open(ckpt + ".tmp", "w") as f:
                  json.dump(state, f)
              os.replace(ckpt + ".tmp", ckpt)
              sys.exit(143)
          signal.signal(signal.SIGTERM, save)
          while True:
              state["epoch"] += 1
              time.sleep(0.05)
"#;
    let id = k.submit(source, &[]);
    let first = k.running_pod(&id, "train");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let out = k.cli(&["preempt", &id, "train"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let second = k.running_pod(&id, "train");
    assert_ne!(first, second);
    // Saved only on SIGTERM (the periodic sync is every 10 s): resuming past epoch 0 proves
    // the grace period was given and the final sync ran.
    wait_run(&k, &id, "the second attempt's first line", || {
        k.cli(&["logs", &id, "train"])
            .stdout
            .lines()
            .any(|l| l.contains("starts at epoch") && !l.contains("epoch 0"))
    });
    let out = k.cli(&["cancel", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    wait_state(&k, &id, "Cancelled");
    wait_for("its pod to be gone", || k.live_pods(&id).is_empty());
    let run = k.run(&id);
    let train = steps(&run)["train"].clone();
    let states: Vec<&str> = train["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["Preempted", "Cancelled"], "{run}");
    k.assert_calls_within_the_role();
}

/// A Katib Experiment whose trials are PyTorchJobs: each trial is a gang of the Master and its
/// Workers, three pods pinned to the pool's nodes, with the training operator's variables.
#[test]
fn katib_pytorchjob_trials_run_as_gangs_of_pods() {
    let k = Cluster::start("k8s-katib", &["node-a", "node-b"], "");
    let source = r#"apiVersion: kubeflow.org/v1beta1
kind: Experiment
metadata: {name: pytorchjob-mnist, namespace: kubeflow}
spec:
  parallelTrialCount: 2
  maxTrialCount: 3
  objective: {type: minimize, objectiveMetricName: loss}
  algorithm: {algorithmName: random}
  parameters:
    - name: lr
      parameterType: double
      feasibleSpace: {min: "0.01", max: "0.05"}
  trialTemplate:
    primaryContainerName: pytorch
    trialParameters:
      - {name: learningRate, reference: lr}
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
                    command: [sh, -c, 'echo "rank $RANK of $WORLD_SIZE at $MASTER_ADDR"; [ "$RANK" = 0 ] && echo "loss=${trialParameters.learningRate}"; true']
                    resources: {limits: {cpu: 100m}}
          Worker:
            replicas: 2
            restartPolicy: OnFailure
            template:
              spec:
                containers:
                  - name: pytorch
                    image: docker.io/kubeflowkatib/pytorch-mnist-cpu:latest
                    command: [sh, -c, 'echo "rank $RANK of $WORLD_SIZE at $MASTER_ADDR"; [ "$RANK" = 0 ] && echo "loss=${trialParameters.learningRate}"; true']
                    resources: {limits: {cpu: 100m}}
"#;
    let id = k.submit(source, &[]);
    wait_state(&k, &id, "Succeeded");
    let pods = k.kube.pods();
    let pods = pods.as_array().expect("pods");
    assert_eq!(pods.len(), 9, "3 trials of 3 pods: {pods:?}");
    for p in pods {
        assert_eq!(p["created"], 1, "{p}");
        let name = p["name"].as_str().unwrap_or("");
        assert!(
            ["-0", "-1", "-2"].iter().any(|w| name.ends_with(w)),
            "{name}"
        );
    }
    let logs = k.cli(&["logs", &id]);
    assert_eq!(logs.code, Some(0), "{}", logs.stderr);
    for rank in 0..3 {
        let n = logs
            .stdout
            .lines()
            .filter(|l| l.contains(&format!("rank {rank} of 3 at ")) && l.contains(".svc"))
            .count();
        assert_eq!(n, 3, "rank {rank} in each of 3 trials: {}", logs.stdout);
    }
    let run = k.run(&id);
    assert!(!run["best"].is_null(), "a best trial: {run}");
    k.assert_calls_within_the_role();
}

/// A pool without `nodes` is the cluster's nodes carrying its labels, with their allocatable
/// GPUs, followed as they come and go: a 4-GPU step goes only to a labelled node with 4 GPUs
/// free, a node added is used at once, a cordoned one gets nothing new (what runs there stays),
/// and an attempt keeps the node's name.
#[test]
fn a_pool_without_nodes_follows_the_clusters_nodes() {
    let k = Cluster::start_nodes(
        "k8s-nodes",
        &[
            "big-a:gpu=4,cpu=16,memory=64Gi,label.pool=gpu",
            "small-b:gpu=2,cpu=16,memory=64Gi,label.pool=gpu",
            "other:gpu=8,cpu=16,memory=64Gi,label.pool=cpu",
        ],
        0,
        "",
    );
    let release = k.sb.path().join("release");
    let step = |name: &str, gpu: u32| {
        format!(
            "    - name: {name}\n      resources: {{gpu: {gpu}, cpu: 1}}\n      env: {{RELEASE: \"{{{{params.release}}}}\"}}\n      run: while [ ! -e \"$RELEASE\" ]; do sleep 0.05; done\n"
        )
    };
    let source = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: nodes}}\nspec:\n  params:\n    release: {{type: string}}\n  steps:\n{}{}{}{}",
        step("first", 4),
        step("second", 4),
        step("third", 4),
        step("small", 2)
    );
    let param = format!("release={}", release.display());
    let id = k.submit(&source, &[&param]);
    let running_on = |k: &Cluster| -> std::collections::BTreeMap<String, String> {
        k.live_pods(&id)
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .map(|p| {
                (
                    p["metadata"]["annotations"]["sluice.dev/step-name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    p["spec"]["nodeName"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    wait_run(&k, &id, "first on big-a and small on small-b", || {
        running_on(&k).len() == 2
    });
    let on = running_on(&k);
    assert_eq!(
        on.get("small").map(String::as_str),
        Some("small-b"),
        "{on:?}"
    );
    let big = on
        .iter()
        .find(|(s, _)| s.as_str() != "small")
        .map(|(s, n)| (s.clone(), n.clone()))
        .expect("one 4-GPU step runs");
    assert_eq!(big.1, "big-a", "{on:?}");
    // The other two wait: no labelled node has 4 GPUs free (`other` is not in the pool).
    std::thread::sleep(std::time::Duration::from_millis(500));
    let run = k.run(&id);
    let queued: Vec<(String, Value)> = steps(&run)
        .into_iter()
        .filter(|(_, s)| s["state"] == "Queued")
        .collect();
    assert_eq!(queued.len(), 2, "{run}");
    for (_, s) in &queued {
        let reason = s["reason"].as_str().unwrap_or("");
        assert!(reason.starts_with("waiting"), "{s}");
    }
    // A node joins the pool: one waiting step is placed on it at once.
    let added = k.kube.call(
        "POST",
        "/fake/nodes?spec=big-c:gpu%3D4,cpu%3D16,memory%3D64Gi,label.pool%3Dgpu",
        None,
    );
    assert_eq!(added.status, 201, "{}", added.text());
    wait_run(&k, &id, "a step on the node that joined", || {
        running_on(&k).values().any(|n| n == "big-c")
    });
    // big-a is cordoned: its step runs on, but nothing new goes there.
    let cordoned = k.kube.call("POST", "/fake/nodes/big-a/cordon", None);
    assert_eq!(cordoned.status, 200, "{}", cordoned.text());
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(
        running_on(&k).get(&big.0).map(String::as_str),
        Some("big-a")
    );
    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    let all = k.kube.pods();
    let mut by_node: std::collections::BTreeMap<String, usize> = Default::default();
    for p in all.as_array().expect("pods") {
        let name = p["name"].as_str().unwrap_or("");
        if name.contains(&id) {
            assert_eq!(p["created"], 1, "{p}");
            *by_node
                .entry(p["node"].as_str().unwrap_or("").to_owned())
                .or_default() += 1;
        }
    }
    // first on big-a, small on small-b, second and third one after the other on big-c.
    assert_eq!(
        by_node,
        [("big-a", 1), ("big-c", 2), ("small-b", 1)]
            .into_iter()
            .map(|(n, c)| (n.to_owned(), c))
            .collect(),
        "{all}"
    );
    // The attempts name their nodes (pool and node), not indices.
    let status = k.cli(&["status", &id, "--output", "json"]);
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    let v: Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let small = steps(&v)["small"].clone();
    assert_eq!(
        small["attempts"][0]["nodes"],
        serde_json::json!([{"pool": "gpu", "node": "small-b"}]),
        "{small}"
    );
    k.assert_calls_within_the_role();
}
