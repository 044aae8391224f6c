//! What a schedule does with the ticks that are due: a pure function of the schedule, the
//! ticks since the last decided one, and the time now. The loop records each decision (with
//! its run, when it starts one) in one transaction keyed by the tick, so that whatever
//! crashes or second servers happen, a tick is decided once.
//!
//! The rules (`spec/cluster.md`, "Schedule"):
//! - A tick is due once its instant has passed. The newest due tick is on time if it is at
//!   most [`ON_TIME`] old; older due ticks were missed while no server ran.
//! - `catchUp: none` runs only an on-time tick; `latest` runs the newest due tick (on time
//!   or not); `all` runs every due tick in order, at most [`CATCH_UP_LIMIT`]. Every tick not
//!   run is recorded as missed, saying why.
//! - `startingDeadline`: a tick later than it is recorded as missed, not run.
//! - Concurrency (`forbid`, `replace`) is decided when a tick runs, against the schedule's
//!   runs still running: see [`Decision::Run`].

use chrono::{DateTime, Utc};

use crate::spec::model::CatchUp;

/// How late a tick may be decided and still count as on time (the loop looks every second;
/// a server that was busy or restarting for less than this is not "down").
pub const ON_TIME: chrono::Duration = chrono::Duration::seconds(60);

/// With `catchUp: all`, at most this many missed ticks are run; older ones are recorded.
pub const CATCH_UP_LIMIT: usize = 100;

/// What to do with one due tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start a run for it (unless concurrency says otherwise when it is started).
    Run,
    /// Record it as missed, with why.
    Missed(String),
}

/// The settings of a schedule that decide its ticks.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    pub catch_up: CatchUp,
    pub starting_deadline: Option<std::time::Duration>,
}

/// Decides the due ticks `due` (ascending, all at or before `now`).
pub fn decide(
    rules: Rules,
    due: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, Decision)> {
    let Some(&newest) = due.last() else {
        return Vec::new();
    };
    let on_time = now - newest <= ON_TIME;
    let mut out: Vec<(DateTime<Utc>, Decision)> = Vec::with_capacity(due.len());
    match rules.catch_up {
        CatchUp::None => {
            for &t in due {
                if t == newest && on_time {
                    out.push((t, Decision::Run));
                } else {
                    out.push((t, missed("no server ran at its time, and catchUp is none")));
                }
            }
        }
        CatchUp::Latest => {
            for &t in due {
                if t == newest {
                    out.push((t, Decision::Run));
                } else {
                    out.push((t, missed("a later tick ran instead (catchUp: latest)")));
                }
            }
        }
        CatchUp::All => {
            let first_run = due.len().saturating_sub(CATCH_UP_LIMIT);
            for (i, &t) in due.iter().enumerate() {
                if i < first_run {
                    out.push((
                        t,
                        missed(&format!(
                            "more than {CATCH_UP_LIMIT} ticks were missed; catchUp: all runs the newest {CATCH_UP_LIMIT}"
                        )),
                    ));
                } else {
                    out.push((t, Decision::Run));
                }
            }
        }
    }
    if let Some(deadline) = rules.starting_deadline
        && let Ok(deadline) = chrono::Duration::from_std(deadline)
    {
        for (t, d) in &mut out {
            if *d == Decision::Run && now - *t > deadline {
                *d = missed(&format!(
                    "{} late, past its startingDeadline of {}",
                    crate::spec::units::format_duration((now - *t).to_std().unwrap_or_default()),
                    crate::spec::units::format_duration(deadline.to_std().unwrap_or_default())
                ));
            }
        }
    }
    out
}

fn missed(why: &str) -> Decision {
    Decision::Missed(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse(s).expect("a time")
    }

    fn hours(from: &str, n: usize) -> Vec<DateTime<Utc>> {
        (0..n)
            .map(|i| t(from) + chrono::Duration::hours(i64::try_from(i).unwrap_or(0)))
            .collect()
    }

    fn runs(out: &[(DateTime<Utc>, Decision)]) -> Vec<String> {
        out.iter()
            .filter(|(_, d)| *d == Decision::Run)
            .map(|(t, _)| crate::time::format(*t))
            .collect()
    }

    const NONE: Rules = Rules {
        catch_up: CatchUp::None,
        starting_deadline: None,
    };
    const LATEST: Rules = Rules {
        catch_up: CatchUp::Latest,
        starting_deadline: None,
    };
    const ALL: Rules = Rules {
        catch_up: CatchUp::All,
        starting_deadline: None,
    };

    #[test]
    fn an_on_time_tick_runs_whatever_catch_up_says() {
        let due = [t("2026-12-01T02:00:00Z")];
        let now = t("2026-12-01T02:00:01Z");
        for rules in [NONE, LATEST, ALL] {
            assert_eq!(
                runs(&decide(rules, &due, now)),
                ["2026-12-01T02:00:00.000Z"]
            );
        }
    }

    #[test]
    fn after_a_down_server_catch_up_decides_which_missed_ticks_run() {
        // Five hourly ticks passed while no server ran; it is back 30 minutes after the last.
        let due = hours("2026-12-01T01:00:00Z", 5);
        let now = t("2026-12-01T05:30:00Z");
        let none = decide(NONE, &due, now);
        assert!(runs(&none).is_empty());
        assert_eq!(none.len(), 5, "every tick is recorded");
        assert_eq!(
            runs(&decide(LATEST, &due, now)),
            ["2026-12-01T05:00:00.000Z"]
        );
        assert_eq!(runs(&decide(ALL, &due, now)).len(), 5);
    }

    #[test]
    fn catch_up_all_runs_at_most_a_hundred_the_newest() {
        let due = hours("2026-11-01T00:00:00Z", 130);
        let now = *due.last().expect("ticks") + chrono::Duration::minutes(5);
        let out = decide(ALL, &due, now);
        let ran = runs(&out);
        assert_eq!(ran.len(), CATCH_UP_LIMIT);
        assert_eq!(ran[0], crate::time::format(due[30]));
        assert!(matches!(&out[0].1, Decision::Missed(why) if why.contains("more than 100")));
    }

    #[test]
    fn a_tick_past_its_starting_deadline_is_missed_not_run() {
        let rules = Rules {
            catch_up: CatchUp::All,
            starting_deadline: Some(std::time::Duration::from_secs(2 * 3600)),
        };
        let due = hours("2026-12-01T01:00:00Z", 4);
        let now = t("2026-12-01T04:30:00Z");
        // 01:00 and 02:00 are more than two hours late; 03:00 and 04:00 are not.
        assert_eq!(
            runs(&decide(rules, &due, now)),
            ["2026-12-01T03:00:00.000Z", "2026-12-01T04:00:00.000Z"]
        );
        let out = decide(rules, &due, now);
        assert!(matches!(&out[0].1, Decision::Missed(why) if why.contains("startingDeadline")));
    }
}
