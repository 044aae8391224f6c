//! `exec::attempt`, the runtime's core, on real programs: how an attempt ends (exit codes,
//! signals, timeouts, the engine's stop, the grace period, a gang with a failed worker), what
//! its program sees (environment, working directory, GPUs) and what the result says. Each
//! attempt runs in a thread; every wait is bounded, so a hung runtime fails the test instead
//! of hanging it.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Tmp;
use sluice_runtime::contract::{self, End, Launch};
use sluice_runtime::exec::{self, Exec};
use sluice_runtime::stores::Stores;

/// Longer than any attempt here takes; only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

/// A launch of `sh -c LINE` in the test's folder, with no inputs, outputs or checkpoints.
fn launch(tmp: &Tmp, line: &str) -> Launch {
    Launch {
        argv: vec!["/bin/sh".into(), "-c".into(), line.into()],
        workdir: tmp.0.clone(),
        env: BTreeMap::new(),
        timeout_ms: None,
        grace_ms: 5_000,
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_dir: tmp.dir().join("out"),
        objects: format!("file://{}", tmp.0.join("objects").display()),
        outputs_key: "teams/t/runs/r/s/1/outputs".into(),
        checkpoint_dir: tmp.dir().join("ckpt"),
        checkpoint: None,
        gpus: Vec::new(),
        gpus_per_worker: 0,
        hide_gpus: false,
        heartbeat_ms: 1_000,
        workers: 1,
        metrics_stdout: true,
        collect: contract::Collect::default(),
        inherit: contract::Inherit::default(),
    }
}

fn write_launch(tmp: &Tmp, launch: &Launch) {
    let bytes = serde_json::to_vec(launch).expect("encode launch");
    std::fs::write(tmp.dir().join(contract::LAUNCH_FILE), bytes).expect("write launch.json");
}

fn read_result(tmp: &Tmp) -> contract::Result {
    let bytes = std::fs::read(tmp.dir().join(contract::RESULT_FILE)).expect("result.json");
    serde_json::from_slice(&bytes).expect("a result")
}

/// An attempt running in its own thread; `term` is its SIGTERM flag.
struct Running {
    term: Arc<AtomicBool>,
    done: mpsc::Receiver<Exec>,
}

fn start(tmp: &Tmp, launch: &Launch) -> Running {
    write_launch(tmp, launch);
    let term = Arc::new(AtomicBool::new(false));
    let (tx, done) = mpsc::channel();
    let dir = tmp.dir();
    let flag = Arc::clone(&term);
    std::thread::spawn(move || {
        let stores = Arc::new(Stores::single());
        let ran = exec::attempt(&dir, &flag, &stores).expect("the attempt runs");
        let _ = tx.send(ran);
    });
    Running { term, done }
}

impl Running {
    /// Waits for the attempt to end (failing the test at the deadline) and reads its result.
    fn finish(self, tmp: &Tmp) -> contract::Result {
        let ran = self
            .done
            .recv_timeout(DEADLINE)
            .expect("the attempt ends within the deadline");
        assert_eq!(ran, Exec::Ran);
        read_result(tmp)
    }
}

/// Runs `launch` to its end.
fn run(tmp: &Tmp, launch: &Launch) -> contract::Result {
    start(tmp, launch).finish(tmp)
}

