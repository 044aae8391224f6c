//! Sweeps run end to end: proposals, objectives read from the trials' output, budgets, early
//! stopping, ASHA's promotions through checkpoints, sweeps inside pipelines, and a sweep that
//! survives SIGKILLs of its engine without losing or repeating a trial.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_e2e::{Sandbox, step_states, wait};

/// A trial program: f(lr, layers, opt) = (log10(lr)+2.5)^2 + 0.1(layers-5)^2 - 0.3[opt=adamw]
/// printed as `loss=...`, with side-effect files `starts/N` and `done/N`, and what the
/// runtime told it in `env/N`.
const TRIAL: &str = r#"
import json, math, os, sys
n = os.environ["SLUICE_TRIAL"]
os.makedirs("starts", exist_ok=True); os.makedirs("done", exist_ok=True); os.makedirs("env", exist_ok=True)
open(f"starts/{n}", "a").write("start\n")
lr, layers, opt = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
with open(f"env/{n}", "w") as f:
    json.dump({"params": json.loads(os.environ["SLUICE_PARAMS"]), "argv": sys.argv[1:]}, f)
loss = (math.log10(lr) + 2.5) ** 2 + 0.1 * (layers - 5) ** 2 - 0.3 * (opt == "adamw")
if os.environ.get("FAIL_SGD") and opt == "sgd":
    sys.exit(3)
if os.environ.get("SILENT_ADAM") and opt == "adam":
    sys.exit(0)
print(f"loss={loss:.6f}", flush=True)
open(f"done/{n}", "a").write("done\n")
"#;

fn sweep_file(algorithm: &str, budget: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {{name: s}}
spec:
  objective: {{metric: loss, goal: minimize{extra}}}
  algorithm: {{name: {algorithm}, seed: 7}}
  budget: {budget}
  params:
    lr:     {{type: float, min: 1.0e-5, max: 1.0e-1, scale: log}}
    layers: {{type: int, min: 2, max: 8}}
    opt:    {{type: categorical, values: [adam, sgd, adamw]}}
  trial:
    command: [python3, trial.py, "{{{{params.lr}}}}", "{{{{params.layers}}}}", "{{{{params.opt}}}}"]
    resources: {{cpu: 100m}}
"#
    )
}

fn sandbox(tag: &str, sweep: &str) -> Sandbox {
    let sb = Sandbox::new(tag);
    sb.write("trial.py", TRIAL);
    sb.write("s.yaml", sweep);
    sb
}

fn lines(sb: &Sandbox, dir: &str, n: u64) -> usize {
    std::fs::read_to_string(sb.path().join(dir).join(n.to_string()))
        .map_or(0, |t| t.lines().count())
}

fn json_of(out: &sluice_e2e::Ran) -> serde_json::Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", out.stdout, out.stderr))
}

