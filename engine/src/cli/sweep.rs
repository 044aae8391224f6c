//! `sluice sweep`: a sweep file, or the one-line form built from flags, run as `sluice run`
//! runs a file (the one-line form becomes a Sweep document, kept with the run, so that
//! `resume` and `status` read it like any other).

use std::path::{Path, PathBuf};

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use super::run::{RunArgs, start};
use crate::spec::Diagnostic;
use crate::spec::oneline::form;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Parameter specs (-p NAME=SPEC): float:MIN:MAX[:STEP], log:MIN:MAX (log scale), \
    int:MIN:MAX[:STEP], choice:A,B,C, or a literal that fixes the value. grid needs a STEP on \
    every float; for a grid over a log range, list the values with choice:.\n\n\
    Examples:\n  \
    sluice sweep examples/sweeps/lr-search.yaml\n  \
    sluice sweep --name quick -p lr=log:1e-5:1e-1 -p layers=int:2:8 -p opt=choice:adam,sgd \\\n    \
    --objective minimize:loss --algorithm tpe --trials 50 --parallel 4 \\\n    \
    -- python3 train.py --lr {{params.lr}} --layers {{params.layers}} --opt {{params.opt}}\n  \
    sluice sweep -p lr=log:1e-4:1e-1 --resource epochs=1:27 --algorithm asha --trials 40 \\\n    \
    --objective minimize:loss -- python3 train.py --lr {{params.lr}} --epochs {{params.epochs}}\n  \
    sluice sweep -p dropout=float:0:0.5:0.1 -p layers=int:2:8:2 --algorithm grid \\\n    \
    --objective maximize:accuracy -- python3 train.py {{params.dropout}} {{params.layers}}"
)]
pub struct SweepArgs {
    /// A sweep file (kind: Sweep, or a Katib Experiment). Without it, the words after `--`
    /// are the trial's command.
    pub file: Option<PathBuf>,
    /// A parameter: a space to search (float:MIN:MAX[:STEP], log:MIN:MAX, int:MIN:MAX[:STEP],
    /// choice:A,B,C) or a literal to fix. With a file, it replaces that parameter of the file.
    #[arg(short = 'p', long = "param", value_name = "NAME=SPEC")]
    pub params: Vec<String>,
    /// The sweep's name (one-line form; default: sweep). With a file holding several
    /// documents, which one to run.
    #[arg(long)]
    pub name: Option<String>,
    /// What to optimize, GOAL:METRIC (one-line form): maximize:accuracy, minimize:loss.
    #[arg(long, value_name = "GOAL:METRIC")]
    pub objective: Option<String>,
    /// grid, random, sobol, tpe, asha or hyperband (one-line form; default: tpe). asha and
    /// hyperband need --resource.
    #[arg(long)]
    pub algorithm: Option<String>,
    /// How many trials (one-line form; a grid defaults to all its points).
    #[arg(long, value_name = "N")]
    pub trials: Option<u64>,
    /// How many trials run at once (one-line form; default: 1).
    #[arg(long, value_name = "N")]
    pub parallel: Option<u32>,
    /// The seed: the same seed proposes the same trials (one-line form; default: 0).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// The sweep fails once this many trials failed (one-line form).
    #[arg(long, value_name = "N")]
    pub max_failed: Option<u64>,
    /// asha and hyperband (one-line form): the parameter holding a trial's budget and the
    /// smallest and largest budget, e.g. epochs=1:27; the trial reads it as
    /// {{params.epochs}}, and a promoted trial runs again with a larger one, continuing from
    /// what it saved in $SLUICE_CHECKPOINT_DIR.
    #[arg(long, value_name = "NAME=MIN:MAX")]
    pub resource: Option<String>,
    /// asha and hyperband (one-line form): each rung keeps the best 1/N of its trials and
    /// multiplies their budget by N (default: 3).
    #[arg(long, value_name = "N")]
    pub eta: Option<u64>,
    /// Start the sweep in the background and print its run id.
    #[arg(long)]
    pub detach: bool,
    /// Where outputs, logs and checkpoints go (see `sluice run --help`).
    #[arg(long, env = "SLUICE_OBJECTS", value_name = "URL")]
    pub objects: Option<String>,
    /// A Cluster file: trials are admitted onto its nodes by the scheduler, and their starts
    /// obey the team's maxTrialsPerMinute (see `sluice run --help`).
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// The trial's command (one-line form): an argument vector, no shell; {{params.NAME}}
    /// are replaced word by word.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub async fn sweep(home: &Path, args: &SweepArgs, format: Format) -> Result<Outcome, Error> {
    let mut run_args = RunArgs {
        file: PathBuf::new(),
        params: Vec::new(),
        name: None,
        detach: args.detach,
        cluster: args.cluster.clone(),
        objects: args.objects.clone(),
    };
    match (&args.file, args.command.is_empty()) {
        (Some(file), true) => {
            let stray = one_line_only(args);
            if !stray.is_empty() {
                output::diagnostics(&stray);
                return Ok(Outcome::Invalid);
            }
            run_args.file = file.clone();
            run_args.params = args.params.clone();
            run_args.name = args.name.clone();
            super::run::run(home, &run_args, format).await
        }
        (Some(_), false) => Err(Error::Usage(
            "give a sweep file or a command after --, not both".into(),
        )),
        (None, true) if args.objective.is_none() && args.params.is_empty() => Err(Error::Usage(
            "give a sweep file (sluice sweep FILE) or the trial's command after -- (see sluice sweep --help)".into(),
        )),
        (None, _) => {
            let text = match form::document(&flags(args)) {
                Ok(text) => text,
                Err(diags) => {
                    output::diagnostics(&diags);
                    return Ok(Outcome::Invalid);
                }
            };
            let workdir = std::env::current_dir().map_err(|e| Error::Io {
                context: "cannot find the current folder".into(),
                source: e,
            })?;
            start(home, form::SHOWN, text, &workdir, &run_args, None, format).await
        }
    }
}

