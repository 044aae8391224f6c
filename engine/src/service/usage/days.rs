//! Usage day by day, with the days that are over kept once computed: what the web UI's usage
//! page shows. A team with 10,000 runs a week has some 70,000 attempts in its week, and
//! reading them all on every view costs over a second (docs/benchmarks.md, "Web UI pages");
//! a past day's figures do not change once nothing of it still runs, so each is read once.
//!
//! A kept day is valid while the team has as many runs created before the day's end as when
//! it was computed: a new run is always created later, so only a deletion (`sluice delete`,
//! `gc`, from any process) changes that number, and then the day is read again. A day is kept
//! only if, before it was read, no attempt of the team that started before its end was still
//! running: a running attempt (or one whose engine died, not yet collected) may still end
//! inside it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use chrono::NaiveDate;

use super::{Figures, Key, Usage, UsageGroup, UsageQuery, Window};
use crate::service::{Error, Principal, Service};

/// The kept days, by team and day: the team's runs created before the day's end when it was
/// computed, and its usage by team, pool and pipeline.
#[derive(Debug, Default)]
pub struct Days {
    kept: Mutex<HashMap<(String, NaiveDate), (i64, Usage)>>,
}

fn start_ms(day: NaiveDate) -> Option<i64> {
    day.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_millis())
}

fn start_text(day: NaiveDate) -> String {
    day.and_hms_opt(0, 0, 0)
        .map(|t| crate::time::format(t.and_utc()))
        .unwrap_or_default()
}

/// The rows of `days` added up, group by group (a window made of those days).
pub fn merge(days: &[Usage]) -> Usage {
    type Group = (Option<String>, Option<String>, Option<String>);
    fn add(to: &mut Figures, f: &Figures) {
        to.gpu_hours += f.gpu_hours;
        to.cpu_hours += f.cpu_hours;
        to.cost += f.cost;
        to.wasted_gpu_hours += f.wasted_gpu_hours;
        for (name, h) in &f.extended_hours {
            *to.extended_hours.entry(name.clone()).or_default() += h;
        }
    }
    let mut groups: BTreeMap<Group, Figures> = BTreeMap::new();
    let mut total = Figures::default();
    for day in days {
        for r in &day.rows {
            let key = (r.team.clone(), r.pool.clone(), r.pipeline.clone());
            add(groups.entry(key).or_default(), &r.figures);
        }
        add(&mut total, &day.total);
    }
    Usage {
        rows: groups
            .into_iter()
            .map(|((team, pool, pipeline), figures)| UsageGroup {
                team,
                pool,
                pipeline,
                figures,
            })
            .collect(),
        total,
    }
}

impl Service {
    /// The principal's usage on each of `days` (UTC, in ascending order), by team, pool and
    /// pipeline. Past days are kept once read (see the module's doc); today, and every day for
    /// a principal of every team, are read each time.
    pub async fn usage_by_day(
        &self,
        who: &Principal,
        days: &[NaiveDate],
    ) -> Result<Vec<Usage>, Error> {
        let by = vec![Key::Team, Key::Pool, Key::Pipeline];
        let today = self.clock.now().date_naive();
        let team = who.bound_team().map(str::to_owned);
        let mut out: Vec<Option<Usage>> = vec![None; days.len()];
        // For each past day of a team: its runs created before its end, and whether it can
        // be kept (nothing that started before its end still runs).
        let mut keep: Vec<Option<(i64, bool)>> = vec![None; days.len()];
        if let Some(team) = &team {
            for (i, &day) in days.iter().enumerate() {
                if day >= today {
                    continue;
                }
                let end = start_text(day + chrono::Days::new(1));
                let runs = self.store.runs_before(team, &end).await?;
                let hit = self
                    .days
                    .kept
                    .lock()
                    .ok()
                    .and_then(|kept| kept.get(&(team.clone(), day)).cloned())
                    .filter(|(n, _)| *n == runs);
                match hit {
                    Some((_, usage)) => out[i] = Some(usage),
                    None => {
                        let settled = !self.store.running_before(team, &end).await?;
                        keep[i] = Some((runs, settled));
                    }
                }
            }
        }
        let missing: Vec<usize> = (0..days.len()).filter(|&i| out[i].is_none()).collect();
        if let (Some(&first), Some(&last)) = (missing.first(), missing.last()) {
            let parts: Vec<Window> = missing
                .iter()
                .map(|&i| Window {
                    since: start_ms(days[i]),
                    until: start_ms(days[i] + chrono::Days::new(1)),
                })
                .collect();
            let query = UsageQuery {
                since: Some(days[first].to_string()),
                until: Some(days[last].to_string()),
                by,
                team: None,
            };
            let read = self.usage_within(who, &query, &parts).await?;
            for (usage, &i) in read.into_iter().zip(&missing) {
                if let (Some(team), Some((runs, true))) = (&team, keep[i])
                    && let Ok(mut kept) = self.days.kept.lock()
                {
                    kept.insert((team.clone(), days[i]), (runs, usage.clone()));
                }
                out[i] = Some(usage);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }
}
