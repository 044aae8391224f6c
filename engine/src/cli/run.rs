//! `sluice run`, `resume`, `retry` and `cancel`: starting and driving runs.

use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format, say};
use super::progress::Progress;
use super::status;
use crate::dag;
use crate::run::state::{run as rs, step as st};
use crate::run::{self, Driver, Ending, Interrupt};
use crate::spec::model::Document;
use crate::spec::{self, Diagnostic, params};
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

fn usage_with(diags: Vec<Diagnostic>) -> Outcome {
    output::diagnostics(&diags);
    Outcome::Invalid
}

pub async fn run(home: &Path, args: &RunArgs, format: Format) -> Result<Outcome, Error> {
    let shown = args.file.display().to_string();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Error::Usage(format!("cannot read {shown}: {e}")))?;
    let workdir = std::fs::canonicalize(&args.file)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    start(home, &shown, text, &workdir, args, format).await
}

/// Validates a pipeline or sweep (`text`, read from `shown`), records the run and drives it
/// (or leaves it to a background engine with `--detach`).
pub async fn start(
    home: &Path,
    shown: &str,
    text: String,
    workdir: &Path,
    args: &RunArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let shown = shown.to_owned();
    let mut loaded = spec::load(&shown, text.clone());
    let diagnostics = std::mem::take(&mut loaded.diagnostics);
    if diagnostics.has_errors() {
        let d = diagnostics.into_sorted();
        return Ok(usage_with(
            d.into_iter()
                .filter(|d| d.severity == spec::Severity::Error)
                .collect(),
        ));
    }
    // What lint would warn about is said here too (`bayesianoptimization runs as tpe`).
    output::diagnostics(
        &diagnostics
            .into_sorted()
            .into_iter()
            .filter(|d| d.severity == spec::Severity::Warning)
            .collect::<Vec<_>>(),
    );
    let candidates: Vec<&Document> = loaded
        .documents
        .iter()
        .filter(|d| args.name.as_ref().is_none_or(|n| &d.metadata().name == n))
        .collect();
    let doc = match candidates.as_slice() {
        [one] => *one,
        [] => {
            let names: Vec<&str> = loaded
                .documents
                .iter()
                .map(|d| d.metadata().name.as_str())
                .collect();
            return Err(Error::Usage(format!(
                "{shown} has no document named '{}'; it has {}",
                args.name.as_deref().unwrap_or(""),
                names.join(", ")
            )));
        }
        many => {
            let names: Vec<&str> = many.iter().map(|d| d.metadata().name.as_str()).collect();
            return Err(Error::Usage(format!(
                "{shown} holds several documents ({}); say which with --name",
                names.join(", ")
            )));
        }
    };
    let of_sweep;
    let mut overrides = None;
    let pipeline = match doc {
        Document::Pipeline(p) => p,
        Document::Sweep(s) => {
            let mut s = (**s).clone();
            match spec::oneline::apply_args(&mut s, &args.params) {
                Ok(pairs) => overrides = Some(pairs),
                Err(diags) => return Ok(usage_with(diags)),
            }
            of_sweep = crate::spec::model::Pipeline::of_sweep(&s, &shown);
            &of_sweep
        }
        Document::Pending(p) => {
            let what = match p.kind.as_str() {
                "Cluster" => "a Cluster file configures the engine: pass it with --cluster",
                "Schedule" => {
                    "schedules run under `sluice server`, which is not available in this version"
                }
                "Workload" => {
                    "a Workload is replayed in virtual time: sluice simulate --cluster CLUSTER --workload FILE"
                }
                _ => "this version of sluice cannot run it",
            };
            return Err(Error::Usage(format!(
                "{shown}: kind {} cannot be run: {what}",
                p.kind
            )));
        }
    };
    let mut d = spec::Diagnostics::new(shown.clone());
    let Some(graph) = dag::graph::build(pipeline, &mut d) else {
        return Ok(usage_with(d.into_sorted()));
    };
    if d.has_errors() {
        return Ok(usage_with(d.into_sorted()));
    }
    let values = match overrides {
        // A sweep file's `-p NAME=SPEC` are kept as the run's parameters.
        Some(pairs) => pairs
            .into_iter()
            .map(|(n, v)| (n, crate::spec::model::ParamValue::String(v)))
            .collect(),
        None => match params::resolve(pipeline, &args.params, true) {
            Ok(v) => v,
            Err(errors) => return Ok(usage_with(errors)),
        },
    };
    // A Cluster file: the scheduler admits the run's steps onto its nodes. Checked whole now,
    // with lint's checks of the pipeline against its pools and priority classes.
    let cluster = match &args.cluster {
        None => None,
        Some(file) => {
            let cshown = file.display().to_string();
            let ctext = std::fs::read_to_string(file)
                .map_err(|e| Error::Usage(format!("cannot read {cshown}: {e}")))?;
            let (cloaded, spec) = match spec::cluster::load(&cshown, ctext.clone()) {
                Ok(both) => both,
                Err(diags) => return Ok(usage_with(diags)),
            };
            let mut cd = spec::Diagnostics::new(cshown.clone());
            if let Some(cap) = spec::capacity::read(&cloaded, &mut cd) {
                let mut pd = spec::Diagnostics::new(shown.clone());
                spec::capacity::check(pipeline, &cap, &loaded.source, &mut pd);
                if pd.has_errors() {
                    return Ok(usage_with(
                        pd.into_sorted()
                            .into_iter()
                            .filter(|d| d.severity == spec::Severity::Error)
                            .collect(),
                    ));
                }
            }
            // Settings this engine cannot honour are refused, not ignored.
            if let Some((executor, pos)) = cluster_setting(&cloaded, "executor")
                && executor != "local"
            {
                let d = Diagnostic::error(
                    &cshown,
                    pos,
                    format!("executor: {executor} is not available yet: this sluice runs steps as local processes"),
                )
                .with_help("remove `executor:` or write `executor: local`; the Kubernetes executor comes with the Kubernetes work");
                return Ok(usage_with(vec![d]));
            }
            // The Cluster's `state:` unless --state chose one; the home remembers it below.
            if crate::store::chosen().is_none()
                && let Some((url, pos)) = cluster_setting(&cloaded, "state")
                && let Err(e) = crate::store::choose(&url)
            {
                return Ok(usage_with(vec![Diagnostic::error(
                    &cshown,
                    pos,
                    e.to_string(),
                )]));
            }
            Some((cshown, ctext, spec, cloaded))
        }
    };
    // Steps run under the runtime: one that cannot be found is an error now, not a failed
    // step after the run has started.
    runtime_found()?;
    let store = Store::open(home).await?;
    if let Some(location) = crate::store::chosen()
        && cluster.is_some()
    {
        // Later commands on this home (`sluice status`, `resume`) find the run's store.
        location.remember(home)?;
    }
    let from_cluster = match (&args.objects, &cluster) {
        (None, Some((_, _, _, cloaded))) => cluster_setting(cloaded, "objects").map(|(url, _)| url),
        _ => None,
    };
    let objects = match args.objects.as_ref().or(from_cluster.as_ref()) {
        // `file://.sluice/objects` (as the Cluster example writes it): relative to here.
        Some(url) => match url.strip_prefix("file://") {
            Some(path) if !Path::new(path).is_absolute() => {
                let path = std::path::absolute(path).map_err(|source| Error::Io {
                    context: format!("cannot resolve {url}"),
                    source,
                })?;
                format!("file://{}", path.display())
            }
            _ => url.clone(),
        },
        None => {
            let home = std::fs::canonicalize(home).map_err(|source| Error::Io {
                context: format!("cannot resolve {}", home.display()),
                source,
            })?;
            sluice_runtime::objects::default_url(&home)
        }
    };
    // Checked now, so that a bad store is an error before anything runs.
    let object_store = sluice_runtime::objects::Objects::open(&objects).map_err(Error::objects)?;
    if objects.starts_with("s3://") {
        // A bucket is only reached when a step needs it: reach it now, so that a wrong
        // endpoint, bucket or key is an error before anything runs, not a failed step later.
        let reached = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            object_store.list_under("teams"),
        )
        .await;
        let why = match reached {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("no answer within 20 s".to_owned()),
        };
        if let Some(why) = why {
            return Err(Error::Io {
                context: format!("cannot reach the object store {objects}"),
                source: std::io::Error::other(why),
            });
        }
    }
    // Cluster mode runs steps here too (as processes on the declared nodes' GPUs).
    warn_images(&shown, &text, pipeline);
    let document = (loaded.documents.len() > 1).then(|| pipeline.metadata.name.clone());
    let team = &pipeline.metadata.team;
    let max_queued = cluster.as_ref().and_then(|(_, _, spec, _)| {
        spec.teams
            .iter()
            .find(|t| &t.name == team)
            .and_then(|t| t.max_queued)
    });
    let submitted = run::submit(
        &store,
        pipeline,
        &graph,
        values,
        run::Origin {
            source: &text,
            workdir: &workdir.display().to_string(),
            objects: &objects,
            document,
            cluster: cluster
                .as_ref()
                .map(|(file, text, _, _)| run::cluster::stored(file, text)),
            max_queued,
        },
    )
    .await;
    let id = match (submitted, &cluster) {
        (Ok(id), _) => id,
        (Err(e @ crate::store::Error::QueueFull { .. }), Some((cshown, _, _, loaded))) => {
            let pos = max_queued_pos(loaded, team);
            let d = Diagnostic::error(cshown, pos, format!("run refused: {e}"))
                .with_help("wait for queued steps to start or end, cancel runs with `sluice cancel RUN`, or raise the team's maxQueued");
            return Ok(usage_with(vec![d]));
        }
        (Err(e), _) => return Err(e.into()),
    };
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
            "run {id} started ({} {})",
            pipeline.metadata.name, shown
        ));
    }
    drive(&store, &id, format, false, true).await
}

