//! `sluice-runtime pod`: one worker of an attempt inside a Kubernetes pod.
//!
//! The pod has no Kubernetes credentials and the engine cannot see its files, so everything
//! the engine reads goes through the object store, under the worker's key (see
//! [`crate::contract`], "Pod mode"). The attempt itself runs exactly as `exec` runs it
//! ([`crate::exec::attempt`]) in a local folder; a mirror (`pod/mirror.rs`) copies what the
//! engine needs while it runs, and `finish` uploads the rest once it ended, `result.json`
//! last.

mod mirror;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::contract::{self, Launch};
use crate::exec::{self, Exec};
use crate::objects::Objects;
use crate::stores::Stores;

/// The worker's launch, as JSON ([`Launch`]).
pub const ENV_LAUNCH: &str = "SLUICE_POD_LAUNCH";
/// The object-store key prefix of the worker's record, without a trailing slash.
pub const ENV_KEY: &str = "SLUICE_POD_KEY";
/// The local folder of the attempt's files.
pub const ENV_DIR: &str = "SLUICE_POD_DIR";
pub const DEFAULT_DIR: &str = "/sluice-pod/attempt";

/// Under `KEY/`: the [`contract::Started`] JSON, once the program was spawned.
pub const STARTED_KEY: &str = "started.json";
/// Under `KEY/`: the current RFC 3339 time, rewritten every `heartbeat_ms`.
pub const HEARTBEAT_KEY: &str = "heartbeat";

/// How many times a final upload is tried, the wait before the second try (doubled for each
/// next one), and how long one try may take.
const FINAL_TRIES: u32 = 4;
const FINAL_BACKOFF: Duration = Duration::from_millis(200);
const FINAL_TRY: Duration = Duration::from_secs(30);

/// What stops a pod's runtime. [`Error::exit_code`]: 2 for a pod configured wrong, 1 else.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{var} is not set: {what}")]
    Missing {
        var: &'static str,
        what: &'static str,
    },
    #[error("{var} is not valid: {why}")]
    Invalid { var: &'static str, why: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Store(String),
    #[error(transparent)]
    Exec(#[from] exec::Error),
    #[error("the attempt in {} did not run and has no result", .0.display())]
    Skipped(PathBuf),
    #[error("cannot upload {key}: {why}")]
    Upload { key: String, why: String },
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Missing { .. } | Error::Invalid { .. } => 2,
            _ => 1,
        }
    }
}

/// A pod's configuration, from its environment.
#[derive(Clone, Debug)]
pub struct Config {
    pub launch: Launch,
    pub key: String,
    pub dir: PathBuf,
}

impl Config {
    /// Reads [`ENV_LAUNCH`], [`ENV_KEY`] and [`ENV_DIR`] through `var`. An empty
    /// `launch.workdir` becomes the current directory (the container's working directory), a
    /// relative one a folder under it.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let json = var(ENV_LAUNCH).ok_or(Error::Missing {
            var: ENV_LAUNCH,
            what: "the worker's launch (JSON)",
        })?;
        let mut launch: Launch = serde_json::from_str(&json).map_err(|e| Error::Invalid {
            var: ENV_LAUNCH,
            why: e.to_string(),
        })?;
        if launch.workers > 1 {
            return Err(Error::Invalid {
                var: ENV_LAUNCH,
                why: format!(
                    "workers is {}: a pod runs one worker (the engine makes a pod per worker)",
                    launch.workers
                ),
            });
        }
        // The container's environment is the image's and the pod's: the program keeps it,
        // all but the runtime's own variables (its launch, its key, the object store's
        // credentials).
        launch.inherit = contract::Inherit::AllButRuntime;
        if launch.workdir.is_relative() {
            let here = std::env::current_dir().map_err(|source| Error::Io {
                context: "cannot read the current directory (for the step's workdir)".into(),
                source,
            })?;
            if !launch.workdir.as_os_str().is_empty() {
                // A folder under the container's working directory (the step's `workdir`).
                launch.workdir = here.join(&launch.workdir);
            } else {
                launch.workdir = here;
            }
        }
        let key = var(ENV_KEY)
            .map(|k| k.trim_end_matches('/').to_owned())
            .filter(|k| !k.is_empty())
            .ok_or(Error::Missing {
                var: ENV_KEY,
                what: "the object-store key of the worker's record",
            })?;
        let dir = var(ENV_DIR)
            .filter(|d| !d.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_DIR), PathBuf::from);
        let key = if key.contains(contract::INDEX) {
            let rank = indexed(&var, &mut launch)?;
            key.replace(contract::INDEX, &rank.to_string())
        } else {
            key
        };
        Ok(Config { launch, key, dir })
    }
}

