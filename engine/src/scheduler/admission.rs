//! One scheduling cycle: which waiting steps start now, on which nodes, what is preempted to
//! make room, and why each of the others waits.
//!
//! `fair` (the default policy): teams below their quota first, then the team with the
//! smallest dominant resource share per unit of weight (weighted DRF), recomputed after each
//! admission; within a team, higher priority first, then the oldest. A team never holds more
//! than its quota plus its borrow limit. A team under its quota whose step does not fit takes
//! back capacity that other teams borrowed (their borrowed steps are preempted, the best
//! victims first). `priority`: one queue by priority then age. `fifo`: one queue by age. In
//! every policy a gang is admitted whole or not at all.
//!
//! Preemption (reclaim and `withinTeam`) never chooses a step that started less than one
//! grace period ago; a step that waits only for such victims says so. The room a step's
//! victims will free, and the free room its placement needs besides, are held for it for the
//! rest of the cycle; what its victims free beyond that stays for later under-quota steps.
//!
//! Starvation: the oldest step past `starvation_limit` that could ever start (its gang fits
//! the empty cluster in its pools, and under `fair` within its team's quota plus borrow
//! limit, which its team's holdings leave room for now) reserves nodes: those it fits on now,
//! else those it will fit on once what runs there stops (see `reservation_for` for the rule).
//! It keeps its place in the queue; nothing else starts on its nodes, except steps that could
//! preempt it anyway (its team's higher priorities, teams reclaiming their quota while it
//! would borrow), so that the two do not evict each other in turn. Everything else backfills
//! around the reservation. One step holds a reservation at a time.
//!
//! The files: this one (the cycle, turns, starvation, starting and holding), `queues` (the
//! waiting steps in each queue's order), `state` (the cycle's free room, holdings, queue turns
//! and caches), `victims` (who may be preempted, in which order, the fewest that make room),
//! `why` (a waiting step's reason in words), `reservation` (starvation and EASY backfill).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use super::cluster::{Cluster, Res};
use super::placement::{self, Allowed, Placement};
use super::{Job, Running};

mod queues;
mod reservation;
mod state;
mod victims;
mod why;

use queues::Queues;
pub(super) use reservation::*;
use state::*;
use victims::*;
use why::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    Fifo,
    Priority,
    #[default]
    Fair,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub policy: Policy,
    pub placement: Placement,
    /// Steps behind one that does not fit may start meanwhile.
    pub backfill: bool,
    /// A team under its quota preempts what other teams borrowed.
    pub reclaim: bool,
    /// A step may preempt lower-priority steps of its own team (`withinTeam: lowerPriority`).
    pub within_team: bool,
    /// `acrossTeams: {below: CLASS}`, CLASS's priority value: a step may preempt other teams'
    /// steps whose priority is lower than both its own and this, even within their quota.
    /// None: other teams' steps are preempted only to reclaim what they borrowed.
    pub across_below: Option<i64>,
    /// A step waiting longer than this (in the unit of `Job::submitted`) reserves the nodes
    /// it will take: until it starts, nothing else starts on them (see the module doc). None:
    /// no reservations.
    pub starvation_limit: Option<u64>,
    /// The preemption grace period (in the unit of `Job::submitted`): a running step that
    /// started less than this long ago is never chosen as a victim, so that what was just
    /// admitted is not preempted again at once (preemption thrashing).
    pub grace: u64,
    /// The cycle's time, in the unit of `Job::submitted`.
    pub now: u64,
    /// Milliseconds in that unit (1000: seconds, as the simulator counts; 1: milliseconds, as
    /// the executor does), for durations written in reasons.
    pub unit_ms: u64,
    /// Each waiting step's reason in words. Off (the simulator, which reads none), every
    /// waiting step's reason is just "waiting", and what is searched only to explain one (the
    /// victims still within their grace period) is not searched: the other decisions are the
    /// same either way (property-tested).
    pub explain: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: Policy::Fair,
            placement: Placement::Binpack,
            backfill: true,
            reclaim: true,
            within_team: true,
            across_below: None,
            starvation_limit: None,
            grace: 30,
            now: 0,
            unit_ms: 1000,
            explain: true,
        }
    }
}

/// What the cycle decided for one step.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Start `job`, worker `i` on node `nodes[i]`.
    Admit { job: u64, nodes: Vec<usize> },
    /// Stop running `victim` (it resumes from its checkpoint later) to make room for `job`.
    Preempt { victim: u64, job: u64 },
    /// `job` keeps waiting, for this reason. Shared: many waiting steps of one team and shape
    /// wait for the same reason, and a copy each would cost a cycle an allocation per step.
    Wait { job: u64, reason: Arc<str> },
}

