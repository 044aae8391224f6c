//! Checkpoints: `$SLUICE_CHECKPOINT_DIR` synced to the object store while the program runs,
//! and restored before the next attempt starts.
//!
//! Layout, under a step's prefix `teams/TEAM/checkpoints/RUN/STEP/`:
//!
//! ```text
//! SEQ/data/PATH        files uploaded by checkpoint SEQ (zero-padded, so names sort by SEQ)
//! SEQ/MANIFEST.json    written last: every file of the checkpoint and the key holding it
//! ```
//!
//! A checkpoint exists once its manifest does, so a sync cut off half-way (the runtime killed
//! during an upload) is never restored: restore takes the newest manifest that reads whole.
//! A file unchanged since the previous checkpoint is not uploaded again: the new manifest
//! points at the key that already holds it. Older checkpoints are pruned once a newer one is
//! complete, keeping the newest `keep`; their data is deleted unless a kept manifest still
//! points at it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::objects::{Error, Objects};

const MANIFEST: &str = "MANIFEST.json";

/// One complete checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub seq: u64,
    /// RFC 3339.
    pub created_at: String,
    /// By path relative to the checkpoint folder.
    pub files: BTreeMap<String, FileEntry>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub size: u64,
    pub sha256: String,
    /// The object holding the bytes, relative to the step's prefix (`SEQ/data/PATH`).
    pub key: String,
}

/// The checkpoints of one step.
pub struct Checkpoints {
    objects: Objects,
    prefix: String,
    keep: usize,
    /// The newest complete checkpoint, as restored or last synced.
    last: Option<Manifest>,
    /// The next sequence number: above every checkpoint seen, complete or not.
    next: u64,
    /// What each local file was at the last look, and its hash, so that unchanged files are
    /// not read again.
    seen: HashMap<String, (Stamp, String)>,
}

impl Checkpoints {
    /// Looks the step's checkpoints up (under `prefix` in `objects`).
    pub async fn open(objects: Objects, prefix: &str, keep: usize) -> Result<Self, Error> {
        let mut c = Checkpoints {
            objects,
            prefix: prefix.trim_end_matches('/').to_owned(),
            keep: keep.max(1),
            last: None,
            next: 1,
            seen: HashMap::new(),
        };
        let (seqs, complete) = c.scan().await?;
        c.next = seqs.iter().max().map_or(1, |m| m + 1);
        for seq in complete.iter().rev() {
            if let Some(m) = c.manifest(*seq).await? {
                c.last = Some(m);
                break;
            }
        }
        Ok(c)
    }

    /// The newest complete checkpoint, if any.
    pub fn latest(&self) -> Option<&Manifest> {
        self.last.as_ref()
    }

    /// Every sequence number with any object, and those with a manifest (both sorted).
    async fn scan(&self) -> Result<(BTreeSet<u64>, Vec<u64>), Error> {
        let mut seqs = BTreeSet::new();
        let mut complete = Vec::new();
        for name in self.objects.list_under(&self.prefix).await? {
            let Some((seq, rest)) = name.split_once('/') else {
                continue;
            };
            let Ok(seq) = seq.parse::<u64>() else {
                continue;
            };
            seqs.insert(seq);
            if rest == MANIFEST {
                complete.push(seq);
            }
        }
        complete.sort_unstable();
        Ok((seqs, complete))
    }

    async fn manifest(&self, seq: u64) -> Result<Option<Manifest>, Error> {
        let key = format!("{}/{}/{MANIFEST}", self.prefix, seq_name(seq));
        Ok(self
            .objects
            .get_bytes(&key)
            .await?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }

    /// Fills `dir` (emptied first) with the newest complete checkpoint. Returns its sequence
    /// number, or None when there is none (the folder is then empty).
    pub async fn restore(&mut self, dir: &Path) -> Result<Option<u64>, Error> {
        let local = |op, path: &Path| {
            let path = path.to_owned();
            move |source| Error::Local { op, path, source }
        };
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(local("empty", dir))?;
        }
        std::fs::create_dir_all(dir).map_err(local("create", dir))?;
        let Some(m) = self.last.clone() else {
            return Ok(None);
        };
        for (path, entry) in &m.files {
            let to = dir.join(path);
            self.objects
                .get_to(&format!("{}/{}", self.prefix, entry.key), &to)
                .await?;
            if let Ok(meta) = std::fs::metadata(&to) {
                self.seen
                    .insert(path.clone(), (Stamp::of(&meta), entry.sha256.clone()));
            }
        }
        Ok(Some(m.seq))
    }

