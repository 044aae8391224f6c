//! A team's trial rate (`maxTrialsPerMinute`: a bucket of one token, one start per interval)
//! under virtual time. The limiter lives in `Store::start_placed`, which takes the time from
//! its caller (`Rate::now`), so these tests move a clock forward instead of sleeping through
//! a minute. Two `Store`s on one home stand for two engines sharing the team's rate.
//!
//! What `sluice` does with the answer (wait, say why, start on time) is covered end to end in
//! `tests/tests/scheduler.rs`.

use sluice_engine::store::{AttemptRow, Change, NewRun, Placed, Rate, StepRow, Store};

/// A virtual start of time (unix ms), far from zero like a real clock.
const T0: i64 = 1_700_000_000_000;
/// 60 trials a minute.
const SECOND: i64 = 1_000;

async fn home(tag: &str) -> std::path::PathBuf {
    let home = std::env::temp_dir().join(format!("sluice-rate-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    home
}

/// A sweep-like run of `team` with `n` pending trials `t0`, `t1`, ...
async fn sweep(store: &Store, id: &str, team: &str, n: usize) {
    let steps = (0..n)
        .map(|i| StepRow {
            name: format!("t{i}"),
            step: "trial".into(),
            state: sluice_engine::run::state::StepState::Pending,
            ..StepRow::default()
        })
        .collect();
    let run = NewRun {
        id: id.into(),
        name: id.into(),
        team: team.into(),
        file: "s.yaml".into(),
        workdir: "/".into(),
        objects: "file:///nowhere".into(),
        source: String::new(),
        document: None,
        params: "{}".into(),
        cluster: None,
        applied_version: None,
        schedule: None,
        steps,
    };
    store.create_run(&run, None).await.expect("create the run");
}

/// One engine's attempt to start trial `t{i}` of `run` at virtual time `now`, under the rate
/// of `team` (`interval` ms between starts), or with no rate when `interval` is None; `room`
/// is what placement answers.
async fn start(
    store: &Store,
    run: &str,
    i: usize,
    team: &str,
    interval: Option<i64>,
    now: i64,
    room: bool,
) -> Placed {
    let name = format!("t{i}");
    let row = StepRow {
        name: name.clone(),
        step: "trial".into(),
        state: sluice_engine::run::state::StepState::Running,
        attempts: 1,
        ..StepRow::default()
    };
    let attempt = AttemptRow {
        step: name,
        number: 1,
        state: sluice_engine::run::state::AttemptState::Running,
        dir: "/nowhere".into(),
        started_at: "2023-11-14T22:13:20Z".into(),
        ..AttemptRow::default()
    };
    store
        .start_placed(
            run,
            &row,
            &attempt,
            Change::default(),
            interval.map(|interval_ms| Rate {
                team,
                interval_ms,
                now,
            }),
            |_| room.then(String::new),
        )
        .await
        .expect("start_placed")
}

/// Two engines, each with a sweep of 31 trials of team `tuning` (60 a minute), both asking
/// to start their next trial every 100 ms of virtual time for 70 s: the 62 starts come one a
/// second exactly, whichever engine asks, and no minute holds more than 60.
#[tokio::test]
async fn two_engines_share_one_start_a_second_and_no_minute_holds_more_than_sixty() {
    let home = home("share").await;
    let a = Store::open(&home).await.expect("engine a's store");
    let b = Store::open(&home).await.expect("engine b's store");
    sweep(&a, "ra", "tuning", 31).await;
    sweep(&b, "rb", "tuning", 31).await;
    let mut next = [0usize; 2];
    let mut starts: Vec<(i64, usize)> = Vec::new();
    let mut now = T0;
    while now < T0 + 70 * SECOND {
        // The engines ask in turn, first one then the other, as two processes would.
        let mut engines = [(0, &a, "ra"), (1, &b, "rb")];
        if (now / SECOND) % 2 == 1 {
            engines.reverse();
        }
        for (e, store, run) in engines {
            if next[e] == 31 {
                continue;
            }
            match start(store, run, next[e], "tuning", Some(SECOND), now, true).await {
                Placed::Started(_) => {
                    starts.push((now, e));
                    next[e] += 1;
                }
                Placed::RateLimited { until } => {
                    // Refused starts name the time the next one is due: the last start plus
                    // one interval.
                    let last = starts.last().map(|s| s.0).expect("a start came first");
                    assert_eq!(until, last + SECOND, "at {}", now - T0);
                    assert!(until > now);
                }
                Placed::NoRoom => panic!("placement always has room here"),
            }
        }
        now += 100;
    }
    assert_eq!(next, [31, 31], "both sweeps started every trial");
    let times: Vec<i64> = starts.iter().map(|s| s.0 - T0).collect();
    let expected: Vec<i64> = (0..62).map(|k| k * SECOND).collect();
    assert_eq!(times, expected, "one start a second, from the first ask");
    for (i, &(t, _)) in starts.iter().enumerate() {
        let within = starts[i..]
            .iter()
            .take_while(|s| s.0 < t + 60 * SECOND)
            .count();
        assert!(
            within <= 60,
            "{within} starts in the minute from {}",
            t - T0
        );
    }
    let _ = std::fs::remove_dir_all(home);
}

/// Burst 1: a team idle for ten minutes does not bank starts; the next start after one is
/// again a whole interval later.
#[tokio::test]
async fn an_idle_team_banks_no_burst() {
    let home = home("idle").await;
    let store = Store::open(&home).await.expect("store");
    sweep(&store, "r", "tuning", 4).await;
    let rate = Some(SECOND);
    assert!(matches!(
        start(&store, "r", 0, "tuning", rate, T0, true).await,
        Placed::Started(_)
    ));
    let later = T0 + 600 * SECOND;
    assert!(matches!(
        start(&store, "r", 1, "tuning", rate, later, true).await,
        Placed::Started(_)
    ));
    assert_eq!(
        start(&store, "r", 2, "tuning", rate, later + 1, true).await,
        Placed::RateLimited {
            until: later + SECOND
        }
    );
    assert_eq!(
        start(&store, "r", 2, "tuning", rate, later + SECOND - 1, true).await,
        Placed::RateLimited {
            until: later + SECOND
        }
    );
    assert!(matches!(
        start(&store, "r", 2, "tuning", rate, later + SECOND, true).await,
        Placed::Started(_)
    ));
    let _ = std::fs::remove_dir_all(home);
}

/// The rate is per team: another team's trials and steps with no rate start while `tuning`
/// waits. A start refused for want of room spends none of the rate.
#[tokio::test]
async fn the_rate_holds_only_its_team_and_only_starts_that_happen() {
    let home = home("teams").await;
    let store = Store::open(&home).await.expect("store");
    sweep(&store, "tune", "tuning", 3).await;
    sweep(&store, "other", "vision", 2).await;
    sweep(&store, "plain", "tuning", 1).await;
    let rate = Some(SECOND);
    // No room: refused before the rate is consulted; the team's next start stays due now.
    assert_eq!(
        start(&store, "tune", 0, "tuning", rate, T0, false).await,
        Placed::NoRoom
    );
    assert!(matches!(
        start(&store, "tune", 0, "tuning", rate, T0 + 10, true).await,
        Placed::Started(_)
    ));
    assert_eq!(
        start(&store, "tune", 1, "tuning", rate, T0 + 20, true).await,
        Placed::RateLimited {
            until: T0 + 10 + SECOND
        }
    );
    // vision has its own bucket; a step with no rate (not a trial) is not held at all.
    assert!(matches!(
        start(&store, "other", 0, "vision", rate, T0 + 20, true).await,
        Placed::Started(_)
    ));
    assert!(matches!(
        start(&store, "plain", 0, "tuning", None, T0 + 20, true).await,
        Placed::Started(_)
    ));
    // And that start did not move tuning's next start either.
    assert!(matches!(
        start(&store, "tune", 1, "tuning", rate, T0 + 10 + SECOND, true).await,
        Placed::Started(_)
    ));
    let _ = std::fs::remove_dir_all(home);
}
