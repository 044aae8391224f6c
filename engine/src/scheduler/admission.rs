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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;

use super::cluster::{Cluster, Res};
use super::placement::{self, Allowed, Placement};
use super::{Job, Running};

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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: Policy::Fair,
            placement: Placement::Binpack,
            backfill: true,
            reclaim: true,
            within_team: true,
            starvation_limit: None,
            grace: 30,
            now: 0,
            unit_ms: 1000,
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
    /// `job` keeps waiting, for this reason.
    Wait { job: u64, reason: String },
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
    if let Some(h) = holder {
        st.reserved = reservation_for(cluster, running, &st.free, h, settings);
    }
    let total = cluster.total();
    // Queues: per team for `fair`, one for the others; each in its order.
    let key = |j: &Job| match settings.policy {
        Policy::Fifo => (0, j.submitted, j.id),
        _ => (-j.priority, j.submitted, j.id),
    };
    let mut sorted: BTreeMap<usize, Vec<(Key, &Job)>> = BTreeMap::new();
    for j in waiting {
        sorted
            .entry(queue_of(j, settings))
            .or_default()
            .push((key(j), j));
    }
    // Each queue's steps copied in the order they are taken, one after the other in memory:
    // the teams take turns, and a step fetched from all over `waiting` at its turn would
    // cost a cache miss each.
    let mut queues: BTreeMap<usize, Vec<Job>> = sorted
        .into_iter()
        .map(|(q, mut jobs)| {
            jobs.sort_by_key(|(k, _)| *k);
            // Popped from the end.
            (q, jobs.into_iter().rev().map(|(_, j)| j.clone()).collect())
        })
        .collect();
    // The queues in the order they take turns: under `fair`, teams below their quota (or
    // whose next step keeps them within) first, then the smallest dominant share per unit of
    // weight, then the lowest index; the others have one queue. Only the team whose step was
    // just decided changes its rank (its usage and its next step), so only it is re-keyed.
    let rank = |t: usize, j: &Job, usage: &[Res]| -> Rank {
        if settings.policy != Policy::Fair {
            return Rank(false, 0.0, t);
        }
        let team = &cluster.teams[t];
        // Below its quota, or its next step keeps it within: it goes first, even when that
        // step is a gang that takes it past its quota.
        let under = below(usage[t], team.quota) || (usage[t] + j.demand()).fits_in(team.quota);
        let share = usage[t].dominant_share(total) / team.weight.max(1e-9);
        Rank(!under, share, t)
    };
    let mut turns: BTreeSet<Rank> = queues
        .iter()
        .filter_map(|(&q, jobs)| Some(rank(q, jobs.last()?, &st.usage)))
        .collect();
    let mut blocked: BTreeSet<usize> = BTreeSet::new();
    let mut heads: BTreeMap<usize, u64> = BTreeMap::new();
    while let Some(Rank(_, _, q)) = turns.pop_first() {
        let Some(job) = queues.get_mut(&q).and_then(Vec::pop) else {
            break;
        };
        let job = &job;
        let closed = holder
            .filter(|h| !st.reserved.is_empty() && h.id != job.id)
            .filter(|h| !may_preempt(cluster, job, h, &st.usage, settings))
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
                    reason: why,
                });
                None
            }
            Tried::Waits(why) if holder.is_some_and(|h| h.id == job.id) => {
                let nodes: Vec<String> = st.reserved.iter().map(usize::to_string).collect();
                Some(format!(
                    "past the starvation limit: node(s) {} are reserved for it as they free up, nothing else starts there; {why}",
                    nodes.join(", ")
                ))
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
        if !blocked.contains(&q)
            && let Some(next) = queues.get(&q).and_then(|jobs| jobs.last())
        {
            turns.insert(rank(q, next, &st.usage));
        }
    }
    // Queues stopped behind a step that does not fit: the rest waits for it.
    for (q, jobs) in queues {
        for job in jobs.into_iter().rev() {
            let head = heads.get(&q).copied().unwrap_or_default();
            out.push(Decision::Wait {
                job: job.id,
                reason: format!(
                    "queued behind step {head}, which does not fit yet (backfill is off)"
                ),
            });
        }
    }
    out
}

/// A step's place in its queue: (minus priority or 0, submitted, id), smallest first.
type Key = (i64, u64, u64);

