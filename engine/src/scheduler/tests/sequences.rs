//! Promises over sequences of cycles: decisions applied, time advancing.

use super::*;

/// One team with a quota (team 0) and one living on borrowed capacity (team 1) on `nodes`
/// nodes of 4 GPUs; team 1's steps (one worker, 1 to 4 GPUs, started at the given times) fill
/// what they can; team 0 then asks for gangs of 1-GPU workers, and team 1 for more.
#[allow(clippy::type_complexity)]
fn arb_reclaim() -> impl Strategy<Value = (Cluster, Vec<Running>, Vec<Job>, u64, bool)> {
    (1usize..=4)
        .prop_flat_map(|nodes| {
            (
                Just(nodes),
                1u64..=(4 * nodes as u64),
                prop::collection::vec((1u64..=4, 0u64..=60), 1..16),
                prop::collection::vec(1u32..=3, 1..6),
                prop::collection::vec(1u64..=4, 0..4),
                any::<bool>(),
            )
        })
        .prop_map(|(nodes, quota, borrowed, gangs, more, old)| {
            let c = cluster(
                nodes,
                vec![team("q", 1.0, quota, None), team("b", 1.0, 0, None)],
            );
            // Placed by a cycle; `old`: all started at least a grace period before t0 = 100.
            let first: Vec<Job> = borrowed
                .iter()
                .enumerate()
                .map(|(i, &(gpu, _))| job(100 + i as u64, 1, 1, gpu))
                .collect();
            let a = admitted(&cycle(&c, &[], &first, &Settings::default()));
            let running = first
                .into_iter()
                .zip(&borrowed)
                .filter_map(|(j, &(_, age))| {
                    let nodes = a.get(&j.id)?.clone();
                    let started = if old { 70 - age.min(30) } else { 40 + age };
                    Some(Running {
                        job: j,
                        nodes,
                        started,
                        work_at_risk: 0,
                    })
                })
                .collect();
            let mut waiting: Vec<Job> = gangs
                .iter()
                .enumerate()
                .map(|(i, &w)| job(200 + i as u64, 0, w, 1))
                .collect();
            waiting.extend(
                more.iter()
                    .enumerate()
                    .map(|(i, &gpu)| job(300 + i as u64, 1, 1, gpu)),
            );
            for j in &mut waiting {
                j.submitted = 100;
            }
            (c, running, waiting, quota, old)
        })
}

/// Applies one cycle's decisions the way an executor does: an admitted step runs from `now`,
/// a victim stops one grace period after it was told to. Returns the victims with when they
/// stop.
fn apply(
    d: &[Decision],
    now: u64,
    running: &mut Vec<Running>,
    waiting: &mut Vec<Job>,
    stopping: &mut Vec<(u64, u64)>,
    grace: u64,
) {
    for x in d {
        match x {
            Decision::Admit { job, nodes } => {
                let i = waiting.iter().position(|j| j.id == *job).expect("waits");
                running.push(Running {
                    job: waiting.remove(i),
                    nodes: nodes.clone(),
                    started: now,
                    work_at_risk: 0,
                });
            }
            Decision::Preempt { victim, .. } => stopping.push((*victim, now + grace)),
            Decision::Wait { .. } => {}
        }
    }
}

/// A step of a multi-cycle run: `(now, decisions)` after each cycle.
type Trace = Vec<(u64, Vec<Decision>)>;

