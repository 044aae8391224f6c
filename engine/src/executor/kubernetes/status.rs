//! What Kubernetes says about a worker's pod, as the step's reason will say it
//! (`../shared/spec/cluster.md`, "On Kubernetes"): `OOMKilled (exit code 137)`,
//! `ImagePullBackOff: ...`, `Evicted: ...`, `Unschedulable: ...`.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// A worker's pod, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Worker {
    /// Not running yet; why, when the pod says (`Unschedulable: ...`, `ContainerCreating`).
    Pending(Option<String>),
    Running,
    /// Its container ended; what Kubernetes adds to the runtime's record (an OOM kill).
    Ended {
        killed: Option<String>,
    },
    /// It can never run (its image cannot be pulled, its runtime could not be installed): the
    /// attempt failed, with this reason.
    Failed(String),
    /// Kubernetes took it away (evicted): the attempt is lost and resumes from its checkpoint.
    Lost(String),
}

/// Waiting reasons that do not go away by waiting.
const HOPELESS: &[&str] = &[
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

fn words(reason: &str, message: Option<&str>) -> String {
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(m) => format!("{reason}: {m}"),
        None => reason.to_owned(),
    }
}

fn hopeless(statuses: Option<&Vec<ContainerStatus>>) -> Option<String> {
    statuses?.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        HOPELESS
            .contains(&reason)
            .then(|| words(reason, waiting.message.as_deref()))
    })
}

/// The pod of a worker, classified.
pub fn of(pod: &Pod) -> Worker {
    let Some(status) = pod.status.as_ref() else {
        return Worker::Pending(None);
    };
    if status.reason.as_deref() == Some("Evicted") {
        return Worker::Lost(words("Evicted", status.message.as_deref()));
    }
    // The node's kubelet refused the pinned pod at admission (`OutOfnvidia.com/gpu`: pods
    // sluice does not know hold the room): a failed placement, queued again, not the step's
    // failure.
    if status.phase.as_deref() == Some("Failed")
        && let Some(reason) = status.reason.as_deref()
        && (reason.starts_with("OutOf")
            || matches!(reason, "UnexpectedAdmissionError" | "NodeAffinity"))
    {
        return Worker::Lost(words(reason, status.message.as_deref()));
    }
    let main = status
        .container_statuses
        .as_ref()
        .and_then(|c| c.iter().find(|c| c.name == "step").or_else(|| c.first()));
    match status.phase.as_deref() {
        Some("Succeeded" | "Failed") => {
            let init_failed = status.init_container_statuses.as_ref().and_then(|c| {
                c.iter().find_map(|c| {
                    let t = c.state.as_ref()?.terminated.as_ref()?;
                    (t.exit_code != 0).then(|| {
                        format!(
                            "Init:Error: sluice-runtime could not be installed from {} (exit code {})",
                            c.image, t.exit_code
                        )
                    })
                })
            });
            if let Some(why) = init_failed {
                return Worker::Failed(why);
            }
            let terminated = main
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.as_ref());
            let killed = terminated
                .filter(|t| t.reason.as_deref() == Some("OOMKilled"))
                .map(|_| "OOMKilled (exit code 137)".to_owned());
            Worker::Ended { killed }
        }
        Some("Running") => Worker::Running,
        _ => {
            if let Some(why) = hopeless(status.init_container_statuses.as_ref())
                .or_else(|| hopeless(status.container_statuses.as_ref()))
            {
                return Worker::Failed(why);
            }
            let unschedulable = status.conditions.as_ref().and_then(|c| {
                c.iter().find(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            });
            if let Some(c) = unschedulable {
                return Worker::Pending(Some(words("Unschedulable", c.message.as_deref())));
            }
            let waiting = main
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone());
            Worker::Pending(waiting)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).expect("a pod")
    }

    #[test]
    fn statuses_become_the_reasons_the_spec_names() {
        let oom = pod(
            json!({"phase": "Failed", "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(
            of(&oom),
            Worker::Ended {
                killed: Some("OOMKilled (exit code 137)".into())
            }
        );
        let pull = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"i\""}}}]}),
        );
        assert_eq!(
            of(&pull),
            Worker::Failed("ImagePullBackOff: Back-off pulling image \"i\"".into())
        );
        let transient = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
        );
        assert_eq!(of(&transient), Worker::Pending(Some("ErrImagePull".into())));
        let evicted = pod(
            json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
        );
        assert_eq!(
            of(&evicted),
            Worker::Lost("Evicted: The node was low on resource: memory.".into())
        );
        let refused = pod(
            json!({"phase": "Failed", "reason": "OutOfnvidia.com/gpu", "message": "Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 4, capacity: 4"}),
        );
        assert_eq!(
            of(&refused),
            Worker::Lost("OutOfnvidia.com/gpu: Node didn't have enough resource: nvidia.com/gpu, requested: 4, used: 4, capacity: 4".into())
        );
        let unsched = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes are available"}]}),
        );
        assert_eq!(
            of(&unsched),
            Worker::Pending(Some("Unschedulable: 0/2 nodes are available".into()))
        );
        let done = pod(json!({"phase": "Succeeded"}));
        assert_eq!(of(&done), Worker::Ended { killed: None });
        assert_eq!(of(&pod(json!({"phase": "Running"}))), Worker::Running);
    }
}
