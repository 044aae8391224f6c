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
        "sqlite" => {
            Location::Sqlite(home.join("sluice.db"))
                .open(&home, false)
                .await
        }
        _ => {
            let url = sluice_e2e::postgres::database(tag)
                .unwrap_or_else(|e| panic!("PostgreSQL for the conformance suite: {e}"));
            Location::Postgres(url).open(&home, false).await
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
        state: ss::PENDING,
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
        state: at::RUNNING,
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
        ("train", "vision", rs::RUNNING.as_str())
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
                .runs(None, Some(rs::SUCCEEDED.as_str()), 10)
                .await
                .expect("none")
                .is_empty()
        );
        // A schedule's runs (the web UI's filter), with the other filters and a page.
        let mut fired = new_run("d4", "p", "x", &["s"]);
        fired.schedule = Some("nightly".into());
        store.create_run(&fired, None).await.expect("create");
        let query = |schedule, offset| crate::store::RunQuery {
            team: Some("x"),
            schedule,
            limit: 10,
            offset,
            ..Default::default()
        };
        assert_eq!(
            ids(store
                .runs_matching(&query(Some("nightly"), 0))
                .await
                .expect("q")),
            ["d4"],
            "{backend}"
        );
        assert!(
            store
                .runs_matching(&query(Some("weekly"), 0))
                .await
                .expect("q")
                .is_empty()
        );
        assert_eq!(
            ids(store.runs_matching(&query(None, 1)).await.expect("q")),
            ["c3", "a1"],
            "the second page"
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
    a.state = ss::SUCCEEDED;
    a.attempts = 1;
    a.metrics = Some(r#"{"loss":0.5}"#.into());
    let mut extra = step("a[1]");
    extra.item = Some("1".into());
    let change = Change {
        steps: vec![&a],
        new_steps: vec![&extra],
        attempts: vec![],
        run_end: Some((rs::FAILED, Some("b failed".into()))),
        events: (0..1500)
            .map(|i| Event {
                step: Some("a".into()),
                kind: EventKind::AttemptEnded,
                detail: Some(format!("e{i}")),
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
    assert_eq!(kinds[0], "created");
    assert!(kinds[1..].iter().all(|k| k == "attempt-ended"), "{kinds:?}");
    let rows =
        sqlx::query("SELECT detail FROM events WHERE run_id = $1 AND step = 'a' ORDER BY id")
            .bind("r")
            .fetch_all(store.pool())
            .await
            .expect("details");
    let details: Vec<String> = read::column(&rows, "an event").expect("details");
    assert_eq!(details.first().map(String::as_str), Some("e0"));
    assert_eq!(details.last().map(String::as_str), Some("e1499"));
});

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
    failed.state = ss::FAILED;
    store
        .commit(
            "c",
            Change {
                steps: vec![&failed],
                run_end: Some((rs::CANCELLED, None)),
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
    lost.state = at::LOST;
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
                run_end: Some((rs::SUCCEEDED, None)),
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

/// Where `store` is, to open it again as another engine would (its `shown` form hides no
/// password here: the test server has none).
fn location_of(store: &Store, backend: &str) -> Location {
    match backend {
        "sqlite" => Location::Sqlite(store.home.join("sluice.db")),
        _ => Location::Postgres(store.shown().to_owned()),
    }
}

mod applied;
mod history;
mod opening;
mod room;
mod server;

conformance!(
    a_page_of_steps_reads_only_its_rows_in_file_order_with_their_attempts,
    |store, backend| {
        // More steps than one statement binds for the attempts' lookup (500 a chunk).
        let names: Vec<String> = (0..1100).map(|i| format!("s{:04}", 1099 - i)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        store
            .create_run(&new_run("big", "fan", "t", &refs), None)
            .await
            .expect("create");
        for name in ["s1099", "s0500", "s0001"] {
            store
                .start_attempt(
                    "big",
                    &step(name),
                    &attempt(name, 1, 100),
                    &machine(1000, vec![]),
                    0,
                    Change::default(),
                )
                .await
                .expect("start");
        }
        // The file's order (names descending here), not the names' order.
        let page = store.steps_page("big", 3, 1).await.expect("page");
        let got: Vec<&str> = page.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(got, ["s1098", "s1097", "s1096"]);
        let last = store.steps_page("big", 10, 1098).await.expect("last page");
        let got: Vec<&str> = last.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(got, ["s0001", "s0000"]);
        assert!(
            store
                .steps_page("big", 10, 1100)
                .await
                .expect("past the end")
                .is_empty()
        );
        let counts = store.step_counts("big").await.expect("counts");
        let total: i64 = counts.iter().map(|(_, n)| n).sum();
        assert_eq!(total, 1100);
        assert!(counts.iter().all(|(_, n)| *n > 0), "{counts:?}");
        assert!(
            counts.contains(&(ss::PENDING, 1097)) || counts.contains(&(ss::PENDING, 1100)),
            "{counts:?}"
        );
        // Attempts of the steps asked for only, across chunks.
        let asked: Vec<&str> = refs[..700].iter().copied().chain(["s0001"]).collect();
        let attempts = store.attempts_of("big", &asked).await.expect("attempts");
        let mut got: Vec<&str> = attempts.iter().map(|a| a.step.as_str()).collect();
        got.sort_unstable();
        assert_eq!(got, ["s0001", "s0500", "s1099"]);
        assert!(
            store
                .attempts_of("big", &["s0002"])
                .await
                .expect("none")
                .is_empty()
        );
    }
);