/// Runs a cycle at `start`, then after each of `steps`, applying the decisions; `arrivals`
/// queue once their submission time has come; victims stop `stop_after` after being told to
/// and queue again; `ends`: how long after it starts a step ends by itself (it ends, or
/// fails), by id. `check` sees each cycle's input and decisions.
#[allow(clippy::too_many_arguments)]
fn drive(
    c: &Cluster,
    running: &mut Vec<Running>,
    waiting: &mut Vec<Job>,
    settings: &Settings,
    arrivals: &[Job],
    start: u64,
    steps: &[u64],
    ends: &BTreeMap<u64, u64>,
    stop_after: u64,
    mut check: impl FnMut(u64, &[Running], &[Job], &[Decision]) -> Result<(), TestCaseError>,
) -> Result<Trace, TestCaseError> {
    let mut stopping: Vec<(u64, u64)> = Vec::new();
    let mut trace = Vec::new();
    let mut now = start;
    let mut arrived = 0;
    for dt in steps {
        while arrived < arrivals.len() && arrivals[arrived].submitted <= now {
            waiting.push(arrivals[arrived].clone());
            arrived += 1;
        }
        // Victims whose grace period has passed stop; so do steps whose time is up.
        let gone: BTreeSet<u64> = stopping
            .iter()
            .filter(|(_, at)| *at <= now)
            .map(|(id, _)| *id)
            .collect();
        stopping.retain(|(id, _)| !gone.contains(id));
        let (kept, out): (Vec<Running>, Vec<Running>) =
            std::mem::take(running).into_iter().partition(|r| {
                !gone.contains(&r.job.id) && ends.get(&r.job.id).is_none_or(|e| now < r.started + e)
            });
        *running = kept;
        // Preempted steps queue again; ended ones are done.
        waiting.extend(
            out.into_iter()
                .filter(|r| gone.contains(&r.job.id))
                .map(|r| r.job),
        );
        let s = Settings {
            now,
            ..settings.clone()
        };
        let d = cycle(c, running, waiting, &s);
        check(now, running, waiting, &d)?;
        apply(&d, now, running, waiting, &mut stopping, stop_after);
        trace.push((now, d));
        now += dt;
    }
    Ok(trace)
}

proptest! {
    #![proptest_config(cases(200))]

    /// A team under its quota with work waiting gets up to its quota, in whole gangs: one
    /// grace period after it asks, none of its steps still waits that would fit within its
    /// quota, when the borrowed steps in its way started at least a grace period before; two
    /// grace periods after, whenever they started (it must first wait for them to be old
    /// enough to be preempted).
    #[test]
    fn an_under_quota_team_reaches_its_quota_within_one_grace_period(
        (c, mut running, mut waiting, quota, old) in arb_reclaim()
    ) {
        let settings = Settings::default();
        let g = settings.grace;
        // After each cycle's admissions: GPUs team q holds, and the smallest step it still
        // has waiting.
        let mut seen: BTreeMap<u64, (u64, Option<u64>)> = BTreeMap::new();
        drive(&c, &mut running, &mut waiting, &settings, &[], 100, &[g, g, g], &BTreeMap::new(), g,
            |now, running, waiting, d| {
                let a = admitted(d);
                let mine = waiting.iter().filter(|j| j.team == 0);
                let gpu = usage_of(&c, running)[0].gpu
                    + mine.clone().filter(|j| a.contains_key(&j.id)).map(|j| j.demand().gpu).sum::<u64>();
                let left = mine.filter(|j| !a.contains_key(&j.id)).map(|j| j.demand().gpu).min();
                seen.insert(now, (gpu, left));
                Ok(())
            })?;
        let short = |at: u64| {
            let (gpu, left) = seen[&at];
            left.is_some_and(|l| gpu + l <= quota)
        };
        if old {
            prop_assert!(!short(100 + g),
                "one grace period on, team q (quota {} GPU) still waits for a step that fits it: {:?}", quota, seen);
        }
        prop_assert!(!short(100 + 2 * g),
            "two grace periods on, team q (quota {} GPU) still waits for a step that fits it: {:?}", quota, seen);
    }
}

/// A cluster and a workload that arrives over time, with when each step ends by itself (its
/// duration, or half of it for those that fail), the time steps between cycles, and settings.
#[allow(clippy::type_complexity)]
fn arb_run() -> impl Strategy<Value = (Cluster, Vec<Job>, BTreeMap<u64, u64>, Vec<u64>, Settings)> {
    arb_cluster()
        .prop_flat_map(|c| {
            let n = c.teams.len();
            (
                Just(c),
                arb_workload(n),
                prop::collection::vec(1u64..=20, 20..60),
                any::<(bool, bool, bool, bool)>(),
                prop::option::of(prop::sample::select(vec![100i64, 200])),
            )
        })
        .prop_map(
            |(c, work, steps, (backfill, reclaim, within_team, starve), across_below)| {
                let ends = work
                    .iter()
                    .map(|w| {
                        let fails = w.job.id % 5 == 0;
                        (
                            w.job.id,
                            if fails {
                                w.duration / 2 + 1
                            } else {
                                w.duration
                            },
                        )
                    })
                    .collect();
                let jobs = work.into_iter().map(|w| w.job).collect();
                let settings = Settings {
                    backfill,
                    reclaim,
                    within_team,
                    across_below,
                    starvation_limit: starve.then_some(100),
                    ..Settings::default()
                };
                (c, jobs, ends, steps, settings)
            },
        )
}

