//! Room shared by runs and engines: the machine's pool, nodes, waiting steps, a team's trial
//! rate, with concurrent takers.

use super::*;

conformance!(the_machine_is_never_overcommitted, |store, backend| {
    store
        .create_run(&new_run("r", "p", "t", &["a", "b", "c", "big"]), None)
        .await
        .expect("create");
    let cap = machine(1000, vec![0, 1, 2]);
    let started = store
        .start_attempt(
            "r",
            &step("a"),
            &attempt("a", 1, 600),
            &cap,
            2,
            Change::default(),
        )
        .await
        .expect("start a");
    assert_eq!(started, Some(vec![0, 1]), "the lowest free GPU indices");
    // No room for 600 more millicpu.
    let refused = store
        .start_attempt(
            "r",
            &step("b"),
            &attempt("b", 1, 600),
            &cap,
            0,
            Change::default(),
        )
        .await
        .expect("start b");
    assert_eq!(refused, None);
    // Two GPUs asked, one free: all or none.
    let none = store
        .start_attempt(
            "r",
            &step("c"),
            &attempt("c", 1, 100),
            &cap,
            2,
            Change::default(),
        )
        .await
        .expect("start c");
    assert_eq!(none, None);
    assert_eq!(running(&store).await, 1);
    // Ending `a` in the same transaction frees the room `b` needs.
    let mut ended = attempt("a", 1, 600);
    ended.state = at::SUCCEEDED;
    ended.exit_code = Some(0);
    let before = Change {
        attempts: vec![&ended],
        ..Change::default()
    };
    let started = store
        .start_attempt("r", &step("b"), &attempt("b", 1, 600), &cap, 1, before)
        .await
        .expect("start b again");
    assert_eq!(started, Some(vec![0]));
    let attempts = store.attempts("r").await.expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].exit_code, Some(0));
    assert_eq!(attempts[1].gpus.as_deref(), Some("0"));
    // A step larger than the whole machine still runs, alone.
    let mut b_done = attempt("b", 1, 600);
    b_done.state = at::FAILED;
    store
        .commit(
            "r",
            Change {
                attempts: vec![&b_done],
                ..Change::default()
            },
        )
        .await
        .expect("end b");
    let alone = store
        .start_attempt(
            "r",
            &step("big"),
            &attempt("big", 1, 5000),
            &cap,
            0,
            Change::default(),
        )
        .await
        .expect("start big");
    assert_eq!(alone, Some(vec![]));
    assert!(
        events(&store, "r")
            .await
            .contains(&"attempt-started".to_owned())
    );
});

conformance!(
    concurrent_starts_racing_for_the_same_room_take_it_once,
    |store, backend| {
        // Eight engines (each with its own pool, as separate processes have) start a step of 600
        // millicpu on a machine of 1000 at the same moment: exactly one may run.
        let ids: Vec<String> = (0..8).map(|i| format!("race{i}")).collect();
        for id in &ids {
            store
                .create_run(&new_run(id, "p", "t", &["s"]), None)
                .await
                .expect("create");
        }
        let mut handles = Vec::new();
        for id in ids.clone() {
            let other = location_of(&store, backend)
                .open(&store.home, false)
                .await
                .expect("another engine opens the store");
            handles.push(tokio::spawn(async move {
                other
                    .start_attempt(
                        &id,
                        &step("s"),
                        &attempt("s", 1, 600),
                        &machine(1000, vec![0]),
                        1,
                        Change::default(),
                    )
                    .await
                    .expect("start")
            }));
        }
        let mut started = 0;
        for h in handles {
            if h.await.expect("task").is_some() {
                started += 1;
            }
        }
        assert_eq!(
            started, 1,
            "one start took the room, the others saw it taken"
        );
        assert_eq!(running(&store).await, 1);
    }
);

