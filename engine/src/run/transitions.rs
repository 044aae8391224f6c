//! The decisions of a run, as pure functions: what a step waiting on its needs does next
//! (wait, start, cancelled), and what an attempt's end means for its step (succeeded, failed,
//! retried after a backoff, timed out, cancelled, preempted, lost, stopped), how a run ends,
//! what a retry reopens and a promoted trial. They read the
//! facts the driver gathered and return the change to commit and the action that follows;
//! the driver commits, then acts. No I/O and no clock: `now_ms` is given.

use std::time::Duration;

use sluice_runtime::contract::End;

use super::state::{attempt as at, run as rs, step as st};
use crate::spec::model::{Retry, RetryOn};

/// The run, as the decisions about its steps see it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Run {
    /// The run is being cancelled (or timed out): main steps end `Cancelled`.
    pub cancelling: bool,
    /// The pipeline's `failFast`.
    pub fail_fast: bool,
}

/// A step, as the decisions about its attempt see it.
#[derive(Clone, Copy, Debug)]
pub struct Step<'a> {
    /// An `onExit` step: it runs (and retries) even while the run is cancelled.
    pub on_exit: bool,
    /// A sweep's trial: its failure never stops the run (failFast).
    pub trial: bool,
    /// A trial asked to stop: what it was asked to stop for (its row's reason).
    pub stopping: Option<&'a str>,
    pub retry: &'a Retry,
    /// Retries spent so far (a lost or preempted attempt never spends one).
    pub retries_used: i64,
    /// Its per-attempt timeout, for the reason of one that timed out.
    pub timeout: Option<Duration>,
    /// A trial's objective metric, when the attempt succeeded without reporting it.
    pub missing_objective: Option<&'a str>,
}

/// How an attempt ended, as the executor told.
#[derive(Clone, Copy, Debug)]
pub enum Ended<'a> {
    /// It ended as its runtime recorded (`reason`, exit code and signal explain a failure).
    Recorded {
        end: End,
        reason: Option<&'a str>,
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
    /// It is gone without a recorded end, for this reason.
    Lost(&'a str),
}

/// What to commit for an attempt's end, and what follows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The attempt's state.
    pub attempt: at::AttemptState,
    /// The step's next state and reason.
    pub state: st::StepState,
    pub reason: Option<String>,
    /// When a retried step may start again (unix ms); None: at once.
    pub not_before: Option<i64>,
    /// Retries spent, this one included.
    pub retries_used: i64,
    /// The step succeeded: its outputs (and its cache entry, if it has a key) are kept.
    pub keep_outputs: bool,
    /// The step failed for good and the pipeline fails fast: nothing new starts.
    pub fail_fast: bool,
}

/// What a step still waiting to start does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Its needs have not all ended (or the main steps, for an `onExit` step).
    Wait,
    /// It ends `Cancelled`, for this reason.
    Cancel(String),
    /// It may start (its condition and templates are the driver's to evaluate).
    Go,
}