/// A queue's turn: (past its quota, dominant share per unit of weight, queue), smallest first.
#[derive(Clone, Copy, Debug)]
struct Rank(bool, f64, usize);

impl PartialEq for Rank {
    fn eq(&self, o: &Rank) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}

impl Eq for Rank {}

impl PartialOrd for Rank {
    fn partial_cmp(&self, o: &Rank) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Rank {
    fn cmp(&self, o: &Rank) -> std::cmp::Ordering {
        self.0
            .cmp(&o.0)
            .then(self.1.total_cmp(&o.1))
            .then(self.2.cmp(&o.2))
    }
}

/// Whether `usage` is below `quota` in a resource the quota names (one it does not name is
/// `u64::MAX`).
fn below(usage: Res, quota: Res) -> bool {
    let lt = |u: u64, q: u64| q != u64::MAX && u < q;
    lt(usage.gpu, quota.gpu) || lt(usage.millicpu, quota.millicpu) || lt(usage.memory, quota.memory)
}

/// What the cycle has given away so far, and what it has learnt about it.
struct State {
    /// Each node's free resources, less what was admitted or held this cycle. Only shrinks.
    free: Vec<Res>,
    /// What each team holds, with what was admitted or held this cycle.
    usage: Vec<Res>,
    /// Running steps already chosen as victims this cycle.
    victims: BTreeSet<u64>,
    /// Per node, room those victims will free that no step of this cycle has taken yet.
    pending: Vec<Res>,
    /// Whether any of `pending` is not zero.
    pending_any: bool,
    /// Nodes reserved for a starving step: nothing else starts on them.
    reserved: BTreeSet<usize>,
    /// Per team, what its steps chosen as victims hold.
    victim_held: Vec<Res>,
    /// Per team, its running steps (indices into `running`) in the victim order.
    by_team: Option<ByTeam>,
    /// Teams with running steps that hold more than their quota, less their victims: the
    /// only teams `reclaim` takes from.
    over: Option<BTreeSet<usize>>,
    /// The nodes each (interruptible, flavor) of the waiting steps may use.
    allowed: Vec<(bool, Option<String>, Allowed)>,
    /// Bumped whenever the room some query sees may have grown (room held or released,
    /// a reservation lifted, a team newly above its quota): failures recorded before it no
    /// longer hold. Between bumps the room only shrinks, and placement is monotone in it,
    /// so a shape that did not fit still does not.
    grow: u64,
    /// Bumped whenever `free` changes.
    free_gen: u64,
    /// Shapes that did not fit, per query, with the `grow` they were found in.
    failed: FxMap<(Query, Shape), u64>,
    /// Per (per-worker resources, allowed nodes): the workers that fit in the free room, with
    /// the `free_gen` it was counted in.
    room: FxMap<(Res, usize), (u64, u64)>,
    /// The last `why_not` reason per (team, shape), with the `free_gen` and team usage it was
    /// written for: the same inputs give the same words.
    reasons: FxMap<(usize, Shape), (u64, Res, String)>,
    /// The room `soon` (per closed or not) and the room of `Query::Reclaimable` (per closed
    /// or not and grace), with the `grow` and `free_gen` they were computed at.
    rooms: FxMap<(Query, u64, u64), Rc<Vec<Res>>>,
    /// `why_not`'s words for a shape, with the `free_gen` they were written at.
    shape_words: FxMap<Shape, (u64, String)>,
    /// `why_not`'s words for each team, with the usage they were written for.
    team_words: Vec<Option<(Res, String)>>,
}

/// FxHash (as rustc uses): the memo keys are small integers, SipHash's cost showed.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_isize(&mut self, i: isize) {
        self.write_u64(i as u64);
    }
}

type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// Running steps (indices into `running`) per team, each team's in the victim order.
struct ByTeam {
    start: Vec<usize>,
    idx: Vec<usize>,
}

impl ByTeam {
    fn of(&self, t: usize) -> &[usize] {
        &self.idx[self.start[t]..self.start[t + 1]]
    }
}

/// What placement depends on in a job: per-worker resources, gang size, allowed nodes.
type Shape = (Res, u32, usize);

/// A placement query whose failures are remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Query {
    /// The free room, with the reserved nodes closed or not.
    Visible(bool),
    /// The free room plus what victims will free (`soon`), closed or not.
    Soon(bool),
    /// `Soon` plus what every preemptible (at this grace) step of a team above its quota
    /// holds: if that does not do, no reclaim does.
    Reclaimable(bool, u64),
}

