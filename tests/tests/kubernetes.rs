//! The Kubernetes executor end to end: the real `sluice server` with a Cluster saying
//! `executor: kubernetes`, driving pods on the FAKE cluster of `fake-kube` (an HTTP server
//! speaking the Kubernetes JSON protocol, and a kubelet that runs each pod's command as a
//! process of this machine), the real `sluice-runtime` copied into each pod by its init
//! container, and objects in a real S3-compatible server (moto) on loopback.

mod kubernetes {
    pub mod setup;
}

use kubernetes::setup::{Cluster, wait_state};
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
    k.assert_calls_within_the_role();
}
