//! batch/v1 Jobs, as a FAKE Job controller runs them: enough for Kueue's suspended Jobs and
//! sluice's Indexed gangs, not the whole controller.
//!
//! A task follows the store's changes and reconciles each Job whose object or pods changed:
//! - a suspended Job (`spec.suspend: true`) has no pods: suspending a running Job deletes its
//!   active pods (as pod deletes: SIGTERM, grace, SIGKILL), and they count neither as failed
//!   nor as succeeded, as in Kubernetes since pods terminated by suspension are not failures;
//! - an unsuspended Job gets up to `parallelism` pods (default 1) until `completions`
//!   (default `parallelism`) succeeded. `completionMode: Indexed`: a pod per index, named
//!   `JOB-INDEX-xxxxx`, with `spec.hostname` `JOB-INDEX` (the template's `subdomain` kept),
//!   the annotation and label `batch.kubernetes.io/job-completion-index`, and
//!   `JOB_COMPLETION_INDEX` in every container's environment (from the annotation, through a
//!   `fieldRef`, as the real controller writes it);
//! - more failed pods than `backoffLimit` (default 6) fail the Job (its active pods deleted);
//! - `status`: `active`, `succeeded`, `failed`, `completedIndexes`, `startTime`, and the
//!   conditions `Suspended`, `Complete`, `Failed`.
//!
//! The fake has no scheduler, and a Job's pods name no node: the controller binds each new pod
//! to the first Ready, uncordoned node carrying its template's `nodeSelector` (none: left
//! unbound, and the kubelet says Unschedulable). No `podFailurePolicy`, no
//! `activeDeadlineSeconds`, no `ttlSecondsAfterFinished`, no pod finalizers.
//!
//! Delete removes the Job and, unless `propagationPolicy` is `Orphan`, its pods.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::Shared;
use crate::store::{KINDS, field, now};

/// The annotation and label of an Indexed Job's pod.
pub const INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// What the controller remembers of a Job: the pods it counted (each ended pod once), the
/// indexes done, the pods failed.
#[derive(Debug, Default, Clone)]
pub struct Memo {
    counted: BTreeSet<String>,
    done: BTreeSet<u64>,
    failed: u64,
    /// Pods made so far (the index of a NonIndexed Job's next pod).
    made: u64,
}

/// Starts the controller (and the fake Kueue, when it is on).
pub fn start(app: Shared) {
    tokio::spawn(control(app));
}

