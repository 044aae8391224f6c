//! The executor part of a `kind: Cluster` document: `executor:` and, for
//! `executor: kubernetes`, its `kubernetes:` section (namespace, service account, runtime image,
//! admission, the object store's Secret, the pod start timeout). Each problem is reported where
//! it is written.

use std::time::Duration;

use super::decode::Cx;
use super::model::{Admission, ExecutorKind, KubernetesSpec};
use super::yaml::Node;

const FIELDS: &[&str] = &[
    "namespace",
    "serviceAccount",
    "runtimeImage",
    "admission",
    "objectsSecret",
    "podStartTimeout",
    "defaultImage",
];

/// The image of steps that name none: the examples need `sh` and `python3` with its standard
/// library, and nothing else.
pub const DEFAULT_IMAGE: &str = "docker.io/library/python:3.12-slim";

/// `executor:` and `kubernetes:` of a Cluster's spec.
pub(super) fn decode(cx: &mut Cx<'_>, spec: &Node) -> (ExecutorKind, Option<KubernetesSpec>) {
    let executor = match spec.get("executor") {
        Some(e) => match super::cluster::one_of(cx, e, "executor", &["local", "kubernetes"]) {
            Some(v) if v == "kubernetes" => ExecutorKind::Kubernetes,
            _ => ExecutorKind::Local,
        },
        None => ExecutorKind::Local,
    };
    let section = spec.get("kubernetes");
    match (executor, section) {
        (ExecutorKind::Kubernetes, Some(k)) => (executor, kubernetes(cx, k)),
        (ExecutorKind::Kubernetes, None) => {
            cx.d.error(spec.pos, "executor: kubernetes needs a kubernetes: section")
                .help("add kubernetes: {runtimeImage: REGISTRY/sluice-runtime:VERSION}, the image holding sluice-runtime");
            (executor, None)
        }
        (ExecutorKind::Local, Some(k)) => {
            // Read so that its mistakes show, though the local executor does not use it.
            let _ = kubernetes(cx, k);
            (executor, None)
        }
        (ExecutorKind::Local, None) => (executor, None),
    }
}

fn kubernetes(cx: &mut Cx<'_>, node: &Node) -> Option<KubernetesSpec> {
    cx.fields(node, "kubernetes", FIELDS)?;
    let name = |cx: &mut Cx<'_>, field: &str| -> Option<String> {
        let v = node.get(field)?;
        let s = cx.string(v, &format!("kubernetes.{field}"))?;
        if dns_label(&s) {
            Some(s)
        } else {
            cx.d.error(
                v.pos,
                format!("kubernetes.{field}: '{s}' is not a Kubernetes name"),
            )
            .help("lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit");
            None
        }
    };
    let namespace = name(cx, "namespace");
    let service_account = name(cx, "serviceAccount");
    let objects_secret = name(cx, "objectsSecret");
    let runtime_image = match node.get("runtimeImage") {
        Some(v) => cx.string(v, "kubernetes.runtimeImage"),
        None => {
            cx.d.error(node.pos, "kubernetes: runtimeImage is missing")
                .help("name the image holding sluice-runtime (images/runtime.Containerfile builds it), e.g. runtimeImage: ghcr.io/sluice-dev/sluice-runtime:0.1.0");
            None
        }
    };
    let mut admission = Admission::Sluice;
    if let Some(a) = node.get("admission")
        && let Some(v) = super::cluster::one_of(cx, a, "kubernetes.admission", &["sluice", "kueue"])
        && v == "kueue"
    {
        admission = Admission::Kueue;
    }
    let mut pod_start_timeout = Duration::from_secs(300);
    if let Some(t) = node.get("podStartTimeout")
        && let Some(d) = cx.duration(t, "kubernetes.podStartTimeout")
    {
        pod_start_timeout = d;
    }
    let default_image = match node.get("defaultImage") {
        Some(v) => cx.string(v, "kubernetes.defaultImage")?,
        None => DEFAULT_IMAGE.to_owned(),
    };
    Some(KubernetesSpec {
        default_image,
        namespace,
        service_account,
        runtime_image: runtime_image?,
        admission,
        objects_secret,
        pod_start_timeout,
    })
}

/// An RFC 1123 label: what namespaces, service accounts and Secrets are named.
pub fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
