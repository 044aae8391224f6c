//! Who waits for the machine's pool (the local executor's CPU, memory and GPUs), and which of
//! them may fit now. A driver whose step found no room takes a [`Ticket`] and sleeps; when an
//! attempt ends anywhere (the store's change feed says so, in this process at once), one
//! query reads what the pool holds and the waiters that fit, in the order they came, are
//! woken, each to try its start in the store's transaction (which decides). So a queue of
//! thousands of waiting runs costs one query per attempt's end, not one transaction per run
//! every 100 ms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::read::{Reader, column};
use super::{Capacity, Error, Store};

/// How often the waiters are looked at even without news (room freed by a process whose
/// change the feed cannot say, a notification lost).
pub const RECHECK: Duration = Duration::from_secs(5);

/// What a waiting step needs of the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub millicpu: i64,
    pub memory: i64,
    pub gpus: u32,
}

#[derive(Default)]
pub struct Room {
    waiters: Mutex<Waiters>,
    /// Wakes the room's task (a waiter came, or it is asked to look now).
    kick: Notify,
    started: AtomicBool,
    /// Whether this store's collector of dead engines' attempts was started (`run::reap`).
    collector: AtomicBool,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Waiters {
    next: u64,
    queue: BTreeMap<u64, Waiter>,
    capacity: Option<Capacity>,
}

struct Waiter {
    need: Need,
    ready: Arc<Notify>,
}

/// A place in the pool's queue, left when dropped.
pub struct Ticket {
    id: u64,
    room: Arc<Room>,
    /// Notified when the step may fit: try to start it.
    pub ready: Arc<Notify>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut w) = self.room.waiters.lock() {
            w.queue.remove(&self.id);
        }
    }
}

impl Store {
    /// Whether any step of this process waits in the pool's queue.
    pub fn anyone_waits_for_room(&self) -> bool {
        self.room
            .waiters
            .lock()
            .map(|w| !w.queue.is_empty())
            .unwrap_or(false)
    }

    /// True the first time it is asked for this store (and its clones): the caller starts the
    /// one task of this process that collects dead engines' attempts while steps wait.
    pub fn claim_collector(&self) -> bool {
        !self.room.collector.swap(true, Ordering::SeqCst)
    }

    /// Waits in the pool's queue for `need`, on a machine of `capacity`.
    pub fn wait_for_room(&self, capacity: &Capacity, need: Need) -> Ticket {
        let ready = Arc::new(Notify::new());
        let id = {
            let mut w = self
                .room
                .waiters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            w.capacity.get_or_insert_with(|| capacity.clone());
            let id = w.next;
            w.next += 1;
            w.queue.insert(
                id,
                Waiter {
                    need,
                    ready: ready.clone(),
                },
            );
            id
        };
        if !self.room.started.swap(true, Ordering::SeqCst) {
            let store = self.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn(store.watch_room());
                }
                Err(_) => self.room.started.store(false, Ordering::SeqCst),
            }
        }
        Ticket {
            id,
            room: self.room.clone(),
            ready,
        }
    }

    /// The room's task: on every end (or [`RECHECK`] while anyone waits), the waiters that
    /// fit are woken.
    async fn watch_room(self) {
        let mut freed = self.freed();
        loop {
            let waiting = self
                .room
                .waiters
                .lock()
                .map(|w| !w.queue.is_empty())
                .unwrap_or(false);
            if waiting {
                tokio::select! {
                    _ = freed.changed() => {}
                    () = self.room.kick.notified() => {}
                    () = tokio::time::sleep(RECHECK) => {}
                }
            } else {
                tokio::select! {
                    _ = freed.changed() => {}
                    () = self.room.kick.notified() => {}
                }
                continue;
            }
            if let Err(e) = self.wake_fitting().await {
                tracing::warn!("cannot read what the machine's pool holds: {e}");
            }
        }
    }

    /// Reads what the pool holds and wakes, in order, each waiter that fits what is left.
    async fn wake_fitting(&self) -> Result<(), Error> {
        let capacity = match self.room.waiters.lock() {
            Ok(w) if !w.queue.is_empty() => w.capacity.clone(),
            _ => None,
        };
        let Some(capacity) = capacity else {
            return Ok(());
        };
        let used = sqlx::query(
            "SELECT CAST(COALESCE(SUM(millicpu), 0) AS BIGINT), CAST(COALESCE(SUM(memory), 0) AS BIGINT), COUNT(*) FROM attempts WHERE state = 'Running' AND job IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let r = Reader::new(&used, "what the machine's pool holds");
        let (cpu, mem, running): (i64, i64, i64) = (r.at(0)?, r.at(1)?, r.at(2)?);
        let gpu_rows = sqlx::query(
            "SELECT gpus FROM attempts WHERE state = 'Running' AND gpus IS NOT NULL AND job IS NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        let held: usize = column::<String>(&gpu_rows, "the GPUs of a running attempt")?
            .iter()
            .map(|l| l.split(',').count())
            .sum();
        let mut left_cpu = capacity.millicpu - cpu;
        let mut left_mem = capacity.memory - mem;
        let mut left_gpus = capacity.gpus.len().saturating_sub(held);
        let mut nothing_runs = running == 0;
        let Ok(w) = self.room.waiters.lock() else {
            return Ok(());
        };
        for waiter in w.queue.values() {
            let n = waiter.need;
            let gpus = n.gpus as usize;
            // A step larger than the whole machine runs alone (as `start_attempt` allows).
            let fits = (n.millicpu <= left_cpu && n.memory <= left_mem && gpus <= left_gpus)
                || (nothing_runs && gpus <= left_gpus);
            if fits {
                waiter.ready.notify_one();
                left_cpu -= n.millicpu;
                left_mem -= n.memory;
                left_gpus -= gpus;
                nothing_runs = false;
            }
            if left_cpu <= 0 && left_gpus == 0 {
                break;
            }
        }
        Ok(())
    }
}
