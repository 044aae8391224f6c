//! A Kubeflow Training Operator `PyTorchJob` (`kubeflow.org/v1`) as the trial: a sluice gang.
//!
//! `spec.pytorchReplicaSpecs.Master` (one replica: rank 0) and the optional `Worker` become one
//! gang step of `Master.replicas + Worker.replicas` workers (an absent Worker is 0 replicas;
//! a Worker without `replicas` is 1, as the operator defaults it). Each worker runs the
//! Master's primary container (command, image, env and resources read as a Job's are), with
//! `WORLD_SIZE`, `RANK`, `MASTER_ADDR`, `MASTER_PORT` and the `PET_*` variables set by sluice
//! as the operator sets them; so the Worker's primary container must be the Master's.
//! `spec.runPolicy.backoffLimit` and `activeDeadlineSeconds` are the trial's retries and
//! timeout, as a Job's are. A replica's `restartPolicy` is accepted and ignored: when a worker
//! of a sluice gang fails, the others are stopped and the gang restarts whole (within the
//! retries). What would change the run and cannot be honoured (`elasticPolicy`,
//! `nprocPerNode`, other replica types, unknown fields of a replica spec) is an error.

use super::container::{Owner, container_step, no_init_containers, primary};
use super::params::TrialParams;
use super::trial::{retry_or_deadline, with_workers};
use super::whole;
use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::MetricsFile;
use crate::spec::yaml::{Entry, Node, Value};

const REPLICA_FIELDS: &[&str] = &["replicas", "restartPolicy", "template"];

/// The gang step's entries and the Master's primary container (where the step is said to
/// be); None after saying what is wrong.
pub(super) fn pytorch_job<'n>(
    cx: &mut Cx<'_>,
    template: &Node,
    job: &'n Node,
    refs: &TrialParams,
    metrics_file: Option<&(MetricsFile, Pos)>,
) -> Option<(Vec<Entry>, &'n Node)> {
    let mut ok = true;
    let mut step = Vec::new();
    let Some(spec) = job.get("spec") else {
        cx.d.error(job.pos, "trialSpec needs spec.pytorchReplicaSpecs")
            .help("a PyTorchJob trial runs its Master and Worker replicas as a sluice gang");
        return None;
    };
    let Some(entries) = spec.as_map() else {
        cx.expected(spec, "trialSpec.spec", "a mapping");
        return None;
    };
    let mut unknown = false;
    for e in entries {
        let why = match e.key.as_str() {
            "pytorchReplicaSpecs" => continue,
            "runPolicy" => {
                ok &= run_policy(cx, &e.value, &mut step);
                continue;
            }
            "elasticPolicy" => {
                "a sluice gang has a fixed size (the Master's and Workers' replicas) and restarts whole; remove elasticPolicy"
            }
            "nprocPerNode" => {
                "sluice starts one process per gang worker (WORLD_SIZE is the replicas); remove nprocPerNode and count the processes as Worker replicas"
            }
            _ => {
                let d = cx.d.error(
                    e.key_pos,
                    format!("unknown field '{}' in a PyTorchJob's spec", e.key),
                );
                if e.key == "template" {
                    d.help("a PyTorchJob's pods are under spec.pytorchReplicaSpecs.Master.template (and Worker.template); a batch/v1 Job's under spec.template");
                } else {
                    d.suggest(&e.key, ["pytorchReplicaSpecs", "runPolicy"]);
                    if d.help.is_empty() {
                        d.help("a PyTorchJob's spec has pytorchReplicaSpecs and runPolicy");
                    }
                }
                unknown = true;
                ok = false;
                continue;
            }
        };
        cx.d.error(
            e.key_pos,
            format!("trialSpec.spec.{} cannot be honoured by sluice", e.key),
        )
        .help(why);
        ok = false;
    }
    let Some(replicas) = spec.get("pytorchReplicaSpecs") else {
        if unknown {
            return None;
        }
        cx.d.error(spec.pos, "trialSpec needs spec.pytorchReplicaSpecs")
            .help("a PyTorchJob trial runs its Master and Worker replicas as a sluice gang");
        return None;
    };
    for e in cx.fields(
        replicas,
        "trialSpec.spec.pytorchReplicaSpecs",
        &["Master", "Worker"],
    )? {
        ok &= replica_fields(cx, e);
    }
    let Some(master) = replicas.get("Master") else {
        cx.d.error(
            replicas.pos,
            "trialSpec needs spec.pytorchReplicaSpecs.Master",
        )
        .help("sluice runs the Master's primary container as rank 0 of the gang");
        return None;
    };
    let field = "pytorchReplicaSpecs.Master.replicas";
    match master.get("replicas").map(|n| (n, whole(cx, n, field, 0))) {
        None | Some((_, Some(1))) => {}
        Some((n, Some(k))) => {
            cx.d.error(
                n.pos,
                format!("{field}: {k} Masters cannot be run by sluice"),
            )
            .help("a PyTorchJob has one Master (rank 0); write replicas: 1 and count the others as Worker replicas");
            ok = false;
        }
        Some((_, None)) => ok = false,
    }
    let pod = |r: &'n Node| r.get("template").and_then(|t| t.get("spec"));
    let master_pod = pod(master);
    ok &= no_init_containers(cx, master_pod);
    let owner = Owner {
        containers: "spec.pytorchReplicaSpecs.Master.template.spec.containers",
        kind: "the PyTorchJob's Master",
        within: "the PyTorchJob's Master",
    };
    let container = primary(cx, template, master_pod, master, &owner)?;
    let mut workers = 0;
    if let Some(worker) = replicas.get("Worker") {
        let field = "pytorchReplicaSpecs.Worker.replicas";
        match worker.get("replicas").map(|n| whole(cx, n, field, 0)) {
            None => workers = 1,
            Some(Some(n)) => workers = n,
            Some(None) => ok = false,
        }
        let worker_pod = pod(worker);
        ok &= no_init_containers(cx, worker_pod);
        let owner = Owner {
            containers: "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            kind: "the PyTorchJob's Worker",
            within: "the PyTorchJob's Worker",
        };
        match primary(cx, template, worker_pod, worker, &owner) {
            Some(w) => ok &= same_container(cx, container, w),
            None => ok = false,
        }
    }
    step.extend(container_step(cx, container, refs, metrics_file, ok)?);
    with_workers(&mut step, master, 1 + workers);
    Some((step, container))
}

