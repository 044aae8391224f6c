//! The state of one cycle: each node's free room and each team's holdings as the cycle
//! admits and holds, the queues' turns, and the caches that keep a cycle's cost down (the
//! room that victims will free, shapes known not to fit, the last reason of each).

use super::*;

/// A step's place in its queue: (minus priority or 0, submitted, id), smallest first.
pub(super) type Key = (i64, u64, u64);

/// A queue's turn: (minus its next step's tier, past its quota, dominant share per unit of
/// weight, queue), smallest first. The tier is 0 but with `acrossTeams`: then it is the step's
/// priority capped at the class named, so that a step never starts ahead of a higher-tier
/// step of another team that could preempt it right after.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rank(
    pub(super) i64,
    pub(super) bool,
    pub(super) f64,
    pub(super) usize,
);

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
            .then(self.1.cmp(&o.1))
            .then(self.2.total_cmp(&o.2))
            .then(self.3.cmp(&o.3))
    }
}

/// Whether `usage` is below `quota` in a resource the quota names (one it does not name is
/// `u64::MAX`).
pub(super) fn below(usage: Res, quota: Res) -> bool {
    let lt = |u: u64, q: u64| q != u64::MAX && u < q;
    lt(usage.gpu, quota.gpu) || lt(usage.millicpu, quota.millicpu) || lt(usage.memory, quota.memory)
}

/// What the cycle has given away so far, and what it has learnt about it.
pub(super) struct State {
    /// Each node's free resources, less what was admitted or held this cycle. Only shrinks.
    pub(super) free: Vec<Res>,
    /// What each team holds, with what was admitted or held this cycle.
    pub(super) usage: Vec<Res>,
    /// Of that, what it holds in its quota pools: what counts against its quota.
    pub(super) quota_usage: Vec<Res>,
    /// Running steps already chosen as victims this cycle.
    pub(super) victims: BTreeSet<u64>,
    /// Per node, room those victims will free that no step of this cycle has taken yet.
    pub(super) pending: Vec<Res>,
    /// Whether any of `pending` is not zero.
    pub(super) pending_any: bool,
    /// Nodes reserved for a starving step: nothing else starts on them.
    pub(super) reserved: BTreeSet<usize>,
    /// Per team, what its steps chosen as victims hold: in all, and in its quota pools.
    pub(super) victim_held: Vec<(Res, Res)>,
    /// Per team, its running steps (indices into `running`) in the victim order.
    pub(super) by_team: Option<ByTeam>,
    /// Teams with running steps that hold more than their quota in their quota pools, or
    /// anything outside them, less their victims: the only teams `reclaim` takes from.
    pub(super) over: Option<BTreeSet<usize>>,
    /// Per team, the lowest priority among its running steps (`i64::MAX`: none), built on
    /// first need: a step above it has nothing of its team's to preempt, which is known
    /// without the victim order `index` sorts.
    lowest: Option<Vec<i64>>,
    /// The nodes each (interruptible, flavor) of the waiting steps may use.
    pub(super) allowed: Vec<(bool, Option<String>, Allowed)>,
    /// Bumped whenever the room some query sees may have grown (room held or released,
    /// a reservation lifted, a team newly above its quota): failures recorded before it no
    /// longer hold. Between bumps the room only shrinks, and placement is monotone in it,
    /// so a shape that did not fit still does not.
    pub(super) grow: u64,
    /// Bumped whenever `free` changes.
    pub(super) free_gen: u64,
    /// Shapes that did not fit, per query, with the `grow` they were found in.
    pub(super) failed: FxMap<(Query, Shape), u64>,
    /// Shapes that fit the free room with no node closed, with the `free_gen` they were found
    /// at (a fit holds only as long as the room does not shrink).
    pub(super) fits_open: FxMap<Shape, u64>,
    /// Per (per-worker resources, allowed nodes): the workers that fit in the free room, with
    /// the `free_gen` it was counted in.
    pub(super) room: FxMap<(Res, usize), (u64, u64)>,
    /// The last `why_not` reason per (team, shape), with the `free_gen` and team usage it was
    /// written for: the same inputs give the same words.
    pub(super) reasons: FxMap<(usize, Shape), (u64, Res, Arc<str>)>,
    /// The room `soon` (per closed or not) and the room of `Query::Reclaimable` (per closed
    /// or not and grace), with the `grow` and `free_gen` they were computed at.
    pub(super) rooms: FxMap<(Query, u64, u64), Rc<Vec<Res>>>,
    /// `why_not`'s words for a shape, with the `free_gen` they were written at.
    pub(super) shape_words: FxMap<Shape, (u64, String)>,
    /// `why_not`'s words for each team, with the usage they were written for.
    pub(super) team_words: Vec<Option<(Res, String)>>,
    /// With `explain` off: the one reason every waiting step is given.
    quiet: Option<Arc<str>>,
}

