//! The Kubernetes executor (`executor: kubernetes`): each worker of an attempt is a pod pinned
//! to the node the scheduler chose, a gang's workers find worker 0 through a headless Service,
//! and the pods' runtimes report through the object store. See `docs/kubernetes.md` for the
//! choices and why.
//!
//! The files: `names` (deterministic names and labels), `manifest` (the pod and Service),
//! `assess` (an attempt's pods turned into its end or loss),
//! `connection` (the process's client and its watches of pods and nodes), `status` (what a
//! pod's status means for the attempt), `record` (what the runtimes left in the object store).
//!
//! An attempt's [`Handle`] is `kubernetes:NAMESPACE/BASE/WORKERS/KEY`: where its pods are
//! (`BASE-0` ... `BASE-(WORKERS-1)`) and where its workers' records are (`KEY/pods/N/`); with
//! `admission: kueue` (`kueue`: one suspended Indexed Job `BASE` per attempt, admitted by
//! Kueue) BASE is written `job:BASE`.

mod assess;
mod connection;
pub mod kueue;
pub mod manifest;
pub mod names;
mod record;
pub mod status;

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_runtime::contract;
use sluice_runtime::objects::Objects;
use tokio::sync::mpsc;

use super::{
    AttemptId, Capacity, Error, Event, Executor, Handle, Placement, Probe, Reason, Settings,
};
use crate::scheduler::{NodeRef, NodeSource};
use crate::spec::model::{ClusterPool, KubernetesSpec};
use connection::{Change, Connection};
pub use connection::{VERBS, calls};

const PREFIX: &str = "kubernetes:";

/// Where an attempt's pods and records are, as its handle says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Where {
    pub namespace: String,
    pub base: String,
    pub workers: u32,
    /// The attempt's object-store key (`run::launch::object_key`).
    pub key: String,
    /// Whether the attempt is a Job `BASE` (`admission: kueue`) rather than a pod per worker.
    pub job: bool,
}

impl Where {
    pub fn parse(handle: &Handle) -> Option<Where> {
        let rest = handle.as_str().strip_prefix(PREFIX)?;
        let mut parts = rest.splitn(4, '/');
        let namespace = parts.next()?.to_owned();
        let base = parts.next()?;
        let (base, job) = match base.strip_prefix("job:") {
            Some(b) => (b.to_owned(), true),
            None => (base.to_owned(), false),
        };
        let workers = parts.next()?.parse().ok()?;
        let key = parts.next()?.to_owned();
        Some(Where {
            namespace,
            base,
            workers,
            key,
            job,
        })
    }

    fn handle(&self) -> Handle {
        let job = if self.job { "job:" } else { "" };
        Handle::new(format!(
            "{PREFIX}{}/{job}{}/{}/{}",
            self.namespace, self.base, self.workers, self.key
        ))
    }

    /// Worker `worker`'s pod: its name, or for a Job's pod the name the watch knows it by
    /// (`Connection::pod_name` gives its real one).
    pub fn pod(&self, worker: u32) -> String {
        names::pod(&self.base, worker)
    }

    /// Worker `worker`'s record in the object store (`SLUICE_POD_KEY`).
    pub fn record(&self, worker: u32) -> String {
        format!("{}/pods/{worker}", self.key)
    }
}

/// Whether a handle is one of this executor's.
pub fn is_handle(handle: &str) -> bool {
    handle.starts_with(PREFIX)
}

/// Asks an attempt's pods to stop, from outside its run's engine (`sluice preempt`): they are
/// deleted with their own grace period, so their runtimes record `Terminated` and the run's
/// engine queues the step again.
pub async fn stop(handle: &str, _reason: Reason) -> Result<(), Error> {
    let Some(at) = Where::parse(&Handle::new(handle)) else {
        return Ok(());
    };
    let conn = Connection::at_hand(Some(&at.namespace)).await?;
    if let Ok(mut s) = conn.stopping.lock() {
        s.insert(handle.to_owned());
    }
    if at.job {
        return conn.delete_job(&at.base).await;
    }
    for i in 0..at.workers {
        conn.delete_pod(&at.pod(i), None).await?;
    }
    Ok(())
}

