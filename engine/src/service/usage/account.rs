//! The arithmetic of `sluice usage`, with no store and no clock: attempts cut into the shares
//! each pool holds, clipped to the window asked for, summed per group into GPU-hours,
//! CPU-hours, cost and wasted GPU-hours. Sums are kept in integer GPU-milliseconds and
//! millicore-milliseconds, so known durations give exact hours.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// A key `--by` groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Team,
    Pool,
    Pipeline,
}

impl Key {
    pub const ALL: [Key; 3] = [Key::Team, Key::Pool, Key::Pipeline];

    pub fn as_str(self) -> &'static str {
        match self {
            Key::Team => "team",
            Key::Pool => "pool",
            Key::Pipeline => "pipeline",
        }
    }
}

/// What a pool charges (a Cluster's `pools[].price`); zero where none is given, and for the
/// machine's own pool (`local`) of runs without a Cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Price {
    pub gpu_hour: f64,
    pub cpu_hour: f64,
    /// Per unit-hour of each extended resource, by name.
    pub extended_hour: BTreeMap<String, f64>,
}

/// One attempt's hold on one pool: all of its workers placed on that pool's nodes (or, without
/// a Cluster, the attempt on this machine).
#[derive(Clone, Debug, PartialEq)]
pub struct Share {
    pub team: String,
    pub pool: String,
    pub pipeline: String,
    pub gpus: u64,
    pub millicpu: u64,
    /// Extended resources held, by name (all the share's workers).
    pub extended: BTreeMap<String, u64>,
    pub price: Price,
    /// Unix ms: when the attempt started, and when it ended (a running one: now).
    pub start_ms: i64,
    pub end_ms: i64,
    /// The attempt's last `lost_ms` (see [`lost_ms`]) held work that was thrown away.
    pub lost_ms: i64,
}

/// The part of the timeline asked for: `[since, until)`, unix ms, open where `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub since: Option<i64>,
    pub until: Option<i64>,
}

impl Window {
    /// Milliseconds of `[start, end)` inside the window.
    fn overlap(self, start: i64, end: i64) -> i64 {
        let from = self.since.map_or(start, |s| s.max(start));
        let to = self.until.map_or(end, |u| u.min(end));
        (to - from).max(0)
    }
}

/// The figures of one group, or of all of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Figures {
    pub gpu_hours: f64,
    pub cpu_hours: f64,
    pub cost: f64,
    pub wasted_gpu_hours: f64,
    /// Unit-hours of each extended resource held (`nvidia.com/mig-1g.10gb`); absent when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extended_hours: BTreeMap<String, f64>,
}

/// One group: the values of its `--by` keys (the others absent), and its figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
#[schema(as = UsageGroup)]
pub struct Row {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    #[serde(flatten)]
    pub figures: Figures,
}

/// `sluice usage`'s answer (the JSON shape of `--output json`): the groups, ordered by their
/// keys, and the total.
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Usage {
    pub rows: Vec<Row>,
    pub total: Figures,
}

/// Integer sums, turned into hours once at the end.
#[derive(Clone, Debug, Default)]
struct Sums {
    gpu_ms: u128,
    millicpu_ms: u128,
    wasted_gpu_ms: u128,
    extended_ms: BTreeMap<String, u128>,
    cost: f64,
}

const HOUR_MS: f64 = 3_600_000.0;

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.gpu_ms += o.gpu_ms;
        self.millicpu_ms += o.millicpu_ms;
        self.wasted_gpu_ms += o.wasted_gpu_ms;
        for (name, ms) in &o.extended_ms {
            *self.extended_ms.entry(name.clone()).or_default() += ms;
        }
        self.cost += o.cost;
    }

    fn figures(&self) -> Figures {
        Figures {
            gpu_hours: self.gpu_ms as f64 / HOUR_MS,
            cpu_hours: self.millicpu_ms as f64 / 1000.0 / HOUR_MS,
            cost: self.cost,
            wasted_gpu_hours: self.wasted_gpu_ms as f64 / HOUR_MS,
            extended_hours: self
                .extended_ms
                .iter()
                .map(|(name, ms)| (name.clone(), *ms as f64 / HOUR_MS))
                .collect(),
        }
    }
}

/// The work an attempt that ended in `state` after `duration_ms` threw away, in ms of its
/// run time (its last ones).
///
/// Only `Preempted` and `Lost` attempts waste work (any other end is the step's own doing,
/// and a running one has lost nothing yet). The engine does not record when a checkpoint was
/// last synced, so this is an estimate from what it does record, the rule `sluice simulate`
/// applies too: the runtime syncs the checkpoint folder every `checkpoint` interval (`every`,
/// 60 s by default) after the attempt starts, so the work since the last sync is the run time
/// modulo the interval; a step without checkpoints (`checkpoint: false`) loses all of it. The final sync a preemption triggers is not
/// counted as a checkpoint: it saves only what the program had written to its folder, which
/// the engine cannot see.
pub fn lost_ms(state: &str, duration_ms: i64, checkpoint: Option<Duration>) -> i64 {
    use crate::run::state::attempt as at;
    if state != at::PREEMPTED && state != at::LOST {
        return 0;
    }
    let duration_ms = duration_ms.max(0);
    let every = checkpoint.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    if every <= 0 {
        duration_ms
    } else {
        duration_ms % every
    }
}

