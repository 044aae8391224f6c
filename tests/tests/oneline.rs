//! The one-line sweep (`sluice sweep [OPTIONS] -- COMMAND`) end to end: ASHA and Hyperband
//! from `--resource`, grids over stepped floats, and every usage error naming the flag the
//! user wrote (never the document the form is turned into).

use sluice_e2e::Sandbox;

/// An ASHA trial: `epochs` is its budget; it continues from the epoch in its checkpoint and
/// records every epoch it runs in `epochs-N`.
const BUDGETED_TRIAL: &str = r#"
import os, sys
q, epochs = float(sys.argv[1]), int(sys.argv[2])
n = os.environ["SLUICE_TRIAL"]
ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "epoch")
start = int(open(ck).read()) if os.path.exists(ck) else 0
for e in range(start + 1, epochs + 1):
    print(f"epoch={e} loss={q + 1.0 / e:.5f}", flush=True)
    open(f"epochs-{n}", "a").write(f"{e}\n")
    open(ck + ".tmp", "w").write(str(e)); os.replace(ck + ".tmp", ck)
"#;

fn json_of(out: &sluice_e2e::Ran) -> serde_json::Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", out.stdout, out.stderr))
}

fn epochs_run(sb: &Sandbox, trial: u64) -> Vec<u32> {
    std::fs::read_to_string(sb.path().join(format!("epochs-{trial}")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// `sluice sweep --algorithm ALG --resource epochs=1:3 ...` on the budgeted trial.
fn budgeted(sb: &Sandbox, algorithm: &str, trials: &str) -> serde_json::Value {
    sb.write("train.py", BUDGETED_TRIAL);
    let out = sb.run(&[
        "sweep",
        "--name",
        algorithm,
        "-p",
        "q=float:0:1",
        "--algorithm",
        algorithm,
        "--resource",
        "epochs=1:3",
        "--eta",
        "3",
        "--trials",
        trials,
        "--parallel",
        "2",
        "--seed",
        "4",
        "--objective",
        "minimize:loss",
        "--output",
        "json",
        "--",
        "python3",
        "train.py",
        "{{params.q}}",
        "{{params.epochs}}",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    json_of(&out)
}

/// Each trial ran on a rung's budget (1 or 3 epochs); a promoted one continued from its
/// checkpoint (each epoch once), it did not start over.
fn assert_promoted_from_checkpoints(sb: &Sandbox, v: &serde_json::Value, trials: usize) {
    let all = v["trials"].as_array().expect("trials");
    assert_eq!(all.len(), trials, "{v}");
    let mut promoted = 0;
    for t in all {
        let n = t["trial"].as_u64().expect("trial number");
        let budget = t["params"]["epochs"].as_u64().expect("epochs is an int");
        assert!(budget == 1 || budget == 3, "trial {n}: {t}");
        assert_eq!(
            epochs_run(sb, n),
            (1..=budget as u32).collect::<Vec<_>>(),
            "trial {n}"
        );
        promoted += usize::from(budget == 3);
    }
    assert!(promoted >= 1, "no trial was promoted: {v}");
    assert_eq!(v["best"]["params"]["epochs"], 3, "{v}");
}

#[test]
fn asha_runs_from_the_one_line_form_with_a_resource() {
    let sb = Sandbox::new("oneline-asha");
    let v = budgeted(&sb, "asha", "6");
    assert_promoted_from_checkpoints(&sb, &v, 6);
}

#[test]
fn hyperband_runs_from_the_one_line_form_with_a_resource() {
    // R = 3, eta = 3: the first bracket runs 3 trials on 1 epoch and its best on 3.
    let sb = Sandbox::new("oneline-hyperband");
    let v = budgeted(&sb, "hyperband", "4");
    assert_promoted_from_checkpoints(&sb, &v, 4);
}

#[test]
fn grid_searches_stepped_floats_and_ints_exactly() {
    let sb = Sandbox::new("oneline-grid");
    let out = sb.run(&[
        "sweep",
        "-p",
        "d=float:0:0.5:0.25",
        "-p",
        "n=int:1:3:2",
        "--algorithm",
        "grid",
        "--parallel",
        "3",
        "--objective",
        "minimize:loss",
        "--output",
        "json",
        "--",
        "sh",
        "-c",
        "echo loss={{params.d}}",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let mut seen: Vec<(String, u64)> = v["trials"]
        .as_array()
        .expect("trials")
        .iter()
        .map(|t| {
            (
                t["params"]["d"].to_string(),
                t["params"]["n"].as_u64().expect("n"),
            )
        })
        .collect();
    seen.sort();
    let want: Vec<(String, u64)> = ["0.0", "0.25", "0.5"]
        .iter()
        .flat_map(|d| [((*d).to_owned(), 1), ((*d).to_owned(), 3)])
        .collect();
    assert_eq!(seen, want, "{v}");
    assert_eq!(v["best"]["params"]["d"], 0.0, "{v}");
}

/// Each bad one-line sweep is exit 2 with exactly this on standard error, naming the flag;
/// nothing is started.
#[test]
fn every_usage_error_names_the_flag_the_user_wrote() {
    let sb = Sandbox::new("oneline-errors");
    sb.write("s.yaml", SWEEP_FILE);
    let ok = ["-p", "lr=float:0:1", "--objective", "maximize:acc"];
    let with = |extra: &[&'static str], command: &[&'static str]| -> Vec<&'static str> {
        let mut all = vec!["sweep"];
        all.extend(ok);
        all.extend(extra);
        all.push("--");
        all.extend(command);
        all
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            with(
                &["--algorithm", "asha", "--trials", "9"],
                &["t", "{{params.lr}}"],
            ),
            "--algorithm asha: error: asha needs a resource parameter: the budget each trial is given (epochs, steps)\n  \
             help: add --resource epochs=1:27 (its name, the smallest and the largest budget), and pass {{params.epochs}} to the trial\n",
        ),
        (
            with(
                &[
                    "--algorithm",
                    "hyperband",
                    "--trials",
                    "9",
                    "-p",
                    "epochs=int:1:27",
                ],
                &["t", "{{params.epochs}}"],
            ),
            "--algorithm hyperband: error: hyperband needs a resource parameter: the budget each trial is given (epochs, steps)\n  \
             help: declare it with --resource epochs=1:27 in place of its -p (the trial reads it as {{params.epochs}})\n",
        ),
        (
            vec![
                "sweep",
                "-p",
                "lr=log:0:1",
                "--objective",
                "maximize:acc",
                "--trials",
                "3",
                "--",
                "t",
            ],
            "-p lr=log:0:1: error: a log scale needs MIN > 0\n  help: use a small positive MIN: -p lr=log:1e-6:1\n",
        ),
        (
            vec![
                "sweep",
                "-p",
                "lr=float:0:1",
                "--objective",
                "accuracy",
                "--trials",
                "3",
                "--",
                "t",
            ],
            "--objective accuracy: error: expected GOAL:METRIC\n  \
             help: write --objective maximize:accuracy or --objective minimize:accuracy\n",
        ),
        (
            with(&["--algorithm", "tpx", "--trials", "3"], &["t"]),
            "--algorithm tpx: error: unknown algorithm 'tpx'\n  help: did you mean 'tpe'?\n  \
             help: the algorithms are grid, random, sobol, tpe, hyperband, asha\n",
        ),
        (
            with(&[], &["t"]),
            "--trials: error: --algorithm tpe needs a number of trials\n  \
             help: add --trials N, for example --trials 30 (only grid may omit it: it runs every point)\n",
        ),
        (
            with(&["--trials", "3", "--parallel", "0"], &["t"]),
            "--parallel 0: error: at least one trial must run at a time\n  \
             help: --parallel 1 runs the trials one after another\n",
        ),
        (
            with(&["--trials", "3"], &[]),
            "--: error: the one-line form needs the trial's command after --\n  \
             help: for example: -- python3 train.py --lr {{params.lr}} (an argument vector, no shell)\n",
        ),
        (
            with(
                &["--trials", "3"],
                &["python3", "t.py", "--lr", "{{params.lrr}}"],
            ),
            "-- COMMAND (word 4): error: {{params.lrr}}: the sweep has no parameter 'lrr'\n  \
             help: did you mean 'lr'?\n",
        ),
        (
            with(&["--algorithm", "grid"], &["t"]),
            "-p lr=float:0:1: error: grid search needs a step for a float parameter\n  \
             help: give a step: -p lr=float:0:1:0.1 (or use --algorithm random, sobol or tpe)\n",
        ),
        (
            with(&["--trials", "3", "--resource", "epochs=1:27"], &["t"]),
            "--resource epochs=1:27: error: a resource is for --algorithm asha or hyperband (the algorithm is tpe)\n  \
             help: add --algorithm asha, or search it as any parameter: -p epochs=int:1:27\n",
        ),
        (
            with(&["--trials", "3", "--name", "Quick Sweep"], &["t"]),
            "--name Quick Sweep: error: 'Quick Sweep' is not a valid name: it has uppercase letters and it has ' '\n  \
             help: names use lowercase letters, digits and '-', start with a letter and have at most 63 characters: try 'quick-sweep'\n",
        ),
        (
            vec!["sweep", "s.yaml", "--trials", "3"],
            "--trials 3: error: this flag is for the one-line form (sluice sweep [OPTIONS] -- COMMAND)\n  \
             help: a sweep file says it in spec.budget.maxTrials: edit the file, or drop the flag\n",
        ),
        (
            vec!["sweep", "s.yaml", "-p", "layer=3", "-p", "lr=log:0:1"],
            "-p layer=3: error: the sweep has no parameter 'layer'\n  help: did you mean 'layers'?\n  \
             help: its parameters are layers, lr\n\
             -p lr=log:0:1: error: a log scale needs MIN > 0\n  help: use a small positive MIN: -p lr=log:1e-6:1\n",
        ),
    ];
    for (args, want) in cases {
        let out = sb.run(&args);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr, want, "{args:?}");
    }
    // Every case was refused before anything ran.
    let out = sb.run(&["runs", "--output", "json"]);
    assert_eq!(out.stdout.trim(), "[]", "a run was started: {}", out.stderr);
}

const SWEEP_FILE: &str = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: s}
spec:
  objective: {metric: loss, goal: minimize}
  algorithm: {name: random, seed: 7}
  budget: {maxTrials: 2}
  params:
    lr:     {type: float, min: 1.0e-5, max: 1.0e-1, scale: log}
    layers: {type: int, min: 2, max: 8}
  trial:
    command: [echo, "loss={{params.lr}}"]
"#;