/// A running attempt's log so far, from its worker 0's pod (None: no pod, or no cluster).
pub async fn live_log(handle: &str) -> Option<Vec<u8>> {
    let at = Where::parse(&Handle::new(handle))?;
    let conn = Connection::at_hand(Some(&at.namespace)).await.ok()?;
    let name = if at.job {
        pod_of_job(&conn, &at).await?
    } else {
        at.pod(0)
    };
    conn.pod_log(&name).await.ok().map(String::into_bytes)
}

/// A Kubernetes attempt's log as its workers' runtimes recorded it in the object store (what
/// the executor merges into the attempt's `logs/output.log` once it ended); None for another
/// handle, or nothing recorded.
pub async fn recorded_log(handle: &str, objects: &Objects) -> Option<Vec<u8>> {
    let at = Where::parse(&Handle::new(handle))?;
    Some(record::log(objects, &at).await).filter(|l| !l.is_empty())
}

/// Worker 0's pod of a Job attempt, for a process without a watch (`sluice logs`): the pod
/// list of the Job's worker 0 through the API.
async fn pod_of_job(conn: &Connection, at: &Where) -> Option<String> {
    let seen = conn.pod_name(&at.pod(0));
    if seen != at.pod(0) {
        return Some(seen);
    }
    conn.job_pod(&at.base, 0).await
}

/// The folder a worker runs in, in its container: the launch's, which `run::launch` made a
/// folder under the container's working directory (empty: that directory itself) or under
/// the attempt's own folder. Anything else (a path of the engine's machine) is refused, not
/// sent to the pod.
pub(super) fn container_workdir(launch: &contract::Launch) -> Result<PathBuf, Error> {
    crate::spec::paths::in_container(
        &launch.workdir.to_string_lossy(),
        Path::new(manifest::ATTEMPT_DIR),
    )
    .map_err(Error::Unavailable)
}

/// An attempt this executor follows.
struct Watched {
    id: AttemptId,
    at: Where,
    /// Since when it has been followed (its pods' creation, or the reattach; for a Job, its
    /// first pod: Kueue's wait is not a start that times out).
    since: Instant,
    /// A Job attempt: whether a pod of it has been seen (Kueue admitted it).
    admitted: bool,
    /// The runtimes' records read so far, by worker (read once a worker's pod has ended).
    results: Vec<Option<Option<contract::Result>>>,
    /// Why its workers wait, as last told to the driver.
    shown: Option<String>,
}

/// The Kubernetes executor of one run.
pub struct Kube {
    conn: Arc<Connection>,
    spec: KubernetesSpec,
    pools: Vec<ClusterPool>,
    run: String,
    team: String,
    settings: Settings,
    objects: Objects,
    capacity: Capacity,
    rx: mpsc::UnboundedReceiver<Change>,
    /// `admission: kueue`: attempts are Jobs that Kueue admits.
    kueue: bool,
    watched: HashMap<String, Watched>,
    by_pod: HashMap<String, String>,
    events: VecDeque<Event>,
    /// Attempts to look at again (their pods changed), until looked at.
    dirty: HashSet<String>,
    last_sweep: Instant,
    uploads: tokio::task::JoinSet<()>,
}

/// How often every followed attempt is looked at, changed or not (for its timeouts).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl Drop for Kube {
    fn drop(&mut self) {
        self.conn.unsubscribe(&self.run);
    }
}