impl State {
    fn new(cluster: &Cluster, running: &[Running], waiting: &[Job], settings: &Settings) -> State {
        let mut allowed: Vec<(bool, Option<String>, Allowed)> = Vec::new();
        for j in waiting {
            if !allowed
                .iter()
                .any(|(i, f, _)| *i == j.interruptible && *f == j.flavor)
            {
                allowed.push((j.interruptible, j.flavor.clone(), Allowed::new(cluster, j)));
            }
        }
        let st = State {
            free: free_of(cluster, running),
            usage: usage_of(cluster, running),
            victims: BTreeSet::new(),
            pending: vec![Res::ZERO; cluster.nodes.len()],
            pending_any: false,
            reserved: BTreeSet::new(),
            victim_held: Vec::new(),
            by_team: None,
            over: None,
            allowed,
            grow: 0,
            free_gen: 0,
            failed: FxMap::default(),
            room: FxMap::default(),
            reasons: FxMap::default(),
            rooms: FxMap::default(),
            shape_words: FxMap::default(),
            team_words: Vec::new(),
        };
        let _ = settings;
        st
    }

    /// Builds, on first need, the running steps per team in the victim order and the teams
    /// above their quota (a cycle whose steps all fit needs neither).
    fn index(&mut self, cluster: &Cluster, running: &[Running]) {
        if self.by_team.is_some() {
            return;
        }
        // Bucketed by team (counting sort), each bucket in the victim order.
        let teams = cluster.teams.len();
        let mut start = vec![0usize; teams + 1];
        for r in running {
            start[r.job.team + 1] += 1;
        }
        for t in 0..teams {
            start[t + 1] += start[t];
        }
        let mut next = start.clone();
        let mut idx = vec![0usize; running.len()];
        for (i, r) in running.iter().enumerate() {
            idx[next[r.job.team]] = i;
            next[r.job.team] += 1;
        }
        for t in 0..teams {
            let bucket = &mut idx[start[t]..start[t + 1]];
            if bucket.len() > 1 {
                bucket.sort_by_key(|&i| (victim_order(&running[i]), i));
            }
        }
        self.by_team = Some(ByTeam { start, idx });
        self.over = Some(BTreeSet::new());
        for t in 0..teams {
            self.refresh_over(cluster, t, true);
        }
    }

    fn teams(&self) -> &ByTeam {
        self.by_team.as_ref().expect("indexed")
    }

    fn over(&self) -> &BTreeSet<usize> {
        self.over.as_ref().expect("indexed")
    }

    /// What team `t`'s steps chosen as victims hold.
    fn victim_held(&self, t: usize) -> Res {
        self.victim_held.get(t).copied().unwrap_or_default()
    }

    fn grew(&mut self) {
        self.grow += 1;
    }

    fn shape(&self, job: &Job) -> Shape {
        let a = self
            .allowed
            .iter()
            .position(|(i, f, _)| *i == job.interruptible && *f == job.flavor)
            .expect("every waiting step's nodes were listed");
        (job.per_worker, job.workers, a)
    }

    /// Whether team `t` is above its quota once its victims have stopped.
    /// `grown`: its usage grew (else its victims did).
    fn refresh_over(&mut self, cluster: &Cluster, t: usize, grown: bool) {
        // Not indexed yet: nothing was reclaimed, nothing remembered about reclaiming.
        let (Some(by_team), Some(over)) = (&self.by_team, &mut self.over) else {
            return;
        };
        if by_team.of(t).is_empty() {
            return;
        }
        let held =
            self.usage[t].saturating_sub(self.victim_held.get(t).copied().unwrap_or_default());
        if held.fits_in(cluster.teams[t].quota) {
            over.remove(&t);
        } else {
            // Newly above its quota, or further above: more of its steps may be reclaimed.
            if over.insert(t) || grown {
                self.grew();
            }
        }
    }

    fn known_to_fail(&self, q: Query, shape: Shape) -> bool {
        self.failed.get(&(q, shape)) == Some(&self.grow)
    }