/// Steps that name an `image` run on this machine, not in it: said once per run, at the
/// first `image:` of the file, so that nobody believes their container was used.
fn warn_images(shown: &str, text: &str, pipeline: &crate::spec::model::Pipeline) {
    let mut images: Vec<&str> = pipeline
        .steps
        .iter()
        .filter_map(|s| s.image.as_deref())
        .collect();
    images.sort_unstable();
    images.dedup();
    let Some(first) = images.first() else {
        return;
    };
    // The first `image:` key, in block (`image: x`) or flow (`{name: a, image: x}`) style.
    let pos = text.lines().enumerate().find_map(|(i, line)| {
        if line.trim_start().starts_with('#') {
            return None;
        }
        let col = line.match_indices("image:").map(|(c, _)| c).find(|&c| {
            line[..c]
                .chars()
                .next_back()
                .is_none_or(|b| matches!(b, ' ' | '\t' | '{' | ',' | '-'))
        })?;
        Some(spec::Pos {
            line: u32::try_from(i + 1).unwrap_or(u32::MAX),
            column: u32::try_from(col + 1).unwrap_or(u32::MAX),
        })
    });
    let more = match images.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    let d = Diagnostic::error(
        shown,
        pos,
        format!(
            "steps name the image '{first}'{more}, which the local executor does not use: their commands run on this machine, with its own tools and files"
        ),
    )
    .with_severity(spec::Severity::Warning)
    .with_help("install what the steps need here; images are used when steps run on Kubernetes (a Cluster with executor: kubernetes)");
    output::diagnostics(&[d]);
}

