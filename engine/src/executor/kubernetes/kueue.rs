//! `admission: kueue`: each attempt is one suspended Indexed `batch/v1` Job labelled
//! `kueue.x-k8s.io/queue-name: TEAM`, which Kueue admits by un-suspending it; Kubernetes'
//! scheduler places its pods. sluice neither admits nor places these steps.
//!
//! Why a Job here, when sluice's own admission makes a pod per worker (`manifest`): Kueue
//! admits workloads it knows (Jobs, JobSets, ...), all or nothing, and only suspended ones; a
//! gang's workers are the Job's indexes (`parallelism` = `completions` = workers,
//! `backoffLimit: 0`: sluice decides retries). All pods share one template, so what differs
//! by worker is written as `{index}` and filled in by `sluice-runtime pod` from
//! `JOB_COMPLETION_INDEX` (`contract`, "Pod mode"). Pod `JOB-INDEX` has hostname `JOB-INDEX`
//! and the gang's Service as its subdomain, so `MASTER_ADDR` stays `BASE-0.BASE.NS.svc`.
//!
//! The Job's pods are followed through the same pod watch as pods per worker (their
//! template carries the `sluice.dev/*` labels), each known as its worker `BASE-INDEX`. No
//! pod yet means Kueue has not admitted the Job: the step says so and `podStartTimeout`
//! waits (it counts from the first pod). Kueue evicting the Job (suspended again, its pods
//! deleted) makes the attempt `Lost`, and the Job is deleted: the next attempt is a new Job.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use sluice_runtime::contract::{self, Launch};

use kube::api::{Api, DeleteParams, PostParams};

use super::assess::Outcome;
use super::connection::{Connection, JOB_INDEX, unavailable};
use super::manifest::{self, WorkerPod};
use super::names;
use super::{Kube, Where};
use crate::executor::{AttemptId, Error, Event, Placement, Probe};

/// How often a Job Kueue holds is read to see that it still exists (deleted by someone, it
/// would never get pods).
const STILL_THERE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// The label naming the Kueue LocalQueue of a Job.
pub const QUEUE: &str = "kueue.x-k8s.io/queue-name";

/// The step's reason while its Job waits for Kueue.
pub fn waiting(team: &str) -> String {
    format!("waiting: Kueue has not admitted the Job (queue {team})")
}

/// An attempt's Job from its worker pod (rank 0's, with `{index}` where workers differ): the
/// pod's spec as the template, no node, the flavor's labels as `nodeSelector`.
pub fn job(
    w: &WorkerPod<'_>,
    queue: &str,
    node_selector: &std::collections::BTreeMap<String, String>,
) -> Result<Job, serde_json::Error> {
    let pod = serde_json::to_value(manifest::pod(w)?)?;
    let mut spec = pod["spec"].clone();
    if let Some(o) = spec.as_object_mut() {
        // The Job controller names each pod's host `JOB-INDEX`.
        o.remove("hostname");
        o.remove("nodeName");
    }
    // Kueue counts requests: GPUs and extended resources are asked for as requests as well as
    // limits (requests of CPU and memory are there already).
    if let Some(c) = spec["containers"].get_mut(0) {
        let limits = c["resources"]["limits"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (name, n) in limits {
            if name != "memory" && c["resources"]["requests"].get(&name).is_none() {
                c["resources"]["requests"][name] = n;
            }
        }
    }
    if !node_selector.is_empty() {
        spec["nodeSelector"] = json!(node_selector);
    }
    let mut labels = pod["metadata"]["labels"].clone();
    if let Some(l) = labels.as_object_mut() {
        l.remove(names::WORKER);
    }
    let mut job_labels = labels.clone();
    job_labels[QUEUE] = json!(queue);
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": w.base,
            "namespace": w.namespace,
            "labels": job_labels,
            "annotations": pod["metadata"]["annotations"],
        },
        "spec": {
            "suspend": true,
            "parallelism": w.workers,
            "completions": w.workers,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "annotations": pod["metadata"]["annotations"]},
                "spec": spec,
            },
        },
    }))
}

