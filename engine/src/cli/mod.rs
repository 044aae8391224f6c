//! The command line: clap definitions and dispatch, one file per command.

mod exit;
mod lint;
pub mod output;

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
}

/// Runs the command line and returns the exit code.
pub fn main() -> ExitCode {
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
    init_logs(cli.verbose, cli.log_format);
    let result = match &cli.command {
        Command::Lint(args) => lint::run(args, cli.output),
    };
    match result {
        Ok(outcome) => outcome.into(),
        Err(e) => {
            eprintln!("sluice: error: {e}");
            e.outcome().into()
        }
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
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
