//! The leases one process holds, renewed together: a run's lease names its engine process,
//! and that process renews its own row of `engines` every third of a lease, one statement
//! whatever the number of runs it drives, rather than one write per run. A driver takes its
//! run's lease itself (`take_lease`, which decides against a live holder) and then hands it
//! to this process's renewal ([`Store::keep_lease`]); a run whose lease was not renewed (it
//! was taken over: this process was stopped past its lease, or another server was elected)
//! is told so, and its driver stops.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::read::column;
use super::{Error, Holder, Lock, Store};

/// How long an engine's row is kept past its lease (a process long gone).
const FORGET_AFTER_MS: i64 = 24 * 3600 * 1000;

/// The runs this process renews the leases of, and the task that does.
#[derive(Default)]
pub struct Leases {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Inner {
    /// Each held run's "lost" notification.
    runs: HashMap<String, Arc<Notify>>,
    /// The renewing task, with the fence of the store it writes through.
    task: Option<(Option<i64>, tokio::task::JoinHandle<()>)>,
}

/// A run's lease in this process's renewal; dropped, it is renewed no more.
pub struct Kept {
    run: String,
    leases: Arc<Leases>,
    /// Notified when the lease was not renewed: another engine holds the run.
    pub lost: Arc<Notify>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Ok(mut i) = self.leases.inner.lock() {
            i.runs.remove(&self.run);
        }
    }
}

impl Store {
    /// Renews run `run`'s lease (already taken by `me`'s process) with the others this
    /// process holds, every `every`, until the returned guard is dropped.
    pub fn keep_lease(
        &self,
        run: &str,
        me: impl Fn(i64) -> Holder + Send + 'static,
        every: Duration,
    ) -> Kept {
        let lost = Arc::new(Notify::new());
        let mut i = self
            .leases
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        i.runs.insert(run.to_owned(), lost.clone());
        let running = i
            .task
            .as_ref()
            .is_some_and(|(fence, t)| *fence == self.fence && !t.is_finished());
        if !running && let Ok(h) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            i.task = Some((self.fence, h.spawn(store.renew(me, every))));
        }
        Kept {
            run: run.to_owned(),
            leases: self.leases.clone(),
            lost,
        }
    }

    async fn renew(self, me: impl Fn(i64) -> Holder, every: Duration) {
        // Runs this process holds without driving them, seen at the last renewal.
        let mut strays: HashSet<String> = HashSet::new();
        loop {
            tokio::time::sleep(every).await;
            let registered: HashSet<String> = match self.leases.inner.lock() {
                Ok(i) => i.runs.keys().cloned().collect(),
                Err(_) => return,
            };
            let holder = me(self.at().ms);
            let held = match self.renew_engine(&holder, registered.len()).await {
                Ok(held) => held,
                Err(Error::Fenced(_)) => {
                    // Another server leads: every run held through this store is lost.
                    if let Ok(i) = self.leases.inner.lock() {
                        for lost in i.runs.values() {
                            lost.notify_one();
                        }
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!("cannot renew the lease of this engine's runs: {e}");
                    continue;
                }
            };
            // As many runs held as driven (the usual case): nothing more to read.
            let Some(held) = held else {
                strays.clear();
                continue;
            };
            if let Ok(i) = self.leases.inner.lock() {
                for (run, lost) in &i.runs {
                    if registered.contains(run) && !held.contains(run) {
                        lost.notify_one();
                    }
                }
            }
            // A run held here but driven by nobody here (its driver stopped on an error) is
            // let go at its second renewal in that state (a driver that just took a lease
            // registers it within a renewal), for whoever drives runs to adopt.
            let now_strays: HashSet<String> = held.difference(&registered).cloned().collect();
            for run in now_strays.intersection(&strays) {
                match self.release_lease(run, &holder.owner).await {
                    Ok(()) => self.feed.note(super::feed::Kind::Reopened, run),
                    Err(e) => tracing::debug!("cannot let run {run}'s lease go: {e}"),
                }
            }
            strays = now_strays;
        }
    }

    /// Renews this engine process's own lease (its `engines` row: every run it holds lives
    /// by it), in one statement, and counts the running runs it holds, through an index.
    /// None when they are `driven` in number; else which they are.
    async fn renew_engine(
        &self,
        holder: &Holder,
        driven: usize,
    ) -> Result<Option<HashSet<String>>, Error> {
        let mut tx = self.write(Lock::Room).await?;
        sqlx::query(
            "INSERT INTO engines (owner, started, until) VALUES ($1, $2, $3) ON CONFLICT (owner) DO UPDATE SET started = excluded.started, until = excluded.until",
        )
        .bind(&holder.owner)
        .bind(holder.started)
        .bind(holder.until)
        .execute(&mut *tx)
        .await?;
        if holder.started.is_none() {
            // Without its start time a process cannot be told from a later one with its PID:
            // its runs' own leases are renewed instead (`engines` is joined on both).
            sqlx::query(
                "UPDATE runs SET lease_until = $1 WHERE lease_owner = $2 AND state = 'Running'",
            )
            .bind(holder.until)
            .bind(&holder.owner)
            .execute(&mut *tx)
            .await?;
        }
        // Engines long gone are forgotten (their runs' leases ran out with them).
        sqlx::query("DELETE FROM engines WHERE until < $1")
            .bind(holder.until - FORGET_AFTER_MS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs WHERE state = 'Running' AND lease_owner = $1 AND ($2 IS NULL OR lease_started = $3)",
        )
        .bind(&holder.owner)
        .bind(holder.started)
        .bind(holder.started)
        .fetch_one(&self.pool)
        .await?;
        if usize::try_from(count).is_ok_and(|c| c == driven) {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT id FROM runs WHERE state = 'Running' AND lease_owner = $1 AND ($2 IS NULL OR lease_started = $3)",
        )
        .bind(&holder.owner)
        .bind(holder.started)
        .bind(holder.started)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(
            column::<String>(&rows, "a run this engine holds")?
                .into_iter()
                .collect(),
        ))
    }
}
