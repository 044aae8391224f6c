//! One connection to a Kubernetes cluster per namespace and process, shared by the executors
//! of every run the process drives: the API client (rate limited, its calls counted), and two
//! watches that keep what the cluster says in memory, so that no executor ever polls a pod:
//! pods carrying `sluice.dev/managed=true` in the namespace (a Job's pods carry it from its
//! template), and the cluster's nodes. Jobs (`admission: kueue`) are not watched: their pods
//! say all the executor follows, and a Job is read once only when its pods went away.
//!
//! The watches are `kube::runtime::watcher`s: a list, then a watch from the list's resource
//! version with bookmarks; a watch that expires (410 Gone) lists again. What changes is sent
//! to the executor of the pod's run (by its `sluice.dev/run` label); node changes to all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use tokio::sync::mpsc;

mod nodes;

use super::names;
use crate::executor::Error;
pub use nodes::NodeState;

/// Every call this file makes, by resource: what the Helm chart's Role (and its ClusterRole,
/// for nodes) must grant, no more (a test holds `charts/sluice/templates/rbac.yaml` to it).
pub const VERBS: &[(&str, &[&str])] = &[
    ("pods", &["create", "delete", "list", "watch"]),
    ("pods/log", &["get"]),
    ("services", &["create", "delete"]),
    ("events", &["list"]),
    ("jobs", &["create", "delete", "get"]),
    ("nodes", &["list", "watch"]),
];

/// How long the first lists of pods and nodes may take before the API server is taken as
/// unreachable.
const LISTED_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// At most this many requests a second from one process (a burst of as many), besides the
/// watches: the API server's priority and fairness is not the only guard.
const RATE: u32 = 50;

/// What changed, for an executor: a pod of its run (by name), or the nodes.
#[derive(Debug, Clone)]
pub enum Change {
    Pod(String),
    Nodes,
}

/// What the watches know.
#[derive(Default)]
pub struct Seen {
    /// Pods by worker: a pod of an Indexed Job (`admission: kueue`) as `JOB-INDEX` (its
    /// hostname, the name a pod per worker would have), any other by its name.
    pub pods: HashMap<String, Pod>,
    /// Pods the watch saw deleted, with their last state, until an executor takes them.
    pub deleted: HashMap<String, Pod>,
    pub nodes: BTreeMap<String, NodeState>,
    /// Whether the first list of pods has been read (before it, "no such pod" means nothing).
    pub pods_listed: bool,
    pub nodes_listed: bool,
    /// During a (re-)list of pods: those listed so far.
    relisting: Option<HashSet<String>>,
}

pub struct Connection {
    pub client: kube::Client,
    pub namespace: String,
    limiter: governor::DefaultDirectRateLimiter,
    pub seen: Mutex<Seen>,
    ready: tokio::sync::watch::Receiver<bool>,
    ready_tx: tokio::sync::watch::Sender<bool>,
    subscribers: Mutex<HashMap<String, mpsc::UnboundedSender<Change>>>,
    /// Handles asked to stop by this process (`stop_asked`).
    pub stopping: Mutex<HashSet<String>>,
    watches: Mutex<Vec<tokio::task::AbortHandle>>,
    /// The last error of a watch, for the message when the API server does not answer.
    last_error: Mutex<Option<String>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        for w in self
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            w.abort();
        }
    }
}

/// API calls by verb and resource (`create pods`, `watch pods`...), as the clients of this
/// process sent them.
pub struct Calls {
    pub total: AtomicU64,
    pub by: Mutex<BTreeMap<String, u64>>,
}

static CALLS: Calls = Calls {
    total: AtomicU64::new(0),
    by: Mutex::new(BTreeMap::new()),
};

impl Calls {
    fn count(&self, method: &str, path: &str, query: &str) {
        self.total.fetch_add(1, Ordering::Relaxed);
        let watch = query
            .split('&')
            .any(|p| p == "watch=true" || p == "watch=1");
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // /api/v1/namespaces/NS/pods[/NAME[/log]], /api/v1/nodes[/NAME]
        let (resource, named) = match parts.as_slice() {
            [_, _, "namespaces", _, r] | [_, _, _, "namespaces", _, r] => ((*r).to_owned(), false),
            [_, _, "namespaces", _, r, _] | [_, _, _, "namespaces", _, r, _] => {
                ((*r).to_owned(), true)
            }
            [_, _, "namespaces", _, r, _, sub] => (format!("{r}/{sub}"), true),
            [_, _, r] => ((*r).to_owned(), false),
            [_, _, r, _] => ((*r).to_owned(), true),
            _ => (path.to_owned(), false),
        };
        let verb = match (method, named, watch) {
            ("GET", _, true) => "watch",
            ("GET", false, _) => "list",
            ("GET", true, _) => "get",
            ("POST", _, _) => "create",
            ("DELETE", _, _) => "delete",
            ("PATCH", _, _) => "patch",
            ("PUT", _, _) => "update",
            (m, _, _) => m,
        };
        let mut by = self.by.lock().unwrap_or_else(PoisonError::into_inner);
        *by.entry(format!("{verb} {resource}")).or_default() += 1;
    }
}