#[test]
fn a_tpe_sweep_runs_its_trials_and_reports_the_best() {
    let sb = sandbox(
        "sweep-tpe",
        &sweep_file("tpe", "{maxTrials: 24, parallelism: 3}", ""),
    );
    let out = sb.run(&["sweep", "s.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["state"], "Succeeded", "{v}");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 24);
    // The best is the lowest value, and its params are typed.
    let best = &v["best"];
    let min = trials
        .iter()
        .filter_map(|t| t["value"].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert_eq!(best["value"].as_f64(), Some(min), "{v}");
    assert!(best["params"]["lr"].is_f64(), "{best}");
    assert!(best["params"]["layers"].is_i64(), "{best}");
    assert!(best["params"]["opt"].is_string(), "{best}");
    // TPE found the good region (random search's median best over 24 trials is about 0.25).
    assert!(min < 0.5, "best {min}");
    for t in trials {
        let n = t["trial"].as_u64().expect("number");
        assert_eq!(t["state"], "Succeeded");
        assert_eq!(lines(&sb, "done", n), 1, "trial {n}");
        // The trial saw its own proposal: in SLUICE_PARAMS and in its arguments.
        let env: serde_json::Value = serde_json::from_slice(
            &std::fs::read(sb.path().join(format!("env/{n}"))).expect("env file"),
        )
        .expect("json");
        assert_eq!(env["params"], t["params"], "trial {n}");
        assert_eq!(
            env["argv"][2].as_str(),
            t["params"]["opt"].as_str(),
            "trial {n}"
        );
    }
    // `status` of the run shows the same.
    let status = sb.status(&sb.last_run());
    assert_eq!(status["best"], v["best"]);
    // The text form ends with the best trials, best first.
    let text = sb.run(&["status", &sb.last_run()]);
    assert!(
        text.stdout.contains("24 trial(s): 24 succeeded"),
        "{}",
        text.stdout
    );
    let first_row = text
        .stdout
        .lines()
        .skip_while(|l| !l.contains("TRIAL"))
        .nth(1)
        .expect("a best trial row");
    assert!(
        first_row
            .trim_start()
            .starts_with(&best["trial"].to_string()),
        "{}",
        text.stdout
    );
}

#[test]
fn a_grid_sweep_visits_exactly_the_grid() {
    let sweep = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: g}
spec:
  objective: {metric: loss, goal: minimize}
  algorithm: {name: grid}
  budget: {parallelism: 4}
  params:
    a: {type: int, min: 1, max: 3}
    b: {type: categorical, values: [x, y]}
    c: {type: float, min: 0.0, max: 0.5, step: 0.25}
  trial:
    run: echo "loss={{params.a}}" && echo "{{params.a}} {{params.b}} {{params.c}}" >> seen
"#;
    let sb = Sandbox::new("sweep-grid");
    sb.write("g.yaml", sweep);
    let out = sb.run(&["sweep", "g.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let seen = std::fs::read_to_string(sb.path().join("seen")).expect("seen");
    let mut points: Vec<&str> = seen.lines().collect();
    points.sort_unstable();
    let mut want = Vec::new();
    for a in 1..=3 {
        for b in ["x", "y"] {
            for c in ["0.0", "0.25", "0.5"] {
                want.push(format!("{a} {b} {c}"));
            }
        }
    }
    want.sort();
    assert_eq!(points, want);
    assert_eq!(json_of(&out)["best"]["params"]["a"], 1);
}

#[test]
fn failed_trials_count_against_max_failed_trials_and_a_missing_objective_is_a_failure() {
    // Every sgd trial exits 3; adam trials exit 0 without printing the objective; adamw
    // trials succeed. Seed 5 proposes sgd, then adam, then adamw: the first two start at once
    // (parallelism 2), so both kinds of failure always happen.
    let sb = sandbox(
        "sweep-fail",
        &sweep_file(
            "random",
            "{maxTrials: 40, parallelism: 2, maxFailedTrials: 4}",
            "",
        )
        .replace("seed: 7", "seed: 5"),
    );
    let out = sluice_e2e::ran(wait::output(
        sb.cmd(&["sweep", "s.yaml", "--output", "json"])
            .env("FAIL_SGD", "1")
            .env("SILENT_ADAM", "1"),
    ));
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["state"], "Failed");
    assert!(
        v["reason"]
            .as_str()
            .is_some_and(|r| r.contains("maxFailedTrials: 4")),
        "{v}"
    );
    let trials = v["trials"].as_array().expect("trials");
    let opt = |i: usize| trials.get(i).map(|t| t["params"]["opt"].clone());
    assert_eq!(
        (opt(0), opt(1), opt(2)),
        (
            Some("sgd".into()),
            Some("adam".into()),
            Some("adamw".into())
        ),
        "seed 5 no longer proposes sgd, adam, adamw first: pick a seed that does: {v}"
    );
    let failed = trials.iter().filter(|t| t["state"] == "Failed").count();
    assert!((4..=5).contains(&failed), "{failed} failed: {v}");
    // The sweep stopped making trials once the budget of failures was spent.
    assert!(trials.len() < 40, "{} trials", trials.len());
    let steps = v["steps"].as_array().expect("steps");
    let reason_of = |trial: &serde_json::Value| {
        let name = format!("trial[{}]", trial["trial"]);
        steps
            .iter()
            .find(|s| s["name"] == name.as_str())
            .and_then(|s| s["reason"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // Each trial ended as its optimizer says, except those in flight when the budget ran
    // out (Stopped): a trial with no objective is a failure that says so.
    let (mut silent, mut exit_3) = (0, 0);
    for t in trials {
        let reason = reason_of(t);
        match (t["params"]["opt"].as_str(), t["state"].as_str()) {
            (_, Some("Stopped")) => {}
            (Some("adam"), Some("Failed"))
                if reason.contains("without reporting its objective 'loss'") =>
            {
                silent += 1;
            }
            (Some("sgd"), Some("Failed")) if reason.starts_with("exit code 3") => exit_3 += 1,
            (Some("adamw"), Some("Succeeded")) => {
                assert!(t["value"].is_f64(), "{t}");
            }
            _ => panic!("trial {t} ended unlike its optimizer ({reason}): {v}"),
        }
    }
    // Trials 1 (sgd) and 2 (adam) always ran to their failure; every failure is one of
    // the two.
    assert!(
        silent >= 1 && exit_3 >= 1,
        "silent {silent}, exit 3 {exit_3}: {v}"
    );
    assert_eq!(silent + exit_3, failed, "{v}");
}

#[test]
fn reaching_the_target_ends_the_sweep_early_and_it_succeeds() {
    let sb = sandbox(
        "sweep-target",
        &sweep_file(
            "random",
            "{maxTrials: 200, parallelism: 2}",
            ", target: 0.6",
        ),
    );
    let out = sb.run(&["sweep", "s.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let trials = v["trials"].as_array().expect("trials");
    assert!(trials.len() < 200, "{} trials", trials.len());
    assert!(v["best"]["value"].as_f64().is_some_and(|b| b <= 0.6), "{v}");
    let sweep_row = &v["steps"][0];
    assert!(
        sweep_row["reason"]
            .as_str()
            .is_some_and(|r| r.contains("reached the target")),
        "{sweep_row}"
    );
    for t in trials {
        assert!(
            matches!(t["state"].as_str(), Some("Succeeded" | "Stopped")),
            "{t}"
        );
    }
}

/// A trial whose metric follows a curve: good trials (q < 0.5) improve fast, bad ones slowly;
/// each reports `acc` every 0.1 s for 20 steps. Trials with q > 0.3 (the only ones the test
/// lets early stopping stop) then linger 15 s before their end (a final evaluation), so that a
/// stop decided late on a busy machine still comes before their end: the test does not race
/// the program.
const CURVE: &str = r#"
import os, sys, time
q = float(sys.argv[1])
for step in range(1, 21):
    time.sleep(0.1)
    acc = (1.0 - q) * (1 - 0.8 ** step)
    print(f"step={step} acc={acc:.5f}", flush=True)
if q > 0.3:
    time.sleep(15)
open(f"finished-{os.environ['SLUICE_TRIAL']}", "w").write("x")
"#;

#[test]
fn median_early_stopping_stops_bad_trials_which_end_stopped() {
    let sweep = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: es}
spec:
  objective: {metric: acc, goal: maximize}
  algorithm: {name: sobol, seed: 3}
  earlyStopping: {name: median, minTrials: 3, startStep: 5}
  budget: {maxTrials: 12, parallelism: 4}
  params:
    q: {type: float, min: 0.0, max: 1.0}
  trial:
    command: [python3, curve.py, "{{params.q}}"]
    resources: {cpu: 100m}
"#;
    let sb = Sandbox::new("sweep-es");
    sb.write("curve.py", CURVE);
    sb.write("es.yaml", sweep);
    let out = sb.run(&["sweep", "es.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 12);
    let stopped: Vec<&serde_json::Value> =
        trials.iter().filter(|t| t["state"] == "Stopped").collect();
    assert!(!stopped.is_empty(), "nothing stopped: {v}");
    for t in &stopped {
        let n = t["trial"].as_u64().expect("n");
        // Stopped before the end, and only bad ones.
        assert!(
            !sb.path().join(format!("finished-{n}")).exists(),
            "trial {n} ran to its end"
        );
        assert!(t["params"]["q"].as_f64().is_some_and(|q| q > 0.3), "{t}");
        assert!(
            t["value"].is_f64(),
            "a stopped trial keeps what it reported: {t}"
        );
    }
    // The best trial is one that ran to its end.
    let best = v["best"]["trial"].as_u64().expect("best");
    assert!(sb.path().join(format!("finished-{best}")).exists());
    let steps = v["steps"].as_array().expect("steps");
    for s in steps.iter().filter(|s| s["state"] == "Stopped") {
        assert!(
            s["reason"]
                .as_str()
                .is_some_and(|r| r.contains("early stopping")),
            "{s}"
        );
    }
}

/// An ASHA trial: `epochs` is its budget; it continues from the epoch in its checkpoint and
/// records every epoch it runs in `epochs-N`.
const ASHA_TRIAL: &str = r#"
import os, sys
q, epochs = float(sys.argv[1]), int(sys.argv[2])
n = os.environ["SLUICE_TRIAL"]
ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "epoch")
start = int(open(ck).read()) if os.path.exists(ck) else 0
for e in range(start + 1, epochs + 1):
    loss = q + 1.0 / e
    print(f"epoch={e} loss={loss:.5f}", flush=True)
    open(f"epochs-{n}", "a").write(f"{e}\n")
    open(ck + ".tmp", "w").write(str(e)); os.replace(ck + ".tmp", ck)
"#;

#[test]
fn asha_promotes_trials_which_continue_from_their_checkpoint() {
    let sweep = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: asha}
spec:
  objective: {metric: loss, goal: minimize}
  algorithm: {name: asha, seed: 1, settings: {resource: epochs, minResource: 1, maxResource: 9, eta: 3}}
  budget: {maxTrials: 12, parallelism: 2}
  params:
    q: {type: float, min: 0.0, max: 1.0}
    epochs: {type: int, min: 1, max: 9}
  trial:
    command: [python3, asha.py, "{{params.q}}", "{{params.epochs}}"]
    checkpoint: {every: 10s}
    resources: {cpu: 100m}
"#;
    let sb = Sandbox::new("sweep-asha");
    sb.write("asha.py", ASHA_TRIAL);
    sb.write("a.yaml", sweep);
    let out = sb.run(&["sweep", "a.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 12);
    let mut total = 0;
    let mut promoted = 0;
    for t in trials {
        let n = t["trial"].as_u64().expect("n");
        let ran: Vec<u32> = std::fs::read_to_string(sb.path().join(format!("epochs-{n}")))
            .expect("epochs")
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect();
        // Each epoch ran once: a promoted trial continued, it did not start over.
        let want: Vec<u32> = (1..=ran.len() as u32).collect();
        assert_eq!(ran, want, "trial {n}");
        assert_eq!(
            t["params"]["epochs"].as_u64(),
            Some(ran.len() as u64),
            "trial {n}"
        );
        if ran.len() > 1 {
            promoted += 1;
        }
        total += ran.len();
    }
    assert!(promoted >= 2, "{promoted} promoted");
    // The best reached the full budget; far fewer epochs than 12 trials x 9.
    assert_eq!(v["best"]["params"]["epochs"], 9, "{v}");
    assert!(total < 12 * 9 / 2, "{total} epochs");
}

#[test]
fn a_sweep_step_feeds_its_best_params_and_outputs_downstream() {
    let pipeline = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: tune-then-train}
spec:
  params:
    scale: {type: int, default: 10}
  steps:
    - name: tune
      sweep:
        objective: {metric: loss, goal: minimize}
        algorithm: {name: grid}
        budget: {parallelism: 2}
        params:
          x: {type: int, min: 1, max: 5}
        trial:
          run: |
            echo "loss=$(( ({{params.x}} - 3) * ({{params.x}} - 3) * {{pipeline.params.scale}} ))"
            echo "x={{params.x}}" > "$SLUICE_OUTPUT_DIR/model"
          outputs: [model]
    - name: train
      needs: [tune]
      run: echo "best x {{steps.tune.best.params.x}}; $(cat {{steps.tune.outputs.model}})" > final
"#;
    let sb = Sandbox::new("sweep-step");
    sb.write("p.yaml", pipeline);
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let final_ = std::fs::read_to_string(sb.path().join("final")).expect("final");
    assert_eq!(final_.trim(), "best x 3; x=3");
    let v = json_of(&out);
    let states = step_states(&v);
    assert_eq!(states["tune"], "Succeeded");
    assert_eq!(states["tune[5]"], "Succeeded");
    assert_eq!(v["best"]["params"]["x"], 3);
}

fn kill_after(sb: &Sandbox, args: &[&str], ms: u64) {
    let mut child = sb.spawn(args);
    std::thread::sleep(Duration::from_millis(ms));
    let _ = child.kill(); // SIGKILL
    wait::status(&mut child, "sluice (killed)");
}

#[test]
fn a_sweep_killed_many_times_ends_exactly_its_trials_with_the_uninterrupted_best() {
    const TRIALS: u64 = 200;
    let file = sweep_file("tpe", "{maxTrials: 200, parallelism: 4}", "");
    // Uninterrupted.
    let calm = sandbox("sweep-calm", &file);
    let out = calm.run(&["sweep", "s.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let calm_v = json_of(&out);
    // Killed with SIGKILL again and again, resumed each time.
    let sb = sandbox("sweep-crash", &file);
    let mut kills = 0;
    let mut seed = 0x5eed_u64;
    let mut next = |lo: u64, hi: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (seed >> 33) % (hi - lo)
    };
    kill_after(&sb, &["sweep", "s.yaml"], 1500);
    kills += 1;
    let id = sb.last_run();
    for _ in 0..6 {
        if sb.status(&id)["state"] != "Running" {
            break;
        }
        kill_after(&sb, &["resume", &id], next(300, 2500));
        kills += 1;
    }
    let out = sb.run(&["resume", &id]);
    let v = sb.status(&id);
    assert!(matches!(out.code, Some(0)), "{}\n{v}", out.stderr);
    assert_eq!(v["state"], "Succeeded", "{v}");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len() as u64, TRIALS);
    for n in 1..=TRIALS {
        assert_eq!(lines(&sb, "done", n), 1, "trial {n} completed");
        assert_eq!(lines(&sb, "starts", n), 1, "trial {n} started");
    }
    assert!(
        !sb.path().join(format!("starts/{}", TRIALS + 1)).exists(),
        "a trial beyond the budget ran"
    );
    // Same seed, same proposals, same best.
    assert_eq!(v["trials"], calm_v["trials"], "the trials differ");
    assert_eq!(v["best"], calm_v["best"]);
    eprintln!("{kills} kills; best {}", v["best"]);
    assert!(kills >= 3);
}

#[test]
fn the_one_line_form_runs_a_sweep_and_bad_specs_are_usage_errors() {
    let sb = Sandbox::new("sweep-oneline");
    sb.write("trial.py", TRIAL);
    let out = sb.run(&[
        "sweep",
        "--name",
        "quick",
        "-p",
        "lr=log:1e-5:1e-1",
        "-p",
        "layers=int:2:8",
        "-p",
        "opt=choice:adam,adamw",
        "--objective",
        "minimize:loss",
        "--algorithm",
        "random",
        "--trials",
        "6",
        "--parallel",
        "3",
        "--output",
        "json",
        "--",
        "python3",
        "trial.py",
        "{{params.lr}}",
        "{{params.layers}}",
        "{{params.opt}}",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["name"], "quick");
    assert_eq!(v["trials"].as_array().map(Vec::len), Some(6));
    // Resumable and inspectable like any run: the document is kept with it.
    let s = sb.status(v["id"].as_str().expect("id"));
    assert_eq!(s["best"], v["best"]);

    let mut cases: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    cases.insert("MIN > 0", vec!["-p", "lr=log:0:1"]);
    cases.insert("less than MAX", vec!["-p", "lr=float:1:0"]);
    cases.insert(
        "--objective",
        vec!["-p", "lr=float:0:1", "--objective", "accuracy"],
    );
    cases.insert(
        "--trials",
        vec!["-p", "lr=float:0:1", "--objective", "maximize:a"],
    );
    for (want, args) in cases {
        let mut all = vec!["sweep"];
        all.extend(args);
        if !all.contains(&"--objective") {
            all.extend(["--objective", "maximize:a"]);
        }
        if want != "--trials" {
            all.extend(["--trials", "3"]);
        }
        all.extend(["--", "true"]);
        let out = sb.run(&all);
        assert_eq!(out.code, Some(2), "{all:?}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{all:?}: {}", out.stderr);
    }
    // -p with a sweep file replaces that parameter; an unknown one is named.
    sb.write("s.yaml", &sweep_file("random", "{maxTrials: 3}", ""));
    let out = sb.run(&["sweep", "s.yaml", "-p", "opt=adamw", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for t in json_of(&out)["trials"].as_array().expect("trials") {
        assert_eq!(t["params"]["opt"], "adamw");
    }
    let out = sb.run(&["sweep", "s.yaml", "-p", "layer=3"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("did you mean 'layers'"),
        "{}",
        out.stderr
    );
}

#[test]
fn hyperband_runs_its_brackets_and_promotes_the_best_of_each_round() {
    // R = 9, eta = 3: brackets (9 on 1, 3 on 3, 1 on 9), (5 on 3, 1 on 9)... capped at
    // 12 trials: the first bracket whole, then 3 trials of the next.
    let sweep = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: hb}
spec:
  objective: {metric: loss, goal: minimize}
  algorithm: {name: hyperband, seed: 2, settings: {resource: epochs, minResource: 1, maxResource: 9, eta: 3}}
  budget: {maxTrials: 12, parallelism: 3}
  params:
    q: {type: float, min: 0.0, max: 1.0}
    epochs: {type: int, min: 1, max: 9}
  trial:
    command: [python3, asha.py, "{{params.q}}", "{{params.epochs}}"]
    checkpoint: {every: 10s}
    resources: {cpu: 100m}
"#;
    let sb = Sandbox::new("sweep-hb");
    sb.write("asha.py", ASHA_TRIAL);
    sb.write("h.yaml", sweep);
    let out = sb.run(&["sweep", "h.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 12);
    let epochs = |n: u64| -> Vec<u32> {
        std::fs::read_to_string(sb.path().join(format!("epochs-{n}")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect()
    };
    // The first bracket: 9 trials on 1 epoch, the best 3 go on to 3, the best of those to 9.
    let q = |n: u64| trials[n as usize - 1]["params"]["q"].as_f64().expect("q");
    let mut first: Vec<u64> = (1..=9).collect();
    first.sort_by(|a, b| q(*a).total_cmp(&q(*b)));
    for (rank, n) in first.iter().enumerate() {
        let want = match rank {
            0 => 9,
            1 | 2 => 3,
            _ => 1,
        };
        // Continued from the checkpoint: each epoch ran once.
        assert_eq!(
            epochs(*n),
            (1..=want).collect::<Vec<u32>>(),
            "trial {n} (rank {rank})"
        );
    }
    // The second bracket starts on 3 epochs.
    for n in 10..=12 {
        assert!(epochs(n).len() >= 3, "trial {n}: {:?}", epochs(n));
    }
    assert_eq!(v["best"]["params"]["epochs"], 9);
}

/// The examples users copy from run as written, and find the known optimum's region.
#[test]
fn the_example_sweeps_run_as_written() {
    let sb = Sandbox::new("sweep-examples");
    let dir = sluice_e2e::root().join("examples/sweeps");
    for (file, command) in [
        ("lr-search.yaml", "sweep"),
        ("asha.yaml", "sweep"),
        ("early-stop.yaml", "sweep"),
        ("tune-then-train.yaml", "run"),
    ] {
        let path = dir.join(file).display().to_string();
        let out = sb.run(&[command, &path, "--output", "json"]);
        assert_eq!(out.code, Some(0), "{file}: {}", out.stderr);
        let v = json_of(&out);
        assert_eq!(v["state"], "Succeeded", "{file}");
        // train.py's loss is below 0.5 only near lr = 0.003 with 5 layers.
        let best = v["best"]["value"].as_f64().expect("a best value");
        assert!(best < 0.5, "{file}: best {best}");
        if file == "early-stop.yaml" {
            let stopped = v["trials"]
                .as_array()
                .expect("trials")
                .iter()
                .filter(|t| t["state"] == "Stopped")
                .count();
            assert!(stopped > 0, "{file}: nothing stopped");
        }
    }
}

#[test]
fn max_duration_ends_the_sweep_and_stops_what_still_runs() {
    let sweep = r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {name: timed}
spec:
  objective: {metric: loss, goal: minimize}
  algorithm: {name: random, seed: 1}
  budget: {maxTrials: 100, parallelism: 2, maxDuration: 3s}
  params:
    x: {type: float, min: 0.0, max: 1.0}
  trial:
    run: echo "loss={{params.x}}"; sleep 0.8
    resources: {cpu: 100m}
"#;
    let sb = Sandbox::new("sweep-duration");
    sb.write("t.yaml", sweep);
    let started = std::time::Instant::now();
    let out = sb.run(&["sweep", "t.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Well before 100 trials x 0.8 s / 2.
    assert!(started.elapsed() < Duration::from_secs(30));
    let v = json_of(&out);
    let trials = v["trials"].as_array().expect("trials");
    assert!(
        trials.len() < 100 && trials.len() >= 4,
        "{} trials",
        trials.len()
    );
    assert!(
        v["steps"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("maxDuration 3s reached")),
        "{}",
        v["steps"][0]
    );
    let stopped: Vec<&serde_json::Value> =
        trials.iter().filter(|t| t["state"] == "Stopped").collect();
    assert!(
        !stopped.is_empty(),
        "the trials running at the deadline are stopped: {v}"
    );
    // Those stopped while running still report what they printed.
    assert!(stopped.iter().any(|t| t["value"].is_f64()), "{v}");
}

/// A Katib random-search Experiment runs unchanged: the container's command on this machine,
/// `${trialParameters.NAME}` replaced by the proposals, metrics from standard output.
#[test]
fn a_katib_experiment_runs_unchanged() {
    let sb = Sandbox::new("sweep-katib");
    let path = sluice_e2e::root()
        .join("examples/sweeps/katib-random.yaml")
        .display()
        .to_string();
    let out = sb.run(&["sweep", &path, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v = json_of(&out);
    assert_eq!(v["name"], "random");
    let trials = v["trials"].as_array().expect("trials");
    assert_eq!(trials.len(), 12, "maxTrialCount");
    for t in trials {
        assert_eq!(t["state"], "Succeeded", "{t}");
        let p = &t["params"];
        let lr = p["lr"].as_f64().expect("lr");
        assert!((0.0001..=0.03).contains(&lr), "{p}");
        assert!(
            p["num-layers"]
                .as_i64()
                .is_some_and(|l| (2..=8).contains(&l)),
            "{p}"
        );
        assert!(p["optimizer"].is_string(), "{p}");
    }
    // Maximize: the best is the highest accuracy.
    let max = trials
        .iter()
        .filter_map(|t| t["value"].as_f64())
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(v["best"]["value"].as_f64(), Some(max));
    // The trial ran with the proposals in its arguments: its log shows them.
    let id = v["id"].as_str().expect("id");
    let best = v["best"]["trial"].as_u64().expect("best");
    let log = sb.run(&["logs", id, &format!("trial[{best}]")]);
    assert!(log.stdout.contains("accuracy="), "{}", log.stdout);
}
