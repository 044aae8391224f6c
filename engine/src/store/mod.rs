//! The state store: runs, steps, attempts, events and the cache, in SQLite or PostgreSQL
//! through sqlx.
//!
//! Every state change of a run is a transaction here before the engine acts on it. The SQL
//! is written once, with `$N` placeholders that both SQLite and PostgreSQL read, and run
//! through sqlx's `Any` driver; the few places where the dialects differ are in [`Dialect`].
//!
//! Correctness does not rest on SQLite's single writer: every transaction that decides on
//! shared state (room on the machine or the cluster, a team's queue limit or trial rate, a
//! run's lease) takes an explicit [`Lock`] first. On SQLite that is `BEGIN IMMEDIATE` (the
//! database's write lock); on PostgreSQL a transaction-scoped advisory lock, because under
//! READ COMMITTED two transactions could otherwise both read the same free room and both
//! take it. `store::tests` runs every operation on both backends, races included.

mod applied;
mod engines;
pub mod feed;
mod health;
mod housekeeping;
mod idempotency;
mod leader;
mod leases;
mod load;
mod location;
mod read;
mod room;
mod rows;
mod runs;
mod scheduling;
#[cfg(test)]
mod tests;
mod tokens;
mod usage;

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::AnyPool;

pub use applied::{Applied, AppliedRow, FireRow, NewDocument};
pub use engines::Orphan;
pub use housekeeping::Marked;
pub use idempotency::{Key as IdempotencyKey, Recorded as IdempotentRun};
pub use leader::Leadership;
pub use leases::Kept;
pub use load::Load;
pub use location::{Location, choose, chosen};
pub use room::{Need, Ticket};
pub use rows::{AttemptRow, Capacity, Change, Event, EventKind, Holder, NewRun, RunRow, StepRow};
pub use runs::RunQuery;
pub use scheduling::{Claim, Placed, Rate};
pub use tokens::{AuditRow, TokenRow};
pub use usage::UsageRow;

/// How long a command waits for a store another process holds before it gives up (exit 3).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store cannot be used at all: unwritable home, corrupt file, busy past the timeout,
    /// a PostgreSQL server that does not answer.
    #[error("{0}")]
    Unavailable(String),
    /// A `--state` URL or a Cluster's `state:` that names no store sluice can use.
    #[error("{0}")]
    BadUrl(String),
    /// A run id or prefix that matches no run, or several.
    #[error("{0}")]
    NotFound(String),
    /// A stored value that cannot be what it should be (a column of the wrong type, a bad
    /// number): the row is named, nothing is guessed.
    #[error("the state store holds a bad value: {0}")]
    Corrupt(String),
    #[error("state store: {0}")]
    Sql(#[from] sqlx::Error),
    /// Submitting would take the team's queued steps past its `maxQueued`: nothing was written.
    #[error(
        "team {team} has {queued} steps queued; this run adds {adding}, over its maxQueued of {limit}"
    )]
    QueueFull {
        team: String,
        queued: u64,
        adding: u64,
        limit: u64,
    },
    /// A submission's `Idempotency-Key` was recorded by another submission meanwhile:
    /// nothing was written.
    #[error("this Idempotency-Key was just used by another submission")]
    KeyTaken,
    /// This process's engine was elected leader with an epoch that is no longer the store's:
    /// another server took over, and this one may not write as the leader any more.
    #[error("{0}")]
    Fenced(String),
}

impl Error {
    /// Whether this is the store failing (exit 3) rather than the request (exit 2).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_) | Error::Sql(_) | Error::Corrupt(_)
        )
    }
}

/// Which SQL dialect the store speaks, for the few statements that differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The column that orders rows as they were inserted: SQLite's `rowid`, PostgreSQL's
    /// identity column `seq` (migrations/postgres).
    pub fn insertion_order(self) -> &'static str {
        match self {
            Dialect::Sqlite => "rowid",
            Dialect::Postgres => "seq",
        }
    }
}

/// Creates `dir` and the folders above it that are missing, readable by their owner only (a
/// home holds every team's state, logs and outputs); folders that exist keep their mode.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// What a write transaction must hold before it reads what it decides on.
#[derive(Clone, Copy, Debug)]
pub enum Lock<'a> {
    /// Shared room: the machine's pool, the cluster's nodes, a team's queue and trial rate,
    /// and anything spanning several runs.
    Room,
    /// One run's rows (its lease, its steps, its deletion).
    Run(&'a str),
}

pub(crate) type Tx = sqlx::Transaction<'static, sqlx::Any>;

