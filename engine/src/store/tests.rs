//! The store's conformance suite: every operation, run on SQLite and on PostgreSQL alike (as
//! quickwit's metastore suite runs on each backend), races for the same room included.
//!
//! `conformance!(name, body)` makes `name::sqlite` and `name::postgres`; the PostgreSQL one
//! gets a database of its own on the test server (`sluice_e2e::postgres`: the one
//! `$SLUICE_TEST_POSTGRES` names, else a throwaway server started for the test process).

use std::path::PathBuf;

use super::*;
use crate::run::state::{attempt as at, run as rs, step as ss};

/// A home folder of its own and a store on `backend`.
pub(super) async fn open(backend: &str, tag: &str) -> (Store, PathBuf) {
    let home = std::env::temp_dir().join(format!(
        "sluice-store-{tag}-{backend}-{}-{}",
        std::process::id(),
        crate::time::now_ms()
    ));
    let _ = std::fs::remove_dir_all(&home);
    let store = match backend {
        "sqlite" => Location::Sqlite(home.join("sluice.db")).open(&home).await,
        _ => {
            let url = sluice_e2e::postgres::database(tag)
                .unwrap_or_else(|e| panic!("PostgreSQL for the conformance suite: {e}"));
            Location::Postgres(url).open(&home).await
        }
    };
    (store.expect("the store opens"), home)
}

macro_rules! conformance {
    ($name:ident, |$store:ident, $backend:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn check($store: Store, $backend: &'static str) {
                let _ = $backend;
                $body
            }

            #[tokio::test]
            async fn sqlite() {
                let (store, home) = open("sqlite", stringify!($name)).await;
                check(store, "sqlite").await;
                let _ = std::fs::remove_dir_all(home);
            }

            #[tokio::test]
            async fn postgres() {
                let (store, home) = open("postgres", stringify!($name)).await;
                check(store, "postgres").await;
                let _ = std::fs::remove_dir_all(home);
            }
        }
    };
}

fn step(name: &str) -> StepRow {
    StepRow {
        name: name.into(),
        step: name.into(),
        state: ss::PENDING.into(),
        ..StepRow::default()
    }
}

fn new_run(id: &str, name: &str, team: &str, steps: &[&str]) -> NewRun {
    NewRun {
        id: id.into(),
        name: name.into(),
        team: team.into(),
        file: "p.yaml".into(),
        workdir: "/w".into(),
        objects: "file:///objects".into(),
        source: "kind: Pipeline".into(),
        document: None,
        params: "{}".into(),
        cluster: None,
        applied_version: None,
        schedule: None,
        steps: steps.iter().map(|s| step(s)).collect(),
    }
}

fn attempt(step: &str, number: i64, millicpu: i64) -> AttemptRow {
    AttemptRow {
        step: step.into(),
        number,
        state: at::RUNNING.into(),
        dir: format!("/attempts/{step}/{number}"),
        millicpu,
        memory: 1 << 20,
        started_at: crate::time::now_rfc3339(),
        ..AttemptRow::default()
    }
}

fn machine(millicpu: i64, gpus: Vec<u32>) -> Capacity {
    Capacity {
        millicpu,
        memory: 1 << 40,
        gpus,
    }
}

async fn events(store: &Store, run: &str) -> Vec<String> {
    let rows = sqlx::query("SELECT kind FROM events WHERE run_id = $1 ORDER BY id")
        .bind(run)
        .fetch_all(store.pool())
        .await
        .expect("events");
    read::column(&rows, "an event").expect("kinds")
}

async fn running(store: &Store) -> usize {
    store.running_attempts().await.expect("running").len()
}

conformance!(runs_are_created_and_read_back, |store, backend| {
    // Steps come back in the file's order, not by name.
    let run = new_run("r1", "train", "vision", &["zeta", "alpha", "mid"]);
    store.create_run(&run, None).await.expect("create");
    let row = store.run("r1").await.expect("run");
    assert_eq!(
        (row.name.as_str(), row.team.as_str(), row.state.as_str()),
        ("train", "vision", rs::RUNNING)
    );
    assert!(!row.cancel_requested && row.holder().is_none() && row.ended_at.is_none());
    let names: Vec<String> = store
        .steps("r1")
        .await
        .expect("steps")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
    assert!(store.attempts("r1").await.expect("attempts").is_empty());
    assert_eq!(events(&store, "r1").await, ["created"]);
    assert!(matches!(store.run("nope").await, Err(Error::NotFound(_))));
    // The same id twice is refused and leaves the first untouched.
    assert!(store.create_run(&run, None).await.is_err());
    assert_eq!(store.steps("r1").await.expect("steps").len(), 3);
});

