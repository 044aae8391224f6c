//! A run's graph as SVG, laid out here (no JavaScript library): one box per step of the
//! pipeline, a fan-out's instances and a sweep's trials collapsed into their step's box with
//! a count per state, columns by the step's level in the DAG (its longest chain of `needs`),
//! and within a column an order that follows the boxes it needs (the mean row of its
//! parents, column after column), which keeps most edges short and uncrossed. `onExit` steps
//! come in a last column of their own.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::layout::escape;
use crate::client::segment;
use crate::run::state::step as st;
use crate::spec::model::{Action, Pipeline};
use crate::store::StepRow;

const W: f64 = 240.0;
const H: f64 = 46.0;
const COL_GAP: f64 = 70.0;
const ROW_GAP: f64 = 16.0;
const PAD: f64 = 10.0;

/// One box: a step of the pipeline and the rows it stands for.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    /// Its instances' (or trials') states and how many are in each.
    pub counts: BTreeMap<String, usize>,
    /// Its one row's name when it stands for exactly one (the link to that step's page).
    pub single: Option<String>,
    /// The reason of its one row, or of the first waiting or failed instance.
    pub reason: Option<String>,
    pub needs: Vec<String>,
    pub on_exit: bool,
    /// Its column.
    pub level: u32,
    /// `trials` for a sweep's box, `instances` for a fan-out's.
    pub many: &'static str,
}

impl Node {
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// The state the box is drawn in: the most pressing of its instances' states.
    pub fn state(&self) -> &str {
        const ORDER: [st::StepState; 9] = [
            st::RUNNING,
            st::FAILED,
            st::QUEUED,
            st::PENDING,
            st::CANCELLED,
            st::SUCCEEDED,
            st::CACHED,
            st::STOPPED,
            st::SKIPPED,
        ];
        ORDER
            .iter()
            .map(|s| s.as_str())
            .find(|s| self.counts.contains_key(*s))
            .or_else(|| self.counts.keys().next().map(String::as_str))
            .unwrap_or(st::PENDING.as_str())
    }
}

/// The boxes of a run: the pipeline's steps (in file order) with their rows; without the
/// pipeline (a run this version cannot read), one box per row.
pub fn nodes(pipeline: Option<&Pipeline>, rows: &[StepRow]) -> Vec<Node> {
    let Some(p) = pipeline else {
        return rows
            .iter()
            .enumerate()
            .map(|(i, r)| Node {
                name: r.name.clone(),
                counts: BTreeMap::from([(r.state.into(), 1)]),
                single: Some(r.name.clone()),
                reason: r.reason.clone(),
                needs: Vec::new(),
                on_exit: false,
                level: i as u32,
                many: "instances",
            })
            .collect();
    };
    // Which box each row's `step` belongs to: its own, or for a sweep's trials the sweep's.
    let mut owner: HashMap<String, usize> = HashMap::new();
    for (i, s) in p.steps.iter().enumerate() {
        owner.insert(s.name.clone(), i);
        if matches!(s.action, Action::Sweep { .. }) {
            let trial = if p.from_sweep {
                "trial".to_owned()
            } else {
                format!("{}.trial", s.name)
            };
            owner.insert(trial, i);
        }
    }
    let mut diagnostics = crate::spec::Diagnostics::new("");
    let levels = crate::dag::graph::build(p, &mut diagnostics).map(|d| d.level);
    let mut out: Vec<Node> = p
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| Node {
            name: s.name.clone(),
            counts: BTreeMap::new(),
            single: None,
            reason: None,
            needs: s.needs.iter().map(|n| n.step.clone()).collect(),
            on_exit: s.on_exit,
            level: levels.as_ref().and_then(|l| l.get(i).copied()).unwrap_or(0),
            many: if matches!(s.action, Action::Sweep { .. }) {
                "trials"
            } else {
                "instances"
            },
        })
        .collect();
    let mut members: Vec<Vec<&StepRow>> = vec![Vec::new(); out.len()];
    for r in rows {
        if let Some(&i) = owner.get(&r.step) {
            members[i].push(r);
        }
    }
    // A sweep's box counts its trials, not the row of the sweep itself (once it has any).
    for (i, s) in p.steps.iter().enumerate() {
        if matches!(s.action, Action::Sweep { .. }) && members[i].iter().any(|r| r.step != s.name) {
            members[i].retain(|r| r.step != s.name);
        }
    }
    for (node, rows) in out.iter_mut().zip(members) {
        for r in &rows {
            *node.counts.entry(r.state.into()).or_default() += 1;
        }
        if let [one] = rows.as_slice() {
            node.single = Some(one.name.clone());
            node.reason = one.reason.clone();
        } else {
            node.reason = rows
                .iter()
                .find(|r| r.state == st::FAILED || r.state == st::QUEUED)
                .and_then(|r| r.reason.clone().map(|why| format!("{}: {why}", r.name)));
        }
    }
    out
}

