//! The process's scheduler: one scheduling cycle over the store's claims decides for every
//! run this process drives, and each run's driver takes its own [`Verdict`] from it.
//!
//! A driver in cluster mode hands the [`Scheduler`] its waiting claims ([`Scheduler::write`]:
//! its pending change committed, its waiting rows replaced and every run's claims read back,
//! in one transaction of the store, as before), then asks for its verdict
//! ([`Scheduler::decide`]). The scheduler keeps the newest claims any of its drivers read and
//! the last cycle's verdicts for every run, each stamped with a generation: the count of
//! writes this process made, in the store's commit order (writes take turns here, as they do
//! in the store's `Room` lock anyway, so they lose no concurrency). A driver whose write the
//! last cycle already saw takes its verdict from that cycle; otherwise it runs one cycle over
//! the newest claims, which holds every write made so far, its own and its neighbours'. So
//! drivers ticking together share one cycle, the way a group commit shares one flush: while
//! one cycle runs, the others' writes queue, and the next cycle decides for all of them.
//!
//! Why this design rather than a scheduler task woken by drivers and publishing verdicts on
//! a `watch` channel: it has no task to own, start, or shut down; a driver that acts on a
//! verdict is always one whose claims the cycle saw (never an older cycle's), which is what
//! today's per-driver cycle guaranteed; and a process driving one run (embedded `sluice run`)
//! cycles exactly as before, over what its own transaction read. Acting on a cycle that is
//! already stale is safe for the same reason it always was: the cycle is deterministic, and
//! `Store::start_placed` re-checks a step's nodes in the transaction that records it, so no
//! node is ever overcommitted, whichever process or cycle chose it. Several `sluice`
//! processes on one home (or one PostgreSQL) each run their own scheduler over the same rows.
//!
//! What is not shared: each driver's write still reads every run's claims back (its
//! transaction is the one that commits its pending change). One read per run and tick is
//! kept so as not to change the store; the cycle, the costly part, is what is shared.
//!
//! A run's Cluster is the one it was submitted with, and embedded runs may each name their
//! own file: [`Schedulers`] keeps one scheduler per Cluster (by the text the run stored), so
//! runs on the same Cluster share a scheduler and a run on another Cluster gets its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::cluster::{Scheduling, Verdict, Verdicts};
use crate::store::{self, Change, Claim, Store};

/// One Cluster's scheduler, shared by the drivers of this process whose runs use it.
pub struct Scheduler {
    scheduling: Scheduling,
    /// The generation of this process's last write, taken while writing so that generations
    /// follow the store's commit order.
    writes: tokio::sync::Mutex<u64>,
    /// The claims read by the newest write.
    latest: Mutex<Option<Arc<Snapshot>>>,
    /// The last cycle's verdicts and the generation of the claims it read.
    decided: tokio::sync::Mutex<Option<Decided>>,
    /// Cycles run so far (what tests count).
    cycles: AtomicU64,
    /// The drivers of this process whose runs wait here, each woken when its run's verdict
    /// changed (a new cycle decided otherwise for it): a run whose verdict holds costs
    /// nothing.
    subscribers: Mutex<HashMap<String, Weak<tokio::sync::Notify>>>,
    /// The count of attempts' ends (`Store::freed`) the last refresh was for.
    refreshed: tokio::sync::Mutex<u64>,
    /// The task that decides again every [`TICK`] while runs wait (time moves decisions:
    /// reservations, grace periods).
    ticking: std::sync::atomic::AtomicBool,
}

/// How often the scheduler decides again while runs wait, without news.
pub const TICK: std::time::Duration = std::time::Duration::from_secs(2);

/// Every run's claims as one transaction read them, at `now` (unix ms).
struct Snapshot {
    generation: u64,
    held: Vec<Claim>,
    waiting: Vec<Claim>,
    now: i64,
}

struct Decided {
    generation: u64,
    verdicts: Arc<Verdicts>,
}

