//! A Cluster's runtime settings reach the attempts of a run started with it (issue 14, item 5):
//! `runtime.keepCheckpoints` (complete checkpoints kept per step), `preemption.gracePeriod`
//! (SIGTERM to SIGKILL) and `runtime.heartbeatTimeout` (a silent attempt is lost). Each test
//! sets a value far from the default, so that a setting ignored fails it.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice_e2e::{Sandbox, runtime_pid, signal, wait_for};

/// A Cluster of one node for team `lab`, with `extra` added under `spec:`.
fn cluster(extra: &str) -> String {
    format!(
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {{name: here}}
spec:
  pools:
    - name: cpu
      nodes: 1
      resources: {{cpu: 8, memory: 8Gi}}
  teams:
    - {{name: lab}}
{extra}"#
    )
}

/// Waits for `child` to end, at most `limit`; kills it and fails the test past that.
fn wait_child(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("the engine can be waited for") {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the engine did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sequence numbers of the complete checkpoints of `step` of `run` (those with a manifest)
/// in the home's default object store.
fn checkpoints(home: &Path, run: &str, step: &str) -> Vec<u64> {
    let dir = home.join(format!("objects/teams/lab/checkpoints/{run}/{step}"));
    let mut seqs: Vec<u64> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("MANIFEST.json").is_file())
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    seqs.sort_unstable();
    seqs
}

#[test]
fn keep_checkpoints_keeps_only_that_many_newest_checkpoints_of_a_step() {
    let sb = Sandbox::new("keep-checkpoints");
    sb.write(
        "cluster.yaml",
        &cluster("  runtime:\n    keepCheckpoints: 2\n"),
    );
    // Eight counts, each a changed checkpoint, synced every 50 ms, then once more at the end:
    // many more checkpoints than two are made.
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: counter, team: lab}
spec:
  steps:
    - name: count
      checkpoint: {every: 50ms}
      command:
        - python3
        - -c
        - |
          import os, time
          ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "count")
          for n in range(1, 9):
              with open(ck + ".tmp", "w") as f:
                  f.write(str(n))
              os.replace(ck + ".tmp", ck)
              time.sleep(0.2)
"#,
    );
    let out = sb.run(&["run", "p.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let kept = checkpoints(&sb.home(), &sb.last_run(), "count");
    assert_eq!(kept.len(), 2, "checkpoints kept: {kept:?}");
    // The newest two: more than two were made, and the older ones were pruned.
    assert!(kept[0] >= 2, "the older checkpoints were pruned: {kept:?}");
    assert_eq!(kept[1], kept[0] + 1, "the two newest are kept: {kept:?}");
}

#[test]
fn grace_period_gives_a_preempted_step_that_long_after_sigterm_before_sigkill() {
    let sb = Sandbox::new("grace-period");
    sb.write(
        "cluster.yaml",
        &cluster("  preemption:\n    gracePeriod: 2s\n"),
    );
    // The program ignores SIGTERM, noting when it came, and ticks every 50 ms until SIGKILL.
    // Its second attempt (after the preemption) ends at once.
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: stubborn, team: lab}
spec:
  steps:
    - name: hold
      retry: {limit: 0}
      command:
        - python3
        - -c
        - |
          import os, signal, time
          if os.environ["SLUICE_ATTEMPT"] != "1":
              raise SystemExit(0)
          def note(name):
              # Whole or not at all: SIGKILL may land between opening and writing.
              with open(name + ".tmp", "w") as f:
                  f.write("%.3f" % time.time())
              os.replace(name + ".tmp", name)
          signal.signal(signal.SIGTERM, lambda *_: note("term"))
          open("started", "w").write("")
          while True:
              note("tick")
              time.sleep(0.05)
"#,
    );
    let mut engine = sb.spawn(&["run", "p.yaml", "--cluster", "cluster.yaml"]);
    wait_for("the step to start", || sb.path().join("started").is_file());
    let run = sb.last_run();
    let out = sb.run(&["preempt", &run, "hold"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // The default grace period is 30 s: the run ending well before says the Cluster's was used.
    let status = wait_child(&mut engine, Duration::from_secs(25));
    assert!(status.success(), "the run succeeds");
    let read = |name: &str| -> f64 {
        std::fs::read_to_string(sb.path().join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let alive_after_term = read("tick") - read("term");
    assert!(
        alive_after_term >= 1.8,
        "the program was killed {alive_after_term:.3} s after SIGTERM, before the 2 s grace period"
    );
    let status = sb.status(&run);
    let attempts = status["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    assert_eq!(attempts[0]["state"], "Preempted", "{status}");
    assert_eq!(attempts[1]["state"], "Succeeded", "{status}");
}

#[test]
fn heartbeat_timeout_of_the_cluster_declares_a_silent_attempt_lost() {
    let sb = Sandbox::new("heartbeat-cluster");
    sb.write(
        "cluster.yaml",
        &cluster("  runtime:\n    heartbeatTimeout: 1s\n"),
    );
    // Attempt 1 ticks until it is stopped; attempt 2 ends at once.
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: silent, team: lab}
spec:
  steps:
    - name: tick
      command:
        - python3
        - -c
        - |
          import os, time
          if os.environ["SLUICE_ATTEMPT"] != "1":
              raise SystemExit(0)
          open("started", "w").write("")
          while True:
              time.sleep(0.05)
"#,
    );
    let mut engine = sb.spawn(&["run", "p.yaml", "--cluster", "cluster.yaml"]);
    wait_for("the step to start", || sb.path().join("started").is_file());
    let run = sb.last_run();
    let mut runtime = None;
    wait_for("attempt 1 to record its runtime", || {
        runtime = runtime_pid(&sb.home(), &run, "tick", 1);
        runtime.is_some()
    });
    let runtime = runtime.expect("a runtime pid");
    // The runtime hangs: no heartbeat comes. The default timeout is 60 s.
    signal(runtime, "STOP");
    let status = wait_child(&mut engine, Duration::from_secs(40));
    // The engine killed the hung runtime; never leave it stopped if it did not.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &runtime.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
    assert!(status.success(), "the run succeeds");
    let status = sb.status(&run);
    let attempts = status["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    assert_eq!(attempts[0]["state"], "Lost", "{status}");
    let reason = attempts[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no heartbeat"), "{reason}");
    assert_eq!(attempts[1]["state"], "Succeeded", "{status}");
}
