//! Checkpoints end to end: a program that counts to N, checkpointing each count, is preempted
//! at random moments and its runtime SIGKILLed once; it still ends with the right result,
//! every start is an attempt, the retry budget is untouched, and little work is redone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_e2e::{Sandbox, runtime_pid, signal, wait, wait_for};

const N: u32 = 60;

/// Counts to N, 50 ms a count. Each count is appended to `work` (a side effect outside the
/// checkpoint) and then written to the checkpoint folder atomically.
const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: counter}
spec:
  steps:
    - name: count
      checkpoint: {every: 200ms}
      retry: {limit: 0}
      command:
        - python3
        - -c
        - |
          import os, sys, time
          target = int(sys.argv[1])
          ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "count")
          n = int(open(ck).read()) if os.path.exists(ck) else 0
          with open("starts", "a") as f:
              f.write(f"{os.environ['SLUICE_ATTEMPT']} {n} {os.environ['SLUICE_RESUMED']}\n")
          while n < target:
              n += 1
              with open("work", "a") as f:
                  f.write(f"{n}\n")
              with open(ck + ".tmp", "w") as f:
                  f.write(str(n))
              os.replace(ck + ".tmp", ck)
              time.sleep(0.05)
          open("result", "w").write(str(n))
        - "60"
"#;

fn counted(sb: &Sandbox) -> usize {
    std::fs::read_to_string(sb.path().join("work"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn starts(sb: &Sandbox) -> Vec<(u32, u32, String)> {
    std::fs::read_to_string(sb.path().join("starts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            Some((
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
                w.next()?.to_owned(),
            ))
        })
        .collect()
}
#[test]
fn preempted_and_lost_steps_resume_from_their_checkpoint() {
    let sb = Sandbox::new("ckpt");
    sb.write("p.yaml", PIPELINE);
    let mut engine = sb.spawn(&["run", "p.yaml"]);
    wait_for("the first count", || counted(&sb) > 0);
    let run = sb.last_run();

    // Three preemptions at different moments, each once the new attempt has counted a bit.
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for i in 0..3u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(150 + rng % 300));
        let out = sb.run(&["preempt", &run, "count"]);
        assert_eq!(out.code, Some(0), "preempt {i}: {}", out.stderr);
        wait_for("the next attempt to start", || {
            starts(&sb).len() == i as usize + 2
        });
        wait_for("the next attempt to count", || {
            counted(&sb) > starts(&sb).last().map_or(0, |s| s.1 as usize) + 2
        });
    }
    // Then its runtime is SIGKILLed: the attempt is lost and resumes like a preempted one.
    std::thread::sleep(Duration::from_millis(300));
    let runtime = runtime_pid(&sb.home(), &run, "count", 4).expect("attempt 4 records its runtime");
    signal(runtime, "KILL");

    let status = wait::status(&mut engine, "sluice run p.yaml");
    assert_eq!(status.code(), Some(0), "the run succeeds");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("result")).expect("result"),
        N.to_string()
    );

    // Every start is an attempt: 1..=5, each after the first resumed from a checkpoint.
    let starts = starts(&sb);
    let attempts: Vec<u32> = starts.iter().map(|s| s.0).collect();
    assert_eq!(attempts, vec![1, 2, 3, 4, 5], "{starts:?}");
    assert_eq!(starts[0].2, "0");
    assert!(
        starts[1..].iter().all(|s| s.2 == "1" && s.1 > 0),
        "{starts:?}"
    );

    // The retry budget (0) is untouched: the step succeeded after 4 interruptions.
    let status = sb.status(&run);
    let states: Vec<&str> = status["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter_map(|a| a["state"].as_str())
        .collect();
    assert_eq!(
        states,
        vec!["Preempted", "Preempted", "Preempted", "Lost", "Succeeded"],
        "{status}"
    );

    // Work redone: a preemption syncs after the program stops, so at most the count in
    // flight is redone; a lost runtime, at most one checkpoint interval (200 ms = 4 counts)
    // and the count in flight.
    let mut times: BTreeMap<u32, u32> = BTreeMap::new();
    for l in std::fs::read_to_string(sb.path().join("work"))
        .expect("work")
        .lines()
    {
        *times.entry(l.parse().expect("a count")).or_default() += 1;
    }
    assert_eq!(times.len(), N as usize, "every count was done");
    let redone: u32 = times.values().map(|t| t - 1).sum();
    assert!(redone <= 3 + 5, "{redone} counts redone: {times:?}");
}

