//! File moves the runtime makes: copies of files and folders, and atomic writes.

use std::io::Write;
use std::path::Path;

/// Copies a file or a folder (recursively) to `to`, creating parents.
pub fn copy_all(from: &Path, to: &Path) -> std::io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let meta = std::fs::metadata(from)?;
    if meta.is_dir() {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_all(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

/// Copies `from` to `to` so that `to` appears whole or not at all.
pub fn copy_atomically(from: &Path, to: &Path) -> std::io::Result<()> {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = to.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let _ = remove_all(&tmp);
    copy_all(from, &tmp)?;
    let _ = remove_all(to);
    std::fs::rename(&tmp, to)
}

fn remove_all(p: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` atomically and durably: a temporary file, fsync, rename, fsync
/// of the folder. A reader sees the old content or the new, never a part.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
