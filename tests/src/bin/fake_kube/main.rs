//! `fake-kube`: a FAKE Kubernetes cluster, for tests only.
//!
//! It exists so that the engine's Kubernetes executor can be tested end to end where no
//! kube-apiserver can run: it speaks enough of the real Kubernetes JSON protocol (core v1
//! `nodes`, `pods`, `pods/log`, `services`, `events`, `secrets`; batch/v1 `jobs`; list with
//! label and field selectors; chunked watch streams with bookmarks and 410 Gone) for the real
//! `kube` client and its `runtime::watcher`, and it runs each pod's containers as plain host
//! processes (a "kubelet" in the same process) so that pods really start, log, exit, get
//! signalled on delete, and can be evicted, OOM-killed or lost with their node on demand
//! through test-only controls under `/fake/...`.
//!
//! With `--kueue-gpus N`, a fake Kueue admits suspended Jobs labelled
//! `kueue.x-k8s.io/queue-name` into N GPUs of quota (`kueue.rs`); the fake Job controller
//! (`jobs.rs`) runs suspension, Indexed Jobs and a minimal status.
//!
//! What it is NOT: there is no scheduler (a pod must name its node in `spec.nodeName`, or it
//! stays Pending as Unschedulable; a Job's pods are bound by the Job controller), no
//! admission webhooks, no validation beyond what it needs, no
//! authentication (any token is accepted), no real images (an image is a host folder given
//! with `--image NAME=ROOT`, or nothing: the host's programs run), no mount namespaces (an
//! `emptyDir` volume is a host folder, and each mount path is replaced, as a SUBSTRING, by
//! that folder in the container's `command`, `args`, env values and `workingDir`, longest
//! mount path first; so `/sluice-pod/attempt/inputs/x`, even inside a JSON env value, names
//! the host folder), no cgroups (memory is not limited: OOM is a control), no restarts
//! (every pod is `restartPolicy: Never`), only the first container of a pod runs.
//!
//! Usage: `fake-kube --listen 127.0.0.1:0 --work DIR [--node SPEC]... [--image NAME=ROOT]...
//! [--history N] [--bookmark-ms MS] [--kueue-gpus N]`. The first line on stdout is `listening on
//! http://ADDR`; logs go to stderr. See `tests/src/kube.rs` for the routes a test uses.

mod api;
mod container;
mod controls;
mod jobs;
mod kubelet;
mod kueue;
mod logs;
mod procs;
mod select;
mod status;
mod store;
mod watch;

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use store::{KINDS, Store};

/// The whole fake cluster: its objects and its kubelet.
pub struct App {
    store: Mutex<Store>,
    pub kubelet: kubelet::Kubelet,
    pub work: PathBuf,
    pub images: Vec<(String, PathBuf)>,
    pub bookmark: Duration,
}

pub type Shared = Arc<App>;

impl App {
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Args {
    listen: String,
    work: PathBuf,
    nodes: Vec<String>,
    images: Vec<(String, PathBuf)>,
    history: usize,
    bookmark_ms: u64,
    kueue_gpus: Option<u64>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: "127.0.0.1:0".into(),
        work: PathBuf::new(),
        nodes: vec![],
        images: vec![],
        history: 1000,
        bookmark_ms: 2000,
        kueue_gpus: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => args.listen = value()?,
            "--work" => args.work = PathBuf::from(value()?),
            "--node" => args.nodes.push(value()?),
            "--image" => {
                let v = value()?;
                let (name, root) = v.split_once('=').ok_or("--image takes NAME=ROOT")?;
                args.images.push((name.to_owned(), PathBuf::from(root)));
            }
            "--history" => args.history = value()?.parse().map_err(|_| "--history: a number")?,
            "--bookmark-ms" => {
                args.bookmark_ms = value()?.parse().map_err(|_| "--bookmark-ms: a number")?
            }
            "--kueue-gpus" => {
                args.kueue_gpus = Some(value()?.parse().map_err(|_| "--kueue-gpus: a number")?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.work.as_os_str().is_empty() {
        return Err("--work DIR is required".into());
    }
    Ok(args)
}

/// A Ready node from `NAME:gpu=8,cpu=16,memory=64Gi[,DOMAIN/NAME=N...][,label.KEY=VALUE...]`.
pub fn node_from_spec(spec: &str) -> Result<Value, String> {
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    if name.is_empty() {
        return Err(format!("node spec {spec:?}: no name"));
    }
    let mut labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"});
    let mut resources = json!({"pods": "110"});
    for part in rest.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("node spec {spec:?}: {part:?} is not KEY=VALUE"))?;
        match k {
            "gpu" => resources["nvidia.com/gpu"] = json!(v),
            "cpu" | "memory" | "pods" | "ephemeral-storage" => resources[k] = json!(v),
            // Extended resources (`nvidia.com/mig-1g.10gb=7`), as device plugins report them.
            _ if k.contains('/') => resources[k] = json!(v),
            _ => match k.strip_prefix("label.") {
                Some(label) => labels[label] = json!(v),
                None => return Err(format!("node spec {spec:?}: unknown key {k:?}")),
            },
        }
    }
    let now = store::now();
    Ok(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status (fake)",
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
        },
    }))
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-kube: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&args.work) {
        eprintln!("fake-kube: cannot create {}: {e}", args.work.display());
        std::process::exit(1);
    }
    let app = Arc::new(App {
        store: Mutex::new(Store::new(args.history)),
        kubelet: kubelet::Kubelet::default(),
        work: args.work.clone(),
        images: args.images.clone(),
        bookmark: Duration::from_millis(args.bookmark_ms.max(10)),
    });
    if let Some(gpus) = args.kueue_gpus {
        app.lock().kueue = Some(kueue::Kueue::new(gpus));
    }
    jobs::start(app.clone());
    for spec in &args.nodes {
        let made = node_from_spec(spec).map_err(store::ApiError::bad_request);
        if let Err(e) = made.and_then(|n| app.lock().create(KINDS[0], "", n)) {
            eprintln!("fake-kube: --node {spec}: {}", e.message);
            std::process::exit(2);
        }
    }
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fake-kube: cannot listen on {}: {e}", args.listen);
            std::process::exit(1);
        }
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-kube: no local address: {e}");
            std::process::exit(1);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on http://{addr}");
    let _ = out.flush();
    eprintln!(
        "fake-kube: a fake Kubernetes cluster on http://{addr}, work {}, {} node(s)",
        args.work.display(),
        args.nodes.len()
    );
    tokio::spawn(stop_on_signals(app.clone()));
    let router = controls::router().merge(api::router()).with_state(app);
    if let Err(e) = axum::serve(listener, router).await {
        eprintln!("fake-kube: server failed: {e}");
        std::process::exit(1);
    }
}

/// SIGTERM or SIGINT: every pod's processes are killed, then the fake exits.
async fn stop_on_signals(app: Shared) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("fake-kube: cannot listen for signals");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let killed = app.kubelet.kill_all();
    eprintln!("fake-kube: signalled; killed {killed} pod process tree(s), exiting");
    std::process::exit(0);
}
