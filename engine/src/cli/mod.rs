//! The command line: clap definitions and dispatch, one file per command.

pub mod delete;
mod exit;
mod gc;
pub mod home;
mod lint;
mod logs;
pub mod output;
mod progress;
mod remote;
mod run;
pub mod schedules;
mod server;
mod simulate;
pub mod status;
mod sweep;
mod token;
pub mod usage;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use exit::{Error, Outcome};
use output::Format;

/// sluice: pipelines, sweeps and schedules for ML training on shared GPU clusters.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, propagate_version = true)]
pub struct Cli {
    /// Output format: human text, or one JSON document on standard output.
    #[arg(long, global = true, value_enum, default_value_t = Format::Text)]
    pub output: Format,

    /// Where state and objects live. Default: the nearest .sluice folder here or above (as
    /// git finds .git), else .sluice at the top of the enclosing git repository, else
    /// ./.sluice. Commands that only read never create one.
    #[arg(long, global = true, env = "SLUICE_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    /// The state store: sqlite://PATH or postgres://USER:PASSWORD@HOST:PORT/DATABASE.
    /// Default: the store the home remembers (a Cluster's `state:` used by a run), else
    /// sluice.db in the home. Give it before the command (`sluice --state URL runs`): after
    /// `runs`, --state filters the list by run state.
    #[arg(long = "state", env = "SLUICE_STATE", value_name = "URL")]
    pub state: Option<String>,

    /// A sluice server to talk to instead of a local home (http://HOST:PORT); the token is
    /// read from SLUICE_TOKEN. `lint`, `simulate` and `server` stay local.
    #[arg(long, global = true, env = "SLUICE_SERVER", value_name = "URL")]
    pub server: Option<String>,

