//! The scheduling of cluster mode on declared nodes and on nodes read from a cluster.

use super::*;

const LAB: &str = "apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 2
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision, quota: {gpu: 4}}
";

fn lab() -> Scheduling {
    let (_, spec) =
        crate::spec::cluster::load("lab.yaml", LAB.into()).expect("the lab cluster is valid");
    Scheduling::new(spec)
}

fn ask(gpu: u64, workers: u32) -> Ask {
    Ask {
        team: "vision".into(),
        priority: 100,
        workers,
        gpu,
        millicpu: 1000,
        memory: 0,
        interruptible: false,
        checkpointed: true,
        flavor: None,
        extended: Default::default(),
        timeout_ms: None,
        history_ms: None,
    }
}

fn held(run: &str, step: &str, a: &Ask, nodes: &[usize], gpus: &str) -> Claim {
    Claim {
        run_id: run.into(),
        step: step.into(),
        job: serde_json::to_string(a).expect("an ask serializes"),
        since: 0,
        nodes: Some(serde_json::to_string(nodes).expect("nodes serialize")),
        gpus: Some(gpus.into()),
        dir: Some(format!("/attempts/{run}/{step}.1")),
    }
}

fn waiting(run: &str, step: &str, a: &Ask, since: i64) -> Claim {
    Claim {
        run_id: run.into(),
        step: step.into(),
        job: serde_json::to_string(a).expect("an ask serializes"),
        since,
        nodes: None,
        gpus: None,
        dir: None,
    }
}

#[test]
fn workers_get_the_lowest_free_gpus_of_their_own_node() {
    let s = lab();
    let running = [held("r1", "a", &ask(2, 1), &[0], "0,1")];
    // One worker beside `a` on node 0, one alone on node 1.
    assert_eq!(
        s.place(&running, &ask(2, 2), &declared(&[0, 1])).as_deref(),
        Some("2,3,0,1")
    );
    // Node 0 has 2 GPUs left: a 4-GPU worker no longer fits there, and nothing is taken.
    assert_eq!(s.place(&running, &ask(4, 2), &declared(&[0, 1])), None);
    // Two workers of one gang on one node take different GPUs.
    assert_eq!(
        s.place(&[], &ask(2, 2), &declared(&[1, 1])).as_deref(),
        Some("0,1,2,3")
    );
}

#[test]
fn gpus_held_by_a_gang_are_read_per_worker_and_node() {
    let s = lab();
    // A 2 x 1 GPU gang holds GPU 0 of node 0 and GPU 0 of node 1 (written "0,0").
    let running = [held("r1", "g", &ask(1, 2), &[0, 1], "0,0")];
    assert_eq!(
        s.place(&running, &ask(1, 1), &declared(&[1])).as_deref(),
        Some("1")
    );
    assert_eq!(
        s.place(&running, &ask(3, 1), &declared(&[0])).as_deref(),
        Some("1,2,3")
    );
}

/// One cycle's verdict for run `run`.
fn verdict_of(
    s: &Scheduling,
    run: &str,
    held: &[Claim],
    waiting: &[Claim],
    now: i64,
) -> Result<Verdict, String> {
    s.cycle(held, waiting, now)
        .map(|mut v| v.remove(run).unwrap_or_default())
}

#[test]
fn a_cycle_decides_for_every_run_each_its_own_steps() {
    let s = lab();
    let waits = [
        waiting("other", "first", &ask(4, 1), 1),
        waiting("mine", "second", &ask(4, 1), 2),
        waiting("mine", "third", &ask(4, 1), 3),
    ];
    let all = s.cycle(&[], &waits, 10).expect("a cycle");
    assert_eq!(all.len(), 2, "{all:?}");
    // The other run's older step takes a node (its engine starts it); this run's next
    // one takes the other node; the last one waits, with a reason.
    let other = &all["other"];
    assert_eq!(other.admit.len(), 1, "{other:?}");
    assert_eq!(other.admit[0].0, "first");
    assert!(other.wait.is_empty(), "{other:?}");
    let v = &all["mine"];
    assert_eq!(v.admit.len(), 1, "{v:?}");
    assert_eq!(v.admit[0].0, "second");
    assert_ne!(v.admit[0].1, other.admit[0].1, "one node each");
    assert_eq!(v.wait.len(), 1, "{v:?}");
    assert_eq!(v.wait[0].0, "third");
    assert!(v.wait[0].1.starts_with("waiting"), "{}", v.wait[0].1);
}

#[test]
fn a_higher_priority_step_asks_for_the_lower_ones_attempt_to_stop() {
    let s = lab();
    let mut low = ask(4, 2);
    low.priority = 0;
    let running = [held("r1", "explore", &low, &[0, 1], "0,1,2,3,0,1,2,3")];
    let mut high = ask(4, 1);
    high.priority = 1000;
    let v = verdict_of(
        &s,
        "r2",
        &running,
        &[waiting("r2", "urgent", &high, 5)],
        1_000_000,
    )
    .expect("a cycle");
    assert_eq!(v.preempt.len(), 1, "{v:?}");
    assert_eq!(v.preempt[0].0, "/attempts/r1/explore.1");
    assert_eq!(v.preempt[0].3, "urgent");
    assert!(v.admit.is_empty());
}

/// A cluster's nodes as a test says them: name, labels, GPUs allocatable, schedulable.
type Reports = Vec<(String, BTreeMap<String, String>, u64, bool)>;
struct Reported(std::sync::Mutex<Reports>);

