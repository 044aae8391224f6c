//! Collecting the attempts of runs whose engine is gone, by any `sluice` on the home.
//!
//! An engine that dies (kill -9, a closed terminal, a machine gone) leaves its run `Running`
//! and its attempts' rows `Running`, and those rows hold their share of the machine's pool (or
//! of the declared cluster's nodes). Its attempts go on under their runtime and end, but nobody
//! records it: every later run on the home would wait for that room forever. So any `sluice`
//! that reads or waits on the home looks at the runs whose engine is gone (see
//! [`super::engine::alive`]), probes their running attempts' folders as `resume` would, and
//! records the ends it finds: an attempt that ended keeps its result, one whose runtime died or
//! never started is `Lost` (its programs are killed first). It decides nothing else: the steps
//! stay as they are, for `sluice resume` to carry on from (the driver reads the collected
//! attempts' results again from their folders).

use std::collections::BTreeMap;
use std::path::Path;

use sluice_runtime::contract::{self, End};

use super::engine;
use super::state::attempt as at;
use crate::clock::Clock;
use crate::executor::local::probe::{Probe, probe};
use crate::store::{self, AttemptRow, Store};

/// What a collection found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    /// Attempts whose end was recorded now.
    pub attempts: u64,
    /// Runs found without a live engine (with attempts still marked running).
    pub runs: usize,
}

/// How often, while steps of this process wait for room, the attempts of runs whose engine
/// died are collected, so that what they held is free again.
pub const COLLECT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts, once per store, the task that collects dead engines' attempts every
/// [`COLLECT_EVERY`] while any step of this process waits for the machine's pool. One task
/// for the process, not a timer per waiting run: 10,000 waiting runs woke 2,000 times a
/// second for it.
pub fn keep_collecting(store: &Store, clock: std::sync::Arc<dyn Clock>) {
    if !store.claim_collector() {
        return;
    }
    let store = store.clone();
    let Ok(h) = tokio::runtime::Handle::try_current() else {
        return;
    };
    h.spawn(async move {
        loop {
            tokio::time::sleep(COLLECT_EVERY).await;
            if !store.anyone_waits_for_room() {
                continue;
            }
            if let Err(e) = collect_now_and_then(&store, clock.as_ref()).await {
                tracing::warn!("cannot collect the attempts of runs whose engine is gone: {e}");
            }
        }
    });
}

/// [`collect`] for a driver whose steps wait for room, at most once a second in this process
/// however many drivers wait: each collection reads every running attempt of the home.
pub async fn collect_now_and_then(
    store: &Store,
    clock: &dyn Clock,
) -> Result<Collected, store::Error> {
    static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    {
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
            return Ok(Collected::default());
        }
        *last = Some(std::time::Instant::now());
    }
    collect(store, None, clock).await
}

/// Records the ends of the attempts of runs whose engine is gone (except run `except`, the
/// caller's own), judged at `clock`'s time. Errors reading one attempt's folder leave that
/// attempt for the next time.
pub async fn collect(
    store: &Store,
    except: Option<&str>,
    clock: &dyn Clock,
) -> Result<Collected, store::Error> {
    let now = clock.now_ms();
    let dead =
        |holder: &Option<store::Holder>| holder.as_ref().is_none_or(|h| !engine::alive(h, now));
    let orphans = store.running_attempts().await?;
    let mut ended = Vec::new();
    let mut runs = std::collections::BTreeSet::new();
    for o in orphans {
        if Some(o.run_id.as_str()) == except || !dead(&o.holder) {
            continue;
        }
        runs.insert(o.run_id.clone());
        // A pod is not a folder of this machine: the run's next engine reattaches to it
        // through the cluster (its pods' watch and the object store), never from here.
        if crate::executor::kubernetes::is_handle(&o.attempt.dir) {
            continue;
        }
        let Ok(found) = probe(Path::new(&o.attempt.dir)) else {
            continue;
        };
        if let Some(a) = ended_row(o.attempt, found, o.cancel_requested, clock) {
            ended.push((o.run_id, a));
        }
    }
    let attempts = store.collect(&ended).await?;
    let stale: Vec<String> = store
        .waiting_runs()
        .await?
        .into_iter()
        .filter(|(run, holder)| Some(run.as_str()) != except && dead(holder))
        .map(|(run, _)| run)
        .collect();
    store.forget_waiting(&stale).await?;
    Ok(Collected {
        attempts,
        runs: runs.len(),
    })
}

