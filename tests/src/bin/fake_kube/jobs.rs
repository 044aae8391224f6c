//! batch/v1 Jobs, minimally: a Job created with `spec.suspend` not true gets
//! `spec.parallelism` (default 1) pods from its template at once, labelled `job-name` and
//! `controller-uid` and owned by it. No job status is kept (no `active`/`succeeded`
//! counts, no completions, no retries) and a Job cannot be changed (no PATCH/PUT), so a
//! suspended Job never gets pods. Delete removes the Job and, unless `propagationPolicy`
//! is `Orphan`, its pods (each as a pod delete: SIGTERM, grace, SIGKILL).

use serde_json::{Value, json};

use crate::Shared;
use crate::store::{KINDS, field};

pub fn created(app: &Shared, job: &Value) {
    if job["spec"]["suspend"] == true {
        return;
    }
    let ns = field(job, "metadata.namespace");
    let name = field(job, "metadata.name");
    let uid = field(job, "metadata.uid");
    let count = job["spec"]["parallelism"].as_u64().unwrap_or(1);
    for i in 0..count {
        let mut pod = json!({
            "metadata": job["spec"]["template"]["metadata"].clone(),
            "spec": job["spec"]["template"]["spec"].clone(),
        });
        if !pod["metadata"].is_object() {
            pod["metadata"] = json!({});
        }
        let meta = &mut pod["metadata"];
        meta["name"] = json!(format!(
            "{name}-{i}-{}",
            &uid[uid.len().saturating_sub(5)..]
        ));
        if !meta["labels"].is_object() {
            meta["labels"] = json!({});
        }
        for key in ["job-name", "batch.kubernetes.io/job-name"] {
            meta["labels"][key] = json!(name);
        }
        for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
            meta["labels"][key] = json!(uid);
        }
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
        if let Err(e) = crate::api::create(app, KINDS[1], &ns, pod) {
            eprintln!("fake-kube: job {ns}/{name}: pod {i}: {}", e.message);
        }
    }
}

pub fn delete(app: &Shared, ns: &str, name: &str, policy: &str) -> Option<Value> {
    let job = app.lock().remove("jobs", ns, name, None)?;
    if policy != "Orphan" {
        let uid = field(&job, "metadata.uid");
        let pods = app.lock().list("pods", Some(ns));
        for pod in pods
            .iter()
            .filter(|p| p["metadata"]["labels"]["controller-uid"] == uid.as_str())
        {
            crate::kubelet::delete(app, ns, &field(pod, "metadata.name"), None);
        }
    }
    Some(job)
}
