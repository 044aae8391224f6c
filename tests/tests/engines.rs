//! An engine that goes away (SIGHUP from a closed terminal, SIGTERM, kill -9, a closed pipe
//! on its output, its home deleted) never blocks the machine: the next run on the home starts
//! within seconds of the first one's steps ending, nothing panics, `status` says the engine
//! is gone, and `resume` carries on at once, running nothing twice.

use std::process::{Child, Stdio};

use sluice_e2e::{Sandbox, bin, signal, wait, wait_for};

/// A step that asks for more CPU than the machine has: it runs alone (nothing else starts
/// beside it). It records its start and its end (unix ms).
fn hog(name: &str, seconds: f64) -> String {
    format!(
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: {name}}}
spec:
  steps:
    - name: hog
      resources: {{cpu: 1000}}
      run: |
        echo start >> {name}.starts
        sleep {seconds}
        python3 -c 'import time; print(int(time.time() * 1000))' > {name}.ended
        echo done >> {name}.dones
"#
    )
}

fn read(sb: &Sandbox, file: &str) -> String {
    std::fs::read_to_string(sb.path().join(file)).unwrap_or_default()
}

fn count(sb: &Sandbox, file: &str) -> usize {
    read(sb, file).lines().count()
}

fn ms(text: &str) -> u128 {
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a time: {text:?}"))
}

/// Starts `sluice run FILE` with its standard error kept.
fn start(sb: &Sandbox, file: &str) -> Child {
    sb.cmd(&["run", file])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice starts")
}

