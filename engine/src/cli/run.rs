//! `sluice run`, `resume`, `retry` and `cancel`: starting and driving runs.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format, say};
use super::progress::Progress;
use super::status;
use crate::clock;
use crate::run::state::run as rs;
use crate::run::{self, Driver, Ending, Interrupt};
use crate::service::{self, Preempted, Principal, Retried, Service};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline file.
    pub file: PathBuf,
    /// Set a parameter (repeatable), checked against its declared type.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Which document to run, when the file holds several.
    #[arg(long)]
    pub name: Option<String>,
    /// Start the run in the background and print its id.
    #[arg(long)]
    pub detach: bool,
    /// A Cluster file: steps are admitted onto its nodes by the scheduler (gangs whole,
    /// quotas, fair share, priorities, preemption), with CUDA_VISIBLE_DEVICES from the GPUs
    /// each worker is given on its node. The run keeps it: resume uses the same.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// Where outputs, logs and checkpoints go, as an object store URL (file:///PATH or
    /// s3://BUCKET/PREFIX); default: the Cluster file's `objects`, else file://HOME/objects.
    /// The run keeps it: resume and retry use the same store.
    #[arg(long, env = "SLUICE_OBJECTS", value_name = "URL")]
    pub objects: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RunRef {
    /// A run id, an unambiguous prefix of one, @latest (the newest run) or NAME@latest (the
    /// newest run of that pipeline or sweep).
    pub run: String,
    /// No progress on standard error.
    #[arg(long, hide = true)]
    pub quiet: bool,
    /// This engine was started by `run --detach`: SIGTERM and SIGHUP leave the run's steps
    /// running for `resume` instead of cancelling it.
    #[arg(long, hide = true)]
    pub background: bool,
}

pub async fn run(home: &Path, args: &RunArgs, format: Format) -> Result<Outcome, Error> {
    let shown = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Error::Usage(format!("cannot read {shown}: {e}")))?;
    let workdir = std::fs::canonicalize(&args.file)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    start(home, &shown, text, &workdir, args, None, format).await
}

/// Validates a pipeline or sweep (`text`, read from `shown`), records the run through the
/// service and drives it (or leaves it to a background engine with `--detach`).
/// `applied_version` is the applied document's version the text is (`sluice submit NAME`),
/// which the run records and `status` shows.
pub async fn start(
    home: &Path,
    shown: &str,
    text: String,
    workdir: &Path,
    args: &RunArgs,
    applied_version: Option<i64>,
    format: Format,
) -> Result<Outcome, Error> {
    if let Some(c) = super::remote::server() {
        return super::remote::start(c, shown, text, workdir, args, format).await;
    }
    let who = Principal::local();
    let request = service::Request {
        shown: shown.to_owned(),
        text,
        workdir: workdir.to_path_buf(),
        params: args.params.clone(),
        name: args.name.clone(),
        cluster: args.cluster.clone(),
        objects: args.objects.clone(),
        applied_version,
        schedule: None,
    };
    let mut warn = |d: &[crate::spec::Diagnostic]| output::diagnostics(d);
    let checked = service::submit::check(&who, request, &mut warn)?;
    // Steps run under the runtime: one that cannot be found is an error now, not a failed
    // step after the run has started (and before a home is made for nothing).
    runtime_found()?;
    // The Cluster's `state:` unless --state chose a store; the home remembers it, so that
    // later commands on this home (`status`, `resume`) find the run.
    let cluster_state = match crate::store::chosen() {
        Some(_) => None,
        None => checked.cluster_state()?,
    };
    if let Some(location) = &cluster_state {
        crate::store::choose(&location.url())?;
    }
    let store = Store::open(home).await?;
    if let Some(location) = &cluster_state {
        location.remember(home)?;
    }
    let service = Service::new(store.clone(), clock::system());
    let submitted = service.submit(&who, checked, &mut warn).await?;
    let id = submitted.id;
    if args.detach {
        let pid = start_detached(home, &id)?;
        // The background engine holds the run from now: nobody sees it engine-less while
        // that process gets going (it takes the same lease again when it opens the run).
        let now = crate::time::now_ms();
        let _forced = store
            .take_lease(
                &id,
                &run::engine::process(pid, now + run::engine::LEASE_MS),
                |_| true,
                true,
            )
            .await?;
        match format {
            Format::Json => output::json(&serde_json::json!({ "id": id })),
            Format::Text => output::text(|out| writeln!(out, "{id}")),
        }
        .map_err(Error::output)?;
        return Ok(Outcome::Success);
    }
    if format == Format::Text {
        say(format_args!(
            "run {id} started ({} {shown})",
            submitted.name
        ));
    }
    drive(&service, &id, format, false, true).await
}

/// The runtime steps run under, or exit 3 saying why it cannot be found.
pub fn runtime_found() -> Result<(), Error> {
    crate::executor::local::runtime::command()
        .map(|_| ())
        .map_err(|why| Error::Io {
            context: "cannot run steps".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, why),
        })
}

