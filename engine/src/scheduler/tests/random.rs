//! Random clusters and queues.

use super::*;

/// `n` cases, or `PROPTEST_CASES` when it is set: proptest's `with_cases` overrides that
/// variable, so without this a longer local hunt (`PROPTEST_CASES=2000 cargo test`) would run
/// `n` cases and say nothing. The budget of rejected inputs (`prop_assume!`, fixed at 1024)
/// grows with the cases: about a quarter of the starving steps drawn can never start, and a
/// run of 20,000 cases ran out of it ("Too many global rejects") with nothing wrong.
pub(super) fn cases(n: u32) -> ProptestConfig {
    let mut config = ProptestConfig::with_cases(n);
    if let Some(n) = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.cases = n;
    }
    config.max_global_rejects = config.max_global_rejects.max(config.cases);
    config
}

pub(super) fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (
        prop::collection::vec((1u64..=8, any::<bool>(), any::<bool>()), 1..8),
        prop::collection::vec(
            (1u32..=3, 0u64..=8, prop::option::of(0u64..=8), 0u8..6),
            1..4,
        ),
    )
        .prop_map(|(nodes, teams)| Cluster {
            pools: vec![pool("on-demand", "a", false), pool("spot", "b", true)],
            nodes: nodes
                .iter()
                .map(|&(gpu, spot, mig)| Node {
                    pool: usize::from(spot),
                    // Some nodes also have MIG slices (an extended resource).
                    capacity: Res::new(gpu, 16_000 * gpu, 64 * GI * gpu)
                        .with_ext(super::extended_resources::mig(), if mig { 7 } else { 0 }),
                })
                .collect(),
            teams: teams
                .iter()
                .enumerate()
                .map(|(i, &(w, q, b, pools))| {
                    let mut t = team(&format!("t{i}"), f64::from(w), q, b);
                    // Half the teams hold their quota in some pools only (`quotaPools`).
                    t.quota_pools = match pools {
                        3 => Some(vec![0]),
                        4 => Some(vec![1]),
                        5 => Some(vec![0, 1]),
                        _ => None,
                    };
                    t
                })
                .collect(),
        })
}

pub(super) fn arb_jobs(n_teams: usize, base: u64) -> impl Strategy<Value = Vec<Job>> {
    prop::collection::vec(
        (
            (
                0..n_teams,
                1u32..=4,
                0u64..=4,
                any::<bool>(),
                0i64..3,
                0u64..=7,
            ),
            prop::option::of(1u64..600),
        ),
        0..20,
    )
    .prop_map(move |v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, ((team, workers, gpu, inter, prio, slices), estimate))| {
                    let mut j = job(base + i as u64, team, workers, gpu);
                    // Half know how long they run at most (EASY backfill).
                    j.estimate = estimate;
                    // About a third ask for 1 to 3 MIG slices per worker.
                    j.per_worker = j
                        .per_worker
                        .with_ext(super::extended_resources::mig(), slices.saturating_sub(4));
                    j.interruptible = inter;
                    j.priority = prio * 100;
                    j
                },
            )
            .collect()
    })
}

/// A cluster, what already runs on it (placed by a first cycle), and a new queue.
pub(super) fn arb_state() -> impl Strategy<Value = (Cluster, Vec<Running>, Vec<Job>, Settings)> {
    arb_cluster()
        .prop_flat_map(|c| {
            let n = c.teams.len();
            (
                Just(c),
                arb_jobs(n, 0),
                arb_jobs(n, 1000),
                any::<(bool, bool, u8, bool)>(),
                prop::option::of(prop::sample::select(vec![100i64, 200])),
            )
        })
        .prop_map(
            |(c, first, queue, (backfill, reclaim, p, late), across_below)| {
                // Late: the first half of the queue has waited past the starvation limit.
                let now = if late { 1510 } else { 1200 };
                let settings = Settings {
                    starvation_limit: (p % 4 == 0).then_some(500),
                    grace: 30,
                    now,
                    within_team: p % 5 != 0,
                    across_below,
                    policy: [Policy::Fair, Policy::Priority, Policy::Fifo][usize::from(p % 3)],
                    placement: if p % 2 == 0 {
                        Placement::Binpack
                    } else {
                        Placement::Spread
                    },
                    backfill,
                    reclaim,
                    unit_ms: 1000,
                    explain: true,
                };
                let d = cycle(&c, &[], &first, &settings);
                let a = admitted(&d);
                let running = first
                    .into_iter()
                    .filter_map(|j| {
                        let nodes = a.get(&j.id)?.clone();
                        Some(Running {
                            // Every fourth started within the grace period.
                            started: if j.id % 4 == 0 { now - 10 } else { j.id },
                            work_at_risk: j.id % 7,
                            job: j,
                            nodes,
                        })
                    })
                    .collect();
                (c, running, queue, settings)
            },
        )
}