/// Waits for `child` to exit (failing the test if it hangs, see [`wait`]); its exit code and
/// standard error.
fn finish(child: Child, what: &str) -> (Option<i32>, String) {
    let out = wait::output_of(child, what);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The newest run's id once its `hog` step runs.
fn wait_running(sb: &Sandbox) -> String {
    let mut id = String::new();
    wait_for("the first run's step to run", || {
        let out = sb.run(&["runs", "--output", "json", "--limit", "1"]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
        let Some(run) = v[0]["id"].as_str() else {
            return false;
        };
        id = run.to_owned();
        count(sb, "first.starts") == 1
            && sb.status(&id)["steps"][0]["state"].as_str() == Some("Running")
    });
    id
}

/// After the first run's engine went away somehow, a second run on the same home asking for
/// the whole machine starts within a few seconds of the first's step ending (before the fix:
/// never), and runs to its end.
fn second_run_starts_soon_after(sb: &Sandbox) {
    sb.write("second.yaml", &hog("second", 0.1));
    let second = start(sb, "second.yaml");
    let (code, err) = finish(second, "the second run");
    assert_eq!(code, Some(0), "second run: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let first_ended = read(sb, "first.ended");
    assert!(
        !first_ended.is_empty(),
        "the first run's step ran to its end"
    );
    let second_started = std::fs::metadata(sb.path().join("second.starts"))
        .and_then(|m| m.modified())
        .expect("the second run's step started")
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let gap = second_started.saturating_sub(ms(&first_ended));
    eprintln!("second run's step started {gap} ms after the first's ended");
    // "Within a few seconds"; generous for a loaded machine, and far from "never".
    assert!(
        gap < 20_000,
        "the second run waited {gap} ms after the first's step ended"
    );
}

fn assert_no_panic(err: &str) {
    assert!(
        !err.contains("panicked") && !err.contains("stack backtrace"),
        "sluice panicked:\n{err}"
    );
}

/// SIGTERM and SIGHUP to a foreground `sluice run` cancel it cleanly, as Ctrl-C does: exit
/// 130, the run `Cancelled`, its step stopped, nothing held.
fn cancels_on(sig: &str) {
    let sb = Sandbox::new(&format!("sig-{sig}"));
    sb.write("first.yaml", &hog("first", 30.0));
    let first = start(&sb, "first.yaml");
    let id = wait_running(&sb);
    signal(first.id(), sig);
    let (code, err) = finish(first, "the signalled run");
    assert_eq!(code, Some(130), "exit code after SIG{sig}: {err}");
    assert_no_panic(&err);
    let status = sb.status(&id);
    assert_eq!(status["state"], "Cancelled", "{status}");
    assert_eq!(status["steps"][0]["attempts"][0]["state"], "Cancelled");
    assert_eq!(count(&sb, "first.dones"), 0, "the step was stopped");
    // Nothing stays held: the next run starts at once.
    sb.write("second.yaml", &hog("second", 0.1));
    let (code, err) = finish(start(&sb, "second.yaml"), "the second run");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn sigterm_cancels_a_foreground_run_cleanly() {
    cancels_on("TERM");
}

#[test]
fn sighup_cancels_a_foreground_run_cleanly() {
    cancels_on("HUP");
}

#[test]
fn kill_9_leaves_the_run_to_resume_and_its_room_free_once_its_step_ends() {
    let sb = Sandbox::new("kill9");
    sb.write("first.yaml", &hog("first", 2.0));
    let mut first = start(&sb, "first.yaml");
    let id = wait_running(&sb);
    // Not reaped yet: the engine stays a zombie, whose PID still exists.
    signal(first.id(), "KILL");
    // Every other sluice on the home sees that the engine is gone.
    let status = sb.status(&id);
    assert_eq!(status["state"], "Running");
    assert_eq!(status["engine"]["alive"], false, "{status}");
    let text = sb.run(&["status", &id]);
    assert!(
        text.stdout.contains(&format!("sluice resume {id}")),
        "{}",
        text.stdout
    );
    let runs = sb.run(&["runs"]);
    assert!(runs.stdout.contains("engine gone"), "{}", runs.stdout);
    second_run_starts_soon_after(&sb);
    // Following its logs does not hang on a run nobody drives and nothing of which runs.
    let follow = sb
        .cmd(&["logs", "-f", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("logs starts");
    let (code, err) = finish(follow, "logs -f");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("sluice resume {id}")), "{err}");
    wait::status(&mut first, "sluice run first.yaml (killed)");
    // The first run is resumed: its step ended meanwhile, and is not run again.
    let out = sb.run(&["resume", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let status = sb.status(&id);
    assert_eq!(status["state"], "Succeeded", "{status}");
    assert_eq!(
        status["steps"][0]["attempts"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(count(&sb, "first.starts"), 1);
    assert_eq!(count(&sb, "first.dones"), 1);
}

#[test]
fn resume_right_after_kill_9_reattaches_and_runs_nothing_twice() {
    let sb = Sandbox::new("kill9-resume");
    sb.write("first.yaml", &hog("first", 2.0));
    let mut first = start(&sb, "first.yaml");
    let id = wait_running(&sb);
    signal(first.id(), "KILL");
    // At once, while the dead engine is still a zombie.
    let resumed = sb
        .cmd(&["resume", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("resume starts");
    let (code, err) = finish(resumed, "resume");
    wait::status(&mut first, "sluice run first.yaml (killed)");
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("being driven by"), "{err}");
    let status = sb.status(&id);
    assert_eq!(status["state"], "Succeeded", "{status}");
    assert_eq!(count(&sb, "first.starts"), 1);
    assert_eq!(count(&sb, "first.dones"), 1);
}

/// `sluice run FILE 2>&1 | head -1`, as a user types it, with and without `-v`: no panic, the
/// run goes on to its end (exit 0), and the machine is free afterwards.
#[test]
fn a_closed_pipe_on_its_output_is_no_panic() {
    let sb = Sandbox::new("pipe");
    sb.write("first.yaml", &hog("first", 1.0));
    for verbose in ["", "-vv"] {
        let script = format!(
            r#""$SLUICE" {verbose} run first.yaml 2>&1 | head -1 > head.out; echo "${{PIPESTATUS[0]}}" > rc"#
        );
        let out = wait::output(
            std::process::Command::new("bash")
                .args(["-c", &script])
                .current_dir(sb.path())
                .env("SLUICE", bin("sluice"))
                .envs(sb.envs())
                .env_remove("RUST_LOG"),
        );
        assert!(out.status.success());
        assert_eq!(read(&sb, "rc").trim(), "0", "sluice {verbose}: exit code");
        assert_eq!(read(&sb, "head.out").lines().count(), 1);
        let id = sb.last_run();
        assert_eq!(sb.status(&id)["state"], "Succeeded");
    }
    assert_eq!(count(&sb, "first.dones"), 2);
}

/// A background engine (`run --detach`) told SIGTERM stops driving and leaves its step
/// running: the work is not thrown away, and `resume` finishes it.
#[test]
fn sigterm_to_a_detached_engine_leaves_its_steps_to_resume() {
    let sb = Sandbox::new("detached-term");
    sb.write("first.yaml", &hog("first", 2.0));
    let out = sb.run(&["run", "--detach", "first.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = out.stdout.trim().to_owned();
    let mut pid = 0;
    wait_for("the detached engine to drive its step", || {
        let s = sb.status(&id);
        pid = s["engine"]["holder"]
            .as_str()
            .and_then(|h| h.split('@').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pid > 0 && s["steps"][0]["state"] == "Running" && count(&sb, "first.starts") == 1
    });
    signal(pid, "TERM");
    wait_for("the engine to be gone", || {
        sb.status(&id)["engine"]["alive"] == false
    });
    assert_eq!(sb.status(&id)["state"], "Running");
    let out = sb.run(&["resume", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(sb.status(&id)["state"], "Succeeded");
    assert_eq!(count(&sb, "first.starts"), 1);
    assert_eq!(count(&sb, "first.dones"), 1);
}

/// A home deleted while its run goes on is an error (exit 3), not a run that "succeeded"
/// into a deleted database.
#[test]
fn a_home_removed_mid_run_is_exit_3() {
    let sb = Sandbox::new("home-gone");
    if sb.state.is_some() {
        // With state in PostgreSQL the home holds no database to lose: nothing to check.
        return;
    }
    sb.write("first.yaml", &hog("first", 2.0));
    let first = start(&sb, "first.yaml");
    wait_running(&sb);
    std::fs::remove_dir_all(sb.home()).expect("remove the home");
    let (code, err) = finish(first, "the run");
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("was removed or replaced"), "{err}");
    assert_no_panic(&err);
}
