//! `sluice-runtime exec DIR`: one attempt, from its `launch.json` to its `result.json`.

mod output;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::checkpoint::Checkpoints;
use crate::contract::{self, End, Launch, Started};
use crate::files;
use crate::metrics::{self, FileTail, LineMetrics};
use crate::stores::Stores;
use crate::time::now_rfc3339;
use output::{ErrTail, Log, Stream, read_lines, with_tail};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// What `exec` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Exec {
    /// The attempt ran and its result is written.
    Ran,
    /// Another runtime owns the attempt, or it was abandoned or already ended: nothing done.
    Skipped,
}

/// Runs the attempt in `dir` as this process's only work (`sluice-runtime exec DIR`): SIGTERM
/// to this process ends the attempt cleanly.
pub fn exec(dir: &Path) -> Result<Exec, Error> {
    let term = signals()?;
    attempt(dir, &term, &Arc::new(Stores::single()))
}

/// SIGTERM sets the returned flag; SIGINT and SIGHUP (a terminal's Ctrl-C or hang-up) do
/// nothing: attempts outlive the terminal and the engine that started them.
pub fn signals() -> Result<Arc<AtomicBool>, Error> {
    let term = Arc::new(AtomicBool::new(false));
    let ignored = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [
        (signal_hook::consts::SIGTERM, &term),
        (signal_hook::consts::SIGINT, &ignored),
        (signal_hook::consts::SIGHUP, &ignored),
    ] {
        signal_hook::flag::register(sig, Arc::clone(flag)).map_err(io("cannot handle signals"))?;
    }
    Ok(term)
}

/// Runs the attempt in `dir`. It ends `Terminated` when `term` is set (SIGTERM to the runtime)
/// or when the engine asks by creating `DIR/terminate`.
pub fn attempt(dir: &Path, term: &AtomicBool, stores: &Arc<Stores>) -> Result<Exec, Error> {
    let mut lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(contract::LOCK_FILE))
        .map_err(io(format!("cannot open the lock in {}", dir.display())))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(Exec::Skipped),
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(io("cannot take the attempt's lock")(e));
        }
    }
    if dir.join("abandoned").exists() || dir.join(contract::RESULT_FILE).exists() {
        return Ok(Exec::Skipped);
    }
    let started_at = now_rfc3339();
    let launch: Launch = match std::fs::read(dir.join(contract::LAUNCH_FILE))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(l) => l,
        Err(e) => {
            write_result(
                dir,
                failed(&started_at, format!("cannot read launch.json: {e}")),
            )?;
            return Ok(Exec::Ran);
        }
    };
    // The heartbeat: the lock's modification time, touched from its own thread so that a
    // long restore or upload keeps it going.
    let (stop_beat, beat_rx) = mpsc::channel::<()>();
    let beat = lock
        .try_clone()
        .map_err(io("cannot share the lock with the heartbeat"))?;
    let every = Duration::from_millis(launch.heartbeat_ms.max(50));
    let heart = std::thread::spawn(move || {
        let _ = beat.set_modified(std::time::SystemTime::now());
        while let Err(mpsc::RecvTimeoutError::Timeout) = beat_rx.recv_timeout(every) {
            let _ = beat.set_modified(std::time::SystemTime::now());
        }
    });
    let result = run(dir, &launch, &started_at, term, &mut lock, stores);
    drop_inputs(dir, &launch);
    drop(stop_beat);
    let _ = heart.join();
    write_result(dir, result?)?;
    drop(lock);
    Ok(Exec::Ran)
}

/// Removes the copies of the inputs placed in the attempt's folder once its program has
/// ended: the artifacts stay in the object store (where a retry places them again), so an
/// ended attempt keeps no second copy on disk. Folders left empty go too, up to the attempt's.
/// Only what lies inside the attempt's folder is touched.
fn drop_inputs(dir: &Path, launch: &Launch) {
    for input in launch.inputs.iter().filter(|i| i.to.starts_with(dir)) {
        let _ = crate::objects::remove_tree(&input.to);
        let mut parent = input.to.parent();
        while let Some(p) = parent.filter(|p| p.starts_with(dir) && *p != dir) {
            if std::fs::remove_dir(p).is_err() {
                break;
            }
            parent = p.parent();
        }
    }
}