conformance!(
    runs_are_listed_newest_first_and_filtered,
    |store, backend| {
        for (id, team) in [("a1", "x"), ("b2", "y"), ("c3", "x")] {
            store
                .create_run(&new_run(id, "p", team, &["s"]), None)
                .await
                .expect("create");
            // created_at has millisecond precision: keep the order unambiguous.
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
        let ids = |rows: Vec<RunRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.runs(None, None, 10).await.expect("all")),
            ["c3", "b2", "a1"]
        );
        assert_eq!(
            ids(store.runs(Some("x"), None, 10).await.expect("x")),
            ["c3", "a1"]
        );
        assert_eq!(ids(store.runs(None, None, 1).await.expect("one")), ["c3"]);
        assert!(
            store
                .runs(None, Some(rs::SUCCEEDED), 10)
                .await
                .expect("none")
                .is_empty()
        );
    }
);

conformance!(
    references_resolve_by_id_prefix_and_latest,
    |store, backend| {
        assert!(matches!(
            store.resolve("@latest").await,
            Err(Error::NotFound(_))
        ));
        for (id, name) in [("abc111", "train"), ("abd222", "train"), ("xyz333", "eval")] {
            store
                .create_run(&new_run(id, name, "t", &["s"]), None)
                .await
                .expect("create");
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        }
        assert_eq!(store.resolve("abc111").await.expect("exact"), "abc111");
        assert_eq!(store.resolve("abd").await.expect("prefix"), "abd222");
        assert_eq!(store.resolve("@latest").await.expect("latest"), "xyz333");
        assert_eq!(
            store.resolve("train@latest").await.expect("named"),
            "abd222"
        );
        let Err(Error::NotFound(ambiguous)) = store.resolve("ab").await else {
            panic!("a prefix of two runs is ambiguous");
        };
        assert!(ambiguous.contains("ambiguous"), "{ambiguous}");
        let Err(Error::NotFound(hint)) = store.resolve("trian@latest").await else {
            panic!("no such name");
        };
        assert!(hint.contains("did you mean 'train@latest'"), "{hint}");
        // LIKE's wildcards in a reference match nothing by themselves.
        assert!(store.resolve("%").await.is_err());
    }
);

conformance!(a_change_is_committed_whole, |store, backend| {
    store
        .create_run(&new_run("r", "p", "t", &["a", "b"]), None)
        .await
        .expect("create");
    let mut a = step("a");
    a.state = ss::SUCCEEDED.into();
    a.attempts = 1;
    a.metrics = Some(r#"{"loss":0.5}"#.into());
    let mut extra = step("a[1]");
    extra.item = Some("1".into());
    let change = Change {
        steps: vec![&a],
        new_steps: vec![&extra],
        attempts: vec![],
        run_end: Some((rs::FAILED.into(), Some("b failed".into()))),
        events: (0..1500)
            .map(|i| Event {
                step: Some("a".into()),
                kind: format!("e{i}"),
                detail: None,
            })
            .collect(),
    };
    store.commit("r", change).await.expect("commit");
    let steps = store.steps("r").await.expect("steps");
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[0], a);
    assert_eq!(steps[2].item.as_deref(), Some("1"));
    let run = store.run("r").await.expect("run");
    assert_eq!(run.state, rs::FAILED);
    assert_eq!(run.reason.as_deref(), Some("b failed"));
    assert!(run.ended_at.is_some());
    // More events than one statement's worth, in order.
    let kinds = events(&store, "r").await;
    assert_eq!(kinds.len(), 1501);
    assert_eq!(kinds[1], "e0");
    assert_eq!(kinds[1500], "e1499");
});

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
    ended.state = at::SUCCEEDED.into();
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
    b_done.state = at::FAILED.into();
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
                .open(&store.home)
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

/// Where `store` is, to open it again as another engine would (its `shown` form hides no
/// password here: the test server has none).
fn location_of(store: &Store, backend: &str) -> Location {
    match backend {
        "sqlite" => Location::Sqlite(store.home.join("sluice.db")),
        _ => Location::Postgres(store.shown().to_owned()),
    }
}

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
                .open(&store.home)
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
    queued_a.state = ss::QUEUED.into();
    let mut queued_b = step("b");
    queued_b.state = ss::QUEUED.into();
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