impl Kube {
    /// The executor of run `run` (of `team`) on the Cluster's Kubernetes, keeping its records in
    /// `objects`.
    pub async fn new(
        spec: &KubernetesSpec,
        pools: &[ClusterPool],
        run: &str,
        team: &str,
        objects: Objects,
        settings: Settings,
    ) -> Result<Kube, Error> {
        let conn = Connection::get(spec.namespace.as_deref()).await?;
        let rx = conn.subscribe(run);
        Ok(Kube {
            spec: spec.clone(),
            pools: pools.to_vec(),
            run: run.to_owned(),
            team: team.to_owned(),
            settings,
            objects,
            capacity: Capacity::default(),
            rx,
            kueue: spec.admission == crate::spec::model::Admission::Kueue,
            watched: HashMap::new(),
            by_pod: HashMap::new(),
            events: VecDeque::new(),
            dirty: HashSet::new(),
            last_sweep: Instant::now(),
            uploads: tokio::task::JoinSet::new(),
            conn,
        })
    }

    /// What a change means: which attempts to look at again.
    fn note(&mut self, change: Change) {
        match change {
            Change::Pod(name) => {
                if let Some(step) = self.by_pod.get(&name) {
                    self.dirty.insert(step.clone());
                }
            }
            Change::Nodes => self.dirty.extend(self.watched.keys().cloned()),
        }
    }

    fn grace_seconds(&self) -> u32 {
        u32::try_from(self.settings.grace_period.as_secs()).unwrap_or(u32::MAX)
    }

    /// The Kubernetes node of each Cluster node index: a pool's nodes are the cluster's nodes
    /// carrying all of its labels, by name, as many as the pool declares. A node that is lost
    /// (not ready past the heartbeat timeout, or deleted) gives its place to the next one with the pool's labels (the scheduler's nodes
    /// stay the ones the Cluster declares; following the cluster's nodes into the scheduler is
    /// not done yet).
    /// The cluster's node, and its pool's index, for each node the scheduler chose. A pool
    /// read from the cluster names its nodes; a declared pool's `nodes` are the first of the
    /// cluster's nodes carrying its labels, by name, leaving out those lost past the
    /// heartbeat timeout.
    async fn node_names(&self, chosen: &[NodeRef]) -> Result<Vec<(String, usize)>, Error> {
        if let Some(named) = chosen
            .iter()
            .map(|r| match r {
                NodeRef::Named { pool, node } => self
                    .pools
                    .iter()
                    .position(|p| p.name == *pool)
                    .map(|p| (node.clone(), p)),
                NodeRef::Declared(_) => None,
            })
            .collect::<Option<Vec<_>>>()
        {
            return Ok(named);
        }
        self.conn.listed().await?;
        let seen = self.conn.seen();
        let mut all = Vec::new();
        for (p, pool) in self.pools.iter().enumerate() {
            let matching: Vec<&String> = seen
                .nodes
                .iter()
                .filter(|(_, n)| {
                    // A node not ready for less than the heartbeat timeout is given the
                    // benefit of the doubt (a blip), as its running pods are.
                    let lost = n
                        .not_ready
                        .as_ref()
                        .is_some_and(|(_, t)| t.elapsed() >= self.settings.heartbeat_timeout);
                    !n.gone && !lost && pool.labels.iter().all(|(k, v)| n.labels.get(k) == Some(v))
                })
                .map(|(name, _)| name)
                .collect();
            for i in 0..pool.nodes as usize {
                all.push(matching.get(i).map(|s| ((*s).clone(), p)).ok_or_else(|| {
                    let labels: Vec<String> = pool
                        .labels
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    (
                        pool.name.clone(),
                        pool.nodes,
                        matching.len(),
                        labels.join(","),
                    )
                }));
            }
        }
        chosen
            .iter()
            .map(|r| match r {
                NodeRef::Declared(i) => match all.get(*i) {
                    Some(Ok(name)) => Ok(name.clone()),
                    Some(Err((pool, declared, found, labels))) => Err(Error::Unavailable(format!(
                        "pool {pool} declares {declared} nodes but the cluster has {found} with the labels {labels}"
                    ))),
                    None => Err(Error::Unavailable(format!("no node {i} in the Cluster's pools"))),
                },
                NodeRef::Named { pool, node } => Err(Error::Unavailable(format!(
                    "the Cluster has no pool {pool} (for node {node})"
                ))),
            })
            .collect()
    }