impl NodeSource for Reported {
    fn each_node(&self, each: &mut dyn FnMut(scheduler::LiveNode<'_>)) {
        for (name, labels, gpu, schedulable) in self.0.lock().expect("nodes").iter() {
            each(scheduler::LiveNode {
                name,
                labels,
                allocatable: Res::new(*gpu, 16_000, 64 << 30),
                schedulable: *schedulable,
            });
        }
    }
}

fn node(name: &str, pool: &str, gpu: u64) -> (String, BTreeMap<String, String>, u64, bool) {
    let labels = [("pool".to_owned(), pool.to_owned())].into();
    (name.to_owned(), labels, gpu, true)
}

fn declared(nodes: &[usize]) -> Vec<NodeRef> {
    nodes.iter().map(|&n| NodeRef::Declared(n)).collect()
}

fn named(node: &str) -> NodeRef {
    NodeRef::Named {
        pool: "gpu".into(),
        node: node.into(),
    }
}

const FOLLOWED: &str = "apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: k}
spec:
  executor: kubernetes
  kubernetes: {namespace: ml, runtimeImage: r}
  pools:
    - name: gpu
      labels: {pool: gpu}
      resources: {gpu: 4}
  teams:
    - {name: vision}
";

#[test]
fn a_pool_without_nodes_is_the_clusters_labelled_nodes_as_they_are_now() {
    let (_, spec) =
        crate::spec::cluster::load("k.yaml", FOLLOWED.into()).expect("the Cluster is valid");
    assert!(spec.pools[0].from_cluster);
    let s = Scheduling::new(spec);
    assert!(s.reads_nodes());
    // Before the cluster is read, nothing can be placed.
    let one = [waiting("r", "a", &ask(4, 1), 1)];
    let v = verdict_of(&s, "r", &[], &one, 10).expect("a cycle");
    assert!(v.admit.is_empty() && v.wait.len() == 1, "{v:?}");
    let nodes = Arc::new(Reported(std::sync::Mutex::new(vec![
        node("n1", "gpu", 8),
        node("n2", "gpu", 2),
        node("n3", "cpu", 8),
    ])));
    s.follow_nodes(nodes.clone());
    // n1 offers 4 GPUs (capped by the pool's resources), n2 two, n3 is not in the pool.
    let v = verdict_of(&s, "r", &[], &one, 10).expect("a cycle");
    assert_eq!(v.admit, vec![("a".to_owned(), vec![named("n1")])]);
    let mut running = [held("r", "a", &ask(4, 1), &[], "0,1,2,3")];
    running[0].nodes = Some(serde_json::to_string(&[named("n1")]).expect("json"));
    let two = [
        waiting("r", "b", &ask(2, 1), 2),
        waiting("r", "c", &ask(4, 1), 3),
    ];
    let v = verdict_of(&s, "r", &running, &two, 10).expect("a cycle");
    assert_eq!(v.admit, vec![("b".to_owned(), vec![named("n2")])], "{v:?}");
    assert_eq!(v.wait.len(), 1, "{v:?}");
    // A node joins; n1 is cordoned: c goes to the new one, and placing onto n1 fails.
    {
        let mut all = nodes.0.lock().expect("nodes");
        all.push(node("n4", "gpu", 4));
        all[0].3 = false;
    }
    let v = verdict_of(&s, "r", &running, &two[1..], 10).expect("a cycle");
    assert_eq!(v.admit, vec![("c".to_owned(), vec![named("n4")])], "{v:?}");
    assert_eq!(s.place(&[], &ask(1, 1), &[named("n1")]), None);
    assert_eq!(
        s.place(&running, &ask(4, 1), &[named("n4")]).as_deref(),
        Some("0,1,2,3")
    );
    // n1 goes away while `a` runs there: its claim still reads (no room, counted), and a
    // node that was never seen has no room.
    nodes.0.lock().expect("nodes").remove(0);
    let v = verdict_of(&s, "r", &running, &two[1..], 10).expect("a cycle");
    assert_eq!(v.admit, vec![("c".to_owned(), vec![named("n4")])], "{v:?}");
    assert_eq!(s.place(&[], &ask(1, 1), &[named("gone")]), None);
    // A claim naming a pool the Cluster does not have cannot be read.
    let mut odd = running[0].clone();
    odd.nodes = Some(r#"[{"pool": "nope", "node": "n1"}]"#.into());
    assert!(verdict_of(&s, "r", &[odd], &[], 10).is_err());
}

#[test]
fn declared_nodes_are_still_stored_and_read_as_indices() {
    let s = lab();
    let v = verdict_of(&s, "r", &[], &[waiting("r", "a", &ask(4, 1), 1)], 10).expect("cycle");
    assert_eq!(
        serde_json::to_string(&v.admit[0].1).expect("json"),
        "[0]",
        "{v:?}"
    );
}

#[test]
fn a_running_attempt_that_cannot_be_read_is_an_error_not_free_room() {
    let s = lab();
    let mut broken = held("r1", "a", &ask(2, 1), &[0], "0,1");
    broken.job = "{not json".into();
    let err = verdict_of(&s, "mine", std::slice::from_ref(&broken), &[], 10)
        .expect_err("an unreadable claim");
    assert!(err.contains("run r1") && err.contains("'a'"), "{err}");
    // Nor does placing onto the nodes believe the room is free.
    assert_eq!(s.place(&[broken], &ask(1, 1), &declared(&[0])), None);
}