conformance!(the_lease_is_taken_refused_and_released, |store, backend| {
    store
        .create_run(&new_run("l", "p", "t", &["s"]), None)
        .await
        .expect("create");
    let me = Holder {
        owner: "1@a".into(),
        until: 100,
        started: Some(7),
    };
    let other = Holder {
        owner: "2@b".into(),
        until: 200,
        started: None,
    };
    assert_eq!(
        store
            .take_lease("l", &me, |_| true, false)
            .await
            .expect("take"),
        Ok(())
    );
    assert_eq!(
        store.run("l").await.expect("run").holder(),
        Some(me.clone())
    );
    // Another engine is refused while the holder lives, and gets it once it is dead.
    assert_eq!(
        store
            .take_lease("l", &other, |_| true, false)
            .await
            .expect("refused"),
        Err(me.clone())
    );
    assert_eq!(
        store
            .take_lease("l", &other, |_| false, false)
            .await
            .expect("dead"),
        Ok(())
    );
    store.release_lease("l", "1@a").await.expect("not mine");
    assert_eq!(
        store.run("l").await.expect("run").holder(),
        Some(other.clone())
    );
    store.release_lease("l", "2@b").await.expect("release");
    assert_eq!(store.run("l").await.expect("run").holder(), None);
    assert!(matches!(
        store.take_lease("missing", &me, |_| true, false).await,
        Err(Error::NotFound(_))
    ));
});

conformance!(cancel_and_retry_flags_round_trip, |store, backend| {
    store
        .create_run(&new_run("c", "p", "t", &["s"]), None)
        .await
        .expect("create");
    assert!(!store.cancel_requested("c").await.expect("flag"));
    store.request_cancel("c").await.expect("cancel");
    assert!(store.cancel_requested("c").await.expect("flag"));
    let mut failed = step("s");
    failed.state = ss::FAILED.into();
    store
        .commit(
            "c",
            Change {
                steps: vec![&failed],
                run_end: Some((rs::CANCELLED.into(), None)),
                ..Change::default()
            },
        )
        .await
        .expect("end");
    let pending = step("s");
    store
        .reopen("c", std::slice::from_ref(&pending))
        .await
        .expect("reopen");
    let run = store.run("c").await.expect("run");
    assert_eq!(run.state, rs::RUNNING);
    assert!(!run.cancel_requested && run.ended_at.is_none());
    assert_eq!(store.steps("c").await.expect("steps")[0], pending);
    assert_eq!(
        events(&store, "c").await.last().map(String::as_str),
        Some("retried")
    );
});

conformance!(the_cache_is_per_team_and_replaced, |store, backend| {
    assert_eq!(store.cache_get("t", "k").await.expect("get"), None);
    store
        .cache_put("t", "k", "r1", "a", "out/1")
        .await
        .expect("put");
    store
        .cache_put("t", "k", "r2", "a", "out/2")
        .await
        .expect("replace");
    store
        .cache_put("u", "k", "r3", "a", "out/3")
        .await
        .expect("other team");
    assert_eq!(
        store.cache_get("t", "k").await.expect("get").as_deref(),
        Some("out/2")
    );
    assert_eq!(
        store.cache_get("u", "k").await.expect("get").as_deref(),
        Some("out/3")
    );
    store.delete_cache("t", "k").await.expect("delete");
    assert_eq!(store.cache_get("t", "k").await.expect("get"), None);
});

conformance!(a_queue_limit_refuses_a_run_whole, |store, backend| {
    store
        .create_run(&new_run("q1", "p", "vision", &["a", "b", "c"]), Some(4))
        .await
        .expect("3 of 4");
    let refused = store
        .create_run(&new_run("q2", "p", "vision", &["a", "b"]), Some(4))
        .await;
    let Err(Error::QueueFull {
        queued,
        adding,
        limit,
        ..
    }) = refused
    else {
        panic!("over the limit: {refused:?}");
    };
    assert_eq!((queued, adding, limit), (3, 2, 4));
    assert!(matches!(store.run("q2").await, Err(Error::NotFound(_))));
    // Another team's queue is its own.
    store
        .create_run(&new_run("q3", "p", "audio", &["a", "b"]), Some(4))
        .await
        .expect("other team");
});