/// The runtime steps run under, or exit 3 saying why it cannot be found.
fn runtime_found() -> Result<(), Error> {
    run::launch::runtime_command()
        .map(|_| ())
        .map_err(|why| Error::Io {
            context: "cannot run steps".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, why),
        })
}

/// Where `maxQueued` of team `team` is written in a Cluster file.
fn max_queued_pos(loaded: &spec::Loaded, team: &str) -> Option<spec::Pos> {
    let spec = spec::capacity::cluster_document(loaded)?.spec.as_ref()?;
    let teams = spec.get("teams")?.as_seq()?;
    let entry = teams.iter().find(|t| {
        t.get("name")
            .and_then(|n| n.as_scalar())
            .is_some_and(|n| n.text == team)
    })?;
    let map = entry.as_map()?;
    map.iter()
        .find(|e| e.key == "maxQueued")
        .map(|e| e.key_pos)
        .or(Some(entry.pos))
}

/// A scalar setting of a loaded Cluster's `spec` (`objects`, `state`, `executor`) and where
/// it is written, if it sets one.
fn cluster_setting(loaded: &spec::Loaded, name: &str) -> Option<(String, Option<spec::Pos>)> {
    let spec = spec::capacity::cluster_document(loaded)?.spec.as_ref()?;
    let value = spec.get(name)?;
    let pos = spec
        .as_map()
        .and_then(|m| m.iter().find(|e| e.key == name))
        .map(|e| e.key_pos);
    value.as_scalar().map(|v| (v.text.clone(), pos))
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
    store: &Store,
    id: &str,
    format: Format,
    quiet: bool,
    foreground: bool,
) -> Result<Outcome, Error> {
    // Room held by runs whose engine died is given back before this one waits for it.
    if let Err(e) = run::reap::collect(store, Some(id)).await {
        tracing::warn!("cannot collect the attempts of runs whose engine is gone: {e}");
    }
    let opened = match Driver::open(store.clone(), id).await {
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
            return finish(store, id, format, &state, false).await;
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
        Ending::Ended(state) => finish(store, id, format, &state, true).await,
        Ending::Detached => Ok(Outcome::Interrupted),
        Ending::Busy(holder) => Err(Error::Usage(format!(
            "run {id} was taken over by the engine {holder}"
        ))),
    }
}