    /// `placement::place` for `job` on `free`, remembering a failure as `q`'s.
    fn place(
        &mut self,
        q: Query,
        shape: Shape,
        free: &[Res],
        job: &Job,
        settings: &Settings,
    ) -> Option<Vec<usize>> {
        let p = placement::place_on(&self.allowed[shape.2].2, free, job, settings.placement);
        if p.is_none() {
            self.failed.insert((q, shape), self.grow);
        }
        p
    }

    /// The free room, with the reserved nodes looking full when `closed`.
    fn visible(&self, closed: bool) -> Vec<Res> {
        let mut visible = self.free.clone();
        if closed {
            for &n in &self.reserved {
                visible[n] = Res::ZERO;
            }
        }
        visible
    }

    /// `soon`, computed once for as long as the room stays as it is.
    fn soon_room(&mut self, closed: bool) -> Rc<Vec<Res>> {
        let key = (Query::Soon(closed), self.grow, self.free_gen);
        if let Some(room) = self.rooms.get(&key) {
            return room.clone();
        }
        let room = Rc::new(self.soon(closed));
        self.rooms.retain(|k, _| k.1 == key.1 && k.2 == key.2);
        self.rooms.insert(key, room.clone());
        room
    }

    /// What a step could use once the victims chosen so far have stopped.
    fn soon(&self, closed: bool) -> Vec<Res> {
        let mut soon = self.visible(closed);
        for (n, room) in soon.iter_mut().enumerate() {
            if !(closed && self.reserved.contains(&n)) {
                *room += self.pending[n];
            }
        }
        soon
    }

    /// Whether `job` fits in the room `soon` (its placement failed on the visible room).
    fn fits_soon(&mut self, job: &Job, shape: Shape, closed: bool, settings: &Settings) -> bool {
        if !self.pending_any {
            // `soon` is the visible room, where it did not fit.
            return false;
        }
        if self.known_to_fail(Query::Soon(closed), shape) {
            return false;
        }
        let soon = self.soon_room(closed);
        self.place(Query::Soon(closed), shape, &soon, job, settings)
            .is_some()
    }

    fn closed(&self, closed: bool) -> BTreeSet<usize> {
        if closed {
            self.reserved.clone()
        } else {
            BTreeSet::new()
        }
    }
}

fn queue_of(j: &Job, settings: &Settings) -> usize {
    if settings.policy == Policy::Fair {
        j.team
    } else {
        0
    }
}

/// Whether `job` could preempt `holder` if that ran: a higher priority of its team (with
/// `withinTeam: lowerPriority`), or under `fair` with reclaim, a team under its quota while
/// `holder` would hold borrowed capacity.
fn may_preempt(
    cluster: &Cluster,
    job: &Job,
    holder: &Job,
    usage: &[Res],
    settings: &Settings,
) -> bool {
    if job.team == holder.team {
        return settings.within_team
            && settings.policy != Policy::Fifo
            && job.priority > holder.priority;
    }
    settings.policy == Policy::Fair
        && settings.reclaim
        && (usage[job.team] + job.demand()).fits_in(cluster.teams[job.team].quota)
        && !(usage[holder.team] + holder.demand()).fits_in(cluster.teams[holder.team].quota)
}

/// Whether `job` could start on the empty cluster within its team's ceiling (quota plus
/// borrow limit, which only `fair` enforces). A step that never could gets no reservation.
pub(super) fn could_ever_start(cluster: &Cluster, job: &Job, settings: &Settings) -> bool {
    let empty: Vec<Res> = cluster.nodes.iter().map(|n| n.capacity).collect();
    placement::place(cluster, &empty, job, settings.placement).is_some()
        && (settings.policy != Policy::Fair
            || cluster.teams[job.team]
                .ceiling()
                .is_none_or(|c| job.demand().fits_in(c)))
}

/// The step owed a reservation: the oldest (then lowest id) of those waiting past the
/// starvation limit that could ever start and that its team's ceiling lets start now.
pub(super) fn starving<'a>(
    cluster: &Cluster,
    waiting: &'a [Job],
    usage: &[Res],
    settings: &Settings,
) -> Option<&'a Job> {
    let limit = settings.starvation_limit?;
    waiting
        .iter()
        .filter(|j| j.submitted.saturating_add(limit) <= settings.now)
        .filter(|j| {
            settings.policy != Policy::Fair
                || cluster.teams[j.team]
                    .ceiling()
                    .is_none_or(|c| (usage[j.team] + j.demand()).fits_in(c))
        })
        .filter(|j| could_ever_start(cluster, j, settings))
        .min_by_key(|j| (j.submitted, j.id))
}