/// Each node's free resources, given what runs.
pub fn free_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut free: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    for r in running {
        for &n in &r.nodes {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
    }
    free
}

/// What each team holds.
pub fn usage_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut usage = vec![Res::ZERO; cluster.teams.len()];
    for r in running {
        usage[r.job.team] += r.job.demand();
    }
    usage
}

/// What each team holds in its quota pools (all it holds, for a team without `quotaPools`):
/// what counts against its quota.
pub fn quota_usage_of(cluster: &Cluster, running: &[Running]) -> Vec<Res> {
    let mut usage = vec![Res::ZERO; cluster.teams.len()];
    for r in running {
        usage[r.job.team] += cluster.quota_part(r.job.team, r.job.per_worker, &r.nodes);
    }
    usage
}

/// Whether `job` may run in its team's quota pools (any pool, for a team without
/// `quotaPools`): only then does its team's quota speak for it.
pub(super) fn may_use_quota(cluster: &Cluster, job: &Job) -> bool {
    cluster.teams[job.team]
        .quota_pools
        .as_ref()
        .is_none_or(|ps| ps.iter().any(|&p| placement::pool_admits(cluster, p, job)))
}

/// One cycle over the waiting steps. Deterministic: the same input gives the same decisions,
/// whatever the order of `waiting`.
pub fn cycle(
    cluster: &Cluster,
    running: &[Running],
    waiting: &[Job],
    settings: &Settings,
) -> Vec<Decision> {
    let mut st = State::new(cluster, running, waiting, settings);
    // A decision per waiting step, and at most one preemption per running step.
    let mut out = Vec::with_capacity(waiting.len() + running.len());
    // The oldest starving step that could ever start reserves the nodes it will take: those
    // it fits on now, or those it will fit on once what runs there has stopped. Nothing new
    // starts on them but it, and the steps that could preempt it anyway (its team's higher
    // priorities, teams reclaiming their quota): letting them in keeps the two from evicting
    // each other in turn.
    let holder = starving(cluster, waiting, &st.usage, settings);
    let mut shadow = None;
    if let Some(h) = holder {
        st.reserved = reservation_for(cluster, running, &st.free, h, settings);
        shadow = shadow_of(running, &st.reserved, settings.now);
    }
    let total = cluster.total();
    // Queues: per team for `fair`, one for the others; each in its order.
    let key = |j: &Job| match settings.policy {
        Policy::Fifo => (0, j.submitted, j.id),
        _ => (-j.priority, j.submitted, j.id),
    };
    // Indexed by queue: a team's index under `fair`, 0 for the others.
    let nq = if settings.policy == Policy::Fair {
        cluster.teams.len()
    } else {
        1
    };
    let mut queues = Queues::new(waiting, nq, |j| queue_of(j, settings), key);
    // The queues in the order they take turns: under `fair`, teams below their quota (or
    // whose next step keeps them within) first, then the smallest dominant share per unit of
    // weight, then the lowest index; the others have one queue. Only the team whose step was
    // just decided changes its rank (its usage and its next step), so only it is re-keyed.
    let rank = |t: usize, j: &Job, usage: &[Res], quota_usage: &[Res]| -> Rank {
        if settings.policy != Policy::Fair {
            return Rank(0, false, 0.0, t);
        }
        // With `acrossTeams`, lower classes come after higher ones of every team: started
        // first, they would only be preempted for them (and what they free taken back by
        // their own team's next step, cycle after cycle).
        let tier = settings
            .across_below
            .map_or(0, |below| -j.priority.min(below));
        let team = &cluster.teams[t];
        // Below its quota, or its next step keeps it within: it goes first, even when that
        // step is a gang that takes it past its quota.
        let q = quota_usage[t];
        let under = may_use_quota(cluster, j)
            && (below(q, team.quota) || (q + j.demand()).fits_in(team.quota));
        let share = usage[t].dominant_share(total) / team.weight.max(1e-9);
        Rank(tier, !under, share, t)
    };
    let mut turns: BTreeSet<Rank> = (0..nq)
        .filter_map(|q| Some(rank(q, queues.peek(q)?, &st.usage, &st.quota_usage)))
        .collect();
    let mut blocked: BTreeSet<usize> = BTreeSet::new();
    let mut heads: BTreeMap<usize, u64> = BTreeMap::new();
    // The queue whose turn it is. A queue whose next rank is still the smallest keeps its
    // turn without a round trip through `turns` (most often: a step waited, nothing changed).
    let mut turn = turns.pop_first();
    while let Some(Rank(_, _, _, q)) = turn {
        let Some(i) = queues.pop(q) else {
            break;
        };
        let job = queues.job(i);
        let closed = holder
            .filter(|h| !st.reserved.is_empty() && h.id != job.id)
            .filter(|h| !may_preempt(cluster, job, h, &st.quota_usage, settings))
            .filter(|_| !ends_before(job, shadow, settings.now))
            .map(|h| h.id);
        let why = match try_start(cluster, running, job, closed, &mut st, settings, &mut out) {
            Tried::Started => {
                if holder.is_some_and(|h| h.id == job.id) {
                    // It has its room: what else was reserved is open again.
                    st.reserved.clear();
                    st.grew();
                }
                None
            }
            Tried::Preempting(why) => {
                out.push(Decision::Wait {
                    job: job.id,
                    reason: st.say(|| why),
                });
                None
            }
            Tried::Waits(why) if settings.explain && holder.is_some_and(|h| h.id == job.id) => {
                let nodes: Vec<String> = st.reserved.iter().map(usize::to_string).collect();
                Some(Arc::from(format!(
                    "past the starvation limit: node(s) {} are reserved for it as they free up, nothing else starts there; {why}",
                    nodes.join(", ")
                )))
            }
            Tried::Waits(why) => Some(why),
        };
        if let Some(why) = why {
            out.push(Decision::Wait {
                job: job.id,
                reason: why,
            });
            if !settings.backfill {
                blocked.insert(q);
                heads.insert(q, job.id);
            }
        }
        turn = None;
        if !blocked.contains(&q)
            && let Some(next) = queues.peek(q)
        {
            let r = rank(q, next, &st.usage, &st.quota_usage);
            if turns.first().is_none_or(|first| r < *first) {
                turn = Some(r);
            } else {
                turns.insert(r);
            }
        }
        if turn.is_none() {
            turn = turns.pop_first();
        }
    }
    // Queues stopped behind a step that does not fit: the rest waits for it.
    for (q, jobs) in queues.rest() {
        for job in jobs {
            let head = heads.get(&q).copied().unwrap_or_default();
            out.push(Decision::Wait {
                job: job.id,
                reason: st.say(|| {
                    format!("queued behind step {head}, which does not fit yet (backfill is off)")
                }),
            });
        }
    }
    out
}