/// A worker of an Indexed Job (`admission: kueue`): its rank from `JOB_COMPLETION_INDEX`,
/// written into the launch's `env` values in place of `{index}`, and the launch made that
/// rank's ([`Launch::for_rank`]).
fn indexed(var: &impl Fn(&str) -> Option<String>, launch: &mut Launch) -> Result<u32, Error> {
    let text = var(contract::ENV_JOB_INDEX).ok_or(Error::Missing {
        var: contract::ENV_JOB_INDEX,
        what: "the worker's index in its Job, which SLUICE_POD_KEY's {index} stands for",
    })?;
    let rank: u32 = text.trim().parse().map_err(|_| Error::Invalid {
        var: contract::ENV_JOB_INDEX,
        why: format!("{text:?} is not a worker index"),
    })?;
    for value in launch.env.values_mut() {
        if value.contains(contract::INDEX) {
            *value = value.replace(contract::INDEX, &rank.to_string());
        }
    }
    launch.for_rank(rank);
    Ok(rank)
}

/// `sluice-runtime pod`: reads the environment, runs the worker, records it.
pub fn pod() -> Result<(), Error> {
    // First: a SIGTERM during the setup still ends the attempt `Terminated`.
    let term = exec::signals()?;
    let config = Config::from_vars(|k| std::env::var(k).ok())?;
    run(&config, &term)
}

/// Runs the worker of `config` until its `result.json` is uploaded. `term` set (SIGTERM)
/// ends it `Terminated` through [`exec::attempt`]'s own path.
pub fn run(config: &Config, term: &AtomicBool) -> Result<(), Error> {
    let dir = &config.dir;
    let io = |context: String| move |source| Error::Io { context, source };
    std::fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
    if !dir.join(contract::RESULT_FILE).exists() {
        // Left by an earlier container of this pod that did not finish: start afresh.
        for stale in [
            contract::LOCK_FILE,
            contract::LOG_FILE,
            contract::METRICS_FILE,
        ] {
            let _ = std::fs::remove_file(dir.join(stale));
        }
    }
    let bytes = serde_json::to_vec_pretty(&config.launch)
        .map_err(|e| io("cannot encode launch.json".into())(std::io::Error::other(e)))?;
    crate::files::write_atomically(&dir.join(contract::LAUNCH_FILE), &bytes)
        .map_err(io(format!("cannot write launch.json in {}", dir.display())))?;
    // What a pod keeps is its own: its outputs, and the links in them, stay inside
    // $SLUICE_OUTPUT_DIR.
    let stores = Arc::new(Stores::new().confined());
    let objects = stores
        .objects(&config.launch.objects)
        .map_err(Error::Store)?;
    let target = Target {
        stores: Arc::clone(&stores),
        objects,
        key: config.key.clone(),
    };
    let mirror = mirror::Mirror::start(target.clone(), dir, config.launch.heartbeat_ms);
    let ran = exec::attempt(dir, term, &stores);
    let started_sent = mirror.stop();
    finish(&target, dir, started_sent, ran)
}

/// Where a worker's record goes: `objects` under `key/`.
#[derive(Clone)]
pub(crate) struct Target {
    stores: Arc<Stores>,
    objects: Objects,
    key: String,
}

/// What an upload sends.
enum Body<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

impl Target {
    fn key_of(&self, name: &str) -> String {
        format!("{}/{name}", self.key)
    }

    /// One try at writing `name` under the key, bounded by `limit`.
    fn put(&self, name: &str, body: &Body<'_>, limit: Duration) -> Result<(), String> {
        let key = self.key_of(name);
        let put = async {
            match body {
                Body::Bytes(b) => self.objects.put_bytes(&key, b.to_vec()).await,
                Body::File(p) => self.objects.put_file(p, &key).await,
            }
        };
        // The timer is made inside the runtime, which it needs.
        match self
            .stores
            .block_on(async { tokio::time::timeout(limit, put).await })?
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        }
    }

    /// Writes `name` under the key, retried with backoff; the last error when every try
    /// failed (each failure said on standard error).
    fn upload(&self, name: &str, body: &Body<'_>) -> Result<(), Error> {
        let mut wait = FINAL_BACKOFF;
        let mut last = String::new();
        for tries in 1..=FINAL_TRIES {
            match self.put(name, body, FINAL_TRY) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    eprintln!(
                        "sluice-runtime: cannot upload {} (try {tries} of {FINAL_TRIES}): {e}",
                        self.key_of(name)
                    );
                    last = e;
                }
            }
            if tries < FINAL_TRIES {
                std::thread::sleep(wait);
                wait *= 2;
            }
        }
        Err(Error::Upload {
            key: self.key_of(name),
            why: last,
        })
    }
}

