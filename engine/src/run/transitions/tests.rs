//! The decisions on their own: each way an attempt can end, each way a waiting step can go,
//! and properties over any mix of them (lost and preempted work never spends a retry, the
//! retry budget is never exceeded, a cancelled run starts nothing, only a success keeps
//! outputs).

use std::time::Duration;

use proptest::prelude::*;

use super::*;

const STOPPING: &str = "stopping: ";
const NOW: i64 = 1_000_000;

fn retry(limit: u32, on: &[RetryOn]) -> Retry {
    Retry {
        limit,
        backoff: Duration::from_secs(10),
        factor: 2.0,
        max_backoff: Duration::from_secs(60),
        on: on.to_vec(),
    }
}

fn step(retry: &Retry) -> Step<'_> {
    Step {
        on_exit: false,
        trial: false,
        stopping: None,
        retry,
        retries_used: 0,
        timeout: Some(Duration::from_secs(90)),
        missing_objective: None,
    }
}

fn recorded(end: End) -> Ended<'static> {
    Ended::Recorded {
        end,
        reason: None,
        exit_code: Some(3),
        signal: None,
    }
}

#[test]
fn a_success_keeps_its_outputs() {
    let r = retry(0, &[]);
    let out = attempt_ended(
        &Run::default(),
        &step(&r),
        1,
        recorded(End::Succeeded),
        STOPPING,
        NOW,
    );
    assert_eq!((out.attempt, out.state), (at::SUCCEEDED, st::SUCCEEDED));
    assert!(out.keep_outputs);
}

#[test]
fn a_failure_is_retried_after_its_backoff_then_fails_for_good() {
    let r = retry(2, &[RetryOn::Failure]);
    let mut s = step(&r);
    let out = attempt_ended(&Run::default(), &s, 1, recorded(End::Failed), STOPPING, NOW);
    assert_eq!((out.attempt, out.state), (at::FAILED, st::QUEUED));
    assert_eq!(out.not_before, Some(NOW + 10_000));
    assert_eq!(out.retries_used, 1);
    assert_eq!(out.reason.as_deref(), Some("retry in 10s (exit code 3)"));
    s.retries_used = 1;
    let out = attempt_ended(&Run::default(), &s, 2, recorded(End::Failed), STOPPING, NOW);
    assert_eq!(out.not_before, Some(NOW + 20_000), "the backoff doubles");
    s.retries_used = 2;
    let run = Run {
        fail_fast: true,
        ..Run::default()
    };
    let out = attempt_ended(&run, &s, 3, recorded(End::Failed), STOPPING, NOW);
    assert_eq!(out.state, st::FAILED);
    assert_eq!(out.reason.as_deref(), Some("exit code 3"));
    assert!(out.fail_fast, "a main step's failure stops a failFast run");
}

#[test]
fn a_timeout_says_so_and_is_retried_only_when_asked() {
    let r = retry(3, &[RetryOn::Failure]);
    let out = attempt_ended(
        &Run::default(),
        &step(&r),
        1,
        recorded(End::Timeout),
        STOPPING,
        NOW,
    );
    assert_eq!((out.attempt, out.state), (at::TIMEOUT, st::FAILED));
    assert_eq!(out.reason.as_deref(), Some("timed out after 1m30s"));
    let r = retry(3, &[RetryOn::Timeout]);
    let out = attempt_ended(
        &Run::default(),
        &step(&r),
        1,
        recorded(End::Timeout),
        STOPPING,
        NOW,
    );
    assert_eq!(out.state, st::QUEUED);
}

#[test]
fn a_terminated_attempt_is_preempted_unless_the_run_is_cancelled() {
    let r = retry(0, &[]);
    let out = attempt_ended(
        &Run::default(),
        &step(&r),
        4,
        recorded(End::Terminated),
        STOPPING,
        NOW,
    );
    assert_eq!((out.attempt, out.state), (at::PREEMPTED, st::QUEUED));
    assert_eq!(out.reason.as_deref(), Some("attempt 4 preempted"));
    assert_eq!(out.not_before, None, "preempted work resumes at once");
    let run = Run {
        cancelling: true,
        ..Run::default()
    };
    let out = attempt_ended(&run, &step(&r), 4, recorded(End::Terminated), STOPPING, NOW);
    assert_eq!((out.attempt, out.state), (at::CANCELLED, st::CANCELLED));
}