/// The state store a command uses.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    /// The home: attempts' folders and logs live under it whatever the store is.
    pub home: PathBuf,
    /// Where the store is, as messages show it (a PostgreSQL password hidden).
    shown: String,
    /// The leader's epoch this store writes under (a server's engine): every write
    /// transaction checks it first, and fails with `Fenced` once another server has taken
    /// over. None: no check (the embedded CLI, a server's API).
    fence: Option<i64>,
    /// The SQLite file, for the checks a server makes of it at start (`health`).
    file: Option<PathBuf>,
    /// This process's view of the store's changes (`feed`), shared by its clones.
    feed: std::sync::Arc<feed::Feed>,
    /// Who waits for the machine's pool (`room`), shared by its clones.
    room: std::sync::Arc<room::Room>,
    /// The leases this process renews (`leases`), shared by its clones.
    leases: std::sync::Arc<leases::Leases>,
    /// Where the times it writes come from: its caller's clock (`with_clock`), so that tests
    /// move time rather than sleep.
    clock: std::sync::Arc<dyn crate::clock::Clock>,
}

/// When a run's lease ends, as its engine last renewed it: the run's own `lease_until`, or
/// its engine process's (`engines`, joined as `e` by [`JOIN_ENGINE`]), whichever is later.
pub(super) const LEASE_UNTIL: &str =
    "CASE WHEN e.until > COALESCE(r.lease_until, 0) THEN e.until ELSE r.lease_until END";

/// Joins a run (`r`) with the engine process that holds it (`e`), for [`LEASE_UNTIL`].
pub(super) const JOIN_ENGINE: &str =
    "LEFT JOIN engines e ON e.owner = r.lease_owner AND e.started = r.lease_started";

/// A moment as the store writes it, from its clock: RFC 3339 text and unix milliseconds.
pub(crate) struct At {
    pub text: String,
    pub ms: i64,
}

impl Store {
    /// Opens (creating if needed) the store of `home`, and brings its schema up to date: the
    /// one `--state` chose, else the one the home remembers (a Cluster's `state:`), else
    /// SQLite in the home.
    pub async fn open(home: &Path) -> Result<Store, Error> {
        let location = location::of_home(home)?;
        // Attempts' folders and logs live in the home whatever the store is: the first
        // command that writes creates it.
        create_private_dir(home).map_err(|e| {
            Error::Unavailable(format!(
                "the state store in {} cannot be created: {e}",
                home.display()
            ))
        })?;
        location.open(home, false).await
    }

    /// [`Store::open`] for a server, which holds every team's state: a SQLite store's pages
    /// are checked before anything is written to it, and a damaged one is refused.
    pub async fn open_verified(home: &Path) -> Result<Store, Error> {
        let location = location::of_home(home)?;
        create_private_dir(home).map_err(|e| {
            Error::Unavailable(format!(
                "the state store in {} cannot be created: {e}",
                home.display()
            ))
        })?;
        location.open(home, true).await
    }

    /// Opens the store of `home` if one exists; never creates a home or a SQLite file
    /// (commands that only read).
    pub async fn open_existing(home: &Path) -> Result<Option<Store>, Error> {
        let location = location::of_home(home)?;
        if !location.exists(home) {
            return Ok(None);
        }
        location.open(home, false).await.map(Some)
    }

    /// This store, writing its times from `clock`.
    pub fn with_clock(&self, clock: std::sync::Arc<dyn crate::clock::Clock>) -> Store {
        Store {
            clock,
            ..self.clone()
        }
    }

    /// Now, by the store's clock.
    pub(crate) fn at(&self) -> At {
        let now = self.clock.now();
        At {
            text: crate::time::format(now),
            ms: now.timestamp_millis(),
        }
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Where the store is, for messages (a password hidden).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Begins a write transaction holding `lock` (see [`Lock`]).
    pub(crate) async fn write(&self, lock: Lock<'_>) -> Result<Tx, Error> {
        let mut tx = self.locked(lock).await?;
        if let Some(epoch) = self.fence {
            leader::check(&mut tx, self.dialect, epoch).await?;
        }
        Ok(tx)
    }

    async fn locked(&self, lock: Lock<'_>) -> Result<Tx, Error> {
        match self.dialect {
            Dialect::Sqlite => Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?),
            Dialect::Postgres => {
                let mut tx = self.pool.begin().await?;
                match lock {
                    Lock::Room => {
                        sqlx::query("SELECT pg_advisory_xact_lock(7301, 0)")
                            .execute(&mut *tx)
                            .await?;
                    }
                    Lock::Run(id) => {
                        sqlx::query("SELECT pg_advisory_xact_lock(7302, hashtext($1))")
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                Ok(tx)
            }
        }
    }
}