    /// What follows the cluster's nodes, for a scheduler whose pools are read from it.
    pub fn node_source(&self) -> Arc<dyn NodeSource> {
        self.conn.clone()
    }

    fn follow(&mut self, id: &AttemptId, at: Where) {
        for w in 0..at.workers {
            self.by_pod.insert(at.pod(w), id.step.clone());
        }
        self.watched.insert(
            id.step.clone(),
            Watched {
                id: id.clone(),
                results: vec![None; at.workers as usize],
                shown: None,
                admitted: !at.job,
                at,
                since: Instant::now(),
            },
        );
    }
}

impl Executor for Kube {
    fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    fn handle(&self, id: &AttemptId) -> Handle {
        self.at(id, 1).handle()
    }

    fn runtime_dir(&self, _id: &AttemptId) -> PathBuf {
        PathBuf::from(manifest::ATTEMPT_DIR)
    }

    async fn prepare(
        &mut self,
        id: &AttemptId,
        launch: &contract::Launch,
    ) -> Result<Handle, Error> {
        Ok(self.at(id, launch.workers.max(1)).handle())
    }

    async fn discard(&mut self, _handle: &Handle) {}

    async fn launch(
        &mut self,
        id: &AttemptId,
        handle: &Handle,
        launch: &contract::Launch,
        placement: &Placement,
    ) -> Result<(), Error> {
        let at = Where::parse(handle)
            .ok_or_else(|| Error::Unavailable(format!("not a Kubernetes attempt: {handle}")))?;
        // Checked before anything is created.
        let workdir = container_workdir(launch)?;
        if at.job {
            return self.launch_job(id, &at, launch, placement).await;
        }
        let nodes = if placement.nodes.len() == at.workers as usize {
            self.node_names(&placement.nodes).await?
        } else {
            return Err(Error::Unavailable(format!(
                "the attempt has {} workers but {} nodes were chosen for it",
                at.workers,
                placement.nodes.len()
            )));
        };
        if at.workers > 1 {
            let service = manifest::service(&self.team, id, &at.base, &at.namespace)
                .map_err(|e| Error::Unavailable(format!("cannot write the gang's service: {e}")))?;
            self.conn.create_service(&service).await?;
        }
        let image = placement
            .image
            .clone()
            .unwrap_or_else(|| self.spec.default_image.clone());
        self.follow(id, at.clone());
        for worker in 0..at.workers {
            let mut mine = launch.clone();
            // One worker per pod; the device plugin gives it its GPUs; a folder in the
            // container.
            mine.workers = 1;
            mine.gpus.clear();
            mine.gpus_per_worker = 0;
            mine.hide_gpus = false;
            mine.workdir = workdir.clone();
            if at.workers > 1 {
                mine.env.extend(manifest::gang_env(
                    &at.base,
                    &at.namespace,
                    worker,
                    at.workers,
                ));
            }
            // Rank 0 keeps the outputs and syncs the checkpoint; the others restore it.
            mine.for_rank(worker);
            let key = at.record(worker);
            let (node, pool) = nodes
                .get(worker as usize)
                .map_or(("", usize::MAX), |(n, p)| (n.as_str(), *p));
            let taints = self
                .pools
                .get(pool)
                .map_or(&[][..], |p| p.taints.as_slice());
            let pod = manifest::pod(&manifest::WorkerPod {
                id,
                team: &self.team,
                base: &at.base,
                worker,
                workers: at.workers,
                node,
                namespace: &at.namespace,
                image: &image,
                runtime_image: &self.spec.runtime_image,
                service_account: self.spec.service_account.as_deref(),
                objects_secret: self.spec.objects_secret.as_deref(),
                grace_seconds: self.settings.grace_period.as_secs(),
                launch: &mine,
                key: &key,
                gpu: placement.gpu,
                millicpu: placement.millicpu,
                memory: placement.memory,
                extended: &placement.extended,
                taints,
            })
            .map_err(|e| Error::Unavailable(format!("cannot write the pod: {e}")))?;
            if let Err(e) = self.conn.create_pod(&pod).await {
                // None of a gang runs without all of it.
                self.halt_one(&id.step);
                return Err(e);
            }
        }
        Ok(())
    }

