//! Schedules through a real server: `apply` (created, configured, unchanged, pruned, dry run,
//! nothing applied when anything is invalid, another team untouched), and each tick run
//! exactly once while the server is killed with SIGKILL at many moments around its ticks, and
//! `concurrency: replace` stopping the old run's steps as `cancel` does.
//! The schedule loop's time comes from a file (`SLUICE_SCHEDULE_CLOCK_FILE`, test-only), so
//! the test moves it through hours in seconds.

use std::time::Duration;

use serde_json::Value;
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, alive, pids, wait_for};

const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: retrain}
spec:
  params:
    epochs: {type: int, default: 1}
  steps:
    - name: train
      run: echo "training for {{params.epochs}} epochs"
"#;

fn schedule(extra: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1\nkind: Schedule\nmetadata: {{name: hourly}}\nspec:\n  pipeline: retrain\n  cron: \"0 * * * *\"\n  params: {{epochs: 3}}\n{extra}"
    )
}

#[test]
fn apply_creates_configures_prunes_and_applies_nothing_when_anything_is_wrong() {
    let sb = Sandbox::new("apply");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (_, b) = token(&sb, "nlp", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    sb.write("conf/pipeline.yaml", PIPELINE);
    sb.write("conf/schedule.yaml", &schedule(""));
    sb.write("theirs.yaml", &PIPELINE.replace("retrain", "other"));
    let out = server.cli(&sb, Some(&b), &["apply", "-f", "theirs.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "conf"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "pipeline/retrain created\nschedule/hourly created\n"
    );
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "conf"]);
    assert_eq!(
        out.stdout,
        "pipeline/retrain unchanged\nschedule/hourly unchanged\n"
    );
    // A dry run says what would happen and changes nothing.
    sb.write("conf/schedule.yaml", &schedule("  concurrency: forbid\n"));
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "conf", "--dry-run"]);
    assert_eq!(
        out.stdout,
        "pipeline/retrain unchanged (dry run)\nschedule/hourly configured (dry run)\n"
    );
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "conf"]);
    assert_eq!(
        out.stdout,
        "pipeline/retrain unchanged\nschedule/hourly configured\n"
    );
    // Anything invalid: nothing applied, lint's diagnostics, exit 2.
    sb.write(
        "bad/pipeline.yaml",
        &PIPELINE.replace("epochs: 1", "epochs: 2"),
    );
    sb.write(
        "bad/schedule.yaml",
        &schedule("").replace("0 * * * *", "61 * * * *"),
    );
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "bad"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("bad/schedule.yaml:6:10: error: cron: minute 61"),
        "{}",
        out.stderr
    );
    let out = server.cli(&sb, Some(&a), &["schedules", "--output", "json"]);
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v[0]["version"], 2, "the bad apply changed nothing: {v}");
    // A schedule naming a pipeline that is not applied.
    sb.write(
        "lone.yaml",
        &schedule("").replace("pipeline: retrain", "pipeline: retrian"),
    );
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "lone.yaml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains(
            "lone.yaml:5:13: error: schedule hourly: no pipeline or sweep named 'retrian'"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("did you mean 'retrain'?"),
        "{}",
        out.stderr
    );
    // Prune: the team's documents the paths no longer hold; another team's untouched.
    let out = server.cli(
        &sb,
        Some(&a),
        &["apply", "-f", "conf/pipeline.yaml", "--prune"],
    );
    assert_eq!(
        out.stdout,
        "pipeline/retrain unchanged\nschedule/hourly pruned\n"
    );
    let out = server.cli(&sb, Some(&b), &["apply", "-f", "theirs.yaml"]);
    assert_eq!(out.stdout, "pipeline/other unchanged\n");
    // A viewer applies nothing.
    let (_, viewer) = token(&sb, "vision", "viewer", &[]);
    let out = server.cli(&sb, Some(&viewer), &["apply", "-f", "conf"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

/// RFC 3339 UTC for a unix time in seconds (civil date from days, Howard Hinnant's way).
fn rfc3339(secs: u64, millis: u32) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Sets the schedule loop's clock file to now (the schedules are applied in real time), and
/// returns the first full hour after now (the first tick of an hourly schedule) and the
/// file's path.
fn clock_now(sb: &Sandbox) -> (u64, String) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    set_clock(sb, &rfc3339(now, 0));
    let clock = sb.path().join("clock");
    (
        (now / 3600 + 1) * 3600,
        clock.to_str().expect("a path").to_owned(),
    )
}

fn set_clock(sb: &Sandbox, at: &str) {
    let path = sb.path().join("clock");
    let tmp = sb.path().join("clock.tmp");
    std::fs::write(&tmp, at).expect("clock");
    std::fs::rename(&tmp, &path).expect("clock");
}

#[test]
fn each_tick_runs_exactly_once_whatever_moment_the_server_is_killed() {
    let sb = Sandbox::new("ticks-crash");
    let (_, a) = token(&sb, "vision", "member", &[]);
    // The schedule is applied now (real time); the loop's time then moves through the next
    // hours: the first tick is the next full hour.
    let (first, clock) = clock_now(&sb);
    let env = [("SLUICE_SCHEDULE_CLOCK_FILE", clock.as_str())];
    let mut server = Server::start_with(&sb, &[], &env);
    server.wait_ready();
    // Each run's step notes its start and its end in a file named for the run, so that the
    // test counts how often each tick's work ran.
    let ran = sb.path().join("ran");
    std::fs::create_dir_all(&ran).expect("ran/");
    let ran = ran.to_str().expect("a path").to_owned();
    sb.write(
        "p.yaml",
        &PIPELINE.replace(
            "run: echo \"training for {{params.epochs}} epochs\"",
            &format!(
                "run: echo start >> {ran}/$SLUICE_RUN_ID; sleep 0.3; echo done >> {ran}/$SLUICE_RUN_ID"
            ),
        ),
    );
    sb.write("s.yaml", &schedule("  catchUp: all\n"));
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "p.yaml", "-f", "s.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let fires = |server: &Server| -> Vec<Value> {
        let a = server.call("GET", "/api/v1/schedules/hourly", Some(&a), None);
        a.json()["fires"].as_array().cloned().unwrap_or_default()
    };
    let started = || std::fs::read_dir(&ran).map_or(0, Iterator::count);
    // The kill moments: before the tick's fire is recorded (at once), just after it is
    // (seen through the API, before or as its run starts), while its step runs, and a fixed
    // sequence of moments in between.
    let mut seed: u64 = 0x71c4;
    let mut next = |lo: u64, hi: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (seed >> 33) % (hi - lo)
    };
    let hours: u64 = 12;
    for h in 1..=hours {
        set_clock(&sb, &rfc3339(first + (h - 1) * 3600, 500));
        let decided = usize::try_from(h).unwrap_or(0);
        match h % 4 {
            0 => {}
            1 => wait_for("the tick's fire", || fires(&server).len() >= decided),
            2 => wait_for("the tick's step to start", || started() >= decided),
            _ => std::thread::sleep(Duration::from_millis(next(0, 1500))),
        }
        server.kill();
        server = Server::start_with(&sb, &[], &env);
        server.wait_ready();
    }
    let fires = || fires(&server);
    let count = usize::try_from(hours).unwrap_or(0);
    wait_for("every tick to be decided", || fires().len() == count);
    let fires = fires();
    let mut runs = Vec::new();
    for (i, f) in fires.iter().enumerate() {
        let expected = rfc3339(first + 3600 * u64::try_from(i).unwrap_or(0), 0);
        assert_eq!(f["tick"], expected, "{fires:?}");
        assert_eq!(f["outcome"], "started", "catchUp: all runs every tick: {f}");
        runs.push(f["run"].as_str().expect("its run").to_owned());
    }
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), count, "a run per tick");
    // The fires are counted in the metrics, by team and outcome.
    let metrics = server.call("GET", "/metrics", None, None).text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_schedule_fires{team=\"vision\",outcome=\"started\"} 12")),
        "{metrics}"
    );
    // No other run exists: a tick never started two.
    let listed = server
        .call("GET", "/api/v1/runs?limit=0", Some(&a), None)
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(count), "{listed}");
    for run in &runs {
        wait_for("the run to end", || {
            server
                .call("GET", &format!("/api/v1/runs/{run}"), Some(&a), None)
                .json()["state"]
                != "Running"
        });
        let v = server
            .call("GET", &format!("/api/v1/runs/{run}"), Some(&a), None)
            .json();
        assert_eq!(v["state"], "Succeeded", "{v}");
        // Its step ran to completion exactly once.
        let notes =
            std::fs::read_to_string(std::path::Path::new(&ran).join(run)).unwrap_or_default();
        assert_eq!(notes, "start\ndone\n", "run {run}'s step");
    }
}

