//! Usage day by day, with the days (and today's hours) that are over kept once computed: what
//! the web UI's usage page shows. A team with 10,000 runs a week has some 70,000 attempts in its week, and
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

/// The kept parts, by team and [since, until) (unix ms): the team's runs created before the
/// part's end when it was read, and its usage by team, pool and pipeline.
#[derive(Debug, Default)]
pub struct Days {
    kept: Mutex<HashMap<Part, (i64, Usage)>>,
}

/// A team and [since, until), unix ms.
type Part = (String, i64, i64);

fn start_ms(day: NaiveDate) -> Option<i64> {
    day.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_millis())
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

/// The parts a day is read in: a past day whole; today, each hour that is over, then the
/// rest of the day (kept parts are the ones over: a busy team's today is mostly those).
fn parts_of(day: NaiveDate, now_ms: i64) -> Vec<(i64, i64)> {
    let (Some(start), Some(end)) = (start_ms(day), start_ms(day + chrono::Days::new(1))) else {
        return Vec::new();
    };
    if end <= now_ms || start > now_ms {
        return vec![(start, end)];
    }
    const HOUR: i64 = 3_600_000;
    let open = start + (now_ms - start) / HOUR * HOUR;
    let mut parts: Vec<(i64, i64)> = (start..open)
        .step_by(HOUR as usize)
        .map(|h| (h, h + HOUR))
        .collect();
    parts.push((open, end));
    parts
}

fn text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(crate::time::format)
        .unwrap_or_default()
}

impl Service {
    /// The principal's usage on each of `days` (UTC, in ascending order), by team, pool and
    /// pipeline. Parts that are over (past days, today's past hours) are kept once read (see
    /// the module's doc); the rest of today, and everything for a principal of every team,
    /// is read each time.
    pub async fn usage_by_day(
        &self,
        who: &Principal,
        days: &[NaiveDate],
    ) -> Result<Vec<Usage>, Error> {
        let now = self.clock.now_ms();
        let parts: Vec<Vec<(i64, i64)>> = days.iter().map(|&d| parts_of(d, now)).collect();
        let flat: Vec<(i64, i64)> = parts.iter().flatten().copied().collect();
        let read = self.usage_of_parts(who, &flat, now).await?;
        let mut read = read.into_iter();
        Ok(parts
            .iter()
            .map(|p| merge(&read.by_ref().take(p.len()).collect::<Vec<_>>()))
            .collect())
    }

    /// Reads (and so keeps) the last `days` days of every team that ran something in them,
    /// a day at a time: what a server does once it starts, in the background, so that the
    /// first view of a busy team's usage page does not read its whole week.
    pub async fn warm_usage(&self, days: u32) -> Result<(), Error> {
        let today = self.clock.now().date_naive();
        let first = today - chrono::Days::new(u64::from(days.max(1)) - 1);
        let list: Vec<NaiveDate> = (0..days.max(1))
            .map(|k| first + chrono::Days::new(u64::from(k)))
            .collect();
        let since = start_ms(first).map(text).unwrap_or_default();
        for team in self.store.teams_since(&since).await? {
            let who = Principal::new(team, crate::service::Role::Viewer);
            // A day at a time, with a pause between: requests served meanwhile wait for
            // one day's read at most, not a week's.
            for day in &list {
                self.usage_by_day(&who, std::slice::from_ref(day)).await?;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Usage in each of `parts` ([since, until) unix ms, in ascending order), kept for those
    /// over at `now` once read.
    async fn usage_of_parts(
        &self,
        who: &Principal,
        parts: &[(i64, i64)],
        now: i64,
    ) -> Result<Vec<Usage>, Error> {
        let by = vec![Key::Team, Key::Pool, Key::Pipeline];
        let team = who.bound_team().map(str::to_owned);
        let mut out: Vec<Option<Usage>> = vec![None; parts.len()];
        // For each part that is over: the team's runs created before its end, and whether
        // it can be kept (nothing that started before its end still runs).
        let mut keep: Vec<Option<(i64, bool)>> = vec![None; parts.len()];
        if let Some(team) = &team {
            let over: Vec<usize> = (0..parts.len()).filter(|&i| parts[i].1 <= now).collect();
            let ends: Vec<String> = over.iter().map(|&i| text(parts[i].1)).collect();
            let counts = self.store.runs_before(team, &ends).await?;
            // Read before the parts are: a part that ends before it is settled.
            let running = self.store.first_running(team).await?;
            let running = running
                .as_deref()
                .and_then(|t| crate::time::parse_ms(t).ok());
            for (&i, runs) in over.iter().zip(counts) {
                let (since, until) = parts[i];
                let hit = self
                    .days
                    .kept
                    .lock()
                    .ok()
                    .and_then(|kept| kept.get(&(team.clone(), since, until)).cloned())
                    .filter(|(n, _)| *n == runs);
                match hit {
                    Some((_, usage)) => out[i] = Some(usage),
                    None => keep[i] = Some((runs, running.is_none_or(|r| r >= until))),
                }
            }
        }
        let missing: Vec<usize> = (0..parts.len()).filter(|&i| out[i].is_none()).collect();
        // Read in runs of adjacent parts: one read over the last month's missing days and
        // today's hour under way would read everything between them.
        let mut runs_of: Vec<Vec<usize>> = Vec::new();
        for &i in &missing {
            match runs_of.last_mut() {
                Some(run)
                    if run
                        .last()
                        .is_some_and(|&j| j + 1 == i && parts[j].1 == parts[i].0) =>
                {
                    run.push(i);
                }
                _ => runs_of.push(vec![i]),
            }
        }
        for run in runs_of {
            let (Some(&first), Some(&last)) = (run.first(), run.last()) else {
                continue;
            };
            let windows: Vec<Window> = run
                .iter()
                .map(|&i| Window {
                    since: Some(parts[i].0),
                    until: Some(parts[i].1),
                })
                .collect();
            let query = UsageQuery {
                since: Some(text(parts[first].0)),
                until: Some(text(parts[last].1)),
                by: by.clone(),
                team: None,
            };
            let read = self.usage_within(who, &query, &windows).await?;
            for (usage, &i) in read.into_iter().zip(&run) {
                if let (Some(team), Some((runs, true))) = (&team, keep[i])
                    && let Ok(mut kept) = self.days.kept.lock()
                {
                    kept.insert(
                        (team.clone(), parts[i].0, parts[i].1),
                        (runs, usage.clone()),
                    );
                }
                out[i] = Some(usage);
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn today_is_read_in_its_past_hours_and_the_rest() {
        let day = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").expect("a date");
        let dec2 = 1_796_169_600_000; // 2026-12-02T00:00:00Z
        let now = dec2 + 19 * 3_600_000 + 42_000; // 19:00:42
        assert_eq!(
            parts_of(day("2026-12-01"), now),
            [(dec2 - 86_400_000, dec2)]
        );
        let today = parts_of(day("2026-12-02"), now);
        assert_eq!(today.len(), 20);
        assert_eq!(today[0], (dec2, dec2 + 3_600_000));
        assert_eq!(today[19], (dec2 + 19 * 3_600_000, dec2 + 86_400_000));
        assert!(today.windows(2).all(|w| w[0].1 == w[1].0), "{today:?}");
        assert_eq!(
            parts_of(day("2026-12-03"), now),
            [(dec2 + 86_400_000, dec2 + 2 * 86_400_000)]
        );
    }
}
