//! Test controls under `/fake/...` (not counted as API calls): the failures a real cluster
//! has on its own (eviction, OOM, an image that cannot be pulled, a lost node, a pod that
//! cannot be scheduled), Kueue preempting a Job, and what the fake saw (calls, every pod ever
//! created, what its Kueue admitted).

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::api::{fail, reply};
use crate::kubelet::Stop;
use crate::status::{self, PodRef};
use crate::store::{ApiError, KINDS, now};
use crate::{Shared, procs};

type Q = Query<HashMap<String, String>>;

pub fn router() -> Router<Shared> {
    Router::new()
        .route("/fake/pods", get(pods))
        .route("/fake/pods/{ns}/{name}/evict", post(evict))
        .route("/fake/pods/{ns}/{name}/oom", post(oom))
        .route("/fake/pods/{ns}/{name}/unschedulable", post(unschedulable))
        .route("/fake/images/bad", post(bad_image))
        .route("/fake/nodes", post(add_node))
        .route("/fake/nodes/{name}/lose", post(lose_node))
        .route("/fake/nodes/{name}/cordon", post(cordon))
        .route("/fake/calls", get(calls))
        .route("/fake/calls/reset", post(reset_calls))
        .route("/fake/jobs", get(jobs))
        .route("/fake/kueue", get(kueue_report))
        .route("/fake/kueue/evict/{ns}/{name}", post(kueue_evict))
}

fn pod(app: &Shared, ns: &str, name: &str) -> Result<Value, Box<Response>> {
    app.lock()
        .get("pods", ns, name)
        .cloned()
        .ok_or_else(|| Box::new(fail(&ApiError::not_found("pods", name))))
}

fn ok(what: &str) -> Response {
    reply(200, &json!({"ok": what}))
}

/// Node-pressure eviction: SIGTERM to the main process, SIGKILL to the tree after `grace`
/// seconds (`?grace=`, 0 to 2, default 1); Failed, reason Evicted; the pod object stays.
async fn evict(
    State(app): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    q: Q,
) -> Response {
    let p = match pod(&app, &ns, &name) {
        Ok(pod) => PodRef::of(&pod),
        Err(r) => return *r,
    };
    let grace = q
        .get("grace")
        .and_then(|g| g.parse::<f64>().ok())
        .unwrap_or(1.0)
        .clamp(0.0, 2.0);
    match app.kubelet.request_stop(&p.uid, Stop::Evict) {
        Some((Some(pid), mut done)) => {
            procs::term(pid);
            tokio::spawn(async move {
                let wait = done.wait_for(|d| *d);
                let _ = tokio::time::timeout(Duration::from_secs_f64(grace), wait).await;
                if !*done.borrow() {
                    procs::kill_tree(pid);
                }
            });
        }
        _ => {
            status::update(&app, &p, status::evicted);
            status::event(
                &app,
                &p,
                "Warning",
                "Evicted",
                "The node was low on resource: memory. (fake eviction)",
                "kubelet",
            );
        }
    }
    ok("evicted")
}

/// The container is OOM-killed: SIGKILL to its tree; terminated OOMKilled, exit code 137.
async fn oom(State(app): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let p = match pod(&app, &ns, &name) {
        Ok(pod) => PodRef::of(&pod),
        Err(r) => return *r,
    };
    match app.kubelet.request_stop(&p.uid, Stop::Oom) {
        Some((Some(pid), _)) => {
            procs::kill_tree(pid);
            ok("oom")
        }
        _ => fail(&ApiError::new(
            409,
            "Conflict",
            format!("pod {name} has no running container"),
        )),
    }
}

/// A pending pod cannot be scheduled: PodScheduled False, Unschedulable, `?message=`.
async fn unschedulable(
    State(app): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    q: Q,
) -> Response {
    let pod = match pod(&app, &ns, &name) {
        Ok(pod) => pod,
        Err(r) => return *r,
    };
    if pod["status"]["phase"] != "Pending" {
        return fail(&ApiError::new(
            409,
            "Conflict",
            format!("pod {name} is not Pending"),
        ));
    }
    let default = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.".to_owned();
    let msg = q.get("message").cloned().unwrap_or(default);
    status::unschedulable(&app, &PodRef::of(&pod), &msg);
    ok("unschedulable")
}