/// What a driver's write left: what to ask [`Scheduler::decide`] for.
pub struct Written {
    run: String,
    snapshot: Arc<Snapshot>,
}

impl Scheduler {
    pub fn new(scheduling: Scheduling) -> Scheduler {
        Scheduler {
            scheduling,
            writes: tokio::sync::Mutex::new(0),
            latest: Mutex::new(None),
            decided: tokio::sync::Mutex::new(None),
            cycles: AtomicU64::new(0),
            subscribers: Mutex::default(),
            refreshed: tokio::sync::Mutex::new(0),
            ticking: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Run `run`'s notification of a changed verdict, for its driver (kept while it holds
    /// it); the scheduler decides again every [`TICK`] over `store`'s claims while any run
    /// is subscribed.
    pub fn subscribe(self: &Arc<Self>, run: &str, store: &Store) -> Arc<tokio::sync::Notify> {
        let notify = Arc::new(tokio::sync::Notify::new());
        {
            let mut s = self
                .subscribers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            s.retain(|_, w| w.strong_count() > 0);
            s.insert(run.to_owned(), Arc::downgrade(&notify));
        }
        if !self.ticking.swap(true, Ordering::SeqCst)
            && let Ok(h) = tokio::runtime::Handle::try_current()
        {
            h.spawn(Self::tick(Arc::downgrade(self), store.clone()));
        }
        notify
    }

    /// Decides again every [`TICK`] while a driver is subscribed; ends with the scheduler.
    async fn tick(me: Weak<Scheduler>, store: Store) {
        loop {
            tokio::time::sleep(TICK).await;
            let Some(s) = me.upgrade() else {
                return;
            };
            let anyone = s
                .subscribers
                .lock()
                .map(|subs| subs.values().any(|w| w.strong_count() > 0))
                .unwrap_or(false);
            if !anyone {
                s.ticking.store(false, Ordering::SeqCst);
                return;
            }
            if let Err(e) = s.decide_again(&store, store.at().ms).await {
                tracing::debug!("cannot decide again: {e}");
            }
        }
    }

    /// Wakes the subscribers whose run `after` decides otherwise than `before`.
    fn tell_changed(&self, before: Option<&Verdicts>, after: &Verdicts) {
        let s = self
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (run, notify) in s.iter() {
            let (old, new) = (before.and_then(|b| b.get(run)), after.get(run));
            if old != new
                && let Some(n) = notify.upgrade()
            {
                n.notify_one();
            }
        }
    }

    /// After attempts ended (`freed`, the count of ends `Store::freed` says), reads the
    /// claims again, writing nothing, and decides: one read and one cycle however many
    /// drivers wait (the first to ask does it; the others find it done).
    pub async fn refresh(&self, store: &Store, freed: u64, now: i64) -> Result<(), String> {
        let mut refreshed = self.refreshed.lock().await;
        if *refreshed >= freed {
            return Ok(());
        }
        *refreshed = freed;
        self.decide_again(store, now).await
    }

    /// Reads the claims again, writing nothing, decides, and tells the runs whose verdict
    /// changed.
    async fn decide_again(&self, store: &Store, now: i64) -> Result<(), String> {
        let (held, waiting) = store.read_claims(now).await.map_err(|e| e.to_string())?;
        let snapshot = {
            let generation = {
                let mut w = self.writes.lock().await;
                *w += 1;
                *w
            };
            let s = Arc::new(Snapshot {
                generation,
                held,
                waiting,
                now,
            });
            *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(s.clone());
            s
        };
        let mut decided = self.decided.lock().await;
        if decided
            .as_ref()
            .is_some_and(|d| d.generation >= snapshot.generation)
        {
            return Ok(());
        }
        let verdicts = Arc::new(self.cycle(&snapshot)?);
        self.tell_changed(decided.as_ref().map(|d| d.verdicts.as_ref()), &verdicts);
        *decided = Some(Decided {
            generation: snapshot.generation,
            verdicts,
        });
        Ok(())
    }

    /// The verdict for run `run` from the newest cycle, or a new cycle over the newest claims
    /// when none decided on them yet; None before any driver wrote.
    pub async fn decide_latest(&self, run: &str) -> Result<Option<Verdict>, String> {
        let newest = self
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(newest) = newest else {
            return Ok(None);
        };
        let written = Written {
            run: run.to_owned(),
            snapshot: newest,
        };
        self.decide(&written).await.map(Some)
    }

    /// The generation of the newest claims this scheduler knows.
    pub fn generation(&self) -> u64 {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(0, |s| s.generation)
    }

    /// The Cluster as the scheduler uses it: requests, placement, trial rates.
    pub fn scheduling(&self) -> &Scheduling {
        &self.scheduling
    }

    /// How many cycles this scheduler has run.
    pub fn cycles(&self) -> u64 {
        self.cycles.load(Ordering::Relaxed)
    }

    /// Commits `before` for run `run`, records `mine` (its queued steps, `(step, job)`) as
    /// waiting and reads every run's claims (`Store::claims`), at `now` (unix ms).
    pub async fn write(
        &self,
        store: &Store,
        run: &str,
        before: Change<'_>,
        mine: &[(String, String)],
        now: i64,
    ) -> Result<Written, store::Error> {
        let mut generation = self.writes.lock().await;
        let (held, waiting) = store.claims(run, before, mine, now).await?;
        *generation += 1;
        let snapshot = Arc::new(Snapshot {
            generation: *generation,
            held,
            waiting,
            now,
        });
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot.clone());
        Ok(Written {
            run: run.to_owned(),
            snapshot,
        })
    }

    /// The decisions for `written`'s run: from the last cycle if it saw that write, else from
    /// a new cycle over the newest claims. A run with nothing waiting gets an empty verdict.
    pub async fn decide(&self, written: &Written) -> Result<Verdict, String> {
        let verdicts = {
            let mut decided = self.decided.lock().await;
            match decided.as_ref() {
                Some(d) if d.generation >= written.snapshot.generation => d.verdicts.clone(),
                _ => {
                    let newest = self
                        .latest
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                        .unwrap_or_else(|| written.snapshot.clone());
                    let verdicts = Arc::new(self.cycle(&newest)?);
                    self.tell_changed(decided.as_ref().map(|d| d.verdicts.as_ref()), &verdicts);
                    *decided = Some(Decided {
                        generation: newest.generation,
                        verdicts: verdicts.clone(),
                    });
                    verdicts
                }
            }
        };
        if let Some(v) = verdicts.get(&written.run) {
            return Ok(v.clone());
        }
        // Another driver's read leaves out a run whose lease ran out; its own read keeps it
        // (as the store's query does for the run that asks), so it is decided on that.
        let own = &written.snapshot;
        if own.waiting.iter().any(|c| c.run_id == written.run) {
            let mut verdicts = self.cycle(own)?;
            return Ok(verdicts.remove(&written.run).unwrap_or_default());
        }
        Ok(Verdict::default())
    }

    /// [`Scheduler::write`], then [`Scheduler::decide`]: what a driver does each tick.
    pub async fn verdict(
        &self,
        store: &Store,
        run: &str,
        before: Change<'_>,
        mine: &[(String, String)],
        now: i64,
    ) -> Result<Result<Verdict, String>, store::Error> {
        let written = self.write(store, run, before, mine, now).await?;
        Ok(self.decide(&written).await)
    }

    fn cycle(&self, snapshot: &Snapshot) -> Result<Verdicts, String> {
        self.cycles.fetch_add(1, Ordering::Relaxed);
        self.scheduling
            .cycle(&snapshot.held, &snapshot.waiting, snapshot.now)
    }
}

/// The schedulers of this process over one store, one per Cluster its runs use.
#[derive(Default)]
pub struct Schedulers {
    by_cluster: Mutex<HashMap<String, Weak<Scheduler>>>,
}

impl Schedulers {
    /// The scheduler of the Cluster a run stored (`RunRow::cluster`), made at first use and
    /// kept while some driver holds it.
    pub fn of(&self, stored: &str) -> Result<Arc<Scheduler>, String> {
        let mut by_cluster = self
            .by_cluster
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = by_cluster.get(stored).and_then(Weak::upgrade) {
            return Ok(s);
        }
        let spec = super::cluster::of_run(stored)?;
        let scheduler = Arc::new(Scheduler::new(Scheduling::new(spec)));
        by_cluster.retain(|_, s| s.strong_count() > 0);
        by_cluster.insert(stored.to_owned(), Arc::downgrade(&scheduler));
        Ok(scheduler)
    }
}

/// Drivers on many tasks share a scheduler, and their futures stay `Send` while they wait on
/// it: checked when this compiles.
const _: () = {
    fn shared<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    #[allow(dead_code)]
    fn check(s: &Scheduler, store: &Store, written: &Written) {
        shared::<Scheduler>();
        shared::<Schedulers>();
        send(&s.verdict(store, "run", Change::default(), &[], 0));
        send(&s.decide(written));
    }
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::cluster::Ask;
    use crate::run::engine;
    use crate::store::{NewRun, StepRow};

    /// A virtual time (unix ms); the runs' leases are taken until a minute after it.
    const T0: i64 = 1_700_000_000_000;

    const LAB: &str = "apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 2
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision, quota: {gpu: 8}}
";