/// How the steps a waiting step needs have ended, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need<'a> {
    /// Not every instance has ended.
    Open(&'a str),
    /// Every instance ended and all succeeded (or were skipped or cached).
    Satisfied(&'a str),
    /// Every instance ended and some did not succeed: how (`failed`, `was cancelled`,
    /// `did not succeed`).
    Unsatisfied(&'a str, &'a str),
}

/// What a step waiting to start does next: `onExit` steps wait for the main steps and then
/// start whatever happened; others wait for their needs, are cancelled when a need did not
/// succeed, and are cancelled when the run is cancelled or failed fast.
pub fn next(
    run: &Run,
    failed_fast: bool,
    on_exit: bool,
    main_done: bool,
    needs: &[Need<'_>],
) -> Next {
    if on_exit {
        return if main_done { Next::Go } else { Next::Wait };
    }
    if needs.iter().any(|n| matches!(n, Need::Open(_))) {
        return Next::Wait;
    }
    if let Some(Need::Unsatisfied(step, how)) =
        needs.iter().find(|n| matches!(n, Need::Unsatisfied(..)))
    {
        return Next::Cancel(format!("upstream '{step}' {how}"));
    }
    if run.cancelling {
        return Next::Cancel("the run was cancelled".into());
    }
    if failed_fast {
        return Next::Cancel("not started: a step failed (failFast)".into());
    }
    Next::Go
}

/// A stopped trial's reason: what it was asked to stop for (`STOPPING` taken off).
fn stopped(reason: &str, prefix: &str) -> String {
    reason.strip_prefix(prefix).unwrap_or("stopped").to_owned()
}

/// What attempt `number` of `step` ending as `ended` means for the step. `stopping_prefix`
/// starts the reasons of trials asked to stop.
pub fn attempt_ended(
    run: &Run,
    step: &Step<'_>,
    number: i64,
    ended: Ended<'_>,
    stopping_prefix: &str,
    now_ms: i64,
) -> Outcome {
    let mut out = Outcome {
        attempt: at::FAILED,
        state: st::FAILED,
        reason: None,
        not_before: None,
        retries_used: step.retries_used,
        keep_outputs: false,
        fail_fast: false,
    };
    let cancelled = run.cancelling && !step.on_exit;
    let (end, reason, exit_code, signal) = match ended {
        Ended::Lost(why) => {
            out.attempt = at::LOST;
            if cancelled {
                out.state = st::CANCELLED;
                out.reason = Some("the run was cancelled".into());
            } else if let Some(asked) = step.stopping {
                out.state = st::STOPPED;
                out.reason = Some(stopped(asked, stopping_prefix));
            } else {
                // Lost work resumes at once and never counts against retry.limit.
                out.state = st::QUEUED;
                out.reason = Some(format!("attempt {number} lost: {why}"));
            }
            return out;
        }
        Ended::Recorded {
            end,
            reason,
            exit_code,
            signal,
        } => (end, reason, exit_code, signal),
    };
    if let Some(asked) = step.stopping {
        out.attempt = if end == End::Succeeded {
            at::SUCCEEDED
        } else {
            at::CANCELLED
        };
        out.state = st::STOPPED;
        out.reason = Some(stopped(asked, stopping_prefix));
        return out;
    }
    match end {
        End::Succeeded => match step.missing_objective {
            Some(metric) => {
                out.attempt = at::FAILED;
                fail(
                    run,
                    step,
                    &mut out,
                    format!(
                        "the trial exited 0 without reporting its objective '{metric}' (print `{metric}=VALUE` or append to $SLUICE_METRICS_FILE)"
                    ),
                );
            }
            None => {
                out.attempt = at::SUCCEEDED;
                out.state = st::SUCCEEDED;
                out.keep_outputs = true;
            }
        },
        End::Terminated if run.cancelling => {
            out.attempt = at::CANCELLED;
            out.state = st::CANCELLED;
            out.reason = Some("the run was cancelled".into());
        }
        End::Terminated => {
            // Stopped from outside (a preemption): back to the queue at once.
            out.attempt = at::PREEMPTED;
            out.state = st::QUEUED;
            out.reason = Some(format!("attempt {number} preempted"));
        }
        End::Failed | End::Timeout => {
            let timeout = end == End::Timeout;
            out.attempt = if timeout { at::TIMEOUT } else { at::FAILED };
            let why = if timeout {
                format!(
                    "timed out after {}",
                    step.timeout
                        .map(crate::spec::units::format_duration)
                        .unwrap_or_default()
                )
            } else {
                reason.map_or_else(
                    || match (exit_code, signal) {
                        (_, Some(sig)) => format!("killed by signal {sig}"),
                        (Some(code), _) => format!("exit code {code}"),
                        _ => "failed".to_owned(),
                    },
                    str::to_owned,
                )
            };
            let on = if timeout {
                RetryOn::Timeout
            } else {
                RetryOn::Failure
            };
            let used = step.retries_used;
            if cancelled {
                out.state = st::CANCELLED;
                out.reason = Some("the run was cancelled".into());
            } else if step.retry.on.contains(&on) && used < i64::from(step.retry.limit) {
                let backoff = backoff(step.retry, used);
                out.retries_used = used + 1;
                out.not_before = Some(
                    now_ms.saturating_add(i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX)),
                );
                out.state = st::QUEUED;
                out.reason = Some(format!(
                    "retry in {} ({why})",
                    crate::spec::units::format_duration(backoff)
                ));
            } else {
                fail(run, step, &mut out, why);
            }
        }
    }
    out
}

/// What an attempt whose engine is gone ended as, collected from its folder (`run::reap`):
/// the end its runtime recorded, a termination from outside being the run's cancel when one
/// was asked, else a preemption.
pub fn collected_end(end: End, cancelled: bool) -> at::AttemptState {
    match end {
        End::Succeeded => at::SUCCEEDED,
        End::Failed => at::FAILED,
        End::Timeout => at::TIMEOUT,
        End::Terminated if cancelled => at::CANCELLED,
        End::Terminated => at::PREEMPTED,
    }
}

/// What `sluice retry` does with a step of an ended run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reopen {
    /// It stays as it ended.
    Keep,
    /// Pending again with a fresh retry budget: it failed or was cancelled (or it is the
    /// placeholder of a fan-out over an output that was skipped, to fan out again).
    Fresh,
    /// Pending again, its budget as it was: an onExit step, which runs again as the run ends
    /// again.
    Again,
}

