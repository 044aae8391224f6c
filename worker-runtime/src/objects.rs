//! The object store: where outputs and logs are kept (and, with the runtime's checkpoint work,
//! checkpoints), behind `object_store` so that a local folder and a bucket look the same to
//! the engine and to the runtime.
//!
//! Keys follow `../spec/runtime.md`: `teams/TEAM/runs/RUN/STEP/ATTEMPT/{outputs,logs}/...`.
//! An artifact is either one object at its key (a file) or every object under `KEY/` (a
//! folder); [`Objects::put_path`] and [`Objects::get_path`] map files and folders onto that.
//!
//! On one machine an artifact is kept once: a folder store takes an output by renaming it in
//! ([`Objects::take_path`]) rather than copying it, and hands an input out as a copy that the
//! kernel makes a reflink where the filesystem shares blocks (btrfs, XFS, bcachefs, ZFS). Hard
//! links are never used: a consumer writing into its input in place would write into the
//! stored artifact too, and permission bits do not stop a program running as root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::AsyncWriteExt;

/// What went wrong with the object store, naming the key or URL involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object store URL '{url}' is not supported: {why}")]
    Url { url: String, why: String },
    #[error("object store {url}: cannot {op} '{key}': {source}")]
    Store {
        url: String,
        op: &'static str,
        key: String,
        #[source]
        source: Box<object_store::Error>,
    },
    #[error("object store {url}: nothing stored at '{key}'")]
    Missing { url: String, key: String },
    /// A file that may not be kept from there ([`Links::Within`]).
    #[error("{} {why}", path.display())]
    Refused { path: PathBuf, why: String },
    #[error("cannot {op} {}: {source}", path.display())]
    Local {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An opened object store and the URL it was opened from.
#[derive(Clone, Debug)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    url: String,
    /// The same store seen as a folder, for `file://` stores: a key's object is a file there,
    /// which outputs are renamed into and inputs copied (or reflinked) from.
    local: Option<Arc<LocalFileSystem>>,
}

/// How much is stored somewhere: files (objects) and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub files: u64,
    pub bytes: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.files += other.files;
        self.bytes += other.bytes;
    }
}

/// Where the symbolic links of what is kept ([`Objects::take_path`]) may lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links<'a> {
    /// Anywhere: their targets are read (the local executor, on the user's own machine,
    /// where the program could read them itself).
    Followed,
    /// Inside this folder only (a pod's `$SLUICE_OUTPUT_DIR`): a link leading out of it, a
    /// file that is not a regular file or a folder, or a file found outside it once opened
    /// (a folder swapped for a link meanwhile) refuses the whole output, and nothing outside
    /// is read or kept. Links inside it are kept as copies of their targets.
    Within(&'a Path),
}

/// The default store of a home: `file://HOME/objects`.
pub fn default_url(home: &Path) -> String {
    format!("file://{}", home.join("objects").display())
}

