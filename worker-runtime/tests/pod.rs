//! The `sluice-runtime` binary itself, spawned as a pod would run it: `install` (the init
//! container) and `pod` (one worker of an attempt, recorded in a `file://` object store).
//! Every wait is bounded by a deadline, so a hung runtime fails the test instead of hanging
//! it.

mod common;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Tmp;
use sluice_runtime::contract::{self, End, Launch};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-runtime");

/// Longer than any run here takes; only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

/// Waits (bounded) for `child` to exit, and collects what it printed.
fn wait_output(mut child: std::process::Child) -> Output {
    let until = Instant::now() + DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("its output"),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                panic!("sluice-runtime did not end within {DEADLINE:?}");
            }
            Err(e) => panic!("cannot wait for sluice-runtime: {e}"),
        }
    }
}

#[test]
fn install_copies_a_runnable_binary() {
    let tmp = Tmp::new("pod-install");
    let dest = tmp.0.join("sluice-pod/bin/sluice-runtime");
    let out = wait_output(
        Command::new(BIN)
            .arg("install")
            .arg(&dest)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert!(out.status.success(), "{out:?}");
    let version = wait_output(
        Command::new(&dest)
            .arg("--version")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the installed binary runs"),
    );
    assert!(version.status.success(), "{version:?}");
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("sluice-runtime "),
        "{version:?}"
    );
}