/// The nodes a starving step will take: those it fits on now, else those it will fit on once
/// what runs on them has stopped, chosen so. Its pools' nodes
/// are taken in order of when they are likely to free up (empty ones first, then those whose
/// youngest step started longest ago), then the most free now, then the lowest index, until
/// the gang fits on them as if they were empty; the nodes that placement uses are reserved.
/// Nodes so reserved only drain (nothing new starts there), so the step starts at the latest
/// once the steps running on them when the reservation was made have stopped.
pub(super) fn reservation_for(
    cluster: &Cluster,
    running: &[Running],
    free: &[Res],
    job: &Job,
    settings: &Settings,
) -> BTreeSet<usize> {
    if let Some(nodes) = placement::place(cluster, free, job, settings.placement) {
        return nodes.into_iter().collect();
    }
    let mut youngest: Vec<Option<u64>> = vec![None; cluster.nodes.len()];
    for r in running {
        for &n in &r.nodes {
            youngest[n] = youngest[n].max(Some(r.started));
        }
    }
    let mut order: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&n| placement::pool_admits(cluster, cluster.nodes[n].pool, job))
        .collect();
    order.sort_by_key(|&n| (youngest[n], std::cmp::Reverse(free[n]), n));
    let mut empty = vec![Res::ZERO; cluster.nodes.len()];
    for &n in &order {
        empty[n] = cluster.nodes[n].capacity;
        if let Some(nodes) = placement::place(cluster, &empty, job, settings.placement) {
            return nodes.into_iter().collect();
        }
    }
    order.into_iter().collect()
}

/// What `try_start` did.
enum Tried {
    Started,
    /// Steps are being preempted for it (or it holds room they free): it waits, saying so.
    Preempting(String),
    /// It waits, for this reason.
    Waits(String),
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
        return Tried::Waits(format!(
            "team {} at its limit: holds {}, may hold {} (quota + borrowLimit), this step needs {}",
            team.name, st.usage[job.team], ceiling, demand
        ));
    }
    let shape = st.shape(job);
    let closed = reserved_for.is_some();
    // What this step may use: reserved nodes look full.
    if !st.known_to_fail(Query::Visible(closed), shape) {
        let visible = st.visible(closed);
        if let Some(nodes) = st.place(Query::Visible(closed), shape, &visible, job, settings) {
            for &n in &nodes {
                st.free[n] = st.free[n].saturating_sub(job.per_worker);
            }
            st.free_gen += 1;
            st.usage[job.team] += demand;
            st.refresh_over(cluster, job.team, true);
            out.push(Decision::Admit { job: job.id, nodes });
            return Tried::Started;
        }
    }
    let under_quota = (st.usage[job.team] + demand).fits_in(team.quota);
    let may_reclaim = settings.policy == Policy::Fair && settings.reclaim && under_quota;
    let may_preempt = settings.within_team && settings.policy != Policy::Fifo;
    let find = |settings: &Settings, st: &mut State| {
        if may_reclaim
            && let Some(chosen) = reclaim(cluster, running, st, job, shape, closed, settings)
        {
            return Some((true, chosen));
        }
        if may_preempt
            && let Some(chosen) = lower_priority(cluster, running, st, job, shape, closed, settings)
        {
            return Some((false, chosen));
        }
        None
    };
    if let Some((reclaimed, chosen)) = find(settings, st) {
        let closed = st.closed(closed);
        hold(st, &chosen, &closed, job, shape, settings);
        let n = chosen.len();
        let what = if n == 0 {
            "room that preemptions already under way will free is held for it".to_owned()
        } else if reclaimed {
            format!("{n} borrowed step(s) of other teams are being preempted to make room")
        } else {
            format!(
                "{n} lower-priority step(s) of team {} are being preempted to make room",
                team.name
            )
        };
        for v in chosen {
            // Its team still holds it until it has stopped.
            st.victims.insert(v.job.id);
            if st.victim_held.is_empty() {
                st.victim_held = vec![Res::ZERO; cluster.teams.len()];
            }
            st.victim_held[v.job.team] += v.job.demand();
            st.refresh_over(cluster, v.job.team, false);
            out.push(Decision::Preempt {
                victim: v.job.id,
                job: job.id,
            });
        }
        if reclaimed {
            // The room is this step's once the victims have stopped: hold it now.
            st.usage[job.team] += demand;
            st.refresh_over(cluster, job.team, true);
            return Tried::Preempting(format!("team {} is under its quota: {what}", team.name));
        }
        return Tried::Preempting(what);
    }
    if let Some(id) = reserved_for
        && !st.known_to_fail(Query::Visible(false), shape)
    {
        let free = st.free.clone();
        if st
            .place(Query::Visible(false), shape, &free, job, settings)
            .is_some()
        {
            return Tried::Waits(format!(
                "capacity is reserved for step {id}, which has waited past the starvation limit"
            ));
        }
    }
    if settings.grace > 0 {
        let patient = Settings {
            grace: 0,
            ..settings.clone()
        };
        if let Some((reclaimed, _)) = find(&patient, st) {
            let whose = if reclaimed {
                format!(
                    "team {} is under its quota, but the borrowed steps in its way",
                    team.name
                )
            } else {
                format!("the lower-priority steps of team {} in its way", team.name)
            };
            let secs = settings.grace.saturating_mul(settings.unit_ms) as f64 / 1000.0;
            return Tried::Waits(format!(
                "{whose} started less than the grace period ({secs}s) ago; preempted after that"
            ));
        }
    }
    Tried::Waits(why_not(cluster, st, job, shape))
}