    async fn reattach(&mut self, id: &AttemptId, handle: &Handle) -> Result<Probe, Error> {
        let Some(at) = Where::parse(handle) else {
            return Ok(Probe::Lost(format!("not a Kubernetes attempt: {handle}")));
        };
        self.conn.listed().await?;
        let any_pod = {
            let seen = self.conn.seen();
            (0..at.workers).any(|i| seen.pods.contains_key(&at.pod(i)))
        };
        if !any_pod && at.job {
            return Ok(match self.reattach_job(id, at).await? {
                Some(probe) => probe,
                None => Probe::Running,
            });
        }
        if !any_pod {
            // Ended and cleaned up while no engine watched, or never created (the engine died
            // between its commit and the create): the records tell.
            let records = record::results(&self.objects, &at).await;
            if records.iter().all(Option::is_none) {
                // Never run: fence off a create still in flight from the engine that died,
                // so that the step's next attempt is its only one.
                for i in 0..at.workers {
                    let _ = self.conn.delete_pod(&at.pod(i), Some(0)).await;
                }
            }
            return Ok(match record::combine(records) {
                Some(Ok(r)) => Probe::Ended(Box::new(r)),
                Some(Err(why)) => Probe::Lost(why),
                None => Probe::Lost(
                    "its pods are gone without every worker's record (never created, or deleted while no engine watched)"
                        .to_owned(),
                ),
            });
        }
        self.follow(id, at);
        match self.assess(&id.step).await {
            Some(outcome) => {
                self.conclude(&id.step, outcome);
                // `conclude` queued it as an event; the driver asked here, so take it back.
                Ok(match self.events.pop_back() {
                    Some(Event::Ended {
                        result: Some(r), ..
                    }) => Probe::Ended(r),
                    Some(Event::Lost { reason, .. }) => Probe::Lost(reason),
                    _ => Probe::Lost("its record could not be read".into()),
                })
            }
            None => Ok(Probe::Running),
        }
    }

    async fn result(&self, handle: &Handle) -> Option<contract::Result> {
        let at = Where::parse(handle)?;
        record::combine(record::results(&self.objects, &at).await)?.ok()
    }

    async fn stop_asked(&self, handle: &Handle) -> bool {
        if self
            .conn
            .stopping
            .lock()
            .map(|s| s.contains(handle.as_str()))
            .unwrap_or(false)
        {
            return true;
        }
        let Some(at) = Where::parse(handle) else {
            return false;
        };
        let seen = self.conn.seen();
        (0..at.workers).any(|i| {
            seen.pods
                .get(&at.pod(i))
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        })
    }

    async fn stop(&self, handle: &Handle, _reason: Reason) -> Result<(), Error> {
        let Some(at) = Where::parse(handle) else {
            return Ok(());
        };
        if let Ok(mut s) = self.conn.stopping.lock() {
            s.insert(handle.as_str().to_owned());
        }
        // Deleted with the grace period: the kubelet sends SIGTERM, the runtime stops the
        // program, syncs its last checkpoint and records its end. A Job's pods have it as
        // their own, which its deletion in the background gives them.
        if at.job {
            return self.conn.delete_job(&at.base).await;
        }
        for i in 0..at.workers {
            self.conn
                .delete_pod(&at.pod(i), Some(self.grace_seconds()))
                .await?;
        }
        Ok(())
    }

    async fn metrics(&self, handle: &Handle, metric: &str) -> Vec<(u64, f64)> {
        let Some(at) = Where::parse(handle) else {
            return Vec::new();
        };
        record::curve(&self.objects, &at, metric).await
    }