/// Starts `sluice resume RUN` in the background, in its own process group; returns its PID.
fn start_detached(home: &Path, id: &str) -> Result<u32, Error> {
    let exe = std::env::current_exe().map_err(|e| Error::Io {
        context: "cannot find this program".into(),
        source: e,
    })?;
    let logs = home.join("engines");
    std::fs::create_dir_all(&logs).map_err(|e| Error::Io {
        context: format!("cannot create {}", logs.display()),
        source: e,
    })?;
    let log = std::fs::File::create(logs.join(format!("{id}.log"))).map_err(|e| Error::Io {
        context: "cannot create the engine's log".into(),
        source: e,
    })?;
    let err = log.try_clone().map_err(|e| Error::Io {
        context: "cannot create the engine's log".into(),
        source: e,
    })?;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(exe);
    if let Some(location) = crate::store::chosen() {
        // The background engine uses the same store (the URL may hold a password: it goes
        // through the environment, not the command line other users can see).
        command.env("SLUICE_STATE", location.url());
    }
    let child = command
        .arg("--home")
        .arg(home)
        .arg("resume")
        .arg("--background")
        .arg(id)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| Error::Io {
            context: "cannot start the background engine".into(),
            source: e,
        })?;
    Ok(child.id())
}

/// Drives a run in the foreground until it ends; prints its status; maps it to an exit code.
async fn drive(
    service: &Service,
    id: &str,
    format: Format,
    quiet: bool,
    foreground: bool,
) -> Result<Outcome, Error> {
    let store = service.store();
    // Room held by runs whose engine died is given back before this one waits for it.
    if let Err(e) = run::reap::collect(store, Some(id), service.clock().as_ref()).await {
        tracing::warn!("cannot collect the attempts of runs whose engine is gone: {e}");
    }
    // This process drives one run: its scheduler is its own.
    let schedulers = run::admission::Schedulers::default();
    let opened = match Driver::open(store.clone(), id, &schedulers, service.clock().clone()).await {
        // A run this version cannot drive (what it holds cannot be read or expanded) ends
        // `Failed`, saying why, rather than staying `Running` with no engine.
        Err(run::driver::Error::Invalid(why)) => {
            store
                .commit(
                    id,
                    crate::store::Change {
                        run_end: Some((rs::FAILED.to_owned(), Some(why.clone()))),
                        ..crate::store::Change::default()
                    },
                )
                .await?;
            store.release_lease(id, &run::engine::me(0).owner).await?;
            return Err(Error::Usage(format!("run {id} cannot be driven: {why}")));
        }
        other => other?,
    };
    let driver = match opened {
        Ok(d) => d,
        Err(Ending::Ended(state)) => {
            if !quiet {
                say(format_args!("run {id} already ended: {state}"));
            }
            return finish(service, id, format, state, false).await;
        }
        Err(Ending::Busy(holder)) => {
            return Err(Error::Usage(format!(
                "run {id} is being driven by the engine {holder}; wait for it, or cancel the run"
            )));
        }
        Err(Ending::Detached) => return Ok(Outcome::Interrupted),
    };
    let rx = interrupts(foreground);
    let mut progress = Progress::new(quiet || format == Format::Json);
    let ending = driver.drive(&mut progress, Some(rx)).await;
    progress.finish();
    match ending? {
        Ending::Ended(state) => finish(service, id, format, state, true).await,
        Ending::Detached => Ok(Outcome::Interrupted),
        Ending::Busy(holder) => Err(Error::Usage(format!(
            "run {id} was taken over by the engine {holder}"
        ))),
    }
}

async fn finish(
    service: &Service,
    id: &str,
    format: Format,
    state: rs::RunState,
    interrupted_ok: bool,
) -> Result<Outcome, Error> {
    let v = service.view(&Principal::local(), id).await?;
    match format {
        Format::Json => output::json(&v),
        Format::Text => output::text(|out| status::write_view(out, &v)),
    }
    .map_err(Error::output)?;
    let cancelled_here = interrupted_ok
        && state == rs::CANCELLED
        && INTERRUPTED.load(std::sync::atomic::Ordering::Relaxed);
    Ok(match state {
        rs::SUCCEEDED => Outcome::Success,
        _ if cancelled_here => Outcome::Interrupted,
        _ => Outcome::Unsuccessful,
    })
}

/// Ctrl-C, SIGTERM and SIGHUP to a foreground engine, as presses: the first cancels the run
/// cleanly, the second leaves its running steps to `sluice resume`. SIGTERM is what `kill` and
/// service managers send; SIGHUP is a closed terminal (an SSH session that dropped): either way
/// the engine is going away, and a run left `Running` with nobody driving it would hold the
/// machine's pool. A background engine (`--detach`) told SIGTERM or SIGHUP stops driving and
/// leaves its steps running for `sluice resume` (a shutdown should not throw work away); Ctrl-C
/// does not reach it (it has its own process group).
fn interrupts(foreground: bool) -> mpsc::UnboundedReceiver<Interrupt> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, rx) = mpsc::unbounded_channel();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        let Ok(mut stream) = signal(kind) else {
            tracing::warn!("cannot listen for signal {kind:?}");
            continue;
        };
        let tx = tx.clone();
        let what = if foreground || kind == SignalKind::interrupt() {
            Interrupt::Press
        } else {
            Interrupt::Detach
        };
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
                if tx.send(what).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// Set when this process saw a Ctrl-C (exit 130 rather than 1 for a cancelled run).