#[test]
fn two_servers_decide_each_tick_once_when_the_leader_is_killed_across_ticks() {
    let sb = Sandbox::new("ticks-two");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (first, clock) = clock_now(&sb);
    let env = [("SLUICE_SCHEDULE_CLOCK_FILE", clock.as_str())];
    let mut one = Server::start_with(&sb, &[], &env);
    one.wait_ready();
    let mut two = Server::start_with(&sb, &[], &env);
    two.wait_ready();
    sb.write("p.yaml", PIPELINE);
    sb.write("s.yaml", &schedule("  catchUp: all\n"));
    let out = one.cli(&sb, Some(&a), &["apply", "-f", "p.yaml", "-f", "s.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let leads = |s: &Server| {
        sluice_e2e::http::request(&s.addr, "GET", "/metrics", None, None)
            .is_ok_and(|r| r.text().lines().any(|l| l.trim() == "sluice_leader 1"))
    };
    let hours: u64 = 6;
    for h in 1..=hours {
        set_clock(&sb, &rfc3339(first + (h - 1) * 3600, 500));
        // Kill whichever leads, around the tick; start it again as the other's standby.
        std::thread::sleep(Duration::from_millis(100 * (h % 4)));
        if leads(&one) {
            one.kill();
            one = Server::start_with(&sb, &[], &env);
            one.wait_ready();
        } else {
            two.kill();
            two = Server::start_with(&sb, &[], &env);
            two.wait_ready();
        }
    }
    let count = usize::try_from(hours).unwrap_or(0);
    let fires = || -> Vec<Value> {
        one.call("GET", "/api/v1/schedules/hourly", Some(&a), None)
            .json()["fires"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    wait_for("every tick to be decided", || fires().len() == count);
    let fires = fires();
    let mut runs: Vec<String> = fires
        .iter()
        .map(|f| {
            assert_eq!(f["outcome"], "started", "{f}");
            f["run"].as_str().expect("its run").to_owned()
        })
        .collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), count);
    let listed = two
        .call("GET", "/api/v1/runs?limit=0", Some(&a), None)
        .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(count), "{listed}");
}