fn failed(started_at: &str, reason: String) -> contract::Result {
    contract::Result {
        end: End::Failed,
        exit_code: None,
        signal: None,
        started_at: started_at.to_owned(),
        ended_at: now_rfc3339(),
        reason: Some(reason),
        metrics: BTreeMap::new(),
    }
}

/// "exit code 3" or "signal 9".
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (_, Some(s)) => format!("signal {s}"),
        _ => "an unknown status".to_owned(),
    }
}

/// Each occurrence of the File collector's path in `text`, replaced by the attempt's own file.
fn redirect(text: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        text.to_owned()
    } else {
        text.replace(from, to)
    }
}

/// A free TCP port on loopback, for a gang's rendezvous (MASTER_PORT).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(29500, |a| a.port())
}

/// One checkpoint sync (nothing happens when nothing changed, or when the engine has
/// declared the attempt lost and another one may be writing checkpoints already).
fn sync_once(stores: &Stores, c: &mut Checkpoints, dir: &Path) -> Result<(), String> {
    let attempt_dir = dir.parent().unwrap_or(dir);
    if attempt_dir.join(contract::LOST_FILE).exists() {
        return Ok(());
    }
    stores
        .block_on(c.sync(dir))?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn write_result(dir: &Path, result: contract::Result) -> Result<(), Error> {
    let bytes = serde_json::to_vec_pretty(&result)
        .map_err(|e| io("cannot encode the result")(std::io::Error::other(e)))?;
    files::write_atomically(&dir.join(contract::RESULT_FILE), &bytes)
        .map_err(io("cannot write result.json"))
}

fn run(
    dir: &Path,
    launch: &Launch,
    started_at: &str,
    term: &AtomicBool,
    lock: &mut std::fs::File,
    stores: &Arc<Stores>,
) -> Result<contract::Result, Error> {
    // The object store, opened only when there is something to move.
    let needs_store =
        !launch.inputs.is_empty() || !launch.outputs.is_empty() || launch.checkpoint.is_some();
    let objects = if needs_store {
        match stores.objects(&launch.objects) {
            Ok(o) => Some(o),
            Err(e) => return Ok(failed(started_at, e)),
        }
    } else {
        None
    };
    if let Some(objects) = &objects {
        for input in &launch.inputs {
            match stores.block_on(objects.get_path(&input.key, &input.to)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Ok(failed(started_at, format!("cannot place input: {e}"))),
                Err(e) => return Ok(failed(started_at, format!("cannot place input: {e}"))),
            }
        }
    }
    // The latest complete checkpoint, restored before the program starts.
    let mut resumed = false;
    let checkpoints = match (&launch.checkpoint, &objects) {
        (Some(spec), Some(objects)) => {
            let restored = stores.block_on(async {
                let mut c = Checkpoints::open(objects.clone(), &spec.prefix, spec.keep).await?;
                let seq = c.restore(&launch.checkpoint_dir).await?;
                Ok::<_, crate::objects::Error>((c, seq))
            });
            match restored {
                Ok(Ok((c, seq))) => {
                    resumed = seq.is_some();
                    Some(c)
                }
                Ok(Err(e)) => {
                    return Ok(failed(
                        started_at,
                        format!("cannot restore the checkpoint: {e}"),
                    ));
                }
                Err(e) => return Ok(failed(started_at, e)),
            }
        }
        _ => {
            std::fs::create_dir_all(&launch.checkpoint_dir)
                .map_err(io("cannot create the checkpoint folder"))?;
            None
        }
    };
    std::fs::create_dir_all(&launch.output_dir).map_err(io("cannot create the output folder"))?;
    let metrics_file = dir.join(contract::METRICS_FILE);
    let log = Arc::new(Log {
        path: dir.join(contract::LOG_FILE),
        file: Mutex::new(None),
    });
    // Katib's File collector: the attempt's own file where the experiment names its path.
    let collected = launch
        .collect
        .file
        .as_ref()
        .map(|f| (f.clone(), f.local(dir)));
    let (argv, env) = match &collected {
        Some((f, local)) => {
            if let Some(parent) = local.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(io("cannot create the metrics collector's folder"))?;
            }
            let to = local.to_string_lossy();
            let argv: Vec<String> = launch
                .argv
                .iter()
                .map(|a| redirect(a, &f.path, &to))
                .collect();
            let env: BTreeMap<String, String> = launch
                .env
                .iter()
                .map(|(k, v)| (k.clone(), redirect(v, &f.path, &to)))
                .collect();
            (argv, env)
        }
        None => (launch.argv.clone(), launch.env.clone()),
    };
    let line_metrics = match LineMetrics::new(&launch.collect.filters) {
        Ok(m) => Arc::new(Mutex::new(m)),
        Err(e) => return Ok(failed(started_at, e)),
    };
    let mut file_tail = match &collected {
        Some((f, local)) => match LineMetrics::new(&launch.collect.filters) {
            Ok(m) => Some(FileTail::new(local.clone(), f.clone(), m)),
            Err(e) => return Ok(failed(started_at, e)),
        },
        None => None,
    };
    let Some((program, args)) = argv.split_first() else {
        return Ok(failed(
            started_at,
            "nothing to run: the command is empty".into(),
        ));
    };
    // Stopped before it started (a cancel that raced the start): do not start it at all.
    if term.load(Ordering::Relaxed) || dir.join(contract::TERMINATE_FILE).exists() {
        let mut result = failed(started_at, "stopped before the program started".into());
        result.end = End::Terminated;
        return Ok(result);
    }
    // A gang: `workers` copies of the program, each in its own process group, meeting at
    // MASTER_ADDR:MASTER_PORT (PyTorch's launcher conventions). All or nothing: one worker
    // that fails stops the others, and the attempt fails.
    let workers = launch.workers.max(1);
    let inherited = launch.inherit.select(std::env::vars_os());
    let master_port = if workers > 1 { free_port() } else { 0 };
    let mut groups: Vec<Pid> = Vec::new();
    let (done_tx, done) = mpsc::channel::<()>();
    let (tx, rx) = mpsc::channel::<(u32, std::io::Result<std::process::ExitStatus>)>();
    let mut readers = Vec::new();
    let tails: Vec<Arc<ErrTail>> = (0..workers).map(|_| Arc::default()).collect();
    for rank in 0..workers {
        let mut cmd = Command::new(program);
        // A clean environment: what the launch lets it inherit, then its own.
        cmd.args(args)
            .current_dir(&launch.workdir)
            .env_clear()
            .envs(inherited.iter().map(|(k, v)| (k, v)))
            .envs(&env)
            .env("SLUICE_METRICS_FILE", &metrics_file)
            .env("SLUICE_RESUMED", if resumed { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if launch.gpus_per_worker > 0 {
            let per = launch.gpus_per_worker as usize;
            let mine: Vec<String> = launch
                .gpus
                .iter()
                .skip(rank as usize * per)
                .take(per)
                .map(u32::to_string)
                .collect();
            cmd.env("CUDA_VISIBLE_DEVICES", mine.join(","));
        } else if launch.hide_gpus {
            cmd.env("CUDA_VISIBLE_DEVICES", "");
        }
        if workers > 1 {
            cmd.env("WORLD_SIZE", workers.to_string())
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", master_port.to_string())
                .env("PET_NNODES", workers.to_string())
                .env("PET_NODE_RANK", rank.to_string())
                .env("PET_NPROC_PER_NODE", "1");
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for g in &groups {
                    let _ = killpg(*g, Signal::SIGKILL);
                }
                let why = if launch.workdir.is_dir() {
                    format!("cannot start '{program}': {e}")
                } else {
                    format!(
                        "cannot start '{program}': working directory {} does not exist",
                        launch.workdir.display()
                    )
                };
                log.line("err", &why);
                return Ok(failed(started_at, why));
            }
        };
        groups.push(Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)));
        let (out_name, err_name) = if workers > 1 {
            (format!("out[{rank}]"), format!("err[{rank}]"))
        } else {
            ("out".to_owned(), "err".to_owned())
        };
        // Metrics come from rank 0 (the convention of distributed training loops), from both
        // streams: Katib's StdOut collector reads the container's whole log, where Python's
        // `logging` writes (standard error).
        let parse = launch.metrics_stdout && rank == 0;
        let tail = tails.get(rank as usize).cloned().unwrap_or_default();
        for (stream, name, tail) in [
            (child.stdout.take().map(Stream::Out), out_name, None),
            (child.stderr.take().map(Stream::Err), err_name, Some(tail)),
        ] {
            let Some(stream) = stream else {
                continue;
            };
            let log = Arc::clone(&log);
            let metrics_file = metrics_file.clone();
            let lines = Arc::clone(&line_metrics);
            let done_tx = done_tx.clone();
            readers.push(std::thread::spawn(move || {
                read_lines(stream, |line| {
                    log.line(&name, line);
                    if let Some(t) = &tail {
                        t.push(line);
                    }
                    if parse && let Ok(mut m) = lines.lock() {
                        let _ = metrics::append(&metrics_file, &m.parse(line));
                    }
                });
                let _ = done_tx.send(());
            }));
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((rank, child.wait()));
        });
    }
    drop(done_tx);
    drop(tx);
    let started = Started {
        runtime_pid: std::process::id(),
        pid: groups.first().map_or(0, |g| g.as_raw().unsigned_abs()),
        groups: groups.iter().map(|g| g.as_raw().unsigned_abs()).collect(),
        started_at: started_at.to_owned(),
    };
    let bytes = serde_json::to_vec(&started)
        .map_err(|e| io("cannot encode the start")(std::io::Error::other(e)))?;
    // Into the lock file (no new file per attempt); not fsynced: after a crash the lock and
    // result.json decide, this only tells "started" from "never started".
    lock.write_all(&bytes)
        .map_err(io("cannot record the start"))?;
    // Checkpoint syncs while the program runs, on their own thread: a slow or failing store
    // never holds the program up.
    let (stop_sync, stop_rx) = mpsc::channel::<()>();
    // A `restore_only` worker (not rank 0 of a gang on Kubernetes) restored above and never
    // syncs: no periodic sync, and no final one (which needs the syncer's checkpoints).
    let syncer = match (checkpoints, &launch.checkpoint) {
        (Some(mut c), Some(spec)) if !spec.restore_only => {
            let every = Duration::from_millis(spec.every_ms.max(10));
            let ckpt_dir = launch.checkpoint_dir.clone();
            let log = Arc::clone(&log);
            let stores = Arc::clone(stores);
            Some(std::thread::spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(every) {
                    if let Err(e) = sync_once(&stores, &mut c, &ckpt_dir) {
                        log.line(
                            "err",
                            &format!("sluice-runtime: checkpoint sync failed, will retry: {e}"),
                        );
                    }
                }
                c
            }))
        }
        _ => None,
    };

    let kill_all = |sig: Signal| {
        for g in &groups {
            let _ = killpg(*g, sig);
        }
    };
    let terminate_file = dir.join(contract::TERMINATE_FILE);
    let begin = Instant::now();
    let timeout = launch.timeout_ms.map(Duration::from_millis);
    let grace = Duration::from_millis(launch.grace_ms);
    let mut stopping: Option<(End, Instant)> = None;
    let mut statuses: Vec<Option<std::process::ExitStatus>> = vec![None; groups.len()];
    let mut failed_rank: Option<usize> = None;
    while statuses.iter().any(Option::is_none) {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok((rank, status)) => {
                let status = status.map_err(io("cannot wait for the program"))?;
                let r = rank as usize;
                if let Some(slot) = statuses.get_mut(r) {
                    *slot = Some(status);
                }
                if !status.success() && stopping.is_none() && groups.len() > 1 {
                    failed_rank = Some(r);
                    log.line(
                        "err",
                        &format!(
                            "sluice-runtime: worker {rank} ended with {}; stopping the others (SIGTERM, SIGKILL in {}ms)",
                            describe(status),
                            grace.as_millis()
                        ),
                    );
                    kill_all(Signal::SIGTERM);
                    stopping = Some((End::Failed, Instant::now()));
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Ok(failed(started_at, "lost track of the program".into()));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Some(t) = file_tail.as_mut() {
            t.poll(&metrics_file, false);
        }
        match stopping {
            None => {
                let why = if term.load(Ordering::Relaxed) || terminate_file.exists() {
                    Some(End::Terminated)
                } else if timeout.is_some_and(|t| begin.elapsed() >= t) {
                    Some(End::Timeout)
                } else {
                    None
                };
                if let Some(end) = why {
                    log.line(
                        "err",
                        &format!(
                            "sluice-runtime: sending SIGTERM ({end:?}); SIGKILL in {}ms",
                            grace.as_millis()
                        ),
                    );
                    kill_all(Signal::SIGTERM);
                    stopping = Some((end, Instant::now()));
                }
            }
            Some((_, since)) if since.elapsed() >= grace => kill_all(Signal::SIGKILL),
            Some(_) => {}
        }
    }
    // The status that decides: the worker that failed first, else rank 0.
    let status = failed_rank
        .and_then(|r| statuses.get(r).copied().flatten())
        .or_else(|| statuses.first().copied().flatten())
        .ok_or_else(|| io("cannot wait for the program")(std::io::Error::other("no status")))?;
    // Readers end when every process holding the pipes has exited; leftovers of the groups
    // that keep them open (a `sleep &`) are ended with the step.
    // (Waiting on the channel, not polling: a no-op step must not pay a sleep.)
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut open = readers.len();
    while open > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        match done.recv_timeout(left) {
            Ok(()) => open -= 1,
            Err(_) => {
                kill_all(Signal::SIGKILL);
                break;
            }
        }
    }
    for r in readers {
        let _ = r.join();
    }
    if let Some(t) = file_tail.as_mut() {
        t.poll(&metrics_file, true);
    }
    // The final sync, whatever the exit, with retries: the next attempt resumes from it.
    drop(stop_sync);
    if let Some(mut c) = syncer.and_then(|h| h.join().ok()) {
        let mut wait = Duration::from_millis(200);
        for tries in 1..=5 {
            match sync_once(stores, &mut c, &launch.checkpoint_dir) {
                Ok(()) => break,
                Err(e) => {
                    log.line(
                        "err",
                        &format!(
                            "sluice-runtime: final checkpoint sync failed (try {tries} of 5): {e}"
                        ),
                    );
                    std::thread::sleep(wait);
                    wait *= 2;
                }
            }
        }
    }
    use std::os::unix::process::ExitStatusExt;
    let tail_of = |rank: usize| tails.get(rank).map(|t| t.lines()).unwrap_or_default();
    let exit_code = status.code();
    let signal = status.signal();
    let mut result = contract::Result {
        end: End::Failed,
        exit_code,
        signal,
        started_at: started_at.to_owned(),
        ended_at: String::new(),
        reason: match (failed_rank, signal) {
            (Some(rank), _) => Some(with_tail(
                format!(
                    "worker {rank} of {} ended with {}; the gang was stopped",
                    groups.len(),
                    describe(status)
                ),
                &tail_of(rank),
            )),
            // Stopped from outside (cancel, preemption, timeout): the engine says why.
            (None, Some(s)) if stopping.is_some() => Some(format!("killed by signal {s}")),
            (None, Some(s)) => Some(with_tail(format!("killed by signal {s}"), &tail_of(0))),
            (None, None) if !status.success() && stopping.is_none() => {
                Some(with_tail(describe(status), &tail_of(0)))
            }
            (None, None) => None,
        },
        metrics: BTreeMap::new(),
    };
    if let Some((end, _)) = stopping {
        result.end = end;
    } else if status.success() {
        result.end = End::Succeeded;
        for name in &launch.outputs {
            let from = launch.output_dir.join(name);
            if !from.exists() {
                result.end = End::Failed;
                result.reason = Some(format!(
                    "output '{name}' was not written to $SLUICE_OUTPUT_DIR/{name}"
                ));
                break;
            }
            let key = format!("{}/{name}", launch.outputs_key);
            let stored = match &objects {
                // Taken, not copied: renamed into a folder store on this filesystem.
                Some(objects) => match stores.block_on(objects.take_path(
                    &from,
                    &key,
                    stores.links(&launch.output_dir),
                )) {
                    Ok(r) => r.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                },
                None => Err("no object store".to_owned()),
            };
            if let Err(e) = stored {
                result.end = End::Failed;
                result.reason = Some(format!("cannot store output '{name}': {e}"));
                break;
            }
        }
    }
    result.metrics = metrics::values(&metrics_file, &launch.collect.strategies);
    result.ended_at = now_rfc3339();
    Ok(result)
}