impl Objects {
    /// Opens `file:///ABSOLUTE/PATH` (the folder is created) or `s3://BUCKET[/PREFIX]`.
    ///
    /// S3 is configured as the AWS tools are, from the environment: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, and for S3-compatible servers
    /// `AWS_ENDPOINT_URL` (an `http://` endpoint is plain http, as written). Requests that fail for
    /// a transient reason (a server error, a refused connection) are retried with exponential
    /// backoff for up to 30 s before an operation fails; callers that must not lose data
    /// (checkpoint syncs) retry again on top.
    pub fn open(url: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Url {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3:// URL names a bucket (s3://bucket/prefix)"));
            }
            let retry = object_store::RetryConfig {
                backoff: object_store::BackoffConfig {
                    init_backoff: std::time::Duration::from_millis(100),
                    max_backoff: std::time::Duration::from_secs(5),
                    base: 2.0,
                },
                max_retries: 10,
                retry_timeout: std::time::Duration::from_secs(30),
            };
            let vars = s3_vars(std::env::vars_os());
            let mut builder = object_store::aws::AmazonS3Builder::new()
                .with_bucket_name(bucket)
                .with_retry(retry);
            for (key, value) in &vars {
                if let Ok(config_key) = key.to_ascii_lowercase().parse() {
                    builder = builder.with_config(config_key, value);
                }
            }
            if !vars.contains_key("AWS_REGION") && !vars.contains_key("AWS_DEFAULT_REGION") {
                builder = builder.with_region("us-east-1");
            }
            // An endpoint the user wrote as http:// (MinIO, moto, a local gateway) is plain
            // http by their own choice: say so to the client, which otherwise refuses it with
            // "builder error". `AWS_ALLOW_HTTP=false` still refuses it.
            let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                .iter()
                .find_map(|k| vars.get(*k).filter(|v| !v.is_empty()));
            if let Some(endpoint) = endpoint {
                let http = endpoint.to_ascii_lowercase().starts_with("http://");
                builder = builder.with_endpoint(endpoint);
                if http && !vars.contains_key("AWS_ALLOW_HTTP") {
                    builder = builder.with_allow_http(true);
                }
            }
            let s3 = builder.build().map_err(|e| bad(&e.to_string()))?;
            let prefix = prefix.trim_matches('/');
            let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
            };
            return Ok(Self {
                store,
                url: url.to_owned(),
                local: None,
            });
        }
        let Some(rest) = url.strip_prefix("file://") else {
            return Err(bad("the object store URL must start with file:// or s3://"));
        };
        let root = Path::new(rest);
        if !root.is_absolute() {
            return Err(bad(
                "a file:// URL needs an absolute path here (file:///data/objects)",
            ));
        }
        std::fs::create_dir_all(root).map_err(|source| Error::Local {
            op: "create the object folder",
            path: root.to_owned(),
            source,
        })?;
        let store =
            Arc::new(LocalFileSystem::new_with_prefix(root).map_err(|e| bad(&e.to_string()))?);
        Ok(Self {
            store: Arc::clone(&store) as Arc<dyn ObjectStore>,
            url: url.to_owned(),
            local: Some(store),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn err(&self, op: &'static str, key: &str) -> impl FnOnce(object_store::Error) -> Error {
        let url = self.url.clone();
        let key = key.to_owned();
        move |source| Error::Store {
            url,
            op,
            key,
            source: Box::new(source),
        }
    }

    /// Uploads a file to `key`, or a folder's files under `key/` (keeping their relative
    /// paths). Returns how many objects were written.
    pub async fn put_path(&self, local: &Path, key: &str) -> Result<usize, Error> {
        let mut files = Vec::new();
        collect_files(local, PathBuf::new(), &mut files)?;
        let is_file = files.len() == 1 && files[0].as_os_str().is_empty();
        for rel in &files {
            let (from, to) = if is_file {
                (local.to_owned(), key.to_owned())
            } else {
                (local.join(rel), format!("{key}/{}", rel.display()))
            };
            self.put_file(&from, &to).await?;
        }
        Ok(files.len())
    }

    /// Keeps a file or folder at `key` as [`Self::put_path`] does, but takes it rather than
    /// copying it when the store is a folder: each regular file is renamed into place, so the
    /// artifact is on disk once and the source is gone. What cannot be renamed is uploaded
    /// (copied) and left where it is: a file on another filesystem, a symbolic link (its
    /// target is not ours to move, nor what is under it), a file with other hard links (the
    /// stored artifact must not share its bytes with a file outside the store). A bucket is
    /// always uploaded to. `links` says where links may lead. Returns how many objects were
    /// written.
    pub async fn take_path(
        &self,
        local: &Path,
        key: &str,
        links: Links<'_>,
    ) -> Result<usize, Error> {
        if let Links::Within(root) = links {
            return self.take_within(local, key, root).await;
        }
        let Some(fs) = self.local.clone() else {
            return self.put_path(local, key).await;
        };
        let meta = std::fs::symlink_metadata(local).map_err(|source| Error::Local {
            op: "read",
            path: local.to_owned(),
            source,
        })?;
        if meta.file_type().is_symlink() {
            return self.put_path(local, key).await;
        }
        if !meta.is_dir() {
            self.take_file(&fs, local, &meta, key).await?;
            return Ok(1);
        }
        let mut written = 0;
        let mut folders = vec![(local.to_owned(), key.to_owned())];
        while let Some((dir, prefix)) = folders.pop() {
            let listed = |source| Error::Local {
                op: "list",
                path: dir.clone(),
                source,
            };
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .map_err(listed)?
                .collect::<Result<_, _>>()
                .map_err(listed)?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = e.path();
                let child = format!("{prefix}/{}", e.file_name().to_string_lossy());
                let meta = std::fs::symlink_metadata(&path).map_err(|source| Error::Local {
                    op: "read",
                    path: path.clone(),
                    source,
                })?;
                if meta.is_dir() {
                    folders.push((path, child));
                } else if meta.file_type().is_symlink() {
                    written += self.put_path(&path, &child).await?;
                } else {
                    self.take_file(&fs, &path, &meta, &child).await?;
                    written += 1;
                }
            }
        }
        Ok(written)
    }

    /// [`Self::take_path`] with [`Links::Within`] `root`: every file is found first (links
    /// resolved and checked), then each is copied, checked again once opened. A refused
    /// output is not kept at all (what was kept of it before the refusal is deleted).
    async fn take_within(&self, local: &Path, key: &str, root: &Path) -> Result<usize, Error> {
        let root = std::fs::canonicalize(root).map_err(|source| Error::Local {
            op: "resolve",
            path: root.to_owned(),
            source,
        })?;
        let mut found = Vec::new();
        find_within(local, String::new(), &root, &mut Vec::new(), &mut found)?;
        let mut written = 0;
        for f in &found {
            let to = if f.rel.is_empty() {
                key.to_owned()
            } else {
                format!("{key}/{}", f.rel)
            };
            if let Err(e) = self.keep_within(f, &to, &root).await {
                let _ = self.delete_under(key).await;
                return Err(e);
            }
            written += 1;
        }
        Ok(written)
    }

    /// One file of [`Self::take_within`], always copied (a rename would follow a folder
    /// swapped for a link meanwhile): opened without following a last link, without blocking
    /// on a FIFO, and read only once found to be a regular file under `root`.
    async fn keep_within(&self, f: &Found, key: &str, root: &Path) -> Result<(), Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
            .open(&f.open)
            .map_err(|source| Error::Local {
                op: "open",
                path: f.path.clone(),
                source,
            })?;
        let opened = std::fs::read_link(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            file.as_raw_fd()
        }))
        .map_err(|source| Error::Local {
            op: "check where it is, once opened,",
            path: f.path.clone(),
            source,
        })?;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        if !regular || !opened.starts_with(root) {
            return Err(Error::Refused {
                path: f.path.clone(),
                why: format!(
                    "changed while it was kept (it is no longer a regular file inside {})",
                    root.display()
                ),
            });
        }
        self.put_opened(file, &f.path, key).await
    }

    /// One file of [`Self::take_path`]: renamed into the folder store when it may be, else
    /// uploaded.
    async fn take_file(
        &self,
        fs: &LocalFileSystem,
        from: &Path,
        meta: &std::fs::Metadata,
        key: &str,
    ) -> Result<(), Error> {
        use std::os::unix::fs::MetadataExt;
        if meta.file_type().is_file()
            && meta.nlink() == 1
            && let Ok(to) = fs.path_to_filesystem(&Key::from(key))
            && to
                .parent()
                .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
            && std::fs::rename(from, &to).is_ok()
        {
            return Ok(());
        }
        self.put_file(from, key).await
    }

    /// Uploads one local file as one object: a single PUT up to 8 MiB, multipart above.
    ///
    /// The file is read with plain blocking reads of 8 MiB: the runtime gives object-store
    /// work its own threads, and tokio's file reads would cost a thread hand-off per 2 MiB.
    pub async fn put_file(&self, from: &Path, key: &str) -> Result<(), Error> {
        let file = std::fs::File::open(from).map_err(|source| Error::Local {
            op: "open",
            path: from.to_owned(),
            source,
        })?;
        self.put_opened(file, from, key).await
    }

    /// Uploads the opened `file` (named `from` in messages) as [`Self::put_file`] does.
    async fn put_opened(
        &self,
        mut file: std::fs::File,
        from: &Path,
        key: &str,
    ) -> Result<(), Error> {
        use std::io::Read;
        const CHUNK: usize = 8 << 20;
        let local = |op| {
            let path = from.to_owned();
            move |source| Error::Local { op, path, source }
        };
        let len = file.metadata().map_err(local("read"))?.len();
        if len <= CHUNK as u64 {
            let mut bytes = Vec::with_capacity(len as usize);
            file.read_to_end(&mut bytes).map_err(local("read"))?;
            return self.put_bytes(key, bytes).await;
        }
        let mut writer = object_store::buffered::BufWriter::with_capacity(
            Arc::clone(&self.store),
            Key::from(key),
            CHUNK,
        );
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = file.read(&mut buf).map_err(local("read"))?;
            if n == 0 {
                break;
            }
            writer.write_all(&buf[..n]).await.map_err(local("upload"))?;
        }
        writer.shutdown().await.map_err(local("upload"))?;
        Ok(())
    }

    /// Writes `bytes` as one object.
    pub async fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> Result<(), Error> {
        self.store
            .put(&Key::from(key), PutPayload::from(bytes))
            .await
            .map_err(self.err("write", key))?;
        Ok(())
    }

    /// Downloads the object at `key` to the file `local`, or every object under `key/` into
    /// the folder `local`. Nothing stored there is an error.
    pub async fn get_path(&self, key: &str, local: &Path) -> Result<(), Error> {
        for (rel, object) in self.list_some(key).await? {
            let to = if rel.is_empty() {
                local.to_owned()
            } else {
                local.join(&rel)
            };
            self.get_file(&object, &to).await?;
        }
        Ok(())
    }

    /// Downloads one object into the file `to`, written with plain blocking writes (see
    /// [`Self::put_file`]). From a folder store it is a file copy, which the kernel makes a
    /// reflink (shared blocks, copied on write) where the filesystem can (`copy_file_range`
    /// on btrfs, XFS, bcachefs, ZFS), and a plain copy elsewhere: a program that writes into
    /// its copy never changes the stored object.
    async fn get_file(&self, key: &Key, to: &Path) -> Result<(), Error> {
        use std::io::Write;
        let local = |op| {
            let path = to.to_owned();
            move |source| Error::Local { op, path, source }
        };
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(local("create the folder of"))?;
        }
        if let Some(from) = self
            .local
            .as_ref()
            .and_then(|fs| fs.path_to_filesystem(key).ok())
        {
            // File to file, so that std copies with `copy_file_range`; a new file (not
            // `fs::copy`), so that the copy does not inherit the stored file's mode.
            let mut source = std::fs::File::open(&from).map_err(|source| Error::Local {
                op: "read the stored object",
                path: from.clone(),
                source,
            })?;
            let mut file = std::fs::File::create(to).map_err(local("create"))?;
            std::io::copy(&mut source, &mut file).map_err(local("write"))?;
            return Ok(());
        }
        let got = self
            .store
            .get(key)
            .await
            .map_err(self.err("read", key.as_ref()))?;
        let mut file = std::io::BufWriter::with_capacity(
            1 << 20,
            std::fs::File::create(to).map_err(local("create"))?,
        );
        // A local store hands the file itself: copy it in one go (the kernel's copy), not in
        // 8 KiB stream chunks.
        let chunks = match got.payload {
            object_store::GetResultPayload::File(mut source, _) => {
                std::io::copy(&mut source, &mut file).map_err(local("write"))?;
                file.flush().map_err(local("write"))?;
                return Ok(());
            }
            object_store::GetResultPayload::Stream(s) => s,
        };
        let mut chunks = chunks;
        while let Some(chunk) = chunks
            .try_next()
            .await
            .map_err(self.err("read", key.as_ref()))?
        {
            file.write_all(&chunk).map_err(local("write"))?;
        }
        file.flush().map_err(local("write"))?;
        Ok(())
    }

    /// Whether anything is stored at `key` (a file) or under `key/` (a folder).
    pub async fn exists(&self, key: &str) -> Result<bool, Error> {
        Ok(!self.list(key).await?.is_empty())
    }

    /// Feeds the content at `key` to `sink`: for a folder, each object's relative name and
    /// bytes in name order, so that equal trees give equal sequences (cache keys).
    pub async fn read_into(
        &self,
        key: &str,
        sink: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<(), Error> {
        for (rel, object) in self.list_some(key).await? {
            sink(rel.as_bytes());
            sink(b"\0");
            let got = self
                .store
                .get(&object)
                .await
                .map_err(self.err("read", object.as_ref()))?;
            let mut chunks = got.into_stream();
            while let Some(chunk) = chunks
                .try_next()
                .await
                .map_err(self.err("read", object.as_ref()))?
            {
                sink(&chunk);
            }
            sink(b"\0");
        }
        Ok(())
    }

    /// Every object under `prefix/`, by name relative to it (decoded), sorted; none is not an
    /// error.
    pub async fn list_under(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let under = Key::from(prefix);
        Ok(self
            .list_keys(&under, prefix)
            .await?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// The objects under `under/`, with their names relative to it, sorted. Keys are stored
    /// percent-encoded (`shard[0]` is `shard%5B0%5D`); the names given back are decoded.
    async fn list_keys(&self, under: &Key, shown: &str) -> Result<Vec<(String, Key)>, Error> {
        let found: Vec<_> = self
            .store
            .list(Some(under))
            .try_collect()
            .await
            .map_err(self.err("list", shown))?;
        let mut out: Vec<(String, Key)> = found
            .into_iter()
            .filter_map(|meta| {
                let parts: Vec<String> = meta
                    .location
                    .prefix_match(under)?
                    .map(|p| {
                        percent_encoding::percent_decode_str(p.as_ref())
                            .decode_utf8_lossy()
                            .into_owned()
                    })
                    .collect();
                (!parts.is_empty()).then(|| (parts.join("/"), meta.location))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Downloads one object to the file `to` (creating its folder).
    pub async fn get_to(&self, key: &str, to: &Path) -> Result<(), Error> {
        self.get_file(&Key::from(key), to).await
    }

    /// Deletes one object; one already gone is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), Error> {
        match self.store.delete(&Key::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("delete", key)(e)),
        }
    }

    /// Reads one whole object, if it exists.
    pub async fn get_bytes(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        match self.store.get(&Key::from(key)).await {
            Ok(got) => Ok(Some(
                got.bytes().await.map_err(self.err("read", key))?.to_vec(),
            )),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("read", key)(e)),
        }
    }

    /// What is stored under `prefix/` (for a folder store, every file in its folder,
    /// unfinished uploads included).
    pub async fn usage_under(&self, prefix: &str) -> Result<Usage, Error> {
        if let Some(dir) = self.folder_of(prefix) {
            return tree_usage(&dir);
        }
        let found: Vec<_> = self
            .store
            .list(Some(&Key::from(prefix)))
            .try_collect()
            .await
            .map_err(self.err("list", prefix))?;
        Ok(Usage {
            files: found.len() as u64,
            bytes: found.iter().map(|m| m.size).sum(),
        })
    }

    /// Deletes everything under `prefix/` and says what that was. Nothing there is not an
    /// error, so that a delete cut off half-way can simply be run again.
    pub async fn delete_under(&self, prefix: &str) -> Result<Usage, Error> {
        if let Some(dir) = self.folder_of(prefix) {
            let usage = tree_usage(&dir)?;
            remove_tree(&dir)?;
            return Ok(usage);
        }
        let found: Vec<_> = self
            .store
            .list(Some(&Key::from(prefix)))
            .try_collect()
            .await
            .map_err(self.err("list", prefix))?;
        let usage = Usage {
            files: found.len() as u64,
            bytes: found.iter().map(|m| m.size).sum(),
        };
        let locations = futures::stream::iter(found.into_iter().map(|m| Ok(m.location))).boxed();
        let mut deleted = self.store.delete_stream(locations);
        while let Some(done) = deleted.next().await {
            match done {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err("delete under", prefix)(e)),
            }
        }
        Ok(usage)
    }

    /// The names one level under `prefix/` that hold objects (`teams/T/runs` gives the run
    /// ids stored there), decoded, sorted; none is not an error.
    pub async fn folders_under(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let under = Key::from(prefix);
        let listed = match self.store.list_with_delimiter(Some(&under)).await {
            Ok(l) => l,
            Err(object_store::Error::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(self.err("list", prefix)(e)),
        };
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename())
            .map(|n| {
                percent_encoding::percent_decode_str(n)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// The folder holding the objects under `prefix/`, for a folder store.
    fn folder_of(&self, prefix: &str) -> Option<PathBuf> {
        self.local
            .as_ref()
            .and_then(|fs| fs.path_to_filesystem(&Key::from(prefix)).ok())
    }

    /// [`Self::list`], where nothing stored is an error.
    async fn list_some(&self, key: &str) -> Result<Vec<(String, Key)>, Error> {
        let objects = self.list(key).await?;
        if objects.is_empty() {
            return Err(Error::Missing {
                url: self.url.clone(),
                key: key.to_owned(),
            });
        }
        Ok(objects)
    }

    /// The object at `key` (relative name "") or the objects under `key/` (names relative to
    /// it), sorted by name.
    async fn list(&self, key: &str) -> Result<Vec<(String, Key)>, Error> {
        let exact = Key::from(key);
        match self.store.head(&exact).await {
            Ok(_) => return Ok(vec![(String::new(), exact)]),
            Err(object_store::Error::NotFound { .. }) => {}
            // A folder on a local store: not an object, look under it.
            Err(_) if self.url.starts_with("file://") => {}
            Err(e) => return Err(self.err("look up", key)(e)),
        }
        self.list_keys(&exact, key).await
    }
}

/// The files under `path` (itself, when it is a file) and their sizes; symbolic links are
/// counted, not followed. Nothing there is no files.
pub fn tree_usage(path: &Path) -> Result<Usage, Error> {
    let local = |op, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Local { op, path, source }
    };
    let mut usage = Usage::default();
    let mut todo = vec![path.to_owned()];
    while let Some(p) = todo.pop() {
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            // Gone meanwhile (another delete, a runtime removing its inputs): nothing to count.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(local("read", &p)(e)),
        };
        if meta.is_dir() {
            let entries = match std::fs::read_dir(&p) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(local("list", &p)(e)),
            };
            for e in entries {
                todo.push(e.map_err(local("list", &p))?.path());
            }
        } else {
            usage.files += 1;
            usage.bytes += meta.len();
        }
    }
    Ok(usage)
}

/// Removes a file or a folder with everything in it, without following symbolic links;
/// nothing there is not an error.
pub fn remove_tree(path: &Path) -> Result<(), Error> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Local {
            op: "remove",
            path: path.to_owned(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// A file to keep under [`Links::Within`]: `path` as found (under the output), `open` the
/// path to read it from (resolved: a link's target), `rel` its name under the output's key.
struct Found {
    path: PathBuf,
    open: PathBuf,
    rel: String,
}

/// Every file of `path` (named `rel` under its output), never leaving `root` (canonical):
/// links are resolved and must lead inside it; only regular files and folders are taken;
/// `folders` are the canonical folders being listed above, so that a link back to one of
/// them is refused rather than followed forever.
fn find_within(
    path: &Path,
    rel: String,
    root: &Path,
    folders: &mut Vec<PathBuf>,
    out: &mut Vec<Found>,
) -> Result<(), Error> {
    let local = |op, path: &Path| {
        let path = path.to_owned();
        move |source| Error::Local { op, path, source }
    };
    let meta = std::fs::symlink_metadata(path).map_err(local("read", path))?;
    let linked = meta.file_type().is_symlink();
    let real = std::fs::canonicalize(path).map_err(local("resolve", path))?;
    if !real.starts_with(root) {
        let why = if linked {
            let to = std::fs::read_link(path).unwrap_or_else(|_| real.clone());
            format!(
                "is a link to {}, outside {}: a pod keeps only files of its own output folder",
                to.display(),
                root.display()
            )
        } else {
            format!("is outside {}", root.display())
        };
        return Err(Error::Refused {
            path: path.to_owned(),
            why,
        });
    }
    let meta = if linked {
        std::fs::metadata(&real).map_err(local("read", &real))?
    } else {
        meta
    };
    if meta.is_dir() {
        if folders.contains(&real) {
            return Err(Error::Refused {
                path: path.to_owned(),
                why: "is a link to a folder that holds it".into(),
            });
        }
        let mut entries: Vec<_> = std::fs::read_dir(&real)
            .map_err(local("list", path))?
            .collect::<Result<_, _>>()
            .map_err(local("list", path))?;
        entries.sort_by_key(|e| e.file_name());
        folders.push(real);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            find_within(&path.join(e.file_name()), child, root, folders, out)?;
        }
        folders.pop();
        return Ok(());
    }
    if !meta.is_file() {
        return Err(Error::Refused {
            path: path.to_owned(),
            why: "is neither a regular file nor a folder".into(),
        });
    }
    out.push(Found {
        path: path.to_owned(),
        open: real,
        rel,
    });
    Ok(())
}

/// Relative paths of every file under `dir` (one empty path when `dir` is a file).
fn collect_files(root: &Path, rel: PathBuf, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let path = if rel.as_os_str().is_empty() {
        root.to_owned()
    } else {
        root.join(&rel)
    };
    let local = |op| {
        let path = path.clone();
        move |source| Error::Local { op, path, source }
    };
    let meta = std::fs::metadata(&path).map_err(local("read"))?;
    if !meta.is_dir() {
        out.push(rel);
        return Ok(());
    }
    let mut entries: Vec<_> = std::fs::read_dir(&path)
        .map_err(local("list"))?
        .collect::<Result<_, _>>()
        .map_err(local("list"))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        collect_files(root, rel.join(e.file_name()), out)?;
    }
    Ok(())
}

/// Where a pod's environment holds the object store's credentials: the Cluster's
/// `kubernetes.objectsSecret` taken under this prefix (`SLUICE_OBJECTS_AWS_ACCESS_KEY_ID`), so
/// that the runtime can leave them out of the program's environment (`contract::RUNTIME_ONLY`).
pub const SECRET_PREFIX: &str = "SLUICE_OBJECTS_";

/// The S3 settings of an environment: its `AWS_*` variables, and over them the same names
/// under [`SECRET_PREFIX`]. Names or values that are not UTF-8 are left out, as
/// `AmazonS3Builder::from_env` leaves them.
pub fn s3_vars<I>(env: I) -> BTreeMap<String, String>
where
    I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
{
    let mut plain = BTreeMap::new();
    let mut secret = BTreeMap::new();
    for (key, value) in env {
        let (Ok(key), Ok(value)) = (key.into_string(), value.into_string()) else {
            continue;
        };
        if let Some(name) = key.strip_prefix(SECRET_PREFIX) {
            if name.starts_with("AWS_") {
                secret.insert(name.to_owned(), value);
            }
        } else if key.starts_with("AWS_") {
            plain.insert(key, value);
        }
    }
    plain.extend(secret);
    plain
}

#[cfg(test)]
mod tests;