    fn stored() -> String {
        crate::run::cluster::stored("lab.yaml", LAB)
    }

    async fn home(tag: &str) -> (std::path::PathBuf, Store) {
        let home =
            std::env::temp_dir().join(format!("sluice-admission-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        let store = Store::open(&home).await.expect("a store");
        (home, store)
    }

    /// A running run `id` on the lab Cluster with queued steps `steps`, its lease held until
    /// `lease_until`.
    async fn run(store: &Store, id: &str, steps: &[&str], lease_until: i64) {
        let steps = steps
            .iter()
            .map(|s| StepRow {
                name: (*s).into(),
                step: (*s).into(),
                state: crate::run::state::StepState::Queued,
                ..StepRow::default()
            })
            .collect();
        let new = NewRun {
            id: id.into(),
            name: id.into(),
            team: "vision".into(),
            file: "p.yaml".into(),
            workdir: "/".into(),
            objects: "file:///nowhere".into(),
            source: String::new(),
            document: None,
            params: "{}".into(),
            cluster: Some(stored()),
            applied_version: None,
            schedule: None,
            steps,
        };
        store.create_run(&new, None).await.expect("create the run");
        let lease = store
            .take_lease(id, &engine::me(lease_until), |_| false, false)
            .await
            .expect("take the lease");
        assert!(lease.is_ok(), "the lease of {id}");
    }

    /// What a driver hands the scheduler for steps asking for a whole node (4 GPUs) each.
    fn mine(steps: &[&str]) -> Vec<(String, String)> {
        let ask = Ask {
            team: "vision".into(),
            priority: 100,
            workers: 1,
            gpu: 4,
            millicpu: 1000,
            memory: 0,
            interruptible: false,
            checkpointed: false,
            flavor: None,
            extended: Default::default(),
            timeout_ms: None,
            history_ms: None,
        };
        let json = serde_json::to_string(&ask).expect("an ask serializes");
        steps
            .iter()
            .map(|s| ((*s).to_owned(), json.clone()))
            .collect()
    }

    fn admitted(v: &Verdict) -> Vec<&str> {
        v.admit.iter().map(|(s, _)| s.as_str()).collect()
    }

    fn waiting(v: &Verdict) -> Vec<&str> {
        v.wait.iter().map(|(s, _)| s.as_str()).collect()
    }

    #[tokio::test]
    async fn one_cycle_decides_for_every_run_the_process_drives() {
        let (home, store) = home("one").await;
        run(&store, "ra", &["a"], T0 + 60_000).await;
        run(&store, "rb", &["b1", "b2"], T0 + 60_000).await;
        let schedulers = Schedulers::default();
        let scheduler = schedulers.of(&stored()).expect("the lab Cluster");
        // The two runs' drivers share their Cluster's scheduler.
        let again = schedulers.of(&stored()).expect("the lab Cluster");
        assert!(Arc::ptr_eq(&scheduler, &again));

        // Both drivers hand in their waiting steps, then both ask: one cycle for the two.
        let wa = scheduler
            .write(&store, "ra", Change::default(), &mine(&["a"]), T0)
            .await
            .expect("ra writes");
        let wb = scheduler
            .write(
                &store,
                "rb",
                Change::default(),
                &mine(&["b1", "b2"]),
                T0 + 1,
            )
            .await
            .expect("rb writes");
        let va = scheduler.decide(&wa).await.expect("ra's verdict");
        let vb = scheduler.decide(&wb).await.expect("rb's verdict");
        assert_eq!(scheduler.cycles(), 1, "one cycle for both runs");
        // Two nodes: the oldest waiting step of each run gets one, each run hears only of
        // its own steps, and the last one waits with a reason.
        assert_eq!(admitted(&va), ["a"], "{va:?}");
        assert!(va.wait.is_empty(), "{va:?}");
        assert_eq!(admitted(&vb), ["b1"], "{vb:?}");
        assert_eq!(waiting(&vb), ["b2"], "{vb:?}");
        assert!(vb.wait[0].1.starts_with("waiting"), "{vb:?}");
        assert_ne!(va.admit[0].1, vb.admit[0].1, "one node each");

        // A driver that writes again is never answered by the cycle before its write: `b1`
        // no longer waits (say it was cancelled), so `b2` takes its node.
        let wb = scheduler
            .write(&store, "rb", Change::default(), &mine(&["b2"]), T0 + 2)
            .await
            .expect("rb writes again");
        let vb = scheduler.decide(&wb).await.expect("rb's verdict");
        assert_eq!(scheduler.cycles(), 2);
        assert_eq!(admitted(&vb), ["b2"], "{vb:?}");
        assert!(vb.wait.is_empty(), "{vb:?}");
        let _ = std::fs::remove_dir_all(home);
    }

    #[tokio::test]
    async fn a_run_another_read_leaves_out_is_decided_on_its_own_read() {
        let (home, store) = home("own").await;
        // `stale`'s lease ran out before T0: `rb`'s read leaves its waiting step out.
        run(&store, "stale", &["s"], T0 - 1).await;
        run(&store, "rb", &["b"], T0 + 60_000).await;
        let scheduler = Schedulers::default()
            .of(&stored())
            .expect("the lab Cluster");
        let ws = scheduler
            .write(&store, "stale", Change::default(), &mine(&["s"]), T0)
            .await
            .expect("stale writes");
        let wb = scheduler
            .write(&store, "rb", Change::default(), &mine(&["b"]), T0 + 1)
            .await
            .expect("rb writes");
        let vb = scheduler.decide(&wb).await.expect("rb's verdict");
        assert_eq!(admitted(&vb), ["b"], "{vb:?}");
        let vs = scheduler.decide(&ws).await.expect("stale's verdict");
        assert_eq!(admitted(&vs), ["s"], "{vs:?}");
        let _ = std::fs::remove_dir_all(home);
    }

    #[tokio::test]
    async fn runs_on_different_clusters_have_different_schedulers() {
        let schedulers = Schedulers::default();
        let lab = schedulers.of(&stored()).expect("the lab Cluster");
        let other = crate::run::cluster::stored("other.yaml", &LAB.replace("nodes: 2", "nodes: 3"));
        let other = schedulers.of(&other).expect("another Cluster");
        assert!(!Arc::ptr_eq(&lab, &other));
        assert!(schedulers.of("{not json").is_err());
    }
}
