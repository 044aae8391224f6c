//! `sluice run` and friends end to end, on real processes and a real SQLite store.

use std::time::{Duration, Instant};

use sluice_e2e::{Sandbox, root, runtime_pid, signal, step_states, wait, wait_for};

fn pipeline(name: &str, spec: &str) -> String {
    format!("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

#[test]
fn every_example_runs_as_written() {
    let sb = Sandbox::new("examples");
    let ex = root().join("examples/pipelines");
    for (file, code) in [
        ("diamond.yaml", 0),
        ("fan-out.yaml", 0),
        ("retry.yaml", 0),
        ("cache.yaml", 0),
        ("when.yaml", 0),
        ("params.yaml", 0),
        ("checkpoint.yaml", 0),
        ("gang.yaml", 0),
        ("on-exit.yaml", 1),
    ] {
        let path = ex.join(file);
        let out = sb.run(&["run", path.to_str().expect("utf-8 path")]);
        assert_eq!(
            out.code,
            Some(code),
            "{file}: {}\n{}",
            out.stdout,
            out.stderr
        );
    }
    // The onExit step saw how the run ended.
    let id = sb.last_run();
    let out = sb.run(&["logs", &id, "notify"]);
    assert!(
        out.stdout
            .contains(&format!("run on-exit ({id}) ended Failed")),
        "{}",
        out.stdout
    );
    let states = step_states(&sb.status(&id));
    assert_eq!(states["train"], "Failed");
    assert_eq!(states["evaluate"], "Cancelled");
    assert_eq!(states["notify"], "Succeeded");
}

#[test]
fn status_json_has_the_pinned_shape() {
    let sb = Sandbox::new("shape");
    sb.write(
        "p.yaml",
        &pipeline("shape", "  steps:\n    - name: a\n      run: echo accuracy=0.91\n    - name: b\n      needs: [a]\n      run: exit 4\n"),
    );
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    for key in [
        "id",
        "name",
        "team",
        "state",
        "started_at",
        "ended_at",
        "steps",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["name"], "shape");
    assert_eq!(v["team"], "default");
    assert_eq!(v["state"], "Failed");
    let a = &v["steps"][0];
    assert_eq!(a["name"], "a");
    assert_eq!(a["metrics"]["accuracy"], 0.91);
    // Metrics are kept per attempt too.
    assert_eq!(a["attempts"][0]["metrics"]["accuracy"], 0.91);
    assert_eq!(a["attempts"][0]["number"], 1);
    assert_eq!(a["attempts"][0]["state"], "Succeeded");
    assert_eq!(a["attempts"][0]["exit_code"], 0);
    let b = &v["steps"][1];
    assert_eq!(b["state"], "Failed");
    assert_eq!(b["reason"], "exit code 4");
    assert_eq!(b["attempts"][0]["exit_code"], 4);
    assert!(b["attempts"][0]["ended_at"].is_string());
    // runs lists the same run, without steps.
    let runs = sb.run(&["runs", "--output", "json"]);
    let list: serde_json::Value = serde_json::from_str(&runs.stdout).expect("JSON");
    assert_eq!(list[0]["id"], v["id"]);
    assert!(list[0].get("steps").is_none());
}

#[test]
fn parallelism_caps_running_steps() {
    let sb = Sandbox::new("parallel");
    let mut spec =
        String::from("  parallelism: 2\n  defaults:\n    resources: {cpu: 100m}\n  steps:\n");
    for i in 0..6 {
        spec.push_str(&format!(
            "    - name: s{i}\n      run: mkdir -p running && touch running/s{i} && ls running | wc -l >> seen && sleep 0.4 && rm running/s{i}\n"
        ));
    }
    sb.write("p.yaml", &pipeline("parallel", &spec));
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let seen = std::fs::read_to_string(sb.path().join("seen")).expect("steps ran");
    let max = seen
        .lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .max();
    assert!(
        max.is_some_and(|m| (1..=2).contains(&m)),
        "at most 2 at once, saw {seen:?}"
    );
}

#[test]
fn fail_fast_starts_nothing_new_and_can_be_turned_off() {
    for (fail_fast, later) in [(true, "Cancelled"), (false, "Succeeded")] {
        let sb = Sandbox::new("failfast");
        sb.write(
            "p.yaml",
            &pipeline(
                "ff",
                &format!("  failFast: {fail_fast}\n  steps:\n    - name: bad\n      run: exit 1\n    - name: slow\n      run: sleep 0.5\n    - name: later\n      needs: [slow]\n      run: echo later\n"),
            ),
        );
        let out = sb.run(&["run", "p.yaml"]);
        assert_eq!(out.code, Some(1), "{}", out.stderr);
        let states = step_states(&sb.status(&sb.last_run()));
        assert_eq!(states["bad"], "Failed");
        assert_eq!(states["slow"], "Succeeded", "running steps finish");
        assert_eq!(states["later"], later, "failFast {fail_fast}");
    }
}

#[test]
fn an_attempt_past_its_timeout_is_stopped_and_ends_timeout() {
    let sb = Sandbox::new("timeout");
    sb.write(
        "p.yaml",
        &pipeline("t", "  steps:\n    - name: hang\n      run: sleep 30\n      timeout: 1s\n      retry: {limit: 1, backoff: 100ms, on: [failure]}\n"),
    );
    let begin = Instant::now();
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        begin.elapsed() < Duration::from_secs(20),
        "took {:?}",
        begin.elapsed()
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let step = &v["steps"][0];
    assert_eq!(step["state"], "Failed");
    assert_eq!(step["reason"], "timed out after 1s");
    // retry.on: [failure] does not retry timeouts.
    assert_eq!(step["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(step["attempts"][0]["state"], "Timeout");
}

#[test]
fn retries_back_off_and_count_attempts() {
    let sb = Sandbox::new("retry");
    sb.write(
        "p.yaml",
        &pipeline("r", "  steps:\n    - name: flaky\n      run: '[ \"$SLUICE_ATTEMPT\" -ge 3 ] || exit 7'\n      retry: {limit: 3, backoff: 200ms, factor: 2}\n"),
    );
    let begin = Instant::now();
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Backoffs of 200ms then 400ms.
    assert!(
        begin.elapsed() >= Duration::from_millis(600),
        "{:?}",
        begin.elapsed()
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let attempts = v["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    let states: Vec<&str> = attempts
        .iter()
        .map(|a| a["state"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(states, ["Failed", "Failed", "Succeeded"]);
    assert_eq!(attempts[0]["exit_code"], 7);
}

#[test]
fn a_run_past_its_timeout_fails_and_cancels_its_steps() {
    let sb = Sandbox::new("runtimeout");
    sb.write(
        "p.yaml",
        &pipeline("rt", "  timeout: 1s\n  onExit: [bye]\n  steps:\n    - name: long\n      run: sleep 30\n    - name: after\n      needs: [long]\n      run: echo never\n    - name: bye\n      run: echo {{run.state}}\n"),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let id = sb.last_run();
    let v = sb.status(&id);
    assert_eq!(v["state"], "Failed");
    let states = step_states(&v);
    assert_eq!(states["long"], "Cancelled");
    assert_eq!(states["after"], "Cancelled");
    assert_eq!(states["bye"], "Succeeded");
    let log = sb.run(&["logs", &id, "bye"]);
    assert!(log.stdout.contains("out Failed"), "{}", log.stdout);
}

#[test]
fn skipped_steps_satisfy_needs_and_skip_their_readers() {
    let sb = Sandbox::new("when");
    sb.write(
        "p.yaml",
        &pipeline("w", "  params:\n    go: {type: bool, default: false}\n  steps:\n    - name: maybe\n      when: \"{{params.go}}\"\n      run: echo hi > $SLUICE_OUTPUT_DIR/x\n      outputs: [x]\n    - name: reader\n      needs: [maybe]\n      run: cat {{steps.maybe.outputs.x}}\n    - name: after\n      needs: [maybe]\n      run: echo after\n"),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let states = step_states(&sb.status(&sb.last_run()));
    assert_eq!(states["maybe"], "Skipped");
    assert_eq!(states["reader"], "Skipped");
    assert_eq!(states["after"], "Succeeded");
    let out = sb.run(&["run", "p.yaml", "-p", "go=true"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let states = step_states(&sb.status(&sb.last_run()));
    assert_eq!(states["reader"], "Succeeded");
}

#[test]
fn a_condition_on_a_metric_never_reported_fails_the_step_saying_which() {
    let sb = Sandbox::new("metric");
    sb.write(
        "p.yaml",
        &pipeline("m", "  steps:\n    - name: train\n      run: echo loss=1\n    - name: gate\n      needs: [train]\n      when: \"{{steps.train.metrics.accuracy}} > 0.5\"\n      run: echo go\n"),
    );
    let out = sb.run(&["run", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(1));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["steps"][1]["state"], "Failed");
    assert_eq!(
        v["steps"][1]["reason"],
        "metric 'accuracy' of step 'train' was never reported"
    );
}

#[test]
fn fan_out_over_an_output_list_runs_a_child_per_item() {
    let sb = Sandbox::new("dynfan");
    sb.write(
        "p.yaml",
        &pipeline("d", "  steps:\n    - name: list\n      run: echo '[\"a\", \"b\", \"c\"]' > $SLUICE_OUTPUT_DIR/items\n      outputs: [items]\n    - name: each\n      needs: [list]\n      forEach: \"{{steps.list.outputs.items}}\"\n      run: echo {{item}} >> done-{{item}}\n    - name: join\n      needs: [each]\n      run: cat done-a done-b done-c\n"),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let states = step_states(&sb.status(&sb.last_run()));
    for s in ["each[0]", "each[1]", "each[2]", "join"] {
        assert_eq!(states[s], "Succeeded", "{states:?}");
    }
}

#[test]
fn a_cache_hit_is_used_only_while_its_outputs_exist() {
    let sb = Sandbox::new("cache");
    sb.write(
        "p.yaml",
        &pipeline("c", "  steps:\n    - name: make\n      run: echo made >> count && echo x > $SLUICE_OUTPUT_DIR/o\n      outputs: [o]\n      cache: true\n"),
    );
    assert_eq!(sb.run(&["run", "p.yaml"]).code, Some(0));
    assert_eq!(sb.run(&["run", "p.yaml"]).code, Some(0));
    let id = sb.last_run();
    assert_eq!(step_states(&sb.status(&id))["make"], "Cached");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("count"))
            .expect("ran")
            .lines()
            .count(),
        1
    );
    // Remove the stored outputs: the next run misses and runs again.
    std::fs::remove_dir_all(sb.home().join("objects")).expect("objects exist");
    assert_eq!(sb.run(&["run", "p.yaml"]).code, Some(0));
    assert_eq!(step_states(&sb.status(&sb.last_run()))["make"], "Succeeded");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("count"))
            .expect("ran")
            .lines()
            .count(),
        2
    );
}

#[test]
fn retry_reruns_only_what_failed_and_what_depends_on_it() {
    let sb = Sandbox::new("retrycmd");
    sb.write(
        "p.yaml",
        &pipeline("rr", "  failFast: false\n  steps:\n    - name: a\n      run: echo a >> ran-a\n    - name: b\n      needs: [a]\n      run: echo b >> ran-b && test -e fixed\n    - name: c\n      needs: [b]\n      run: echo c >> ran-c\n    - name: d\n      run: echo d >> ran-d\n"),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(1));
    let id = sb.last_run();
    let states = step_states(&sb.status(&id));
    assert_eq!(
        (
            states["a"].as_str(),
            states["b"].as_str(),
            states["c"].as_str(),
            states["d"].as_str()
        ),
        ("Succeeded", "Failed", "Cancelled", "Succeeded")
    );
    std::fs::write(sb.path().join("fixed"), "").expect("write");
    let out = sb.run(&["retry", &id[..6]]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let v = sb.status(&id);
    assert_eq!(v["state"], "Succeeded");
    let lines =
        |f: &str| std::fs::read_to_string(sb.path().join(f)).map_or(0, |t| t.lines().count());
    assert_eq!(
        (
            lines("ran-a"),
            lines("ran-b"),
            lines("ran-c"),
            lines("ran-d")
        ),
        (1, 2, 1, 1)
    );
    // b's attempt numbers keep counting.
    let b = v["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "b"))
        .expect("b")
        .clone();
    assert_eq!(b["attempts"].as_array().map(Vec::len), Some(2));
    assert_eq!(b["attempts"][1]["number"], 2);
}

#[test]
fn cancel_from_another_process_stops_the_run() {
    let sb = Sandbox::new("cancel");
    sb.write(
        "p.yaml",
        &pipeline("k", "  steps:\n    - name: long\n      run: sleep 30\n    - name: after\n      needs: [long]\n      run: echo never\n"),
    );
    let out = sb.run(&["run", "p.yaml", "--detach", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = serde_json::from_str::<serde_json::Value>(&out.stdout).expect("JSON")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    wait_for("the condition", || {
        step_states(&sb.status(&id))
            .get("long")
            .is_some_and(|s| s == "Running")
    });
    let begin = Instant::now();
    assert_eq!(sb.run(&["cancel", &id]).code, Some(0));
    wait_for("the condition", || sb.status(&id)["state"] == "Cancelled");
    assert!(
        begin.elapsed() < Duration::from_secs(15),
        "{:?}",
        begin.elapsed()
    );
    let states = step_states(&sb.status(&id));
    assert_eq!(states["long"], "Cancelled");
    assert_eq!(states["after"], "Cancelled");
    // Cancelling an ended run says so and exits 0.
    let again = sb.run(&["cancel", &id]);
    assert_eq!(again.code, Some(0));
    assert!(again.stderr.contains("already ended"), "{}", again.stderr);
}

#[test]
fn two_runs_on_one_home_share_the_machine_without_overcommitting() {
    let sb = Sandbox::new("shared");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut spec = String::from("  steps:\n");
    for i in 0..4 {
        spec.push_str(&format!(
            "    - name: s{i}\n      resources: {{cpu: 1}}\n      run: mkdir -p ../running && touch ../running/$SLUICE_RUN_ID-s{i} && ls ../running | wc -l >> ../seen && sleep 0.3 && rm ../running/$SLUICE_RUN_ID-s{i}\n"
        ));
    }
    sb.write("a/p.yaml", &pipeline("one", &spec));
    sb.write("b/p.yaml", &pipeline("two", &spec));
    let a = sb
        .cmd(&["run", "a/p.yaml"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let b = sb
        .cmd(&["run", "b/p.yaml"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    let (a, b) = (
        wait::output_of(a, "sluice run a/p.yaml"),
        wait::output_of(b, "sluice run b/p.yaml"),
    );
    assert_eq!(a.status.code(), Some(0));
    assert_eq!(b.status.code(), Some(0));
    let seen = std::fs::read_to_string(sb.path().join("seen")).expect("steps ran");
    let max = seen
        .lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        max >= 1 && max <= cores,
        "{max} steps of 1 CPU at once on {cores} cores: {seen:?}"
    );
    assert_eq!(seen.lines().count(), 8);
}

#[test]
fn a_bad_environment_is_a_clear_error_and_exit_3() {
    let sb = Sandbox::new("badenv");
    sb.write(
        "p.yaml",
        &pipeline("e", "  steps:\n    - {name: a, run: echo a}\n"),
    );
    // A home that cannot be created (a file stands where a folder must be).
    sb.write("blocked", "a file");
    let out = sluice_e2e::ran(wait::output(
        sb.cmd(&["run", "p.yaml"])
            .env("SLUICE_HOME", sb.path().join("blocked/home")),
    ));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("cannot be created"), "{}", out.stderr);
    if sb.state.is_some() {
        // The rest is about SQLite's file in the home (the conformance suite covers an
        // unreachable PostgreSQL).
        return;
    }
    // A file that is no database.
    std::fs::create_dir_all(sb.home()).expect("home");
    std::fs::write(sb.home().join("sluice.db"), vec![0x42u8; 8192]).expect("write");
    let out = sb.run(&["runs"]);
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(
        out.stderr.contains("is not a SQLite database"),
        "{}",
        out.stderr
    );
    std::fs::remove_file(sb.home().join("sluice.db")).expect("remove");
    // A store another process holds past the timeout.
    assert_eq!(sb.run(&["runs"]).code, Some(0));
    assert_eq!(
        sb.run(&["run", "p.yaml"]).code,
        Some(0),
        "the store is made"
    );
    let mut holder = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\ntime.sleep(20)",
        ])
        .arg(sb.home().join("sluice.db"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("reads");
    assert_eq!(line.trim(), "locked");
    let out = sb.run(&["run", "p.yaml"]);
    let _ = holder.kill();
    wait::status(&mut holder, "python3 holding the store (killed)");
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(
        out.stderr.contains("busy") || out.stderr.contains("locked"),
        "{}",
        out.stderr
    );
}

#[test]
fn runs_of_kinds_not_available_yet_are_refused_with_exit_2() {
    let sb = Sandbox::new("kinds");
    // `sluice run` runs a valid sweep as `sluice sweep` does; an invalid one gets its errors.
    sb.write(
        "s.yaml",
        "apiVersion: sluice.dev/v1\nkind: Sweep\nmetadata: {name: s}\nspec:\n  objective: {metric: acc, goal: maximize}\n  algorithm: {name: random}\n  budget: {maxTrials: 3}\n  params:\n    lr: {type: float, min: 0.001, max: 0.1}\n  trial:\n    run: echo acc={{params.lr}}\n",
    );
    let out = sb.run(&["run", "s.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["trials"].as_array().map(Vec::len), Some(3), "{v}");
    sb.write(
        "s2.yaml",
        "apiVersion: sluice.dev/v1\nkind: Sweep\nmetadata: {name: s}\nspec: {}\n",
    );
    let out = sb.run(&["run", "s2.yaml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("s2.yaml:4:7: error: a sweep needs 'objective'"),
        "{}",
        out.stderr
    );
    sb.write(
        "bad.yaml",
        &pipeline("b", "  steps:\n    - {name: a, run: x, need: [b]}\n"),
    );
    let out = sb.run(&["run", "bad.yaml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("bad.yaml:6:25: error: unknown field 'need'"),
        "{}",
        out.stderr
    );
    sb.write("req.yaml", &pipeline("r", "  params:\n    n: {type: int}\n  steps:\n    - name: a\n      run: echo {{params.n}}\n"));
    let out = sb.run(&["run", "req.yaml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("parameter 'n' is required"),
        "{}",
        out.stderr
    );
    let out = sb.run(&["status", "nosuchrun"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn outputs_and_logs_go_to_the_object_store_the_run_was_given() {
    let sb = Sandbox::new("objects");
    let store = sb.path().join("elsewhere");
    let url = format!("file://{}", store.display());
    sb.write(
        "p.yaml",
        &pipeline("o", "  steps:\n    - name: make\n      run: echo making; mkdir $SLUICE_OUTPUT_DIR/model && echo w > $SLUICE_OUTPUT_DIR/model/weights\n      outputs: [model]\n    - name: use\n      needs: [make]\n      run: cat {{steps.make.outputs.model}}/weights\n"),
    );
    let out = sb.run(&["run", "p.yaml", "--objects", &url]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = sb.last_run();
    // The spec's layout, under the given store and not under the home.
    let attempt = store.join(format!("teams/default/runs/{id}/make/1"));
    assert_eq!(
        std::fs::read_to_string(attempt.join("outputs/model/weights")).expect("stored output"),
        "w\n"
    );
    let log = std::fs::read_to_string(attempt.join("logs/output.log")).expect("stored log");
    assert!(log.contains(" out making"), "{log}");
    assert!(!sb.home().join("objects/teams").exists());
    // The downstream step read the artifact from that store.
    let out = sb.run(&["logs", &id, "use"]);
    assert!(out.stdout.contains('w'), "{}", out.stdout);

    // A Cluster file's `objects` is used when --objects is not given.
    sb.write(
        "cluster.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: lab}\nspec:\n  objects: file://from-cluster\n  pools:\n    - {name: here, nodes: 1, resources: {cpu: 2, memory: 1Gi}}\n",
    );
    let out = sb.run(&["run", "p.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = sb.last_run();
    assert!(
        sb.path()
            .join(format!(
                "from-cluster/teams/default/runs/{id}/make/1/outputs/model/weights"
            ))
            .is_file()
    );

    // A scheme this version cannot use is refused before anything runs.
    let out = sb.run(&["run", "p.yaml", "--objects", "gs://bucket/x"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("gs://bucket/x"), "{}", out.stderr);
}

#[test]
fn a_detached_run_can_be_followed_across_retries_and_its_logs_outlive_the_attempt_folder() {
    let sb = Sandbox::new("follow");
    // `wait` starts only once the test has begun following it: its lines are then printed
    // live. Attempt 1 fails, attempt 2 succeeds.
    sb.write(
        "p.yaml",
        &pipeline("f", "  steps:\n    - name: gate\n      run: while [ ! -e go ]; do sleep 0.05; done\n    - name: wait\n      needs: [gate]\n      retry: {limit: 1, backoff: 1s}\n      run: echo line-$SLUICE_ATTEMPT; test $SLUICE_ATTEMPT = 2\n"),
    );
    let out = sb.run(&["run", "p.yaml", "--detach", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let id = v["id"].as_str().expect("an id").to_owned();
    // Follow a step that has not started yet: it waits, then prints both attempts.
    let follower = sb
        .cmd(&["logs", &id, "wait", "-f"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("logs -f starts");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(sb.path().join("go"), b"").expect("write go");
    let out = wait::output_of(follower, "sluice logs RUN wait -f");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].ends_with(" out line-1"), "{text}");
    assert_eq!(lines[1], "--- attempt 2 ---", "{text}");
    assert!(lines[2].ends_with(" out line-2"), "{text}");
    // `logs -f` returned because the step ended; the run ends too.
    wait_for("the condition", || {
        step_states(&sb.status(&id)).get("wait").map(String::as_str) == Some("Succeeded")
    });
    wait_for("the condition", || sb.status(&id)["state"] == "Succeeded");
    let runs: serde_json::Value =
        serde_json::from_str(&sb.run(&["runs", "--output", "json"]).stdout).expect("JSON");
    assert_eq!(runs[0]["id"], id.as_str());
    assert_eq!(runs[0]["state"], "Succeeded");
    assert!(
        runs[0].get("steps").is_none(),
        "runs lists runs without steps: {runs}"
    );

    // With the attempt folders gone, the log is read from the object store.
    std::fs::remove_dir_all(sb.home().join("attempts")).expect("attempts exist");
    let out = sb.run(&["logs", &id, "wait", "--attempt", "1"]);
    assert!(out.stdout.contains(" out line-1"), "{}", out.stdout);
}

#[test]
fn a_killed_runtime_loses_its_attempt_which_runs_again_alone() {
    let sb = Sandbox::new("lostrt");
    // Attempt 1 ticks forever; attempt 2 finishes at once.
    sb.write(
        "p.yaml",
        &pipeline("l", "  steps:\n    - name: tick\n      run: if [ $SLUICE_ATTEMPT = 1 ]; then while true; do echo x >> ticks; sleep 0.05; done; fi; echo done > finished\n"),
    );
    let mut engine = sb.spawn(&["run", "p.yaml"]);
    wait_for("the condition", || sb.path().join("ticks").exists());
    wait_for("attempt 1 to record its runtime", || {
        runtime_pid(&sb.home(), &sb.last_run(), "tick", 1).is_some()
    });
    let runtime = runtime_pid(&sb.home(), &sb.last_run(), "tick", 1)
        .expect("the attempt records its runtime");
    signal(runtime, "KILL");
    let status = wait::status(&mut engine, "sluice run p.yaml");
    assert_eq!(status.code(), Some(0));
    assert!(sb.path().join("finished").exists());
    // The first attempt's program was ended with its runtime: no more ticks.
    let n = std::fs::read_to_string(sb.path().join("ticks"))
        .expect("ticks")
        .len();
    std::thread::sleep(Duration::from_millis(300));
    let m = std::fs::read_to_string(sb.path().join("ticks"))
        .expect("ticks")
        .len();
    assert_eq!(n, m, "the lost attempt's program still runs");
    let status = sb.status(&sb.last_run());
    let attempts = status["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    assert_eq!(attempts.len(), 2, "{status}");
    assert_eq!(attempts[0]["state"], "Lost", "{status}");
    assert_eq!(attempts[1]["state"], "Succeeded", "{status}");
}

#[test]
fn the_default_home_is_relative_to_where_sluice_runs_and_works_from_any_folder() {
    let sb = Sandbox::new("relhome");
    std::fs::create_dir_all(sb.path().join("pipelines")).expect("mkdir");
    sb.write(
        "pipelines/p.yaml",
        &pipeline("r", "  steps:\n    - name: make\n      run: echo 7 > $SLUICE_OUTPUT_DIR/n\n      outputs: [n]\n    - name: use\n      needs: [make]\n      run: cat {{steps.make.outputs.n}} > got\n"),
    );
    // No SLUICE_HOME: the default ./.sluice of the current folder, while steps run in the
    // pipeline's folder.
    let out = wait::output(
        sb.cmd(&["run", "pipelines/p.yaml"])
            .env_remove("SLUICE_HOME"),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sb.path().join(".sluice").is_dir());
    assert_eq!(
        sb.path().join(".sluice/sluice.db").exists(),
        sb.state.is_none()
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("pipelines/got")).expect("use ran"),
        "7\n"
    );
    // A relative --home works the same.
    let out = wait::output(
        sb.cmd(&["--home", "h", "run", "pipelines/p.yaml"])
            .env_remove("SLUICE_HOME"),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sb.path().join("h").is_dir());
    assert_eq!(sb.path().join("h/sluice.db").exists(), sb.state.is_none());
    // And a relative object store URL, as the Cluster example writes one.
    let out = wait::output(&mut sb.cmd(&["run", "pipelines/p.yaml", "--objects", "file://store"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sb.path().join("store/teams/default/runs").exists());
}

#[test]
fn metrics_from_the_metrics_file_and_standard_output_are_kept_per_attempt() {
    let sb = Sandbox::new("metricsfile");
    sb.write(
        "p.yaml",
        &pipeline("m", "  steps:\n    - name: train\n      retry: {limit: 1, backoff: 10ms}\n      run: |\n        echo '{\"name\": \"loss\", \"value\": 0.5, \"step\": 1}' >> \"$SLUICE_METRICS_FILE\"\n        echo \"loss=0.$SLUICE_ATTEMPT\"\n        echo '{\"name\": \"accuracy\", \"value\": 0.8, \"step\": 2}' >> \"$SLUICE_METRICS_FILE\"\n        test $SLUICE_ATTEMPT = 2\n"),
    );
    let out = sb.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status = sb.status(&sb.last_run());
    let step = &status["steps"][0];
    let attempts = step["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2);
    // The last value of each metric, per attempt, from both sources.
    assert_eq!(attempts[0]["metrics"]["loss"], 0.1, "{status}");
    assert_eq!(attempts[1]["metrics"]["loss"], 0.2, "{status}");
    assert_eq!(attempts[1]["metrics"]["accuracy"], 0.8, "{status}");
    assert_eq!(step["metrics"]["loss"], 0.2, "{status}");
}