/// The one-line form's flags, as given.
fn flags(args: &SweepArgs) -> form::Flags {
    form::Flags {
        name: args.name.clone(),
        params: args.params.clone(),
        objective: args.objective.clone(),
        algorithm: args.algorithm.clone(),
        trials: args.trials,
        parallel: args.parallel,
        seed: args.seed,
        max_failed: args.max_failed,
        resource: args.resource.clone(),
        eta: args.eta,
        command: args.command.clone(),
    }
}

/// Flags of the one-line form given with a sweep file, which has its own: each is an error
/// rather than silently ignored.
fn one_line_only(args: &SweepArgs) -> Vec<Diagnostic> {
    let given: [(Option<String>, &str); 8] = [
        (args.objective.clone(), "spec.objective"),
        (args.algorithm.clone(), "spec.algorithm.name"),
        (args.trials.map(|n| n.to_string()), "spec.budget.maxTrials"),
        (
            args.parallel.map(|n| n.to_string()),
            "spec.budget.parallelism",
        ),
        (args.seed.map(|n| n.to_string()), "spec.algorithm.seed"),
        (
            args.max_failed.map(|n| n.to_string()),
            "spec.budget.maxFailedTrials",
        ),
        (args.resource.clone(), "spec.algorithm.settings.resource"),
        (
            args.eta.map(|n| n.to_string()),
            "spec.algorithm.settings.eta",
        ),
    ];
    let flags = [
        "--objective",
        "--algorithm",
        "--trials",
        "--parallel",
        "--seed",
        "--max-failed",
        "--resource",
        "--eta",
    ];
    given
        .iter()
        .zip(flags)
        .filter_map(|((value, field), flag)| {
            let value = value.as_ref()?;
            Some(
                Diagnostic::error(
                    &format!("{flag} {value}"),
                    None,
                    "this flag is for the one-line form (sluice sweep [OPTIONS] -- COMMAND)",
                )
                .with_help(format!(
                    "a sweep file says it in {field}: edit the file, or drop the flag"
                )),
            )
        })
        .collect()
}