impl Kube {
    /// Creates the attempt's Job (and a gang's Service) and follows it.
    pub(super) async fn launch_job(
        &mut self,
        id: &AttemptId,
        at: &Where,
        launch: &Launch,
        placement: &Placement,
    ) -> Result<(), Error> {
        let workdir = super::container_workdir(launch)?;
        if at.workers > 1 {
            let service = manifest::service(&self.team, id, &at.base, &at.namespace)
                .map_err(|e| Error::Unavailable(format!("cannot write the gang's service: {e}")))?;
            self.conn.create_service(&service).await?;
        }
        let mut mine = launch.clone();
        mine.workers = 1;
        mine.gpus.clear();
        mine.gpus_per_worker = 0;
        mine.hide_gpus = false;
        mine.workdir = workdir;
        if at.workers > 1 {
            for (k, v) in manifest::gang_env(&at.base, &at.namespace, 0, at.workers) {
                let v = if matches!(k.as_str(), "RANK" | "PET_NODE_RANK") {
                    contract::INDEX.to_owned()
                } else {
                    v
                };
                mine.env.insert(k, v);
            }
        }
        // The step's flavor: the first pool it names (by name or label value, as the
        // scheduler matches it), whose labels select the nodes and whose taints are tolerated.
        let pool = placement.flavor.as_ref().and_then(|f| {
            self.pools
                .iter()
                .find(|p| p.name == *f || p.labels.values().any(|v| v == f))
        });
        let image = placement
            .image
            .clone()
            .unwrap_or_else(|| self.spec.default_image.clone());
        let key = format!("{}/pods/{}", at.key, contract::INDEX);
        let w = WorkerPod {
            id,
            team: &self.team,
            base: &at.base,
            worker: 0,
            workers: at.workers,
            node: "",
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
            taints: pool.map_or(&[][..], |p| p.taints.as_slice()),
        };
        let selector = pool.map(|p| p.labels.clone()).unwrap_or_default();
        let job = job(&w, &names::label_value(&self.team), &selector)
            .map_err(|e| Error::Unavailable(format!("cannot write the job: {e}")))?;
        self.follow(id, at.clone());
        if let Err(e) = self.conn.create_job(&job).await {
            self.halt_one(&id.step);
            return Err(e);
        }
        Ok(())
    }

    /// Reattaching to an attempt whose Job has no pod: ended and cleaned up (its records
    /// tell), or still waiting for Kueue (its Job is there: followed), or never created (lost,
    /// and a create still in flight fenced off by deleting the Job).
    pub(super) async fn reattach_job(
        &mut self,
        id: &AttemptId,
        at: Where,
    ) -> Result<Option<Probe>, Error> {
        let records = super::record::results(&self.objects, &at).await;
        if records.iter().all(Option::is_none) && self.conn.job_suspended(&at.base).await?.is_some()
        {
            self.follow(id, at);
            return Ok(None);
        }
        if records.iter().all(Option::is_none) {
            let _ = self.conn.delete_job(&at.base).await;
        }
        Ok(Some(match super::record::combine(records) {
            Some(Ok(r)) => Probe::Ended(Box::new(r)),
            Some(Err(why)) => Probe::Lost(why),
            None => Probe::Lost(
                "its Job is gone without every worker's record (never created, or deleted while no engine watched)"
                    .to_owned(),
            ),
        }))
    }

