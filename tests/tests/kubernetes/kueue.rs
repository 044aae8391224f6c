//! `admission: kueue` end to end: the real server with a Cluster saying `admission: kueue`,
//! on the fake cluster with its FAKE Kueue (a ClusterQueue of 4 GPUs): each attempt is one
//! suspended Indexed Job that Kueue admits, sluice neither admits nor places it.

use serde_json::Value;
use sluice_e2e::wait_for;

use super::setup::{Cluster, NAMESPACE, steps, wait_run, wait_state};

/// The Jobs' names of run `id` Kueue admitted, from the fake's ClusterQueue.
fn admitted(k: &Cluster) -> Vec<String> {
    k.kube.kueue()["admitted"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| j["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn job_of<'a>(jobs: &'a [Value], step: &str) -> Option<&'a Value> {
    jobs.iter()
        .find(|j| j["metadata"]["annotations"]["sluice.dev/step-name"] == step)
}

/// The diamond example runs unchanged, each step a Job queued for its team, and a gang of 2
/// workers (one Job of 2 indexes) gets its ranks and worker 0's address from the Job's index.
#[test]
fn the_diamond_example_and_a_gang_run_as_jobs_that_kueue_admits() {
    let k = Cluster::start_kueue("kueue-run", &["node-a", "node-b"], 4);
    let diamond =
        std::fs::read_to_string(sluice_e2e::root().join("examples/pipelines/diamond.yaml"))
            .expect("the example");
    let id = k.submit(&diamond, &[]);
    wait_state(&k, &id, "Succeeded");
    let logs = k.cli(&["logs", &id, "report"]);
    assert!(logs.stdout.contains("mean=50.5"), "{}", logs.stdout);

    let gang = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: gang}
spec:
  steps:
    - name: train
      resources: {workers: 2, gpu: 2, cpu: 1}
      run: echo "rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT node_rank=$PET_NODE_RANK"
"#;
    let id = k.submit(gang, &[]);
    let mut job = Value::Null;
    wait_run(&k, &id, "the gang's Job", || {
        job = job_of(&k.jobs(&id), "train")
            .cloned()
            .unwrap_or(Value::Null);
        !job.is_null()
    });
    assert_eq!(
        job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "vision"
    );
    assert_eq!(job["spec"]["parallelism"], 2);
    assert_eq!(job["spec"]["completionMode"], "Indexed");
    let template = &job["spec"]["template"]["spec"];
    assert!(
        template["nodeName"].is_null(),
        "sluice places nothing: {job}"
    );
    wait_state(&k, &id, "Succeeded");
    let logs = k.cli(&["logs", &id, "train"]);
    assert_eq!(logs.code, Some(0), "{}", logs.stderr);
    let base = job["metadata"]["name"].as_str().expect("the Job's name");
    for rank in 0..2 {
        let line = logs
            .stdout
            .lines()
            .find(|l| l.contains(&format!("rank={rank} ")))
            .unwrap_or_else(|| panic!("no line of rank {rank}: {}", logs.stdout));
        assert!(
            line.contains(&format!(
                "world=2 master={base}-0.{base}.{NAMESPACE}.svc:29500 node_rank={rank}"
            )),
            "{line}"
        );
    }
    // Each worker's record under its own key (`{index}` filled in by its runtime).
    for w in 0..2 {
        let keys =
            k.s3.keys(&format!("sluice/teams/vision/runs/{id}/train/1/pods/{w}/"));
        assert!(
            keys.iter().any(|key| key.ends_with("result.json")),
            "worker {w}: {keys:?}"
        );
    }
    wait_for("the Jobs deleted", || k.jobs(&id).is_empty());
    let calls = k.kube.calls();
    assert!(calls["by"]["create pods"].is_null(), "{calls}");
    assert_eq!(
        calls["by"]["create jobs"], 5,
        "one Job per attempt: {calls}"
    );
    k.assert_calls_within_the_role();
}

/// While Kueue's quota is full, the next step's Job waits suspended with no pods, the step
/// says why (past `podStartTimeout`, which does not run while Kueue holds the Job), and it
/// runs once the quota is free.
#[test]
fn while_the_quota_is_full_the_next_job_waits_suspended_and_says_why() {
    let k = Cluster::start_kueue("kueue-full", &["node-a", "node-b"], 4);
    let release = k.sb.path().join("release");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: full}
spec:
  params:
    release: {type: string}
  steps:
    - name: first
      resources: {gpu: 4}
      env: {RELEASE: "{{params.release}}"}
      run: while [ ! -e "$RELEASE" ]; do sleep 0.05; done
    - name: second
      resources: {gpu: 4}
      env: {RELEASE: "{{params.release}}"}
      run: while [ ! -e "$RELEASE" ]; do sleep 0.05; done
"#;
    let param = format!("release={}", release.display());
    let id = k.submit(source, &[&param]);
    let mut waiting = String::new();
    wait_run(&k, &id, "one Job admitted, one waiting", || {
        let jobs = k.jobs(&id);
        let names = admitted(&k);
        let held: Vec<&Value> = jobs
            .iter()
            .filter(|j| !names.iter().any(|n| j["metadata"]["name"] == n.as_str()))
            .collect();
        if jobs.len() == 2 && names.len() == 1 && held.len() == 1 {
            waiting = held[0]["metadata"]["annotations"]["sluice.dev/step-name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
        !waiting.is_empty()
    });
    let reason = "waiting: Kueue has not admitted the Job (queue vision)";
    wait_run(&k, &id, "the waiting step's reason", || {
        steps(&k.run(&id))[&waiting]["reason"] == reason
    });
    // Longer than podStartTimeout (5s): a Job Kueue holds is not a pod that failed to start.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let job = job_of(&k.jobs(&id), &waiting)
        .cloned()
        .expect("the held Job");
    assert_eq!(job["spec"]["suspend"], true, "{job}");
    let pods = k.live_pods(&id);
    assert!(
        pods.iter()
            .all(|p| p["metadata"]["annotations"]["sluice.dev/step-name"] != waiting.as_str()),
        "a held Job has no pods: {pods:?}"
    );
    let run = k.run(&id);
    let held = &steps(&run)[&waiting];
    assert_eq!(held["reason"], reason, "{run}");
    assert_eq!(held["attempts"].as_array().map(Vec::len), Some(1), "{run}");
    let status = k.cli(&["status", &id]);
    assert!(status.stdout.contains(reason), "{}", status.stdout);

    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    let run = k.run(&id);
    for step in ["first", "second"] {
        let s = &steps(&run)[step];
        assert_eq!(s["attempts"].as_array().map(Vec::len), Some(1), "{run}");
    }
    k.assert_calls_within_the_role();
}

/// Kueue evicting a checkpointing step's Job (suspended again, its pods deleted) makes the
/// attempt lost: the step resumes from its S3 checkpoint in a new Job, and the loss does not
/// count against its retries (it has none).
#[test]
fn an_evicted_step_resumes_from_its_checkpoint_in_a_new_job() {
    let k = Cluster::start_kueue("kueue-evict", &["node-a"], 4);
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: evict}
spec:
  steps:
    - name: train
      resources: {gpu: 2}
      checkpoint: {every: 200ms}
      command:
        - python3
        - -c
        - |
          import json, os, time
          ckpt = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "state.json")
          state = json.load(open(ckpt)) if os.path.exists(ckpt) else {"epoch": 0}
          print(f"attempt {os.environ['SLUICE_ATTEMPT']} starts at epoch {state['epoch']} resumed={os.environ['SLUICE_RESUMED']}", flush=True)
          while state["epoch"] < 40:
              state["epoch"] += 1
              with open(ckpt + ".tmp", "w") as f:
                  json.dump(state, f)
              os.replace(ckpt + ".tmp", ckpt)
              time.sleep(0.1)
"#;
    let id = k.submit(source, &[]);
    k.running_pod(&id, "train");
    // The running attempt's log, live from its Job's pod (whose name the Job controller made).
    wait_run(&k, &id, "the live log", || {
        k.cli(&["logs", &id, "train"])
            .stdout
            .contains("attempt 1 starts at epoch 0")
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let first = job_of(&k.jobs(&id), "train").cloned().expect("the Job");
    let first = first["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    k.kube.kueue_evict(NAMESPACE, &first);
    wait_state(&k, &id, "Succeeded");
    let run = k.run(&id);
    let train = steps(&run)["train"].clone();
    let attempts = train["attempts"].as_array().expect("attempts");
    let states: Vec<&str> = attempts
        .iter()
        .map(|a| a["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["Lost", "Succeeded"], "{run}");
    let lost = attempts[0]["reason"].as_str().unwrap_or_default();
    assert!(lost.starts_with("evicted by Kueue"), "{run}");
    let logs = k.cli(&["logs", &id, "train", "--attempt", "2"]);
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
    assert!(epoch >= 5 && line.contains("resumed=1"), "{line}");
    wait_for("the evicted Job deleted", || {
        k.jobs(&id)
            .iter()
            .all(|j| j["metadata"]["name"] != first.as_str())
    });
    k.assert_calls_within_the_role();
}

/// A server killed while one Job runs and another waits for Kueue adopts both: the running
/// one's pods and the suspended one (no pods to find, its Job read once), each Job created
/// once and each step run once.
#[test]
fn a_server_killed_mid_run_adopts_its_running_and_its_waiting_jobs() {
    let mut k = Cluster::start_kueue("kueue-kill", &["node-a", "node-b"], 4);
    let release = k.sb.path().join("release");
    let marks = k.sb.path().join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: adopt}
spec:
  params:
    release: {type: string}
    marks: {type: string}
  steps:
    - name: first
      resources: {gpu: 4}
      env: {RELEASE: "{{params.release}}", MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; while [ ! -e "$RELEASE" ]; do sleep 0.05; done
    - name: second
      resources: {gpu: 4}
      env: {RELEASE: "{{params.release}}", MARKS: "{{params.marks}}"}
      run: echo ran >> "$MARKS/$SLUICE_STEP"; while [ ! -e "$RELEASE" ]; do sleep 0.05; done
"#;
    let params = [
        format!("release={}", release.display()),
        format!("marks={}", marks.display()),
    ];
    let params: Vec<&str> = params.iter().map(String::as_str).collect();
    let id = k.submit(source, &params);
    wait_run(&k, &id, "one Job running, one held", || {
        k.jobs(&id).len() == 2 && admitted(&k).len() == 1 && k.live_pods(&id).len() == 1
    });
    k.restart_server();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let run = k.run(&id);
    for (name, step) in steps(&run) {
        assert_eq!(step["state"], "Running", "{name}: {run}");
        assert_eq!(step["attempts"].as_array().map(Vec::len), Some(1), "{run}");
    }
    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    let run = k.run(&id);
    for (name, step) in steps(&run) {
        assert_eq!(step["attempts"].as_array().map(Vec::len), Some(1), "{run}");
        let ran = std::fs::read_to_string(marks.join(&name)).unwrap_or_default();
        assert_eq!(ran.lines().count(), 1, "step {name} ran more than once");
    }
    let calls = k.kube.calls();
    assert_eq!(calls["by"]["create jobs"], 2, "{calls}");
    k.assert_calls_within_the_role();
}

/// Cancelling a run while Kueue holds its Job (the quota taken by another tenant's Job)
/// ends it: the held Job, which will never get pods, is deleted and the run is `Cancelled`.
#[test]
fn a_run_cancelled_while_kueue_holds_its_job_ends_and_leaves_no_job() {
    let k = Cluster::start_kueue("kueue-cancel", &["node-a"], 4);
    let other = serde_json::json!({"metadata": {"name": "other-tenant",
            "labels": {"kueue.x-k8s.io/queue-name": "nlp"}},
        "spec": {"suspend": true, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"],
                "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}});
    let made = k.kube.call(
        "POST",
        &format!("/apis/batch/v1/namespaces/{NAMESPACE}/jobs"),
        Some(&other),
    );
    assert_eq!(made.status, 201, "{}", made.text());
    wait_for("the other tenant's Job admitted", || {
        admitted(&k) == ["other-tenant"]
    });
    let source = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: cancel}
spec:
  steps:
    - name: held
      resources: {gpu: 4}
      run: sleep 60
"#;
    let id = k.submit(source, &[]);
    wait_run(&k, &id, "the step's Job held", || {
        steps(&k.run(&id))["held"]["reason"]
            == "waiting: Kueue has not admitted the Job (queue vision)"
    });
    let cancel = k.cli(&["cancel", &id]);
    assert_eq!(cancel.code, Some(0), "{}", cancel.stderr);
    wait_state(&k, &id, "Cancelled");
    wait_for("the held Job deleted", || k.jobs(&id).is_empty());
    assert_eq!(admitted(&k), ["other-tenant"]);
    k.assert_calls_within_the_role();
}