/// The end of a worker: `started.json` if the mirror missed it, `output.log`, `metrics.jsonl`
/// (each when there is one; a failure is said and does not stop the rest), then
/// `result.json`, last. An attempt that did not run leaves no result: an error.
fn finish(
    target: &Target,
    dir: &Path,
    started_sent: bool,
    ran: Result<Exec, exec::Error>,
) -> Result<(), Error> {
    if !started_sent && let Some(started) = mirror::started(dir) {
        let _ = target.upload(STARTED_KEY, &Body::Bytes(&started));
    }
    for name in [contract::LOG_FILE, contract::METRICS_FILE] {
        let path = dir.join(name);
        if path.exists() {
            let _ = target.upload(name, &Body::File(&path));
        }
    }
    ran?;
    let result = dir.join(contract::RESULT_FILE);
    let bytes = match std::fs::read(&result) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Skipped(dir.to_owned()));
        }
        Err(source) => {
            return Err(Error::Io {
                context: format!("cannot read {}", result.display()),
                source,
            });
        }
    };
    target.upload(contract::RESULT_FILE, &Body::Bytes(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const LAUNCH: &str = r#"{"argv":["true"],"workdir":"","env":{},"timeout_ms":null,
        "grace_ms":1000,"inputs":[],"outputs":[],"output_dir":"/o","objects":"file:///s",
        "outputs_key":"k","checkpoint_dir":"/c","checkpoint":null,"metrics_stdout":true}"#;

    #[test]
    fn the_configuration_comes_from_the_environment_with_defaults() {
        let c = Config::from_vars(vars(&[(ENV_LAUNCH, LAUNCH), (ENV_KEY, "a/b/w0/")]))
            .expect("a configuration");
        assert_eq!(c.key, "a/b/w0");
        assert_eq!(c.dir, PathBuf::from(DEFAULT_DIR));
        assert_eq!(
            Some(c.launch.workdir),
            std::env::current_dir().ok(),
            "an empty workdir is the current directory"
        );
        let relative = LAUNCH.replace(r#""workdir":"""#, r#""workdir":"src/app""#);
        let c = Config::from_vars(vars(&[(ENV_LAUNCH, &relative), (ENV_KEY, "k")]))
            .expect("a configuration");
        assert_eq!(
            Some(c.launch.workdir),
            std::env::current_dir().ok().map(|d| d.join("src/app")),
            "a relative workdir is a folder under the current directory"
        );
    }

    #[test]
    fn an_indexed_jobs_worker_takes_its_rank_from_job_completion_index() {
        let launch = LAUNCH
            .replace(
                r#""env":{}"#,
                r#""env":{"RANK":"{index}","WORLD_SIZE":"2"}"#,
            )
            .replace(r#""outputs":[]"#, r#""outputs":["model"]"#);
        let key = "t/r/s/1/pods/{index}";
        let zero = Config::from_vars(vars(&[
            (ENV_LAUNCH, &launch),
            (ENV_KEY, key),
            (contract::ENV_JOB_INDEX, "0"),
        ]))
        .expect("rank 0");
        assert_eq!(zero.key, "t/r/s/1/pods/0");
        assert_eq!(zero.launch.env["RANK"], "0");
        assert_eq!(zero.launch.outputs, ["model"], "rank 0 keeps the outputs");
        let one = Config::from_vars(vars(&[
            (ENV_LAUNCH, &launch),
            (ENV_KEY, key),
            (contract::ENV_JOB_INDEX, "1"),
        ]))
        .expect("rank 1");
        assert_eq!(one.key, "t/r/s/1/pods/1");
        assert_eq!(
            (
                one.launch.env["RANK"].as_str(),
                one.launch.env["WORLD_SIZE"].as_str()
            ),
            ("1", "2")
        );
        assert!(one.launch.outputs.is_empty(), "only rank 0 keeps outputs");
        let e = Config::from_vars(vars(&[(ENV_LAUNCH, &launch), (ENV_KEY, key)]))
            .expect_err("no index");
        assert!(
            e.to_string().starts_with("JOB_COMPLETION_INDEX is not set"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn a_missing_or_bad_variable_is_named() {
        let e = Config::from_vars(vars(&[(ENV_KEY, "k")])).expect_err("no launch");
        assert!(
            e.to_string().starts_with("SLUICE_POD_LAUNCH is not set"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let e = Config::from_vars(vars(&[(ENV_LAUNCH, "{"), (ENV_KEY, "k")])).expect_err("bad");
        assert!(
            e.to_string().starts_with("SLUICE_POD_LAUNCH is not valid"),
            "{e}"
        );
        let e = Config::from_vars(vars(&[(ENV_LAUNCH, LAUNCH), (ENV_KEY, "/")])).expect_err("key");
        assert!(
            e.to_string().starts_with("SLUICE_POD_KEY is not set"),
            "{e}"
        );
        let gang = LAUNCH.replace("\"metrics_stdout\"", "\"workers\":2,\"metrics_stdout\"");
        let e = Config::from_vars(vars(&[(ENV_LAUNCH, &gang), (ENV_KEY, "k")])).expect_err("gang");
        assert!(e.to_string().contains("a pod runs one worker"), "{e}");
    }
}