#[test]
fn replace_cancels_the_running_run_and_stops_its_steps_before_the_next_tick_runs() {
    let sb = Sandbox::new("ticks-replace");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (first, clock) = clock_now(&sb);
    let env = [("SLUICE_SCHEDULE_CLOCK_FILE", clock.as_str())];
    let server = Server::start_with(&sb, &[], &env);
    server.wait_ready();
    // `train` records its shell's pid and its child's, then waits for the child: a run that
    // outlives the hour.
    let record = sb.path().join("train.pid");
    let record = record.to_str().expect("a path");
    sb.write(
        "p.yaml",
        &format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: retrain}}\nspec:\n  params:\n    epochs: {{type: int, default: 1}}\n  steps:\n    - name: train\n      run: echo $$ >> {record}; sleep 300 & echo $! >> {record}; wait\n"
        ),
    );
    sb.write("s.yaml", &schedule("  concurrency: replace\n"));
    let out = server.cli(&sb, Some(&a), &["apply", "-f", "p.yaml", "-f", "s.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let fires = || -> Vec<Value> {
        server
            .call("GET", "/api/v1/schedules/hourly", Some(&a), None)
            .json()["fires"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let state = |id: &str| {
        server
            .call("GET", &format!("/api/v1/runs/{id}"), Some(&a), None)
            .json()
    };

    set_clock(&sb, &rfc3339(first, 500));
    wait_for("the first tick's run", || fires().len() == 1);
    let old = fires()[0]["run"].as_str().expect("a run").to_owned();
    wait_for("its step to start its program and child", || {
        pids(std::path::Path::new(record)).len() == 2
    });
    let old_procs = pids(std::path::Path::new(record));
    assert!(old_procs.iter().all(|&p| alive(p)), "{old_procs:?} run");

    set_clock(&sb, &rfc3339(first + 3600, 500));
    wait_for("the second tick's run", || fires().len() == 2);
    let second = &fires()[1];
    assert_eq!(second["outcome"], "started", "{second}");
    let new = second["run"].as_str().expect("a run").to_owned();
    assert_ne!(new, old);
    // The old run ends Cancelled, as `sluice cancel` ends it: its step cancelled, and both
    // of its processes gone.
    wait_for("the old run to end", || state(&old)["state"] != "Running");
    let v = state(&old);
    assert_eq!(v["state"], "Cancelled", "{v}");
    let steps = v["steps"].as_array().cloned().unwrap_or_default();
    assert!(
        !steps.is_empty() && steps.iter().all(|s| s["state"] == "Cancelled"),
        "every step of the replaced run is cancelled: {v}"
    );
    wait_for("the old run's processes to be gone", || {
        old_procs.iter().all(|&p| !alive(p))
    });
    // The new run is the one running now.
    wait_for("the new run's step to start", || {
        pids(std::path::Path::new(record)).len() == 4
    });
    assert_eq!(state(&new)["state"], "Running");
    let out = server.call(
        "POST",
        &format!("/api/v1/runs/{new}/cancel"),
        Some(&a),
        None,
    );
    assert!(out.status < 300, "{}", out.text());
    wait_for("the new run to be cancelled", || {
        state(&new)["state"] == "Cancelled"
    });
}

#[test]
fn submit_on_a_home_runs_the_applied_pipeline_and_records_its_version() {
    let sb = Sandbox::new("submit-local");
    sb.write("p.yaml", PIPELINE);
    let out = sb.run(&["apply", "-f", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // A second version, which `submit` runs: the file is then changed without applying it.
    sb.write("p.yaml", &PIPELINE.replace("default: 1", "default: 2"));
    let out = sb.run(&["apply", "-f", "p.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    sb.write("p.yaml", &PIPELINE.replace("default: 1", "default: 7"));
    let out = sb.run(&["submit", "retrain"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = sb.last_run();
    let status = sb.status(&id);
    assert_eq!(status["state"], "Succeeded", "{status}");
    assert_eq!(
        status["version"], 2,
        "the run records the version it ran: {status}"
    );
    let logs = sb.run(&["logs", &id, "train"]);
    assert!(
        logs.stdout.contains("training for 2 epochs"),
        "the applied text ran, not the file: {}",
        logs.stdout
    );
    // A name nothing applied is a clear error.
    let out = sb.run(&["submit", "nightly"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("sluice apply -f"), "{}", out.stderr);
}
