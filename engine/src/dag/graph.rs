//! Cycles, upstream checks and topological levels, with petgraph.
//!
//! Every check here is linear or close to it in the number of steps and needs: a 100,000-step
//! chain is ordered in one pass, and "is S upstream of T" walks back from T only through
//! steps that come after S in topological order.

use std::collections::HashMap;

use petgraph::Direction;
use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::spec::Diagnostics;
use crate::spec::model::Pipeline;
use crate::spec::template::Ref;

/// The ordered graph of a pipeline without cycles.
#[derive(Debug)]
pub struct Dag {
    /// Main steps (not `onExit`) by index into `pipeline.steps`, in topological order.
    pub order: Vec<usize>,
    /// `onExit` steps in topological order among themselves.
    pub on_exit: Vec<usize>,
    /// The level of each step (by index into `pipeline.steps`): 0 for steps that need
    /// nothing, else one more than the deepest step it needs. `onExit` steps count from 0
    /// among themselves.
    pub level: Vec<u32>,
}

/// Builds the graph, reporting cycles and references to steps that are not upstream.
/// Returns `None` when the graph has a cycle.
pub fn build(p: &Pipeline, d: &mut Diagnostics) -> Option<Dag> {
    let n = p.steps.len();
    let index: HashMap<&str, usize> = p
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut g: DiGraph<usize, usize> = DiGraph::with_capacity(n, n);
    for i in 0..n {
        g.add_node(i);
    }
    for (i, step) in p.steps.iter().enumerate() {
        for (k, need) in step.needs.iter().enumerate() {
            if let Some(&j) = index.get(need.step.as_str()) {
                // Edges run from the needed step to the one that needs it; the weight is the
                // position of the entry in `needs`, to point at it when reporting a cycle.
                g.add_edge(NodeIndex::new(j), NodeIndex::new(i), k);
            }
        }
    }
    let order = toposort(&g, None).ok();
    if order.is_none() {
        report_cycles(p, &g, d);
    }
    // With a cycle there is no order to prune the upstream walk with; it still runs, so
    // that its problems are reported with the cycle's.
    let mut topo_pos = vec![0usize; n];
    let pruned = order.is_some();
    for (pos, node) in order.iter().flatten().enumerate() {
        topo_pos[node.index()] = pos;
    }
    let mut upstream = Upstream {
        g: &g,
        pruned,
        topo_pos: &topo_pos,
        stamp: vec![0; n],
        query: 0,
        stack: Vec::new(),
    };
    for (i, step) in p.steps.iter().enumerate() {
        for r in step.refs() {
            let Some(from) = r.reference.step() else {
                continue;
            };
            let Some(&j) = index.get(from) else {
                continue; // reported by the spec's own checks
            };
            if j == i || (step.on_exit && !p.steps[j].on_exit) {
                continue; // own outputs: reported; onExit steps run after every main step
            }
            if !upstream.is_ancestor(j, i) {
                let what = match &r.reference {
                    Ref::Metric { .. } => "metrics",
                    Ref::BestParam { .. } => "best parameters",
                    _ => "outputs",
                };
                d.error(
                    r.pos,
                    format!(
                        "{}: step '{from}' is not upstream of '{}'",
                        r.raw, step.name
                    ),
                )
                .help(format!(
                    "add '{from}' to the needs of '{}' so its {what} exist when '{}' starts",
                    step.name, step.name
                ));
            }
        }
    }
    let order = order?;
    let mut level = vec![0u32; n];
    for node in &order {
        let lvl = g
            .neighbors_directed(*node, Direction::Incoming)
            .map(|up| level[up.index()] + 1)
            .max()
            .unwrap_or(0);
        level[node.index()] = lvl;
    }
    let (on_exit, main): (Vec<usize>, Vec<usize>) = order
        .iter()
        .map(|n| n.index())
        .partition(|&i| p.steps[i].on_exit);
    Some(Dag {
        order: main,
        on_exit,
        level,
    })
}

struct Upstream<'g> {
    g: &'g DiGraph<usize, usize>,
    /// Whether `topo_pos` holds a topological order (false when the graph has a cycle).
    pruned: bool,
    topo_pos: &'g [usize],
    stamp: Vec<u32>,
    query: u32,
    stack: Vec<NodeIndex>,
}

impl Upstream<'_> {
    /// Whether `anc` is reached walking back along `needs` from `of`. Steps before `anc` in
    /// topological order cannot lead to it, so the walk never visits them.
    fn is_ancestor(&mut self, anc: usize, of: usize) -> bool {
        if self.pruned && self.topo_pos[anc] >= self.topo_pos[of] {
            return false;
        }
        self.query += 1;
        self.stack.clear();
        self.stack.push(NodeIndex::new(of));
        while let Some(node) = self.stack.pop() {
            for up in self.g.neighbors_directed(node, Direction::Incoming) {
                let u = up.index();
                if u == anc {
                    return true;
                }
                let may_lead = !self.pruned || self.topo_pos[u] > self.topo_pos[anc];
                if self.stamp[u] != self.query && may_lead {
                    self.stamp[u] = self.query;
                    self.stack.push(up);
                }
            }
        }
        false
    }
}

/// Reports each cycle once, as the chain of step names in the order they would run,
/// at the `needs` entry of the cycle's first step (in file order).
fn report_cycles(p: &Pipeline, g: &DiGraph<usize, usize>, d: &mut Diagnostics) {
    let mut sccs = tarjan_scc(g);
    sccs.iter_mut().for_each(|c| c.sort());
    sccs.sort();
    for scc in sccs {
        let start = scc[0];
        let self_loop = g.find_edge(start, start).is_some();
        if scc.len() == 1 && !self_loop {
            continue;
        }
        // Walk back along `needs` inside the component until we return to the start.
        let in_scc = |n: NodeIndex| scc.binary_search(&n).is_ok();
        let mut path = vec![start];
        let mut seen = vec![start];
        let mut node = start;
        let cycle = loop {
            let mut preds: Vec<NodeIndex> = g
                .neighbors_directed(node, Direction::Incoming)
                .filter(|&n| in_scc(n))
                .collect();
            preds.sort();
            if preds.contains(&start) {
                break true;
            }
            match preds.into_iter().find(|n| !seen.contains(n)) {
                Some(next) => {
                    seen.push(next);
                    path.push(next);
                    node = next;
                }
                None => break false,
            }
        };
        if !cycle {
            // Cannot happen in a strongly connected component; report the component whole.
            path = scc.clone();
        }
        // `path` is start, then what start needs, then what that needs...: read backwards
        // it is the running order, which we print starting from `start`.
        let name = |n: &NodeIndex| p.steps[n.index()].name.as_str();
        let mut names = vec![name(&start)];
        names.extend(path[1..].iter().rev().map(name));
        names.push(name(&start));
        let first = &p.steps[start.index()];
        let closing = p.steps[path[1 % path.len()].index()].name.as_str();
        let closing = if path.len() == 1 {
            first.name.as_str()
        } else {
            closing
        };
        let pos = first
            .needs
            .iter()
            .find(|n| n.step == closing)
            .map_or(first.pos, |n| n.pos);
        if path.len() == 1 {
            d.error(pos, format!("step '{}' needs itself", first.name))
                .help(format!("remove '{}' from its own needs", first.name));
            continue;
        }
        let chain = names.join(" -> ");
        d.error(pos, format!("dependency cycle: {chain}"))
            .help("a step cannot wait for itself; remove one of these needs");
    }
}
