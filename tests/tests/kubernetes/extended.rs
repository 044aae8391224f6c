//! Extended resources on Kubernetes: MIG slices a node's device plugin reports in its
//! allocatable are scheduled like GPUs on a pool read from the cluster, and asked for as the
//! pod's limits.

use serde_json::Value;

use super::setup::{Cluster, steps, wait_run, wait_state};

const MIG: &str = "nvidia.com/mig-1g.10gb";

#[test]
fn mig_slices_from_the_nodes_allocatable_are_placed_and_become_pod_limits() {
    // mig-a: an A100 cut into 7 slices; whole: 4 GPUs and no slices.
    let k = Cluster::start_nodes(
        "k8s-mig",
        &[
            "mig-a:gpu=0,cpu=16,memory=64Gi,nvidia.com/mig-1g.10gb=7,label.pool=gpu",
            "whole:gpu=4,cpu=16,memory=64Gi,label.pool=gpu",
        ],
        0,
        "",
    );
    let release = k.sb.path().join("release");
    let step = |name: &str, slices: u32| {
        format!(
            "    - name: {name}\n      resources: {{{MIG}: {slices}, cpu: 1}}\n      env: {{RELEASE: \"{{{{params.release}}}}\"}}\n      run: while [ ! -e \"$RELEASE\" ]; do sleep 0.05; done\n"
        )
    };
    let source = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: serve}}\nspec:\n  params:\n    release: {{type: string}}\n  steps:\n{}{}",
        step("first", 4),
        step("second", 4),
    );
    let id = k.submit(&source, &[&format!("release={}", release.display())]);
    let running = |k: &Cluster| -> Vec<Value> {
        k.live_pods(&id)
            .into_iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .collect()
    };
    wait_run(&k, &id, "one step on mig-a", || running(&k).len() == 1);
    // The other waits: 8 slices do not fit in 7, and the node of whole GPUs has none.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pods = running(&k);
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    assert_eq!(pod["spec"]["nodeName"], "mig-a", "{pod}");
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits[MIG], "4", "{pod}");
    assert!(limits["nvidia.com/gpu"].is_null(), "{pod}");
    let run = k.run(&id);
    let waiting: Vec<String> = steps(&run)
        .values()
        .filter(|s| s["state"] == "Queued")
        .filter_map(|s| s["reason"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(waiting.len(), 1, "{run}");
    assert!(waiting[0].contains(&format!("4 {MIG}")), "{waiting:?}");
    // Released, the first ends and the second takes its slices, on the same node.
    std::fs::write(&release, "").expect("release");
    wait_state(&k, &id, "Succeeded");
    let all = k.kube.pods();
    let nodes: Vec<&str> = all
        .as_array()
        .expect("pods")
        .iter()
        .filter(|p| p["name"].as_str().is_some_and(|n| n.contains(&id)))
        .filter_map(|p| p["node"].as_str())
        .collect();
    assert_eq!(nodes, ["mig-a", "mig-a"], "{all}");
}

#[test]
fn a_fifth_extended_resource_waits_saying_the_server_counts_four() {
    let k = Cluster::start_nodes(
        "k8s-ext5",
        &[
            "many:gpu=0,cpu=16,memory=64Gi,example.com/r1=1,example.com/r2=1,example.com/r3=1,example.com/r4=1,example.com/r5=1,label.pool=gpu",
        ],
        0,
        "",
    );
    let release = k.sb.path().join("release");
    let listed: String = (1..=5)
        .map(|i| {
            format!(
                "    - name: s{i}\n      resources: {{example.com/r{i}: 1, cpu: 1}}\n      env: {{RELEASE: \"{{{{params.release}}}}\"}}\n      run: while [ ! -e \"$RELEASE\" ]; do sleep 0.05; done\n"
            )
        })
        .collect();
    let source = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: many}}\nspec:\n  params:\n    release: {{type: string}}\n  steps:\n{listed}"
    );
    let id = k.submit(&source, &[&format!("release={}", release.display())]);
    let mut queued: Vec<(String, String)> = Vec::new();
    wait_run(
        &k,
        &id,
        "four steps running and one waiting for a slot",
        || {
            let run = k.run(&id);
            let all = steps(&run);
            queued = all
                .iter()
                .filter(|(_, s)| s["state"] == "Queued")
                .map(|(n, s)| (n.clone(), s["reason"].as_str().unwrap_or("").to_owned()))
                .collect();
            all.values().filter(|s| s["state"] == "Running").count() == 4
                && queued.len() == 1
                && queued[0].1.contains("the most it counts")
        },
    );
    assert!(queued[0].1.contains("4 extended resources"), "{queued:?}");
    std::fs::write(&release, "").expect("release");
}