fn queue_of(j: &Job, settings: &Settings) -> usize {
    if settings.policy == Policy::Fair {
        j.team
    } else {
        0
    }
}

/// Whether `job` could preempt `holder` if that ran: a higher priority of its team (with
/// `withinTeam: lowerPriority`), a lower class of another team's (`acrossTeams`), or under
/// `fair` with reclaim, a team under its quota while `holder` would hold borrowed capacity.
/// `quota_usage`: what each team holds in its quota pools.
fn may_preempt(
    cluster: &Cluster,
    job: &Job,
    holder: &Job,
    quota_usage: &[Res],
    settings: &Settings,
) -> bool {
    if job.team == holder.team {
        return settings.within_team
            && settings.policy != Policy::Fifo
            && job.priority > holder.priority;
    }
    if across(job, holder, settings) {
        return true;
    }
    settings.policy == Policy::Fair
        && settings.reclaim
        && !across(holder, job, settings)
        && may_use_quota(cluster, job)
        && (quota_usage[job.team] + job.demand()).fits_in(cluster.teams[job.team].quota)
        && (!may_use_quota(cluster, holder)
            || !(quota_usage[holder.team] + holder.demand())
                .fits_in(cluster.teams[holder.team].quota))
}

/// Whether `job` may preempt `other` (of another team) across teams: `acrossTeams` is set and
/// `other`'s priority is below both `job`'s and the class named. Strictly below, so two
/// steps never preempt each other in turn this way; and a step that `other` could preempt
/// so never takes `other`'s room back by reclaim either (see `reclaim`).
pub(super) fn across(job: &Job, other: &Job, settings: &Settings) -> bool {
    settings.policy != Policy::Fifo
        && job.team != other.team
        && settings
            .across_below
            .is_some_and(|below| other.priority < below.min(job.priority))
}

/// Whose steps a waiting step preempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Victims {
    /// Other teams', what they borrowed (its team is under its quota).
    Borrowed,
    /// Its own team's lower priorities (`withinTeam: lowerPriority`).
    OwnTeam,
    /// Other teams' lower classes (`acrossTeams`).
    OtherTeams,
}

/// What `try_start` did.
enum Tried {
    Started,
    /// Steps are being preempted for it (or it holds room they free): it waits, saying so.
    Preempting(String),
    /// It waits, for this reason.
    Waits(Arc<str>),
}