/// A replica spec's fields: `replicas` and `template` are read; `restartPolicy` is ignored,
/// since a sluice gang is restarted whole when one of its workers fails. False after
/// refusing another.
fn replica_fields(cx: &mut Cx<'_>, replica: &Entry) -> bool {
    let Some(entries) = replica.value.as_map() else {
        cx.expected(
            &replica.value,
            &format!("pytorchReplicaSpecs.{}", replica.key),
            "a mapping",
        );
        return false;
    };
    let mut ok = true;
    for e in entries {
        if REPLICA_FIELDS.contains(&e.key.as_str()) {
            continue;
        }
        let d = cx.d.error(
            e.key_pos,
            format!(
                "pytorchReplicaSpecs.{}.{} cannot be honoured by sluice",
                replica.key, e.key
            ),
        );
        d.suggest(&e.key, REPLICA_FIELDS.iter().copied());
        if d.help.is_empty() {
            d.help(format!(
                "sluice runs a replica spec's replicas and template as a gang (its restartPolicy is ignored: a gang restarts whole); remove '{}'",
                e.key
            ));
        }
        ok = false;
    }
    ok
}

/// `spec.runPolicy`: `backoffLimit` and `activeDeadlineSeconds` are the trial's retries and
/// timeout; what happens to finished pods (`cleanPodPolicy`, `ttlSecondsAfterFinished`) and
/// `schedulingPolicy` (a sluice gang starts only when all its workers fit) do not matter
/// here. False after refusing another field.
fn run_policy(cx: &mut Cx<'_>, node: &Node, step: &mut Vec<Entry>) -> bool {
    let Some(entries) = node.as_map() else {
        cx.expected(node, "trialSpec.spec.runPolicy", "a mapping");
        return false;
    };
    let mut ok = true;
    for e in entries {
        let field = format!("trialSpec.spec.runPolicy.{}", e.key);
        match e.key.as_str() {
            "backoffLimit" | "activeDeadlineSeconds" => {
                ok &= retry_or_deadline(cx, &e.key, &e.value, &field, step);
            }
            "cleanPodPolicy" | "ttlSecondsAfterFinished" | "schedulingPolicy" => {}
            _ => {
                cx.d.error(e.key_pos, format!("{field} cannot be honoured by sluice"))
                    .help("sluice reads runPolicy's backoffLimit and activeDeadlineSeconds; remove the field");
                ok = false;
            }
        }
    }
    ok
}

/// The Worker's primary container must run what the Master's does: a gang runs one command.
fn same_container(cx: &mut Cx<'_>, master: &Node, worker: &Node) -> bool {
    let differs = ["command", "args", "image", "env", "resources"]
        .into_iter()
        .find(|k| master.get(k).map(canonical) != worker.get(k).map(canonical));
    let Some(field) = differs else {
        return true;
    };
    cx.d.error(
        worker.pos,
        "sluice runs one command for every worker of a gang; Master and Worker must run the same container",
    )
    .help(format!(
        "the Worker's {field} differs from the Master's; write the Master's container under Worker too (as Katib's example does)"
    ));
    false
}

/// A node's text without its positions, to compare what two containers say.
fn canonical(node: &Node) -> String {
    match &node.value {
        Value::Scalar(s) => format!("{:?}", s.text),
        Value::Seq(items) => {
            let items: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", items.join(","))
        }
        Value::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|e| format!("{:?}:{}", e.key, canonical(&e.value)))
                .collect();
            format!("{{{}}}", entries.join(","))
        }
    }
}