/// Holds for `job` the room its victims (and those chosen earlier this cycle) will free, and
/// what else its placement needs of the free room now, so that no later step of this cycle
/// takes it; what the victims free beyond that stays pending for later steps.
fn hold(
    st: &mut State,
    victims: &[&Running],
    closed: &BTreeSet<usize>,
    job: &Job,
    shape: Shape,
    settings: &Settings,
) {
    let mut room = st.pending.clone();
    for v in victims {
        release(&mut room, v, closed);
    }
    let mut after: Vec<Res> = st.free.iter().zip(&room).map(|(f, r)| *f + *r).collect();
    for &n in closed {
        after[n] = Res::ZERO;
    }
    if let Some(nodes) =
        placement::place_on(&st.allowed[shape.2].2, &after, job, settings.placement)
    {
        for n in nodes {
            let rest = job.per_worker.saturating_sub(room[n]);
            room[n] = room[n].saturating_sub(job.per_worker);
            st.free[n] = st.free[n].saturating_sub(rest);
        }
    }
    st.pending = room;
    st.pending_any = st.pending.iter().any(|r| *r != Res::ZERO);
    st.free_gen += 1;
    st.grew();
}

/// Whether a running step is old enough to be preempted: it started at least one grace
/// period ago.
fn preemptible(r: &Running, settings: &Settings) -> bool {
    settings.now >= r.started.saturating_add(settings.grace)
}

/// Running steps of teams above their quota whose stopping lets `job` fit, best victims
/// first: interruptible and checkpointed, then the least work lost since the last checkpoint,
/// then the lowest priority, then the youngest. None when even all of them would not do.
fn reclaim<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    st: &mut State,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    st.index(cluster, running);
    if !st.over().iter().any(|&t| t != job.team) {
        // No candidates: it reclaims nothing, and needs no victims only if it fits soon.
        return st.fits_soon(job, shape, closed, settings).then(Vec::new);
    }
    let q = Query::Reclaimable(closed, settings.grace);
    if st.known_to_fail(q, shape) {
        return None;
    }
    // The room once the pass below has taken every victim it may (what it takes of a team
    // depends only on that team, and the job's own team, under its quota, is not among
    // them): if the job does not fit there, it fits at no point of the pass (placement is
    // monotone in the room), and the pass fails. Independent of the job but for its shape.
    let key = (q, st.grow, st.free_gen);
    let most = if let Some(most) = st.rooms.get(&key) {
        most.clone()
    } else {
        let closed_set = st.closed(closed);
        let most = Rc::new(most_room(
            cluster,
            running,
            st,
            &closed_set,
            closed,
            settings,
        ));
        st.rooms.retain(|k, _| k.1 == key.1 && k.2 == key.2);
        st.rooms.insert(key, most.clone());
        most
    };
    st.place(q, shape, &most, job, settings)?;
    let closed_set = st.closed(closed);
    let free = st.soon(closed);
    // What each team will hold once the victims already chosen this cycle have stopped.
    let held = |t: usize| st.usage[t].saturating_sub(st.victim_held(t));
    let mut usage: FxMap<usize, Res> = FxMap::default();
    let mut candidates: Vec<usize> = Vec::new();
    for &t in st.over().iter().filter(|&&t| t != job.team) {
        usage.insert(t, held(t));
        for &i in st.teams().of(t) {
            let r = &running[i];
            if !st.victims.contains(&r.job.id) && preemptible(r, settings) {
                candidates.push(i);
            }
        }
    }
    candidates.sort_by_key(|&i| (victim_order(&running[i]), i));
    let allowed = &st.allowed[shape.2].2;
    let place = |free: &[Res]| placement::place_on(allowed, free, job, settings.placement);
    if place(&free).is_some() {
        return Some(Vec::new());
    }
    let mut free = free;
    let mut chosen = Vec::new();
    for i in candidates {
        let r = &running[i];
        let t = r.job.team;
        let quota = cluster.teams[t].quota;
        // Only what the team borrowed: its quota stays whole (in every resource the quota
        // names; the others are unlimited, so never "held in full").
        if !usage[&t].fits_in(quota) && !below(usage[&t].saturating_sub(r.job.demand()), quota) {
            release(&mut free, r, &closed_set);
            let u = usage.get_mut(&t).expect("listed");
            *u = u.saturating_sub(r.job.demand());
            chosen.push(r);
            if place(&free).is_some() {
                return Some(prune(allowed, free, chosen, &closed_set, job, settings));
            }
        }
    }
    None
}