    /// A Job attempt with no pod yet is waiting for Kueue: it says so (once), and its pods'
    /// start timeout counts from the first one seen. None once admitted; `Some(None)` while
    /// it waits; an outcome when it never will be admitted: it was stopped (cancelled,
    /// preempted) or its Job is gone (read once a minute while it waits).
    pub(super) async fn unadmitted(&mut self, step: &str) -> Option<Option<Outcome>> {
        let w = self.watched.get(step)?;
        if w.admitted {
            return None;
        }
        let at = w.at.clone();
        let any = {
            let seen = self.conn.seen();
            (0..at.workers).any(|i| {
                let name = at.pod(i);
                seen.pods.contains_key(&name) || seen.deleted.contains_key(&name)
            })
        };
        if any {
            let w = self.watched.get_mut(step)?;
            w.admitted = true;
            w.since = std::time::Instant::now();
            return None;
        }
        let asked = self
            .conn
            .stopping
            .lock()
            .is_ok_and(|s| s.contains(at.handle().as_str()));
        let gone = format!("the Job {} was deleted before Kueue admitted it", at.base);
        if asked {
            return Some(Some(Outcome::Lost(gone)));
        }
        if w.since.elapsed() >= STILL_THERE_EVERY {
            if let Ok(None) = self.conn.job_suspended(&at.base).await {
                return Some(Some(Outcome::Lost(gone)));
            }
            if let Some(w) = self.watched.get_mut(step) {
                // `since` is not a start yet: it paces these reads.
                w.since = std::time::Instant::now();
            }
        }
        let waiting = Some(waiting(&self.team));
        let w = self.watched.get_mut(step)?;
        if w.shown != waiting {
            w.shown = waiting.clone();
            self.events.push_back(Event::Waiting {
                attempt: w.id.clone(),
                reason: waiting,
            });
        }
        Some(None)
    }

    /// The reason of a Job attempt's loss: Kueue's eviction when the Job was suspended again.
    pub(super) async fn why_lost(&self, at: &Where, why: String) -> String {
        match self.conn.job_suspended(&at.base).await {
            Ok(Some(true)) => format!("evicted by Kueue: the Job {} was suspended again", at.base),
            _ => why,
        }
    }
}

/// Whether pod `current` of a Job's worker supersedes `incoming`, another pod of the same
/// worker: made later, or made in the same second and not terminating while `incoming` is.
pub(super) fn supersedes(current: &Pod, incoming: &Pod) -> bool {
    let (c, i) = (&current.metadata, &incoming.metadata);
    if c.uid == i.uid {
        return false;
    }
    match c.creation_timestamp.cmp(&i.creation_timestamp) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            c.deletion_timestamp.is_none() && i.deletion_timestamp.is_some()
        }
    }
}

impl Connection {
    /// The name of the pod of index `index` of Job `job`, listed through the API (for a
    /// process without a watch).
    pub async fn job_pod(&self, job: &str, index: u32) -> Option<String> {
        self.turn().await;
        let params =
            kube::api::ListParams::default().labels(&format!("job-name={job},{JOB_INDEX}={index}"));
        let list = self.pods().list(&params).await.ok()?;
        list.items.into_iter().find_map(|p| p.metadata.name)
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates an attempt's Job (`admission: kueue`); one that exists already (made before a
    /// restart) is taken as made.
    pub async fn create_job(&self, job: &Job) -> Result<(), Error> {
        self.turn().await;
        match self.jobs().create(&PostParams::default(), job).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(unavailable("cannot create a job")(e)),
        }
    }