/// FxHash (as rustc uses): the memo keys are small integers, SipHash's cost showed.
#[derive(Default, Clone, Copy)]
pub(super) struct Fx(pub(super) u64);

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

pub(super) type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// Running steps (indices into `running`) per team, each team's in the victim order.
pub(super) struct ByTeam {
    pub(super) start: Vec<usize>,
    pub(super) idx: Vec<usize>,
}

impl ByTeam {
    pub(super) fn of(&self, t: usize) -> &[usize] {
        &self.idx[self.start[t]..self.start[t + 1]]
    }
}

/// What placement depends on in a job: per-worker resources, gang size, allowed nodes.
pub(super) type Shape = (Res, u32, usize);

/// A placement query whose failures are remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Query {
    /// The free room, with the reserved nodes closed or not.
    Visible(bool),
    /// The free room plus what victims will free (`soon`), closed or not.
    Soon(bool),
    /// `Soon` plus what every preemptible (at this grace) step of a team above its quota
    /// holds: if that does not do, no reclaim does. The last field: the team whose quota
    /// pools the room is limited to (`usize::MAX`: every pool).
    Reclaimable(bool, u64, usize),
}

impl State {
    pub(super) fn new(
        cluster: &Cluster,
        running: &[Running],
        waiting: &[Job],
        settings: &Settings,
    ) -> State {
        let mut allowed: Vec<(bool, Option<String>, Allowed)> = Vec::new();
        for j in waiting {
            if !allowed
                .iter()
                .any(|(i, f, _)| *i == j.interruptible && *f == j.flavor)
            {
                allowed.push((j.interruptible, j.flavor.clone(), Allowed::new(cluster, j)));
            }
        }
        State {
            free: free_of(cluster, running),
            usage: usage_of(cluster, running),
            quota_usage: quota_usage_of(cluster, running),
            victims: BTreeSet::new(),
            pending: vec![Res::ZERO; cluster.nodes.len()],
            pending_any: false,
            reserved: BTreeSet::new(),
            victim_held: Vec::new(),
            by_team: None,
            over: None,
            lowest: None,
            allowed,
            grow: 0,
            free_gen: 0,
            failed: FxMap::default(),
            fits_open: FxMap::default(),
            room: FxMap::default(),
            reasons: FxMap::default(),
            rooms: FxMap::default(),
            shape_words: FxMap::default(),
            team_words: Vec::new(),
            quiet: (!settings.explain).then(|| Arc::from("waiting")),
        }
    }

    /// A waiting step's reason: `words()`, or with `explain` off the one shared "waiting".
    pub(super) fn say(&self, words: impl FnOnce() -> String) -> Arc<str> {
        match &self.quiet {
            Some(quiet) => quiet.clone(),
            None => words().into(),
        }
    }