/// The room once `reclaim`'s pass has taken every victim it may, whatever the job.
fn most_room(
    cluster: &Cluster,
    running: &[Running],
    st: &State,
    closed_set: &BTreeSet<usize>,
    closed: bool,
    settings: &Settings,
) -> Vec<Res> {
    let mut most = st.soon(closed);
    for &t in st.over() {
        let quota = cluster.teams[t].quota;
        let mut held = st.usage[t].saturating_sub(st.victim_held(t));
        for &i in st.teams().of(t) {
            let r = &running[i];
            if !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
                && !held.fits_in(quota)
                && !below(held.saturating_sub(r.job.demand()), quota)
            {
                release(&mut most, r, closed_set);
                held = held.saturating_sub(r.job.demand());
            }
        }
    }
    most
}

/// The team's own running steps of lower priority whose stopping lets `job` fit, in the
/// victim order; None when even all of them would not do.
fn lower_priority<'a>(
    cluster: &Cluster,
    running: &'a [Running],
    st: &mut State,
    job: &Job,
    shape: Shape,
    closed: bool,
    settings: &Settings,
) -> Option<Vec<&'a Running>> {
    st.index(cluster, running);
    let candidates: Vec<&Running> = st
        .teams()
        .of(job.team)
        .iter()
        .map(|&i| &running[i])
        .filter(|r| {
            r.job.priority < job.priority
                && !st.victims.contains(&r.job.id)
                && preemptible(r, settings)
        })
        .collect();
    if candidates.is_empty() {
        return st.fits_soon(job, shape, closed, settings).then(Vec::new);
    }
    let closed_set = st.closed(closed);
    let free = st.soon(closed);
    let allowed = &st.allowed[shape.2].2;
    let place = |free: &[Res]| placement::place_on(allowed, free, job, settings.placement);
    if place(&free).is_some() {
        return Some(Vec::new());
    }
    let mut free = free;
    let mut chosen = Vec::new();
    for r in candidates {
        release(&mut free, r, &closed_set);
        chosen.push(r);
        if place(&free).is_some() {
            return Some(prune(allowed, free, chosen, &closed_set, job, settings));
        }
    }
    None
}

/// Adds what `r` holds to `free`, except on `closed` (reserved) nodes, which stay full.
fn release(free: &mut [Res], r: &Running, closed: &BTreeSet<usize>) {
    for &n in r.nodes.iter().filter(|n| !closed.contains(n)) {
        free[n] += r.job.per_worker;
    }
}

/// The spec's victim order: interruptible and checkpointed first, then the least work lost
/// since the last checkpoint, then the lowest priority, then the youngest.
fn victim_order(r: &Running) -> (bool, u64, i64, std::cmp::Reverse<u64>, u64) {
    (
        !(r.job.interruptible && r.job.checkpointed),
        r.work_at_risk,
        r.job.priority,
        std::cmp::Reverse(r.started),
        r.job.id,
    )
}