    async fn log(&self, handle: &Handle, from: u64) -> Result<Vec<u8>, Error> {
        let Some(at) = Where::parse(handle) else {
            return Ok(Vec::new());
        };
        let text = match self.conn.pod_log(&self.conn.pod_name(&at.pod(0))).await {
            Ok(t) => t.into_bytes(),
            Err(_) => record::log(&self.objects, &at).await,
        };
        Ok(text
            .get(from as usize..)
            .map(<[u8]>::to_vec)
            .unwrap_or_default())
    }

    fn ended(&mut self, handle: &Handle, objects: &str) {
        let Some(at) = Where::parse(handle) else {
            return;
        };
        let store = self.objects.clone();
        let key = format!("{objects}/logs/output.log");
        self.uploads.spawn(async move {
            let merged = record::log(&store, &at).await;
            if merged.is_empty() {
                return;
            }
            if let Err(e) = store.put_bytes(&key, merged).await {
                tracing::warn!("cannot keep the log of {}: {e}", at.base);
            }
        });
        while self.uploads.try_join_next().is_some() {}
    }

    async fn settle(&mut self) {
        while self.uploads.join_next().await.is_some() {}
    }

    async fn next_event(&mut self) -> Event {
        // Cancel-safe: what changed is kept in `dirty` until assessed, so a call dropped in
        // the middle (the driver's other timers) loses nothing.
        loop {
            if let Some(event) = self.events.pop_front() {
                return event;
            }
            while let Ok(change) = self.rx.try_recv() {
                self.note(change);
            }
            // Timeouts (a pod that does not start, a node that stays away) need a look now
            // and then even when nothing changes.
            if self.last_sweep.elapsed() >= SWEEP_EVERY {
                self.dirty.extend(self.watched.keys().cloned());
                self.last_sweep = Instant::now();
            }
            if let Some(step) = self.dirty.iter().next().cloned() {
                let outcome = self.assess(&step).await;
                self.dirty.remove(&step);
                if let Some(outcome) = outcome {
                    self.conclude(&step, outcome);
                }
                continue;
            }
            let wake = tokio::time::Instant::from_std(self.last_sweep + SWEEP_EVERY);
            match tokio::time::timeout_at(wake, self.rx.recv()).await {
                Ok(Some(change)) => self.note(change),
                Ok(None) => tokio::time::sleep_until(wake).await,
                Err(_) => {}
            }
        }
    }

    fn halt(&mut self) {
        let steps: Vec<String> = self.watched.keys().cloned().collect();
        for step in steps {
            self.halt_one(&step);
        }
    }
}

impl Kube {
    fn at(&self, id: &AttemptId, workers: u32) -> Where {
        Where {
            namespace: self.conn.namespace.clone(),
            base: names::base(id),
            workers,
            key: crate::run::launch::object_key(&self.team, &id.run, &id.step, id.number),
            job: self.kueue,
        }
    }

    /// Deletes an attempt's pods at once, and stops following it.
    fn halt_one(&mut self, step: &str) {
        if let Some(w) = self.watched.remove(step) {
            tokio::spawn(self.forget(&w.at, 0));
        }
    }

    /// Forgets an attempt's pods (no longer followed) and returns what deletes them and a
    /// gang's Service: running pods with `grace` seconds, the others at once.
    fn forget(&mut self, at: &Where, grace: u32) -> impl Future<Output = ()> + Send + 'static {
        {
            let mut seen = self.conn.seen();
            for i in 0..at.workers {
                let name = at.pod(i);
                self.by_pod.remove(&name);
                seen.deleted.remove(&name);
            }
        }
        let conn = Arc::clone(&self.conn);
        let at = at.clone();
        async move {
            if at.job {
                // The Job's pods go with it, each with its own grace period.
                let _ = conn.delete_job(&at.base).await;
            } else {
                for i in 0..at.workers {
                    let running = matches!(
                        conn.seen().pods.get(&at.pod(i)).map(status::of),
                        Some(status::Worker::Running)
                    );
                    let _ = conn
                        .delete_pod(&at.pod(i), Some(if running { grace } else { 0 }))
                        .await;
                }
            }
            if at.workers > 1 {
                let _ = conn.delete_service(&at.base).await;
            }
        }
    }
}
