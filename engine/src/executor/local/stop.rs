//! Asking a local attempt to stop: the one place that writes an attempt's `terminate` file.
//!
//! The runtime checks for the file every 50 ms and stops the program (SIGTERM to its process
//! groups, the grace period, SIGKILL; the attempt ends `Terminated`). A file reaches a runtime
//! this engine started, one it reattached to, and one of another run or another engine alike,
//! which is why the driver, the scheduler's preemptions and `sluice preempt` all come here.

use std::path::Path;

use sluice_runtime::contract;

use crate::executor::{Error, Reason, io};

/// Asks the attempt in `dir` to stop for `reason` (written into the file, for whoever reads
/// it later). Asking again rewrites the same file.
pub fn ask(dir: &Path, reason: Reason) -> Result<(), Error> {
    let file = dir.join(contract::TERMINATE_FILE);
    let text: &[u8] = match reason {
        Reason::Cancel => b"cancel\n",
        Reason::Preempt => b"preempt\n",
        Reason::Timeout => b"timeout\n",
    };
    std::fs::write(&file, text).map_err(io(format!(
        "cannot ask the runtime to stop ({})",
        file.display()
    )))
}

/// Whether a stop was asked of the attempt in `dir`.
pub fn asked(dir: &Path) -> bool {
    std::fs::metadata(dir.join(contract::TERMINATE_FILE)).is_ok()
}
