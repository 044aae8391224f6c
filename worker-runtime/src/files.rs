//! The one file the runtime writes that a reader must never see half-written.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file, then a rename. A reader sees no file
/// or the whole file, never a part; that is what a process crash (the engine's or the
/// runtime's) requires.
///
/// There is deliberately no fsync: it cost a third of a no-op step's time here (0.6 ms of
/// 2.5 ms), and it would only matter after a power loss or kernel crash, where the state
/// database (SQLite in WAL mode with `synchronous=NORMAL`) may also lose its last commits.
/// In that case the engine finds a started attempt without a result, declares it lost and
/// runs it again: at-least-once after a machine crash, exactly-once after a process crash.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
    }
    std::fs::rename(&tmp, path)
}
