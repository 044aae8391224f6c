//! Pod statuses as the kubelet writes them, and the Events it records.

use serde_json::{Value, json};

use crate::Shared;
use crate::kubelet::{Ended, Stop};
use crate::store::{KINDS, field, now};

/// Which pod: its namespace, name, uid (so that a recreated namesake is left alone) and node.
#[derive(Debug, Clone)]
pub struct PodRef {
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub node: String,
}

impl PodRef {
    pub fn of(pod: &Value) -> PodRef {
        PodRef {
            ns: field(pod, "metadata.namespace"),
            name: field(pod, "metadata.name"),
            uid: field(pod, "metadata.uid"),
            node: field(pod, "spec.nodeName"),
        }
    }
}

pub fn node_is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Changes the pod's status (MODIFIED), if the pod is still there.
pub fn update(app: &Shared, p: &PodRef, change: impl FnOnce(&mut Value)) {
    let mut store = app.lock();
    let updated = store.update("pods", &p.ns, &p.name, Some(&p.uid), |o| {
        if !o["status"].is_object() {
            o["status"] = json!({});
        }
        change(&mut o["status"]);
    });
    if let Some(obj) = updated
        && let Some(rec) = store.pods.get_mut(&(p.ns.clone(), p.name.clone()))
    {
        let phase = field(&obj, "status.phase");
        if rec.phase != phase {
            eprintln!("fake-kube: pod {}/{}: {phase}", p.ns, p.name);
        }
        rec.phase = phase;
    }
}

/// Removes the pod (DELETED, with its last status).
pub fn remove(app: &Shared, p: &PodRef) -> Option<Value> {
    let mut store = app.lock();
    let gone = store.remove("pods", &p.ns, &p.name, Some(&p.uid))?;
    if let Some(rec) = store.pods.get_mut(&(p.ns.clone(), p.name.clone())) {
        rec.deleted = true;
        rec.phase = field(&gone, "status.phase");
    }
    Some(gone)
}

/// Sets condition `kind` of a status.
pub fn condition(s: &mut Value, kind: &str, state: &str, reason: Option<&str>) {
    condition_msg(s, kind, state, reason, None);
}

pub fn condition_msg(
    s: &mut Value,
    kind: &str,
    state: &str,
    reason: Option<&str>,
    msg: Option<&str>,
) {
    if !s["conditions"].is_array() {
        s["conditions"] = json!([]);
    }
    let mut c = json!({"type": kind, "status": state, "lastProbeTime": null,
                       "lastTransitionTime": now()});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = msg {
        c["message"] = json!(m);
    }
    if let Some(list) = s["conditions"].as_array_mut() {
        match list.iter_mut().find(|c| c["type"] == kind) {
            Some(old)
                if old["status"] == state
                    && old["reason"] == c["reason"]
                    && old["message"] == c["message"] => {}
            Some(old) => *old = c,
            None => list.push(c),
        }
    }
}

/// Entry `i` of `list` (`containerStatuses`, `initContainerStatuses`) for container `c`.
pub fn set_container(
    s: &mut Value,
    list: &str,
    i: usize,
    c: &Value,
    uid: &str,
    state: Value,
    ready: bool,
) {
    let name = c["name"].as_str().unwrap_or_default();
    let entry = json!({
        "name": name, "image": c["image"], "imageID": "",
        "containerID": format!("fake://{uid}/{name}"),
        "ready": ready, "restartCount": 0, "started": state["running"].is_object(),
        "state": state,
    });
    if !s[list].is_array() {
        s[list] = json!([]);
    }
    if let Some(a) = s[list].as_array_mut() {
        while a.len() <= i {
            a.push(Value::Null);
        }
        a[i] = entry;
    }
}

