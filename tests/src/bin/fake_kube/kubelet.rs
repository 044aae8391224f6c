//! The fake kubelet: runs each pod on a Ready node of the fake as host processes and writes
//! its status as a kubelet would (Pending, Running, Succeeded/Failed), every change a
//! MODIFIED watch event. Init containers run in order, then the first container only
//! (`restartPolicy: Never` always).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::Shared;
use crate::container;
use crate::procs;
use crate::status::{self, PodRef};
use crate::store::{field, now};

/// Why a pod's processes were stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Delete,
    Evict,
    Oom,
    NodeLost,
}

struct Run {
    node: String,
    /// The running container's process (its group's id too).
    pid: Option<i32>,
    stop: Option<Stop>,
    done: watch::Sender<bool>,
    /// Containers whose log is complete.
    logs_done: Vec<String>,
}

/// The pods the kubelet runs, by uid.
#[derive(Default)]
pub struct Kubelet {
    runs: Mutex<HashMap<String, Run>>,
}

impl Kubelet {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_pid(&self, uid: &str, pid: Option<i32>) {
        if let Some(r) = self.runs().get_mut(uid) {
            r.pid = pid;
        }
    }

    fn stopped(&self, uid: &str) -> Option<Stop> {
        self.runs().get(uid).and_then(|r| r.stop)
    }

    /// Marks the pod stopped (the first reason wins): its running process, if any, and a
    /// receiver that turns true once its runner is done.
    pub fn request_stop(
        &self,
        uid: &str,
        why: Stop,
    ) -> Option<(Option<i32>, watch::Receiver<bool>)> {
        let mut runs = self.runs();
        let r = runs.get_mut(uid)?;
        r.stop.get_or_insert(why);
        Some((r.pid, r.done.subscribe()))
    }

    /// Whether the log of `container` of pod `uid` is complete (or will never grow).
    pub fn log_done(&self, uid: &str, container: &str) -> bool {
        self.runs()
            .get(uid)
            .is_none_or(|r| *r.done.borrow() || r.logs_done.iter().any(|c| c == container))
    }

    /// The uids of the pods run on `node`.
    pub fn on_node(&self, node: &str) -> Vec<String> {
        self.runs()
            .iter()
            .filter(|(_, r)| r.node == node)
            .map(|(u, _)| u.clone())
            .collect()
    }

    /// Kills every running process tree (the fake is going away).
    pub fn kill_all(&self) -> usize {
        let pids: Vec<i32> = self.runs().values().filter_map(|r| r.pid).collect();
        for pid in &pids {
            procs::kill_tree(*pid);
        }
        pids.len()
    }
}

/// Sets `done` when the runner ends, however it ends.
struct Finish<'a>(&'a Shared, String);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.0.kubelet.runs().get_mut(&self.1) {
            r.pid = None;
            let _ = r.done.send(true);
        }
    }
}

/// Hands a newly created pod to the kubelet.
pub fn start(app: Shared, pod: Value) {
    tokio::spawn(async move { run(app, pod).await });
}

fn node_ready(app: &Shared, node: &str) -> (bool, usize) {
    let store = app.lock();
    let nodes = store.list("nodes", None);
    let ready = store
        .get("nodes", "", node)
        .is_some_and(status::node_is_ready);
    (ready, nodes.len())
}

async fn run(app: Shared, pod: Value) {
    let p = PodRef::of(&pod);
    let (ready, count) = node_ready(&app, &p.node);
    if !ready {
        let names: Vec<String> = app
            .lock()
            .list("nodes", None)
            .iter()
            .map(|n| field(n, "metadata.name"))
            .collect();
        let why = if p.node.is_empty() {
            "this fake has no scheduler: set spec.nodeName".to_owned()
        } else {
            format!("node {:?} is not a Ready node of this fake", p.node)
        };
        let msg = format!(
            "0/{count} nodes are available: {why} (nodes: {}).",
            names.join(", ")
        );
        status::unschedulable(&app, &p, &msg);
        return;
    }
    let (done, _) = watch::channel(false);
    app.kubelet.runs().insert(
        p.uid.clone(),
        Run {
            node: p.node.clone(),
            pid: None,
            stop: None,
            done,
            logs_done: vec![],
        },
    );
    let _finish = Finish(&app, p.uid.clone());
    let dir = app.work.join(&p.ns).join(&p.name);
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir_all(dir.join("cwd")) {
        eprintln!(
            "fake-kube: pod {}/{}: cannot make {}: {e}",
            p.ns,
            p.name,
            dir.display()
        );
    }
    let inits = pod["spec"]["initContainers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mains = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if mains.len() > 1 {
        eprintln!(
            "fake-kube: pod {}/{} has {} containers: only the first runs",
            p.ns,
            p.name,
            mains.len()
        );
    }
    status::update(&app, &p, |s| status::pending(s, &pod));
    for (i, c) in inits.iter().enumerate() {
        let Some(ended) =
            container_run(&app, &p, &pod, c, &dir, ("initContainerStatuses", i)).await
        else {
            return;
        };
        if ended.code != 0 {
            status::update(&app, &p, |s| {
                s["phase"] = json!("Failed");
                s["reason"] = json!("Init:Error");
                s["message"] = json!(format!("init container {:?} failed", c["name"]));
                status::condition(s, "Ready", "False", Some("PodFailed"));
            });
            return;
        }
    }
    status::update(&app, &p, |s| {
        status::condition(s, "Initialized", "True", None)
    });
    let Some(main) = mains.first() else {
        return;
    };
    let Some(ended) = container_run(&app, &p, &pod, main, &dir, ("containerStatuses", 0)).await
    else {
        return;
    };
    status::finish(&app, &p, main, &ended, app.kubelet.stopped(&p.uid));
}

