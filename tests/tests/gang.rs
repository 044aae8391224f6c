//! Gangs on one machine: `workers: 4` starts four copies together with their ranks and a
//! rendezvous address; they meet over TCP (python3's standard library); killing one worker
//! stops the other three, and the whole gang starts again from the checkpoint.

use std::collections::{BTreeMap, BTreeSet};

use sluice_e2e::{Sandbox, signal, wait, wait_for};

const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: gang}
spec:
  steps:
    - name: train
      resources: {cpu: 100m, workers: 4}
      checkpoint: {every: 100ms}
      retry: {limit: 1, backoff: 100ms}
      command:
        - python3
        - -c
        - |
          import os, socket, time
          rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
          port, attempt = int(os.environ["MASTER_PORT"]), os.environ["SLUICE_ATTEMPT"]
          os.makedirs("pids", exist_ok=True)
          open(f"pids/{attempt}-{rank}", "w").write(str(os.getpid()))
          ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "step")
          n = int(open(ck).read()) if os.path.exists(ck) else 0
          # Rendezvous: everyone reports to rank 0, which answers once all have.
          if rank == 0:
              srv = socket.socket()
              srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
              srv.bind((os.environ["MASTER_ADDR"], port))
              srv.listen(world)
              conns, seen = [], {0}
              while len(seen) < world:
                  c, _ = srv.accept()
                  seen.add(int(c.recv(16).decode()))
                  conns.append(c)
              for c in conns:
                  c.sendall(b"go")
                  c.close()
          else:
              while True:
                  try:
                      c = socket.create_connection((os.environ["MASTER_ADDR"], port))
                      break
                  except OSError:
                      time.sleep(0.05)
              c.sendall(str(rank).encode())
              assert c.recv(2) == b"go"
              c.close()
          with open("met", "a") as f:
              f.write(f"{attempt} {rank} {world} {n}\n")
          while n < 40:
              n += 1
              if rank == 0:
                  with open(ck + ".tmp", "w") as f:
                      f.write(str(n))
                  os.replace(ck + ".tmp", ck)
              with open("work", "a") as f:
                  f.write(f"{attempt} {rank} {n}\n")
              time.sleep(0.05)
"#;

/// `met` lines: (attempt, rank, world, count at start).
fn met(sb: &Sandbox) -> Vec<(u32, u32, u32, u32)> {
    std::fs::read_to_string(sb.path().join("met"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let v: Vec<u32> = l.split(' ').filter_map(|w| w.parse().ok()).collect();
            (v.len() == 4).then(|| (v[0], v[1], v[2], v[3]))
        })
        .collect()
}

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
}

#[test]
fn a_gang_meets_and_restarts_together_from_its_checkpoint() {
    let sb = Sandbox::new("gang");
    sb.write("p.yaml", PIPELINE);
    let engine = sb
        .cmd(&["run", "p.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sluice run starts");
    wait_for("the four workers to meet", || met(&sb).len() == 4);
    wait_for("some work", || {
        std::fs::read_to_string(sb.path().join("work"))
            .is_ok_and(|w| w.lines().filter(|l| l.starts_with("1 0 ")).count() >= 8)
    });
    let victim = std::fs::read_to_string(sb.path().join("pids/1-2")).expect("worker 2's pid");
    signal(victim.trim().parse().expect("a pid"), "KILL");

    let out = wait::output_of(engine, "sluice run p.yaml");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Both attempts: all four ranks met, each knowing its own rank and the world size.
    let met = met(&sb);
    let mut by_attempt: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    for (attempt, rank, world, _) in &met {
        assert_eq!(*world, 4);
        by_attempt.entry(*attempt).or_default().insert(*rank);
    }
    let all: BTreeSet<u32> = (0..4).collect();
    assert_eq!(by_attempt.get(&1), Some(&all), "{met:?}");
    assert_eq!(by_attempt.get(&2), Some(&all), "{met:?}");
    assert_eq!(by_attempt.len(), 2, "{met:?}");
    // The second start resumed the whole gang from one checkpoint.
    let resumed: BTreeSet<u32> = met.iter().filter(|m| m.0 == 2).map(|m| m.3).collect();
    assert_eq!(
        resumed.len(),
        1,
        "every worker restored the same checkpoint: {met:?}"
    );
    assert!(resumed.iter().all(|n| *n > 0), "{met:?}");
    // None of the first attempt's workers is left running.
    for rank in 0..4 {
        let pid = std::fs::read_to_string(sb.path().join(format!("pids/1-{rank}")))
            .expect("a pid per worker");
        assert!(!alive(&pid), "worker {rank} of attempt 1 still runs");
    }
    let status = sb.status(&sb.last_run());
    let attempts = status["steps"][0]["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2, "{status}");
    let reason = attempts[0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("worker 2 of 4"), "{reason}");
    assert_eq!(attempts[1]["state"], "Succeeded");
}
