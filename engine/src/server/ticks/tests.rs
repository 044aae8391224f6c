//! The schedule loop under a driven clock, on a real store: each tick decided once (a pass
//! repeated, two loops at once), catch-up after a server was down, concurrency, and an edit
//! that never fires at once.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::*;
use crate::clock::ManualClock;
use crate::service::apply::File;
use crate::service::{Role, Service};

struct Setup {
    ticks: Ticks,
    clock: ManualClock,
    store: Store,
    home: std::path::PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn t(s: &str) -> DateTime<Utc> {
    crate::time::parse(s).expect("a time")
}

fn files(schedule: &str) -> Vec<File> {
    let text = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: retrain}}\nspec:\n  params:\n    epochs: {{type: int, default: 1}}\n  steps:\n    - name: train\n      run: echo {{{{params.epochs}}}}\n---\napiVersion: sluice.dev/v1\nkind: Schedule\nmetadata: {{name: hourly}}\nspec:\n  pipeline: retrain\n  params: {{epochs: 3}}\n{schedule}"
    );
    vec![File {
        path: "nightly.yaml".into(),
        text,
        workdir: "/tmp".into(),
    }]
}

async fn setup(tag: &str, schedule: &str, applied_at: &str) -> Setup {
    let home = std::env::temp_dir().join(format!(
        "sluice-ticks-{tag}-{}-{}",
        std::process::id(),
        crate::time::now_ms()
    ));
    let store = crate::store::Store::open(&home).await.expect("a store");
    let clock = ManualClock::new(t(applied_at));
    let service = Service::new(store.clone(), Arc::new(clock.clone()));
    let who = Principal::new("vision", Role::Member);
    service
        .apply(&who, "test", &files(schedule), false, false, None)
        .await
        .expect("applied");
    let metrics = Arc::new(crate::server::metrics::Metrics::new());
    let drivers = Drivers::new(service.clone(), metrics, None, None);
    Setup {
        ticks: Ticks::new(service, drivers, None, None),
        clock,
        store,
        home,
    }
}

async fn fires(s: &Setup) -> Vec<(String, String)> {
    s.store
        .fires("vision", "hourly")
        .await
        .expect("fires")
        .into_iter()
        .map(|f| (f.tick, f.outcome))
        .collect()
}

fn pair(tick: &str, outcome: &str) -> (String, String) {
    (tick.to_owned(), outcome.to_owned())
}

#[tokio::test]
async fn a_tick_starts_one_run_however_often_it_is_looked_at() {
    let s = setup("once", "  cron: \"0 * * * *\"\n", "2026-12-01T00:10:00Z").await;
    s.ticks.pass().await.expect("pass");
    assert!(fires(&s).await.is_empty(), "nothing is due before 01:00");
    s.clock.set(t("2026-12-01T01:00:00.400Z"));
    // Two more loops, each with its own cache, deciding the same tick at once (a second
    // server that believes it leads): still once.
    let other = || Ticks::new(s.ticks.service.clone(), s.ticks.drivers.clone(), None, None);
    let (a, b) = (other(), other());
    let (a, b, c) = tokio::join!(a.pass(), b.pass(), s.ticks.pass());
    a.expect("pass");
    b.expect("pass");
    c.expect("pass");
    for _ in 0..3 {
        s.ticks.pass().await.expect("pass");
    }
    assert_eq!(
        fires(&s).await,
        [pair("2026-12-01T01:00:00.000Z", "started")]
    );
    let f = s.store.fires("vision", "hourly").await.expect("fires");
    let run = s
        .store
        .run(f[0].run_id.as_deref().expect("a run"))
        .await
        .expect("the run");
    assert_eq!(run.schedule.as_deref(), Some("hourly"));
    assert_eq!(run.applied_version, Some(1));
    assert_eq!(run.params, r#"{"epochs":3}"#);
    assert_eq!(
        s.store
            .runs(Some("vision"), None, 10)
            .await
            .expect("runs")
            .len(),
        1
    );
}

#[tokio::test]
async fn after_downtime_catch_up_says_which_missed_ticks_run() {
    for (catch_up, started) in [("none", 0), ("latest", 1), ("all", 5)] {
        let s = setup(
            &format!("catchup-{catch_up}"),
            &format!("  cron: \"0 * * * *\"\n  catchUp: {catch_up}\n"),
            "2026-12-01T00:10:00Z",
        )
        .await;
        // The server was down from before 01:00 until 05:30.
        s.clock.set(t("2026-12-01T05:30:00Z"));
        s.ticks.pass().await.expect("pass");
        let got = fires(&s).await;
        assert_eq!(got.len(), 5, "{catch_up}: every tick recorded: {got:?}");
        assert_eq!(
            got.iter().filter(|(_, o)| o == "started").count(),
            started,
            "{catch_up}: {got:?}"
        );
        assert!(got.iter().all(|(_, o)| o == "started" || o == "missed"));
        if catch_up == "latest" {
            assert_eq!(got[4], pair("2026-12-01T05:00:00.000Z", "started"));
        }
    }
}

#[tokio::test]
async fn forbid_skips_a_tick_while_the_last_run_runs_and_replace_cancels_it() {
    let s = setup(
        "forbid",
        "  cron: \"0 * * * *\"\n  concurrency: forbid\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    s.clock.set(t("2026-12-01T01:00:01Z"));
    s.ticks.pass().await.expect("pass");
    // Nothing drives the run here: it is still Running at the next tick.
    s.clock.set(t("2026-12-01T02:00:01Z"));
    s.ticks.pass().await.expect("pass");
    let f = s.store.fires("vision", "hourly").await.expect("fires");
    assert_eq!(f[1].outcome, "skipped");
    assert!(
        f[1].reason
            .as_deref()
            .is_some_and(|r| r.contains("concurrency: forbid")),
        "{f:?}"
    );

    let s = setup(
        "replace",
        "  cron: \"0 * * * *\"\n  concurrency: replace\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    s.clock.set(t("2026-12-01T01:00:01Z"));
    s.ticks.pass().await.expect("pass");
    s.clock.set(t("2026-12-01T02:00:01Z"));
    s.ticks.pass().await.expect("pass");
    let f = s.store.fires("vision", "hourly").await.expect("fires");
    assert_eq!(
        f.iter().map(|f| f.outcome.as_str()).collect::<Vec<_>>(),
        ["started", "started"]
    );
    let first = s
        .store
        .run(f[0].run_id.as_deref().expect("a run"))
        .await
        .expect("run");
    assert!(first.cancel_requested, "the previous run is cancelled");
}

#[tokio::test]
async fn a_schedule_changed_by_apply_fires_from_its_next_tick_never_at_once() {
    let s = setup("edit", "  cron: \"0 * * * *\"\n", "2026-12-01T00:10:00Z").await;
    // Changed at 00:30 to fire at minute 20: 00:20 has passed, but not since the change.
    s.clock.set(t("2026-12-01T00:30:00Z"));
    let who = Principal::new("vision", Role::Member);
    let lines = s
        .ticks
        .service
        .apply(
            &who,
            "test",
            &files("  cron: \"20 * * * *\"\n"),
            false,
            false,
            None,
        )
        .await
        .expect("applied");
    assert!(
        lines
            .iter()
            .any(|l| l.to_string() == "schedule/hourly configured")
    );
    s.clock.set(t("2026-12-01T00:30:05Z"));
    s.ticks.pass().await.expect("pass");
    assert!(fires(&s).await.is_empty());
    s.clock.set(t("2026-12-01T01:20:00.500Z"));
    s.ticks.pass().await.expect("pass");
    let f = s.store.fires("vision", "hourly").await.expect("fires");
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].tick.as_str(), f[0].version),
        ("2026-12-01T01:20:00.000Z", 2)
    );
}