    /// More log detail (repeat for more); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log format on standard error.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate pipeline files and folders without running anything.
    ///
    /// Every problem of every file is reported as PATH:LINE:COL: error: MESSAGE, with
    /// help: lines where a fix can be suggested. Folders are searched recursively for
    /// *.yaml and *.yml files (hidden folders are skipped). Exits 0 when there is no
    /// error, 2 otherwise.
    Lint(lint::Args),
    /// Run a pipeline to its end, showing progress.
    ///
    /// Ctrl-C cancels the run (steps get SIGTERM, then the grace period) and exits 130; a
    /// second Ctrl-C exits at once and leaves running steps to `sluice resume`. Exits 0 when
    /// the run succeeds, 1 when it fails or is cancelled from elsewhere.
    Run(run::RunArgs),
    /// Run a sweep: a sweep file, or the one-line form with -p specs and -- COMMAND.
    ///
    /// Shows live progress (trials done, running, failed, stopped; the best so far), ends with
    /// a table of the best trials, and with --output json prints the run with its best trial
    /// and every trial. Exits 0 when the sweep succeeds, 1 when it fails.
    Sweep(sweep::SweepArgs),
    /// List runs, newest first.
    Runs(status::RunsArgs),
    /// A run's steps with their state, attempts, durations, reasons and metrics.
    Status(status::StatusArgs),
    /// A step's output, or every step's (each line marked with its step) without STEP; live
    /// with -f until the run ends.
    Logs(logs::Args),
    /// Continue a run whose engine died, reattaching to steps still running.
    Resume(run::RunRef),
    /// Rerun what failed or was cancelled in an ended run, reusing what succeeded.
    Retry(run::RunRef),
    /// Stop a run and its running steps.
    Cancel(run::CancelArgs),
    /// Preempt a running step as the scheduler would: it resumes from its checkpoint.
    ///
    /// Exits 0 once the request is recorded (the step's runtime stops it within a moment),
    /// 2 if the step is not running.
    Preempt(run::PreemptArgs),
    /// Remove ended runs with their attempts' folders, logs, outputs and checkpoints.
    ///
    /// Cache entries pointing at their outputs are dropped. A running run is refused (exit 2)
    /// and then nothing is deleted; a delete cut off half-way leaves the run `Deleting`, and
    /// running it again finishes it.
    Delete(delete::Args),
    /// Delete ended runs older than --older-than, but the newest --keep-last of each name,
    /// and the files of runs no longer in the store.
    ///
    /// Prints what it removed and the space freed; with --dry-run, what it would remove.
    Gc(gc::Args),
    /// Replay a workload through the scheduler in virtual time, once per policy.
    ///
    /// Reports per policy: GPU utilization, queue waits (p50/p95/p99, per team and per
    /// priority), Jain's fairness index, preemptions, GPU-hours lost to preemption and cost
    /// per team; --output json gives the contract's shape, byte-identical for the same inputs.
    Simulate(simulate::Args),
    /// Register Pipeline, Sweep and Schedule documents for the team, as `kubectl apply`.
    ///
    /// Prints one line per document (`pipeline/retrain created`, `schedule/nightly
    /// configured`, `pipeline/old unchanged`, `schedule/gone pruned`). Every document is
    /// validated first; if any is invalid nothing is applied (exit 2).
    Apply(schedules::ApplyArgs),
    /// Run an applied pipeline or sweep by name.
    Submit(schedules::SubmitArgs),
    /// The team's schedules: each one's last and next fire.
    Schedules,
    /// Schedules: `sluice schedule next FILE_OR_NAME` prints the next fire times.
    Schedule(schedules::ScheduleArgs),
    /// Serve the HTTP API and drive every run of the state store, for many teams.
    ///
    /// Runs submitted through it (`sluice --server URL run FILE`) are driven by it, with one
    /// scheduler over all of them; runs whose engine died are adopted. SIGTERM or Ctrl-C stops
    /// it gracefully and leaves running steps to the next server. Tokens: `sluice token`.
    Server(server::Args),
    /// Make, list and revoke the tokens clients of a server use (one team, one role each).
    Token(token::Args),
    /// GPU-hours, CPU-hours, cost (from the pools' prices) and wasted GPU-hours per team, pool
    /// or pipeline, from the recorded attempts; running ones count up to now.
    Usage(usage::Args),
    /// The step runtime built into this binary (what `sluice-runtime` does): `sluice runtime
    /// serve`, `sluice runtime exec DIR`. The engine uses it when no `sluice-runtime` binary is
    /// found, so that `sluice` alone is enough on a machine.
    #[command(hide = true)]
    Runtime {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Runs the command line and returns the exit code.
pub fn main() -> ExitCode {
    // Installed or linked under the runtime's name, this binary is the runtime.
    let invoked = std::env::args_os().next().map(PathBuf::from);
    if invoked
        .as_deref()
        .and_then(std::path::Path::file_name)
        .is_some_and(|n| n == "sluice-runtime")
    {
        let args: Vec<String> = std::env::args().skip(1).collect();
        return sluice_runtime::cli::main(&args);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    ExitCode::SUCCESS
                }
                _ => Outcome::Invalid.into(),
            };
        }
    };
    if let Command::Runtime { args } = &cli.command {
        return sluice_runtime::cli::main(args);
    }
    init_logs(cli.verbose, cli.log_format);
    if let Some(url) = &cli.state
        && let Err(e) = crate::store::choose(url)
    {
        output::say(format_args!("sluice: error: {e}"));
        return Error::Store(e).outcome().into();
    }
    let result = match &cli.command {
        Command::Lint(args) => lint::run(args, cli.output),
        Command::Simulate(args) => simulate::run(args, cli.output),
        Command::Server(args) => server::run(&home::Home::resolve(cli.home.as_deref()), args),
        command => {
            if let Some(url) = &cli.server
                && let Err(e) = remote::connect(url)
            {
                e.report();
                return e.outcome().into();
            }
            let home = home::Home::resolve(cli.home.as_deref());
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Err(e) => Err(Error::Io {
                    context: "cannot start the async runtime".into(),
                    source: e,
                }),
                Ok(rt) => rt.block_on(dispatch(&home, command, cli.output)),
            }
        }
    };
    match result {
        Ok(outcome) => outcome.into(),
        Err(e) => {
            e.report();
            e.outcome().into()
        }
    }
}