/// Waits (bounded) until `path` exists.
fn wait_file(path: &Path) {
    let until = Instant::now() + DEADLINE;
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn log(tmp: &Tmp) -> String {
    std::fs::read_to_string(tmp.dir().join(contract::LOG_FILE)).unwrap_or_default()
}

#[test]
fn a_program_that_exits_0_succeeds_with_its_metrics_and_its_output_logged() {
    let tmp = Tmp::new("exec-ok");
    let r = run(&tmp, &launch(&tmp, "echo loss=0.25; echo hello >&2"));
    assert_eq!(r.end, End::Succeeded, "{r:?}");
    assert_eq!(
        (r.exit_code, r.signal, r.reason.as_deref()),
        (Some(0), None, None)
    );
    assert_eq!(r.metrics.get("loss"), Some(&0.25));
    let log = log(&tmp);
    assert!(log.contains(" out loss=0.25"), "{log}");
    assert!(log.contains(" err hello"), "{log}");
    // The lock records the start: the runtime's pid and the program's.
    let started: contract::Started =
        serde_json::from_slice(&std::fs::read(tmp.dir().join(contract::LOCK_FILE)).expect("lock"))
            .expect("the lock holds the start");
    assert_eq!(started.runtime_pid, std::process::id());
    assert!(started.pid > 0 && started.groups == vec![started.pid]);
}

#[test]
fn a_nonzero_exit_fails_with_its_code_and_the_last_lines_of_standard_error() {
    let tmp = Tmp::new("exec-exit");
    let r = run(
        &tmp,
        &launch(
            &tmp,
            "echo one >&2; echo two >&2; echo three >&2; echo four >&2; exit 3",
        ),
    );
    assert_eq!(r.end, End::Failed);
    assert_eq!((r.exit_code, r.signal), (Some(3), None));
    // The last three lines, oldest first.
    assert_eq!(
        r.reason.as_deref(),
        Some("exit code 3: two | three | four"),
        "{r:?}"
    );
}

#[test]
fn a_program_killed_by_a_signal_fails_naming_the_signal() {
    let tmp = Tmp::new("exec-signal");
    let r = run(&tmp, &launch(&tmp, "echo dying >&2; kill -KILL $$"));
    assert_eq!(r.end, End::Failed);
    assert_eq!((r.exit_code, r.signal), (None, Some(9)));
    assert_eq!(r.reason.as_deref(), Some("killed by signal 9: dying"));
}

#[test]
fn the_program_sees_its_environment_working_directory_and_gpus() {
    let tmp = Tmp::new("exec-env");
    let mut l = launch(
        &tmp,
        "{ echo \"A=$A\"; echo \"dir=$(pwd)\"; echo \"gpus=$CUDA_VISIBLE_DEVICES\"; echo \"resumed=$SLUICE_RESUMED\"; echo \"metrics=$SLUICE_METRICS_FILE\"; } > seen",
    );
    l.env.insert("A".into(), "from the engine".into());
    l.gpus = vec![2, 5];
    l.gpus_per_worker = 2;
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Succeeded, "{r:?}");
    let seen = std::fs::read_to_string(tmp.0.join("seen")).expect("the program wrote");
    let want = format!(
        "A=from the engine\ndir={}\ngpus=2,5\nresumed=0\nmetrics={}\n",
        tmp.0.display(),
        tmp.dir().join(contract::METRICS_FILE).display()
    );
    assert_eq!(seen, want);
}

#[test]
fn a_step_without_gpus_on_a_gpu_machine_sees_none() {
    let tmp = Tmp::new("exec-hide");
    let mut l = launch(
        &tmp,
        "if [ -n \"${CUDA_VISIBLE_DEVICES+set}\" ]; then echo \"[$CUDA_VISIBLE_DEVICES]\" > seen; fi",
    );
    l.hide_gpus = true;
    assert_eq!(run(&tmp, &l).end, End::Succeeded);
    assert_eq!(
        std::fs::read_to_string(tmp.0.join("seen")).expect("the variable is set"),
        "[]\n"
    );
}

#[test]
fn the_engine_s_terminate_file_stops_the_program_and_the_attempt_ends_terminated() {
    let tmp = Tmp::new("exec-terminate");
    let running = start(&tmp, &launch(&tmp, "touch started; exec sleep 30"));
    wait_file(&tmp.0.join("started"));
    std::fs::write(tmp.dir().join(contract::TERMINATE_FILE), b"").expect("terminate");
    let r = running.finish(&tmp);
    assert_eq!(r.end, End::Terminated, "{r:?}");
    assert_eq!(r.signal, Some(15));
    // Stopped from outside: the reason is the signal alone (the engine says why).
    assert_eq!(r.reason.as_deref(), Some("killed by signal 15"));
}

#[test]
fn sigterm_to_the_runtime_stops_the_program_and_the_attempt_ends_terminated() {
    let tmp = Tmp::new("exec-sigterm");
    let running = start(&tmp, &launch(&tmp, "touch started; exec sleep 30"));
    wait_file(&tmp.0.join("started"));
    running.term.store(true, Ordering::Relaxed);
    let r = running.finish(&tmp);
    assert_eq!(r.end, End::Terminated, "{r:?}");
    assert_eq!(r.signal, Some(15));
}