async fn control(app: Shared) {
    let mut sub = app.lock().tx.subscribe();
    loop {
        match sub.recv().await {
            Ok(change) => {
                let obj = &change.object;
                let ns = field(obj, "metadata.namespace");
                match change.plural {
                    "jobs" if change.kind != "DELETED" => {
                        reconcile(&app, &ns, &field(obj, "metadata.name"));
                    }
                    "pods" => {
                        let job = field(obj, "metadata.labels.job-name");
                        if !job.is_empty() {
                            reconcile(&app, &ns, &job);
                        }
                    }
                    _ => continue,
                }
                crate::kueue::admit(&app);
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                let jobs = app.lock().list("jobs", None);
                for j in &jobs {
                    reconcile(
                        &app,
                        &field(j, "metadata.namespace"),
                        &field(j, "metadata.name"),
                    );
                }
                crate::kueue::admit(&app);
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

fn number(v: &Value, default: u64) -> u64 {
    v.as_u64().unwrap_or(default)
}

fn has_condition(job: &Value, kind: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// Whether the Job has finished (Complete or Failed).
pub fn finished(job: &Value) -> bool {
    has_condition(job, "Complete") || has_condition(job, "Failed")
}

/// Brings Job `ns/name`'s pods and status in line with its spec.
fn reconcile(app: &Shared, ns: &str, name: &str) {
    let Some(job) = app.lock().get("jobs", ns, name).cloned() else {
        return;
    };
    let uid = field(&job, "metadata.uid");
    let spec = &job["spec"];
    let indexed = spec["completionMode"] == "Indexed";
    let parallelism = number(&spec["parallelism"], 1);
    let completions = number(&spec["completions"], parallelism);
    let backoff = number(&spec["backoffLimit"], 6);
    let suspended = spec["suspend"] == true;
    let pods: Vec<Value> = app
        .lock()
        .list("pods", Some(ns))
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["controller-uid"] == uid.as_str())
        .collect();
    let index_of = |p: &Value| {
        p["metadata"]["annotations"][INDEX]
            .as_str()
            .unwrap_or_default()
            .parse::<u64>()
    };
    let memo = {
        let mut store = app.lock();
        let memo = store.jobs.entry(uid.clone()).or_default();
        for p in &pods {
            let pod_uid = field(p, "metadata.uid");
            // A pod deleted (by suspension, or anyone) is neither a success nor a failure.
            if !p["metadata"]["deletionTimestamp"].is_null() || memo.counted.contains(&pod_uid) {
                continue;
            }
            match p["status"]["phase"].as_str() {
                Some("Succeeded") => {
                    memo.counted.insert(pod_uid);
                    let i = index_of(p).unwrap_or(memo.done.len() as u64);
                    memo.done.insert(i);
                }
                Some("Failed") => {
                    memo.counted.insert(pod_uid);
                    memo.failed += 1;
                }
                _ => {}
            }
        }
        memo.clone()
    };
    let terminal =
        |p: &Value| matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    let active: Vec<&Value> = pods
        .iter()
        .filter(|p| !terminal(p) && p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    let failed = memo.failed > backoff;
    let complete = memo.done.len() as u64 >= completions;
    let was_finished = finished(&job);
    if suspended || failed || complete || was_finished {
        for p in &active {
            crate::kubelet::delete(app, ns, &field(p, "metadata.name"), None);
        }
    } else {
        // An index is covered while a pod of it is not ended (a terminating one included:
        // it is replaced once gone).
        let covered: BTreeSet<u64> = pods
            .iter()
            .filter(|p| !terminal(p))
            .filter_map(|p| index_of(p).ok())
            .collect();
        let live = pods.iter().filter(|p| !terminal(p)).count() as u64;
        let mut room = parallelism.saturating_sub(live);
        let wanted: Vec<u64> = if indexed {
            (0..completions)
                .filter(|i| !memo.done.contains(i) && !covered.contains(i))
                .collect()
        } else {
            let left = completions.saturating_sub(memo.done.len() as u64 + live);
            (0..left).map(|k| memo.made + k).collect()
        };
        for i in wanted {
            if room == 0 {
                break;
            }
            room -= 1;
            make_pod(app, &job, indexed.then_some(i));
            if let Some(m) = app.lock().jobs.get_mut(&uid) {
                m.made += 1;
            }
        }
    }
    let active_now = app
        .lock()
        .list("pods", Some(ns))
        .iter()
        .filter(|p| p["metadata"]["labels"]["controller-uid"] == uid.as_str())
        .filter(|p| !terminal(p) && p["metadata"]["deletionTimestamp"].is_null())
        .count();
    app.lock().update("jobs", ns, name, Some(&uid), |j| {
        let s = &mut j["status"];
        if !s.is_object() {
            *s = json!({});
        }
        s["active"] = json!(active_now);
        s["succeeded"] = json!(memo.done.len());
        s["failed"] = json!(memo.failed);
        if indexed {
            let done: Vec<String> = memo.done.iter().map(u64::to_string).collect();
            s["completedIndexes"] = json!(done.join(","));
        }
        if !suspended && s["startTime"].is_null() {
            s["startTime"] = json!(now());
        }
        if suspended {
            condition(s, "Suspended", "True", "JobSuspended", "Job suspended");
        } else if has_condition(&json!({"status": s.clone()}), "Suspended") {
            condition(s, "Suspended", "False", "JobResumed", "Job resumed");
        }
        if !was_finished && complete {
            condition(s, "Complete", "True", "", "");
            s["completionTime"] = json!(now());
        } else if !was_finished && failed {
            condition(
                s,
                "Failed",
                "True",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            );
        }
    });
}

fn condition(s: &mut Value, kind: &str, state: &str, reason: &str, message: &str) {
    if !s["conditions"].is_array() {
        s["conditions"] = json!([]);
    }
    let mut c = json!({"type": kind, "status": state, "lastProbeTime": now(),
                       "lastTransitionTime": now()});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
        c["message"] = json!(message);
    }
    if let Some(list) = s["conditions"].as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == kind) {
            Some(old) if old["status"] == state => {}
            Some(old) => *old = c,
            None => list.push(c),
        }
    }
}

/// The first Ready, uncordoned node carrying every label of `selector` ("" when none).
fn bind(app: &Shared, selector: &Value) -> String {
    let store = app.lock();
    store
        .list("nodes", None)
        .into_iter()
        .find(|n| {
            crate::status::node_is_ready(n)
                && n["spec"]["unschedulable"] != true
                && selector.as_object().is_none_or(|sel| {
                    sel.iter()
                        .all(|(k, v)| n["metadata"]["labels"][k.as_str()] == *v)
                })
        })
        .map(|n| field(&n, "metadata.name"))
        .unwrap_or_default()
}

/// Creates one pod of `job` from its template (`index`: an Indexed Job's).
fn make_pod(app: &Shared, job: &Value, index: Option<u64>) {
    let ns = field(job, "metadata.namespace");
    let name = field(job, "metadata.name");
    let uid = field(job, "metadata.uid");
    let template = &job["spec"]["template"];
    let mut pod =
        json!({"metadata": template["metadata"].clone(), "spec": template["spec"].clone()});
    if !pod["metadata"].is_object() {
        pod["metadata"] = json!({});
    }
    for key in ["labels", "annotations"] {
        if !pod["metadata"][key].is_object() {
            pod["metadata"][key] = json!({});
        }
    }
    let meta = &mut pod["metadata"];
    if let Some(o) = meta.as_object_mut() {
        o.remove("name");
    }
    meta["generateName"] = json!(match index {
        Some(i) => format!("{name}-{i}-"),
        None => format!("{name}-"),
    });
    for key in ["job-name", "batch.kubernetes.io/job-name"] {
        meta["labels"][key] = json!(name);
    }
    for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
        meta["labels"][key] = json!(uid);
    }
    meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name,
        "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    if let Some(i) = index {
        meta["labels"][INDEX] = json!(i.to_string());
        meta["annotations"][INDEX] = json!(i.to_string());
        pod["spec"]["hostname"] = json!(format!("{name}-{i}"));
        let env = json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef":
            {"fieldPath": format!("metadata.annotations['{INDEX}']")}}});
        for list in ["initContainers", "containers"] {
            for c in pod["spec"][list].as_array_mut().into_iter().flatten() {
                if !c["env"].is_array() {
                    c["env"] = json!([]);
                }
                if let Some(e) = c["env"].as_array_mut() {
                    e.push(env.clone());
                }
            }
        }
    }
    if field(&pod, "spec.nodeName").is_empty() {
        let node = bind(app, &pod["spec"]["nodeSelector"]);
        if !node.is_empty() {
            pod["spec"]["nodeName"] = json!(node);
        }
    }
    if let Err(e) = crate::api::create(app, KINDS[1], &ns, pod) {
        eprintln!("fake-kube: job {ns}/{name}: pod {index:?}: {}", e.message);
    }
}

pub fn delete(app: &Shared, ns: &str, name: &str, policy: &str) -> Option<Value> {
    let job = app.lock().remove("jobs", ns, name, None)?;
    let uid = field(&job, "metadata.uid");
    app.lock().jobs.remove(&uid);
    if policy != "Orphan" {
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
