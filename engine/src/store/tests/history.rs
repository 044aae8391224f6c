//! A step's history: the durations of its latest successful attempts in earlier runs.

use super::*;

/// An attempt of `step` in run `run`, `state`, from `start` to `end` (minutes past midnight).
async fn ended(
    store: &Store,
    run: &str,
    step: &str,
    number: i64,
    state: &str,
    (start, end): (u32, u32),
) {
    let at = |m: u32| format!("2026-12-01T{:02}:{:02}:00.000Z", m / 60, m % 60);
    sqlx::query("INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, started_at, ended_at) VALUES ($1, $2, $3, $4, $5, 0, 0, $6, $7)")
        .bind(run)
        .bind(step)
        .bind(number)
        .bind(state)
        .bind(format!("/attempts/{run}/{step}.{number}"))
        .bind(at(start))
        .bind(at(end))
        .execute(store.pool())
        .await
        .expect("insert an attempt");
}

conformance!(
    durations_are_the_latest_successful_attempts_of_the_step_in_the_teams_pipeline,
    |store, backend| {
        for (id, name, team) in [
            ("r1", "train", "vision"),
            ("r2", "train", "vision"),
            ("r3", "train", "audio"),
            ("r4", "other", "vision"),
        ] {
            store
                .create_run(&new_run(id, name, team, &["fit", "eval"]), None)
                .await
                .expect("create");
        }
        // fit in train of vision: 10, then 30 (a failed 50 between), then 20 minutes.
        ended(&store, "r1", "fit", 1, at::SUCCEEDED.as_str(), (0, 10)).await;
        ended(&store, "r1", "fit", 2, at::FAILED.as_str(), (10, 60)).await;
        ended(&store, "r2", "fit", 1, at::SUCCEEDED.as_str(), (100, 130)).await;
        ended(&store, "r2", "fit", 2, at::SUCCEEDED.as_str(), (200, 220)).await;
        // Not fit's, or not of vision's train.
        ended(&store, "r1", "eval", 1, at::SUCCEEDED.as_str(), (20, 21)).await;
        ended(&store, "r3", "fit", 1, at::SUCCEEDED.as_str(), (0, 90)).await;
        ended(&store, "r4", "fit", 1, at::SUCCEEDED.as_str(), (0, 80)).await;
        let min = 60_000;
        let d = |limit| store.durations("vision", "train", "fit", limit);
        assert_eq!(
            d(5).await.expect("read"),
            vec![20 * min, 30 * min, 10 * min],
            "{backend}"
        );
        assert_eq!(
            d(2).await.expect("read"),
            vec![20 * min, 30 * min],
            "{backend}"
        );
        assert_eq!(
            store
                .durations("vision", "train", "tune", 5)
                .await
                .expect("read"),
            Vec::<u64>::new(),
            "{backend}: a step never run has no history"
        );
    }
);
