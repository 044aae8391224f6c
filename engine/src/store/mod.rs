//! The state store: runs, steps, attempts, events and the cache, in SQLite through sqlx.
//!
//! Every state change of a run is a transaction here before the engine acts on it. Starting an
//! attempt and reserving its CPU and memory are one `BEGIN IMMEDIATE` transaction, so every
//! `sluice` process sharing a home sees the same pool and none overcommits it. SQL is written
//! so that PostgreSQL also accepts it; queries are checked at run time (no compile-time macros).

mod engines;
mod housekeeping;
mod rows;
mod scheduling;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqlitePool as Pool};

pub use engines::Orphan;
pub use housekeeping::Marked;
pub use rows::{AttemptRow, Capacity, Change, Event, Holder, NewRun, RunRow, StepRow};
pub use scheduling::{Claim, Placed, Rate};

/// How long a command waits for a store another process holds before it gives up (exit 3).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../../../migrations/sqlite/0001_init.sql")),
    (
        2,
        include_str!("../../../migrations/sqlite/0002_cluster.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/sqlite/0003_engines.sql"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store cannot be used at all: unwritable home, corrupt file, busy past the timeout.
    #[error("{0}")]
    Unavailable(String),
    /// A run id or prefix that matches no run, or several.
    #[error("{0}")]
    NotFound(String),
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
}

impl Error {
    /// Whether this is the store failing (exit 3) rather than the request (exit 2).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_) | Error::Sql(_))
    }
}

/// The state store of one `$SLUICE_HOME`.
#[derive(Clone, Debug)]
pub struct Store {
    pool: Pool,
    pub home: PathBuf,
}

fn unavailable(home: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!("the state store in {} {what}: {e}", home.display()))
}

impl Store {
    /// Opens (creating if needed) the store under `home`, and brings its schema up to date.
    pub async fn open(home: &Path) -> Result<Store, Error> {
        std::fs::create_dir_all(home).map_err(|e| unavailable(home, "cannot be created", e))?;
        let probe = home.join(".write-test");
        std::fs::write(&probe, b"").map_err(|e| unavailable(home, "is not writable", e))?;
        let _ = std::fs::remove_file(&probe);
        let file = home.join("sluice.db");
        let options = SqliteConnectOptions::from_str("sqlite://")
            .map_err(|e| unavailable(home, "has a bad path", e))?
            .filename(&file)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        // Two `sluice` starting at once on a new home race to create the database and switch
        // it to WAL; SQLite answers the loser "locked" at once rather than through the busy
        // timeout, so opening is retried within that same timeout.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let store = loop {
            match Self::connect(home, options.clone()).await {
                Ok(store) => break store,
                Err(Error::Sql(e)) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(Error::Sql(e)) => return Err(describe(home, e)),
                Err(other) => return Err(other),
            }
        };
        Ok(store)
    }

    /// Opens the store under `home` if one exists there; never creates a home (commands that
    /// only read).
    pub async fn open_existing(home: &Path) -> Result<Option<Store>, Error> {
        if !home.join("sluice.db").is_file() {
            return Ok(None);
        }
        Self::open(home).await.map(Some)
    }

    async fn connect(home: &Path, options: SqliteConnectOptions) -> Result<Store, Error> {
        // The file is created by one connection of its own; the pool's connections never
        // create one: a home deleted under a running engine must not come back as an empty
        // database that the engine goes on writing into.
        if !home.join("sluice.db").is_file() {
            use sqlx::Connection;
            let first =
                sqlx::SqliteConnection::connect_with(&options.clone().create_if_missing(true))
                    .await?;
            first.close().await?;
        }
        let pool: SqlitePool = SqlitePoolOptions::new()
            .max_connections(4)
            .acquire_timeout(BUSY_TIMEOUT)
            .connect_with(options.create_if_missing(false))
            .await?;
        let store = Store {
            pool,
            home: home.to_owned(),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), Error> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at TEXT NOT NULL)")
            .execute(&mut *tx)
            .await?;
        let applied: Vec<i64> = sqlx::query("SELECT version FROM schema_migrations")
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| r.get::<i64, _>(0))
            .collect();
        for (version, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)")
                .bind(version)
                .bind(crate::time::now_rfc3339())
                .execute(&mut *tx)
                .await?;
        }
        if let Some(newest) = applied.iter().max() {
            let known = MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0);
            if *newest > known {
                return Err(Error::Unavailable(format!(
                    "the state store in {} was written by a newer sluice (schema {newest}, this one knows {known})",
                    self.home.display()
                )));
            }
        }
        tx.commit().await?;
        Ok(())
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// SQLite's "database is locked" (SQLITE_BUSY and its extended codes).
fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c == "5" || c.parse::<i64>().is_ok_and(|n| n & 0xff == 5)),
        _ => false,
    }
}

/// Turns a connection failure into words a user can act on.
fn describe(home: &Path, e: sqlx::Error) -> Error {
    let text = e.to_string();
    if text.contains("file is not a database") || text.contains("malformed") {
        Error::Unavailable(format!(
            "the state store {} is corrupt ({text}); move it aside to start afresh",
            home.join("sluice.db").display()
        ))
    } else if text.contains("locked")
        || text.contains("busy")
        || matches!(e, sqlx::Error::PoolTimedOut)
    {
        Error::Unavailable(format!(
            "the state store in {} stayed busy for more than {}s ({text})",
            home.display(),
            BUSY_TIMEOUT.as_secs()
        ))
    } else {
        unavailable(home, "cannot be opened", text)
    }
}
