//! What changed, as the processes of one store tell each other, so that an engine's cost
//! follows what changes rather than what waits: nothing is polled per run.
//!
//! A change another process must act on (a cancel asked for, a run reopened or created, an
//! attempt's end that frees room) is written, in the transaction that makes it, as a row of
//! the `changes` table (an outbox: a sequence number, the run, the kind). Each process keeps
//! one watcher ([`Feed`]) that learns *that* something was committed and then reads *what*
//! from the outbox, past the last sequence it saw, in one query:
//!
//! - on SQLite, `PRAGMA data_version` on a connection of its own, which changes when any
//!   other connection commits, read every [`SQLITE_POLL`] (a constant cost per process);
//! - on PostgreSQL, `LISTEN sluice_changes`, which the writing transactions `NOTIFY`.
//!
//! Changes this process makes itself are dispatched at once, without waiting for the
//! watcher. A notification can be lost (PostgreSQL's connection dropped, a process stopped
//! past the outbox's memory): the process looks again every [`RESYNC`] in one query (and each
//! driver on a far longer timer of its own), so a lost notification delays it by at most that
//! period; and when the watcher knows it may have
//! missed something (the listener reconnected), it wakes every subscriber.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::{AnyConnection, Connection};
use tokio::sync::{Notify, watch};

use super::read::Reader;
use super::{Dialect, Error, Store, Tx};

/// How often a SQLite store's watcher asks whether another connection committed.
pub const SQLITE_POLL: Duration = Duration::from_millis(100);

/// How often the process looks, in one query, for the cancels of the runs it drives that a
/// lost notification may have kept from it: what bounds that delay, whatever the number of
/// runs (a query per run every 30 s was 333 queries a second at 10,000 waiting runs).
pub const RESYNC: Duration = Duration::from_secs(30);

/// How long the outbox keeps a change: far longer than any process takes to read it.
const KEPT_MS: i64 = 10 * 60 * 1000;

/// The PostgreSQL channel writers notify.
const CHANNEL: &str = "sluice_changes";

/// What a change is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A cancel was asked for: the run's engine acts on it.
    Cancel,
    /// A run is `Running` again (`retry`) or new (a submission): whoever drives runs adopts it.
    Reopened,
    Created,
    /// An attempt ended (its room is free again).
    Freed,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Cancel => "cancel",
            Kind::Reopened => "reopened",
            Kind::Created => "created",
            Kind::Freed => "freed",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Cancel, Kind::Reopened, Kind::Created, Kind::Freed]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Records `kind` for `run` in `tx`: the outbox row, and on PostgreSQL the notification
