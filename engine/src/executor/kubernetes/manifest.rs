//! The objects an attempt is made of on Kubernetes: one pod per worker, pinned to the node the
//! scheduler chose, and for a gang a headless Service that gives worker 0 a stable name.
//!
//! A pod runs the step's image with `sluice-runtime pod` as its entrypoint, copied into an
//! `emptyDir` by an init container from the runtime image (`sluice-runtime install`), so that
//! any image works. It has no Kubernetes credentials: its runtime reports through the object
//! store (`SLUICE_POD_KEY`), whose credentials come from the Cluster's `objectsSecret`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};
use serde_json::{Value, json};
use sluice_runtime::contract::Launch;

use super::names;
use crate::executor::AttemptId;
use crate::spec::model::Taint;

/// Where the pod's shared volume is mounted: the runtime binary under `bin/`, the attempt's
/// files under `attempt/`.
pub const MOUNT: &str = "/sluice-pod";
/// The attempt's folder inside the pod (`Executor::runtime_dir`).
pub const ATTEMPT_DIR: &str = "/sluice-pod/attempt";
const RUNTIME: &str = "/sluice-pod/bin/sluice-runtime";
/// Where the runtime image keeps the binary (images/runtime.Containerfile).
pub const IMAGE_RUNTIME: &str = "/sluice-runtime";
/// PyTorch's default rendezvous port.
pub const MASTER_PORT: u16 = 29500;

/// One worker's pod, as decided.
pub struct WorkerPod<'a> {
    pub id: &'a AttemptId,
    pub team: &'a str,
    pub base: &'a str,
    pub worker: u32,
    pub workers: u32,
    pub node: &'a str,
    pub namespace: &'a str,
    pub image: &'a str,
    pub runtime_image: &'a str,
    pub service_account: Option<&'a str>,
    pub objects_secret: Option<&'a str>,
    pub grace_seconds: u64,
    /// The launch as this worker's runtime runs it.
    pub launch: &'a Launch,
    /// This worker's record in the object store (`SLUICE_POD_KEY`).
    pub key: &'a str,
    pub gpu: u32,
    pub millicpu: u64,
    pub memory: u64,
    /// Extended resources (`nvidia.com/mig-1g.10gb`), asked for as limits like GPUs.
    pub extended: &'a BTreeMap<String, u64>,
    /// The taints of the worker's pool, tolerated.
    pub taints: &'a [Taint],
}

/// The environment a gang's worker adds to the step's: PyTorch's launcher conventions, with
/// worker 0's stable DNS name through the gang's headless Service.
pub fn gang_env(base: &str, namespace: &str, worker: u32, workers: u32) -> Vec<(String, String)> {
    let master = format!("{}.{base}.{namespace}.svc", names::pod(base, 0));
    vec![
        ("WORLD_SIZE".into(), workers.to_string()),
        ("RANK".into(), worker.to_string()),
        ("LOCAL_RANK".into(), "0".into()),
        ("MASTER_ADDR".into(), master),
        ("MASTER_PORT".into(), MASTER_PORT.to_string()),
        ("PET_NNODES".into(), workers.to_string()),
        ("PET_NODE_RANK".into(), worker.to_string()),
        ("PET_NPROC_PER_NODE".into(), "1".into()),
    ]
}

fn labels(team: &str, id: &AttemptId, worker: Option<u32>) -> BTreeMap<String, String> {
    names::labels(team, id, worker).into_iter().collect()
}

/// The pod of one worker.
pub fn pod(w: &WorkerPod<'_>) -> Result<Pod, serde_json::Error> {
    let name = names::pod(w.base, w.worker);
    let launch = serde_json::to_string(w.launch)?;
    let env = json!([
        {"name": "SLUICE_POD_LAUNCH", "value": launch},
        {"name": "SLUICE_POD_KEY", "value": w.key},
        {"name": "SLUICE_POD_DIR", "value": ATTEMPT_DIR},
    ]);
    let mut limits = serde_json::Map::new();
    let mut requests = serde_json::Map::new();
    if w.gpu > 0 {
        limits.insert("nvidia.com/gpu".into(), json!(w.gpu.to_string()));
    }
    for (name, n) in w.extended.iter().filter(|(_, n)| **n > 0) {
        limits.insert(name.clone(), json!(n.to_string()));
    }
    if w.millicpu > 0 {
        requests.insert("cpu".into(), json!(format!("{}m", w.millicpu)));
    }
    if w.memory > 0 {
        requests.insert("memory".into(), json!(w.memory.to_string()));
        limits.insert("memory".into(), json!(w.memory.to_string()));
    }
    let mount = json!([{"name": "sluice", "mountPath": MOUNT}]);
    let mut container = json!({
        "name": "step",
        "image": w.image,
        "command": [RUNTIME, "pod"],
        "env": env,
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": mount,
    });
    if let Some(secret) = w.objects_secret {
        // Under a prefix of the runtime's own, which it leaves out of the program's
        // environment: the step does not get the object store's credentials as variables.
        container["envFrom"] = json!([{
            "secretRef": {"name": secret},
            "prefix": sluice_runtime::objects::SECRET_PREFIX,
        }]);
    }
    let mut annotations = BTreeMap::new();
    annotations.insert(names::STEP_ANNOTATION.to_owned(), w.id.step.clone());
    let mut spec = json!({
        "nodeName": w.node,
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": w.grace_seconds,
        "volumes": [{"name": "sluice", "emptyDir": {}}],
        "initContainers": [{
            "name": "sluice-runtime",
            "image": w.runtime_image,
            "command": [IMAGE_RUNTIME, "install", RUNTIME],
            "volumeMounts": mount,
        }],
        "containers": [container],
        "tolerations": tolerations(w.taints),
    });
    if w.node.is_empty() {
        // Left to the Kubernetes scheduler (a Job's pods, `admission: kueue`).
        if let Some(o) = spec.as_object_mut() {
            o.remove("nodeName");
        }
    }
    if let Some(sa) = w.service_account {
        spec["serviceAccountName"] = json!(sa);
    }
    if w.workers > 1 {
        spec["hostname"] = json!(name);
        spec["subdomain"] = json!(w.base);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": w.namespace,
            "labels": labels(w.team, w.id, Some(w.worker)),
            "annotations": annotations,
        },
        "spec": spec,
    }))
}

/// The pool's taints as tolerations (`pools[].taints`): pinned pods skip the scheduler, but a
/// `NoExecute` taint would still evict them.
pub fn tolerations(taints: &[Taint]) -> Value {
    Value::Array(
        taints
            .iter()
            .map(|t| {
                let mut v = json!({"key": t.key});
                match &t.value {
                    Some(value) => {
                        v["operator"] = json!("Equal");
                        v["value"] = json!(value);
                    }
                    None => v["operator"] = json!("Exists"),
                }
                if let Some(e) = &t.effect {
                    v["effect"] = json!(e);
                }
                v
            })
            .collect(),
    )
}

/// A gang's headless Service: `POD.BASE.NAMESPACE.svc` resolves to each worker's pod.
pub fn service(
    team: &str,
    id: &AttemptId,
    base: &str,
    namespace: &str,
) -> Result<Service, serde_json::Error> {
    let mut selector = BTreeMap::new();
    for (k, v) in names::labels(team, id, None) {
        selector.insert(k, v);
    }
    let spec: Value = json!({
        "clusterIP": "None",
        "selector": selector,
        "publishNotReadyAddresses": true,
        "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
    });
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": base,
            "namespace": namespace,
            "labels": labels(team, id, None),
        },
        "spec": spec,
    }))
}