/// Sums `shares` inside `window` per group of the `by` keys (each key once, in any order).
/// Groups are ordered by team, pool, then pipeline; one that held nothing in the window is
/// left out.
pub fn account(shares: &[Share], window: Window, by: &[Key]) -> Usage {
    type Group = (Option<String>, Option<String>, Option<String>);
    let mut groups: BTreeMap<Group, Sums> = BTreeMap::new();
    let mut total = Sums::default();
    for s in shares {
        let end = s.end_ms.max(s.start_ms);
        let held = window.overlap(s.start_ms, end);
        let lost_from = end - s.lost_ms.clamp(0, end - s.start_ms);
        let lost = window.overlap(lost_from, end);
        if held == 0 {
            continue;
        }
        let ms = held as u128;
        let mut sums = Sums {
            gpu_ms: u128::from(s.gpus) * ms,
            millicpu_ms: u128::from(s.millicpu) * ms,
            wasted_gpu_ms: u128::from(s.gpus) * lost as u128,
            extended_ms: s
                .extended
                .iter()
                .map(|(name, n)| (name.clone(), u128::from(*n) * ms))
                .collect(),
            cost: 0.0,
        };
        let hours = sums.figures();
        sums.cost = hours.gpu_hours * s.price.gpu_hour
            + hours.cpu_hours * s.price.cpu_hour
            + hours
                .extended_hours
                .iter()
                .map(|(name, h)| h * s.price.extended_hour.get(name).copied().unwrap_or(0.0))
                .sum::<f64>();
        let key = |k: Key, v: &String| by.contains(&k).then(|| v.clone());
        groups
            .entry((
                key(Key::Team, &s.team),
                key(Key::Pool, &s.pool),
                key(Key::Pipeline, &s.pipeline),
            ))
            .or_default()
            .add(&sums);
        total.add(&sums);
    }
    Usage {
        rows: groups
            .into_iter()
            .map(|((team, pool, pipeline), sums)| Row {
                team,
                pool,
                pipeline,
                figures: sums.figures(),
            })
            .collect(),
        total: total.figures(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::state::attempt as at;

    const H: i64 = 3_600_000;

    fn share(team: &str, pool: &str, pipeline: &str, gpus: u64, millicpu: u64) -> Share {
        Share {
            team: team.into(),
            pool: pool.into(),
            pipeline: pipeline.into(),
            gpus,
            millicpu,
            extended: BTreeMap::new(),
            price: Price::default(),
            start_ms: 0,
            end_ms: H,
            lost_ms: 0,
        }
    }

    fn priced(mut s: Share, gpu_hour: f64, cpu_hour: f64) -> Share {
        s.price = Price {
            gpu_hour,
            cpu_hour,
            extended_hour: BTreeMap::new(),
        };
        s
    }

    fn during(mut s: Share, start_ms: i64, end_ms: i64) -> Share {
        s.start_ms = start_ms;
        s.end_ms = end_ms;
        s
    }

    #[test]
    fn known_durations_and_prices_give_exact_hours_and_cost() {
        // 2 GPUs and 8 cores for 1.5 h at 2.50 a GPU-hour and 0.04 a CPU-hour:
        // 3 GPU-hours, 12 CPU-hours, 7.50 + 0.48.
        let a = during(
            priced(share("vision", "a100", "train", 2, 8000), 2.5, 0.04),
            0,
            H + H / 2,
        );
        // Half a core for 30 minutes on the free local pool.
        let b = during(share("vision", "local", "prep", 0, 500), 0, H / 2);
        let u = account(&[a, b], Window::default(), &[Key::Team]);
        assert_eq!(u.rows.len(), 1, "{u:?}");
        let r = &u.rows[0];
        assert_eq!(r.team.as_deref(), Some("vision"));
        assert_eq!((r.pool.as_deref(), r.pipeline.as_deref()), (None, None));
        assert_eq!(r.figures.gpu_hours, 3.0);
        assert_eq!(r.figures.cpu_hours, 12.25);
        assert_eq!(r.figures.cost, 3.0 * 2.5 + 12.0 * 0.04);
        assert_eq!(r.figures.wasted_gpu_hours, 0.0);
        assert_eq!(u.total, r.figures);
    }

    #[test]
    fn groups_follow_the_keys_asked_for_and_sum_to_the_total() {
        let shares = [
            priced(share("vision", "a100", "train", 4, 0), 2.0, 0.0),
            priced(share("vision", "spot", "train", 2, 0), 1.0, 0.0),
            priced(share("nlp", "a100", "eval", 1, 0), 2.0, 0.0),
        ];
        let by_pool = account(&shares, Window::default(), &[Key::Pool]);
        let pools: Vec<(Option<&str>, f64, f64)> = by_pool
            .rows
            .iter()
            .map(|r| (r.pool.as_deref(), r.figures.gpu_hours, r.figures.cost))
            .collect();
        assert_eq!(pools, [(Some("a100"), 5.0, 10.0), (Some("spot"), 2.0, 2.0)]);
        assert!(by_pool.rows.iter().all(|r| r.team.is_none()));
        assert_eq!(by_pool.total.gpu_hours, 7.0);
        assert_eq!(by_pool.total.cost, 12.0);

        let all = account(&shares, Window::default(), &[Key::Pipeline, Key::Team]);
        let keys: Vec<(Option<&str>, Option<&str>)> = all
            .rows
            .iter()
            .map(|r| (r.team.as_deref(), r.pipeline.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [(Some("nlp"), Some("eval")), (Some("vision"), Some("train"))]
        );
        assert_eq!(all.rows[1].figures.gpu_hours, 6.0);
    }

    #[test]
    fn the_window_clips_attempts_and_their_lost_work() {
        // 1 GPU from 0 to 4 h, preempted with its last 3 h lost; the window is [2 h, 5 h).
        let mut s = during(priced(share("t", "p", "x", 1, 1000), 1.0, 0.0), 0, 4 * H);
        s.lost_ms = 3 * H;
        let w = Window {
            since: Some(2 * H),
            until: Some(5 * H),
        };
        let u = account(std::slice::from_ref(&s), w, &[Key::Team]);
        assert_eq!(u.total.gpu_hours, 2.0);
        assert_eq!(u.total.cpu_hours, 2.0);
        assert_eq!(u.total.cost, 2.0);
        assert_eq!(u.total.wasted_gpu_hours, 2.0);
        // A window the attempt does not reach: no row at all.
        let before = Window {
            since: None,
            until: Some(0),
        };
        assert_eq!(account(&[s], before, &[Key::Team]), Usage::default());
    }

    #[test]
    fn only_preempted_and_lost_attempts_waste_work_since_their_last_checkpoint() {
        let min = |m: u64| Some(Duration::from_secs(60 * m));
        // 25 minutes, checkpointed every 10: the last 5 minutes are lost.
        assert_eq!(
            lost_ms(at::PREEMPTED.as_str(), 25 * 60_000, min(10)),
            5 * 60_000
        );
        assert_eq!(lost_ms(at::LOST.as_str(), 25 * 60_000, min(10)), 5 * 60_000);
        // Without checkpoints, everything.
        assert_eq!(
            lost_ms(at::PREEMPTED.as_str(), 25 * 60_000, None),
            25 * 60_000
        );
        assert_eq!(
            lost_ms(at::LOST.as_str(), 25 * 60_000, Some(Duration::ZERO)),
            25 * 60_000
        );
        // Any other end loses nothing.
        for state in [
            at::SUCCEEDED,
            at::FAILED,
            at::CANCELLED,
            at::TIMEOUT,
            at::RUNNING,
        ] {
            assert_eq!(lost_ms(state.as_str(), 25 * 60_000, None), 0, "{state}");
        }
    }

    #[test]
    fn a_preempted_attempt_shows_its_lost_gpu_time_as_wasted() {
        // 4 GPUs for 25 minutes, checkpointed every 10: 4 x 5 minutes lost.
        let mut s = during(share("t", "p", "x", 4, 0), 0, 25 * 60_000);
        s.lost_ms = lost_ms(
            at::PREEMPTED.as_str(),
            25 * 60_000,
            Some(Duration::from_secs(600)),
        );
        let u = account(&[s], Window::default(), &[Key::Team]);
        assert_eq!(u.total.wasted_gpu_hours, 4.0 * 5.0 / 60.0);
        assert_eq!(u.total.gpu_hours, 4.0 * 25.0 / 60.0);
    }

    #[test]
    fn the_json_shape_holds_the_keys_asked_for_and_the_figures() {
        let u = account(
            &[priced(share("vision", "a100", "train", 1, 0), 2.0, 0.0)],
            Window::default(),
            &[Key::Team, Key::Pool],
        );
        let v = serde_json::to_value(&u).expect("serializes");
        assert_eq!(
            v,
            serde_json::json!({
                "rows": [{"team": "vision", "pool": "a100", "gpu_hours": 1.0,
                          "cpu_hours": 0.0, "cost": 2.0, "wasted_gpu_hours": 0.0}],
                "total": {"gpu_hours": 1.0, "cpu_hours": 0.0, "cost": 2.0,
                          "wasted_gpu_hours": 0.0}
            })
        );
    }
}