/// Admits `job`, or preempts for it, recording the decisions; otherwise says why it
/// waits. `reserved_for`: the starving step the reserved nodes are kept for (None when `job`
/// is that step, or nothing is reserved).
fn try_start(
    cluster: &Cluster,
    running: &[Running],
    job: &Job,
    reserved_for: Option<u64>,
    st: &mut State,
    settings: &Settings,
    out: &mut Vec<Decision>,
) -> Tried {
    let team = &cluster.teams[job.team];
    let demand = job.demand();
    if settings.policy == Policy::Fair
        && let Some(ceiling) = team.ceiling()
        && !(st.usage[job.team] + demand).fits_in(ceiling)
    {
        return Tried::Waits(st.say(|| {
            format!(
                "team {} at its limit: holds {}, may hold {} (quota + borrowLimit), this step needs {}",
                team.name, st.usage[job.team], ceiling, demand
            )
        }));
    }
    let shape = st.shape(job);
    let closed = reserved_for.is_some();
    // What this step may use: reserved nodes look full.
    if !st.known_to_fail(Query::Visible(closed), shape) {
        // Not copied for each step: the free room itself when nothing is closed, else one
        // copy with the reserved nodes full for as long as the room stays as it is.
        let q = Query::Visible(closed);
        let placed = if closed {
            let visible = st.visible_closed();
            st.place(q, shape, &visible, job, settings)
        } else {
            let free = std::mem::take(&mut st.free);
            let placed = st.place(q, shape, &free, job, settings);
            st.free = free;
            placed
        };
        if let Some(nodes) = placed {
            for &n in &nodes {
                st.free[n] = st.free[n].saturating_sub(job.per_worker);
            }
            st.free_gen += 1;
            st.usage[job.team] += demand;
            st.quota_usage[job.team] += cluster.quota_part(job.team, job.per_worker, &nodes);
            st.refresh_over(cluster, job.team, true);
            out.push(Decision::Admit { job: job.id, nodes });
            return Tried::Started;
        }
    }
    let under_quota =
        may_use_quota(cluster, job) && (st.quota_usage[job.team] + demand).fits_in(team.quota);
    let may_reclaim = settings.policy == Policy::Fair && settings.reclaim && under_quota;
    let may_preempt = settings.within_team && settings.policy != Policy::Fifo;
    let may_cross = settings.policy != Policy::Fifo && settings.across_below.is_some();
    let find = |settings: &Settings, st: &mut State| {
        if may_reclaim
            && let Some(chosen) = reclaim(cluster, running, st, job, shape, closed, settings)
        {
            return Some((Victims::Borrowed, chosen));
        }
        if may_preempt
            && let Some(chosen) = lower_priority(cluster, running, st, job, shape, closed, settings)
        {
            return Some((Victims::OwnTeam, chosen));
        }
        if may_cross
            && let Some(chosen) = across_teams(cluster, running, st, job, shape, closed, settings)
        {
            return Some((Victims::OtherTeams, chosen));
        }
        None
    };
    if let Some((kind, chosen)) = find(settings, st) {
        let closed = st.closed(closed);
        // A step that reclaims takes its room in its quota pools (see `reclaim`).
        let mask = (kind == Victims::Borrowed)
            .then(|| quota_mask(cluster, job.team))
            .flatten();
        let held = hold(st, &chosen, &closed, mask.as_deref(), job, shape, settings);
        let n = chosen.len();
        let what = if n == 0 {
            "room that preemptions already under way will free is held for it".to_owned()
        } else {
            match kind {
                Victims::Borrowed => {
                    format!("{n} borrowed step(s) of other teams are being preempted to make room")
                }
                Victims::OwnTeam => format!(
                    "{n} lower-priority step(s) of team {} are being preempted to make room",
                    team.name
                ),
                Victims::OtherTeams => format!(
                    "{n} lower-class step(s) of other teams are being preempted to make room"
                ),
            }
        };
        // Room taken from other teams is said so, whoever frees it.
        let what = if kind == Victims::OtherTeams {
            format!("{what} (acrossTeams)")
        } else {
            what
        };
        let reclaimed = kind != Victims::OwnTeam;
        for v in chosen {
            // Its team still holds it until it has stopped.
            st.victims.insert(v.job.id);
            if st.victim_held.is_empty() {
                st.victim_held = vec![(Res::ZERO, Res::ZERO); cluster.teams.len()];
            }
            let h = &mut st.victim_held[v.job.team];
            h.0 += v.job.demand();
            h.1 += cluster.quota_part(v.job.team, v.job.per_worker, &v.nodes);
            st.refresh_over(cluster, v.job.team, false);
            out.push(Decision::Preempt {
                victim: v.job.id,
                job: job.id,
            });
        }
        if reclaimed {
            // The room is this step's once the victims have stopped: hold it now.
            st.usage[job.team] += demand;
            st.quota_usage[job.team] += match &held {
                Some(nodes) => cluster.quota_part(job.team, job.per_worker, nodes),
                None => demand,
            };
            st.refresh_over(cluster, job.team, true);
            if kind == Victims::Borrowed {
                return Tried::Preempting(format!("team {} is under its quota: {what}", team.name));
            }
        }
        return Tried::Preempting(what);
    }
    if let Some(id) = reserved_for
        && !st.known_to_fail(Query::Visible(false), shape)
    {
        // Every waiting step of this shape asks the same while the room stays as it is (they
        // all wait for the reservation), so a fit is remembered, as failures are.
        let fits = st.fits_open.get(&shape) == Some(&st.free_gen) || {
            let free = std::mem::take(&mut st.free);
            let placed = st
                .place(Query::Visible(false), shape, &free, job, settings)
                .is_some();
            st.free = free;
            if placed {
                st.fits_open.insert(shape, st.free_gen);
            }
            placed
        };
        if fits {
            return Tried::Waits(st.say(|| {
                format!(
                    "capacity is reserved for step {id}, which has waited past the starvation limit"
                )
            }));
        }
    }
    // Only to say so: whether it would preempt but for the grace period.
    if settings.grace > 0 && settings.explain {
        let patient = Settings {
            grace: 0,
            ..settings.clone()
        };
        if let Some((kind, _)) = find(&patient, st) {
            let whose = match kind {
                Victims::Borrowed => format!(
                    "team {} is under its quota, but the borrowed steps in its way",
                    team.name
                ),
                Victims::OwnTeam => {
                    format!("the lower-priority steps of team {} in its way", team.name)
                }
                Victims::OtherTeams => "the lower-class steps of other teams in its way".into(),
            };
            let secs = settings.grace.saturating_mul(settings.unit_ms) as f64 / 1000.0;
            return Tried::Waits(Arc::from(format!(
                "{whose} started less than the grace period ({secs}s) ago; preempted after that"
            )));
        }
    }
    if !settings.explain {
        return Tried::Waits(st.say(String::new));
    }
    Tried::Waits(why_not(cluster, st, job, shape))
}

