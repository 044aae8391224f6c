//! A FAKE Kueue (`--kueue-gpus N`): one ClusterQueue whose `nvidia.com/gpu` quota (N) every
//! LocalQueue shares, admitting suspended Jobs as Kueue's job integration does, and nothing
//! else of Kueue (no Workload objects, no ResourceFlavors, no cohorts, no preemption of its
//! own, no CPU or memory quota).
//!
//! - A Job is Kueue's when it carries the label `kueue.x-k8s.io/queue-name` (any queue) and
//!   is created suspended; it is admitted, in the order the fake first saw the Jobs, when what
//!   it asks fits whole in what is free: `parallelism` × its pod template's GPU limit (all or
//!   nothing). A Job that does not fit waits and later, smaller ones may pass it
//!   (BestEffortFIFO, Kueue's default queueing strategy).
//! - Admitting is un-suspending: `spec.suspend` set to false, a MODIFIED watch event, and the
//!   fake Job controller makes its pods.
//! - Its quota is freed when it finishes (Complete or Failed) or is deleted.
//! - `POST /fake/kueue/evict/{ns}/{name}` is Kueue preempting it: suspended again (its pods
//!   deleted by the Job controller), its quota freed; unlike real Kueue, which requeues an
//!   evicted Workload with a backoff, the fake never admits that Job again (sluice deletes
//!   it and makes a new one). `GET /fake/kueue` says what is admitted and what waits.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::Shared;
use crate::store::field;

/// The label naming a Job's LocalQueue.
pub const QUEUE: &str = "kueue.x-k8s.io/queue-name";

/// The ClusterQueue's state.
#[derive(Debug, Default)]
pub struct Kueue {
    pub gpus: u64,
    /// Job uid to the order it was first seen in.
    seen: BTreeMap<String, u64>,
    /// Admitted Jobs: uid to (namespace, name, GPUs held).
    admitted: BTreeMap<String, (String, String, u64)>,
    /// Evicted Jobs' uids: never admitted again.
    evicted: std::collections::BTreeSet<String>,
}

impl Kueue {
    pub fn new(gpus: u64) -> Kueue {
        Kueue {
            gpus,
            ..Kueue::default()
        }
    }

    fn used(&self) -> u64 {
        self.admitted.values().map(|(_, _, g)| g).sum()
    }
}

/// GPUs a Job asks for: `parallelism` × the GPU limit (or request) of its template's
/// containers.
pub fn gpus_of(job: &Value) -> u64 {
    let per_pod: u64 = job["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let r = &c["resources"];
            let q = if r["limits"]["nvidia.com/gpu"].is_null() {
                &r["requests"]["nvidia.com/gpu"]
            } else {
                &r["limits"]["nvidia.com/gpu"]
            };
            match q {
                Value::String(s) => s.parse().unwrap_or(0),
                v => v.as_u64().unwrap_or(0),
            }
        })
        .sum();
    job["spec"]["parallelism"].as_u64().unwrap_or(1) * per_pod
}

fn is_kueues(job: &Value) -> bool {
    job["metadata"]["labels"][QUEUE].is_string()
}

/// Frees what finished or deleted Jobs held, then admits what fits, oldest first.
pub fn admit(app: &Shared) {
    let mut store = app.lock();
    if store.kueue.is_none() {
        return;
    }
    let jobs: Vec<Value> = store
        .list("jobs", None)
        .into_iter()
        .filter(is_kueues)
        .collect();
    let mut to_admit = Vec::new();
    if let Some(k) = store.kueue.as_mut() {
        let live: BTreeMap<String, &Value> =
            jobs.iter().map(|j| (field(j, "metadata.uid"), j)).collect();
        k.admitted
            .retain(|uid, _| live.get(uid).is_some_and(|j| !crate::jobs::finished(j)));
        for uid in live.keys() {
            let next = k.seen.len() as u64;
            k.seen.entry(uid.clone()).or_insert(next);
        }
        k.seen.retain(|uid, _| live.contains_key(uid));
        let mut waiting: Vec<(u64, &Value)> = live
            .iter()
            .filter(|(uid, j)| {
                j["spec"]["suspend"] == true
                    && !k.admitted.contains_key(*uid)
                    && !k.evicted.contains(*uid)
                    && !crate::jobs::finished(j)
            })
            .map(|(uid, j)| (k.seen.get(uid).copied().unwrap_or(u64::MAX), *j))
            .collect();
        waiting.sort_by_key(|(order, _)| *order);
        let mut free = k.gpus.saturating_sub(k.used());
        for (_, j) in waiting {
            let need = gpus_of(j);
            if need > free {
                continue;
            }
            free -= need;
            let (ns, name) = (field(j, "metadata.namespace"), field(j, "metadata.name"));
            k.admitted
                .insert(field(j, "metadata.uid"), (ns.clone(), name.clone(), need));
            to_admit.push((ns, name, field(j, "metadata.uid")));
        }
    }
    for (ns, name, uid) in to_admit {
        eprintln!("fake-kube: kueue admits job {ns}/{name}");
        store.update("jobs", &ns, &name, Some(&uid), |j| {
            j["spec"]["suspend"] = json!(false);
        });
    }
}

/// Kueue preempts Job `ns/name`: suspended again, its quota freed. False when it is not
/// admitted.
pub fn evict(app: &Shared, ns: &str, name: &str) -> bool {
    let mut store = app.lock();
    let Some(job) = store.get("jobs", ns, name).cloned() else {
        return false;
    };
    let uid = field(&job, "metadata.uid");
    let Some(k) = store.kueue.as_mut() else {
        return false;
    };
    if k.admitted.remove(&uid).is_none() {
        return false;
    }
    k.evicted.insert(uid.clone());
    eprintln!("fake-kube: kueue evicts job {ns}/{name}");
    store.update("jobs", ns, name, Some(&uid), |j| {
        j["spec"]["suspend"] = json!(true);
    });
    true
}

/// What the ClusterQueue holds: its quota, what is used, the admitted Jobs and those waiting.
pub fn report(app: &Shared) -> Option<Value> {
    let store = app.lock();
    let k = store.kueue.as_ref()?;
    let admitted: Vec<Value> = k
        .admitted
        .values()
        .map(|(ns, name, g)| json!({"namespace": ns, "name": name, "gpus": g}))
        .collect();
    let waiting: Vec<Value> = store
        .list("jobs", None)
        .into_iter()
        .filter(|j| {
            is_kueues(j)
                && j["spec"]["suspend"] == true
                && !k.admitted.contains_key(&field(j, "metadata.uid"))
        })
        .map(|j| {
            json!({"namespace": field(&j, "metadata.namespace"),
                   "name": field(&j, "metadata.name"), "gpus": gpus_of(&j)})
        })
        .collect();
    Some(json!({"gpus": k.gpus, "used": k.used(), "admitted": admitted, "waiting": waiting}))
}
