//! The command line's conventions as a new user meets them (`cli.md`): where state lives,
//! naming runs, following logs, machine-readable answers of `logs`, `cancel` and `preempt`,
//! `runs` filters, one binary, and the warnings `run` repeats from lint.

use sluice_e2e::{Sandbox, TempDir, bin, ran, sluice, wait, wait_for};

fn pipeline(name: &str, steps: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {name}}}\nspec:\n  steps:\n{steps}"
    )
}

const QUICK: &str = "    - name: hello\n      run: echo hello\n";

/// `sluice ARGS` in `dir` without SLUICE_HOME: the home is found, not given.
fn found(dir: &std::path::Path, args: &[&str]) -> sluice_e2e::Ran {
    ran(wait::output(
        sluice()
            .args(args)
            .current_dir(dir)
            .env_remove("SLUICE_HOME"),
    ))
}

#[test]
fn the_home_is_found_upward_and_reading_commands_create_none() {
    let tmp = TempDir::new("home-found");
    let repo = tmp.path().join("repo");
    let sub = repo.join("examples").join("sweeps");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::create_dir_all(repo.join(".git")).expect("a git checkout");
    std::fs::write(sub.join("p.yaml"), pipeline("nested", QUICK)).expect("write");
    // Reading commands in a folder with no home create nothing.
    let out = found(&sub, &["runs"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("no runs yet"), "{}", out.stdout);
    let out = found(&sub, &["status", "abc"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(!sub.join(".sluice").exists() && !repo.join(".sluice").exists());
    // The first run inside a git checkout puts the home at its top...
    let out = found(&sub, &["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(repo.join(".sluice/sluice.db").is_file());
    assert!(!sub.join(".sluice").exists());
    // ...and every folder below finds it: one history, not two.
    let out = found(&repo, &["runs", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{}", out.stdout);
    let out = found(&repo.join("examples"), &["status", "nested@latest"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("Succeeded"), "{}", out.stdout);
    // Outside any checkout and any home, `./.sluice` (created by the first run).
    let lone = tmp.path().join("lone");
    std::fs::create_dir_all(&lone).expect("mkdir");
    std::fs::write(lone.join("p.yaml"), pipeline("lone", QUICK)).expect("write");
    // (unless a .sluice above the temporary folder is found first, as a user's /tmp/.sluice)
    if !tmp.path().ancestors().any(|d| d.join(".sluice").is_dir()) {
        let out = found(&lone, &["run", "p.yaml"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(lone.join(".sluice/sluice.db").is_file());
    }
}

#[test]
fn runs_are_named_by_latest_and_name_at_latest() {
    let sb = Sandbox::new("latest");
    sb.write("a.yaml", &pipeline("alpha", QUICK));
    sb.write("b.yaml", &pipeline("beta", QUICK));
    for f in ["a.yaml", "b.yaml", "a.yaml"] {
        let out = sb.run(&["run", f, "--output", "json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let out = sb.run(&["runs", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let newest = runs[0]["id"].as_str().expect("id").to_owned();
    let beta = runs[1]["id"].as_str().expect("id").to_owned();
    assert_eq!(sb.status("@latest")["id"], newest.as_str());
    assert_eq!(sb.status("beta@latest")["id"], beta.as_str());
    assert_eq!(sb.status("alpha@latest")["id"], newest.as_str());
    let out = sb.run(&["status", "betta@latest"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("did you mean 'beta@latest'"),
        "{}",
        out.stderr
    );
    let out = sb.run(&["logs", "beta@latest", "hello"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("hello"), "{}", out.stdout);
}

#[test]
fn logs_follow_every_step_until_the_run_ends_and_print_json_lines() {
    let sb = Sandbox::new("logs-follow");
    sb.write(
        "p.yaml",
        &pipeline(
            "two",
            "    - name: a\n      run: sh -c 'echo a1; sleep 0.5; echo a2 >&2'\n    - name: b\n      needs: [a]\n      run: sh -c 'sleep 0.5; echo b1'\n",
        ),
    );
    let out = sb.run(&["run", "--detach", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out.stdout.trim().to_owned();
    // At once, before the first step has printed anything: -f without a step waits for every
    // step, later ones included, and returns when the run has ended.
    let out = sb.run(&["logs", "-f", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(sb.status(&id)["state"], "Succeeded");
    for (step, line) in [("a", "a1"), ("a", "a2"), ("b", "b1")] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&format!("[{step} #1]")) && l.ends_with(line)),
            "no {line} of {step} in:\n{}",
            out.stdout
        );
    }
    // --output json: one object per line, in the pinned shape.
    let out = sb.run(&["logs", &id, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    let a2 = lines.iter().find(|l| l["line"] == "a2").expect("a2");
    assert_eq!(a2["step"], "a");
    assert_eq!(a2["attempt"], 1);
    assert_eq!(a2["worker"], 0);
    assert_eq!(a2["stream"], "err");
    assert!(a2["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    // --attempt names an attempt of a step: without one it is a usage error.
    let out = sb.run(&["logs", &id, "--attempt", "1"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let out = sb.run(&["logs", &id, "b", "--attempt", "1", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("\"line\":\"b1\""), "{}", out.stdout);
    let out = sb.run(&["logs", &id, "b", "--attempt", "2"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn cancel_and_preempt_answer_in_json() {
    let sb = Sandbox::new("cancel-json");
    sb.write(
        "p.yaml",
        &pipeline("long", "    - name: wait\n      run: sleep 60\n"),
    );
    let out = sb.run(&["run", "--detach", "p.yaml"]);
    let id = out.stdout.trim().to_owned();
    wait_for("the step to run", || {
        sb.status(&id)["steps"][0]["state"] == "Running"
    });
    let out = sb.run(&["preempt", &id, "wait", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["state"], "Running");
    assert_eq!(v["step"], "wait");
    wait_for("the preempted step to run again", || {
        let s = sb.status(&id);
        s["steps"][0]["state"] == "Running"
            && s["steps"][0]["attempts"].as_array().map(Vec::len) == Some(2)
    });
    // cancel waits for the run to end and says so on standard output.
    let out = sb.run(&["cancel", &id, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v, serde_json::json!({"id": id, "state": "Cancelled"}));
    // An ended run: the same shape, exit 0.
    let out = sb.run(&["cancel", "@latest", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["state"], "Cancelled");
}

#[test]
fn runs_filters_take_any_case_and_say_when_nothing_matches() {
    let sb = Sandbox::new("runs-filters");
    sb.write("ok.yaml", &pipeline("ok", QUICK));
    sb.write(
        "bad.yaml",
        &pipeline("bad", "    - name: no\n      run: 'false'\n"),
    );
    assert_eq!(sb.run(&["run", "ok.yaml"]).code, Some(0));
    assert_eq!(sb.run(&["run", "bad.yaml"]).code, Some(1));
    let out = sb.run(&["runs", "--state", "failed", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    assert_eq!(v[0]["name"], "bad");
    let out = sb.run(&["runs", "--team", "nobody"]);
    assert_eq!(out.code, Some(0));
    assert!(
        out.stdout.contains("no runs match --team nobody"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("no runs yet"));
    let out = sb.run(&["runs", "--limit", "0", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(2), "--limit 0 lists all");
    let out = sb.run(&["runs", "--state", "finished"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("Succeeded"), "{}", out.stderr);
}

#[test]
fn a_skipped_step_says_its_condition_with_values() {
    let sb = Sandbox::new("skip-reason");
    sb.write(
        "p.yaml",
        &pipeline(
            "gate",
            "    - name: eval\n      run: echo accuracy=0.93\n    - name: deploy\n      needs: [eval]\n      when: \"{{steps.eval.metrics.accuracy}} >= 0.99\"\n      run: echo deploy\n",
        ),
    );
    assert_eq!(sb.run(&["run", "p.yaml"]).code, Some(0));
    let s = sb.status("@latest");
    let reason = s["steps"][1]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("0.93 >= 0.99"), "{reason}");
}

#[test]
fn run_repeats_lint_warnings_and_says_once_that_images_are_not_used_here() {
    let sb = Sandbox::new("warnings");
    sb.write(
        "p.yaml",
        &pipeline(
            "imgs",
            "    - name: a\n      image: pytorch/pytorch:2.1\n      run: echo a\n    - name: b\n      image: pytorch/pytorch:2.1\n      run: echo b\n",
        ),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("warning:"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", out.stderr);
    assert!(
        warnings[0].starts_with("p.yaml:7:7: warning:")
            && warnings[0].contains("pytorch/pytorch:2.1"),
        "{}",
        out.stderr
    );
    // Katib's Bayesian optimization runs as TPE: lint warns, and so does sweep.
    let katib =
        std::fs::read_to_string(sluice_e2e::root().join("examples/sweeps/katib-random.yaml"))
            .expect("example")
            .replace(
                "algorithmName: random",
                "algorithmName: bayesianoptimization",
            )
            .replace("maxTrialCount: 12", "maxTrialCount: 2");
    sb.write("bo.yaml", &katib);
    std::fs::copy(
        sluice_e2e::root().join("examples/sweeps/train.py"),
        sb.path().join("train.py"),
    )
    .expect("copy train.py");
    let lint = sb.run(&["lint", "bo.yaml"]);
    let warned = lint
        .stderr
        .lines()
        .find(|l| l.contains("warning:"))
        .expect("lint warns")
        .to_owned();
    let out = sb.run(&["sweep", "bo.yaml"]);
    assert!(out.stderr.contains(&warned), "{}", out.stderr);
}

#[test]
fn sluice_alone_is_enough_and_a_missing_runtime_is_exit_3_before_anything_runs() {
    let sb = Sandbox::new("one-binary");
    let alone = sb.path().join("bin");
    std::fs::create_dir_all(&alone).expect("mkdir");
    std::fs::copy(bin("sluice"), alone.join("sluice")).expect("copy sluice");
    sb.write("p.yaml", &pipeline("alone", QUICK));
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(alone.join("sluice"));
        cmd.args(["run", "p.yaml"])
            .current_dir(sb.path())
            .envs(sb.envs())
            .env("PATH", "/usr/bin:/bin")
            .env_remove("SLUICE_RUNTIME")
            .env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        ran(wait::output(&mut cmd))
    };
    // Only `sluice`, no sluice-runtime beside it nor on PATH: its own runtime runs the step.
    let out = run(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        sb.run(&["logs", "@latest", "hello"])
            .stdout
            .contains("hello")
    );
    // A SLUICE_RUNTIME naming nothing: exit 3, and no run was created.
    let out = run(&[("SLUICE_RUNTIME", "/nonexistent/sluice-runtime")]);
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("SLUICE_RUNTIME"), "{}", out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&sb.run(&["runs", "--output", "json"]).stdout).expect("json");
    assert_eq!(v.as_array().map(Vec::len), Some(1));
    // `sluice` installed under the runtime's name is the runtime.
    std::os::unix::fs::symlink(alone.join("sluice"), alone.join("sluice-runtime"))
        .expect("symlink");
    let out = ran(wait::output(
        std::process::Command::new(alone.join("sluice-runtime")).arg("--version"),
    ));
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.starts_with("sluice-runtime "), "{}", out.stdout);
}