/// See [`Reopen`]; `placeholder`: the `NAME[*]` row of a fan-out over an output.
pub fn reopen(state: st::StepState, placeholder: bool, on_exit: bool) -> Reopen {
    if state == st::FAILED || state == st::CANCELLED || (state == st::SKIPPED && placeholder) {
        Reopen::Fresh
    } else if on_exit && state.is_terminal() {
        Reopen::Again
    } else {
        Reopen::Keep
    }
}

/// A step as its run's end reads it.
#[derive(Clone, Copy, Debug)]
pub struct Finished<'a> {
    pub name: &'a str,
    pub state: st::StepState,
    pub reason: Option<&'a str>,
    /// A sweep's trial: how it ended is the sweep's objective, not the run's failure.
    pub trial: bool,
    /// An onExit step: cancelled (the run was), it does not fail the run.
    pub on_exit: bool,
}

/// How the run ends once nothing is left to run: `Failed` when it timed out or a step (not a
/// trial) failed or was cancelled outside a cancel of the run, `Cancelled` when the run was
/// cancelled, else `Succeeded`; and, unless it succeeded, why (the timeout, or the first
/// failed step: the sweep's own reason for a sweep's run).
pub fn run_end<'a>(
    steps: impl IntoIterator<Item = Finished<'a>> + Clone,
    timed_out: bool,
    cancelling: bool,
    from_sweep: bool,
) -> (rs::RunState, Option<String>) {
    let counts = |s: &Finished<'_>| !s.trial;
    let state =
        if timed_out {
            rs::FAILED
        } else if cancelling {
            rs::CANCELLED
        } else if steps.clone().into_iter().any(|s| {
            counts(&s) && (s.state == st::FAILED || (s.state == st::CANCELLED && !s.on_exit))
        }) {
            rs::FAILED
        } else {
            rs::SUCCEEDED
        };
    if state == rs::SUCCEEDED {
        return (state, None);
    }
    let reason = if timed_out {
        Some("the run timed out".to_owned())
    } else {
        steps
            .into_iter()
            .find(|s| s.state == st::FAILED && counts(s))
            .map(|s| match (s.reason, from_sweep) {
                (Some(why), true) => why.to_owned(),
                _ => format!("step '{}' failed", s.name),
            })
    };
    (state, reason)
}

/// How a run this version cannot drive ends (its stored document no longer reads, say):
/// `Failed`, saying why, rather than `Running` with nobody able to drive it.
pub fn undrivable(why: String) -> (rs::RunState, Option<String>) {
    (rs::FAILED, Some(why))
}

/// A trial promoted to the next rung of ASHA or the next round of Hyperband (which trial is
/// `sweep::asha`'s and the bracket's decision): its parameters with the rung's budget set,
/// queued again to continue from its own checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Promotion {
    /// The trial's parameters (its row's `item`), the budget parameter set.
    pub item: String,
    pub state: st::StepState,
    /// What `status` shows for it.
    pub reason: String,
}

/// See [`Promotion`]: `item` the trial's parameters as stored, `rung` the rung it goes
/// to (0-based, shown from 1), `name = value` that rung's budget parameter.
pub fn promote(
    item: Option<&str>,
    rung: usize,
    name: &str,
    value: &serde_json::Value,
) -> Promotion {
    // A trial's parameters are a JSON object written by the driver; anything else (none)
    // starts from no parameters rather than failing the sweep.
    let mut params: serde_json::Map<String, serde_json::Value> = item
        .and_then(|i| serde_json::from_str(i).ok())
        .unwrap_or_default();
    params.insert(name.to_owned(), value.clone());
    Promotion {
        item: serde_json::Value::Object(params).to_string(),
        state: st::QUEUED,
        reason: format!("promoted to rung {} ({name}={value})", rung + 1),
    }
}

/// The wait before retry number `used + 1`: `backoff * factor^used`, at most `maxBackoff`.
pub fn backoff(retry: &Retry, used: i64) -> Duration {
    let exp = i32::try_from(used).unwrap_or(i32::MAX);
    let secs = retry.backoff.as_secs_f64() * retry.factor.powi(exp);
    let secs = secs.min(retry.max_backoff.as_secs_f64());
    if secs.is_finite() && secs >= 0.0 {
        Duration::from_secs_f64(secs)
    } else {
        retry.max_backoff
    }
}

/// The step fails for good; a main step of a failFast pipeline stops the run from starting
/// more.
fn fail(run: &Run, step: &Step<'_>, out: &mut Outcome, why: String) {
    out.state = st::FAILED;
    out.reason = Some(why);
    out.fail_fast = run.fail_fast && !step.on_exit && !step.trial;
}

#[cfg(test)]
mod tests;
