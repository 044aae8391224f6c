//! Where the state store is: SQLite in the home (the default), a SQLite file elsewhere, or a
//! PostgreSQL database; and opening it, migrations included.
//!
//! The choice is made once per process: `--state URL` (or `$SLUICE_STATE`) wins; else the
//! store the home remembers (`state.url`, written when a run used a Cluster's `state:`, so
//! that `sluice status` on that home finds the run without repeating the URL); else
//! `sluice.db` in the home.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{AnyConnection, Connection, Executor};

use super::{BUSY_TIMEOUT, Dialect, Error, Store};

static SQLITE: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("../migrations/postgres");

/// The file in a home that remembers a store elsewhere (a URL, possibly with a password:
/// written readable by its owner only).
pub const REMEMBERED: &str = "state.url";

/// How long opening a PostgreSQL store waits for the server before saying it is unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (absolute).
    Sqlite(PathBuf),
    /// A PostgreSQL URL, as given.
    Postgres(String),
}

static CHOSEN: OnceLock<Location> = OnceLock::new();

/// Chooses the store for this process (`--state URL`; relative SQLite paths from the current
/// folder). The first choice stands.
pub fn choose(url: &str) -> Result<(), Error> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let location = Location::parse(url, &cwd)?;
    let _ = CHOSEN.set(location);
    Ok(())
}

/// What `--state` chose, if it was given.
pub fn chosen() -> Option<&'static Location> {
    CHOSEN.get()
}

/// The store of `home`: the chosen one, else the remembered one, else SQLite in the home.
pub(super) fn of_home(home: &Path) -> Result<Location, Error> {
    if let Some(chosen) = chosen() {
        return Ok(chosen.clone());
    }
    if let Some(remembered) = Location::remembered(home)? {
        return Ok(remembered);
    }
    Ok(Location::Sqlite(home.join("sluice.db")))
}

impl Location {
    /// Reads a `--state` URL or a Cluster's `state:`: `sqlite://PATH` (relative to `base`),
    /// `postgres://...` or `postgresql://...`.
    pub fn parse(url: &str, base: &Path) -> Result<Location, Error> {
        let url = url.trim();
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let path = path.split('?').next().unwrap_or(path);
            if path.is_empty() {
                return Err(Error::BadUrl(format!(
                    "state store '{url}' names no file; write sqlite://PATH, e.g. sqlite://.sluice/sluice.db"
                )));
            }
            return Ok(Location::Sqlite(base.join(path)));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Location::Postgres(url.to_owned()));
        }
        Err(Error::BadUrl(format!(
            "state store '{}' is not a URL sluice knows; expected sqlite://PATH or postgres://USER@HOST:PORT/DATABASE",
            hide_password(url)
        )))
    }

    /// The location as a URL `--state` reads (for an engine started in the background).
    pub fn url(&self) -> String {
        match self {
            Location::Sqlite(path) => format!("sqlite://{}", path.display()),
            Location::Postgres(url) => url.clone(),
        }
    }

    /// The location as messages show it: a path, or the URL with its password hidden.
    pub fn shown(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => hide_password(url),
        }
    }

    /// The store `home` remembers (`state.url`), if any.
    pub fn remembered(home: &Path) -> Result<Option<Location>, Error> {
        let file = home.join(REMEMBERED);
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let base = home.parent().unwrap_or(home);
                Location::parse(&text, base).map(Some)
            }
            // A home that does not exist (or cannot, a file standing where it must be) holds
            // nothing to remember; opening it says what is wrong.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(Error::Unavailable(format!(
                "cannot read {}: {e}",
                file.display()
            ))),
        }
    }

    /// Makes `home` remember this store, so that later commands on the home use it. SQLite in
    /// the home itself is the default and is not written down.
    pub fn remember(&self, home: &Path) -> Result<(), Error> {
        let file = home.join(REMEMBERED);
        if *self == Location::Sqlite(home.join("sluice.db")) {
            return Ok(());
        }
        let text = format!("{}\n", self.url());
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            super::create_private_dir(home)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&file)?;
            f.write_all(text.as_bytes())
        };
        write().map_err(|e| Error::Unavailable(format!("cannot write {}: {e}", file.display())))
    }

    /// Whether there is a store to read (a SQLite file is never created by a reader; a
    /// PostgreSQL database is asked).
    pub(super) fn exists(&self, _home: &Path) -> bool {
        match self {
            Location::Sqlite(file) => file.is_file(),
            Location::Postgres(_) => true,
        }
    }

    /// Opens the store, creating a SQLite file if needed, and migrates it; with `verify`, a
    /// SQLite file's pages are checked first, before anything writes to it.
    pub(super) async fn open(&self, home: &Path, verify: bool) -> Result<Store, Error> {
        sqlx::any::install_default_drivers();
        match self {
            Location::Sqlite(file) => open_sqlite(file, home, verify).await,
            Location::Postgres(url) => open_postgres(url, self.shown(), home).await,
        }
    }
}