/// Scheduled, sandbox up, containers waiting (`PodInitializing` or `ContainerCreating`).
pub fn pending(s: &mut Value, pod: &Value) {
    let uid = field(pod, "metadata.uid");
    let inits = pod["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mains = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    s["phase"] = json!("Pending");
    s["hostIP"] = json!("127.0.0.1");
    s["hostIPs"] = json!([{"ip": "127.0.0.1"}]);
    s["podIP"] = json!("127.0.0.1");
    s["podIPs"] = json!([{"ip": "127.0.0.1"}]);
    s["startTime"] = json!(now());
    condition(s, "PodScheduled", "True", None);
    let init_state = if inits.is_empty() { "True" } else { "False" };
    let init_reason = (!inits.is_empty()).then_some("ContainersNotInitialized");
    condition(s, "Initialized", init_state, init_reason);
    condition(s, "ContainersReady", "False", Some("ContainersNotReady"));
    condition(s, "Ready", "False", Some("ContainersNotReady"));
    let waiting = |r: &str| json!({"waiting": {"reason": r}});
    for (i, c) in inits.iter().enumerate() {
        set_container(
            s,
            "initContainerStatuses",
            i,
            c,
            &uid,
            waiting("PodInitializing"),
            false,
        );
    }
    let main_reason = if inits.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    for (i, c) in mains.iter().enumerate() {
        set_container(
            s,
            "containerStatuses",
            i,
            c,
            &uid,
            waiting(main_reason),
            false,
        );
    }
}

/// The main container started: Running, Ready.
pub fn running(s: &mut Value) {
    s["phase"] = json!("Running");
    for kind in ["Initialized", "ContainersReady", "Ready"] {
        condition(s, kind, "True", None);
    }
}

pub fn terminated(e: &Ended) -> Value {
    let mut t = json!({"exitCode": e.code, "reason": e.reason, "startedAt": e.started,
                       "finishedAt": now(), "containerID": null});
    if let Some(sig) = e.signal {
        t["signal"] = json!(sig);
    }
    if let Some(o) = t.as_object_mut() {
        o.remove("containerID");
    }
    json!({"terminated": t})
}

/// The main container ended: Succeeded or Failed, with what stopped it.
pub fn finish(app: &Shared, p: &PodRef, c: &Value, ended: &Ended, stop: Option<Stop>) {
    let mut e = Ended {
        reason: ended.reason,
        started: ended.started.clone(),
        ..*ended
    };
    match stop {
        Some(Stop::NodeLost) => return,
        Some(Stop::Oom) => (e.code, e.signal, e.reason) = (137, Some(9), "OOMKilled"),
        Some(Stop::Evict) => {
            e.code = if e.signal == Some(9) { 137 } else { 143 };
            e.reason = "Error";
        }
        _ => {}
    }
    let term = terminated(&e);
    update(app, p, |s| {
        set_container(s, "containerStatuses", 0, c, &p.uid, term, false);
        s["phase"] = json!(if e.code == 0 { "Succeeded" } else { "Failed" });
        let done = if e.code == 0 {
            "PodCompleted"
        } else {
            "PodFailed"
        };
        condition(s, "ContainersReady", "False", Some(done));
        condition(s, "Ready", "False", Some(done));
        if stop == Some(Stop::Evict) {
            evicted(s);
        }
    });
    if stop == Some(Stop::Evict) {
        event(app, p, "Warning", "Evicted", EVICTED, "kubelet");
    }
}

const EVICTED: &str = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 10Mi. (fake eviction)";

/// Failed as evicted by node pressure.
pub fn evicted(s: &mut Value) {
    s["phase"] = json!("Failed");
    s["reason"] = json!("Evicted");
    s["message"] = json!(EVICTED);
    condition_msg(
        s,
        "DisruptionTarget",
        "True",
        Some("TerminationByKubelet"),
        Some(EVICTED),
    );
}

/// Pending and not scheduled, with a FailedScheduling event.
pub fn unschedulable(app: &Shared, p: &PodRef, msg: &str) {
    update(app, p, |s| {
        s["phase"] = json!("Pending");
        condition_msg(s, "PodScheduled", "False", Some("Unschedulable"), Some(msg));
    });
    event(
        app,
        p,
        "Warning",
        "FailedScheduling",
        msg,
        "default-scheduler",
    );
}

/// A container whose image cannot be pulled: ErrImagePull, then ImagePullBackOff.
pub async fn bad_image(app: &Shared, p: &PodRef, c: &Value, (list, i): (&str, usize)) {
    let image = c["image"].as_str().unwrap_or_default();
    let pull = format!(
        "Failed to pull image \"{image}\": rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": not found (fake)"
    );
    let waiting = json!({"waiting": {"reason": "ErrImagePull", "message": pull}});
    update(app, p, |s| {
        set_container(s, list, i, c, &p.uid, waiting, false)
    });
    event(app, p, "Warning", "Failed", &pull, "kubelet");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let back = format!("Back-off pulling image \"{image}\"");
    let waiting = json!({"waiting": {"reason": "ImagePullBackOff", "message": back}});
    update(app, p, |s| {
        set_container(s, list, i, c, &p.uid, waiting, false)
    });
    event(app, p, "Normal", "BackOff", &back, "kubelet");
}

/// Records an Event about the pod.
pub fn event(app: &Shared, p: &PodRef, kind: &str, reason: &str, msg: &str, source: &str) {
    let mut store = app.lock();
    let n = store.rv() + 1;
    let ev = json!({
        "metadata": {"name": format!("{}.{n:x}", p.name)},
        "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": p.ns,
                           "name": p.name, "uid": p.uid},
        "reason": reason, "message": msg, "type": kind,
        "source": {"component": source, "host": p.node},
        "reportingComponent": source, "reportingInstance": p.node,
        "firstTimestamp": now(), "lastTimestamp": now(), "count": 1,
    });
    if let Err(e) = store.create(KINDS[3], &p.ns, ev) {
        eprintln!(
            "fake-kube: event {reason} for {}/{}: {}",
            p.ns, p.name, e.message
        );
    }
}