#[test]
fn a_lost_attempt_runs_again_at_once_and_a_stopped_trial_says_why() {
    let r = retry(0, &[]);
    let out = attempt_ended(
        &Run::default(),
        &step(&r),
        2,
        Ended::Lost("gone"),
        STOPPING,
        NOW,
    );
    assert_eq!((out.attempt, out.state), (at::LOST, st::QUEUED));
    assert_eq!(out.reason.as_deref(), Some("attempt 2 lost: gone"));
    let mut s = step(&r);
    s.trial = true;
    s.stopping = Some("stopping: early stopping at step 3");
    let out = attempt_ended(&Run::default(), &s, 2, Ended::Lost("gone"), STOPPING, NOW);
    assert_eq!(out.state, st::STOPPED);
    assert_eq!(out.reason.as_deref(), Some("early stopping at step 3"));
    let out = attempt_ended(
        &Run::default(),
        &s,
        2,
        recorded(End::Succeeded),
        STOPPING,
        NOW,
    );
    assert_eq!((out.attempt, out.state), (at::SUCCEEDED, st::STOPPED));
}

#[test]
fn a_trial_without_its_objective_fails_without_stopping_the_run() {
    let r = retry(0, &[]);
    let mut s = step(&r);
    s.trial = true;
    s.missing_objective = Some("loss");
    let run = Run {
        fail_fast: true,
        ..Run::default()
    };
    let out = attempt_ended(&run, &s, 1, recorded(End::Succeeded), STOPPING, NOW);
    assert_eq!(out.state, st::FAILED);
    assert!(out.reason.as_deref().is_some_and(|r| r.contains("'loss'")));
    assert!(!out.fail_fast && !out.keep_outputs);
}

#[test]
fn a_waiting_step_waits_for_every_need_then_goes_or_is_cancelled() {
    let run = Run::default();
    assert_eq!(
        next(
            &run,
            false,
            false,
            false,
            &[Need::Satisfied("a"), Need::Open("b")]
        ),
        Next::Wait
    );
    assert_eq!(
        next(
            &run,
            false,
            false,
            false,
            &[Need::Unsatisfied("a", "failed"), Need::Open("b")]
        ),
        Next::Wait,
        "nothing is decided while a need runs"
    );
    assert_eq!(
        next(
            &run,
            false,
            false,
            false,
            &[
                Need::Satisfied("a"),
                Need::Unsatisfied("b", "was cancelled")
            ]
        ),
        Next::Cancel("upstream 'b' was cancelled".into())
    );
    assert_eq!(
        next(&run, false, false, false, &[Need::Satisfied("a")]),
        Next::Go
    );
    assert_eq!(
        next(&run, true, false, false, &[]),
        Next::Cancel("not started: a step failed (failFast)".into())
    );
    let cancelling = Run {
        cancelling: true,
        ..Run::default()
    };
    assert_eq!(
        next(&cancelling, false, false, false, &[]),
        Next::Cancel("the run was cancelled".into())
    );
    // onExit steps wait for the main steps, then run whatever happened.
    assert_eq!(next(&cancelling, true, true, false, &[]), Next::Wait);
    assert_eq!(
        next(
            &cancelling,
            true,
            true,
            true,
            &[Need::Unsatisfied("a", "failed")]
        ),
        Next::Go
    );
}

fn any_end() -> impl Strategy<Value = End> {
    prop_oneof![
        Just(End::Succeeded),
        Just(End::Failed),
        Just(End::Timeout),
        Just(End::Terminated),
    ]
}