proptest! {
    #![proptest_config(cases(150))]

    /// Over many cycles, with steps arriving, ending, failing and being preempted (a victim
    /// stops before the next cycle and queues again): a victim has run at least a grace period;
    /// so no step is preempted twice within one grace period, and no two steps preempt each
    /// other back and forth within one (A evicts B, then B evicts A). What each team holds,
    /// kept step by step as an executor would, equals the sum of what runs; and a step told its
    /// team is at its limit is: what the team holds, plus what this cycle admitted or held for
    /// it, plus the step, exceeds its quota plus borrow limit.
    #[test]
    fn preemption_never_thrashes_and_quota_accounting_never_leaks(
        (c, jobs, ends, steps, settings) in arb_run()
    ) {
        let g = settings.grace;
        let all: BTreeMap<u64, Job> = jobs.iter().map(|j| (j.id, j.clone())).collect();
        let job_of = |id: u64| all[&id].clone();
        let mut arrivals = jobs;
        arrivals.sort_by_key(|j| (j.submitted, j.id));
        let mut running = Vec::new();
        let mut waiting = Vec::new();
        // (when, victim, for whom)
        let mut preemptions: Vec<(u64, u64, u64)> = Vec::new();
        let mut ledger = vec![Res::ZERO; c.teams.len()];
        let mut holds: BTreeMap<u64, Job> = BTreeMap::new();
        drive(&c, &mut running, &mut waiting, &settings, &arrivals, 0, &steps, &ends, 0,
                |t, running, waiting, d| {
                    // What stopped since the last cycle leaves the ledger.
                    let live: BTreeSet<u64> = running.iter().map(|r| r.job.id).collect();
                    for (id, j) in std::mem::take(&mut holds) {
                        if live.contains(&id) {
                            holds.insert(id, j);
                        } else {
                            ledger[j.team] = ledger[j.team].saturating_sub(j.demand());
                        }
                    }
                    prop_assert_eq!(&ledger, &usage_of(&c, running), "t={}: the ledger drifted", t);
                    let by_id: BTreeMap<u64, &Job> = waiting.iter().map(|j| (j.id, j)).collect();
                    let mut usage = usage_of(&c, running);
                    for x in d {
                        match x {
                            Decision::Admit { job, .. } => {
                                let j = by_id[job];
                                usage[j.team] += j.demand();
                                ledger[j.team] += j.demand();
                                holds.insert(j.id, j.clone());
                            }
                            Decision::Preempt { victim, job } => {
                                let v = running.iter().find(|r| r.job.id == *victim).expect("runs");
                                prop_assert!(v.started + g <= t,
                                    "t={}: step {} preempted, started at {}", t, victim, v.started);
                                preemptions.push((t, *victim, *job));
                            }
                            Decision::Wait { job, reason } => {
                                let j = by_id[job];
                                if reason.starts_with(&format!("team {} is under its quota", c.teams[j.team].name))
                                    || reason.ends_with("(acrossTeams)")
                                {
                                    usage[j.team] += j.demand();
                                }
                                if reason.contains("at its limit") && settings.policy == Policy::Fair {
                                    let ceiling = c.teams[j.team].ceiling().expect("a limit");
                                    prop_assert!(!(usage[j.team] + j.demand()).fits_in(ceiling),
                                        "t={}: step {} told team {} is at its limit; it holds {}", t, job, j.team, usage[j.team]);
                                }
                            }
                        }
                    }
                    Ok(())
                })?;
        for (i, &(t1, b, a)) in preemptions.iter().enumerate() {
            for &(t2, v, by) in &preemptions[i + 1..] {
                prop_assert!(!(v == b && t2 < t1 + g),
                    "step {} preempted at {} and again at {}", b, t1, t2);
                prop_assert!(!(v == a && by == b && t2 < t1 + g),
                    "step {} evicted {} at {}, and {} evicted it at {}", a, b, t1, b, t2);
                // Across teams no loop ever, grace period or not: a step that may preempt
                // another across teams is never preempted by it, by any rule.
                let (ja, jb) = (job_of(a), job_of(b));
                if admission::across(&ja, &jb, &settings) {
                    prop_assert!(!(v == a && by == b),
                        "step {} preempted {} across teams at {}, and {} preempted it at {}", a, b, t1, b, t2);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(200))]

    /// Same input, same schedule: the cycle gives the same decisions when called again, and
    /// whatever the order of the waiting steps.
    #[test]
    fn the_same_input_gives_the_same_decisions_in_any_queue_order(
        ((c, running, mut queue, settings), mut shuffled) in arb_state().prop_flat_map(|s| {
            let q = s.2.clone();
            (Just(s), Just(q).prop_shuffle())
        })
    ) {
        // Many submitted at the same time: the order between them is the ids'.
        for j in queue.iter_mut().chain(shuffled.iter_mut()) {
            j.submitted = 1000 + j.id % 3;
        }
        let d = cycle(&c, &running, &queue, &settings);
        prop_assert_eq!(&d, &cycle(&c, &running, &queue, &settings));
        prop_assert_eq!(&d, &cycle(&c, &running, &shuffled, &settings));
        let mut reversed = running.clone();
        reversed.reverse();
        prop_assert_eq!(&d, &cycle(&c, &reversed, &queue, &settings));
    }
}

proptest! {
    #![proptest_config(cases(150))]

    /// No starvation: once the oldest step that could ever start has waited past the limit,
    /// it reserves nodes, and while small long steps keep arriving and backfill around it, it
    /// starts at the latest at the first cycle after the steps running when it began to
    /// starve have all ended.
    #[test]
    fn a_starving_step_starts_once_what_ran_on_its_nodes_has_ended(
        (mut c, first, lasts, arrivals, gang, steps, (reclaim, within_team, spread)) in arb_cluster().prop_flat_map(|c| {
            let n = c.teams.len();
            (
                Just(c),
                arb_jobs(n, 0),
                prop::collection::vec(60u64..300, 20),
                arb_jobs(n, 1000),
                (0..n, 1u32..=4, 1u64..=4, any::<bool>()),
                prop::collection::vec(1u64..=15, 40),
                any::<(bool, bool, bool)>(),
            )
        })
    ) {
        // No ceilings (a team at its limit gives up its reservation) and no quotas: nothing
        // arriving may preempt the starving step once it runs, so nothing may take its room.
        for t in &mut c.teams {
            t.borrow_limit = None;
            t.quota = Res::ZERO;
        }
        let settings = Settings {
            starvation_limit: Some(100),
            reclaim,
            within_team,
            placement: if spread { Placement::Spread } else { Placement::Binpack },
            ..Settings::default()
        };
        let starving = {
            let mut j = job(5000, gang.0, gang.1, gang.2);
            j.interruptible = gang.3;
            j.submitted = 0;
            j
        };
        prop_assume!(admission::could_ever_start(&c, &starving, &settings));
        // What runs at t0 = 200, started at 150 and running 60 to 300 more.
        let t0 = 200;
        let a = admitted(&cycle(&c, &[], &first, &Settings { now: 150, ..settings.clone() }));
        let mut running: Vec<Running> = first
            .into_iter()
            .filter_map(|j| {
                let nodes = a.get(&j.id)?.clone();
                // Submitted after the starving step: it stays the oldest.
                let job = Job { submitted: j.id + 1, ..j };
                Some(Running { job, nodes, started: 150, work_at_risk: 0 })
            })
            .collect();
        let mut ends: BTreeMap<u64, u64> = running
            .iter()
            .zip(&lasts)
            .map(|(r, l)| (r.job.id, *l))
            .collect();
        // Estimates are upper bounds (a step's timeout stops it): those that have one run at
        // most that long, here exactly.
        for r in &mut running {
            if r.job.estimate.is_some() {
                r.job.estimate = Some(ends[&r.job.id]);
            }
        }
        let all_ended = 150 + running.iter().map(|r| ends[&r.job.id]).max().unwrap_or(0);
        // Then small long steps arrive, one every 5.
        let arrivals: Vec<Job> = arrivals
            .into_iter()
            .enumerate()
            .map(|(i, mut j)| {
                j.submitted = t0 + 5 * i as u64;
                j.priority = j.priority.min(100);
                // Long ones, and short ones that say so (which may backfill the reservation).
                let lasts = if j.estimate.is_some() && i % 2 == 0 { 20 } else { 100_000 };
                j.estimate = j.estimate.map(|_| lasts);
                ends.insert(j.id, lasts);
                j
            })
            .collect();
        let mut waiting = vec![starving];
        let mut started: Option<u64> = None;
        let mut steps = steps;
        steps.extend(std::iter::repeat_n(15, 30));
        drive(&c, &mut running, &mut waiting, &settings, &arrivals, t0, &steps, &ends, 0,
            |now, _, _, d| {
                if started.is_none() && admitted(d).contains_key(&5000) {
                    started = Some(now);
                }
                Ok(())
            })?;
        let first_after: u64 = {
            let mut t = t0;
            let mut cycles = vec![t0];
            for dt in &steps {
                t += dt;
                cycles.push(t);
            }
            cycles.into_iter().find(|t| *t >= all_ended).unwrap_or(u64::MAX)
        };
        prop_assert!(started.is_some_and(|t| t <= first_after),
            "step 5000 started at {:?}; what ran at {} had all ended by {}, next cycle {}",
            started, t0, all_ended, first_after);
    }
}

#[test]
fn a_team_reclaiming_its_quota_and_a_starving_borrower_do_not_evict_each_other_in_turn() {
    // One node of 4 GPUs. nlp (no quota) borrowed it at 0 with a long step; vision (quota 4)
    // asks for it at 100. The step it preempts queues again and, submitted at 0, has starved.
    let c = cluster(
        1,
        vec![team("vision", 1.0, 4, None), team("nlp", 1.0, 0, None)],
    );
    let mut borrowed = job(1, 1, 1, 4);
    borrowed.submitted = 0;
    let mut running = vec![Running {
        job: borrowed,
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let mut mine = job(2, 0, 1, 4);
    mine.submitted = 100;
    let mut waiting = vec![mine];
    let settings = Settings {
        starvation_limit: Some(50),
        ..Settings::default()
    };
    let ends = BTreeMap::from([(1, 10_000), (2, 300)]);
    let trace = drive(
        &c,
        &mut running,
        &mut waiting,
        &settings,
        &[],
        100,
        &[10; 60],
        &ends,
        0,
        |_, _, _, _| Ok(()),
    )
    .expect("no check fails");
    let preempted: Vec<(u64, u64)> = trace
        .iter()
        .flat_map(|(t, d)| {
            d.iter().filter_map(move |x| match x {
                Decision::Preempt { victim, .. } => Some((*t, *victim)),
                _ => None,
            })
        })
        .collect();
    assert_eq!(preempted, vec![(100, 1)], "{trace:?}");
    let started = |id: u64| {
        trace
            .iter()
            .find(|(_, d)| admitted(d).contains_key(&id))
            .map(|(t, _)| *t)
    };
    // Vision gets its quota at once; the starved step waits for it, then starts.
    assert_eq!(started(2), Some(110), "{trace:?}");
    assert_eq!(started(1), Some(410), "{trace:?}");
    let (_, d) = &trace[5];
    assert!(reason(d, 1).contains("past the starvation limit"), "{d:?}");
}

/// On-demand (pool 0) and spot (pool 1) nodes of 4 GPUs; team q's quota holds on-demand only
/// (`quotaPools: [on-demand]`) and its interruptible steps (flavor `spot`) fill what they can
/// of the spot nodes; team b (no
/// quota) fills what it can of the on-demand nodes; then team q asks for gangs of 1-GPU
/// production workers.
#[allow(clippy::type_complexity)]
fn arb_quota_pools() -> impl Strategy<Value = (Cluster, Vec<Running>, Vec<Job>, u64)> {
    (1usize..=3, 1usize..=3)
        .prop_flat_map(|(od, spot)| {
            (
                Just((od, spot)),
                1u64..=(4 * od as u64),
                prop::collection::vec(1u64..=4, 1..10),
                prop::collection::vec(1u64..=4, 1..10),
                prop::collection::vec(1u32..=3, 1..5),
            )
        })
        .prop_map(|((od, spot), quota, mine, theirs, gangs)| {
            let mut c = cluster(
                od + spot,
                vec![team("q", 1.0, quota, None), team("b", 1.0, 0, None)],
            );
            c.pools.push(pool("spot", "a", true));
            for n in od..od + spot {
                c.nodes[n].pool = 1;
            }
            c.teams[0].quota_pools = Some(vec![0]);
            let mut first: Vec<Job> = mine
                .iter()
                .enumerate()
                .map(|(i, &gpu)| {
                    let mut j = job(100 + i as u64, 0, 1, gpu);
                    j.interruptible = true;
                    j.priority = 0;
                    // On spot only: what it holds on-demand is then production alone.
                    j.flavor = Some("spot".into());
                    j
                })
                .collect();
            first.extend(
                theirs
                    .iter()
                    .enumerate()
                    .map(|(i, &gpu)| job(150 + i as u64, 1, 1, gpu)),
            );
            let a = admitted(&cycle(&c, &[], &first, &Settings::default()));
            let running = first
                .into_iter()
                .filter_map(|j| {
                    let nodes = a.get(&j.id)?.clone();
                    Some(Running {
                        job: j,
                        nodes,
                        started: 0,
                        work_at_risk: 0,
                    })
                })
                .collect();
            let waiting = gangs
                .iter()
                .enumerate()
                .map(|(i, &w)| {
                    let mut j = job(200 + i as u64, 0, w, 1);
                    j.priority = 1000;
                    j.submitted = 100;
                    j
                })
                .collect();
            (c, running, waiting, quota)
        })
}

proptest! {
    #![proptest_config(cases(200))]

    /// Quota per pool: a team whose best-effort steps fill the spot pool still gets its
    /// on-demand quota for production work, reclaiming what another team borrowed there,
    /// within one grace period (or displacing its own best-effort work there); what it
    /// reclaims is in its quota pools.
    #[test]
    fn a_team_gets_its_quota_in_its_quota_pools_whatever_it_borrows_elsewhere(
        (c, mut running, mut waiting, quota) in arb_quota_pools()
    ) {
        let settings = Settings::default();
        let g = settings.grace;
        let mut seen: BTreeMap<u64, (u64, Option<u64>)> = BTreeMap::new();
        drive(&c, &mut running, &mut waiting, &settings, &[], 100, &[g, g], &BTreeMap::new(), g,
            |now, running, waiting, d| {
                for x in d {
                    if let Decision::Preempt { victim, .. } = x {
                        let v = running.iter().find(|r| r.job.id == *victim).expect("runs");
                        if v.job.team == 0 {
                            // Its own best-effort work (`withinTeam: lowerPriority`).
                            prop_assert!(v.job.priority < 1000);
                        } else {
                            prop_assert!(v.nodes.iter().all(|&n| c.nodes[n].pool == 0),
                                "t={}: step {} reclaimed off the quota pools", now, victim);
                        }
                    }
                }
                let a = admitted(d);
                let mine = waiting.iter().filter(|j| j.team == 0 && j.priority == 1000);
                // What it holds on the on-demand nodes (where its admitted production goes).
                let on_demand: u64 = running
                    .iter()
                    .filter(|r| r.job.team == 0)
                    .map(|r| r.nodes.iter().filter(|&&n| c.nodes[n].pool == 0).count() as u64 * r.job.per_worker.gpu)
                    .sum();
                let held = on_demand
                    + mine.clone().filter(|j| a.contains_key(&j.id)).map(|j| j.demand().gpu).sum::<u64>();
                let left = mine.filter(|j| !a.contains_key(&j.id)).map(|j| j.demand().gpu).min();
                seen.insert(now, (held, left));
                Ok(())
            })?;
        let (held, left) = seen[&(100 + g)];
        prop_assert!(left.is_none_or(|l| held + l > quota),
            "one grace period on, team q (quota {} GPU on-demand) holds {} there and still waits for a step of {}: {:?}",
            quota, held, left.unwrap_or(0), seen);
    }
}