/// The attempt's row with the end its folder shows (a runtime that died: at `clock`'s time),
/// or None while it runs.
fn ended_row(
    mut a: AttemptRow,
    found: Probe,
    cancelled: bool,
    clock: &dyn Clock,
) -> Option<AttemptRow> {
    match found {
        Probe::Alive => return None,
        Probe::Ended(result) => {
            a.state = crate::run::transitions::collected_end(result.end, cancelled);
            record_end(&mut a, &result);
        }
        Probe::Vanished(reason) => {
            a.state = at::LOST;
            a.reason = Some(reason);
            a.ended_at = Some(clock.now_rfc3339());
        }
    }
    Some(a)
}

/// Copies how an attempt ended (exit code, signal, reason, metrics, end time) from its result
/// into its row; the state is the caller's to decide.
pub fn record_end(a: &mut AttemptRow, result: &contract::Result) {
    a.exit_code = result.exit_code.map(i64::from);
    a.signal = result.signal.map(i64::from);
    a.reason = result.reason.clone();
    a.ended_at = Some(result.ended_at.clone());
    if !result.metrics.is_empty() {
        a.metrics = serde_json::to_string(&result.metrics).ok();
    }
}

/// The result an attempt collected by another process ended with, for the engine that resumes
/// its run: as its executor still `recorded` it, else rebuilt from its row (the record is
/// gone).
pub fn result_of(
    a: &AttemptRow,
    recorded: Option<contract::Result>,
    clock: &dyn Clock,
) -> Option<contract::Result> {
    if let Some(r) = recorded {
        return Some(r);
    }
    let end = match a.state {
        at::SUCCEEDED => End::Succeeded,
        at::FAILED => End::Failed,
        at::TIMEOUT => End::Timeout,
        at::PREEMPTED | at::CANCELLED => End::Terminated,
        _ => return None,
    };
    Some(contract::Result {
        end,
        exit_code: a.exit_code.and_then(|c| i32::try_from(c).ok()),
        signal: a.signal.and_then(|s| i32::try_from(s).ok()),
        started_at: a.started_at.clone(),
        ended_at: a.ended_at.clone().unwrap_or_else(|| clock.now_rfc3339()),
        reason: a.reason.clone(),
        metrics: a
            .metrics
            .as_deref()
            .and_then(|m| serde_json::from_str::<BTreeMap<String, f64>>(m).ok())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::clock::{ManualClock, SystemClock};

    fn result(end: End) -> contract::Result {
        contract::Result {
            end,
            exit_code: Some(1),
            signal: None,
            started_at: "2026-01-01T00:00:00Z".into(),
            ended_at: "2026-01-01T00:01:00Z".into(),
            reason: Some("why".into()),
            metrics: BTreeMap::from([("loss".to_owned(), 0.25)]),
        }
    }

    fn running() -> AttemptRow {
        AttemptRow {
            step: "train".into(),
            number: 1,
            state: at::RUNNING,
            dir: "/nonexistent/sluice/attempt".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            ..AttemptRow::default()
        }
    }

    #[test]
    fn an_attempt_still_running_is_not_collected() {
        assert_eq!(
            ended_row(running(), Probe::Alive, false, &SystemClock),
            None
        );
    }

    #[test]
    fn each_end_becomes_its_attempt_state_and_a_stop_is_a_cancel_only_when_one_was_asked() {
        for (end, cancelled, state) in [
            (End::Succeeded, false, at::SUCCEEDED),
            (End::Failed, true, at::FAILED),
            (End::Timeout, false, at::TIMEOUT),
            (End::Terminated, true, at::CANCELLED),
            (End::Terminated, false, at::PREEMPTED),
        ] {
            let row = ended_row(
                running(),
                Probe::Ended(Box::new(result(end))),
                cancelled,
                &SystemClock,
            )
            .expect("an ended attempt is collected");
            assert_eq!(row.state, state, "{end:?}, cancelled: {cancelled}");
            assert_eq!(row.exit_code, Some(1));
            assert_eq!(row.reason.as_deref(), Some("why"));
            assert_eq!(row.ended_at.as_deref(), Some("2026-01-01T00:01:00Z"));
            assert_eq!(row.metrics.as_deref(), Some(r#"{"loss":0.25}"#));
        }
    }

    #[test]
    fn a_vanished_runtime_is_a_lost_attempt_with_its_reason_ended_at_the_clocks_time() {
        let clock =
            ManualClock::new(crate::time::parse("2026-12-02T19:00:00.000Z").expect("valid"));
        let row = ended_row(running(), Probe::Vanished("it died".into()), false, &clock)
            .expect("collected");
        assert_eq!(row.state, at::LOST);
        assert_eq!(row.reason.as_deref(), Some("it died"));
        assert_eq!(row.ended_at.as_deref(), Some("2026-12-02T19:00:00.000Z"));
    }
}