/// Containers of image `?name=` are never pulled from now on.
async fn bad_image(State(app): State<Shared>, q: Q) -> Response {
    let Some(image) = q.get("name") else {
        return fail(&ApiError::bad_request("?name=IMAGE is required"));
    };
    app.lock().bad_images.insert(image.clone());
    ok("bad image")
}

/// A node from a JSON body, or from `?spec=NAME:gpu=...` (as `--node`).
async fn add_node(State(app): State<Shared>, q: Q, body: Bytes) -> Response {
    let node = if body.is_empty() {
        let spec = q.get("spec").map(String::as_str).unwrap_or_default();
        crate::node_from_spec(spec).map_err(ApiError::bad_request)
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(format!("not JSON: {e}")))
    };
    match node.and_then(|n| app.lock().create(KINDS[0], "", n)) {
        Ok(n) => reply(201, &n),
        Err(e) => fail(&e),
    }
}

/// The machine died: its pods' processes are SIGKILLed and keep their last status; the node
/// turns Ready Unknown (`?delete=true`: the Node object is deleted too).
async fn lose_node(State(app): State<Shared>, Path(name): Path<String>, q: Q) -> Response {
    let found = app.lock().update("nodes", "", &name, None, |n| {
        if let Some(conds) = n["status"]["conditions"].as_array_mut() {
            for c in conds.iter_mut().filter(|c| c["type"] == "Ready") {
                *c = json!({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                            "message": "Kubelet stopped posting node status.",
                            "lastHeartbeatTime": c["lastHeartbeatTime"],
                            "lastTransitionTime": now()});
            }
        }
        n["spec"]["taints"] = json!([{"key": "node.kubernetes.io/unreachable",
                                      "effect": "NoSchedule", "timeAdded": now()}]);
    });
    if found.is_none() {
        return fail(&ApiError::not_found("nodes", &name));
    }
    let mut killed = 0;
    for uid in app.kubelet.on_node(&name) {
        if let Some((Some(pid), _)) = app.kubelet.request_stop(&uid, Stop::NodeLost) {
            procs::kill_tree(pid);
            killed += 1;
        }
    }
    if q.get("delete").is_some_and(|d| d == "true") {
        app.lock().remove("nodes", "", &name, None);
    }
    reply(200, &json!({"ok": "lost", "killed": killed}))
}

async fn cordon(State(app): State<Shared>, Path(name): Path<String>) -> Response {
    match app.lock().update("nodes", "", &name, None, |n| {
        n["spec"]["unschedulable"] = json!(true)
    }) {
        Some(n) => reply(200, &n),
        None => fail(&ApiError::not_found("nodes", &name)),
    }
}

async fn calls(State(app): State<Shared>) -> Response {
    let store = app.lock();
    let total: u64 = store.calls.values().sum();
    reply(200, &json!({"total": total, "by": store.calls}))
}

async fn reset_calls(State(app): State<Shared>) -> Response {
    app.lock().calls.clear();
    ok("reset")
}

/// Every Job there is now, as the API has it: for tests to read without an API call that
/// would count as one of the client's.
async fn jobs(State(app): State<Shared>) -> Response {
    reply(200, &Value::Array(app.lock().list("jobs", None)))
}

/// The fake Kueue's ClusterQueue: `{gpus, used, admitted: [{namespace, name, gpus}],
/// waiting: [...]}`; 404 when it is off.
async fn kueue_report(State(app): State<Shared>) -> Response {
    match crate::kueue::report(&app) {
        Some(r) => reply(200, &r),
        None => fail(&ApiError::new(
            404,
            "NotFound",
            "no fake Kueue: start with --kueue-gpus N",
        )),
    }
}

/// Kueue preempts an admitted Job: suspended again, its pods deleted, its quota freed.
async fn kueue_evict(
    State(app): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if crate::kueue::evict(&app, &ns, &name) {
        ok("evicted")
    } else {
        fail(&ApiError::new(
            409,
            "Conflict",
            format!("job {ns}/{name} is not admitted by the fake Kueue"),
        ))
    }
}

/// Every pod ever created, deleted ones included, with how many times its name was created.
async fn pods(State(app): State<Shared>) -> Response {
    let store = app.lock();
    let all: Vec<Value> = store
        .pods
        .iter()
        .map(|((ns, name), r)| {
            json!({"namespace": ns, "name": name, "node": r.node, "created": r.created,
                   "deleted": r.deleted, "phase": r.phase})
        })
        .collect();
    reply(200, &Value::Array(all))
}
