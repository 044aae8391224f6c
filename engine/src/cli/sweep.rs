//! `sluice sweep`: a sweep file, or the one-line form built from flags, run as `sluice run`
//! runs a file (the one-line form becomes a Sweep document, kept with the run, so that
//! `resume` and `status` read it like any other).

use std::path::{Path, PathBuf};

use super::exit::{Error, Outcome};
use super::output::Format;
use super::run::{RunArgs, start};
use crate::spec::oneline;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    sluice sweep examples/sweeps/lr-search.yaml\n  \
    sluice sweep --name quick -p lr=log:1e-5:1e-1 -p layers=int:2:8 -p opt=choice:adam,sgd \\\n    \
    --objective minimize:loss --algorithm tpe --trials 50 --parallel 4 \\\n    \
    -- python3 train.py --lr {{params.lr}} --layers {{params.layers}} --opt {{params.opt}}")]
pub struct SweepArgs {
    /// A sweep file (kind: Sweep, or a Katib Experiment). Without it, the words after `--`
    /// are the trial's command.
    pub file: Option<PathBuf>,
    /// A parameter: a space (float:MIN:MAX, log:MIN:MAX, int:MIN:MAX, choice:A,B,C) to search,
    /// or a literal to fix. With a file, it replaces that parameter of the file.
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The sweep's name (one-line form).
    #[arg(long, default_value = "sweep")]
    pub name: String,
    /// What to optimize, GOAL:METRIC (one-line form): maximize:accuracy, minimize:loss.
    #[arg(long, value_name = "GOAL:METRIC")]
    pub objective: Option<String>,
    /// grid, random, sobol, tpe or asha (one-line form).
    #[arg(long, default_value = "tpe")]
    pub algorithm: String,
    /// How many trials (one-line form; a grid defaults to all its points).
    #[arg(long)]
    pub trials: Option<u64>,
    /// How many trials run at once (one-line form).
    #[arg(long, default_value_t = 1)]
    pub parallel: u32,
    /// The seed: the same seed proposes the same trials (one-line form).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The sweep fails once this many trials failed (one-line form).
    #[arg(long, value_name = "N")]
    pub max_failed: Option<u64>,
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
            run_args.file = file.clone();
            run_args.params = args.params.clone();
            super::run::run(home, &run_args, format).await
        }
        (Some(_), false) => Err(Error::Usage(
            "give a sweep file or a command after --, not both".into(),
        )),
        (None, true) => Err(Error::Usage(
            "give a sweep file (sluice sweep FILE) or the trial's command after -- (see sluice sweep --help)".into(),
        )),
        (None, false) => {
            let text = document(args).map_err(Error::Usage)?;
            let workdir = std::env::current_dir().map_err(|e| Error::Io {
                context: "cannot find the current folder".into(),
                source: e,
            })?;
            start(home, "(sluice sweep)", text, &workdir, &run_args, format).await
        }
    }
}

/// The Sweep document the one-line form stands for (JSON, which YAML reads).
fn document(args: &SweepArgs) -> Result<String, String> {
    let objective = args.objective.as_deref().ok_or(
        "the one-line form needs --objective GOAL:METRIC (for example --objective maximize:accuracy)",
    )?;
    let (goal, metric) = objective
        .split_once(':')
        .filter(|(g, m)| matches!(*g, "maximize" | "minimize") && !m.is_empty())
        .ok_or_else(|| {
            format!("--objective {objective}: expected maximize:METRIC or minimize:METRIC")
        })?;
    if args.params.is_empty() {
        return Err("the one-line form needs at least one -p NAME=SPEC to search (for example -p lr=log:1e-5:1e-1)".into());
    }
    let mut params = serde_json::Map::new();
    for p in &args.params {
        let (name, value) = oneline::split(p)?;
        params.insert(name.to_owned(), oneline::parse(name, value)?.to_json());
    }
    let mut budget = serde_json::json!({"parallelism": args.parallel});
    match args.trials {
        Some(n) => budget["maxTrials"] = n.into(),
        None if args.algorithm != "grid" => {
            return Err(format!(
                "--algorithm {}: say how many trials with --trials N",
                args.algorithm
            ));
        }
        None => {}
    }
    if let Some(n) = args.max_failed {
        budget["maxFailedTrials"] = n.into();
    }
    let doc = serde_json::json!({
        "apiVersion": "sluice.dev/v1",
        "kind": "Sweep",
        "metadata": {"name": args.name},
        "spec": {
            "objective": {"metric": metric, "goal": goal},
            "algorithm": {"name": args.algorithm, "seed": args.seed},
            "budget": budget,
            "params": params,
            "trial": {"command": args.command},
        },
    });
    serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())
}