conformance!(orphans_are_found_and_collected_once, |store, backend| {
    store
        .create_run(&new_run("o", "p", "t", &["s"]), None)
        .await
        .expect("create");
    store
        .start_attempt(
            "o",
            &step("s"),
            &attempt("s", 1, 100),
            &machine(1000, vec![]),
            0,
            Change::default(),
        )
        .await
        .expect("start");
    let orphans = store.running_attempts().await.expect("orphans");
    assert_eq!(orphans.len(), 1);
    assert_eq!(
        (orphans[0].run_id.as_str(), orphans[0].attempt.step.as_str()),
        ("o", "s")
    );
    let mut lost = orphans[0].attempt.clone();
    lost.state = at::LOST.into();
    let ended = vec![("o".to_owned(), lost)];
    assert_eq!(store.collect(&ended).await.expect("collect"), 1);
    // A second collector changes nothing: the first record of the end stands.
    assert_eq!(store.collect(&ended).await.expect("again"), 0);
    assert_eq!(running(&store).await, 0);
    assert_eq!(
        events(&store, "o")
            .await
            .iter()
            .filter(|k| *k == "attempt-collected")
            .count(),
        1
    );
});

conformance!(deleting_a_run_goes_in_two_steps, |store, backend| {
    store
        .create_run(&new_run("d", "p", "t", &["s"]), None)
        .await
        .expect("create");
    store
        .cache_put("t", "k", "d", "s", "out")
        .await
        .expect("cache");
    assert!(matches!(
        store.mark_deleting("d").await.expect("mark"),
        Marked::Running
    ));
    store
        .commit(
            "d",
            Change {
                run_end: Some((rs::SUCCEEDED.into(), None)),
                ..Change::default()
            },
        )
        .await
        .expect("end");
    assert_eq!(store.ended_runs().await.expect("ended").len(), 1);
    let Marked::Deleting(before) = store.mark_deleting("d").await.expect("mark") else {
        panic!("an ended run is marked");
    };
    assert_eq!(before.state, rs::SUCCEEDED);
    assert_eq!(store.cache_get("t", "k").await.expect("cache"), None);
    assert!(
        store.reopen("d", &[]).await.is_err(),
        "a run being deleted is not retried"
    );
    store.forget_run("d").await.expect("forget");
    assert!(store.run_ids().await.expect("ids").is_empty());
    assert!(store.steps("d").await.expect("steps").is_empty());
    // Rows whose run is gone are swept.
    sqlx::query(
        "INSERT INTO steps (run_id, name, step, state) VALUES ('gone', 's', 's', 'Pending')",
    )
    .execute(store.pool())
    .await
    .expect("orphan row");
    assert_eq!(store.forget_orphan_rows().await.expect("sweep"), 1);
});

conformance!(
    a_bad_stored_value_is_an_error_naming_the_run,
    |store, backend| {
        store
            .create_run(&new_run("bad", "p", "t", &["s"]), None)
            .await
            .expect("create");
        sqlx::query("UPDATE runs SET cancel_requested = 7 WHERE id = 'bad'")
            .execute(store.pool())
            .await
            .expect("corrupt");
        let Err(Error::Corrupt(text)) = store.run("bad").await else {
            panic!("a flag of 7 is refused");
        };
        assert!(
            text.contains("run bad") && text.contains("cancel_requested"),
            "{text}"
        );
        assert!(store.cancel_requested("bad").await.is_err());
        store
            .start_attempt(
                "bad",
                &step("s"),
                &attempt("s", 1, 1),
                &machine(1000, vec![0, 1]),
                1,
                Change::default(),
            )
            .await
            .expect("start");
        sqlx::query("UPDATE attempts SET gpus = 'x' WHERE run_id = 'bad'")
            .execute(store.pool())
            .await
            .expect("corrupt gpus");
        let refused = store
            .start_attempt(
                "bad",
                &step("s"),
                &attempt("s", 2, 1),
                &machine(1000, vec![0, 1]),
                1,
                Change::default(),
            )
            .await;
        assert!(matches!(refused, Err(Error::Corrupt(_))), "{refused:?}");
    }
);

conformance!(
    reopening_migrates_once_and_a_newer_schema_is_refused,
    |store, backend| {
        let location = location_of(&store, backend);
        store
            .create_run(&new_run("keep", "p", "t", &["s"]), None)
            .await
            .expect("create");
        let again = location.open(&store.home).await.expect("reopen");
        assert_eq!(again.run("keep").await.expect("kept").id, "keep");
        sqlx::query("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (999, 'future', TRUE, $1, 0)")
        .bind(vec![0u8; 4])
        .execute(store.pool())
        .await
        .expect("a future version");
        let Err(Error::Unavailable(text)) = location.open(&store.home).await else {
            panic!("a newer schema is refused");
        };
        assert!(
            text.contains("newer sluice") && text.contains("999"),
            "{text}"
        );
    }
);

