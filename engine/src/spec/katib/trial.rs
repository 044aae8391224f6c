//! The trial template: the trial's Job (or PyTorchJob) as a sluice trial step. The primary
//! container gives the command, image, env and resources ([`super::container`]); a Job's
//! `backoffLimit` and `activeDeadlineSeconds` (a PyTorchJob's under `runPolicy`) give the
//! retries and the deadline; a PyTorchJob's replicas give a gang ([`super::pytorchjob`]). The
//! step is built as YAML nodes for the pipeline decoder to read.

use super::container::{Owner, container_step, no_init_containers, primary};
use super::params::{Params, trial_parameters};
use super::pytorchjob::pytorch_job;
use super::{TRIAL_TEMPLATE_FIELDS, whole};
use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::{MetricsFile, Step};
use crate::spec::yaml::{Entry, Node, Scalar, Value};

/// The kinds of trialSpec sluice runs, as the help names them.
const KINDS: &str = "the primary container of a batch/v1 Job (kind: Job) on this machine, or a Kubeflow PyTorchJob (kind: PyTorchJob) as a gang";

/// The trial: the primary container of the trial's Job, as a sluice trial step; a
/// PyTorchJob's, as a gang step.
pub(super) fn trial(
    cx: &mut Cx<'_>,
    node: &Node,
    params: Option<&Params>,
    metrics_file: Option<&(MetricsFile, Pos)>,
) -> Option<Step> {
    cx.fields(node, "trialTemplate", TRIAL_TEMPLATE_FIELDS)?;
    if let Some(c) = node.get("configMap") {
        cx.d.error(
            c.pos,
            "trialTemplate.configMap cannot be honoured by sluice",
        )
        .help("write the trial's Job inline, under trialTemplate.trialSpec");
        return None;
    }
    let refs = trial_parameters(cx, node, params);
    let Some(job) = node.get("trialSpec") else {
        cx.d.error(node.pos, "trialTemplate needs trialSpec (a batch/v1 Job)")
            .help(format!("sluice runs {KINDS}"));
        return None;
    };
    let (step, container) = match job.get("kind").and_then(Node::as_scalar) {
        Some(k) if k.text == "Job" => {
            let mut step = Vec::new();
            let mut ok = job_spec(cx, job.get("spec"), &mut step);
            let pod = job
                .get("spec")
                .and_then(|s| s.get("template"))
                .and_then(|t| t.get("spec"));
            ok &= no_init_containers(cx, pod);
            let owner = Owner {
                containers: "spec.template.spec.containers",
                kind: "a batch/v1 Job",
                within: "trialSpec",
            };
            let container = primary(cx, node, pod, job, &owner)?;
            step.extend(container_step(cx, container, &refs, metrics_file, ok)?);
            (step, container)
        }
        Some(k) if k.text == "PyTorchJob" => pytorch_job(cx, node, job, &refs, metrics_file)?,
        Some(k) => {
            let pos = job.get("kind").map_or(job.pos, |n| n.pos);
            cx.d.error(
                pos,
                format!("trialSpec kind '{}' cannot be run by sluice", k.text),
            )
            .help(format!("sluice runs {KINDS}"));
            return None;
        }
        None => {
            cx.d.error(job.pos, "trialSpec needs kind: Job")
                .help(format!("sluice runs {KINDS}"));
            return None;
        }
    };
    crate::spec::pipeline::decode_trial(cx, &map(container, step))
}

/// A Job's `spec`: its retries and deadline added to `step`; false after saying what cannot
/// be honoured.
fn job_spec(cx: &mut Cx<'_>, spec: Option<&Node>, step: &mut Vec<Entry>) -> bool {
    let mut ok = true;
    for e in spec.and_then(Node::as_map).unwrap_or_default() {
        let field = format!("trialSpec.spec.{}", e.key);
        match e.key.as_str() {
            "backoffLimit" | "activeDeadlineSeconds" => {
                ok &= retry_or_deadline(cx, &e.key, &e.value, &field, step);
            }
            "parallelism" | "completions" => match whole(cx, &e.value, &field, 0) {
                Some(0 | 1) => {}
                Some(n) => {
                    cx.d.error(
                        e.value.pos,
                        format!("{field}: {n} pods per trial cannot be honoured by sluice"),
                    )
                    .help("a sluice trial runs one process; remove the field");
                    ok = false;
                }
                None => ok = false,
            },
            _ => {}
        }
    }
    ok
}

/// `backoffLimit` (Kubernetes retries a failed pod that many times) as the step's retry
/// limit, `activeDeadlineSeconds` as its timeout, added to `step`; false after saying the
/// value is wrong. An unset backoffLimit does not copy Kubernetes' 6: a sluice trial is not
/// retried unless asked to.
pub(super) fn retry_or_deadline(
    cx: &mut Cx<'_>,
    key: &str,
    value: &Node,
    field: &str,
    step: &mut Vec<Entry>,
) -> bool {
    if key == "backoffLimit" {
        let Some(n) = whole(cx, value, field, 0) else {
            return false;
        };
        let limit = entry(value, "limit", plain(value, n.to_string()));
        step.push(entry(value, "retry", map(value, vec![limit])));
    } else {
        let Some(s) = whole(cx, value, field, 1) else {
            return false;
        };
        step.push(entry(value, "timeout", plain(value, format!("{s}s"))));
    }
    true
}

/// `workers: n` added to the step's resources (made when the container asked for none).
pub(super) fn with_workers(step: &mut Vec<Entry>, at: &Node, n: u64) {
    let workers = entry(at, "workers", plain(at, n.to_string()));
    if let Some(r) = step.iter_mut().find(|e| e.key == "resources")
        && let Value::Map(entries) = &mut r.value.value
    {
        entries.push(workers);
        return;
    }
    step.push(entry(at, "resources", map(at, vec![workers])));
}

pub(super) fn entry(at: &Node, key: &str, value: Node) -> Entry {
    Entry {
        key: key.into(),
        key_pos: at.pos,
        value,
    }
}

pub(super) fn map(at: &Node, entries: Vec<Entry>) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Map(entries),
    }
}

pub(super) fn seq(at: &Node, items: Vec<Node>) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Seq(items),
    }
}

/// A string, whatever it looks like (`"1"` stays text).
pub(super) fn quoted(at: &Node, text: String) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Scalar(Scalar { text, plain: false }),
    }
}

/// A scalar read by its looks (`3` is a number).
pub(super) fn plain(at: &Node, text: String) -> Node {
    Node {
        pos: at.pos,
        start: at.start,
        end: at.end,
        value: Value::Scalar(Scalar { text, plain: true }),
    }
}
