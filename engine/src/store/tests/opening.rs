//! Reading what is stored, and opening stores: bad values, migrations, an unreachable
//! PostgreSQL, homes from before sqlx.

use super::*;

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
    a_state_no_lifecycle_has_is_an_error_naming_the_row,
    |store, backend| {
        store
            .create_run(&new_run("odd", "p", "t", &["s"]), None)
            .await
            .expect("create");
        sqlx::query("UPDATE steps SET state = 'Done' WHERE run_id = 'odd'")
            .execute(store.pool())
            .await
            .expect("corrupt the step");
        let Err(Error::Corrupt(text)) = store.steps("odd").await else {
            panic!("a step state of 'Done' is refused");
        };
        assert!(
            text.contains("step s of run odd")
                && text.contains("\"Done\" is not a StepState")
                && text.contains("Pending, Queued, Running"),
            "{backend}: {text}"
        );
        // The contract's names, exactly: a lowercase run state is not one either.
        sqlx::query("UPDATE runs SET state = 'running' WHERE id = 'odd'")
            .execute(store.pool())
            .await
            .expect("corrupt the run");
        let Err(Error::Corrupt(text)) = store.run("odd").await else {
            panic!("a run state of 'running' is refused");
        };
        assert!(
            text.contains("run odd") && text.contains("RunState"),
            "{text}"
        );
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
        let again = location.open(&store.home, false).await.expect("reopen");
        assert_eq!(again.run("keep").await.expect("kept").id, "keep");
        sqlx::query("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (999, 'future', TRUE, $1, 0)")
        .bind(vec![0u8; 4])
        .execute(store.pool())
        .await
        .expect("a future version");
        let Err(Error::Unavailable(text)) = location.open(&store.home, false).await else {
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
    let Err(e) = location.open(&home, false).await else {
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
    let store = Location::Sqlite(file)
        .open(&home, false)
        .await
        .expect("adopted");
    assert_eq!(
        store.run("old").await.expect("old run").state,
        rs::SUCCEEDED
    );
    let _ = std::fs::remove_dir_all(home);
}