/// Where each box goes: (column, row) by index into `nodes`.
pub fn layout(nodes: &[Node]) -> Vec<(usize, usize)> {
    let last_main = nodes
        .iter()
        .filter(|n| !n.on_exit)
        .map(|n| n.level)
        .max()
        .unwrap_or(0);
    let column = |n: &Node| -> usize {
        if n.on_exit {
            (last_main + 1 + n.level) as usize
        } else {
            n.level as usize
        }
    };
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let columns = nodes.iter().map(column).max().map_or(0, |c| c + 1);
    let mut by_column: Vec<Vec<usize>> = vec![Vec::new(); columns];
    for (i, n) in nodes.iter().enumerate() {
        by_column[column(n)].push(i);
    }
    let mut place = vec![(0usize, 0usize); nodes.len()];
    for (c, members) in by_column.iter_mut().enumerate() {
        // The mean row of the boxes it needs, placed already (columns to its left).
        let key = |i: usize| -> f64 {
            let rows: Vec<f64> = nodes[i]
                .needs
                .iter()
                .filter_map(|n| index.get(n.as_str()))
                .map(|&j| place[j])
                .filter(|&(pc, _)| pc < c)
                .map(|(_, r)| r as f64)
                .collect();
            if rows.is_empty() {
                f64::MAX
            } else {
                rows.iter().sum::<f64>() / rows.len() as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = members.iter().map(|&i| (key(i), i)).collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (row, (_, i)) in keyed.into_iter().enumerate() {
            place[i] = (c, row);
        }
    }
    place
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max - 1).collect();
    s.push('…');
    s
}

/// The second line of a box: its state, or its count per state.
fn summary(n: &Node) -> String {
    if n.total() <= 1 {
        return n.state().to_owned();
    }
    let parts: Vec<String> = n
        .counts
        .iter()
        .map(|(s, k)| format!("{k} {}", s.to_ascii_lowercase()))
        .collect();
    format!("{} {}: {}", n.total(), n.many, parts.join(", "))
}

/// The graph as an `<svg>` element; each box links to its step (or its steps' rows).
pub fn svg(run: &str, nodes: &[Node]) -> String {
    let place = layout(nodes);
    let x = |c: usize| PAD + c as f64 * (W + COL_GAP);
    let y = |r: usize| PAD + r as f64 * (H + ROW_GAP);
    let cols = place.iter().map(|p| p.0 + 1).max().unwrap_or(1);
    let rows = place.iter().map(|p| p.1 + 1).max().unwrap_or(1);
    let width = x(cols) - COL_GAP + PAD;
    let height = y(rows) - ROW_GAP + PAD;
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let mut s = String::with_capacity(512 + nodes.len() * 400);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img" aria-label="the run's steps and what each needs">"#
    );
    for (i, n) in nodes.iter().enumerate() {
        for need in &n.needs {
            let Some(&j) = index.get(need.as_str()) else {
                continue;
            };
            let (x1, y1) = (x(place[j].0) + W, y(place[j].1) + H / 2.0);
            let (x2, y2) = (x(place[i].0), y(place[i].1) + H / 2.0);
            let mid = (x1 + x2) / 2.0;
            let _ = write!(
                s,
                r#"<path class="edge" d="M{x1:.1},{y1:.1} C{mid:.1},{y1:.1} {mid:.1},{y2:.1} {x2:.1},{y2:.1}"/>"#
            );
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let (nx, ny) = (x(place[i].0), y(place[i].1));
        let state = n.state();
        let href = match &n.single {
            Some(name) => format!("/runs/{run}/steps/{}", segment(name)),
            None => format!("#step-{}", escape(&n.name)),
        };
        let tip = match &n.reason {
            Some(r) => format!("{}: {}\n{r}", n.name, summary(n)),
            None => format!("{}: {}", n.name, summary(n)),
        };
        let _ = write!(
            s,
            r##"<a href="{href}"><g class="node {cls}" data-step="{name}" data-state="{state}"><title>{tip}</title><rect x="{nx:.1}" y="{ny:.1}" width="{W}" height="{H}" rx="6"/><text x="{tx:.1}" y="{t1:.1}" font-weight="600">{label}</text><text x="{tx:.1}" y="{t2:.1}" fill="#5d6b7e">{line2}</text></g></a>"##,
            cls = state.to_ascii_lowercase(),
            name = escape(&n.name),
            tip = escape(&tip),
            tx = nx + 10.0,
            t1 = ny + 19.0,
            t2 = ny + 36.0,
            label = escape(&clip(
                &if n.on_exit {
                    format!("{} (on exit)", n.name)
                } else {
                    n.name.clone()
                },
                28
            )),
            line2 = escape(&clip(&summary(n), 38)),
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, needs: &[&str], level: u32) -> Node {
        Node {
            name: name.into(),
            counts: BTreeMap::from([(st::SUCCEEDED.into(), 1)]),
            single: Some(name.into()),
            reason: None,
            needs: needs.iter().map(|s| (*s).to_owned()).collect(),
            on_exit: false,
            level,
            many: "instances",
        }
    }

    #[test]
    fn a_diamond_takes_three_columns_and_its_middle_two_rows() {
        let nodes = vec![
            node("prepare", &[], 0),
            node("train", &["prepare"], 1),
            node("baseline", &["prepare"], 1),
            node("report", &["train", "baseline"], 2),
        ];
        let place = layout(&nodes);
        assert_eq!(place[0], (0, 0));
        assert_eq!(place[1].0, 1);
        assert_eq!(place[2].0, 1);
        assert_ne!(place[1].1, place[2].1);
        assert_eq!(place[3], (2, 0));
        let svg = svg("r1", &nodes);
        assert_eq!(svg.matches("class=\"edge\"").count(), 4);
        assert_eq!(svg.matches("<rect").count(), 4);
    }

    #[test]
    fn boxes_follow_their_parents_rows() {
        // b's child is listed first, but a's child goes first: it follows a (row 0).
        let nodes = vec![
            node("a", &[], 0),
            node("b", &[], 0),
            node("after_b", &["b"], 1),
            node("after_a", &["a"], 1),
        ];
        let place = layout(&nodes);
        assert_eq!(place[3], (1, 0));
        assert_eq!(place[2], (1, 1));
    }

    #[test]
    fn a_fan_out_is_one_box_with_its_counts() {
        let mut n = node("eval", &[], 0);
        n.single = None;
        n.counts = BTreeMap::from([
            (st::SUCCEEDED.into(), 5),
            (st::RUNNING.into(), 2),
            (st::FAILED.into(), 1),
        ]);
        assert_eq!(n.state(), st::RUNNING);
        assert_eq!(summary(&n), "8 instances: 1 failed, 2 running, 5 succeeded");
        let svg = svg("r1", &[n]);
        assert!(svg.contains("href=\"#step-eval\""), "{svg}");
    }

    #[test]
    fn names_are_escaped() {
        let n = node("a<b>&\"c", &[], 0);
        let svg = svg("r1", &[n]);
        assert!(svg.contains("a&lt;b&gt;&amp;&quot;c"), "{svg}");
        assert!(!svg.contains("a<b>"));
    }
}
