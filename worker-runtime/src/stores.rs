//! What attempts share to reach object stores: one async runtime and the stores opened so
//! far, created at first use. `sluice-runtime exec` makes one for its attempt; `serve` one for
//! all of its attempts, so that a no-op step pays for neither. A pod's (`sluice-runtime pod`)
//! are [`Stores::confined`]: what its attempt keeps must be inside the attempt's folders.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::objects::{Links, Objects};

#[derive(Default)]
pub struct Stores {
    rt: OnceLock<tokio::runtime::Runtime>,
    open: Mutex<HashMap<String, Objects>>,
    /// One attempt in this process: a current-thread runtime, which starts no thread.
    single: bool,
    /// Outputs are kept only from inside their folder ([`Links::Within`]).
    confined: bool,
}

impl Stores {
    /// For many attempts at once (`serve`).
    pub fn new() -> Self {
        Self::default()
    }

    /// For one attempt (`exec`): its store work never runs on two threads at once.
    pub fn single() -> Self {
        Stores {
            single: true,
            ..Self::default()
        }
    }

    /// For a pod's attempt: outputs, and the links in them, are kept only from inside
    /// `$SLUICE_OUTPUT_DIR` ([`Stores::links`]).
    pub fn confined(self) -> Self {
        Stores {
            confined: true,
            ..self
        }
    }

    /// Where the links of an output kept from `root` (the attempt's output folder) may lead:
    /// anywhere on this machine (the user's own files), or, [`Stores::confined`], inside it.
    pub fn links<'a>(&self, root: &'a Path) -> Links<'a> {
        if self.confined {
            Links::Within(root)
        } else {
            Links::Followed
        }
    }

    /// The store at `url`, opened once.
    pub fn objects(&self, url: &str) -> Result<Objects, String> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| "the object store table is poisoned".to_owned())?;
        if let Some(o) = open.get(url) {
            return Ok(o.clone());
        }
        let o = Objects::open(url).map_err(|e| e.to_string())?;
        open.insert(url.to_owned(), o.clone());
        Ok(o)
    }

    /// Runs `f` to its end on this thread. With [`Stores::new`] any number of threads may do
    /// so at once (the runtime is multi-threaded, with one worker for what the stores spawn
    /// themselves); with [`Stores::single`] one at a time.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> Result<F::Output, String> {
        if self.rt.get().is_none() {
            let mut builder = if self.single {
                tokio::runtime::Builder::new_current_thread()
            } else {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(1).thread_name("sluice-runtime-io");
                b
            };
            let rt = builder
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the object store client: {e}"))?;
            let _ = self.rt.set(rt);
        }
        match self.rt.get() {
            Some(rt) => Ok(rt.block_on(f)),
            None => Err("cannot start the object store client".to_owned()),
        }
    }
}
