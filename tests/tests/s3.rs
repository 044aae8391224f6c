//! The object store on a real S3-compatible server (moto, on loopback): checkpoints, outputs
//! and logs, a preemption, and the server hanging for a while in the middle of a run.

use sluice_e2e::s3::S3;
use sluice_e2e::{Sandbox, wait, wait_for};

/// Counts to 60 (50 ms a count), checkpointing each count; prints the total and writes it as
/// an output, which `show` reads.
const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: s3-counter}
spec:
  steps:
    - name: count
      checkpoint: {every: 200ms}
      outputs: [total]
      command:
        - python3
        - -c
        - |
          import os, time
          ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "count")
          n = int(open(ck).read()) if os.path.exists(ck) else 0
          with open("starts", "a") as f:
              f.write(f"{os.environ['SLUICE_ATTEMPT']} {n} {os.environ['SLUICE_RESUMED']}\n")
          while n < 60:
              n += 1
              with open("work", "a") as f:
                  f.write(f"{n}\n")
              with open(ck + ".tmp", "w") as f:
                  f.write(str(n))
              os.replace(ck + ".tmp", ck)
              time.sleep(0.05)
          print(f"counted {n}")
          open(os.path.join(os.environ["SLUICE_OUTPUT_DIR"], "total"), "w").write(str(n))
    - name: show
      needs: [count]
      run: echo "total $(cat {{steps.count.outputs.total}})"
"#;

fn lines(sb: &Sandbox, file: &str) -> Vec<String> {
    std::fs::read_to_string(sb.path().join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn checkpoints_outputs_and_logs_live_in_s3_and_survive_a_hanging_server() {
    let s3 = S3::start("sluice-test");
    let sb = Sandbox::new("s3");
    sb.write("p.yaml", PIPELINE);
    // A bucket that does not exist is an error before anything runs (exit 3).
    let mut cmd = sb.cmd(&["run", "p.yaml", "--objects", "s3://no-such-bucket/x"]);
    for (k, v) in s3.env() {
        cmd.env(k, v);
    }
    let out = wait::output(&mut cmd);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot reach the object store s3://no-such-bucket/x"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sb.path().join("starts").exists(), "nothing ran");

    let url = s3.url("team-store");
    let mut cmd = sb.cmd(&["run", "p.yaml", "--objects", &url]);
    for (k, v) in s3.env() {
        cmd.env(k, v);
    }
    let engine = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sluice run starts");
    wait_for("counting", || lines(&sb, "work").len() > 8);
    let run = sb.last_run();

    // A preemption: the next attempt resumes from the checkpoint stored in S3.
    let mut preempt = sb.cmd(&["preempt", &run, "count"]);
    for (k, v) in s3.env() {
        preempt.env(k, v);
    }
    assert!(wait::output(&mut preempt).status.success());
    wait_for("attempt 2", || lines(&sb, "starts").len() == 2);

    // The server hangs while the program counts: syncs wait and retry, the program does not
    // notice. It counts on (ten counts, which take several sync intervals, so syncs do meet
    // the hung server) while the server is still frozen. How fast it counts is not the
    // question: a held-up program never gets there, and the wait fails at its deadline.
    wait_for("attempt 2 counting", || lines(&sb, "work").len() > 25);
    s3.pause();
    let counted_before = lines(&sb, "work").len();
    wait_for("the program to count on while the store hangs", || {
        lines(&sb, "work").len() >= counted_before + 10
    });
    s3.resume();

    let out = wait::output_of(engine, "sluice run p.yaml --objects s3://...");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let starts = lines(&sb, "starts");
    assert_eq!(starts.len(), 2, "{starts:?}");
    let resumed_at: u32 = starts[1]
        .split(' ')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!(
        resumed_at > 0 && starts[1].ends_with(" 1"),
        "attempt 2 resumed: {starts:?}"
    );

    // Everything went to the bucket, under the prefix, in the spec's layout; nothing to the
    // home's folder store.
    let attempt = format!("team-store/teams/default/runs/{run}/count/2");
    assert!(s3.exists(&format!("{attempt}/outputs/total")));
    assert!(s3.exists(&format!("{attempt}/logs/output.log")));
    assert!(!s3.exists(&format!("{attempt}/logs/no-such-log")));
    assert!(!sb.home().join("objects/teams").exists());

    // The downstream step read the output from S3, and logs come back from S3 once the
    // attempt folders are gone.
    std::fs::remove_dir_all(sb.home().join("attempts")).expect("attempt folders");
    let mut logs = sb.cmd(&["logs", &run, "show"]);
    for (k, v) in s3.env() {
        logs.env(k, v);
    }
    let out = wait::output(&mut logs);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("out total 60"), "{text}");
    let mut logs = sb.cmd(&["logs", &run, "count"]);
    for (k, v) in s3.env() {
        logs.env(k, v);
    }
    let out = wait::output(&mut logs);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("out counted 60"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