/// How a container ended.
pub struct Ended {
    pub code: i32,
    pub signal: Option<i32>,
    pub reason: &'static str,
    pub started: String,
}

/// Runs one container to its end; None when it never ran (bad image, bad config, stopped
/// before its start) or its pod was stopped from outside.
async fn container_run(
    app: &Shared,
    p: &PodRef,
    pod: &Value,
    c: &Value,
    dir: &std::path::Path,
    (list, i): (&'static str, usize),
) -> Option<Ended> {
    if app.kubelet.stopped(&p.uid).is_some() {
        return None;
    }
    let image = c["image"].as_str().unwrap_or_default().to_owned();
    if app.lock().bad_images.contains(&image) {
        status::bad_image(app, p, c, (list, i)).await;
        return None;
    }
    let prepared = match container::prepare(app, pod, c, dir) {
        Ok(prep) => prep,
        Err(e) => {
            let waiting =
                json!({"waiting": {"reason": "CreateContainerConfigError", "message": e}});
            status::update(app, p, |s| {
                status::set_container(s, list, i, c, &p.uid, waiting, false)
            });
            return None;
        }
    };
    let name = c["name"].as_str().unwrap_or("main").to_owned();
    let log: PathBuf = dir.join(format!("{name}.log"));
    let started_at = now();
    let mut started = match container::spawn(&prepared, &log).await {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("exec: {:?}: {e}", prepared.argv[0]);
            let _ = std::fs::write(&log, format!("{} {msg}\n", started_at));
            return Some(Ended {
                code: 128,
                signal: None,
                reason: "StartError",
                started: started_at,
            });
        }
    };
    app.kubelet.set_pid(&p.uid, Some(started.pid));
    let running = json!({"running": {"startedAt": started_at}});
    let main = list == "containerStatuses";
    status::update(app, p, |s| {
        status::set_container(s, list, i, c, &p.uid, running, main);
        if main {
            status::running(s);
        }
    });
    let exit = started.child.wait().await;
    // PID 1 gone: the runtime kills what is left of the container.
    procs::kill_tree(started.pid);
    for copier in started.copiers.drain(..) {
        let _ = tokio::time::timeout(Duration::from_secs(2), copier).await;
    }
    {
        let mut runs = app.kubelet.runs();
        if let Some(r) = runs.get_mut(&p.uid) {
            r.pid = None;
            r.logs_done.push(name);
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let (code, signal) = match exit {
        Ok(st) => match (st.code(), st.signal()) {
            (Some(code), _) => (code, None),
            (None, Some(sig)) => (128 + sig, Some(sig)),
            _ => (255, None),
        },
        Err(_) => (255, None),
    };
    let reason = if code == 0 { "Completed" } else { "Error" };
    let ended = Ended {
        code,
        signal,
        reason,
        started: started_at,
    };
    if list == "initContainerStatuses" {
        let stop = app.kubelet.stopped(&p.uid);
        if stop != Some(Stop::NodeLost) {
            let term = status::terminated(&ended);
            status::update(app, p, |s| {
                status::set_container(s, list, i, c, &p.uid, term, false)
            });
        }
        if stop.is_some() {
            return None;
        }
    }
    Some(ended)
}

/// DELETE of a pod: at once when no process of it runs, else gracefully: deletionTimestamp
/// set, SIGTERM to the main process, SIGKILL to its tree after the grace, then removed.
pub fn delete(app: &Shared, ns: &str, name: &str, grace: Option<i64>) -> Option<Value> {
    let pod = app.lock().get("pods", ns, name).cloned()?;
    let p = PodRef::of(&pod);
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        // Already terminating: only a forced delete (grace 0) changes anything.
        if grace == Some(0) {
            // The object goes first: the graceful delete's own task, woken by the kill, would
            // otherwise race this request to remove it (and this one answer 404).
            let removed = status::remove(app, &p);
            if let Some((Some(pid), _)) = app.kubelet.request_stop(&p.uid, Stop::Delete) {
                procs::kill_tree(pid);
            }
            return removed;
        }
        return Some(pod);
    }
    let grace = grace
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
        .max(0);
    match app.kubelet.request_stop(&p.uid, Stop::Delete) {
        Some((Some(pid), mut done)) => {
            let at = chrono::Utc::now() + chrono::Duration::seconds(grace);
            let at = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let marked = app.lock().update("pods", ns, name, Some(&p.uid), |o| {
                o["metadata"]["deletionTimestamp"] = json!(at);
                o["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            });
            let app = app.clone();
            tokio::spawn(async move {
                if grace > 0 {
                    procs::term(pid);
                    let wait = done.wait_for(|d| *d);
                    let _ = tokio::time::timeout(Duration::from_secs(grace as u64), wait).await;
                }
                if !*done.borrow() {
                    procs::kill_tree(pid);
                }
                let _ = tokio::time::timeout(Duration::from_secs(10), done.wait_for(|d| *d)).await;
                status::remove(&app, &p);
            });
            marked
        }
        _ => status::remove(app, &p),
    }
}