async fn finish(
    store: &Store,
    id: &str,
    format: Format,
    state: &str,
    interrupted_ok: bool,
) -> Result<Outcome, Error> {
    let v = status::view(store, id).await?;
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
    let id = store.resolve(&args.run).await?;
    drive(&store, &id, format, args.quiet, !args.background).await
}

/// `sluice retry RUN`: failed and cancelled steps go back to Pending with a fresh retry
/// budget (their attempt numbers keep counting); the run is Running again under its id.
pub async fn retry(home: &Home, args: &RunRef, format: Format) -> Result<Outcome, Error> {
    let store = super::existing(home, &args.run).await?;
    let id = store.resolve(&args.run).await?;
    let run = store.run(&id).await?;
    if run.state == rs::RUNNING {
        let how = match run::engine::gone(&run) {
            Some(gone) => format!("{gone}; `sluice resume {id}` continues it"),
            None => "retry it once it has ended".to_owned(),
        };
        return Err(Error::Usage(format!("run {id} is still running; {how}")));
    }
    if run.state == rs::SUCCEEDED {
        say(format_args!("run {id} succeeded: nothing to retry"));
        return Ok(Outcome::Success);
    }
    let mut steps = store.steps(&id).await?;
    let mut again = Vec::new();
    for s in &mut steps {
        if s.state == st::FAILED
            || s.state == st::CANCELLED
            || (s.state == st::SKIPPED && s.name.ends_with("[*]"))
        {
            s.state = st::PENDING.into();
            s.reason = None;
            s.retries_used = 0;
            s.not_before = None;
            s.ended_at = None;
            again.push(s.clone());
        }
    }
    // onExit steps run again too: the run will end again.
    let pipeline = run::driver::pipeline_of(&run)?;
    for s in &mut steps {
        let on_exit = pipeline.step(&s.step).is_some_and(|p| p.on_exit);
        if on_exit && st::is_terminal(&s.state) && !again.iter().any(|a| a.name == s.name) {
            s.state = st::PENDING.into();
            s.reason = None;
            s.ended_at = None;
            again.push(s.clone());
        }
    }
    store.reopen(&id, &again).await?;
    if format == Format::Text {
        say(format_args!("run {id}: retrying {} step(s)", again.len()));
    }
    drive(&store, &id, format, false, true).await
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
    let id = store.resolve(&args.run.run).await?;
    let run = store.run(&id).await?;
    if run.state != rs::RUNNING {
        say(format_args!("run {id} already ended: {}", run.state));
        print_state(&id, &run.state, format)?;
        return Ok(Outcome::Success);
    }
    store.request_cancel(&id).await?;
    let mut told = false;
    loop {
        // If no engine holds the run, this process carries the cancellation out.
        match Driver::open(store.clone(), &id).await? {
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
    print_state(&id, &state, format)?;
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
    let id = store.resolve(&args.run).await?;
    let steps = store.steps(&id).await?;
    let Some(step) = steps.iter().find(|s| s.name == args.step) else {
        let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        let hint = crate::spec::diagnostic::nearest(&args.step, names.iter().copied())
            .map(|n| format!(" (did you mean '{n}'?)"))
            .unwrap_or_default();
        return Err(Error::Usage(format!(
            "run {id} has no step '{}'{hint}",
            args.step
        )));
    };
    let attempt = store
        .attempts(&id)
        .await?
        .into_iter()
        .filter(|a| a.step == args.step && a.state == crate::run::state::attempt::RUNNING)
        .max_by_key(|a| a.number);
    let (Some(attempt), st::RUNNING) = (attempt, step.state.as_str()) else {
        return Err(Error::Usage(format!(
            "step '{}' of run {id} is not running (it is {})",
            args.step, step.state
        )));
    };
    let file = Path::new(&attempt.dir).join(sluice_runtime::contract::TERMINATE_FILE);
    std::fs::write(&file, b"preempt\n").map_err(|source| Error::Io {
        context: format!("cannot ask the runtime to stop ({})", file.display()),
        source,
    })?;
    match format {
        Format::Json => output::json(&serde_json::json!({
            "id": id, "state": rs::RUNNING, "step": args.step, "attempt": attempt.number,
        })),
        Format::Text => output::text(|out| {
            writeln!(
                out,
                "preempting {} (attempt {}) of run {id}: it resumes from its checkpoint",
                args.step, attempt.number
            )
        }),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}
