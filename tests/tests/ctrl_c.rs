//! Ctrl-C in a foreground `sluice run`, as `cli.md` pins it: the first cancels the run
//! cleanly (its steps get SIGTERM, the run ends `Cancelled`, exit 130, no step process is
//! left); a second one exits 130 at once and leaves running steps going, for `sluice resume`
//! to pick up. The Ctrl-C is sent as a terminal sends it: SIGINT to the engine's whole process
//! group. Every wait is bounded (a hang fails the test, saying what it waited for).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};

use sluice_e2e::{Sandbox, alive, pids, step_states, wait, wait_for};

fn pipeline(name: &str, steps: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {name}}}\nspec:\n  steps:\n{steps}"
    )
}

/// `sluice run FILE` in its own process group, as a shell runs a foreground job; standard
/// error kept.
fn start(sb: &Sandbox, file: &str) -> Child {
    sb.cmd(&["run", file])
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice starts")
}

/// Ctrl-C at a terminal: SIGINT to every process of the foreground group.
fn ctrl_c(engine: &Child) {
    let out = wait::output(std::process::Command::new("kill").args([
        "-INT",
        "--",
        &format!("-{}", engine.id()),
    ]));
    assert!(
        out.status.success(),
        "kill -INT -{} failed: {}",
        engine.id(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn one_ctrl_c_cancels_the_run_and_leaves_no_step_process() {
    let sb = Sandbox::new("ctrlc-once");
    // `long` records its shell's pid and its child's, then waits for the child.
    sb.write(
        "p.yaml",
        &pipeline(
            "c",
            "    - name: long\n      run: echo $$ >> long.pid; sleep 300 & echo $! >> long.pid; wait\n    - name: after\n      needs: [long]\n      run: echo after >> after-done\n",
        ),
    );
    let engine = start(&sb, "p.yaml");
    wait_for("`long` to start its program and its child", || {
        pids(&sb.path().join("long.pid")).len() == 2
    });
    let procs = pids(&sb.path().join("long.pid"));
    assert!(procs.iter().all(|&p| alive(p)), "{procs:?} run");
    let id = sb.last_run();

    ctrl_c(&engine);
    let out = wait::output_of(engine, "sluice run p.yaml (one Ctrl-C)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("cancelling"), "{err}");

    // The run ended Cancelled, before the engine exited: nothing is left for `resume`.
    let status = sb.status(&id);
    assert_eq!(status["state"], "Cancelled", "{status}");
    let states = step_states(&status);
    assert_eq!(states["long"], "Cancelled", "{status}");
    assert_eq!(states["after"], "Cancelled", "{status}");
    assert!(!sb.path().join("after-done").exists(), "`after` never ran");
    // Both of the step's processes got SIGTERM and are gone.
    for pid in procs {
        assert!(
            !alive(pid),
            "step process {pid} still runs after the run ended"
        );
    }
}

#[test]
fn a_second_ctrl_c_leaves_the_step_running_and_resume_finishes_the_run() {
    let sb = Sandbox::new("ctrlc-twice");
    // `long` handles SIGTERM as a training program that saves its work does: it notes it and
    // goes on until the test releases it (well within the 30 s grace period).
    sb.write(
        "p.yaml",
        &pipeline(
            "c",
            "    - name: long\n      run: trap 'echo term >> got-term' TERM; echo $$ >> long.pid; while [ ! -e release ]; do sleep 0.05; done; echo finished >> long-done\n    - name: after\n      needs: [long]\n      run: echo after >> after-done\n",
        ),
    );
    let engine = start(&sb, "p.yaml");
    wait_for("`long` to start its program", || {
        pids(&sb.path().join("long.pid")).len() == 1
    });
    let pid = pids(&sb.path().join("long.pid"))[0];
    let id = sb.last_run();

    // The first Ctrl-C: the step is told to stop (SIGTERM), which it takes its time over.
    ctrl_c(&engine);
    wait_for("the first Ctrl-C's SIGTERM to reach the step", || {
        sb.path().join("got-term").exists()
    });
    // The second: the engine leaves at once, exit 130.
    ctrl_c(&engine);
    let out = wait::output_of(engine, "sluice run p.yaml (two Ctrl-C)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("sluice resume"), "{err}");

    // The step still runs, and the run is left to `resume`.
    assert!(
        alive(pid),
        "the step's program {pid} was stopped by the second Ctrl-C"
    );
    assert!(!sb.path().join("long-done").exists());
    let status = sb.status(&id);
    assert_eq!(status["state"], "Running", "{status}");
    assert_eq!(step_states(&status)["long"], "Running", "{status}");

    // `resume` drives the run to its end: it reattaches to the step still running (never
    // starting it again), carries out the cancel the first Ctrl-C asked for, and exits 1 (a
    // cancelled run, and no Ctrl-C of its own).
    let resume = sb
        .cmd(&["resume", &id])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("resume starts");
    std::fs::write(sb.path().join("release"), b"").expect("release the step");
    let out = wait::output_of(resume, "sluice resume RUN");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let status = sb.status(&id);
    assert_eq!(status["state"], "Cancelled", "{status}");
    let states = step_states(&status);
    assert_eq!(states["long"], "Cancelled", "{status}");
    assert_eq!(states["after"], "Cancelled", "{status}");
    assert_eq!(
        status["steps"][0]["attempts"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    assert_eq!(lines(&sb.path().join("long.pid")), 1, "`long` started once");
    assert_eq!(
        lines(&sb.path().join("long-done")),
        1,
        "`long` ran to its end"
    );
    assert!(!sb.path().join("after-done").exists(), "`after` never ran");
    assert!(!alive(pid));
}
