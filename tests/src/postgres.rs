//! A PostgreSQL for the tests: the server `$SLUICE_TEST_POSTGRES` names (a URL whose user may
//! create databases; `.ci/run` starts one), else a throwaway server started here from
//! Debian's packages (initdb and pg_ctl), stopped when the test process ends.
//!
//! Each test gets a database of its own, so tests on one server never see each other's runs.
//! `SLUICE_TEST_STATE=postgres` makes the end-to-end sandboxes use PostgreSQL instead of
//! SQLite in the home (`.ci/run`'s second pass).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::wait::try_output;

/// Whether the end-to-end sandboxes should keep their state in PostgreSQL.
pub fn wanted() -> bool {
    std::env::var("SLUICE_TEST_STATE").is_ok_and(|v| v == "postgres")
}

/// The server's URL (no database), started once per test process if none is given.
pub fn server() -> Result<String, String> {
    static SERVER: OnceLock<Result<String, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| match std::env::var("SLUICE_TEST_POSTGRES") {
            Ok(url) if !url.is_empty() => Ok(url),
            _ => start_throwaway(),
        })
        .clone()
}

/// A new, empty database on the test server; its URL.
pub fn database(tag: &str) -> Result<String, String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let server = server()?;
    let name = format!(
        "sluice_{}_{}_{}",
        // PostgreSQL cuts names at 63 bytes: the tag is shortened, the pid and number kept.
        tag.chars()
            .take(32)
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect::<String>()
            .to_lowercase(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let out = try_output(
        Command::new("psql")
            .arg(&server)
            .args(["-v", "ON_ERROR_STOP=1", "-q", "-c"])
            .arg(format!("CREATE DATABASE {name}")),
    )
    .map_err(|e| format!("psql cannot run: {e} (install postgresql-client)"))?;
    if !out.status.success() {
        return Err(format!(
            "cannot create database {name} on {server}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(with_database(&server, &name))
}

/// `server` (postgres://user@host:port[/db][?query]) pointing at database `name`.
fn with_database(server: &str, name: &str) -> String {
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (server, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{name}?{q}"),
        None => format!("{base}/{name}"),
    }
}

/// The folder holding initdb and pg_ctl: Debian's newest PostgreSQL.
fn bin_dir() -> Result<PathBuf, String> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no PostgreSQL server installed (/usr/lib/postgresql: {e}); install postgresql, or set SLUICE_TEST_POSTGRES"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("pg_ctl").is_file())
        .collect();
    found.sort();
    found
        .pop()
        .ok_or_else(|| "no pg_ctl under /usr/lib/postgresql/*/bin".to_owned())
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Runs a PostgreSQL program, as the `postgres` user when this process is root (PostgreSQL
/// refuses to run as root).
fn as_postgres(program: &std::path::Path) -> Command {
    let root = nix_is_root();
    if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

fn nix_is_root() -> bool {
    try_output(Command::new("id").arg("-u"))
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn start_throwaway() -> Result<String, String> {
    let bin = bin_dir()?;
    let dir = std::env::temp_dir().join(format!("sluice-test-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    if nix_is_root() {
        let chown = try_output(Command::new("chown").arg("postgres:postgres").arg(&dir))
            .map_err(|e| e.to_string())?;
        if !chown.status.success() {
            return Err(format!("cannot chown {} to postgres", dir.display()));
        }
    }
    let data = dir.join("data");
    let init = try_output(as_postgres(&bin.join("initdb")).arg("-D").arg(&data).args([
        "-A",
        "trust",
        "-U",
        "postgres",
        "-E",
        "UTF8",
        "--no-sync",
    ]))
    .map_err(|e| format!("initdb cannot run: {e}"))?;
    if !init.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        ));
    }
    let port = free_port()?;
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400",
        dir.display()
    );
    let start = try_output(
        as_postgres(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("server.log"))
            .args(["-w", "-o", &options, "start"]),
    )
    .map_err(|e| format!("pg_ctl cannot run: {e}"))?;
    if !start.status.success() {
        return Err(format!(
            "PostgreSQL did not start: {}{}",
            String::from_utf8_lossy(&start.stdout),
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        ));
    }
    // A watchdog outside this process stops the server once the tests are gone (statics are
    // never dropped, and a killed test run must not leave a server behind).
    let stop = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {runas}{pg_ctl} -D {data} -m immediate -w stop >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        runas = if nix_is_root() {
            "runuser -u postgres -- "
        } else {
            ""
        },
        pg_ctl = bin.join("pg_ctl").display(),
        data = data.display(),
        dir = dir.display(),
    );
    // `setsid --fork` returns at once; the watchdog it leaves behind holds no pipe of ours.
    if let Ok(mut watchdog) = Command::new("setsid")
        .args(["--fork", "sh", "-c", &stop])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        crate::wait::status(&mut watchdog, "setsid --fork sh -c (the server's watchdog)");
    }
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_database_replaces_the_servers_own() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:1?sslmode=disable", "x"),
            "postgres://u@h:1/x?sslmode=disable"
        );
    }
}