    /// Uploads what changed in `dir` since the last checkpoint as a new one, manifest last,
    /// then prunes. Returns the new sequence number, or None when nothing changed.
    pub async fn sync(&mut self, dir: &Path) -> Result<Option<u64>, Error> {
        let files = self.scan_local(dir)?;
        let unchanged = self.last.as_ref().is_some_and(|m| {
            m.files.len() == files.len()
                && files
                    .iter()
                    .all(|(p, (_, sha))| m.files.get(p).is_some_and(|e| &e.sha256 == sha))
        });
        if unchanged || (self.last.is_none() && files.is_empty()) {
            return Ok(None);
        }
        let seq = self.next;
        self.next += 1;
        let mut manifest = Manifest {
            seq,
            created_at: crate::time::now_rfc3339(),
            files: BTreeMap::new(),
        };
        for (path, (size, sha)) in files {
            let kept = self
                .last
                .as_ref()
                .and_then(|m| m.files.get(&path))
                .filter(|e| e.sha256 == sha)
                .map(|e| e.key.clone());
            let key = match kept {
                Some(key) => key,
                None => {
                    let key = format!("{}/data/{path}", seq_name(seq));
                    self.objects
                        .put_file(&dir.join(&path), &format!("{}/{key}", self.prefix))
                        .await?;
                    key
                }
            };
            manifest.files.insert(
                path,
                FileEntry {
                    size,
                    sha256: sha,
                    key,
                },
            );
        }
        let bytes = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
        self.objects
            .put_bytes(
                &format!("{}/{}/{MANIFEST}", self.prefix, seq_name(seq)),
                bytes,
            )
            .await?;
        self.last = Some(manifest);
        self.prune().await?;
        Ok(Some(seq))
    }

    /// Every file under `dir` with its size and hash (hashing only files whose size or time
    /// changed since the last look).
    fn scan_local(&mut self, dir: &Path) -> Result<BTreeMap<String, (u64, String)>, Error> {
        let mut paths = Vec::new();
        walk(dir, PathBuf::new(), &mut paths)?;
        let mut out = BTreeMap::new();
        for rel in paths {
            let name = rel.to_string_lossy().replace('\\', "/");
            let path = dir.join(&rel);
            // A file removed between listing and reading is simply not in this checkpoint.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let stamp = Stamp::of(&meta);
            let sha = match self.seen.get(&name) {
                Some((seen, sha)) if *seen == stamp => sha.clone(),
                _ => match hash_file(&path) {
                    Ok(sha) => sha,
                    Err(_) => continue,
                },
            };
            self.seen.insert(name.clone(), (stamp, sha.clone()));
            out.insert(name, (meta.len(), sha));
        }
        Ok(out)
    }

    /// Deletes checkpoints older than the newest `keep` complete ones, manifests first, and
    /// every object under an older sequence number that no kept manifest points at
    /// (including the pieces of syncs cut off half-way).
    async fn prune(&self) -> Result<(), Error> {
        let (_, complete) = self.scan().await?;
        if complete.len() <= self.keep {
            return Ok(());
        }
        let kept: Vec<u64> = complete[complete.len() - self.keep..].to_vec();
        let oldest_kept = kept[0];
        let mut referenced = BTreeSet::new();
        for seq in &kept {
            if let Some(m) = self.manifest(*seq).await? {
                referenced.extend(m.files.into_values().map(|e| e.key));
            }
        }
        for seq in complete.iter().filter(|s| **s < oldest_kept) {
            self.objects
                .delete(&format!("{}/{}/{MANIFEST}", self.prefix, seq_name(*seq)))
                .await?;
        }
        for name in self.objects.list_under(&self.prefix).await? {
            let Some((seq, _)) = name.split_once('/') else {
                continue;
            };
            let older = seq.parse::<u64>().is_ok_and(|s| s < oldest_kept);
            if older && !referenced.contains(&name) {
                self.objects
                    .delete(&format!("{}/{name}", self.prefix))
                    .await?;
            }
        }
        Ok(())
    }
}

/// What tells a file changed without reading it: size, times and inode. Programs write
/// checkpoint files atomically (a new file renamed over the old), so a new inode shows a
/// rewrite even within one tick of the file system's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    size: u64,
    modified: SystemTime,
    ino: u64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            size: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            ino: meta.ino(),
            ctime_ns: meta.ctime().saturating_mul(1_000_000_000) + meta.ctime_nsec(),
        }
    }
}

fn seq_name(seq: u64) -> String {
    format!("{seq:010}")
}