pub static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub async fn resume(home: &Home, args: &RunRef, format: Format) -> Result<Outcome, Error> {
    let store = super::existing(home, &args.run).await?;
    runtime_found()?;
    let service = Service::new(store, clock::system());
    let id = service.resume(&Principal::local(), &args.run).await?;
    drive(&service, &id, format, args.quiet, !args.background).await
}

/// `sluice retry RUN`: failed and cancelled steps go back to Pending with a fresh retry
/// budget (`Service::retry`); the run is Running again under its id, driven here.
pub async fn retry(home: &Home, args: &RunRef, format: Format) -> Result<Outcome, Error> {
    let store = super::existing(home, &args.run).await?;
    let service = Service::new(store, clock::system());
    match service.retry(&Principal::local(), &args.run).await? {
        Retried::NothingToRetry { id } => {
            say(format_args!("run {id} succeeded: nothing to retry"));
            Ok(Outcome::Success)
        }
        Retried::Reopened { id, steps } => {
            if format == Format::Text {
                say(format_args!("run {id}: retrying {} step(s)", steps.len()));
            }
            drive(&service, &id, format, false, true).await
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    #[command(flatten)]
    pub run: RunRef,
    /// Return once the cancellation is recorded, without waiting for the run's steps to stop.
    #[arg(long)]
    pub no_wait: bool,
}

/// `sluice cancel RUN`: asks the engine driving it to stop and waits until the run has ended
/// (its steps get SIGTERM, then the grace period); with no engine alive, or once its engine
/// dies, carries the cancellation out itself.
pub async fn cancel(home: &Home, args: &CancelArgs, format: Format) -> Result<Outcome, Error> {
    let store = super::existing(home, &args.run.run).await?;
    let service = Service::new(store.clone(), clock::system());
    let id = match service.cancel(&Principal::local(), &args.run.run).await {
        Ok(id) => id,
        // An ended run: said, and not an error (exit 0).
        Err(service::Error::Conflict {
            message,
            in_the_way: Some(run),
        }) => {
            say(message);
            print_state(&run.run, &run.state, format)?;
            return Ok(Outcome::Success);
        }
        Err(e) => return Err(e.into()),
    };
    let mut told = false;
    let schedulers = run::admission::Schedulers::default();
    loop {
        // If no engine holds the run, this process carries the cancellation out.
        match Driver::open(store.clone(), &id, &schedulers, service.clock().clone()).await? {
            Ok(driver) => {
                let mut progress = Progress::new(format == Format::Json || args.run.quiet);
                driver.drive(&mut progress, None).await?;
                progress.finish();
            }
            Err(Ending::Busy(holder)) if !args.no_wait => {
                if !told {
                    told = true;
                    say(format_args!(
                        "run {id}: cancel requested; waiting for its engine {holder} to stop its steps"
                    ));
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
            Err(Ending::Busy(holder)) => say(format_args!(
                "run {id}: cancel requested; its engine {holder} stops it within a second"
            )),
            Err(_) => {}
        }
        break;
    }
    let state = store.run(&id).await?.state;
    print_state(&id, state.as_str(), format)?;
    Ok(Outcome::Success)
}

/// `{"id": RUN, "state": STATE}` (or `run RUN: STATE`) on standard output.
fn print_state(id: &str, state: &str, format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&serde_json::json!({ "id": id, "state": state })),
        Format::Text => output::text(|out| writeln!(out, "run {id}: {state}")),
    }
    .map_err(Error::output)
}

#[derive(Debug, clap::Args)]
pub struct PreemptArgs {
    /// A run id, an unambiguous prefix of one, @latest or NAME@latest.
    pub run: String,
    /// The running step to preempt (`train`, `evaluate[1]`).
    pub step: String,
}

/// `sluice preempt RUN STEP`: asks the step's runtime to stop it as the scheduler would
/// (SIGTERM, the grace period, SIGKILL, a final checkpoint sync); the engine queues it again
/// at once and it resumes from that checkpoint, not counted against `retry.limit`.
pub async fn preempt(home: &Home, args: &PreemptArgs, format: Format) -> Result<Outcome, Error> {
    let store = super::existing(home, &args.run).await?;
    let service = Service::new(store, clock::system());
    let Preempted { id, step, attempt } = service
        .preempt(&Principal::local(), &args.run, &args.step)
        .await?;
    match format {
        Format::Json => output::json(&serde_json::json!({
            "id": id, "state": rs::RUNNING, "step": step, "attempt": attempt,
        })),
        Format::Text => output::text(|out| {
            writeln!(
                out,
                "preempting {step} (attempt {attempt}) of run {id}: it resumes from its checkpoint"
            )
        }),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}