    /// Deletes a Job and, in the background, its pods (each with its own grace period);
    /// one already gone is fine.
    pub async fn delete_job(&self, name: &str) -> Result<(), Error> {
        self.turn().await;
        let params = DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match self.jobs().delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(unavailable("cannot delete a job")(e)),
        }
    }

    /// Whether Job `name` exists and is suspended (None: it does not exist).
    pub async fn job_suspended(&self, name: &str) -> Result<Option<bool>, Error> {
        self.turn().await;
        match self.jobs().get_opt(name).await {
            Ok(job) => Ok(job.map(|j| j.spec.and_then(|s| s.suspend).unwrap_or(false))),
            Err(e) => Err(unavailable("cannot read a job")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::model::Taint;

    #[test]
    fn a_workers_newer_pod_is_followed_over_its_terminating_namesake() {
        let pod = |uid: &str, created: &str, deleting: bool| -> Pod {
            let mut meta = json!({"name": format!("j-0-{uid}"), "uid": uid,
                                  "creationTimestamp": created});
            if deleting {
                meta["deletionTimestamp"] = json!("2026-12-06T10:00:09Z");
            }
            serde_json::from_value(json!({"metadata": meta})).expect("a pod")
        };
        let old = pod("a", "2026-12-06T10:00:00Z", true);
        let new = pod("b", "2026-12-06T10:00:05Z", false);
        assert!(
            supersedes(&new, &old),
            "the old pod's updates are not followed"
        );
        assert!(!supersedes(&old, &new), "the new pod replaces the old");
        assert!(!supersedes(&new, &new), "a pod's own update is followed");
        let twin = pod("c", "2026-12-06T10:00:00Z", false);
        assert!(supersedes(&twin, &old), "same second: the live one");
    }

    #[test]
    fn an_attempt_is_one_suspended_indexed_job_queued_for_its_team() {
        let launch: Launch = serde_json::from_value(json!({"argv": ["true"], "workdir": "",
            "env": {"RANK": "{index}"}, "timeout_ms": null, "grace_ms": 1000, "inputs": [],
            "outputs": [], "output_dir": "/o", "objects": "file:///s", "outputs_key": "k",
            "checkpoint_dir": "/c", "checkpoint": null, "metrics_stdout": true}))
        .expect("a launch");
        let id = AttemptId {
            run: "r".into(),
            step: "train".into(),
            number: 2,
        };
        let taints = [Taint {
            key: "nvidia.com/gpu".into(),
            value: None,
            effect: Some("NoSchedule".into()),
        }];
        let w = WorkerPod {
            id: &id,
            team: "vision",
            base: "r-train-2",
            worker: 0,
            workers: 2,
            node: "",
            namespace: "ns",
            image: "python",
            runtime_image: "rt",
            service_account: None,
            objects_secret: None,
            grace_seconds: 5,
            launch: &launch,
            key: "teams/vision/runs/r/train/2/pods/{index}",
            gpu: 2,
            millicpu: 500,
            memory: 0,
            extended: &[("nvidia.com/mig-1g.10gb".to_owned(), 3)]
                .into_iter()
                .collect(),
            taints: &taints,
        };
        let selector = [("gpu".to_owned(), "a100".to_owned())]
            .into_iter()
            .collect();
        let job = serde_json::to_value(job(&w, "vision", &selector).expect("a Job")).expect("JSON");
        assert_eq!(job["metadata"]["name"], "r-train-2");
        assert_eq!(job["metadata"]["labels"][QUEUE], "vision");
        assert_eq!(job["metadata"]["labels"][names::MANAGED], "true");
        let spec = &job["spec"];
        assert_eq!(
            (
                &spec["suspend"],
                &spec["parallelism"],
                &spec["completions"],
                &spec["completionMode"],
                &spec["backoffLimit"]
            ),
            (
                &json!(true),
                &json!(2),
                &json!(2),
                &json!("Indexed"),
                &json!(0)
            )
        );
        let t = &spec["template"];
        assert_eq!(t["metadata"]["labels"][names::MANAGED], "true");
        assert_eq!(t["metadata"]["labels"][names::RUN], "r");
        assert!(
            t["metadata"]["labels"][names::WORKER].is_null(),
            "one template for all"
        );
        let pod = &t["spec"];
        assert!(pod["nodeName"].is_null() && pod["hostname"].is_null());
        assert_eq!(
            pod["subdomain"], "r-train-2",
            "MASTER_ADDR through the gang's Service"
        );
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(pod["nodeSelector"]["gpu"], "a100");
        assert_eq!(pod["tolerations"][0]["key"], "nvidia.com/gpu");
        let r = &pod["containers"][0]["resources"];
        assert_eq!(r["limits"]["nvidia.com/gpu"], "2");
        assert_eq!(r["requests"]["nvidia.com/gpu"], "2");
        // Extended resources too: Kueue counts requests.
        assert_eq!(r["limits"]["nvidia.com/mig-1g.10gb"], "3");
        assert_eq!(r["requests"]["nvidia.com/mig-1g.10gb"], "3");
        assert_eq!(r["requests"]["cpu"], "500m");
        let env = pod["containers"][0]["env"].as_array().expect("env");
        let key = env
            .iter()
            .find(|e| e["name"] == "SLUICE_POD_KEY")
            .expect("the key");
        assert_eq!(key["value"], "teams/vision/runs/r/train/2/pods/{index}");
    }
}