fn walk(root: &Path, rel: PathBuf, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let path = root.join(&rel);
    let entries = match std::fs::read_dir(&path) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::Local {
                op: "list",
                path,
                source,
            });
        }
    };
    for entry in entries.flatten() {
        let child = rel.join(entry.file_name());
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(root, child, out)?,
            Ok(t) if t.is_file() => out.push(child),
            _ => {}
        }
    }
    Ok(())
}

fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn setup(tag: &str) -> (Tmp, Objects, tokio::runtime::Runtime) {
        let root = std::env::temp_dir().join(format!("sluice-ckpt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("mkdir");
        let objects =
            Objects::open(&crate::objects::default_url(&root)).expect("a local object store");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        (Tmp(root), objects, rt)
    }

    /// Writes as programs are asked to: a new file renamed over the old.
    fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).expect("mkdir");
        }
        let tmp = path.with_extension("tmp-write");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
    }

    /// How many objects hold data (not manifests).
    fn data_objects(rt: &tokio::runtime::Runtime, objects: &Objects) -> usize {
        rt.block_on(objects.list_under("ck"))
            .expect("list")
            .iter()
            .filter(|n| n.contains("/data/"))
            .count()
    }

    #[test]
    fn syncs_only_changes_restores_the_newest_and_prunes() {
        let (tmp, objects, rt) = setup("sync");
        let dir = tmp.0.join("work");
        write(&dir, "model.bin", "weights-1");
        write(&dir, "sub/opt.bin", "opt-1");
        rt.block_on(async {
            let mut c = Checkpoints::open(objects.clone(), "ck", 2)
                .await
                .expect("open");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(1));
            // Nothing changed: no new checkpoint.
            assert_eq!(c.sync(&dir).await.expect("sync"), None);
            // One file changed: only it is uploaded.
            write(&dir, "model.bin", "weights-2");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(2));
        });
        assert_eq!(
            data_objects(&rt, &objects),
            3,
            "opt.bin was not uploaded twice"
        );
        rt.block_on(async {
            let mut c = Checkpoints::open(objects.clone(), "ck", 2)
                .await
                .expect("open");
            write(&dir, "model.bin", "weights-3");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(3));
            write(&dir, "model.bin", "weights-4");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(4));
        });
        // Two complete checkpoints kept (3 and 4): model.bin of 3 and 4, and opt.bin of 1,
        // which both still point at.
        assert_eq!(data_objects(&rt, &objects), 3);
        let back = tmp.0.join("back");
        write(&back, "stale", "left from before");
        rt.block_on(async {
            let mut c = Checkpoints::open(objects.clone(), "ck", 2)
                .await
                .expect("open");
            assert_eq!(c.restore(&back).await.expect("restore"), Some(4));
        });
        assert_eq!(
            std::fs::read_to_string(back.join("model.bin")).expect("read"),
            "weights-4"
        );
        assert_eq!(
            std::fs::read_to_string(back.join("sub/opt.bin")).expect("read"),
            "opt-1"
        );
        assert!(
            !back.join("stale").exists(),
            "restore starts from an empty folder"
        );
    }

    #[test]
    fn a_sync_cut_off_before_its_manifest_is_never_restored() {
        let (tmp, objects, rt) = setup("cut");
        let dir = tmp.0.join("work");
        write(&dir, "step", "10");
        rt.block_on(async {
            let mut c = Checkpoints::open(objects.clone(), "ck", 3)
                .await
                .expect("open");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(1));
            // A second sync whose runtime died after uploading the data, before the manifest.
            objects
                .put_bytes("ck/0000000002/data/step", b"20-half".to_vec())
                .await
                .expect("put");
        });
        let back = tmp.0.join("back");
        rt.block_on(async {
            let mut c = Checkpoints::open(objects.clone(), "ck", 3)
                .await
                .expect("open");
            assert_eq!(c.restore(&back).await.expect("restore"), Some(1));
            // The next checkpoint does not reuse the cut-off one's number.
            write(&dir, "step", "30");
            assert_eq!(c.sync(&dir).await.expect("sync"), Some(3));
        });
        assert_eq!(
            std::fs::read_to_string(back.join("step")).expect("read"),
            "10"
        );
    }

    #[test]
    fn nothing_to_restore_gives_an_empty_folder() {
        let (tmp, objects, rt) = setup("none");
        let back = tmp.0.join("back");
        rt.block_on(async {
            let mut c = Checkpoints::open(objects, "ck", 3).await.expect("open");
            assert_eq!(c.restore(&back).await.expect("restore"), None);
            // An empty folder is not a checkpoint.
            assert_eq!(c.sync(&back).await.expect("sync"), None);
        });
        assert!(back.is_dir());
    }
}
