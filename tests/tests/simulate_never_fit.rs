//! `sluice simulate` on jobs that can never fit (a warning, once, and `never_fit` in the
//! JSON) and its text table's waits in human units (the JSON keeps seconds).

use sluice_e2e::{Ran, TempDir, run_in};

/// One node of 4 GPUs; a team whose ceiling (quota + borrow limit) is 4 GPUs.
const CLUSTER: &str = "apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: one}
spec:
  pools:
    - {name: small, nodes: 1, resources: {gpu: 4, cpu: 32, memory: 64Gi}}
  teams:
    - {name: vision, quota: {gpu: 2}, borrowLimit: {gpu: 2}}
";

/// At 0 two 4-GPU jobs of 3h30m (the second waits for the first); at 10 s one worker of
/// 8 GPUs (no node holds it) and a gang of 2 x 4 GPUs (the node holds one of them).
const JOBS: &str =
    "submit,team,workers,gpu,cpu,memory,duration,priority,interruptible,checkpoint_every,flavor
0,vision,1,4,1,1Gi,12600,,false,0,
0,vision,1,4,1,1Gi,12600,,false,0,
10,vision,1,8,1,1Gi,60,,false,0,
10,vision,2,4,1,1Gi,60,,false,0,
";

fn simulate(tmp: &TempDir, jobs: &str, extra: &[&str]) -> Ran {
    let c = tmp.write("c.yaml", CLUSTER).display().to_string();
    let j = tmp.write("j.csv", jobs).display().to_string();
    let mut args = vec!["simulate", "--cluster", &c, "--workload", &j];
    args.extend(extra);
    run_in(tmp.path(), &args)
}

#[test]
fn jobs_that_can_never_fit_are_a_warning_once_and_counted_in_json() {
    let tmp = TempDir::new("simulate-never-fit");
    let out = simulate(&tmp, JOBS, &["--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stderr,
        "sluice: warning: 2 of 4 jobs can never start on this cluster, under any policy; they count as never started, waiting until the replay stops\n  \
         1 with a worker larger than any node it may use: the largest asks for 1 worker of 8 GPU, 1 CPU, 1Gi (team vision, submitted at 10s); the largest node it may use holds 4 GPU, 32 CPU, 64Gi\n  \
         1 gang(s) larger than the nodes they may use hold together: the largest asks for 2 workers x (4 GPU, 1 CPU, 1Gi) (team vision, submitted at 10s); those nodes have room for 1 of its workers\n  \
         help: make those jobs smaller, or give the Cluster file larger or more nodes (or a higher borrowLimit)\n"
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    for policy in ["fifo", "priority", "fair"] {
        let p = &v["policies"][policy];
        assert_eq!(p["never_fit"], 2, "{policy}: {p}");
        assert!(p["never_started"].as_u64().is_some_and(|n| n >= 2), "{p}");
        // Waits stay in seconds in JSON.
        assert!(p["wait_seconds"]["p50"].is_u64(), "{p}");
    }
    // Byte-identical for the same inputs.
    let again = simulate(&tmp, JOBS, &["--output", "json"]);
    assert_eq!(out.stdout, again.stdout);

    // Every job fits: no warning, and never_fit is 0.
    let fits: String = JOBS.lines().take(3).map(|l| format!("{l}\n")).collect();
    let out = simulate(&tmp, &fits, &["--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stderr, "");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["policies"]["fair"]["never_fit"], 0, "{v}");
}

#[test]
fn under_fair_a_job_above_its_teams_ceiling_is_named_too() {
    let tmp = TempDir::new("simulate-ceiling");
    // A 4-GPU job fits on the empty node, but the team may hold at most 2 + 1 GPUs.
    let cluster = CLUSTER.replace("borrowLimit: {gpu: 2}", "borrowLimit: {gpu: 1}");
    let c = tmp.write("c.yaml", &cluster).display().to_string();
    let jobs = "submit,team,workers,gpu,duration\n0,vision,1,4,60\n0,vision,1,2,60\n";
    let j = tmp.write("j.csv", jobs).display().to_string();
    let run = |policy: &str| {
        run_in(
            tmp.path(),
            &[
                "simulate",
                "--cluster",
                &c,
                "--workload",
                &j,
                "--policy",
                policy,
                "--output",
                "json",
            ],
        )
    };
    let fair = run("fair");
    assert_eq!(fair.code, Some(0), "{}", fair.stderr);
    assert!(
        fair.stderr.starts_with(
            "sluice: warning: under fair, 1 of 2 jobs can never start; they count as never started"
        ),
        "{}",
        fair.stderr
    );
    assert!(
        fair.stderr.contains(
            "1 asking for more than their team may ever hold (quota + borrowLimit): the largest asks for 1 worker of 4 GPU, 1 CPU (team vision, submitted at 0s), above 3 GPU"
        ),
        "{}",
        fair.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&fair.stdout).expect("json");
    assert_eq!(v["policies"]["fair"]["never_fit"], 1, "{v}");
    assert_eq!(v["policies"]["fair"]["never_started"], 1, "{v}");
    // fifo does not enforce ceilings: the job runs, and nothing is said.
    let fifo = run("fifo");
    assert_eq!(fifo.stderr, "");
    let v: serde_json::Value = serde_json::from_str(&fifo.stdout).expect("json");
    assert_eq!(v["policies"]["fifo"]["never_fit"], 0, "{v}");
}

#[test]
fn the_text_table_prints_waits_in_human_units() {
    let tmp = TempDir::new("simulate-human");
    let fits: String = JOBS.lines().take(3).map(|l| format!("{l}\n")).collect();
    let out = simulate(&tmp, &fits, &["--policy", "fifo"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // Waits: 0 and 12600 s (3h 30m): p50 0s, p95 and p99 3h 30m.
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("fifo"))
        .unwrap_or_else(|| panic!("no fifo row: {}", out.stdout));
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert!(cells.contains(&"3h 30m"), "{row}");
    assert!(!row.contains("12600"), "{row}");
    assert!(
        out.stdout.contains("team vision: fifo: p95 wait 3h 30m, "),
        "{}",
        out.stdout
    );
    let json = simulate(&tmp, &fits, &["--policy", "fifo", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(v["policies"]["fifo"]["wait_seconds"]["p95"], 12600, "{v}");
}