#[test]
fn a_runtime_silent_past_the_heartbeat_timeout_loses_its_attempt_which_resumes() {
    let sb = Sandbox::new("heartbeat");
    // The counter, with each count tagged by its attempt.
    sb.write(
        "p.yaml",
        &PIPELINE
            .replace(
                "f.write(f\"{n}\\n\")",
                "f.write(f\"{os.environ['SLUICE_ATTEMPT']} {n}\\n\")",
            )
            .replace("\"60\"", "\"40\""),
    );
    let mut engine = sb.spawn_with(&["run", "p.yaml"], &[("SLUICE_HEARTBEAT_TIMEOUT", "1s")]);
    wait_for("some counts", || counted(&sb) > 5);
    let run = sb.last_run();
    let runtime = runtime_pid(&sb.home(), &run, "count", 1).expect("attempt 1 records its runtime");
    // The runtime hangs (SIGSTOP): its program goes on counting, but no heartbeat comes.
    signal(runtime, "STOP");

    let status = wait::status(&mut engine, "sluice run p.yaml");
    assert_eq!(status.code(), Some(0), "the run succeeds");
    let status = sb.status(&run);
    let attempts = status["steps"][0]["attempts"]
        .as_array()
        .expect("attempts")
        .clone();
    assert_eq!(attempts.len(), 2, "{status}");
    assert_eq!(attempts[0]["state"], "Lost");
    let reason = attempts[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("no heartbeat"), "{reason}");
    assert_eq!(attempts[1]["state"], "Succeeded");
    // Attempt 2 resumed from the checkpoint, and attempt 1's program was ended before it
    // started: no count of attempt 1 after the first of attempt 2.
    let starts = starts(&sb);
    assert!(
        starts.len() == 2 && starts[1].1 > 0 && starts[1].2 == "1",
        "{starts:?}"
    );
    let work = std::fs::read_to_string(sb.path().join("work")).expect("work");
    let tags: Vec<&str> = work.lines().filter_map(|l| l.split(' ').next()).collect();
    let first_of_2 = tags
        .iter()
        .position(|t| *t == "2")
        .expect("attempt 2 counted");
    assert!(
        tags[first_of_2..].iter().all(|t| *t == "2"),
        "attempt 1 still counted after attempt 2 started"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("result")).expect("result"),
        "40"
    );
    // The hung runtime was ended (a stopped process still takes SIGKILL).
    assert!(
        !std::path::Path::new(&format!("/proc/{runtime}")).exists() || {
            std::thread::sleep(Duration::from_millis(500));
            !std::path::Path::new(&format!("/proc/{runtime}")).exists()
        }
    );
}

#[test]
fn a_sync_cut_off_by_a_killed_runtime_is_never_restored() {
    let sb = Sandbox::new("cutoff");
    // Attempt 1 saves version 1 (small), waits for it to be synced, then saves version 2
    // (100 MB in 20 files) and waits; attempt 2 reports what it finds.
    sb.write(
        "p.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: cutoff}
spec:
  steps:
    - name: save
      checkpoint: {every: 100ms}
      command:
        - python3
        - -c
        - |
          import os, time
          ck = os.environ["SLUICE_CHECKPOINT_DIR"]
          def save(name, data):
              with open(os.path.join(ck, name + ".tmp"), "wb") as f:
                  f.write(data)
              os.replace(os.path.join(ck, name + ".tmp"), os.path.join(ck, name))
          if os.environ["SLUICE_ATTEMPT"] == "1":
              save("version", b"1")
              time.sleep(1.0)
              # Version 2 appears at once: shards written aside, then moved in, then the
              # version file, so that one sync carries all of it.
              os.makedirs("aside", exist_ok=True)
              for i in range(20):
                  with open(f"aside/shard-{i}", "wb") as f:
                      f.write(os.urandom(5 << 20))
              for i in range(20):
                  os.replace(f"aside/shard-{i}", os.path.join(ck, f"shard-{i}"))
              save("version", b"2")
              time.sleep(60)
          else:
              files = sorted(os.listdir(ck))
              sizes = {f: os.path.getsize(os.path.join(ck, f)) for f in files}
              whole = all(sizes[f] == 5 << 20 for f in files if f.startswith("shard-"))
              open("found", "w").write(f"{open(os.path.join(ck, 'version')).read()} {whole}")
"#,
    );
    let mut engine = sb.spawn(&["run", "p.yaml"]);
    // Watch the step's checkpoints: once a second checkpoint has data but no manifest yet,
    // kill the runtime in the middle of that upload.
    let objects = sb.home().join("objects/teams/default/checkpoints");
    let deadline = Instant::now() + Duration::from_secs(60);
    let run = loop {
        assert!(Instant::now() < deadline, "never saw a sync in progress");
        // Once version 1 is a complete checkpoint, any later one with data but no manifest
        // yet is a sync in progress.
        let found = std::fs::read_dir(&objects).ok().and_then(|mut runs| {
            let run = runs.next()?.ok()?;
            let save = run.path().join("save");
            let complete_first = save.join("0000000001/MANIFEST.json").exists();
            let seqs = std::fs::read_dir(&save).ok()?;
            let in_progress = seqs.flatten().any(|seq| {
                seq.file_name() != "0000000001"
                    && seq.path().join("data").is_dir()
                    && !seq.path().join("MANIFEST.json").exists()
            });
            (complete_first && in_progress).then(|| run.file_name().to_string_lossy().into_owned())
        });
        if let Some(run) = found {
            break run;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let runtime =
        runtime_pid(&sb.home(), &run, "save", 1).expect("the attempt records its runtime");
    signal(runtime, "KILL");
    let status = wait::status(&mut engine, "sluice run p.yaml");
    assert_eq!(status.code(), Some(0));
    let found = std::fs::read_to_string(sb.path().join("found")).expect("attempt 2 ran");
    // The newest complete checkpoint had version 1 (and, if a sync caught the move half-way,
    // some whole shards): never the cut-off version 2, never a partial file.
    assert_eq!(
        found, "1 True",
        "attempt 2 restored the cut-off sync: {found}"
    );
}
