//! The driver's loop: wait for an attempt's event, an interrupt or a timer; decide; commit;
//! then act. Also how a run ends: its final state, committed before the lease is let go.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{Driver, Ending, Error, Interrupt, Watcher, store_file_id};
use crate::executor::{Executor, Reason};
use crate::run::engine::{self, LEASE_MS};
use crate::run::state::run as rs;
use crate::run::transitions;
use crate::store::{Change, Event, EventKind};

/// How often a driver looks at its run's requests (a cancel), its deadline and its room even
/// without news: a last resort. Everything it learns when it happens: attempts' events from
/// its executor, a cancel from the store's change feed (which looks again for missed cancels
/// every `store::feed::RESYNC`, in one query for the whole process), room from the pool's
/// queue (`store::room`), a lost lease from the process's lease renewal (`store::leases`).
/// Long, as 10,000 waiting runs wake 33 times a second for it.
pub const RESYNC: Duration = Duration::from_secs(300);

/// What a cluster-mode driver waiting for room heard.
enum ClusterNews {
    /// An attempt ended somewhere (the count of ends so far).
    Freed(u64),
    /// The scheduler decided otherwise for this run.
    Verdict,
}

/// How long until unix time `at` (ms), from `now` (ms).
fn until(at: i64, now: i64) -> Duration {
    Duration::from_millis(u64::try_from(at.saturating_sub(now)).unwrap_or(0))
}