/// `postgres://user:secret@host/db?password=secret` as `postgres://user:***@host/db?password=***`.
fn hide_password(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some(scheme_end) = shown.find("://") {
        let rest = &shown[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@')
            && let Some(colon) = rest[..at].find(':')
        {
            let start = scheme_end + 3 + colon + 1;
            let end = scheme_end + 3 + at;
            shown.replace_range(start..end, "***");
        }
    }
    if let Some(query) = shown.find('?') {
        let (head, tail) = shown.split_at(query + 1);
        let hidden: Vec<String> = tail
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        shown = format!("{head}{}", hidden.join("&"));
    }
    shown
}

fn unavailable(dir: &Path, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unavailable(format!("the state store in {} {what}: {e}", dir.display()))
}

/// A SQLite URL for `file` (`mode`: `rw` or `rwc`), its path percent-encoded.
pub(super) fn sqlite_url(file: &Path, mode: &str) -> String {
    let mut encoded = String::new();
    for c in file.display().to_string().chars() {
        match c {
            '%' | '?' | '#' | ' ' => encoded.push_str(&format!("%{:02X}", c as u32)),
            c => encoded.push(c),
        }
    }
    format!("sqlite://{encoded}?mode={mode}")
}

async fn open_sqlite(file: &Path, home: &Path, verify: bool) -> Result<Store, Error> {
    let dir = file.parent().unwrap_or(home);
    super::create_private_dir(dir).map_err(|e| unavailable(dir, "cannot be created", e))?;
    let probe = dir.join(".write-test");
    std::fs::write(&probe, b"").map_err(|e| unavailable(dir, "is not writable", e))?;
    let _ = std::fs::remove_file(&probe);
    // Creating the file, checking what is there and migrating take turns between the
    // `sluice` of one home (sqlx takes no lock on SQLite): a second one never sees the
    // first one's file half made.
    let _turn = take_turn(file).await?;
    // Two `sluice` starting at once on a new home race to switch it to WAL; SQLite answers
    // the loser "locked" at once rather than through the busy timeout, so opening is retried
    // within that same timeout.
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        match connect_sqlite(file, home, verify).await {
            Ok(store) => return Ok(store),
            Err(Error::Sql(e)) if is_busy(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(Error::Sql(e)) => return Err(describe(file, e)),
            Err(other) => return Err(other),
        }
    }
}

async fn connect_sqlite(file: &Path, home: &Path, verify: bool) -> Result<Store, Error> {
    // The file is created by one connection of its own; the pool's connections never create
    // one: a home deleted under a running engine must not come back as an empty database
    // that the engine goes on writing into.
    // That first connection also says what is wrong with a file that is there (corrupt,
    // locked): a pool only says it timed out.
    if let At::Nothing = what_is_at(file)? {
        create_initialized(file).await?;
    }
    let mut first = AnyConnection::connect(&sqlite_url(file, "rw")).await?;
    if verify {
        super::health::quick_check(&mut first, file).await?;
    }
    refuse_foreign(&mut first, file).await?;
    first.execute("PRAGMA journal_mode = WAL").await?;
    first.close().await?;
    let store = Store {
        pool: sqlite_pool(file).await?,
        dialect: Dialect::Sqlite,
        home: home.to_owned(),
        shown: file.display().to_string(),
        fence: None,
        file: Some(file.to_owned()),
        feed: std::sync::Arc::new(super::feed::Feed::new(Some(super::feed::Source::Sqlite(
            file.to_owned(),
        )))),
        room: std::sync::Arc::default(),
        leases: std::sync::Arc::default(),
        clock: crate::clock::system(),
    };
    migrate_sqlite(&store).await?;
    // A connection that read the schema before a migration changed it may prepare a
    // statement against the old columns (SQLite re-prepares at its first step, so the
    // column count sqlx read no longer holds): the pool that serves queries is opened after.
    store.pool.close().await;
    Ok(Store {
        pool: sqlite_pool(file).await?,
        ..store
    })
}

/// What a store's path holds before it is opened.
enum At {
    Nothing,
    Sqlite,
}

/// The first bytes of every SQLite database file.
const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Looks at what `file` holds without opening it as a database: nothing (a new store), a
/// SQLite file, or something that must not be opened as a store. An empty file is refused,
/// not made into a new store: it is a store that was truncated or never written, and
/// opening it would make every run and token of the home silently gone.
fn what_is_at(file: &Path) -> Result<At, Error> {
    use std::io::Read;
    let shown = file.display();
    let mut f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(At::Nothing),
        Err(e) => return Err(Error::Unavailable(format!("cannot open {shown}: {e}"))),
    };
    let mut head = [0u8; 16];
    let mut read = 0;
    while read < head.len() {
        match f.read(&mut head[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Unavailable(format!("cannot read {shown}: {e}"))),
        }
    }
    if read == 0 {
        return Err(Error::Unavailable(format!(
            "the state store {shown} is empty (0 bytes): it holds no runs and no tokens, and is not opened as a new store. \
             If it was truncated, restore it from a backup; to start a new, empty store, move it away first (mv {shown} {shown}.empty)"
        )));
    }
    if read < head.len() || &head != SQLITE_MAGIC {
        return Err(Error::Unavailable(format!(
            "the state store {shown} is not a SQLite database (it does not begin as one): it is refused rather than overwritten. \
             Point --state (or $SLUICE_HOME) at sluice's store, restore it from a backup, or move this file away to start a new store"
        )));
    }
    Ok(At::Sqlite)
}

