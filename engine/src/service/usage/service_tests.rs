use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::service::Role;
use crate::store::{NewRun, StepRow, Store};

const PIPELINE: &str = "\
apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: train}
spec:
  steps:
    - name: fit
      run: 'true'
      checkpoint: {every: 10m}
    - name: eval
      run: 'true'
      checkpoint: false
";

const CLUSTER: &str = "\
apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 1
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
      price: {gpuHour: 2.50, cpuHour: 0.04}
    - name: spot
      nodes: 2
      resources: {gpu: 8, cpu: 64, memory: 512Gi}
      interruptible: true
      price: {gpuHour: 1.00}
";

/// Now, as the service's clock says: 2026-12-02T19:00:00Z.
const NOW: i64 = 1_796_238_000_000;
const H: i64 = 3_600_000;

struct Home {
    path: std::path::PathBuf,
    service: Service,
    /// The service's clock (clones share its time).
    clock: ManualClock,
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn home(tag: &str) -> Home {
    let path = std::env::temp_dir().join(format!("sluice-usage-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let store = Store::open(&path).await.expect("open the store");
    let clock =
        ManualClock::new(chrono::DateTime::from_timestamp_millis(NOW).expect("a valid time"));
    Home {
        path,
        service: Service::new(store, Arc::new(clock.clone())),
        clock,
    }
}

async fn run(h: &Home, id: &str, team: &str, cluster: bool) {
    let step = |name: &str| StepRow {
        name: name.into(),
        step: name.into(),
        state: crate::run::state::StepState::Pending,
        ..StepRow::default()
    };
    let run = NewRun {
        id: id.into(),
        name: "train".into(),
        team: team.into(),
        file: "p.yaml".into(),
        workdir: "/w".into(),
        objects: "file:///objects".into(),
        source: PIPELINE.into(),
        document: None,
        params: "{}".into(),
        cluster: cluster.then(|| crate::run::cluster::stored("lab.yaml", CLUSTER)),
        applied_version: None,
        schedule: None,
        steps: vec![step("fit"), step("eval")],
    };
    h.service
        .store()
        .create_run(&run, None)
        .await
        .expect("create");
}

/// An attempt from `start` to `end` (unix ms; None: running), placed as cluster mode
/// records it when `job` is given.
#[allow(clippy::too_many_arguments)]
async fn attempt(
    h: &Home,
    run: &str,
    step: &str,
    number: i64,
    state: &str,
    (start, end): (i64, Option<i64>),
    (millicpu, gpus): (i64, Option<&str>),
    placed: Option<(&str, &str)>,
) {
    let at =
        |ms: i64| crate::time::format(chrono::DateTime::from_timestamp_millis(ms).expect("a time"));
    sqlx::query("INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, started_at, ended_at, job, nodes) VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8, $9, $10, $11)")
            .bind(run)
            .bind(step)
            .bind(number)
            .bind(state)
            .bind(format!("/attempts/{run}/{step}.{number}"))
            .bind(millicpu)
            .bind(gpus)
            .bind(at(start))
            .bind(end.map(at))
            .bind(placed.map(|p| p.0))
            .bind(placed.map(|p| p.1))
            .execute(h.service.store().pool())
            .await
            .expect("insert an attempt");
}

fn ask(gpu: u64, millicpu: u64, workers: u32) -> String {
    serde_json::json!({"team": "vision", "priority": 100, "workers": workers, "gpu": gpu,
            "millicpu": millicpu, "memory": 0, "interruptible": true, "checkpointed": true})
    .to_string()
}

fn by(keys: &[Key]) -> UsageQuery {
    UsageQuery {
        by: keys.to_vec(),
        ..UsageQuery::default()
    }
}

#[tokio::test]
async fn pools_prices_lost_work_and_running_attempts_give_exact_figures() {
    let h = home("figures").await;
    run(&h, "r1", "vision", true).await;
    // A gang of 2 workers (2 GPUs and 4 cores each), one on a100 (node 0), one on spot
    // (node 1), preempted after 2 h 15 min: it checkpoints every 10 minutes, so its last
    // 5 were lost.
    let job = ask(2, 4000, 2);
    attempt(
        &h,
        "r1",
        "fit",
        1,
        at::PREEMPTED.as_str(),
        (NOW - 5 * H, Some(NOW - 5 * H + 2 * H + H / 4)),
        (8000, Some("0,1,0,1")),
        Some((&job, "[0, 1]")),
    )
    .await;
    // Then it runs again, alone on spot (node 2), for the last hour: up to now.
    let one = ask(2, 4000, 1);
    attempt(
        &h,
        "r1",
        "fit",
        2,
        at::RUNNING.as_str(),
        (NOW - H, None),
        (4000, Some("0,1")),
        Some((&one, "[2]")),
    )
    .await;
    let u = h
        .service
        .usage(&Principal::local(), &by(&[Key::Pool]))
        .await
        .expect("usage");
    let pools: Vec<(&str, &Figures)> = u
        .rows
        .iter()
        .map(|r| (r.pool.as_deref().unwrap_or(""), &r.figures))
        .collect();
    let a100 = Figures {
        gpu_hours: 4.5,
        cpu_hours: 9.0,
        cost: 4.5 * 2.5 + 9.0 * 0.04,
        wasted_gpu_hours: 1.0 / 6.0,
        extended_hours: Default::default(),
    };
    let spot = Figures {
        gpu_hours: 6.5,
        cpu_hours: 13.0,
        cost: 6.5,
        wasted_gpu_hours: 1.0 / 6.0,
        extended_hours: Default::default(),
    };
    assert_eq!(pools, [("a100", &a100), ("spot", &spot)]);
    assert_eq!(u.total.gpu_hours, 11.0);
    assert_eq!(u.total.cpu_hours, 22.0);
    assert_eq!(u.total.wasted_gpu_hours, 1.0 / 3.0);
    // The window's half of the history, [now - 3 h, now): the gang's last 15 minutes
    // (its 5 lost ones included) and the running hour.
    let recent = UsageQuery {
        since: Some(crate::time::format(
            chrono::DateTime::from_timestamp_millis(NOW - 3 * H).expect("a time"),
        )),
        ..by(&[Key::Team])
    };
    let u = h
        .service
        .usage(&Principal::local(), &recent)
        .await
        .expect("usage");
    assert_eq!(u.rows.len(), 1);
    assert_eq!(u.total.gpu_hours, 4.0 * 0.25 + 2.0);
    assert_eq!(u.total.wasted_gpu_hours, 1.0 / 3.0);
}

#[tokio::test]
async fn without_a_cluster_attempts_are_on_the_free_local_pool() {
    let h = home("local").await;
    run(&h, "r1", "vision", false).await;
    // `eval` has no checkpoints: a lost attempt loses all its GPU time.
    attempt(
        &h,
        "r1",
        "eval",
        1,
        at::LOST.as_str(),
        (NOW - 2 * H, Some(NOW - H)),
        (1500, Some("3")),
        None,
    )
    .await;
    let u = h
        .service
        .usage(&Principal::local(), &by(&[Key::Pool, Key::Pipeline]))
        .await
        .expect("usage");
    assert_eq!(u.rows.len(), 1, "{u:?}");
    let r = &u.rows[0];
    assert_eq!(
        (r.pool.as_deref(), r.pipeline.as_deref(), r.team.as_deref()),
        (Some(LOCAL_POOL), Some("train"), None)
    );
    assert_eq!(
        r.figures,
        Figures {
            gpu_hours: 1.0,
            cpu_hours: 1.5,
            cost: 0.0,
            wasted_gpu_hours: 1.0,
            extended_hours: Default::default(),
        }
    );
}

#[tokio::test]
async fn a_team_bound_principal_sees_its_own_team_only() {
    let h = home("teams").await;
    run(&h, "r1", "vision", false).await;
    run(&h, "r2", "nlp", false).await;
    for r in ["r1", "r2"] {
        attempt(
            &h,
            r,
            "eval",
            1,
            at::SUCCEEDED.as_str(),
            (NOW - H, Some(NOW)),
            (1000, None),
            None,
        )
        .await;
    }
    let teams =
        |u: &Usage| -> Vec<String> { u.rows.iter().filter_map(|r| r.team.clone()).collect() };
    let all = h
        .service
        .usage(&Principal::local(), &UsageQuery::default())
        .await
        .expect("usage");
    assert_eq!(teams(&all), ["nlp", "vision"]);
    for role in [Role::Viewer, Role::Member] {
        let who = Principal::new("nlp", role);
        let own = h
            .service
            .usage(&who, &UsageQuery::default())
            .await
            .expect("usage");
        assert_eq!(teams(&own), ["nlp"]);
        let other = UsageQuery {
            team: Some("vision".into()),
            ..UsageQuery::default()
        };
        // Another team's usage is out of its scope: said, not answered with zeros.
        let e = h
            .service
            .usage(&who, &other)
            .await
            .expect_err("another team");
        assert_eq!(e.status_code(), 403);
    }
    let admin = Principal::every_team(Role::Admin);
    let vision = UsageQuery {
        team: Some("vision".into()),
        ..UsageQuery::default()
    };
    let u = h.service.usage(&admin, &vision).await.expect("usage");
    assert_eq!(teams(&u), ["vision"]);
    assert_eq!(u.total.cpu_hours, 1.0);
    // A window after everything: nothing.
    let later = UsageQuery {
        since: Some(crate::time::format(
            chrono::DateTime::from_timestamp_millis(NOW + 1).expect("a time"),
        )),
        ..UsageQuery::default()
    };
    let u = h.service.usage(&admin, &later).await.expect("usage");
    assert_eq!(u, Usage::default());
    // An empty window is a mistake.
    let empty = UsageQuery {
        since: Some("2026-12-02".into()),
        until: Some("2026-12-01".into()),
        ..UsageQuery::default()
    };
    let e = h.service.usage(&admin, &empty).await.expect_err("empty");
    assert_eq!(e.status_code(), 400);
}

/// Sets when run `id` was created (the day cache counts runs by it).
async fn created(h: &Home, id: &str, at: &str) {
    sqlx::query("UPDATE runs SET created_at = $1 WHERE id = $2")
        .bind(at)
        .bind(id)
        .execute(h.service.store().pool())
        .await
        .expect("set created_at");
}

fn day(text: &str) -> chrono::NaiveDate {
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").expect("a date")
}

/// What `usage` gives for one whole day, by team, pool and pipeline.
async fn direct(h: &Home, who: &Principal, d: &str) -> Usage {
    let q = UsageQuery {
        since: Some(d.into()),
        until: Some(d.into()),
        by: vec![Key::Team, Key::Pool, Key::Pipeline],
        team: None,
    };
    h.service.usage(who, &q).await.expect("usage")
}

#[tokio::test]
async fn past_days_are_kept_once_read_and_read_again_after_a_deletion() {
    let h = home("days-kept").await;
    let who = Principal::new("vision", Role::Member);
    // 2026-11-30 (two days before NOW): 2 GPUs for 2 hours.
    let nov30 = 1_796_083_200_000 - 24 * H;
    run(&h, "r1", "vision", false).await;
    created(&h, "r1", "2026-11-30T09:00:00.000Z").await;
    attempt(
        &h,
        "r1",
        "fit",
        1,
        "Succeeded",
        (nov30 + 10 * H, Some(nov30 + 12 * H)),
        (1000, Some("0,1")),
        None,
    )
    .await;
    let days = [day("2026-11-30"), day("2026-12-01"), day("2026-12-02")];
    let first = h.service.usage_by_day(&who, &days).await.expect("by day");
    for (d, u) in ["2026-11-30", "2026-12-01", "2026-12-02"]
        .iter()
        .zip(&first)
    {
        assert_eq!(*u, direct(&h, &who, d).await, "{d}: what usage gives");
    }
    assert_eq!(first[0].total.gpu_hours, 4.0);
    assert_eq!(days::merge(&first).total.gpu_hours, 4.0);

    // Rows written behind the cache's back (no real engine writes a past attempt): the kept
    // day does not see them, today is read every time.
    attempt(
        &h,
        "r1",
        "eval",
        1,
        "Succeeded",
        (nov30 + 13 * H, Some(nov30 + 14 * H)),
        (1000, Some("0")),
        None,
    )
    .await;
    // Two hours later, an hour of work from 19:30: today's hours that were not over at the
    // first read are read now.
    h.clock.advance(std::time::Duration::from_secs(2 * 3600));
    attempt(
        &h,
        "r1",
        "fit",
        2,
        "Succeeded",
        (NOW + H / 2, Some(NOW + 3 * H / 2)),
        (1000, Some("0")),
        None,
    )
    .await;
    let again = h.service.usage_by_day(&who, &days).await.expect("by day");
    assert_eq!(again[0].total.gpu_hours, 4.0, "kept");
    assert_eq!(direct(&h, &who, "2026-11-30").await.total.gpu_hours, 5.0);
    assert_eq!(
        again[2].total.gpu_hours, 1.0,
        "today's hours since are read"
    );
    assert_eq!(again[2], direct(&h, &who, "2026-12-02").await);

    // A run of that day deleted: the count of its runs changes, and it is read again.
    run(&h, "r2", "vision", false).await;
    created(&h, "r2", "2026-11-30T08:00:00.000Z").await;
    let kept = h.service.usage_by_day(&who, &days).await.expect("by day");
    assert_eq!(kept[0].total.gpu_hours, 5.0, "a new count is read again");
    for id in ["r1", "r2"] {
        sqlx::query("UPDATE runs SET state = 'Succeeded' WHERE id = $1")
            .bind(id)
            .execute(h.service.store().pool())
            .await
            .expect("ended");
        h.service.store().mark_deleting(id).await.expect("mark");
        h.service.store().forget_run(id).await.expect("forget");
    }
    let after = h.service.usage_by_day(&who, &days).await.expect("by day");
    assert_eq!(after[0], Usage::default(), "{after:?}");
    // Another team's principal has its own days.
    let nlp = Principal::new("nlp", Role::Member);
    let theirs = h.service.usage_by_day(&nlp, &days).await.expect("by day");
    assert!(theirs.iter().all(|u| *u == Usage::default()));
}

#[tokio::test]
async fn a_day_something_still_runs_from_is_not_kept() {
    let h = home("days-running").await;
    let who = Principal::new("vision", Role::Member);
    let dec1 = 1_796_083_200_000;
    run(&h, "r1", "vision", false).await;
    created(&h, "r1", "2026-12-01T09:00:00.000Z").await;
    // Running since 22:00 on Dec 1 (its engine may be dead): it counts to now.
    attempt(
        &h,
        "r1",
        "fit",
        1,
        "Running",
        (dec1 + 22 * H, None),
        (1000, Some("0")),
        None,
    )
    .await;
    let days = [day("2026-12-01")];
    let u = h.service.usage_by_day(&who, &days).await.expect("by day");
    assert_eq!(u[0].total.gpu_hours, 2.0);
    // Collected: it had ended at 23:00. The day was not kept, so it says so now.
    sqlx::query("UPDATE attempts SET state = 'Lost', ended_at = $1 WHERE run_id = 'r1'")
        .bind("2026-12-01T23:00:00.000Z")
        .execute(h.service.store().pool())
        .await
        .expect("collect");
    let u = h.service.usage_by_day(&who, &days).await.expect("by day");
    assert_eq!(u[0].total.gpu_hours, 1.0);
    assert_eq!(u[0], direct(&h, &who, "2026-12-01").await);
}

#[tokio::test]
async fn a_servers_warm_up_keeps_each_teams_last_week() {
    let h = home("days-warm").await;
    let dec1 = 1_796_083_200_000;
    run(&h, "r1", "vision", false).await;
    created(&h, "r1", "2026-12-01T09:00:00.000Z").await;
    let h = &h;
    let one_hour = |number: i64, start: i64| async move {
        attempt(
            h,
            "r1",
            "fit",
            number,
            "Succeeded",
            (start, Some(start + H)),
            (1000, Some("0")),
            None,
        )
        .await;
    };
    one_hour(1, dec1 + 10 * H).await;
    h.service.warm_usage(7).await.expect("warm");
    // Written behind its back: the day was read at the warm-up, and is kept.
    one_hour(2, dec1 + 12 * H).await;
    let who = Principal::new("vision", Role::Viewer);
    let u = h
        .service
        .usage_by_day(&who, &[day("2026-12-01")])
        .await
        .expect("by day");
    assert_eq!(u[0].total.gpu_hours, 1.0);
    assert_eq!(direct(h, &who, "2026-12-01").await.total.gpu_hours, 2.0);
}