proptest! {
    #[test]
    fn decisions_keep_their_promises(
        end in proptest::option::of(any_end()),
        cancelling in any::<bool>(),
        fail_fast in any::<bool>(),
        on_exit in any::<bool>(),
        trial in any::<bool>(),
        stopping in any::<bool>(),
        limit in 0u32..4,
        used in 0i64..5,
        on_failure in any::<bool>(),
        on_timeout in any::<bool>(),
        factor in 1.0f64..4.0,
        missing in any::<bool>(),
    ) {
        let used = used.min(i64::from(limit));
        let mut on = Vec::new();
        if on_failure { on.push(RetryOn::Failure); }
        if on_timeout { on.push(RetryOn::Timeout); }
        let r = Retry { factor, ..retry(limit, &on) };
        let s = Step {
            on_exit,
            trial,
            stopping: (trial && stopping).then_some("stopping: asked"),
            retry: &r,
            retries_used: used,
            timeout: None,
            missing_objective: (trial && missing).then_some("loss"),
        };
        let run = Run { cancelling, fail_fast };
        let ended = match end {
            Some(end) => recorded(end),
            None => Ended::Lost("gone"),
        };
        let out = attempt_ended(&run, &s, 1, ended, STOPPING, NOW);
        // The step is queued again or has ended; never left running or pending.
        prop_assert!(out.state == st::QUEUED || st::is_terminal(out.state), "{out:?}");
        // The retry budget is never exceeded, and only a retry spends it.
        prop_assert!(out.retries_used <= i64::from(limit));
        prop_assert!(out.retries_used == used || out.retries_used == used + 1);
        if out.retries_used == used + 1 {
            prop_assert_eq!(out.state, st::QUEUED);
            let wait = out.not_before.map(|nb| nb - NOW);
            prop_assert!(wait.is_some_and(|w| (0..=60_000).contains(&w)), "{wait:?}");
        } else {
            prop_assert_eq!(out.not_before, None, "lost and preempted work resumes at once");
        }
        // Lost or preempted work never spends a retry.
        if matches!(end, None | Some(End::Terminated)) {
            prop_assert_eq!(out.retries_used, used);
        }
        // A cancelled run starts no main step again.
        if cancelling && !on_exit {
            prop_assert_ne!(out.state, st::QUEUED);
        }
        // Only a success keeps outputs, and a kept output is a success.
        prop_assert_eq!(out.keep_outputs, out.state == st::SUCCEEDED);
        if out.keep_outputs {
            prop_assert_eq!(end, Some(End::Succeeded));
        }
        // A trial never stops the run, nor does an onExit step.
        if out.fail_fast {
            prop_assert!(fail_fast && !trial && !on_exit && out.state == st::FAILED);
        }
        // A trial asked to stop ends Stopped unless the run is cancelled and it was lost.
        if trial && stopping && !(end.is_none() && cancelling && !on_exit) {
            prop_assert_eq!(out.state, st::STOPPED);
        }
    }

    #[test]
    fn backoff_grows_and_stays_within_its_bound(used in 0i64..64, factor in 1.0f64..10.0) {
        let r = Retry { factor, ..retry(100, &[RetryOn::Failure]) };
        let this = backoff(&r, used);
        let then = backoff(&r, used + 1);
        prop_assert!(this <= then);
        prop_assert!(then <= r.max_backoff);
        prop_assert!(this >= r.backoff.min(r.max_backoff));
    }

    #[test]
    fn a_waiting_step_goes_only_when_every_need_is_satisfied(
        needs in proptest::collection::vec(0u8..3, 0..6),
        cancelling in any::<bool>(),
        failed_fast in any::<bool>(),
    ) {
        let names: Vec<String> = (0..needs.len()).map(|i| format!("s{i}")).collect();
        let needs: Vec<Need<'_>> = needs
            .iter()
            .zip(&names)
            .map(|(k, n)| match k {
                0 => Need::Open(n),
                1 => Need::Satisfied(n),
                _ => Need::Unsatisfied(n, "failed"),
            })
            .collect();
        let run = Run { cancelling, fail_fast: false };
        let decided = next(&run, failed_fast, false, false, &needs);
        let open = needs.iter().any(|n| matches!(n, Need::Open(_)));
        let all_ok = needs.iter().all(|n| matches!(n, Need::Satisfied(_)));
        prop_assert_eq!(decided == Next::Wait, open);
        prop_assert_eq!(decided == Next::Go, all_ok && !cancelling && !failed_fast);
    }
}

#[test]
fn a_collected_end_is_what_the_runtime_recorded_and_a_termination_the_runs_cancel_or_a_preemption()
{
    assert_eq!(collected_end(End::Succeeded, false), at::SUCCEEDED);
    assert_eq!(collected_end(End::Failed, true), at::FAILED);
    assert_eq!(collected_end(End::Timeout, true), at::TIMEOUT);
    assert_eq!(collected_end(End::Terminated, true), at::CANCELLED);
    assert_eq!(collected_end(End::Terminated, false), at::PREEMPTED);
}

#[test]
fn retry_reopens_what_did_not_succeed_with_a_fresh_budget_and_onexit_steps_as_they_were() {
    assert_eq!(reopen(st::FAILED, false, false), Reopen::Fresh);
    assert_eq!(reopen(st::CANCELLED, false, false), Reopen::Fresh);
    // A failed onExit step gets a fresh budget too.
    assert_eq!(reopen(st::FAILED, false, true), Reopen::Fresh);
    // A skipped fan-out over an output fans out again; a skipped step stays skipped.
    assert_eq!(reopen(st::SKIPPED, true, false), Reopen::Fresh);
    assert_eq!(reopen(st::SKIPPED, false, false), Reopen::Keep);
    assert_eq!(reopen(st::SUCCEEDED, false, true), Reopen::Again);
    assert_eq!(reopen(st::SKIPPED, false, true), Reopen::Again);
}

proptest! {
    /// What succeeded (or came from the cache, or stopped early) is never run again by a
    /// retry unless it is an onExit step; what is open is never touched.
    #[test]
    fn retry_never_reruns_a_success_nor_touches_an_open_step(
        state in proptest::sample::select(st::StepState::ALL.to_vec()),
        placeholder in any::<bool>(),
        on_exit in any::<bool>(),
    ) {
        let how = reopen(state, placeholder, on_exit);
        if !state.is_terminal() {
            prop_assert_eq!(how, Reopen::Keep);
        }
        if state.satisfies() || state == st::STOPPED {
            prop_assert!(how != Reopen::Fresh || (state == st::SKIPPED && placeholder));
            if !on_exit {
                prop_assert!(how == Reopen::Keep || (state == st::SKIPPED && placeholder));
            }
        }
    }
}

