//! Whether the engine driving a run is alive, as every `sluice` on the home judges it.
//!
//! An engine holds its run's lease (`PID@HOST`, renewed every few seconds, lasting
//! [`LEASE_MS`]). It is dead once the lease has run out, whatever its PID says: a PID can be
//! taken by another process, and a process stopped with Ctrl-Z or a machine that went away
//! renews nothing. On the engine's own host, death is seen sooner: no process with that PID,
//! a zombie (killed, not yet reaped by its parent), or a process that started at another time
//! than the engine did (its PID reused) is no engine.

use crate::store::Holder;

/// How long a lease lasts without renewal; the engine renews it every third of it.
pub const LEASE_MS: i64 = 15_000;

/// This process, as a lease holder until `until` (unix ms).
pub fn me(until: i64) -> Holder {
    process(std::process::id(), until)
}

/// Process `pid` of this host as a lease holder until `until` (an engine started in the
/// background holds its run from the moment it is spawned, not from when it gets going).
pub fn process(pid: u32, until: i64) -> Holder {
    Holder {
        owner: format!("{pid}@{}", host()),
        until,
        started: process_started(pid),
    }
}

/// The name of this machine in leases: `$SLUICE_ENGINE_HOST` if set (a container's or pod's
/// own name, when several share a host name), else the kernel's host name. Only on the same
/// host can a holder's PID be checked; elsewhere its lease alone tells.
fn host() -> String {
    if let Ok(h) = std::env::var("SLUICE_ENGINE_HOST")
        && !h.trim().is_empty()
    {
        return h.trim().to_owned();
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// Whether `holder` still drives its run at `now` (unix ms).
pub fn alive(holder: &Holder, now: i64) -> bool {
    if holder.until <= now {
        return false;
    }
    let Some((pid, holder_host)) = holder.owner.split_once('@') else {
        return false;
    };
    if holder_host != host() {
        // Another machine: only its lease can tell.
        return true;
    }
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    match Process::read(pid) {
        None => false,
        Some(p) if p.zombie => false,
        Some(p) => holder.started.is_none_or(|s| p.started == Some(s)),
    }
}

/// Why a `Running` run has no engine, in words (`its engine 123@host is gone`), or None
/// while one drives it (or the run has ended).
pub fn gone(run: &crate::store::RunRow) -> Option<String> {
    if run.state != crate::run::state::run::RUNNING {
        return None;
    }
    match run.holder() {
        Some(h) if alive(&h, crate::time::now_ms()) => None,
        Some(h) => Some(format!("its engine {} is gone", h.owner)),
        None => Some("no engine drives it".to_owned()),
    }
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`, field 22).
pub fn process_started(pid: u32) -> Option<i64> {
    Process::read(pid).and_then(|p| p.started)
}

/// What `/proc/PID/stat` says of a process.
struct Process {
    zombie: bool,
    started: Option<i64>,
}

impl Process {
    fn read(pid: u32) -> Option<Process> {
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => s,
            // No /proc (not Linux): ask the kernel whether the PID exists at all.
            Err(_) if !std::path::Path::new("/proc/self/stat").exists() => {
                let pid = i32::try_from(pid).ok()?;
                return nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                    .is_ok()
                    .then_some(Process {
                        zombie: false,
                        started: None,
                    });
            }
            Err(_) => return None,
        };
        // The command name is in parentheses and may hold spaces: fields count from after it.
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(Process {
            zombie: matches!(fields.first(), Some(&"Z" | &"X")),
            started: fields.get(19).and_then(|f| f.parse().ok()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> i64 {
        crate::time::now_ms()
    }

    #[test]
    fn this_process_is_alive_while_its_lease_runs() {
        let me = me(now() + LEASE_MS);
        assert!(alive(&me, now()));
    }

    #[test]
    fn an_expired_lease_is_a_dead_engine_even_if_its_process_runs() {
        let me = me(now() - 1);
        assert!(!alive(&me, now()));
    }

    #[test]
    fn a_reused_pid_is_not_the_engine() {
        let mut me = me(now() + LEASE_MS);
        me.started = me.started.map(|s| s + 1);
        if me.started.is_some() {
            assert!(!alive(&me, now()));
        }
    }

    #[test]
    fn a_zombie_is_not_an_engine() {
        let mut child = match std::process::Command::new("true").spawn() {
            Ok(c) => c,
            Err(_) => return,
        };
        let pid = child.id();
        // Not reaped: it stays a zombie until `wait`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while Process::read(pid).is_some_and(|p| !p.zombie) && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let holder = Holder {
            owner: format!("{pid}@{}", host()),
            until: now() + LEASE_MS,
            started: None,
        };
        assert!(!alive(&holder, now()));
        let _ = child.wait();
    }

    #[test]
    fn another_host_is_judged_by_its_lease() {
        let h = Holder {
            owner: "1@some-other-host-name".into(),
            until: now() + LEASE_MS,
            started: None,
        };
        assert!(alive(&h, now()));
    }
}