/// The commands that use a home.
async fn dispatch(home: &home::Home, command: &Command, format: Format) -> Result<Outcome, Error> {
    if let Some(c) = remote::server() {
        return remote_dispatch(c, home, command, format).await;
    }
    let path = home.path.as_path();
    match command {
        Command::Token(a) => token::run(home, a, format).await,
        Command::Apply(a) => schedules::apply(home, a, format).await,
        Command::Submit(a) => submit_local(home, a, format).await,
        Command::Schedules => schedules::schedules(home, format).await,
        Command::Schedule(a) => schedules::next(a, format).await,
        Command::Run(a) => run::run(path, a, format).await,
        Command::Sweep(a) => sweep::sweep(path, a, format).await,
        Command::Resume(a) => run::resume(home, a, format).await,
        Command::Retry(a) => run::retry(home, a, format).await,
        Command::Cancel(a) => run::cancel(home, a, format).await,
        Command::Preempt(a) => run::preempt(home, a, format).await,
        Command::Delete(a) => delete::run(home, a, format).await,
        Command::Gc(a) => gc::run(home, a, format).await,
        Command::Status(a) => {
            let store = existing(home, &a.run).await?;
            match status::status(&store, a, format).await {
                // Not a run: perhaps a schedule.
                Err(Error::Service(crate::service::Error::NotFound(m))) => {
                    match schedules::status(home, &a.run, format).await? {
                        Some(done) => Ok(done),
                        None => Err(Error::Service(crate::service::Error::NotFound(m))),
                    }
                }
                other => other,
            }
        }
        Command::Runs(a) => match crate::store::Store::open_existing(path).await? {
            Some(store) => status::runs(&store, a, format).await,
            None => status::no_runs(home, format),
        },
        Command::Logs(a) => {
            let store = existing(home, &a.run).await?;
            logs::run(&store, a, format).await
        }
        Command::Usage(a) => usage::run(home, a, format).await,
        Command::Lint(_) | Command::Simulate(_) | Command::Server(_) | Command::Runtime { .. } => {
            Ok(Outcome::Success)
        }
    }
}

/// The commands against a server (`--server`).
async fn remote_dispatch(
    c: &crate::client::Client,
    home: &home::Home,
    command: &Command,
    format: Format,
) -> Result<Outcome, Error> {
    let path = home.path.as_path();
    match command {
        // Both go through `run::start`, which submits to the server.
        Command::Run(a) => run::run(path, a, format).await,
        Command::Sweep(a) => sweep::sweep(path, a, format).await,
        Command::Runs(a) => remote::runs(c, a, format).await,
        Command::Status(a) => match remote::status(c, a, format).await {
            Err(Error::Client(crate::client::Error::Refused(r))) if r.status == 404 => {
                match schedules::status(home, &a.run, format).await? {
                    Some(done) => Ok(done),
                    None => Err(Error::Client(crate::client::Error::Refused(r))),
                }
            }
            other => other,
        },
        Command::Apply(a) => schedules::apply(home, a, format).await,
        Command::Submit(a) => remote::submit(c, a, format).await,
        Command::Schedules => schedules::schedules(home, format).await,
        Command::Schedule(a) => schedules::next(a, format).await,
        Command::Logs(a) => remote::logs(c, a, format).await,
        Command::Cancel(a) => remote::cancel(c, a, format).await,
        Command::Retry(a) => remote::retry(c, a, format).await,
        Command::Resume(a) => remote::resume(c, a, format).await,
        Command::Preempt(a) => remote::preempt(c, a, format).await,
        Command::Token(a) => remote::token(c, &a.command, format).await,
        Command::Usage(a) => remote::usage(c, a, format).await,
        Command::Delete(_) | Command::Gc(_) => Err(Error::Usage(format!(
            "`delete` and `gc` work on a local home, not through a server ({}): run them on the server's host",
            c.base()
        ))),
        Command::Lint(_) | Command::Simulate(_) | Command::Server(_) | Command::Runtime { .. } => {
            Ok(Outcome::Success)
        }
    }
}

/// `sluice submit NAME` on a home: the applied pipeline's text, run as `sluice run` runs a
/// file.
async fn submit_local(
    home: &home::Home,
    a: &schedules::SubmitArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let store = existing(home, &a.name).await?;
    let service = crate::service::Service::new(store, crate::clock::system());
    let request = service
        .applied_request(
            &crate::service::Principal::local(),
            &a.name,
            a.params.clone(),
        )
        .await?;
    let args = run::RunArgs {
        file: request.shown.clone().into(),
        params: a.params.clone(),
        name: None,
        detach: a.detach,
        cluster: None,
        objects: None,
    };
    run::start(
        &home.path,
        &request.shown,
        request.text,
        &request.workdir,
        &args,
        request.applied_version,
        format,
    )
    .await
}

/// The store of a home that must exist already (a command about run `run`): a missing home is
/// no such run, exit 2, and is not created.
pub(crate) async fn existing(home: &home::Home, run: &str) -> Result<crate::store::Store, Error> {
    match crate::store::Store::open_existing(&home.path).await? {
        Some(store) => Ok(store),
        None => Err(Error::Usage(format!("no run '{run}': {}", home.missing()))),
    }
}

fn init_logs(verbose: u8, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(|| output::QuietStderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
