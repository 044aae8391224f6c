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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    use std::time::{Duration, Instant};

    use super::*;

    /// A fresh attempt folder, removed when dropped.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let p = std::env::temp_dir()
                .join(format!("sluice-probe-{tag}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&p).expect("attempt folder");
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn result(end: contract::End) -> contract::Result {
        contract::Result {
            end,
            exit_code: Some(0),
            signal: None,
            started_at: "2026-01-01T00:00:00Z".into(),
            ended_at: "2026-01-01T00:01:00Z".into(),
            reason: None,
            metrics: BTreeMap::from([("loss".to_owned(), 0.5)]),
        }
    }

    fn vanished(p: Probe) -> String {
        match p {
            Probe::Vanished(why) => why,
            Probe::Alive => panic!("alive, not vanished"),
            Probe::Ended(r) => panic!("ended ({r:?}), not vanished"),
        }
    }

    #[test]
    fn a_held_lock_is_a_live_runtime_whatever_else_the_folder_holds() {
        let dir = Dir::new("alive");
        let held = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.0.join(contract::LOCK_FILE))
            .expect("lock");
        held.try_lock().expect("the runtime's lock");
        assert!(matches!(probe(&dir.0).expect("probe"), Probe::Alive));
        // Even with a result written: the runtime lets go only after writing it.
        let bytes = serde_json::to_vec(&result(contract::End::Succeeded)).expect("encode");
        std::fs::write(dir.0.join(contract::RESULT_FILE), bytes).expect("result");
        assert!(matches!(probe(&dir.0).expect("probe"), Probe::Alive));
    }

    #[test]
    fn a_free_lock_with_a_result_is_an_attempt_that_ended() {
        let dir = Dir::new("ended");
        let r = result(contract::End::Timeout);
        let bytes = serde_json::to_vec(&r).expect("encode");
        std::fs::write(dir.0.join(contract::RESULT_FILE), bytes).expect("result");
        match probe(&dir.0).expect("probe") {
            Probe::Ended(got) => assert_eq!(*got, r),
            _ => panic!("an attempt with a result ended"),
        }
    }

    #[test]
    fn a_missing_folder_or_a_never_started_attempt_vanished_and_is_abandoned() {
        let dir = Dir::new("gone");
        let missing = dir.0.join("nothing-here");
        assert!(vanished(probe(&missing).expect("probe")).contains("is gone"));

        // An empty lock: the runtime never started the program. It is marked abandoned, so
        // that a runtime starting late does nothing.
        let why = vanished(probe(&dir.0).expect("probe"));
        assert_eq!(why, "the engine stopped before the attempt started");
        assert!(dir.0.join("abandoned").is_file());
    }

    #[test]
    fn a_runtime_that_died_has_its_program_killed_so_it_never_runs_beside_its_replacement() {
        let dir = Dir::new("died");
        let mut program = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep starts");
        let started = contract::Started {
            runtime_pid: 0,
            pid: program.id(),
            groups: vec![program.id()],
            started_at: "2026-01-01T00:00:00Z".into(),
        };
        std::fs::write(
            dir.0.join(contract::LOCK_FILE),
            serde_json::to_vec(&started).expect("encode"),
        )
        .expect("lock");
        let why = vanished(probe(&dir.0).expect("probe"));
        assert_eq!(why, "the runtime stopped without recording the end");
        // Bounded: the program is SIGKILLed at once, not left to run its 30 s.
        let until = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = program.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > until {
                let _ = program.kill();
                panic!("the dead runtime's program was not killed");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.signal(), Some(9));
    }
}