impl<E: Executor> Driver<E> {
    /// Drives the run to its end. `interrupts` delivers Ctrl-C presses (and their kin).
    pub async fn drive(
        mut self,
        watcher: &mut dyn Watcher,
        mut interrupts: Option<mpsc::UnboundedReceiver<Interrupt>>,
    ) -> Result<Ending, Error> {
        // What this run hears of: a cancel (another process's, or this one's service), ends
        // of attempts anywhere (room), its lease lost.
        let wake = self.store.wake_of(&self.run.id);
        let mut freed = self.store.freed();
        let kept = self.store.keep_lease(
            &self.run.id,
            |now| engine::me(now + LEASE_MS),
            Duration::from_millis((LEASE_MS / 3) as u64),
        );
        let mut ticket: Option<crate::store::Ticket> = None;
        // Cluster mode: told when this run's verdict changed.
        let verdicts = self
            .scheduler
            .as_ref()
            .map(|s| s.subscribe(&self.run.id, &self.store));
        let mut last_resync = Instant::now();
        let mut last_tick = Instant::now();
        // Whether this run collected dead engines' attempts when its step first found no
        // room (after that, the process's collector does it: `run::reap::keep_collecting`).
        let mut collected = false;
        let mut presses = 0;
        loop {
            // Nothing is decided or started over a home that is gone (one stat).
            self.check_home()?;
            Box::pin(self.advance(watcher)).await?;
            if let Some(end) = self.finished() {
                drop(kept);
                let state = end.0;
                Box::pin(self.end(end, watcher)).await?;
                return Ok(Ending::Ended(state));
            }
            let now = self.clock.now_ms();
            let mut wait = RESYNC.saturating_sub(last_resync.elapsed());
            if let Some(nb) = self.next_not_before() {
                wait = wait.min(until(nb, now));
            }
            let waiting = !self.queued.is_empty() && self.ready_queued();
            // The machine's pool: a place in its queue while a step found no room.
            match (&self.no_room, waiting) {
                (Some((_, need)), true) => {
                    if ticket.is_none() {
                        ticket = Some(self.store.wait_for_room(&self.capacity, *need));
                        crate::run::reap::keep_collecting(&self.store, self.clock.clone());
                    }
                    if !collected {
                        wait = Duration::ZERO;
                    }
                }
                _ => ticket = None,
            }
            let cluster_waiting = waiting && self.scheduler.is_some();
            if let Some(at) = self.rate_wake.filter(|&at| at > now) {
                // A trial held back by its team's rate limit starts on time, not a poll late.
                wait = wait.min(until(at, now));
            }
            if let Some(d) = self.deadline {
                wait = wait.min(until(d, now));
            }
            // Sweeps' early stopping reads running trials' curves; a cancel is told again to
            // what runs (a stop asked of an attempt not yet started).
            let ticking = !self.live.is_empty() && (self.cancelling || self.early_stopping());
            let tick = (self.settings.heartbeat_timeout / 4).min(Duration::from_secs(1));
            if ticking {
                wait = wait.min(tick.saturating_sub(last_tick.elapsed()));
            }
            // Nothing more to start now: what was decided is committed before waiting.
            Box::pin(self.flush()).await?;
            let interrupt = async {
                match interrupts.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            let room = async {
                match &ticket {
                    Some(t) => t.ready.notified().await,
                    None => std::future::pending().await,
                }
            };
            // In cluster mode: an attempt's end anywhere (the scheduler looks again, once for
            // every waiting run), or this run's verdict changed.
            let cluster_news = async {
                match (&verdicts, cluster_waiting) {
                    (Some(v), true) => tokio::select! {
                        _ = freed.changed() => ClusterNews::Freed(*freed.borrow_and_update()),
                        () = v.notified() => ClusterNews::Verdict,
                    },
                    _ => std::future::pending().await,
                }
            };
            let mut requested = false;
            tokio::select! {
                event = Box::pin(self.executor.next_event()) => {
                    // An attempt of this run ended: its room is the first free.
                    self.room_may_be_free = true;
                    Box::pin(self.on_event(event)).await?;
                }
                Some(kind) = interrupt => {
                    presses += match kind {
                        Interrupt::Press => 1,
                        Interrupt::Detach => 2,
                    };
                    if presses >= 2 {
                        Box::pin(self.executor.settle()).await;
                        Box::pin(self.flush()).await?;
                        drop(kept);
                        Box::pin(self.store.release_lease(&self.run.id, &self.owner)).await?;
                        watcher.note("second interrupt: leaving running steps to `sluice resume`");
                        return Ok(Ending::Detached);
                    }
                    watcher.note("cancelling: steps get SIGTERM (Ctrl-C again to leave them running)");
                    Box::pin(self.store.request_cancel(&self.run.id)).await?;
                    Box::pin(self.cancel(Reason::Cancel)).await;
                }
                () = wake.notified() => requested = true,
                () = room => self.room_may_be_free = true,
                news = cluster_news => match news {
                    ClusterNews::Verdict => self.verdict_news = true,
                    ClusterNews::Freed(count) => {
                        if let Some(s) = self.scheduler.clone()
                            && let Err(e) = Box::pin(s.refresh(&self.store, count, self.clock.now_ms())).await
                        {
                            tracing::warn!("cannot look at the cluster again: {e}");
                        }
                    }
                },
                () = kept.lost.notified() => {
                    Box::pin(self.executor.settle()).await;
                    Box::pin(self.flush()).await?;
                    let holder = Box::pin(self.store.run(&self.run.id)).await?.lease_owner;
                    return Ok(Ending::Busy(holder.unwrap_or_else(|| "another engine".into())));
                }
                // A timer this run asked for (a backoff, its trial rate, a resync): what it
                // waits for may be due, so it asks the scheduler again too.
                () = tokio::time::sleep(wait) => self.verdict_news = true,
            }
            if ticket.is_some() && !collected {
                // A step waits for room: room held by runs whose engine died is given back
                // now, not only at the collector's next round.
                collected = true;
                if let Err(e) = Box::pin(crate::run::reap::collect_now_and_then(
                    &self.store,
                    self.clock.as_ref(),
                ))
                .await
                {
                    tracing::warn!("cannot collect the attempts of runs whose engine is gone: {e}");
                }
            }
            if ticking && last_tick.elapsed() >= tick {
                last_tick = Instant::now();
                Box::pin(self.check_early_stops()).await?;
                if self.cancelling {
                    // What runs is told again (a stop asked of an attempt not yet started).
                    Box::pin(self.stop_live(Reason::Cancel)).await;
                }
            }
            let resync = last_resync.elapsed() >= RESYNC;
            if requested || resync {
                if resync {
                    // The pool's queue looks at its waiters on its own clock: a resync does
                    // not make every waiting run try its start.
                    last_resync = Instant::now();
                }
                if !self.cancelling && Box::pin(self.store.cancel_requested(&self.run.id)).await? {
                    watcher.note("the run was cancelled");
                    Box::pin(self.cancel(Reason::Cancel)).await;
                }
            }
            if let Some(d) = self.deadline
                && self.clock.now_ms() >= d
                && !self.cancelling
            {
                watcher.note("the run timed out");
                self.timed_out = true;
                Box::pin(self.cancel(Reason::Timeout)).await;
            }
        }
    }

    /// Fails when the home's state store is no longer the file this engine opened (the home
    /// was deleted or replaced): what the engine commits would be lost, so it stops its running
    /// steps (its executor halts them at once) and says so.
    pub(super) fn check_home(&mut self) -> Result<(), Error> {
        let now = store_file_id(&self.home);
        if self.store_file.is_none() || now == self.store_file {
            return Ok(());
        }
        self.executor.halt();
        Err(Error::HomeGone(format!(
            "the sluice home {} was removed or replaced while run {} was going: its state is gone, so the run cannot go on ({} running step(s) stopped)",
            self.home.display(),
            self.run.id,
            self.live.len()
        )))
    }

    fn next_not_before(&self) -> Option<i64> {
        if self.backing_off.is_empty() {
            return None;
        }
        self.backing_off
            .iter()
            .filter_map(|&i| self.rows[i].not_before)
            .min()
    }

    fn ready_queued(&self) -> bool {
        if self.backing_off.is_empty() {
            return !self.queued.is_empty();
        }
        let now = self.clock.now_ms();
        self.queued
            .iter()
            .any(|&i| self.rows[i].not_before.is_none_or(|nb| nb <= now))
    }

    /// Whether every step has ended and nothing runs: how the run ends.
    fn finished(&self) -> Option<(rs::RunState, Option<String>)> {
        if !self.live.is_empty() || self.open_all > 0 {
            return None;
        }
        let steps = self.rows.iter().map(|r| transitions::Finished {
            name: &r.name,
            state: r.state,
            reason: r.reason.as_deref(),
            trial: self.is_trial(r),
            on_exit: self.is_on_exit(r),
        });
        Some(transitions::run_end(
            steps,
            self.timed_out,
            self.cancelling,
            self.pipeline.from_sweep,
        ))
    }

    async fn end(
        &mut self,
        (state, reason): (rs::RunState, Option<String>),
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        // The run's logs are all in the object store before it is said to have ended.
        self.executor.settle().await;
        self.check_home()?;
        self.commit(Change {
            run_end: Some((state, reason)),
            events: vec![Event {
                step: None,
                kind: EventKind::Ended,
                detail: Some(state.into()),
            }],
            ..Change::default()
        })
        .await?;
        self.store.release_lease(&self.run.id, &self.owner).await?;
        watcher.note(&format!("run {} {state}", self.run.id));
        Ok(())
    }

    /// Stops the run: nothing new starts; running attempts are asked to stop (SIGTERM, the
    /// grace period, SIGKILL); onExit steps still run.
    async fn cancel(&mut self, reason: Reason) {
        if self.cancelling && self.live.is_empty() {
            return;
        }
        self.cancelling = true;
        self.stop_live(reason).await;
    }
}

/// A driver's future is `Send`, so that one process (the server) can drive many runs on
/// tokio's worker threads: checked when this compiles.
const _: () = {
    fn send<T: Send>(_: &T) {}
    #[allow(dead_code)]
    fn check(driver: Driver, watcher: &mut dyn Watcher) {
        send(&driver.drive(watcher, None));
    }
};

/// A server holds one driver future for each run it drives, waiting ones included: what each
/// awaits besides its wait is boxed, so that the future is its wait's size, not its largest
/// step's (16,672 bytes before: 159 MiB at 10,000 waiting runs).
#[cfg(test)]
mod size {
    use super::*;

    fn future_size<F: std::future::Future>(
        _: impl FnOnce(
            Driver,
            &'static mut dyn Watcher,
            Option<mpsc::UnboundedReceiver<Interrupt>>,
        ) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_waiting_runs_driver_future_stays_small() {
        let driver = std::mem::size_of::<Driver>();
        let drive = future_size(Driver::drive);
        eprintln!("a driver: {driver} bytes; its drive future: {drive} bytes");
        assert!(drive <= 8 * 1024, "the drive future is {drive} bytes");
        assert!(driver <= 4 * 1024, "a driver is {driver} bytes");
    }
}