#[tokio::test]
async fn an_unreachable_postgres_is_unavailable_with_its_password_hidden() {
    let home =
        std::env::temp_dir().join(format!("sluice-store-unreachable-{}", std::process::id()));
    let location = Location::Postgres("postgres://sluice:s3cret@127.0.0.1:1/sluice".into());
    let Err(e) = location.open(&home).await else {
        panic!("nothing listens on port 1");
    };
    let text = e.to_string();
    assert!(e.is_unavailable(), "{text}");
    assert!(
        text.contains("127.0.0.1:1") && !text.contains("s3cret"),
        "{text}"
    );
}

#[tokio::test]
async fn a_home_made_before_sqlx_migrations_is_adopted() {
    // Homes written by the hand-written runner kept their versions in `schema_migrations`.
    let home = std::env::temp_dir().join(format!("sluice-store-old-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("home");
    let file = home.join("sluice.db");
    let script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nfor f in sys.argv[2:]:\n    c.executescript(open(f).read())\nc.execute('CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)')\nc.executemany('INSERT INTO schema_migrations VALUES (?, ?)', [(1, 'x'), (2, 'x'), (3, 'x')])\nc.execute(\"INSERT INTO runs (id, name, team, state, file, workdir, objects, source, params, created_at) VALUES ('old', 'p', 't', 'Succeeded', 'f', 'w', 'o', 's', '{}', '2026-01-01T00:00:00.000Z')\")\nc.commit()";
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/sqlite");
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&file)
        .arg(root.join("0001_init.sql"))
        .arg(root.join("0002_cluster.sql"))
        .arg(root.join("0003_engines.sql"))
        .status()
        .expect("python3 runs");
    assert!(status.success());
    let store = Location::Sqlite(file).open(&home).await.expect("adopted");
    assert_eq!(
        store.run("old").await.expect("old run").state,
        rs::SUCCEEDED
    );
    let _ = std::fs::remove_dir_all(home);
}

fn token(id: &str, team: &str, hash: &str) -> TokenRow {
    TokenRow {
        id: id.into(),
        name: Some(format!("{id}'s")),
        team: team.into(),
        role: "member".into(),
        hash: hash.into(),
        created_at: format!("2026-12-05T10:00:00.00{}Z", id.len()),
        expires_at: None,
        revoked_at: None,
    }
}

conformance!(
    tokens_are_found_by_hash_listed_per_team_and_revoked_once,
    |store, backend| {
        store
            .insert_token(&token("t1", "vision", "h1"))
            .await
            .expect("insert");
        store
            .insert_token(&token("t22", "nlp", "h2"))
            .await
            .expect("insert");
        // A hash is one token's: a second row with it is refused.
        assert!(store.insert_token(&token("t3", "nlp", "h1")).await.is_err());
        let found = store
            .token_by_hash("h2")
            .await
            .expect("read")
            .expect("found");
        assert_eq!(found, token("t22", "nlp", "h2"));
        assert_eq!(store.token_by_hash("nope").await.expect("read"), None);
        let ids = |rows: Vec<TokenRow>| rows.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(store.tokens(None).await.expect("list")), ["t1", "t22"]);
        assert_eq!(ids(store.tokens(Some("nlp")).await.expect("list")), ["t22"]);
        let before = store
            .revoke_token("t1", "2026-12-05T11:00:00.000Z")
            .await
            .expect("revoke");
        assert_eq!(before.map(|t| t.revoked_at), Some(None));
        store
            .revoke_token("t1", "2026-12-05T12:00:00.000Z")
            .await
            .expect("revoke again");
        let t1 = store
            .token_by_hash("h1")
            .await
            .expect("read")
            .expect("found");
        assert_eq!(
            t1.revoked_at.as_deref(),
            Some("2026-12-05T11:00:00.000Z"),
            "{backend}"
        );
        assert_eq!(
            store
                .revoke_token("t9", "2026-12-05T11:00:00.000Z")
                .await
                .expect("revoke"),
            None
        );
    }
);

conformance!(the_audit_record_keeps_changes_in_order, |store, backend| {
    for (i, action) in ["token create", "submit", "cancel"].into_iter().enumerate() {
        let row = AuditRow {
            at: format!("2026-12-05T10:00:0{i}.000Z"),
            who: "t1".into(),
            team: "vision".into(),
            action: action.into(),
            target: format!("run r{i}"),
            result: "ok".into(),
        };
        store.audit(&row).await.expect("audit");
    }
    let record = store.audit_record().await.expect("record");
    let actions: Vec<&str> = record.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, ["token create", "submit", "cancel"], "{backend}");
    assert_eq!(record[1].target, "run r1");
});