proptest! {
    #![proptest_config(cases(400))]

    /// Capacity is never exceeded on any node; gangs are whole; every waiting step gets one
    /// answer; pools are respected; the same input gives the same decisions.
    #[test]
    fn admissions_keep_every_promise((c, running, queue, settings) in arb_state()) {
        let d = cycle(&c, &running, &queue, &settings);
        prop_assert_eq!(&d, &cycle(&c, &running, &queue, &settings));
        let by_id: BTreeMap<u64, &Job> = queue.iter().map(|j| (j.id, j)).collect();
        let mut answered = BTreeMap::new();
        let mut free = free_of(&c, &running);
        for x in &d {
            match x {
                Decision::Admit { job, nodes } => {
                    *answered.entry(*job).or_insert(0) += 1;
                    let j = by_id[job];
                    prop_assert_eq!(nodes.len(), j.workers as usize, "a partial gang");
                    for &n in nodes {
                        prop_assert!(placement::pool_admits(&c, c.nodes[n].pool, j));
                        prop_assert!(j.per_worker.fits_in(free[n]), "node {} overcommitted", n);
                        free[n] = free[n].saturating_sub(j.per_worker);
                    }
                }
                Decision::Wait { job, reason } => {
                    *answered.entry(*job).or_insert(0) += 1;
                    prop_assert!(!reason.is_empty());
                }
                Decision::Preempt { victim, job } => {
                    let v = running.iter().find(|r| r.job.id == *victim);
                    prop_assert!(v.is_some(), "victim {} is not running", victim);
                    let v = v.expect("checked");
                    prop_assert!(v.started + settings.grace <= settings.now,
                        "victim {} started at {}, less than a grace period before {}", victim, v.started, settings.now);
                    let (v, j) = (&v.job, by_id[job]);
                    // Within a team, only lower priorities are preempted.
                    if v.team == j.team {
                        prop_assert!(v.priority < j.priority);
                    }
                    let why = reason(&d, *job);
                    if why.ends_with("(acrossTeams)") {
                        // Across teams, only classes below both the step's and the one named.
                        let below = settings.across_below.expect("acrossTeams is set");
                        prop_assert!(v.team != j.team && v.priority < below.min(j.priority),
                            "step {} (priority {}) preempted across teams for step {} (priority {})",
                            victim, v.priority, job, j.priority);
                    } else if v.team != j.team {
                        // Reclaim: never a step that could preempt the reclaiming one back.
                        prop_assert!(!admission::across(v, j, &settings),
                            "step {} reclaimed from step {}, which may preempt it", victim, job);
                    }
                }
            }
        }
        for j in &queue {
            prop_assert_eq!(answered.get(&j.id), Some(&1), "step {} answered", j.id);
        }
        // A reservation goes only to a step past the starvation limit that could ever start,
        // and nothing else starts on the nodes reserved for it.
        let holder = queue.iter().find(|j| reason(&d, j.id).contains("past the starvation limit: node(s)"));
        if let Some(s) = holder {
            let limit = settings.starvation_limit.expect("a reservation needs a limit");
            prop_assert!(s.submitted + limit <= settings.now);
            prop_assert!(admission::could_ever_start(&c, s, &settings), "step {} can never start", s.id);
            let reserved = admission::reservation_for(&c, &running, &free_of(&c, &running), s, &settings);
            // EASY backfill: a step ending before the reserved nodes drain may use them.
            let shadow = admission::shadow_of(&running, &reserved, settings.now);
            // Those that could preempt it anyway may start there.
            let preempts = |j: &Job| {
                if j.team == s.team {
                    settings.within_team && settings.policy != Policy::Fifo && j.priority > s.priority
                } else {
                    admission::across(j, s, &settings)
                        || (settings.policy == Policy::Fair && settings.reclaim && c.teams[j.team].quota != Res::ZERO)
                }
            };
            for x in &d {
                if let Decision::Admit { job, nodes } = x
                    && by_id[job].per_worker != Res::ZERO
                    && *job != s.id
                    && !preempts(by_id[job])
                    && !admission::ends_before(by_id[job], shadow, settings.now)
                {
                    prop_assert!(nodes.iter().all(|n| !reserved.contains(n)),
                        "step {} started on nodes {:?} reserved for step {}", job, nodes, s.id);
                }
            }
        }
    }

    /// Under `fair`, a team never goes past quota + borrow limit through admissions, and
    /// reclaim takes only borrowed capacity: no victim's team drops below its quota, and the
    /// reclaiming team was under its own.
    ///
    /// "Holds" counts what the cycle itself gave: a team's steps admitted earlier in the
    /// cycle, and the room held for its steps that reclaim (their victims' room is theirs
    /// once the victims stop), less its steps chosen as victims so far. A team below its
    /// quota goes first and may be admitted a gang that takes it past its quota; what it then
    /// holds beyond the quota is borrowed, and a later step of a team under its quota may
    /// take it back in the same cycle, even from a step that was running before (the victim
    /// order, not the age of the admission, picks which). Counted against the running steps
    /// alone, such a team looks pushed below its quota when it ends the cycle holding exactly
    /// its quota (proptest-regressions/scheduler/tests.txt, and
    /// `reclaim_in_the_cycle_a_gang_took_a_team_past_its_quota_leaves_it_its_quota`).
    /// Checked at each decision, in the order the cycle took them, which is stricter than
    /// checking what each team holds at the end.
    #[test]
    fn fair_share_respects_limits_and_reclaims_only_borrowed((c, running, queue, mut settings) in arb_state()) {
        settings.policy = Policy::Fair;
        let before = usage_of(&c, &running);
        let d = cycle(&c, &running, &queue, &settings);
        let by_id: BTreeMap<u64, &Job> = queue.iter().map(|j| (j.id, j)).collect();
        // Per team: what it runs, was admitted and holds for its reclaims so far (`got`, in
        // all; `got_q`, in its quota pools), and in its quota pools less its steps chosen as
        // victims so far (`held_q`). With `quotaPools`, where an across-teams hold lands is
        // not known here: such a team's quota ledger is then `None` for the cycle's rest.
        let mut got = before.clone();
        let before_q = admission::quota_usage_of(&c, &running);
        let mut got_q: Vec<Option<Res>> = before_q.iter().map(|&r| Some(r)).collect();
        let mut held_q = before_q.clone();
        for x in &d {
            match x {
                Decision::Admit { job, nodes } => {
                    let j = by_id[job];
                    got[j.team] += j.demand();
                    let part = c.quota_part(j.team, j.per_worker, nodes);
                    if let Some(g) = &mut got_q[j.team] {
                        *g += part;
                    }
                    held_q[j.team] += part;
                }
                Decision::Wait { job, reason } => {
                    let j = by_id[job];
                    if reason.starts_with(&format!("team {} is under its quota: ", c.teams[j.team].name)) {
                        // A reclaim's room is in its quota pools.
                        got[j.team] += j.demand();
                        if let Some(g) = &mut got_q[j.team] {
                            *g += j.demand();
                        }
                        held_q[j.team] += j.demand();
                    } else if reason.ends_with("(acrossTeams)") {
                        got[j.team] += j.demand();
                        if c.teams[j.team].quota_pools.is_some() {
                            got_q[j.team] = None;
                        } else if let Some(g) = &mut got_q[j.team] {
                            *g += j.demand();
                        }
                        held_q[j.team] += j.demand();
                    }
                }
                Decision::Preempt { victim, job } => {
                    let r = running.iter().find(|r| r.job.id == *victim).expect("victim runs");
                    let v = &r.job;
                    let j = by_id[job];
                    let part = c.quota_part(v.team, v.per_worker, &r.nodes);
                    held_q[v.team] = held_q[v.team].saturating_sub(part);
                    if v.team == j.team {
                        continue; // within the team: lower priority, checked above
                    }
                    if reason(&d, *job).ends_with("(acrossTeams)") {
                        continue; // across teams: a lower class, even within quota (above)
                    }
                    // Outside its quota pools, all a team holds is borrowed.
                    if part != Res::ZERO {
                        // Still holds its whole quota in every resource the quota names.
                        let q = c.teams[v.team].quota;
                        let h = held_q[v.team];
                        let holds = |h: u64, q: u64| q == u64::MAX || h >= q;
                        prop_assert!(
                            holds(h.gpu, q.gpu) && holds(h.millicpu, q.millicpu) && holds(h.memory, q.memory),
                            "team {} pushed below its quota: holds {:?} once step {} stops", v.team, h, victim);
                    }
                    if let Some(g) = got_q[j.team] {
                        prop_assert!((g + j.demand()).fits_in(c.teams[j.team].quota),
                            "team {} reclaimed for step {} past its quota", j.team, job);
                    }
                }
            }
        }
        for (t, team) in c.teams.iter().enumerate() {
            if let Some(ceiling) = team.ceiling()
                && before[t].fits_in(ceiling)
            {
                prop_assert!(got[t].fits_in(ceiling), "team {} over its limit", t);
            }
        }
    }
}
