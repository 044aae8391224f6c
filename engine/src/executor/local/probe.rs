//! What an attempt's folder says about its runtime, read by the local executor of the engine
//! driving the run and by any `sluice` that finds the run's engine gone (`run::reap`).
//!
//! The runtime holds an flock on the attempt's `lock` for the attempt's whole life and writes
//! `result.json` before letting go, so a free lock with a result is an attempt that ended, a
//! free lock with the runtime's `Started` record but no result is a runtime that died, and a
//! free empty lock is an attempt never started.

use std::path::Path;

use sluice_runtime::contract;

/// What an attempt's folder says about its runtime.
pub enum Probe {
    Alive,
    Ended(Box<contract::Result>),
    /// Gone without a result; the reason says how.
    Vanished(String),
}

/// Looks at an attempt's folder: a held lock means its runtime is alive.
pub fn probe(dir: &Path) -> std::io::Result<Probe> {
    if !dir.is_dir() {
        // No runtime can run an attempt without its folder (it holds launch.json).
        return Ok(Probe::Vanished(format!(
            "its folder {} is gone",
            dir.display()
        )));
    }
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(contract::LOCK_FILE))?;
    match lock.try_lock() {
        Err(std::fs::TryLockError::WouldBlock) => return Ok(Probe::Alive),
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
        Ok(()) => {}
    }
    // We hold the lock: no runtime runs here now, and none can start while we look.
    if let Some(result) = read_result(dir) {
        return Ok(Probe::Ended(Box::new(result)));
    }
    if let Ok(text) = std::fs::read(dir.join(contract::LOCK_FILE))
        && !text.is_empty()
    {
        // The runtime died (SIGKILL, OOM) but its program may live on in its own group: end
        // it, so that a lost attempt never runs beside the one that replaces it.
        kill_programs(dir);
        return Ok(Probe::Vanished(
            "the runtime stopped without recording the end".into(),
        ));
    }
    // Never started: make sure a runtime started late does nothing, then give it up.
    std::fs::write(dir.join("abandoned"), b"")?;
    Ok(Probe::Vanished(
        "the engine stopped before the attempt started".into(),
    ))
}

/// SIGKILL to every process group the attempt's runtime recorded starting.
pub fn kill_programs(dir: &Path) {
    let Ok(text) = std::fs::read(dir.join(contract::LOCK_FILE)) else {
        return;
    };
    let Ok(started) = serde_json::from_slice::<contract::Started>(&text) else {
        return;
    };
    let groups = if started.groups.is_empty() {
        vec![started.pid]
    } else {
        started.groups
    };
    for group in groups.into_iter().filter_map(|g| i32::try_from(g).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The result the runtime recorded in the folder, if it did (and it parses).
pub fn read_result(dir: &Path) -> Option<contract::Result> {
    let text = std::fs::read(dir.join(contract::RESULT_FILE)).ok()?;
    serde_json::from_slice(&text).ok()
}
