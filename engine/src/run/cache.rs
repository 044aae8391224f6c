//! Cache keys: what makes two attempts interchangeable.
//!
//! The key covers the rendered command, the environment, `SLUICE_PARAMS`, the image, the
//! resources' flavor, the content of every input artifact, the content of the files listed in
//! `cache.files`, and `cache.key`. A hit is used only if every output it recorded still exists.
//!
//! Inputs are hashed from the object store (names and bytes), so that the same artifact
//! produced by another run gives the same key.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};
use sluice_runtime::contract::Launch;
use sluice_runtime::objects::{self, Objects};

use crate::spec::model::Step;

/// Hashes a file or a folder (names and contents, in name order) into `h`. Only regular
/// files and folders are hashed: a device or a FIFO (which could be read forever, or block
/// the engine) is an error, as a folder that contains itself through a link is.
fn hash_path(h: &mut Sha256, path: &Path) -> std::io::Result<()> {
    hash_under(h, path, &mut Vec::new())
}

fn hash_under(h: &mut Sha256, path: &Path, above: &mut Vec<(u64, u64)>) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        let id = (meta.dev(), meta.ino());
        if above.contains(&id) {
            return Err(std::io::Error::other(format!(
                "{} is a folder inside itself (through a link)",
                path.display()
            )));
        }
        let mut entries: Vec<_> = std::fs::read_dir(path)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        h.update(b"dir\0");
        above.push(id);
        for e in entries {
            h.update(e.file_name().as_encoded_bytes());
            h.update(b"\0");
            hash_under(h, &e.path(), above)?;
        }
        above.pop();
    } else {
        let not_a_file =
            || std::io::Error::other(format!("{} is neither a file nor a folder", path.display()));
        if !meta.is_file() {
            return Err(not_a_file());
        }
        // Not blocking on what turned into a FIFO since; checked again once opened.
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)?;
        if !f.metadata()?.is_file() {
            return Err(not_a_file());
        }
        h.update(b"file\0");
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        h.update(b"\0");
    }
    Ok(())
}

/// Why there is no key: an input or a listed file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum NoKey {
    #[error(transparent)]
    Objects(#[from] objects::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The step may not have this key at all: it fails, saying why.
    #[error("{0}")]
    Refused(String),
}

/// Why a step of a run with no folder on this machine (a run on Kubernetes, whose steps'
/// files are in their images) cannot be cached as it says: it lists `cache.files`, which
/// would be read on the engine's machine. Refused when the run is submitted; this holds for
/// runs recorded before that.
pub fn refused(step: &Step, workdir: &Path) -> Option<String> {
    let (file, _) = step.cache.as_ref()?.files.first()?;
    workdir.as_os_str().is_empty().then(|| {
        format!(
            "cache.files: '{file}' cannot be hashed on Kubernetes: the step's files are in its image, and the engine reads no file of its own machine (say what should change the key in cache.key)"
        )
    })
}

/// The cache key of an attempt about to run with `launch`. `key` is the rendered `cache.key`;
/// `cache.files` are read under `workdir`, the run's folder (none on Kubernetes: refused).
pub async fn key(
    objects: &Objects,
    step: &Step,
    launch: &Launch,
    key: Option<&str>,
    workdir: &Path,
) -> Result<String, NoKey> {
    if let Some(why) = refused(step, workdir) {
        return Err(NoKey::Refused(why));
    }
    // Paths inside the attempt's own folder (placed inputs) differ every attempt; what they
    // hold is hashed below instead.
    let attempt = launch
        .output_dir
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let norm = |s: &str| {
        if attempt.is_empty() {
            s.to_owned()
        } else {
            s.replace(&attempt, "@attempt")
        }
    };
    let mut h = Sha256::new();
    let mut field = |name: &str, value: &[u8]| {
        h.update(name.as_bytes());
        h.update(b"=");
        h.update((value.len() as u64).to_le_bytes());
        h.update(value);
    };
    for a in &launch.argv {
        field("arg", norm(a).as_bytes());
    }
    for (k, v) in &launch.env {
        // Per-run and per-attempt values would make every key different.
        if matches!(
            k.as_str(),
            "SLUICE_RUN_ID"
                | "SLUICE_RUN_NAME"
                | "SLUICE_ATTEMPT"
                | "SLUICE_OUTPUT_DIR"
                | "SLUICE_CHECKPOINT_DIR"
                | "SLUICE_STEP"
        ) {
            continue;
        }
        field(k, norm(v).as_bytes());
    }
    field("image", step.image.as_deref().unwrap_or("").as_bytes());
    field(
        "flavor",
        step.resources.flavor.as_deref().unwrap_or("").as_bytes(),
    );
    field("outputs", step.outputs.join("\0").as_bytes());
    field("key", key.unwrap_or("").as_bytes());
    for input in &launch.inputs {
        h.update(b"input\0");
        objects
            .read_into(&input.key, &mut |bytes| h.update(bytes))
            .await?;
    }
    if let Some(cache) = &step.cache {
        for (f, _) in &cache.files {
            h.update(b"cache-file\0");
            h.update(f.as_bytes());
            hash_path(&mut h, &workdir.join(f))?;
        }
    }
    let digest = h.finalize();
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether a cached attempt's outputs (under the key `outputs`) still hold every output.
pub async fn outputs_exist(objects: &Objects, outputs: &str, names: &[String]) -> bool {
    for name in names {
        if !objects
            .exists(&format!("{outputs}/{name}"))
            .await
            .unwrap_or(false)
        {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(cache: &str) -> Step {
        let text = format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: p}}\nspec:\n  steps:\n    - {{name: a, run: 'true', cache: {cache}}}\n"
        );
        match crate::spec::load("p.yaml", text).documents.pop() {
            Some(crate::spec::model::Document::Pipeline(p)) => p.steps[0].clone(),
            other => panic!("not a pipeline: {other:?}"),
        }
    }

    #[test]
    fn a_run_without_a_folder_here_refuses_cache_files_and_only_them() {
        let files = step("{files: [../../../../etc/shadow]}");
        let why = refused(&files, Path::new("")).expect("refused");
        assert!(
            why.starts_with("cache.files: '../../../../etc/shadow' cannot be hashed on Kubernetes"),
            "{why}"
        );
        assert_eq!(refused(&files, Path::new("/work/project")), None);
        assert_eq!(refused(&step("{key: v1}"), Path::new("")), None);
        assert_eq!(refused(&step("true"), Path::new("")), None);
    }

    #[test]
    fn only_regular_files_and_folders_are_hashed() {
        let tmp = std::env::temp_dir().join(format!("sluice-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("data/sub")).expect("mkdir");
        std::fs::write(tmp.join("data/sub/a"), b"a").expect("write");
        std::os::unix::fs::symlink("..", tmp.join("data/sub/link")).expect("symlink");
        nix::unistd::mkfifo(&tmp.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let mut h = Sha256::new();
        // Not waited on: a FIFO is never opened.
        let e = hash_path(&mut h, &tmp.join("fifo")).expect_err("a FIFO");
        assert!(
            e.to_string().ends_with("is neither a file nor a folder"),
            "{e}"
        );
        let e = hash_path(&mut h, Path::new("/dev/zero")).expect_err("a device");
        assert!(e.to_string().contains("neither a file nor a folder"), "{e}");
        let e = hash_path(&mut h, &tmp.join("data")).expect_err("a loop");
        assert!(e.to_string().contains("a folder inside itself"), "{e}");
        std::fs::remove_file(tmp.join("data/sub/link")).expect("rm");
        hash_path(&mut h, &tmp.join("data")).expect("a folder");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