conformance!(
    a_leader_that_was_taken_over_writes_no_more,
    |store, backend| {
        store
            .create_run(&new_run("r", "p", "t", &["a"]), None)
            .await
            .expect("create");
        // Server A leads (epoch 1) and writes through its fenced store.
        let seen = store.leadership().await.expect("the leader row");
        assert_eq!((seen.epoch, seen.holder.as_deref()), (0, None));
        let a = store
            .try_lead(&seen, "1@a", 10_000)
            .await
            .expect("run for leader")
            .expect("A leads");
        let fenced = store.fenced(a);
        let change = || Change {
            steps: vec![],
            new_steps: vec![],
            attempts: vec![],
            run_end: None,
            events: vec![Event {
                step: None,
                kind: "by-a".into(),
                detail: None,
            }],
        };
        fenced
            .commit("r", change())
            .await
            .expect("A writes while it leads");
        assert!(store.renew_lead(a, "1@a", 20_000).await.expect("renew"));
        // A second candidate that read the same row loses the race.
        assert_eq!(
            store.try_lead(&seen, "2@b", 10_000).await.expect("race"),
            None
        );
        // B takes over once A's lease has run out: A's writes are refused from then on, and A
        // cannot renew; nothing of A's reaches the store.
        let seen = store.leadership().await.expect("the leader row");
        let b = store
            .try_lead(&seen, "2@b", 30_000)
            .await
            .expect("run for leader")
            .expect("B leads");
        assert_eq!(b, a + 1);
        let refused = fenced.commit("r", change()).await;
        assert!(matches!(refused, Err(Error::Fenced(_))), "{refused:?}");
        assert!(!store.renew_lead(a, "1@a", 40_000).await.expect("renew"));
        assert_eq!(events(&store, "r").await, ["created", "by-a"]);
        store
            .fenced(b)
            .commit("r", change())
            .await
            .expect("B writes");
        // B resigns: its lease ends at once.
        store.resign(b, "2@b").await.expect("resign");
        assert_eq!(store.leadership().await.expect("row").until_ms, 0);
    }
);

conformance!(
    usage_reads_the_attempts_that_held_room_in_a_window,
    |store, backend| {
        store
            .create_run(&new_run("r1", "train", "vision", &["fit"]), None)
            .await
            .expect("create");
        store
            .create_run(&new_run("r2", "eval", "nlp", &["score"]), None)
            .await
            .expect("create");
        // Attempts by hour of 2026-12-02: fit 1 from 01 to 03, fit 2 from 05 and running, score 1
        // from 02 to 04 (placed on a cluster node).
        let hour = |h: u32| format!("2026-12-02T{h:02}:00:00.000Z");
        let rows = [
            ("r1", "fit", 1, at::PREEMPTED, 1, Some(3), None),
            ("r1", "fit", 2, at::RUNNING, 5, None, None),
            ("r2", "score", 1, at::SUCCEEDED, 2, Some(4), Some("[1]")),
        ];
        for (run, step, number, state, start, end, nodes) in rows {
            sqlx::query("INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, started_at, ended_at, job, nodes) VALUES ($1, $2, $3, $4, $5, 1500, 0, '0,1', $6, $7, $8, $9)")
            .bind(run)
            .bind(step)
            .bind(number)
            .bind(state)
            .bind(format!("/attempts/{run}/{step}.{number}"))
            .bind(hour(start))
            .bind(end.map(hour))
            .bind(nodes.map(|_| "{}"))
            .bind(nodes)
            .execute(store.pool())
            .await
            .expect("insert");
        }
        let found = |rows: Vec<UsageRow>| -> Vec<(String, i64)> {
            rows.into_iter().map(|r| (r.step, r.number)).collect()
        };
        let all = store.usage(None, None, None).await.expect("usage");
        assert_eq!(all.len(), 3, "{backend}");
        let fit = &all[0];
        assert_eq!(
            (
                fit.run_id.as_str(),
                fit.team.as_str(),
                fit.pipeline.as_str(),
                fit.file_step.as_str(),
                fit.state.as_str(),
                fit.millicpu,
                fit.gpus.as_deref(),
                fit.ended_at.as_deref(),
            ),
            (
                "r1",
                "vision",
                "train",
                "fit",
                at::PREEMPTED,
                1500,
                Some("0,1"),
                Some(hour(3).as_str())
            ),
            "{backend}"
        );
        assert_eq!(all[2].nodes.as_deref(), Some("[1]"), "{backend}");
        assert_eq!(all[2].job.as_deref(), Some("{}"), "{backend}");
        // One team's.
        assert_eq!(
            found(store.usage(Some("nlp"), None, None).await.expect("usage")),
            [("score".to_owned(), 1)],
            "{backend}"
        );
        // [03:00, 05:00): fit 1 ended at 03 (nothing in it), fit 2 starts at 05 (nothing yet).
        assert_eq!(
            found(
                store
                    .usage(None, Some(&hour(3)), Some(&hour(5)))
                    .await
                    .expect("usage")
            ),
            [("score".to_owned(), 1)],
            "{backend}"
        );
        // From 06:00 on: only the running one.
        assert_eq!(
            found(
                store
                    .usage(None, Some(&hour(6)), None)
                    .await
                    .expect("usage")
            ),
            [("fit".to_owned(), 2)],
            "{backend}"
        );
    }
);

