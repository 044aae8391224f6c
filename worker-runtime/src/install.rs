//! `sluice-runtime install DEST`: copies the running binary to `DEST`.
//!
//! A pod's init container runs it from the runtime image (`/sluice-runtime install
//! /sluice-pod/bin/sluice-runtime`) to put the runtime on a volume shared with the step's
//! container, whose image is the user's: the runtime image needs no shell and no `cp`.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot find the running binary: {0}")]
    Exe(#[source] std::io::Error),
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Copies the running binary to `dest` (its folders created), mode 0755: written to a
/// temporary name in the same folder, then renamed, so that `dest` is never a partial file.
pub fn install(dest: &Path) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe().map_err(Error::Exe)?;
    copy(&exe, dest)?;
    Ok(exe)
}

fn copy(from: &Path, dest: &Path) -> Result<(), Error> {
    let err = |op, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { op, path, source }
    };
    let name = dest.file_name().ok_or_else(|| Error::Io {
        op: "install to",
        path: dest.to_owned(),
        source: std::io::Error::other("the destination names no file"),
    })?;
    let parent = dest.parent().unwrap_or(Path::new("."));
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    std::fs::create_dir_all(parent).map_err(err("create", parent))?;
    let tmp = parent.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut src = std::fs::File::open(from).map_err(err("read", from))?;
        let mut out = std::fs::File::create(&tmp).map_err(err("write", &tmp))?;
        std::io::copy(&mut src, &mut out).map_err(err("write", &tmp))?;
        out.flush().map_err(err("write", &tmp))?;
        out.sync_all().map_err(err("write", &tmp))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .map_err(err("set the mode of", &tmp))?;
        std::fs::rename(&tmp, dest).map_err(err("rename into", dest))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_a_file_to_new_folders_mode_0755_and_replaces_an_old_one() {
        let root = std::env::temp_dir().join(format!("sluice-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("mkdir");
        let from = root.join("from");
        std::fs::write(&from, b"binary").expect("write");
        let dest = root.join("a/b/sluice-runtime");
        copy(&from, &dest).expect("installed");
        std::fs::write(&from, b"binary 2").expect("write");
        copy(&from, &dest).expect("installed again");
        assert_eq!(std::fs::read(&dest).expect("read"), b"binary 2");
        let mode = std::fs::metadata(&dest).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        let left: Vec<_> = std::fs::read_dir(root.join("a/b"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