#[test]
fn a_program_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let tmp = Tmp::new("exec-grace");
    let mut l = launch(&tmp, "trap '' TERM; touch started; sleep 30");
    l.grace_ms = 200;
    let running = start(&tmp, &l);
    wait_file(&tmp.0.join("started"));
    std::fs::write(tmp.dir().join(contract::TERMINATE_FILE), b"").expect("terminate");
    let r = running.finish(&tmp);
    assert_eq!(r.end, End::Terminated, "{r:?}");
    assert_eq!(r.signal, Some(9), "SIGKILL once the grace period is over");
    assert!(
        log(&tmp).contains("sending SIGTERM (Terminated); SIGKILL in 200ms"),
        "{}",
        log(&tmp)
    );
}

#[test]
fn a_program_past_its_timeout_ends_timeout() {
    let tmp = Tmp::new("exec-timeout");
    let mut l = launch(&tmp, "exec sleep 30");
    l.timeout_ms = Some(100);
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Timeout, "{r:?}");
    assert_eq!(r.signal, Some(15));
}

#[test]
fn a_stop_asked_before_the_start_runs_nothing() {
    let tmp = Tmp::new("exec-early-stop");
    std::fs::write(tmp.dir().join(contract::TERMINATE_FILE), b"").expect("terminate");
    let r = run(&tmp, &launch(&tmp, "touch ran"));
    assert_eq!(r.end, End::Terminated);
    assert_eq!(
        r.reason.as_deref(),
        Some("stopped before the program started")
    );
    assert!(!tmp.0.join("ran").exists());
}

#[test]
fn a_program_that_cannot_start_fails_saying_why() {
    let tmp = Tmp::new("exec-nostart");
    let mut l = launch(&tmp, "");
    l.argv = vec!["/nonexistent/pyhton".into()];
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Failed);
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|w| w.starts_with("cannot start '/nonexistent/pyhton': ")),
        "{r:?}"
    );
    // A working directory that does not exist is named as such.
    let tmp = Tmp::new("exec-nodir");
    let mut l = launch(&tmp, "true");
    l.workdir = tmp.0.join("missing");
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Failed);
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|w| w.contains("working directory") && w.contains("does not exist")),
        "{r:?}"
    );
    // And an empty command.
    let tmp = Tmp::new("exec-empty");
    let mut l = launch(&tmp, "");
    l.argv.clear();
    assert_eq!(
        run(&tmp, &l).reason.as_deref(),
        Some("nothing to run: the command is empty")
    );
}

#[test]
fn a_declared_output_must_be_written_and_is_stored_when_it_is() {
    let tmp = Tmp::new("exec-outputs");
    let mut l = launch(&tmp, "true");
    l.outputs = vec!["model".into()];
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Failed);
    assert_eq!(
        r.reason.as_deref(),
        Some("output 'model' was not written to $SLUICE_OUTPUT_DIR/model")
    );

    let tmp = Tmp::new("exec-outputs-ok");
    let mut l = launch(&tmp, "echo weights > \"$SLUICE_OUTPUT_DIR/model\"");
    l.env.insert(
        "SLUICE_OUTPUT_DIR".into(),
        l.output_dir.display().to_string(),
    );
    l.outputs = vec!["model".into()];
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Succeeded, "{r:?}");
    let stored = tmp.0.join("objects/teams/t/runs/r/s/1/outputs/model");
    assert_eq!(
        std::fs::read_to_string(&stored).expect("the output is in the object store"),
        "weights\n"
    );
}

#[test]
fn a_gang_worker_that_fails_stops_the_others_and_fails_the_attempt() {
    let tmp = Tmp::new("exec-gang");
    let mut l = launch(
        &tmp,
        "echo \"$RANK $WORLD_SIZE $MASTER_ADDR\" >> ranks; if [ \"$RANK\" = 1 ]; then while [ $(wc -l < ranks) -lt 3 ]; do sleep 0.01; done; echo boom >&2; exit 4; fi; exec sleep 30",
    );
    l.workers = 3;
    let r = run(&tmp, &l);
    assert_eq!(r.end, End::Failed, "{r:?}");
    assert_eq!(r.exit_code, Some(4));
    assert_eq!(
        r.reason.as_deref(),
        Some("worker 1 of 3 ended with exit code 4; the gang was stopped: boom")
    );
    let mut ranks: Vec<String> = std::fs::read_to_string(tmp.0.join("ranks"))
        .expect("ranks")
        .lines()
        .map(str::to_owned)
        .collect();
    ranks.sort();
    assert_eq!(ranks, ["0 3 127.0.0.1", "1 3 127.0.0.1", "2 3 127.0.0.1"]);
}