fn finished(name: &str, state: st::StepState) -> Finished<'_> {
    Finished {
        name,
        state,
        reason: None,
        trial: false,
        on_exit: false,
    }
}

#[test]
fn a_run_ends_failed_naming_its_first_failed_step_and_succeeds_without_a_reason() {
    let steps = [
        finished("prep", st::SUCCEEDED),
        finished("train", st::FAILED),
        finished("eval", st::FAILED),
    ];
    assert_eq!(
        run_end(steps, false, false, false),
        (rs::FAILED, Some("step 'train' failed".to_owned()))
    );
    let ok = [
        finished("prep", st::SUCCEEDED),
        finished("maybe", st::SKIPPED),
        finished("again", st::CACHED),
    ];
    assert_eq!(run_end(ok, false, false, false), (rs::SUCCEEDED, None));
    // A timeout says so, whatever the steps say.
    assert_eq!(
        run_end(ok, true, false, false),
        (rs::FAILED, Some("the run timed out".to_owned()))
    );
    // A cancelled run is Cancelled, and its cancelled onExit step does not fail it.
    let cleanup = Finished {
        on_exit: true,
        ..finished("cleanup", st::CANCELLED)
    };
    assert_eq!(
        run_end(
            [finished("train", st::CANCELLED), cleanup],
            false,
            true,
            false
        ),
        (rs::CANCELLED, None)
    );
    // A sweep's failed trial is the sweep's business; its run fails with the sweep's reason.
    let trial = Finished {
        trial: true,
        ..finished("trial-3", st::FAILED)
    };
    let sweep = Finished {
        reason: Some("no trial reported the objective"),
        ..finished("sweep", st::FAILED)
    };
    assert_eq!(run_end([trial], false, false, true), (rs::SUCCEEDED, None));
    assert_eq!(
        run_end([trial, sweep], false, false, true),
        (
            rs::FAILED,
            Some("no trial reported the objective".to_owned())
        )
    );
    assert_eq!(
        undrivable("its document no longer reads".into()),
        (rs::FAILED, Some("its document no longer reads".to_owned()))
    );
}

proptest! {
    /// A run succeeds exactly when it was neither cancelled nor timed out and no step that
    /// counts failed (or was cancelled outside onExit); it has a reason only when it failed
    /// for its timeout or a failed step, and never when it succeeded.
    #[test]
    fn a_run_succeeds_exactly_when_nothing_that_counts_failed(
        steps in proptest::collection::vec(
            (
                proptest::sample::select(st::StepState::ALL.to_vec()),
                any::<bool>(),
                any::<bool>(),
            ),
            0..8,
        ),
        timed_out in any::<bool>(),
        cancelling in any::<bool>(),
        from_sweep in any::<bool>(),
    ) {
        let names: Vec<String> = (0..steps.len()).map(|i| format!("s{i}")).collect();
        let rows: Vec<Finished<'_>> = steps
            .iter()
            .zip(&names)
            .map(|(&(state, trial, on_exit), name)| Finished {
                name,
                state,
                reason: Some("why"),
                trial,
                on_exit,
            })
            .collect();
        let (state, reason) = run_end(rows.iter().copied(), timed_out, cancelling, from_sweep);
        let bad = rows.iter().any(|s| {
            !s.trial && (s.state == st::FAILED || (s.state == st::CANCELLED && !s.on_exit))
        });
        let failed_step = rows.iter().any(|s| !s.trial && s.state == st::FAILED);
        prop_assert_eq!(state == rs::SUCCEEDED, !timed_out && !cancelling && !bad);
        prop_assert_eq!(state == rs::CANCELLED, !timed_out && cancelling);
        if state == rs::SUCCEEDED {
            prop_assert_eq!(reason, None);
        } else {
            prop_assert_eq!(reason.is_some(), timed_out || failed_step);
        }
    }
}

#[test]
fn a_promoted_trial_is_queued_again_with_the_next_rungs_budget_and_its_other_parameters() {
    let p = promote(
        Some(r#"{"lr":0.01,"epochs":1}"#),
        1,
        "epochs",
        &serde_json::json!(3),
    );
    assert_eq!(p.state, st::QUEUED);
    assert_eq!(p.reason, "promoted to rung 2 (epochs=3)");
    let params: serde_json::Value = serde_json::from_str(&p.item).expect("JSON");
    assert_eq!(params, serde_json::json!({"lr": 0.01, "epochs": 3}));
    // A trial with no parameters stored gets just the budget.
    assert_eq!(
        promote(None, 1, "steps", &serde_json::json!(900)).item,
        r#"{"steps":900}"#
    );
}