/// (sent when `tx` commits).
pub(super) async fn record(
    tx: &mut Tx,
    dialect: Dialect,
    kind: Kind,
    run: &str,
    at_ms: i64,
) -> Result<(), Error> {
    sqlx::query("INSERT INTO changes (run_id, kind, at) VALUES ($1, $2, $3)")
        .bind(run)
        .bind(kind.as_str())
        .bind(at_ms)
        .execute(&mut **tx)
        .await?;
    if dialect == Dialect::Postgres {
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(CHANNEL)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// A process's view of a store's changes: who to wake for what.
pub struct Feed {
    /// Each run's subscriber (its driver), woken by a cancel of that run.
    runs: Mutex<HashMap<String, Weak<Notify>>>,
    /// Counts attempts' ends seen anywhere (room may be free); a watch, so that none is
    /// missed by a subscriber busy when it came.
    freed: watch::Sender<u64>,
    /// Counts runs created or reopened (a server's adopting loop looks).
    adopt: watch::Sender<u64>,
    /// The watcher has been started.
    watching: std::sync::atomic::AtomicBool,
    /// Where to connect the watcher: the SQLite file, or the PostgreSQL URL (with its
    /// password: never shown).
    pub(super) source: Option<Source>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").finish_non_exhaustive()
    }
}

/// What a watcher connects to.
#[derive(Clone)]
pub(super) enum Source {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

impl Feed {
    pub(super) fn new(source: Option<Source>) -> Feed {
        Feed {
            runs: Mutex::default(),
            freed: watch::Sender::new(0),
            adopt: watch::Sender::new(0),
            watching: std::sync::atomic::AtomicBool::new(false),
            source,
        }
    }

    /// Dispatches a change: its run's subscriber, and those of its kind.
    pub(super) fn note(&self, kind: Kind, run: &str) {
        match kind {
            Kind::Cancel => {
                let subscriber = self
                    .runs
                    .lock()
                    .ok()
                    .and_then(|r| r.get(run).and_then(Weak::upgrade));
                if let Some(n) = subscriber {
                    n.notify_one();
                }
            }
            Kind::Reopened | Kind::Created => self.adopt.send_modify(|n| *n += 1),
            Kind::Freed => self.freed.send_modify(|n| *n += 1),
        }
    }

    /// Wakes every subscriber: something may have been missed.
    fn wake_all(&self) {
        if let Ok(runs) = self.runs.lock() {
            for n in runs.values().filter_map(Weak::upgrade) {
                n.notify_one();
            }
        }
        self.freed.send_modify(|n| *n += 1);
        self.adopt.send_modify(|n| *n += 1);
    }
}

impl Store {
    /// The notification of run `run`'s changes (a cancel asked for) for its driver, kept as
    /// long as the driver holds it.
    pub fn wake_of(&self, run: &str) -> Arc<Notify> {
        self.watch();
        let notify = Arc::new(Notify::new());
        if let Ok(mut runs) = self.feed.runs.lock() {
            runs.retain(|_, w| w.strong_count() > 0);
            runs.insert(run.to_owned(), Arc::downgrade(&notify));
        }
        notify
    }

    /// Changes whenever an attempt ends, in this process or another (room may be free).
    pub fn freed(&self) -> watch::Receiver<u64> {
        self.watch();
        self.feed.freed.subscribe()
    }

    /// Changes when a run is created or reopened, by another process or this one.
    pub fn adoptable(&self) -> watch::Receiver<u64> {
        self.watch();
        self.feed.adopt.subscribe()
    }

    /// Starts this process's watcher of the store's changes, once.
    fn watch(&self) {
        use std::sync::atomic::Ordering;
        if self.feed.source.is_none() || self.feed.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.feed.watching.store(false, Ordering::SeqCst);
            return;
        };
        handle.spawn(self.clone().resync());
        let store = self.clone();
        handle.spawn(async move {
            let last = store.last_change().await.unwrap_or(0);
            match store.feed.source.clone() {
                Some(Source::Sqlite(file)) => store.watch_sqlite(file, last).await,
                Some(Source::Postgres(url)) => store.watch_postgres(url, last).await,
                None => {}
            }
        });
    }

    /// Every [`RESYNC`], while any run of this process listens: the cancels asked of running
    /// runs, told to their drivers again (a driver acts on a cancel once).
    async fn resync(self) {
        loop {
            tokio::time::sleep(RESYNC).await;
            let listening = self
                .feed
                .runs
                .lock()
                .map(|r| r.values().any(|w| w.strong_count() > 0))
                .unwrap_or(false);
            if !listening {
                continue;
            }
            let rows = sqlx::query(
                "SELECT id FROM runs WHERE state = 'Running' AND cancel_requested <> 0",
            )
            .fetch_all(&self.pool)
            .await;
            match rows {
                Ok(rows) => {
                    for row in &rows {
                        match Reader::new(row, "a run asked to cancel").at::<String>(0) {
                            Ok(run) => self.feed.note(Kind::Cancel, &run),
                            Err(e) => tracing::debug!("{e}"),
                        }
                    }
                }
                Err(e) => tracing::debug!("cannot look for cancels: {e}"),
            }
        }
    }

    async fn last_change(&self) -> Result<i64, Error> {
        let row = sqlx::query("SELECT COALESCE(MAX(seq), 0) FROM changes")
            .fetch_one(&self.pool)
            .await?;
        Reader::new(&row, "the changes").at(0)
    }

    /// The changes past `last`, dispatched; the new last.
    async fn read_changes(&self, last: i64) -> Result<i64, Error> {
        let rows = sqlx::query("SELECT seq, run_id, kind FROM changes WHERE seq > $1 ORDER BY seq")
            .bind(last)
            .fetch_all(&self.pool)
            .await?;
        let mut seen = last;
        for row in &rows {
            let r = Reader::new(row, "a change");
            let seq: i64 = r.get("seq")?;
            let run: String = r.get("run_id")?;
            let kind: String = r.get("kind")?;
            if let Some(kind) = Kind::parse(&kind) {
                self.feed.note(kind, &run);
            }
            seen = seen.max(seq);
        }
        Ok(seen)
    }

    /// Forgets changes older than what any process still needs.
    async fn prune_changes(&self) -> Result<(), Error> {
        sqlx::query("DELETE FROM changes WHERE at < $1")
            .bind(self.at().ms - KEPT_MS)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn watch_sqlite(self, file: std::path::PathBuf, mut last: i64) {
        let url = super::location::sqlite_url(&file, "rw");
        let mut conn: Option<AnyConnection> = None;
        let mut version: Option<i64> = None;
        let mut pruned = std::time::Instant::now();
        loop {
            tokio::time::sleep(SQLITE_POLL).await;
            if conn.is_none() {
                conn = AnyConnection::connect(&url).await.ok();
            }
            let Some(c) = conn.as_mut() else {
                continue;
            };
            let now: Option<i64> = sqlx::query_scalar("PRAGMA data_version")
                .fetch_one(&mut *c)
                .await
                .ok();
            let Some(now) = now else {
                // The connection broke (the home went away): try a new one; whatever was
                // missed meanwhile is caught by the subscribers' own resyncs.
                conn = None;
                continue;
            };
            if version == Some(now) {
                continue;
            }
            version = Some(now);
            match self.read_changes(last).await {
                Ok(seen) => last = seen,
                Err(e) => tracing::debug!("cannot read the store's changes: {e}"),
            }
            // Another connection committed: whatever it was may have freed room.
            self.feed.freed.send_modify(|n| *n += 1);
            if pruned.elapsed() > Duration::from_secs(60) {
                pruned = std::time::Instant::now();
                let _ = self.prune_changes().await;
            }
        }
    }

    async fn watch_postgres(self, url: String, mut last: i64) {
        let mut pruned = std::time::Instant::now();
        loop {
            let mut listener = match sqlx::postgres::PgListener::connect(&url).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::debug!("cannot listen to the store's changes: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(e) = listener.listen(CHANNEL).await {
                tracing::debug!("cannot listen to the store's changes: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            // Listening again after a gap: what came meanwhile is read, and everyone looks.
            if let Ok(seen) = self.read_changes(last).await {
                last = seen;
            }
            self.feed.wake_all();
            // Until the connection is lost: then reconnect, and look at everything again.
            while let Ok(Some(_)) = listener.try_recv().await {
                match self.read_changes(last).await {
                    Ok(seen) => last = seen,
                    Err(e) => tracing::debug!("cannot read the store's changes: {e}"),
                }
                if pruned.elapsed() > Duration::from_secs(60) {
                    pruned = std::time::Instant::now();
                    let _ = self.prune_changes().await;
                }
            }
        }
    }
}