/// Creates a new store at `file`, whole or not at all: made under another name (readable by
/// its owner only, switched to WAL), then renamed into place, so that an engine killed while
/// making it leaves no empty `sluice.db` (which would be refused) but at most a stray file of
/// its own name.
async fn create_initialized(file: &Path) -> Result<(), Error> {
    let mut name = file.as_os_str().to_owned();
    name.push(format!(".new-{}", std::process::id()));
    let fresh = PathBuf::from(name);
    let _ = std::fs::remove_file(&fresh);
    create_private(&fresh)?;
    let mut conn = AnyConnection::connect(&sqlite_url(&fresh, "rw")).await?;
    conn.execute("PRAGMA journal_mode = WAL").await?;
    conn.close().await?;
    for suffix in ["-wal", "-shm"] {
        let mut side = fresh.as_os_str().to_owned();
        side.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(side));
    }
    std::fs::rename(&fresh, file).map_err(|e| {
        let _ = std::fs::remove_file(&fresh);
        Error::Unavailable(format!(
            "cannot create the state store {}: {e}",
            file.display()
        ))
    })
}

/// Creates a new database file readable and writable by its owner only; SQLite gives its
/// `-wal` and `-shm` files the same mode.
fn create_private(file: &Path) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::Unavailable(format!(
            "cannot create the state store {}: {e}",
            file.display()
        ))),
    }
}

/// The pool of a SQLite store that exists: WAL, a busy timeout, foreign keys.
async fn sqlite_pool(file: &Path) -> Result<AnyPool, Error> {
    Ok(AnyPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(BUSY_TIMEOUT)
        .after_release(|conn, _| Box::pin(discard_if_in_transaction(conn)))
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute(
                    "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON",
                )
                .await?;
                Ok(())
            })
        })
        .connect(&sqlite_url(file, "rw"))
        .await?)
}