static CONNECTIONS: Mutex<Vec<(String, Weak<Connection>)>> = Mutex::new(Vec::new());

/// The API calls this process has made so far, by verb and resource (for `/metrics`).
pub fn calls() -> BTreeMap<String, u64> {
    CALLS
        .by
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

pub(super) fn unavailable(what: &str) -> impl FnOnce(kube::Error) -> Error + '_ {
    move |e| Error::Unavailable(format!("Kubernetes: {what}: {e}"))
}

impl Connection {
    /// The process's connection for `namespace` (None: the kubeconfig's or service account's),
    /// made at first use from the environment as kubectl finds it (`KUBECONFIG`,
    /// `~/.kube/config`, or the pod's service account), and kept while some executor holds it.
    pub async fn get(namespace: Option<&str>) -> Result<Arc<Connection>, Error> {
        let wanted = namespace.unwrap_or("").to_owned();
        let find = |all: &Vec<(String, Weak<Connection>)>| {
            all.iter()
                .find(|(ns, _)| *ns == wanted)
                .and_then(|(_, c)| c.upgrade())
        };
        if let Some(c) = find(&CONNECTIONS.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(c);
        }
        let made = Connection::connect(namespace, true).await?;
        let mut all = CONNECTIONS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(_, c)| c.strong_count() > 0);
        if let Some(c) = find(&all) {
            return Ok(c);
        }
        // Found by the namespace asked for, and by the one it resolved to (a handle names
        // the latter).
        if made.namespace != wanted {
            all.push((made.namespace.clone(), Arc::downgrade(&made)));
        }
        all.push((wanted.clone(), Arc::downgrade(&made)));
        Ok(made)
    }

    /// A connection for one request from outside a run's engine (a log, a preemption): the
    /// process's own when it has one, else one without watches, not kept (a `sluice logs`
    /// must not list the cluster's pods and nodes to read one pod's log).
    pub async fn at_hand(namespace: Option<&str>) -> Result<Arc<Connection>, Error> {
        let wanted = namespace.unwrap_or("");
        let kept = CONNECTIONS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find(|(ns, _)| ns == wanted)
            .and_then(|(_, c)| c.upgrade());
        match kept {
            Some(c) => Ok(c),
            None => Connection::connect(namespace, false).await,
        }
    }

    async fn connect(namespace: Option<&str>, watch: bool) -> Result<Arc<Connection>, Error> {
        let config = kube::Config::infer().await.map_err(|e| {
            Error::Unavailable(format!(
                "Kubernetes: no cluster configuration found ({e}); set KUBECONFIG, or run the server in the cluster with its service account"
            ))
        })?;
        let layer = tower::util::MapRequestLayer::new(
            move |req: axum::http::Request<kube::client::Body>| {
                CALLS.count(
                    req.method().as_str(),
                    req.uri().path(),
                    req.uri().query().unwrap_or(""),
                );
                req
            },
        );
        let builder = kube::client::ClientBuilder::try_from(config)
            .map_err(unavailable("cannot make a client"))?;
        let client = builder.with_layer(&layer).build();
        let namespace = namespace
            .map(str::to_owned)
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let (ready_tx, ready) = tokio::sync::watch::channel(false);
        let rate = NonZeroU32::new(RATE).unwrap_or(NonZeroU32::MIN);
        let conn = Arc::new(Connection {
            client: client.clone(),
            namespace: namespace.clone(),
            limiter: governor::RateLimiter::direct(governor::Quota::per_second(rate)),
            seen: Mutex::new(Seen::default()),
            ready,
            ready_tx,
            subscribers: Mutex::new(HashMap::new()),
            stopping: Mutex::new(HashSet::new()),
            watches: Mutex::new(Vec::new()),
            last_error: Mutex::new(None),
        });
        if !watch {
            return Ok(conn);
        }
        // Started once the connection exists: a watch whose first event came before it would
        // find no connection to hand it to, and stop.
        let me = Arc::downgrade(&conn);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let nodes: Api<Node> = Api::all(client);
        let selector = format!("{}=true", names::MANAGED);
        let watches = vec![
            spawn_watch(
                pods,
                watcher::Config::default().labels(&selector),
                me.clone(),
                |c: &Connection, e| c.pod_event(e),
            ),
            spawn_watch(
                nodes,
                watcher::Config::default(),
                me,
                |c: &Connection, e| c.node_event(e),
            ),
        ];
        *conn.watches.lock().unwrap_or_else(PoisonError::into_inner) = watches;
        Ok(conn)
    }

    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the first lists of pods and nodes have been read; an API server that
    /// does not answer by `LISTED_WITHIN` is an error saying why (its last failure).
    pub async fn listed(&self) -> Result<(), Error> {
        let mut ready = self.ready.clone();
        match tokio::time::timeout(LISTED_WITHIN, ready.wait_for(|r| *r)).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let why = self
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
                    .unwrap_or_else(|| "no answer".into());
                Err(Error::Unavailable(format!(
                    "Kubernetes: the API server did not list pods and nodes within {}s: {why}",
                    LISTED_WITHIN.as_secs()
                )))
            }
        }
    }

    /// Changes to run `run`'s pods (and to the nodes) come to the returned receiver.
    pub fn subscribe(&self, run: &str) -> mpsc::UnboundedReceiver<Change> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(names::label_value(run), tx);
        rx
    }

    pub fn unsubscribe(&self, run: &str) {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&names::label_value(run));
    }

    fn tell(&self, run: Option<&str>, change: Change) {
        let mut subs = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match run {
            Some(run) => {
                if let Some(tx) = subs.get(run)
                    && tx.send(change).is_err()
                {
                    subs.remove(run);
                }
            }
            None => subs.retain(|_, tx| tx.send(change.clone()).is_ok()),
        }
    }

    fn pod_event(&self, event: watcher::Event<Pod>) {
        let run_of = |p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::RUN).cloned())
        };
        let name_of = worker_of;
        match event {
            watcher::Event::Init => self.seen().relisting = Some(HashSet::new()),
            watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                let (name, run) = (name_of(&p), run_of(&p));
                {
                    let mut seen = self.seen();
                    if let Some(listed) = seen.relisting.as_mut() {
                        listed.insert(name.clone());
                    }
                    // A Job's worker with two pods (re-admitted while its old one
                    // terminates): the newer one is followed.
                    let stale = seen
                        .pods
                        .get(&name)
                        .is_some_and(|q| super::kueue::supersedes(q, &p));
                    if !stale {
                        seen.deleted.remove(&name);
                        seen.pods.insert(name.clone(), p);
                    }
                }
                self.tell(run.as_deref(), Change::Pod(name));
            }
            watcher::Event::Delete(p) => {
                let (name, run) = (name_of(&p), run_of(&p));
                {
                    let mut seen = self.seen();
                    // A Job's worker may have a newer pod already (a Job resumed): only the
                    // pod seen for the worker is taken away.
                    let newer = seen
                        .pods
                        .get(&name)
                        .is_some_and(|q| q.metadata.uid != p.metadata.uid);
                    if !newer {
                        seen.pods.remove(&name);
                        seen.deleted.insert(name.clone(), p);
                    }
                }
                self.tell(run.as_deref(), Change::Pod(name));
            }
            watcher::Event::InitDone => {
                // A re-list (after a 410): pods it did not list again were deleted meanwhile.
                let gone: Vec<(String, Option<String>)> = {
                    let mut seen = self.seen();
                    seen.pods_listed = true;
                    let listed = seen.relisting.take().unwrap_or_default();
                    let gone: Vec<String> = seen
                        .pods
                        .keys()
                        .filter(|n| !listed.contains(*n))
                        .cloned()
                        .collect();
                    gone.into_iter()
                        .filter_map(|n| {
                            let p = seen.pods.remove(&n)?;
                            let run = run_of(&p);
                            seen.deleted.insert(n.clone(), p);
                            Some((n, run))
                        })
                        .collect()
                };
                for (name, run) in gone {
                    self.tell(run.as_deref(), Change::Pod(name));
                }
                self.mark_listed();
                self.tell(None, Change::Nodes);
            }
        }
    }

    fn mark_listed(&self) {
        let both = {
            let seen = self.seen();
            seen.pods_listed && seen.nodes_listed
        };
        if both {
            let _ = self.ready_tx.send(true);
        }
    }

    /// Waits for the rate limiter's leave to make one request.
    pub(super) async fn turn(&self) {
        self.limiter.until_ready().await;
    }

    pub(super) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a pod; one that exists already (made before a restart) is taken as made.
    pub async fn create_pod(&self, pod: &Pod) -> Result<(), Error> {
        self.turn().await;
        match self.pods().create(&PostParams::default(), pod).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(unavailable("cannot create a pod")(e)),
        }
    }

    /// Creates a gang's Service; one that exists already is taken as made.
    pub async fn create_service(&self, service: &Service) -> Result<(), Error> {
        self.turn().await;
        let api: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        match api.create(&PostParams::default(), service).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(unavailable("cannot create a service")(e)),
        }
    }

    /// Deletes a pod with `grace` seconds between SIGTERM and SIGKILL (None: the pod's own);
    /// one already gone is fine.
    pub async fn delete_pod(&self, name: &str, grace: Option<u32>) -> Result<(), Error> {
        self.turn().await;
        let params = DeleteParams {
            grace_period_seconds: grace,
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match self.pods().delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(unavailable("cannot delete a pod")(e)),
        }
    }

    pub async fn delete_service(&self, name: &str) -> Result<(), Error> {
        self.turn().await;
        let api: Api<Service> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(unavailable("cannot delete a service")(e)),
        }
    }

    /// The real name of worker `worker`'s pod (a Job's pods have generated names), as the
    /// watch last saw it; `worker` itself when unseen.
    pub fn pod_name(&self, worker: &str) -> String {
        let seen = self.seen();
        seen.pods
            .get(worker)
            .or_else(|| seen.deleted.get(worker))
            .and_then(|p| p.metadata.name.clone())
            .unwrap_or_else(|| worker.to_owned())
    }

    /// A pod's log as the kubelet keeps it (what its runtime printed: the attempt's lines).
    pub async fn pod_log(&self, name: &str) -> Result<String, Error> {
        self.turn().await;
        let params = kube::api::LogParams {
            container: Some("step".into()),
            ..kube::api::LogParams::default()
        };
        self.pods()
            .logs(name, &params)
            .await
            .map_err(unavailable("cannot read a pod's log"))
    }

    /// Why a pending pod waits, from its events, when its status says nothing (the newest
    /// warning's reason and message).
    pub async fn pod_events(&self, name: &str) -> Option<String> {
        self.turn().await;
        let api: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let params =
            kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
        let list = api.list(&params).await.ok()?;
        list.items
            .iter()
            .rfind(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or("Warning"),
                    e.message.as_deref().unwrap_or("")
                )
            })
    }
}