#[test]
fn an_attempt_owned_or_ended_elsewhere_is_skipped() {
    // Ended already: its result stands, nothing runs again.
    let tmp = Tmp::new("exec-ended");
    let l = launch(&tmp, "touch ran");
    write_launch(&tmp, &l);
    std::fs::write(tmp.dir().join(contract::RESULT_FILE), b"{}").expect("result");
    let term = AtomicBool::new(false);
    let stores = Arc::new(Stores::single());
    assert_eq!(
        exec::attempt(&tmp.dir(), &term, &stores).expect("attempt"),
        Exec::Skipped
    );
    assert!(!tmp.0.join("ran").exists());

    // Another runtime holds the lock: this one leaves it alone.
    let tmp = Tmp::new("exec-locked");
    write_launch(&tmp, &launch(&tmp, "touch ran"));
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(tmp.dir().join(contract::LOCK_FILE))
        .expect("lock file");
    held.try_lock().expect("take the lock");
    assert_eq!(
        exec::attempt(&tmp.dir(), &term, &stores).expect("attempt"),
        Exec::Skipped
    );
    assert!(!tmp.0.join("ran").exists());
    assert!(!tmp.dir().join(contract::RESULT_FILE).exists());
}

#[test]
fn an_unreadable_launch_fails_the_attempt_saying_so() {
    let tmp = Tmp::new("exec-badlaunch");
    std::fs::write(tmp.dir().join(contract::LAUNCH_FILE), b"{not json").expect("write");
    let term = AtomicBool::new(false);
    let stores = Arc::new(Stores::single());
    assert_eq!(
        exec::attempt(&tmp.dir(), &term, &stores).expect("attempt"),
        Exec::Ran
    );
    let r = read_result(&tmp);
    assert_eq!(r.end, End::Failed);
    assert!(
        r.reason
            .as_deref()
            .is_some_and(|w| w.starts_with("cannot read launch.json: ")),
        "{r:?}"
    );
}

/// The checkpoint objects stored under the step's prefix, by name relative to it.
fn checkpoint_objects(tmp: &Tmp) -> Vec<String> {
    let root = tmp.0.join("objects/ck");
    let mut out = Vec::new();
    let mut todo = vec![root.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(rel) = path.strip_prefix(&root) {
                out.push(rel.display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_restore_only_worker_restores_the_checkpoint_and_never_syncs_one() {
    let tmp = Tmp::new("exec-restore-only");
    let spec = contract::CheckpointSpec {
        every_ms: 20,
        prefix: "ck".into(),
        keep: 3,
        restore_only: false,
    };
    // A syncing worker leaves checkpoint 1.
    let ckpt = tmp.dir().join("ckpt");
    let mut l = launch(&tmp, &format!("echo 1 > {}/step", ckpt.display()));
    l.checkpoint = Some(spec.clone());
    assert_eq!(run(&tmp, &l).end, End::Succeeded);
    let first = checkpoint_objects(&tmp);
    assert_eq!(
        first,
        vec!["0000000001/MANIFEST.json", "0000000001/data/step"]
    );

    // A restore-only one sees it, changes the folder long enough for periodic syncs, and
    // stores nothing.
    let again = Tmp::new("exec-restore-only-2");
    std::fs::rename(tmp.0.join("objects"), again.0.join("objects")).expect("move the store");
    let ckpt = again.dir().join("ckpt");
    let mut l = launch(
        &again,
        &format!(
            "echo restored=$(cat {c}/step); echo 2 > {c}/step; sleep 0.3; echo 3 > {c}/other",
            c = ckpt.display()
        ),
    );
    l.checkpoint = Some(contract::CheckpointSpec {
        restore_only: true,
        ..spec
    });
    let r = run(&again, &l);
    assert_eq!(r.end, End::Succeeded, "{r:?}");
    assert!(log(&again).contains("out restored=1"), "{}", log(&again));
    assert_eq!(checkpoint_objects(&again), first, "nothing new was synced");
}