fn doc(kind: &str, name: &str, source: &str) -> NewDocument {
    NewDocument {
        kind: kind.into(),
        name: name.into(),
        source: source.into(),
        path: "p.yaml".into(),
        workdir: "/w".into(),
    }
}

conformance!(
    apply_keeps_versions_and_prunes_only_the_teams_own,
    |store, backend| {
        let at = "2026-12-01T00:00:00.000Z";
        let did = |v: Vec<(String, String, Applied)>| -> Vec<String> {
            v.into_iter()
                .map(|(k, n, a)| format!("{k}/{n} {}", a.as_str()))
                .collect()
        };
        let first = [
            doc("Pipeline", "retrain", "v1"),
            doc("Schedule", "nightly", "s1"),
        ];
        let out = store
            .apply("vision", &first, false, false, "t1", at)
            .await
            .expect("apply");
        assert_eq!(
            did(out),
            ["Pipeline/retrain created", "Schedule/nightly created"]
        );
        store
            .apply(
                "nlp",
                &[doc("Pipeline", "other", "x")],
                false,
                false,
                "t2",
                at,
            )
            .await
            .expect("apply");
        // A dry run says what would happen and writes nothing.
        let second = [
            doc("Pipeline", "retrain", "v2"),
            doc("Schedule", "nightly", "s1"),
        ];
        let out = store
            .apply("vision", &second, true, true, "t1", at)
            .await
            .expect("dry run");
        assert_eq!(
            did(out),
            ["Pipeline/retrain configured", "Schedule/nightly unchanged"]
        );
        let held = store.applied(Some("vision")).await.expect("applied");
        assert_eq!(held[0].source, "v1", "{backend}: a dry run wrote");
        // Configured makes version 2; pruning removes what the paths no longer hold, of this
        // team only.
        let out = store
            .apply(
                "vision",
                &[doc("Pipeline", "retrain", "v2")],
                true,
                false,
                "t1",
                at,
            )
            .await
            .expect("apply");
        assert_eq!(
            did(out),
            ["Pipeline/retrain configured", "Schedule/nightly pruned"]
        );
        let held = store.applied(Some("vision")).await.expect("applied");
        assert_eq!(held.len(), 1);
        assert_eq!((held[0].version, held[0].source.as_str()), (2, "v2"));
        assert_eq!(store.applied(Some("nlp")).await.expect("nlp").len(), 1);
        // Applied again, a pruned document is created again, as a new version.
        let out = store
            .apply(
                "vision",
                &[doc("Schedule", "nightly", "s1")],
                false,
                false,
                "t1",
                at,
            )
            .await
            .expect("apply");
        assert_eq!(did(out), ["Schedule/nightly created"]);
        let s = store
            .applied_named("vision", &["Schedule"], "nightly")
            .await
            .expect("read")
            .expect("in force");
        assert_eq!(s.version, 2);
    }
);