/// Holds for `job` the room its victims (and those chosen earlier this cycle) will free, and
/// what else its placement needs of the free room now, so that no later step of this cycle
/// takes it; what the victims free beyond that stays pending for later steps.
/// `mask`: the only nodes it may use (a reclaiming step's quota pools). The nodes it will
/// take, when its placement is found.
fn hold(
    st: &mut State,
    victims: &[&Running],
    closed: &BTreeSet<usize>,
    mask: Option<&[bool]>,
    job: &Job,
    shape: Shape,
    settings: &Settings,
) -> Option<Vec<usize>> {
    let mut room = st.pending.clone();
    for v in victims {
        release(&mut room, v, closed);
    }
    let mut after: Vec<Res> = st.free.iter().zip(&room).map(|(f, r)| *f + *r).collect();
    for &n in closed {
        after[n] = Res::ZERO;
    }
    if let Some(mask) = mask {
        apply_mask(&mut after, mask);
    }
    let placed = placement::place_on(&st.allowed[shape.2].2, &after, job, settings.placement);
    if let Some(nodes) = &placed {
        for &n in nodes {
            let rest = job.per_worker.saturating_sub(room[n]);
            room[n] = room[n].saturating_sub(job.per_worker);
            st.free[n] = st.free[n].saturating_sub(rest);
        }
    }
    st.pending = room;
    st.pending_any = st.pending.iter().any(|r| *r != Res::ZERO);
    st.free_gen += 1;
    st.grew();
    placed
}

/// Per node, whether it is in team `t`'s quota pools; None for a team whose quota holds in
/// every pool.
pub(super) fn quota_mask(cluster: &Cluster, t: usize) -> Option<Vec<bool>> {
    cluster.teams[t].quota_pools.as_ref()?;
    Some(
        (0..cluster.nodes.len())
            .map(|n| cluster.in_quota(t, n))
            .collect(),
    )
}

/// No room on the nodes outside `mask`.
pub(super) fn apply_mask(room: &mut [Res], mask: &[bool]) {
    for (r, &inside) in room.iter_mut().zip(mask) {
        if !inside {
            *r = Res::ZERO;
        }
    }
}