conformance!(
    concurrent_placements_on_one_node_take_it_once,
    |store, backend| {
        // Cluster mode: the closure decides with what runs now; two engines racing for the last
        // GPU of node 0 must not both get it.
        let ids: Vec<String> = (0..6).map(|i| format!("place{i}")).collect();
        for id in &ids {
            store
                .create_run(&new_run(id, "p", "t", &["s"]), None)
                .await
                .expect("create");
        }
        let mut handles = Vec::new();
        for id in ids.clone() {
            let other = location_of(&store, backend)
                .open(&store.home, false)
                .await
                .expect("another engine opens the store");
            handles.push(tokio::spawn(async move {
                let mut a = attempt("s", 1, 1000);
                a.job = Some(r#"{"gpus":1}"#.into());
                a.nodes = Some("[0]".into());
                other
                    .start_placed(&id, &step("s"), &a, Change::default(), None, |held| {
                        held.is_empty().then(|| "0".to_owned())
                    })
                    .await
                    .expect("place")
            }));
        }
        let mut outcomes = Vec::new();
        for h in handles {
            outcomes.push(h.await.expect("task"));
        }
        let started = outcomes
            .iter()
            .filter(|p| matches!(p, Placed::Started(_)))
            .count();
        assert_eq!(started, 1, "{outcomes:?}");
        assert_eq!(outcomes.iter().filter(|p| **p == Placed::NoRoom).count(), 5);
    }
);

conformance!(waiting_steps_keep_their_age_and_order, |store, backend| {
    for id in ["w1", "w2"] {
        store
            .create_run(&new_run(id, "p", "t", &["a", "b"]), None)
            .await
            .expect("create");
    }
    let mut queued_a = step("a");
    queued_a.state = ss::QUEUED;
    let mut queued_b = step("b");
    queued_b.state = ss::QUEUED;
    let queue = Change {
        steps: vec![&queued_a, &queued_b],
        ..Change::default()
    };
    let mine = vec![
        ("a".to_owned(), "{}".to_owned()),
        ("b".to_owned(), "{}".to_owned()),
    ];
    let (held, waiting) = store
        .claims("w1", queue, &mine, 1000)
        .await
        .expect("claims");
    assert!(held.is_empty());
    // w2 has no engine holding its lease: only w1's own steps are seen.
    assert_eq!(waiting.len(), 2);
    assert_eq!((waiting[0].step.as_str(), waiting[0].since), ("a", 1000));
    // Later, w1 still waits: its steps keep their first age.
    let (_, waiting) = store
        .claims("w1", Change::default(), &mine, 5000)
        .await
        .expect("claims again");
    assert!(waiting.iter().all(|c| c.since == 1000), "{waiting:?}");
    assert_eq!(store.waiting_runs().await.expect("waiting runs")[0].0, "w1");
    store.forget_waiting(&["w1".into()]).await.expect("forget");
    assert!(store.waiting_runs().await.expect("none").is_empty());
});

conformance!(
    a_teams_trial_rate_is_shared_by_every_engine,
    |store, backend| {
        store
            .create_run(&new_run("t1", "sweep", "vision", &["t0", "t1", "t2"]), None)
            .await
            .expect("create");
        let rate = |now| {
            Some(Rate {
                team: "vision",
                interval_ms: 1000,
                now,
            })
        };
        let mut outcomes = Vec::new();
        for (i, now) in [(0, 10_000), (1, 10_500), (2, 11_000)] {
            let name = format!("t{i}");
            let mut a = attempt(&name, 1, 0);
            a.job = Some("{}".into());
            a.nodes = Some("[0]".into());
            outcomes.push(
                store
                    .start_placed("t1", &step(&name), &a, Change::default(), rate(now), |_| {
                        Some(String::new())
                    })
                    .await
                    .expect("start"),
            );
        }
        assert_eq!(
            outcomes,
            [
                Placed::Started(String::new()),
                Placed::RateLimited { until: 11_000 },
                Placed::Started(String::new())
            ]
        );
    }
);

conformance!(
    a_step_waiting_for_the_pool_is_woken_when_room_frees,
    |store, backend| {
        store
            .create_run(&new_run("r", "p", "t", &["a", "b"]), None)
            .await
            .expect("create");
        let cap = machine(1000, vec![]);
        let started = store
            .start_attempt(
                "r",
                &step("a"),
                &attempt("a", 1, 600),
                &cap,
                0,
                Change::default(),
            )
            .await
            .expect("start a");
        assert!(started.is_some(), "`a` fits an empty machine");
        let ticket = store.wait_for_room(
            &cap,
            crate::store::room::Need {
                millicpu: 600,
                memory: 1 << 20,
                gpus: 0,
            },
        );
        let mut ended = attempt("a", 1, 600);
        ended.state = at::SUCCEEDED;
        ended.exit_code = Some(0);
        store
            .commit(
                "r",
                Change {
                    attempts: vec![&ended],
                    ..Change::default()
                },
            )
            .await
            .expect("end a");
        // The pool's task reads what is left (on PostgreSQL too, where SUM is NUMERIC) and wakes
        // the waiter well before the step's own slow retry would.
        tokio::time::timeout(crate::store::room::RECHECK * 2, ticket.ready.notified())
            .await
            .unwrap_or_else(|_| panic!("{backend}: the waiter was not woken once `a` ended"));
    }
);
