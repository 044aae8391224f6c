//! Whether the store can be trusted and used: its integrity, checked when a server starts, its
//! files' modes, and a write that `/readyz` makes, so that a store that answers reads but
//! cannot take a write (a full disk, a file made read-only) is not called ready.

use std::os::unix::fs::PermissionsExt;

use sqlx::AnyConnection;

use super::{Error, Store};

/// How many of SQLite's findings a refusal quotes.
const FINDINGS_SHOWN: usize = 5;

impl Store {
    /// Makes the SQLite file and its `-wal` and `-shm` readable by their owner only, as new
    /// stores are created; a store made by an earlier version may be readable by anyone on
    /// the machine. Returns the files it changed.
    pub fn make_files_private(&self) -> Vec<std::path::PathBuf> {
        let Some(file) = &self.file else {
            return Vec::new();
        };
        let mut changed = Vec::new();
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            let path = std::path::PathBuf::from(path);
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0
                && std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700))
                    .is_ok()
            {
                changed.push(path);
            }
        }
        changed
    }

    /// Whether the disk holding the home (attempts' folders and logs, and a SQLite store) has
    /// room: an error saying how little is left when it has almost none. A write to SQLite
    /// may still succeed on a full disk (its WAL reuses space), while the attempts it would
    /// start cannot write a byte.
    pub fn check_room(&self) -> Result<(), Error> {
        let Ok(fs) = nix::sys::statvfs::statvfs(&self.home) else {
            return Ok(());
        };
        let block = fs.fragment_size().max(1);
        let free = fs.blocks_available() * block;
        let size = fs.blocks() * block;
        // At least a little room in absolute terms, a percent of a small disk.
        let needed = (size / 100).clamp(block, 16 * 1024 * 1024);
        if free >= needed {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "the disk holding {} is full ({free} bytes free of {size})",
            self.home.display()
        )))
    }

    /// Writes this server's row of `health` (`/readyz`): an error when the store cannot take
    /// a write now.
    pub async fn probe_write(&self, owner: &str, now: &str) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO health (owner, at) VALUES ($1, $2) ON CONFLICT (owner) DO UPDATE SET at = excluded.at",
        )
        .bind(owner)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// The refusal of a damaged SQLite store: what SQLite found, and the way out.
pub(super) fn damaged(file: &str, found: &str) -> Error {
    Error::Unavailable(format!(
        "the state store {file} is damaged ({found}): it is not served, since every request would fail on it. \
         Restore it from a backup; `sqlite3 {file} .recover` may save what is left of it; or move it away to start a new, empty store"
    ))
}

/// Checks that a SQLite store's pages hold together (`PRAGMA quick_check`, which reads every
/// page once), on the first connection of a server, before anything writes to the file: a
/// damaged store is refused with what SQLite found and the way out, rather than served while
/// every request fails on it.
pub(super) async fn quick_check(
    conn: &mut AnyConnection,
    file: &std::path::Path,
) -> Result<(), Error> {
    let shown = file.display().to_string();
    let findings: Vec<String> = sqlx::query_scalar("PRAGMA quick_check")
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| damaged(&shown, &e.to_string()))?;
    if findings.len() == 1 && findings[0] == "ok" {
        return Ok(());
    }
    let mut quoted: Vec<&str> = findings
        .iter()
        .take(FINDINGS_SHOWN)
        .map(String::as_str)
        .collect();
    let more = findings.len().saturating_sub(FINDINGS_SHOWN);
    let extra = format!("and {more} more");
    if more > 0 {
        quoted.push(&extra);
    }
    Err(damaged(&shown, &quoted.join("; ")))
}