#[test]
fn install_into_a_path_it_cannot_create_fails_saying_why() {
    let tmp = Tmp::new("pod-install-bad");
    let file = tmp.0.join("a-file");
    std::fs::write(&file, b"").expect("write");
    let out = wait_output(
        Command::new(BIN)
            .arg("install")
            .arg(file.join("bin/sluice-runtime"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sluice-runtime: error: cannot create"),
        "{err}"
    );
}

/// The worker's key in the object store.
const KEY: &str = "teams/t/attempts/r/s/1/w0";

impl Tmp {
    /// The object store's folder.
    fn objects(&self) -> PathBuf {
        self.0.join("objects")
    }

    /// Where `KEY/name` is stored.
    fn stored(&self, name: &str) -> PathBuf {
        self.objects().join(KEY).join(name)
    }

    fn read_stored(&self, name: &str) -> String {
        std::fs::read_to_string(self.stored(name))
            .unwrap_or_else(|e| panic!("{KEY}/{name} is stored: {e}"))
    }

    fn result(&self) -> contract::Result {
        serde_json::from_str(&self.read_stored(contract::RESULT_FILE)).expect("a result")
    }
}

/// A worker's launch of `sh -c LINE` in the test's `work` folder.
fn launch(tmp: &Tmp, line: &str) -> Launch {
    let work = tmp.0.join("work");
    std::fs::create_dir_all(&work).expect("mkdir work");
    Launch {
        argv: vec!["/bin/sh".into(), "-c".into(), line.into()],
        workdir: work,
        env: BTreeMap::new(),
        timeout_ms: None,
        grace_ms: 10_000,
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_dir: tmp.0.join("pod/out"),
        objects: format!("file://{}", tmp.objects().display()),
        outputs_key: "teams/t/runs/r/s/1/outputs".into(),
        checkpoint_dir: tmp.0.join("pod/ckpt"),
        checkpoint: None,
        gpus: Vec::new(),
        gpus_per_worker: 0,
        hide_gpus: false,
        heartbeat_ms: 100,
        workers: 1,
        metrics_stdout: true,
        collect: contract::Collect::default(),
        inherit: contract::Inherit::default(),
    }
}

/// A `sluice-runtime pod` running, its standard output read line by line as it comes.
struct Pod {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

/// Starts `sluice-runtime pod` for `launch`, in `cwd`.
fn start(tmp: &Tmp, launch: &Launch, cwd: &Path) -> Pod {
    start_with(tmp, launch, cwd, &[])
}

/// [`start`] with more variables in the container's environment.
fn start_with(tmp: &Tmp, launch: &Launch, cwd: &Path, env: &[(&str, &str)]) -> Pod {
    let mut child = Command::new(BIN)
        .arg("pod")
        .envs(env.iter().copied())
        .current_dir(cwd)
        .env(
            "SLUICE_POD_LAUNCH",
            serde_json::to_string(launch).expect("encode"),
        )
        .env("SLUICE_POD_KEY", KEY)
        .env("SLUICE_POD_DIR", tmp.0.join("pod/attempt"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice-runtime pod");
    let (tx, lines) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Pod {
        child,
        lines,
        seen: Vec::new(),
    }
}

impl Pod {
    /// Waits (bounded) for a line of standard output that ends with `end`.
    fn wait_line(&mut self, end: &str) {
        let until = Instant::now() + DEADLINE;
        while !self.seen.iter().any(|l| l.ends_with(end)) {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => panic!("no line ending '{end}' on stdout: {:?}", self.seen),
            }
        }
    }

    /// Waits (bounded) for the runtime to exit: its status, standard output and error.
    fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        let until = Instant::now() + DEADLINE;
        let status = loop {
            match self.child.try_wait().expect("wait") {
                Some(s) => break s,
                None if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                None => {
                    let _ = self.child.kill();
                    panic!("sluice-runtime pod did not end within {DEADLINE:?}");
                }
            }
        };
        // The reader ends with the pipe, once every line is in.
        while let Ok(line) = self.lines.recv_timeout(DEADLINE) {
            self.seen.push(line);
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        (status, std::mem::take(&mut self.seen), err)
    }
}

impl Drop for Pod {
    /// A test that failed half-way leaves no runtime behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (bounded) until `path` exists and `ok` accepts its text.
fn wait_stored(path: &Path, ok: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + DEADLINE;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && ok(&text)
        {
            return text;
        }
        assert!(Instant::now() < until, "{} never came", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_worker_s_result_log_and_metrics_are_stored_and_its_lines_printed() {
    let tmp = Tmp::new("pod-ok");
    let l = launch(&tmp, "echo hi; echo loss=0.5");
    let (status, out, err) = start(&tmp, &l, &tmp.0).finish();
    assert!(status.success(), "{status:?}: {err}");
    let r = tmp.result();
    assert_eq!(r.end, End::Succeeded, "{r:?}");
    assert_eq!(r.metrics.get("loss"), Some(&0.5));
    let log = tmp.read_stored(contract::LOG_FILE);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].ends_with(" out hi"), "{log}");
    // Printed exactly as logged: `TIME STREAM TEXT`.
    assert_eq!(out, lines, "stdout is the log");
    assert!(tmp.read_stored(contract::METRICS_FILE).contains("loss"));
    let started: contract::Started =
        serde_json::from_str(&tmp.read_stored("started.json")).expect("started.json");
    assert_eq!(started.started_at, r.started_at);
    let beat = tmp.read_stored("heartbeat");
    assert!(sluice_runtime::time::parse(&beat).is_ok(), "{beat}");
}

/// The container's environment (the image's, the pod's) reaches the program; the runtime's
/// own variables and the object store's Secret (taken under `SLUICE_OBJECTS_`) do not.
#[test]
fn the_program_keeps_the_container_s_environment_but_not_the_runtime_s() {
    let tmp = Tmp::new("pod-env");
    let mut l = launch(&tmp, "env");
    l.env.insert("DECLARED".into(), "by the step".into());
    let extra = [
        ("FROM_IMAGE", "cuda-12"),
        ("SLUICE_OBJECTS_AWS_SECRET_ACCESS_KEY", "secret-do-not-leak"),
        ("SLUICE_OBJECTS_AWS_ACCESS_KEY_ID", "AKIADONOTLEAK"),
    ];
    let (status, out, err) = start_with(&tmp, &l, &tmp.0, &extra).finish();
    assert!(status.success(), "{status:?}: {err}");
    let seen = out.join("\n");
    assert!(seen.contains(" out FROM_IMAGE=cuda-12"), "{seen}");
    assert!(seen.contains(" out DECLARED=by the step"), "{seen}");
    for hidden in [
        "SLUICE_POD_LAUNCH",
        "SLUICE_POD_KEY",
        "SLUICE_POD_DIR",
        "SLUICE_OBJECTS_",
    ] {
        assert!(
            !seen.contains(&format!(" out {hidden}")),
            "{hidden} passed: {seen}"
        );
    }
    assert!(
        !seen.contains("do-not-leak") && !seen.contains("AKIADONOTLEAK"),
        "{seen}"
    );
}

#[test]
fn an_empty_workdir_runs_the_program_in_the_current_directory() {
    let tmp = Tmp::new("pod-cwd");
    let mut l = launch(&tmp, "pwd -P");
    l.workdir = PathBuf::new();
    let here = tmp.0.join("here");
    std::fs::create_dir_all(&here).expect("mkdir");
    let (status, out, err) = start(&tmp, &l, &here).finish();
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(tmp.result().end, End::Succeeded);
    let real = here.canonicalize().expect("canonical");
    let want = format!(" out {}", real.display());
    assert!(out.iter().any(|line| line.ends_with(&want)), "{out:?}");
}

#[test]
fn sigterm_ends_the_attempt_terminated_and_still_stores_everything_within_the_grace() {
    let tmp = Tmp::new("pod-term");
    let l = launch(
        &tmp,
        "trap 'echo trapped; exit 143' TERM; echo loss=0.9; echo ready; sleep 30 & wait",
    );
    let mut pod = start(&tmp, &l, &tmp.0);
    // While the program runs: its lines printed live, started.json, the heartbeat and the
    // metrics so far in the store.
    pod.wait_line(" out ready");
    wait_stored(&tmp.stored("started.json"), |t| t.contains("\"pid\""));
    wait_stored(&tmp.stored("heartbeat"), |t| {
        sluice_runtime::time::parse(t).is_ok()
    });
    wait_stored(&tmp.stored(contract::METRICS_FILE), |t| t.contains("loss"));
    assert!(!tmp.stored(contract::RESULT_FILE).exists());

    let pid = nix::unistd::Pid::from_raw(i32::try_from(pod.child.id()).expect("a pid"));
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let (status, out, err) = pod.finish();
    let took = sent.elapsed();
    assert!(status.success(), "{status:?}: {err}");
    assert!(
        took < Duration::from_millis(l.grace_ms),
        "ended in {took:?}, past the grace"
    );
    let r = tmp.result();
    assert_eq!(r.end, End::Terminated, "{r:?}");
    assert_eq!(r.metrics.get("loss"), Some(&0.9));
    assert!(tmp.read_stored(contract::LOG_FILE).contains(" out trapped"));
    assert!(out.iter().any(|l| l.ends_with(" out trapped")), "{out:?}");
}

#[test]
fn a_result_that_cannot_be_stored_is_an_error_exit() {
    let tmp = Tmp::new("pod-no-result");
    // A folder where result.json goes: the store refuses to write it.
    std::fs::create_dir_all(tmp.stored("result.json/x")).expect("mkdir");
    let l = launch(&tmp, "echo hi");
    let (status, _, err) = start(&tmp, &l, &tmp.0).finish();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "sluice-runtime: error: cannot upload {KEY}/result.json"
        )),
        "{err}"
    );
    // What came before the result is stored.
    assert!(tmp.read_stored(contract::LOG_FILE).contains(" out hi"));
}

#[test]
fn a_pod_without_its_launch_is_a_clear_error() {
    let tmp = Tmp::new("pod-no-launch");
    let out = wait_output(
        Command::new(BIN)
            .arg("pod")
            .env_remove("SLUICE_POD_LAUNCH")
            .env("SLUICE_POD_KEY", KEY)
            .env("SLUICE_POD_DIR", tmp.0.join("pod/attempt"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("sluice-runtime: error: SLUICE_POD_LAUNCH is not set"),
        "{err}"
    );
}