conformance!(
    ticks_decided_at_once_write_what_is_new_and_nothing_when_a_run_is_refused,
    |store, backend| {
        let fire = |schedule: &str, run: &str| FireRow {
            team: "vision".into(),
            schedule: schedule.into(),
            tick: "2026-12-01T02:00:00.000Z".into(),
            outcome: "started".into(),
            run_id: Some(run.into()),
            reason: None,
            version: 1,
            recorded_at: "2026-12-01T02:00:00.100Z".into(),
        };
        let run = |id: &str, schedule: &str| {
            let mut r = new_run(id, "retrain", "vision", &["a"]);
            r.schedule = Some(schedule.into());
            r
        };
        let (a, b) = (run("ra", "a"), run("rb", "b"));
        assert!(
            store
                .fire(&fire("a", "ra"), Some((&a, None)))
                .await
                .expect("fire")
        );
        // `a`'s tick was decided already (a restarted server deciding again): only `b`'s is
        // written, with its run.
        let (fa, fb) = (fire("a", "ra2"), fire("b", "rb"));
        let a2 = run("ra2", "a");
        let written = store
            .fires_at_once(&[(&fa, Some((&a2, None))), (&fb, Some((&b, None)))])
            .await
            .expect("fires");
        assert_eq!(written, [false, true], "{backend}");
        assert!(matches!(store.run("ra2").await, Err(Error::NotFound(_))));
        assert!(store.run("rb").await.is_ok());
        // A run refused past its team's queue writes none of the batch.
        let (fc, fd) = (fire("c", "rc"), fire("d", "rd"));
        let (c, d) = (run("rc", "c"), run("rd", "d"));
        let refused = store
            .fires_at_once(&[(&fc, Some((&c, None))), (&fd, Some((&d, Some(0))))])
            .await;
        assert!(
            matches!(refused, Err(Error::QueueFull { .. })),
            "{refused:?}"
        );
        assert!(store.fires("vision", "c").await.expect("fires").is_empty());
        assert!(matches!(store.run("rc").await, Err(Error::NotFound(_))));
    }
);

conformance!(
    a_tick_is_decided_once_with_its_run_or_not_at_all,
    |store, backend| {
        let fire = |tick: &str, run: Option<&str>| FireRow {
            team: "vision".into(),
            schedule: "nightly".into(),
            tick: tick.into(),
            outcome: if run.is_some() { "started" } else { "missed" }.into(),
            run_id: run.map(str::to_owned),
            reason: None,
            version: 1,
            recorded_at: "2026-12-01T02:00:01.000Z".into(),
        };
        let mut run = new_run("r1", "retrain", "vision", &["a", "b"]);
        run.schedule = Some("nightly".into());
        run.applied_version = Some(3);
        let t1 = "2026-12-01T02:00:00.000Z";
        assert!(
            store
                .fire(&fire(t1, Some("r1")), Some((&run, None)))
                .await
                .expect("fire")
        );
        // The same tick again (a restarted or second server): refused, and no second run.
        let mut again = new_run("r2", "retrain", "vision", &["a"]);
        again.schedule = Some("nightly".into());
        assert!(
            !store
                .fire(&fire(t1, Some("r2")), Some((&again, None)))
                .await
                .expect("fire")
        );
        assert!(
            matches!(store.run("r2").await, Err(Error::NotFound(_))),
            "{backend}"
        );
        let row = store.run("r1").await.expect("r1");
        assert_eq!(
            (row.applied_version, row.schedule.as_deref()),
            (Some(3), Some("nightly"))
        );
        assert_eq!(
            store
                .schedule_running("vision", "nightly")
                .await
                .expect("running"),
            ["r1"]
        );
        // A run refused by its team's queue leaves no fire behind either.
        let t2 = "2026-12-02T02:00:00.000Z";
        let refused = store
            .fire(&fire(t2, Some("r2")), Some((&again, Some(0))))
            .await;
        assert!(
            matches!(refused, Err(Error::QueueFull { .. })),
            "{refused:?}"
        );
        assert!(
            store
                .fire(&fire(t2, None), None)
                .await
                .expect("record it missed")
        );
        let fires = store.fires("vision", "nightly").await.expect("fires");
        assert_eq!(fires.len(), 2);
        assert_eq!(fires[1].outcome, "missed");
        assert_eq!(
            store
                .last_fire("vision", "nightly")
                .await
                .expect("last")
                .map(|f| f.tick),
            Some(t2.to_owned())
        );
    }
);
