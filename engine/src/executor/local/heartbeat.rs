//! Heartbeats of local attempts: the runtime touches its attempt's `lock` every
//! `heartbeat_ms`, so the lock's age is how long the runtime has been silent. One silent past
//! the timeout hangs or lost its machine: it is fenced off (the `lost` file: a runtime that
//! wakes up again syncs no more checkpoints over the next attempt's) and its programs killed.

use std::path::Path;
use std::time::{Duration, SystemTime};

use sluice_runtime::contract;

/// How long the runtime of the attempt in `dir` has been silent (None: no lock to read).
pub fn silence(dir: &Path, now: SystemTime) -> Option<Duration> {
    let modified = std::fs::metadata(dir.join(contract::LOCK_FILE))
        .and_then(|m| m.modified())
        .ok()?;
    Some(now.duration_since(modified).unwrap_or_default())
}

/// Fences off the attempt in `dir` and kills the programs its runtime started.
pub fn fence(dir: &Path) {
    if let Err(e) = std::fs::write(dir.join(contract::LOST_FILE), b"") {
        tracing::warn!("cannot mark {} lost: {e}", dir.display());
    }
    super::probe::kill_programs(dir);
}

/// The reason a silent attempt is lost.
pub fn reason(quiet: Duration) -> String {
    format!(
        "no heartbeat for {} (its runtime hangs or its machine died)",
        crate::spec::units::format_duration(Duration::from_secs(quiet.as_secs().max(1)))
    )
}
