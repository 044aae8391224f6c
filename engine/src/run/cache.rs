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

/// Hashes a file or a folder (names and contents, in name order) into `h`.
fn hash_path(h: &mut Sha256, path: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        h.update(b"dir\0");
        for e in entries {
            h.update(e.file_name().as_encoded_bytes());
            h.update(b"\0");
            hash_path(h, &e.path())?;
        }
    } else {
        h.update(b"file\0");
        let mut f = std::fs::File::open(path)?;
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
}

/// The cache key of an attempt about to run with `launch`. `key` is the rendered `cache.key`.
pub async fn key(
    objects: &Objects,
    step: &Step,
    launch: &Launch,
    key: Option<&str>,
    workdir: &Path,
) -> Result<String, NoKey> {
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