/// Drops the victims the step does not need after all (the greedy pass may take steps on
/// nodes the placement ends up not using), the least preferred victims first.
fn prune<'a>(
    allowed: &Allowed,
    mut free: Vec<Res>,
    mut chosen: Vec<&'a Running>,
    closed: &BTreeSet<usize>,
    job: &Job,
    settings: &Settings,
) -> Vec<&'a Running> {
    let mut i = chosen.len();
    while i > 0 {
        i -= 1;
        let r = chosen[i];
        for &n in r.nodes.iter().filter(|n| !closed.contains(n)) {
            free[n] = free[n].saturating_sub(r.job.per_worker);
        }
        if placement::place_on(allowed, &free, job, settings.placement).is_some() {
            chosen.remove(i);
        } else {
            release(&mut free, r, closed);
        }
    }
    chosen
}

/// Why a step that did not fit waits, in words.
fn why_not(cluster: &Cluster, st: &mut State, job: &Job, shape: Shape) -> String {
    if let Some((generation, usage, why)) = st.reasons.get(&(job.team, shape))
        && *generation == st.free_gen
        && *usage == st.usage[job.team]
    {
        return why.clone();
    }
    let why = why_not_words(cluster, st, job, shape);
    st.reasons.insert(
        (job.team, shape),
        (st.free_gen, st.usage[job.team], why.clone()),
    );
    why
}

fn why_not_words(cluster: &Cluster, st: &mut State, job: &Job, shape: Shape) -> String {
    let team = &cluster.teams[job.team];
    let allowed = &st.allowed[shape.2].2;
    let fits_empty = allowed
        .nodes
        .iter()
        .any(|&n| job.per_worker.fits_in(cluster.nodes[n].capacity));
    if !fits_empty {
        let pools: Vec<usize> = (0..cluster.pools.len())
            .filter(|&p| placement::pool_admits(cluster, p, job))
            .collect();
        return format!(
            "no node of a pool it may use ({}) can hold one worker ({})",
            pools
                .iter()
                .map(|&p| cluster.pools[p].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            job.per_worker
        );
    }
    let key = (job.per_worker, shape.2);
    let room = match st.room.get(&key) {
        Some(&(generation, room)) if generation == st.free_gen => room,
        _ => {
            let room: u64 = allowed
                .nodes
                .iter()
                .map(|&n| workers_that_fit(job.per_worker, st.free[n]))
                .sum();
            st.room.insert(key, (st.free_gen, room));
            room
        }
    };
    // Written once per shape (and free room) and once per team (and usage), then joined: a
    // reason for every waiting step, every cycle.
    use std::fmt::Write as _;
    let words = match st.shape_words.get(&shape) {
        Some((generation, words)) if *generation == st.free_gen => words,
        _ => {
            let mut words = String::with_capacity(96);
            let _ = if job.workers > 1 {
                write!(
                    words,
                    "waiting: needs gang of {} x ({})",
                    job.workers, job.per_worker
                )
            } else {
                write!(words, "waiting: needs {}", job.per_worker)
            };
            let _ = write!(
                words,
                "; free room for {room} of {} worker(s) now",
                job.workers
            );
            st.shape_words.insert(shape, (st.free_gen, words));
            &st.shape_words[&shape].1
        }
    };
    let mut why = String::with_capacity(words.len() + 80);
    why.push_str(words);
    if team.quota != Res::ZERO {
        let usage = st.usage[job.team];
        if st.team_words.is_empty() {
            st.team_words = vec![None; cluster.teams.len()];
        }
        match &mut st.team_words[job.team] {
            Some((held, words)) if *held == usage => why.push_str(words),
            slot => {
                let mut words = String::with_capacity(80);
                let _ = write!(
                    words,
                    "; team {} holds {} of its quota {}",
                    team.name, usage, team.quota
                );
                why.push_str(&words);
                *slot = Some((usage, words));
            }
        }
    }
    why
}

fn workers_that_fit(per: Res, free: Res) -> u64 {
    if !per.fits_in(free) {
        return 0;
    }
    let div = |f: u64, p: u64| f.checked_div(p).unwrap_or(u64::MAX);
    div(free.gpu, per.gpu)
        .min(div(free.millicpu, per.millicpu))
        .min(div(free.memory, per.memory))
        .min(1024)
}