/// Migrates a SQLite store (its caller holds [`take_turn`]'s lock: sqlx takes none on SQLite,
/// so two `sluice` opening a new home at once would both apply the first migration).
async fn migrate_sqlite(store: &Store) -> Result<(), Error> {
    adopt_old_migrations(store).await?;
    run_migrator(store, &SQLITE).await
}

/// A connection handed back to the pool inside a transaction is closed, not kept: a COMMIT
/// that failed (a full disk: SQLite rolled back by itself) leaves sqlx counting a transaction
/// that no longer exists, and every later BEGIN on that connection would fail
/// ("begin_with at non-zero transaction depth"). The ping first lets a queued rollback run.
async fn discard_if_in_transaction(conn: &mut AnyConnection) -> Result<bool, sqlx::Error> {
    conn.ping().await?;
    Ok(!conn.is_in_transaction())
}

/// The lock that makes the `sluice` of one SQLite store take turns at creating, checking and
/// migrating it: an `flock` on a file beside the database, held until dropped.
async fn take_turn(file: &Path) -> Result<nix::fcntl::Flock<std::fs::File>, Error> {
    let lock_path = file.with_extension("db.migrate-lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::Unavailable(format!("cannot open {}: {e}", lock_path.display())))?;
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut file_to_lock = lock_file;
    loop {
        match nix::fcntl::Flock::lock(file_to_lock, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(held),
            Err((back, errno)) => {
                if Instant::now() >= deadline {
                    return Err(Error::Unavailable(format!(
                        "the state store {} stayed busy for more than {}s (another sluice is opening or migrating it: {errno})",
                        file.display(),
                        BUSY_TIMEOUT.as_secs()
                    )));
                }
                file_to_lock = back;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

async fn open_postgres(url: &str, shown: String, home: &Path) -> Result<Store, Error> {
    let unreachable = |e: &dyn std::fmt::Display| {
        Error::Unavailable(format!("the state store {shown} cannot be reached: {e}"))
    };
    // One connection first, for the real error: a pool says only that it timed out.
    match tokio::time::timeout(CONNECT_TIMEOUT, AnyConnection::connect(url)).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(e)) => return Err(unreachable(&e)),
        Err(_) => {
            return Err(unreachable(&format!(
                "no answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    }
    let pool = AnyPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(BUSY_TIMEOUT)
        .after_release(|conn, _| Box::pin(discard_if_in_transaction(conn)))
        .connect(url)
        .await
        .map_err(|e| unreachable(&e))?;
    let store = Store {
        pool,
        dialect: Dialect::Postgres,
        home: home.to_owned(),
        shown,
        fence: None,
        file: None,
        feed: std::sync::Arc::new(super::feed::Feed::new(Some(super::feed::Source::Postgres(
            url.to_owned(),
        )))),
        room: std::sync::Arc::default(),
        leases: std::sync::Arc::default(),
        clock: crate::clock::system(),
    };
    // sqlx's migrator takes a PostgreSQL advisory lock itself: servers starting at once take
    // turns.
    run_migrator(&store, &POSTGRES).await?;
    Ok(store)
}

async fn run_migrator(store: &Store, migrator: &Migrator) -> Result<(), Error> {
    match migrator.run(&store.pool).await {
        Ok(()) => Ok(()),
        Err(MigrateError::VersionMissing(version)) => {
            let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
            Err(Error::Unavailable(format!(
                "the state store {} was written by a newer sluice (schema {version}, this one knows {known})",
                store.shown
            )))
        }
        Err(MigrateError::Execute(e)) => Err(Error::Sql(e)),
        Err(e) => Err(Error::Unavailable(format!(
            "the state store {} cannot be migrated: {e}",
            store.shown
        ))),
    }
}

/// A SQLite database with tables but no migration record of sluice's is another program's:
/// refused, rather than given sluice's tables beside its own.
/// Asked before anything is written to the file (the switch to WAL changes its header).
async fn refuse_foreign(conn: &mut AnyConnection, file: &Path) -> Result<(), Error> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&mut *conn)
    .await?;
    let ours = ["_sqlx_migrations", "schema_migrations"];
    if tables.is_empty() || tables.iter().any(|t| ours.contains(&t.as_str())) {
        return Ok(());
    }
    let shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
    Err(Error::Unavailable(format!(
        "the state store {} is a SQLite database of another program (its tables: {}), not sluice's: it is refused rather than changed. \
         Point --state (or $SLUICE_HOME) at sluice's store, or move this file away to start a new store",
        file.display(),
        shown.join(", ")
    )))
}

/// Homes made before sqlx's migrator kept their applied versions in `schema_migrations`:
/// those versions are recorded where the migrator looks, so it applies only what is new.
async fn adopt_old_migrations(store: &Store) -> Result<(), Error> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('schema_migrations', '_sqlx_migrations')",
    )
    .fetch_all(&store.pool)
    .await?;
    if !tables.iter().any(|t| t == "schema_migrations")
        || tables.iter().any(|t| t == "_sqlx_migrations")
    {
        return Ok(());
    }
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&store.pool)
        .await?;
    let mut conn = store.pool.acquire().await?;
    conn.ensure_migrations_table("_sqlx_migrations")
        .await
        .map_err(|e| {
            Error::Unavailable(format!(
                "the state store {} cannot be migrated: {e}",
                store.shown
            ))
        })?;
    for m in SQLITE.iter().filter(|m| applied.contains(&m.version)) {
        sqlx::query("INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES ($1, $2, TRUE, $3, 0)")
            .bind(m.version)
            .bind(m.description.to_string())
            .bind(m.checksum.to_vec())
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
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

/// Turns a SQLite connection failure into words a user can act on.
fn describe(file: &Path, e: sqlx::Error) -> Error {
    let text = e.to_string();
    let dir = file.parent().unwrap_or(file);
    if text.contains("file is not a database") || text.contains("malformed") {
        super::health::damaged(&file.display().to_string(), &text)
    } else if text.contains("locked")
        || text.contains("busy")
        || matches!(e, sqlx::Error::PoolTimedOut)
    {
        Error::Unavailable(format!(
            "the state store in {} stayed busy for more than {}s ({text})",
            dir.display(),
            BUSY_TIMEOUT.as_secs()
        ))
    } else {
        unavailable(dir, "cannot be opened", text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_wherever_a_url_holds_one() {
        assert_eq!(
            hide_password("postgres://sluice:s3cret@db:5432/sluice"),
            "postgres://sluice:***@db:5432/sluice"
        );
        assert_eq!(
            hide_password("postgresql://db/sluice?user=a&password=s3cret&sslmode=require"),
            "postgresql://db/sluice?user=a&password=***&sslmode=require"
        );
        assert_eq!(
            hide_password("postgres://sluice@db/sluice"),
            "postgres://sluice@db/sluice"
        );
    }

    #[test]
    fn urls_are_read_or_refused_with_the_forms_that_work() {
        let base = Path::new("/repo");
        assert_eq!(
            Location::parse("sqlite://.sluice/sluice.db", base).ok(),
            Some(Location::Sqlite(PathBuf::from("/repo/.sluice/sluice.db")))
        );
        assert_eq!(
            Location::parse("sqlite:///var/sluice.db", base).ok(),
            Some(Location::Sqlite(PathBuf::from("/var/sluice.db")))
        );
        assert!(matches!(
            Location::parse("postgres://u@h/db", base),
            Ok(Location::Postgres(_))
        ));
        let Err(Error::BadUrl(text)) = Location::parse("mysql://u:pw@h/db", base) else {
            panic!("mysql is refused");
        };
        assert!(
            text.contains("postgres://") && !text.contains("pw"),
            "{text}"
        );
        assert!(Location::parse("sqlite://", base).is_err());
    }

    #[test]
    fn a_sqlite_url_survives_odd_characters_in_the_path() {
        assert_eq!(
            sqlite_url(Path::new("/tmp/a b?#%/sluice.db"), "rw"),
            "sqlite:///tmp/a%20b%3F%23%25/sluice.db?mode=rw"
        );
    }
}