/// The worker a pod is: `JOB-INDEX` for a pod of an Indexed Job (its completion index, from
/// the annotation the Job controller writes), else the pod's name.
pub fn worker_of(p: &Pod) -> String {
    let name = p.metadata.name.clone().unwrap_or_default();
    let job = p.metadata.labels.as_ref().and_then(|l| {
        l.get("batch.kubernetes.io/job-name")
            .or_else(|| l.get("job-name"))
    });
    let index = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(JOB_INDEX));
    match (job, index) {
        (Some(job), Some(index)) => format!("{job}-{index}"),
        _ => name,
    }
}

/// The annotation (and label) of a pod's index in an Indexed Job.
pub const JOB_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// Follows `api` with a watcher, handing each event to the connection while it lives.
fn spawn_watch<K, F>(
    api: Api<K>,
    config: watcher::Config,
    me: Weak<Connection>,
    apply: F,
) -> tokio::task::AbortHandle
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&Connection, watcher::Event<K>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            let Some(conn) = me.upgrade() else {
                return;
            };
            match event {
                Ok(e) => apply(&conn, e),
                Err(e) => {
                    tracing::warn!("Kubernetes: a watch failed ({e}); it starts again");
                    *conn
                        .last_error
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    drop(conn);
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_role_grants_exactly_the_calls_the_executor_makes() {
        let code: std::collections::BTreeSet<String> = VERBS
            .iter()
            .flat_map(|(r, verbs)| verbs.iter().map(move |v| format!("{v} {r}")))
            .collect();
        assert_eq!(sluice_e2e::kube::chart_role(), code);
    }

    #[test]
    fn calls_are_named_by_verb_and_resource() {
        let calls = Calls {
            total: AtomicU64::new(0),
            by: Mutex::new(BTreeMap::new()),
        };
        calls.count("POST", "/api/v1/namespaces/ns/pods", "");
        calls.count(
            "GET",
            "/api/v1/namespaces/ns/pods",
            "labelSelector=a&watch=true",
        );
        calls.count("GET", "/api/v1/namespaces/ns/pods", "labelSelector=a");
        calls.count(
            "GET",
            "/api/v1/namespaces/ns/pods/p-0/log",
            "container=step",
        );
        calls.count("DELETE", "/api/v1/namespaces/ns/pods/p-0", "");
        calls.count("GET", "/api/v1/nodes", "watch=true");
        let by = calls.by.lock().expect("counts");
        let names: Vec<&str> = by.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "create pods",
                "delete pods",
                "get pods/log",
                "list pods",
                "watch nodes",
                "watch pods"
            ]
        );
    }
}