    /// Builds, on first need, the running steps per team in the victim order and the teams
    /// above their quota (a cycle whose steps all fit needs neither).
    pub(super) fn index(&mut self, cluster: &Cluster, running: &[Running]) {
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

    /// The lowest priority among team `t`'s running steps (`i64::MAX` when none runs).
    pub(super) fn lowest_priority(
        &mut self,
        cluster: &Cluster,
        running: &[Running],
        t: usize,
    ) -> i64 {
        let lowest = self.lowest.get_or_insert_with(|| {
            let mut lowest = vec![i64::MAX; cluster.teams.len()];
            for r in running {
                let l = &mut lowest[r.job.team];
                *l = (*l).min(r.job.priority);
            }
            lowest
        });
        lowest[t]
    }

    pub(super) fn teams(&self) -> &ByTeam {
        self.by_team.as_ref().expect("indexed")
    }

    pub(super) fn over(&self) -> &BTreeSet<usize> {
        self.over.as_ref().expect("indexed")
    }

    /// What team `t`'s steps chosen as victims hold: in all, and in its quota pools.
    pub(super) fn victim_held(&self, t: usize) -> (Res, Res) {
        self.victim_held.get(t).copied().unwrap_or_default()
    }

    /// What team `t` will hold once its victims have stopped: in all, and in its quota pools.
    pub(super) fn held(&self, t: usize) -> (Res, Res) {
        let (all, quota) = self.victim_held(t);
        (
            self.usage[t].saturating_sub(all),
            self.quota_usage[t].saturating_sub(quota),
        )
    }

    pub(super) fn grew(&mut self) {
        self.grow += 1;
    }

    pub(super) fn shape(&self, job: &Job) -> Shape {
        let a = self
            .allowed
            .iter()
            .position(|(i, f, _)| *i == job.interruptible && *f == job.flavor)
            .expect("every waiting step's nodes were listed");
        (job.per_worker, job.workers, a)
    }

    /// Whether team `t` is above its quota once its victims have stopped.
    /// `grown`: its usage grew (else its victims did).
    pub(super) fn refresh_over(&mut self, cluster: &Cluster, t: usize, grown: bool) {
        // Not indexed yet: nothing was reclaimed, nothing remembered about reclaiming.
        let (Some(by_team), Some(over)) = (&self.by_team, &mut self.over) else {
            return;
        };
        if by_team.of(t).is_empty() {
            return;
        }
        let (all, quota) = {
            let (a, q) = self.victim_held.get(t).copied().unwrap_or_default();
            (
                self.usage[t].saturating_sub(a),
                self.quota_usage[t].saturating_sub(q),
            )
        };
        // Borrowed: beyond its quota in its quota pools, or anything outside them.
        let outside =
            cluster.teams[t].quota_pools.is_some() && all.saturating_sub(quota) != Res::ZERO;
        if quota.fits_in(cluster.teams[t].quota) && !outside {
            over.remove(&t);
        } else {
            // Newly above its quota, or further above: more of its steps may be reclaimed.
            if over.insert(t) || grown {
                self.grew();
            }
        }
    }

    pub(super) fn known_to_fail(&self, q: Query, shape: Shape) -> bool {
        self.failed.get(&(q, shape)) == Some(&self.grow)
    }

    /// `placement::place` for `job` on `free`, remembering a failure as `q`'s.
    pub(super) fn place(
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
    pub(super) fn visible(&self, closed: bool) -> Vec<Res> {
        let mut visible = self.free.clone();
        if closed {
            for &n in &self.reserved {
                visible[n] = Res::ZERO;
            }
        }
        visible
    }

    /// `visible(true)`, computed once for as long as the room and the reservation stay as
    /// they are (a reservation lifted bumps `grow`).
    pub(super) fn visible_closed(&mut self) -> Rc<Vec<Res>> {
        let key = (Query::Visible(true), self.grow, self.free_gen);
        if let Some(room) = self.rooms.get(&key) {
            return room.clone();
        }
        let room = Rc::new(self.visible(true));
        self.rooms.retain(|k, _| k.1 == key.1 && k.2 == key.2);
        self.rooms.insert(key, room.clone());
        room
    }

    /// `soon`, computed once for as long as the room stays as it is.
    pub(super) fn soon_room(&mut self, closed: bool) -> Rc<Vec<Res>> {
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
    pub(super) fn soon(&self, closed: bool) -> Vec<Res> {
        let mut soon = self.visible(closed);
        for (n, room) in soon.iter_mut().enumerate() {
            if !(closed && self.reserved.contains(&n)) {
                *room += self.pending[n];
            }
        }
        soon
    }

    /// Whether `job` fits in the room `soon` (its placement failed on the visible room).
    pub(super) fn fits_soon(
        &mut self,
        job: &Job,
        shape: Shape,
        closed: bool,
        settings: &Settings,
    ) -> bool {
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

    pub(super) fn closed(&self, closed: bool) -> BTreeSet<usize> {
        if closed {
            self.reserved.clone()
        } else {
            BTreeSet::new()
        }
    }
}
