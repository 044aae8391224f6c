//! Starvation reservations: the oldest starving step that could ever start reserves its
//! nodes, nothing else starts there but what could preempt it anyway and, with estimates,
//! what ends before those nodes drain (EASY backfill).

use super::*;

#[test]
fn a_starving_gang_reserves_capacity_and_nothing_backfills_it() {
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    let running = vec![Running {
        job: job(10, 0, 1, 2),
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let gang = job(1, 0, 2, 4); // submitted at 1
    let small = {
        let mut j = job(2, 0, 1, 1);
        j.submitted = 50;
        j
    };
    let settings = Settings {
        starvation_limit: Some(100),
        now: 60,
        ..Settings::default()
    };
    // Not starving yet: the small one backfills.
    let d = cycle(&c, &running, &[gang.clone(), small.clone()], &settings);
    assert!(admitted(&d).contains_key(&2), "{d:?}");
    // Past the limit: nothing starts, and both say why.
    let late = Settings {
        now: 200,
        ..settings
    };
    let d = cycle(&c, &running, &[gang, small], &late);
    assert!(admitted(&d).is_empty(), "{d:?}");
    assert!(reason(&d, 1).contains("starvation limit"), "{d:?}");
    assert!(reason(&d, 1).contains("node(s) 0, 1 are reserved"), "{d:?}");
    assert!(reason(&d, 2).contains("reserved for step 1"), "{d:?}");
    // Once what ran there has stopped, the gang starts first.
    let d = cycle(&c, &[], &[job(1, 0, 2, 4), job(2, 0, 1, 1)], &late);
    assert_eq!(admitted(&d).len(), 1, "{d:?}");
    assert!(admitted(&d).contains_key(&1), "{d:?}");
}

#[test]
fn a_step_that_ends_before_the_reserved_nodes_drain_backfills_them() {
    // EASY backfill. Two nodes of 4 GPUs; a 2-GPU step on node 0 runs at most 300 (its
    // estimate); the 2 x 4 GPU gang has starved and reserves both nodes, which drain by 300.
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    let mut long = job(10, 0, 1, 2);
    long.estimate = Some(300);
    let running = vec![Running {
        job: long,
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let small = |id: u64, estimate: Option<u64>| Job {
        submitted: 150,
        estimate,
        ..job(id, 0, 1, 1)
    };
    let settings = Settings {
        starvation_limit: Some(100),
        now: 200,
        ..Settings::default()
    };
    let queue = [
        job(1, 0, 2, 4),
        small(2, Some(50)),  // ends by 250: backfills
        small(3, Some(100)), // ends by 300, as the nodes drain: backfills
        small(4, Some(500)), // would end at 700: waits
        small(5, None),      // nobody knows: waits
    ];
    let d = cycle(&c, &running, &queue, &settings);
    let a = admitted(&d);
    assert!(a.contains_key(&2) && a.contains_key(&3), "{d:?}");
    assert!(
        !a.contains_key(&1) && !a.contains_key(&4) && !a.contains_key(&5),
        "{d:?}"
    );
    assert!(reason(&d, 4).contains("reserved for step 1"), "{d:?}");
    assert!(reason(&d, 5).contains("reserved for step 1"), "{d:?}");
    // A step on the reserved nodes whose end nobody knows: no backfill at all.
    let mut unknown = running.clone();
    unknown[0].job.estimate = None;
    let d = cycle(&c, &unknown, &queue, &settings);
    assert!(admitted(&d).is_empty(), "{d:?}");
}

/// Two nodes of 4 GPUs, one 1-GPU step running on node 1 since time `started`.
fn on_node_1(id: u64, gpu: u64, started: u64) -> Running {
    Running {
        job: job(id, 0, 1, gpu),
        nodes: vec![1],
        started,
        work_at_risk: 0,
    }
}

#[test]
fn a_gang_that_can_never_fit_reserves_nothing() {
    let late = Settings {
        starvation_limit: Some(100),
        now: 1000,
        ..Settings::default()
    };
    // Three whole nodes on a cluster of two: no reservation, the small step starts.
    let c = cluster(2, vec![team("t", 1.0, 0, None)]);
    let never = job(1, 0, 3, 4);
    let d = cycle(&c, &[on_node_1(10, 1, 0)], &[never, job(2, 0, 1, 1)], &late);
    assert!(admitted(&d).contains_key(&2), "{d:?}");
    assert!(!reason(&d, 1).contains("starvation"), "{d:?}");
    assert!(reason(&d, 1).contains("free room for"), "{d:?}");
    // More than its team may ever hold (quota 0 + borrowLimit 4): the same.
    let c = cluster(2, vec![team("t", 1.0, 0, Some(4)), team("u", 1.0, 0, None)]);
    let too_big = job(1, 0, 2, 4);
    let d = cycle(
        &c,
        &[on_node_1(10, 1, 0)],
        &[too_big, job(2, 1, 1, 1)],
        &late,
    );
    assert!(admitted(&d).contains_key(&2), "{d:?}");
    assert!(reason(&d, 1).contains("at its limit"), "{d:?}");
}

#[test]
fn a_reservation_on_some_nodes_lets_others_start_on_the_rest() {
    // Four nodes of 4 GPUs, partly used; the steps on nodes 2 and 0 started first.
    let c = cluster(4, vec![team("t", 1.0, 0, None)]);
    let at = |id: u64, node: usize, gpu: u64, started: u64| Running {
        job: job(id, 0, 1, gpu),
        nodes: vec![node],
        started,
        work_at_risk: 0,
    };
    let running = vec![
        at(10, 0, 2, 10),
        at(11, 1, 2, 20),
        at(12, 2, 3, 5),
        at(13, 3, 1, 30),
    ];
    let late = Settings {
        starvation_limit: Some(100),
        now: 1000,
        ..Settings::default()
    };
    // A 2 x 4 GPU gang has starved; a 3-GPU, then two 2-GPU steps wait behind it.
    let waiting = vec![
        job(1, 0, 2, 4),
        job(2, 0, 1, 3),
        job(3, 0, 1, 2),
        job(4, 0, 1, 2),
    ];
    let d = cycle(&c, &running, &waiting, &late);
    assert!(reason(&d, 1).contains("node(s) 0, 2 are reserved"), "{d:?}");
    let a = admitted(&d);
    assert_eq!(a.get(&2), Some(&vec![3]), "{d:?}");
    assert_eq!(a.get(&3), Some(&vec![1]), "{d:?}");
    // The last one would fit only on a reserved node.
    assert!(!a.contains_key(&4), "{d:?}");
    assert!(reason(&d, 4).contains("reserved for step 1"), "{d:?}");
    // Without the starvation limit, binpack would have used the reserved nodes.
    let d = cycle(
        &c,
        &running,
        &waiting,
        &Settings {
            starvation_limit: None,
            ..late.clone()
        },
    );
    let used: BTreeSet<usize> = admitted(&d).values().flatten().copied().collect();
    assert!(used.contains(&0) || used.contains(&2), "{d:?}");
    // Once the steps on the reserved nodes end, the gang starts there, though the others
    // still run.
    let mut rest: Vec<Running> = running
        .iter()
        .filter(|r| r.nodes != [0] && r.nodes != [2])
        .cloned()
        .collect();
    rest.push(at(2, 3, 3, 1000));
    rest.push(at(3, 1, 2, 1000));
    let d = cycle(&c, &rest, &[job(1, 0, 2, 4), job(4, 0, 1, 2)], &late);
    let mut nodes = admitted(&d)[&1].clone();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![0, 2], "{d:?}");
}
