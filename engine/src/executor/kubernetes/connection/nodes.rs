//! The cluster's nodes as the node watch keeps them: whether each is ready, cordoned or
//! gone, its labels and allocatable resources; and, from them, the nodes of the pools read
//! from the cluster (`NodeSource`).

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::runtime::watcher;

use super::{Change, Connection};
use crate::scheduler::{LiveNode, NodeSource, Res};

/// What the executor needs of a node.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub labels: BTreeMap<String, String>,
    /// Why not ready (the Ready condition's reason), and since when it has been seen so.
    pub not_ready: Option<(String, Instant)>,
    pub gone: bool,
    /// Cordoned (`spec.unschedulable`): what runs there stays, nothing new is placed.
    pub cordoned: bool,
    /// `status.allocatable`: GPUs (`nvidia.com/gpu`), CPU, memory.
    pub allocatable: Res,
    /// `status.allocatable`'s extended resources (`nvidia.com/mig-1g.10gb`), by name: given
    /// their slots when the scheduler reads the node, since a step may name one after the
    /// node was seen.
    pub extended: BTreeMap<String, u64>,
}

impl Connection {
    pub(super) fn node_event(&self, event: watcher::Event<Node>) {
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(n) | watcher::Event::Apply(n) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                let mut seen = self.seen();
                let before = seen.nodes.get(&name).and_then(|s| s.not_ready.clone());
                seen.nodes.insert(name, node_state(&n, before));
            }
            watcher::Event::Delete(n) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                let mut seen = self.seen();
                let since = seen
                    .nodes
                    .get(&name)
                    .and_then(|s| s.not_ready.as_ref().map(|(_, t)| *t))
                    .unwrap_or_else(Instant::now);
                seen.nodes.insert(
                    name,
                    NodeState {
                        labels: BTreeMap::new(),
                        not_ready: Some(("the node was deleted".into(), since)),
                        gone: true,
                        cordoned: true,
                        allocatable: Res::ZERO,
                        extended: BTreeMap::new(),
                    },
                );
            }
            watcher::Event::InitDone => {
                self.seen().nodes_listed = true;
                self.mark_listed();
            }
        }
        self.tell(None, Change::Nodes);
    }
}

/// What the executor keeps of a node.
fn node_state(n: &Node, before: Option<(String, Instant)>) -> NodeState {
    let ready_condition = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ready = ready_condition.is_some_and(|c| c.status == "True");
    let not_ready = if ready {
        None
    } else {
        let why = ready_condition
            .and_then(|c| c.reason.clone())
            .unwrap_or_else(|| "NotReady".into());
        Some((why, before.map_or_else(Instant::now, |(_, t)| t)))
    };
    NodeState {
        labels: n.metadata.labels.clone().unwrap_or_default(),
        not_ready,
        gone: false,
        cordoned: n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true),
        allocatable: allocatable(n),
        extended: extended(n),
    }
}

/// A node's `status.allocatable` as the scheduler counts it; a quantity that cannot be read
/// counts as none (the node offers nothing of it, rather than a guess).
fn allocatable(n: &Node) -> Res {
    let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
        return Res::ZERO;
    };
    let read = |key: &str, scale: f64| {
        a.get(key)
            .and_then(|q| crate::spec::units::parse_quantity(&q.0).ok())
            .map_or(0, |v| (v * scale).round().max(0.0) as u64)
    };
    Res::new(
        read("nvidia.com/gpu", 1.0),
        read("cpu", 1000.0),
        read("memory", 1.0),
    )
}

/// A node's allocatable extended resources (counts; one that cannot be read counts as none).
fn extended(n: &Node) -> BTreeMap<String, u64> {
    let Some(a) = n.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
        return BTreeMap::new();
    };
    a.iter()
        .filter(|(name, _)| crate::scheduler::extended::is_name(name))
        .map(|(name, q)| {
            let v = crate::spec::units::parse_quantity(&q.0).unwrap_or(0.0);
            (name.clone(), v.max(0.0) as u64)
        })
        .collect()
}

/// The nodes of pools read from the cluster follow this connection's node watch.
impl NodeSource for Connection {
    fn each_node(&self, each: &mut dyn FnMut(LiveNode<'_>)) {
        let seen = self.seen();
        for (name, n) in &seen.nodes {
            // Only resources some step or the Cluster named have slots: the others are not
            // scheduled.
            let mut allocatable = n.allocatable;
            for (name, v) in &n.extended {
                if let Some(i) = crate::scheduler::extended::lookup(name) {
                    allocatable.ext[i] = crate::scheduler::extended::amount(*v);
                }
            }
            each(LiveNode {
                name,
                labels: &n.labels,
                allocatable,
                schedulable: !n.gone && !n.cordoned && n.not_ready.is_none(),
            });
        }
    }
}
