//! The fake's Job controller (suspension, Indexed Jobs, PATCH, status) and its fake Kueue
//! (admission in order within a GPU quota, all or nothing; eviction), checked with the real
//! `kube` client where the engine uses it.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice_e2e::TempDir;
use sluice_e2e::kube::FakeKube;

use super::client;

const NS: &str = "default";
const INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A Job of `pods` pods (Indexed), each with `gpu` GPUs, running `sh -c SCRIPT`.
fn job(name: &str, pods: u32, gpu: u32, script: &str, queue: Option<&str>) -> Job {
    let mut labels = json!({"app": "fake-test"});
    if let Some(q) = queue {
        labels["kueue.x-k8s.io/queue-name"] = json!(q);
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "suspend": true, "parallelism": pods, "completions": pods,
            "completionMode": "Indexed", "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "fake-test", "job": name}},
                "spec": {
                    "restartPolicy": "Never", "subdomain": name,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "busybox",
                        "command": ["sh", "-c", script],
                        "resources": {"limits": {"nvidia.com/gpu": gpu.to_string()}}}],
                },
            },
        },
    }))
    .expect("a Job")
}

/// The pods of Job `name` as the API lists them (by its `job-name` label).
fn pods_of(fk: &FakeKube, name: &str) -> Vec<Value> {
    let q = format!("/api/v1/namespaces/{NS}/pods?labelSelector=job-name%3D{name}");
    fk.call("GET", &q, None).json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn get_job(fk: &FakeKube, name: &str) -> Value {
    fk.call(
        "GET",
        &format!("/apis/batch/v1/namespaces/{NS}/jobs/{name}"),
        None,
    )
    .json()
}

fn condition(job: &Value, kind: &str) -> String {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind)
        .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

fn live(pods: &[Value]) -> usize {
    pods.iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_indexed_job_gets_its_pods_when_patched_and_loses_them_when_suspended() {
    let dir = TempDir::new("fk-indexed");
    let fk = FakeKube::start(dir.path(), &["n1:gpu=8"], &[]);
    let jobs: Api<Job> = Api::default_namespaced(client(&fk));
    let script = "echo $JOB_COMPLETION_INDEX > $HOME/index; sleep 30";
    jobs.create(&PostParams::default(), &job("g", 2, 1, script, None))
        .await
        .expect("create the Job");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(pods_of(&fk, "g").is_empty(), "a suspended Job has no pods");
    assert_eq!(condition(&get_job(&fk, "g"), "Suspended"), "True");

    let resume = json!({"spec": {"suspend": false}, "metadata": {"labels": {"seen": "yes"}}});
    jobs.patch("g", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("a merge patch");
    sluice_e2e::wait_for("the Job's two pods", || live(&pods_of(&fk, "g")) == 2);
    let mut pods = pods_of(&fk, "g");
    pods.sort_by_key(|p| p["metadata"]["annotations"][INDEX].to_string());
    for (i, p) in pods.iter().enumerate() {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        assert!(name.starts_with(&format!("g-{i}-")), "{name}");
        assert_eq!(name.len(), "g-0-".len() + 5, "{name}");
        assert_eq!(p["metadata"]["annotations"][INDEX], i.to_string());
        assert_eq!(p["metadata"]["labels"][INDEX], i.to_string());
        assert_eq!(p["metadata"]["labels"]["job"], "g", "the template's labels");
        assert_eq!(p["spec"]["hostname"], format!("g-{i}"));
        assert_eq!(p["spec"]["subdomain"], "g");
        assert_eq!(p["spec"]["nodeName"], "n1", "bound by the fake");
        let env = &p["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .is_some_and(|e| e.iter().any(|v| v["name"] == "JOB_COMPLETION_INDEX")),
            "{env}"
        );
        let file = fk.work.join(NS).join(name).join("index");
        sluice_e2e::wait_for("the index written", || file.exists());
        let written = std::fs::read_to_string(&file).unwrap_or_default();
        assert_eq!(written.trim(), i.to_string());
    }
    let g = get_job(&fk, "g");
    assert_eq!(g["metadata"]["labels"]["seen"], "yes", "labels patched");
    assert_eq!(condition(&g, "Suspended"), "False");
    sluice_e2e::wait_for("active 2", || get_job(&fk, "g")["status"]["active"] == 2);

    let suspend = json!({"spec": {"suspend": true}});
    jobs.patch("g", &PatchParams::default(), &Patch::Strategic(&suspend))
        .await
        .expect("a strategic merge patch");
    sluice_e2e::wait_for("the pods deleted", || pods_of(&fk, "g").is_empty());
    let g = get_job(&fk, "g");
    assert_eq!(condition(&g, "Suspended"), "True");
    assert_eq!(
        (g["status"]["active"].clone(), g["status"]["failed"].clone()),
        (json!(0), json!(0)),
        "pods deleted by suspension are not failures: {g:#}"
    );
    let refused = fk.call(
        "PATCH",
        &format!("/apis/batch/v1/namespaces/{NS}/jobs/g"),
        Some(&suspend),
    );
    assert_eq!(refused.status, 415, "a JSON patch is not a merge patch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_kueue_admits_in_order_whole_jobs_that_fit_frees_and_evicts() {
    let dir = TempDir::new("fk-kueue");
    let fk = FakeKube::start_with(dir.path(), &["n1:gpu=8"], &[], &["--kueue-gpus", "4"]);
    let jobs: Api<Job> = Api::default_namespaced(client(&fk));
    let made = [
        job("a", 2, 1, "sleep 1", Some("vision")),
        job("b", 1, 4, "sleep 30", Some("nlp")),
        job("c", 1, 1, "sleep 30", Some("vision")),
        job("d", 1, 1, "sleep 30", None),
    ];
    for j in &made {
        jobs.create(&PostParams::default(), j)
            .await
            .expect("create a Job");
    }
    let names = |v: &Value, list: &str| -> Vec<String> {
        let mut n: Vec<String> = v[list]
            .as_array()
            .into_iter()
            .flatten()
            .map(|j| j["name"].as_str().unwrap_or_default().to_owned())
            .collect();
        n.sort();
        n
    };
    // a (2 GPUs) fits, b (4) does not fit what is left, c (1) passes it; d is not Kueue's.
    sluice_e2e::wait_for("a and c admitted", || {
        names(&fk.call("GET", "/fake/kueue", None).json(), "admitted") == ["a", "c"]
    });
    let k = fk.call("GET", "/fake/kueue", None).json();
    assert_eq!((k["gpus"].clone(), k["used"].clone()), (json!(4), json!(3)));
    assert_eq!(names(&k, "waiting"), ["b"]);
    sluice_e2e::wait_for("c's pod", || live(&pods_of(&fk, "c")) == 1);
    assert!(pods_of(&fk, "b").is_empty() && pods_of(&fk, "d").is_empty());
    assert_eq!(get_job(&fk, "d")["spec"]["suspend"], true);

    // a completes: its 2 GPUs are freed, and b still does not fit (3 free).
    sluice_e2e::wait_for("a complete", || {
        condition(&get_job(&fk, "a"), "Complete") == "True"
    });
    let a = get_job(&fk, "a");
    assert_eq!(
        (
            a["status"]["succeeded"].clone(),
            a["status"]["completedIndexes"].clone()
        ),
        (json!(2), json!("0,1"))
    );
    sluice_e2e::wait_for("a's quota freed", || {
        fk.call("GET", "/fake/kueue", None).json()["used"] == 1
    });
    assert!(pods_of(&fk, "b").is_empty(), "b waits whole");

    // Evicting c frees its GPU: b fits and is admitted; c is suspended, its pod deleted.
    let evicted = fk.call("POST", "/fake/kueue/evict/default/c", None);
    assert_eq!(evicted.status, 200, "{}", evicted.text());
    sluice_e2e::wait_for("b admitted and running", || {
        live(&pods_of(&fk, "b")) == 1
            && names(&fk.call("GET", "/fake/kueue", None).json(), "admitted") == ["b"]
    });
    sluice_e2e::wait_for("c's pod deleted", || pods_of(&fk, "c").is_empty());
    let c = get_job(&fk, "c");
    assert_eq!(c["spec"]["suspend"], true);
    assert_eq!(condition(&c, "Suspended"), "True");
    let again = fk.call("POST", "/fake/kueue/evict/default/c", None);
    assert_eq!(again.status, 409, "c is no longer admitted");

    // Deleting b frees its quota.
    let del = json!({"propagationPolicy": "Background"});
    let gone = fk.call(
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/b",
        Some(&del),
    );
    assert_eq!(gone.status, 200);
    sluice_e2e::wait_for("b's quota freed", || {
        fk.call("GET", "/fake/kueue", None).json()["used"] == 0
    });
}