#[tokio::test]
async fn a_suspended_schedule_records_nothing() {
    let s = setup(
        "suspend",
        "  cron: \"0 * * * *\"\n  suspend: true\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    s.clock.set(t("2026-12-01T05:00:01Z"));
    s.ticks.pass().await.expect("pass");
    assert!(fires(&s).await.is_empty());
}

#[tokio::test]
async fn keep_runs_removes_the_oldest_ended_runs() {
    let s = setup(
        "keep",
        "  cron: \"0 * * * *\"\n  keepRuns: 2\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    for h in 1..=4 {
        s.clock.set(t(&format!("2026-12-01T0{h}:00:01Z")));
        s.ticks.pass().await.expect("pass");
        s.ticks.swept().await;
        // Each run ends before the next tick (nothing drives them here).
        for f in s.store.fires("vision", "hourly").await.expect("fires") {
            if let Some(id) = f.run_id
                && s.store.run(&id).await.is_ok_and(|r| r.state == "Running")
            {
                s.store
                    .commit(
                        &id,
                        crate::store::Change {
                            run_end: Some((crate::run::state::RunState::Succeeded, None)),
                            ..crate::store::Change::default()
                        },
                    )
                    .await
                    .expect("end it");
            }
        }
    }
    s.clock.set(t("2026-12-01T04:30:00Z"));
    s.ticks.pass().await.expect("pass");
    s.ticks.swept().await;
    let left: Vec<String> = s
        .store
        .runs(Some("vision"), None, 10)
        .await
        .expect("runs")
        .into_iter()
        .map(|r| r.id)
        .collect();
    let fires = s.store.fires("vision", "hourly").await.expect("fires");
    let newest: Vec<String> = fires[2..].iter().filter_map(|f| f.run_id.clone()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    for id in newest {
        assert!(left.contains(&id), "the newest two are kept: {left:?}");
    }
}

#[tokio::test]
async fn ticks_caught_up_in_one_pass_see_the_runs_of_the_earlier_ones() {
    // Down from before 01:00 until 03:30, catching up every tick in one pass: with `forbid`
    // the first tick's run is still running at the next two, which are skipped; with
    // `replace` each run replaces the one before.
    let s = setup(
        "catchup-forbid",
        "  cron: \"0 * * * *\"\n  catchUp: all\n  concurrency: forbid\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    s.clock.set(t("2026-12-01T03:30:00Z"));
    s.ticks.pass().await.expect("pass");
    assert_eq!(
        fires(&s).await,
        [
            pair("2026-12-01T01:00:00.000Z", "started"),
            pair("2026-12-01T02:00:00.000Z", "skipped"),
            pair("2026-12-01T03:00:00.000Z", "skipped"),
        ]
    );

    let s = setup(
        "catchup-replace",
        "  cron: \"0 * * * *\"\n  catchUp: all\n  concurrency: replace\n",
        "2026-12-01T00:10:00Z",
    )
    .await;
    s.clock.set(t("2026-12-01T03:30:00Z"));
    s.ticks.pass().await.expect("pass");
    let f = s.store.fires("vision", "hourly").await.expect("fires");
    assert_eq!(
        f.iter().map(|f| f.outcome.as_str()).collect::<Vec<_>>(),
        ["started", "started", "started"]
    );
    for (i, fire) in f.iter().enumerate() {
        let run = s
            .store
            .run(fire.run_id.as_deref().expect("a run"))
            .await
            .expect("run");
        assert_eq!(
            run.cancel_requested,
            i < 2,
            "each run but the last is replaced: {fire:?}"
        );
    }
}
