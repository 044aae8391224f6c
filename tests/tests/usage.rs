//! `sluice usage` over a real run on a Cluster with prices: its GPU-hours, CPU-hours and cost
//! are what the attempts' recorded times (`sluice status --output json`) and the pools' prices
//! give, and a preempted step's lost work shows as wasted GPU-hours. Nothing here depends on
//! how long anything took: every expectation is computed from what was recorded.

use std::collections::BTreeMap;

use sluice_e2e::{Sandbox, step_states, wait, wait_for};

/// Two pools of one node each, with prices; `spot` takes interruptible steps only.
const CLUSTER: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: priced}
spec:
  pools:
    - name: a100
      nodes: 1
      resources: {gpu: 4, cpu: 8, memory: 64Gi}
      price: {gpuHour: 2.50, cpuHour: 0.04}
    - name: spot
      nodes: 1
      resources: {gpu: 4, cpu: 8, memory: 64Gi}
      interruptible: true
      price: {gpuHour: 1.10, cpuHour: 0.01}
  preemption:
    gracePeriod: 2s
"#;

/// `train` (2 GPUs, 1 core, interruptible, no checkpoints) blocks in its first attempt until
/// the test preempts it, then runs again and ends; `prep` (1 GPU, 2 cores) just ends.
const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: priced, team: vision}
spec:
  steps:
    - name: prep
      resources: {gpu: 1, cpu: 2}
      run: 'true'
    - name: train
      needs: [prep]
      interruptible: true
      checkpoint: false
      resources: {gpu: 2, cpu: 1}
      run: if [ "$SLUICE_ATTEMPT" = 1 ]; then touch train-started; while :; do sleep 0.05; done; fi
"#;

/// What each pool costs, by its index in the Cluster (its nodes, one each, have the same
/// index): name, price of a GPU-hour, of a CPU-hour.
const POOLS: [(&str, f64, f64); 2] = [("a100", 2.5, 0.04), ("spot", 1.1, 0.01)];

/// Each step's GPUs and cores, as the pipeline asks.
fn asks(step: &str) -> (f64, f64) {
    match step {
        "prep" => (1.0, 2.0),
        "train" => (2.0, 1.0),
        other => panic!("no step {other} in the pipeline"),
    }
}

/// Unix milliseconds of a timestamp as status writes it (`2026-12-02T19:00:00.123Z`).
fn ms(t: &str) -> f64 {
    let (date, time) = t
        .trim_end_matches('Z')
        .split_once('T')
        .unwrap_or_else(|| panic!("not a timestamp: {t}"));
    let d: Vec<i64> = date
        .split('-')
        .map(|p| p.parse().expect("a date"))
        .collect();
    let (y, m, day) = (d[0], d[1], d[2]);
    // Days since 1970-01-01 (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let hms: Vec<f64> = time
        .split(':')
        .map(|p| p.parse().expect("a time"))
        .collect();
    (days * 86_400) as f64 * 1000.0 + (hms[0] * 3600.0 + hms[1] * 60.0 + hms[2]) * 1000.0
}

#[derive(Debug, Default, Clone, Copy)]
struct Expected {
    gpu_hours: f64,
    cpu_hours: f64,
    cost: f64,
    wasted_gpu_hours: f64,
}

fn close(got: &serde_json::Value, want: f64, what: &str) {
    let got = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {got}"));
    assert!(
        (got - want).abs() <= 1e-9 * want.abs().max(1.0),
        "{what}: sluice usage says {got}, the recorded attempts give {want}"
    );
}

fn check(row: &serde_json::Value, want: &Expected, what: &str) {
    close(
        &row["gpu_hours"],
        want.gpu_hours,
        &format!("{what} gpu_hours"),
    );
    close(
        &row["cpu_hours"],
        want.cpu_hours,
        &format!("{what} cpu_hours"),
    );
    close(&row["cost"], want.cost, &format!("{what} cost"));
    close(
        &row["wasted_gpu_hours"],
        want.wasted_gpu_hours,
        &format!("{what} wasted_gpu_hours"),
    );
}

#[test]
fn usage_is_what_the_recorded_attempts_and_prices_give_and_preemption_wastes() {
    let sb = Sandbox::new("usage");
    sb.write("cluster.yaml", CLUSTER);
    sb.write("p.yaml", PIPELINE);
    let mut engine = sb.spawn(&["run", "p.yaml", "--cluster", "cluster.yaml"]);
    wait_for("train's first attempt", || {
        sb.path().join("train-started").is_file()
    });
    let run = sb.last_run();
    let out = sb.run(&["preempt", &run, "train"]);
    assert_eq!(out.code, Some(0), "preempt: {}", out.stderr);
    let status = wait::status(&mut engine, "sluice run p.yaml");
    assert_eq!(status.code(), Some(0), "the run succeeds");

    // The expectation, from what status recorded: each attempt's nodes, times and state.
    let status = sb.status(&run);
    assert_eq!(step_states(&status)["train"], "Succeeded", "{status}");
    let mut by_pool: BTreeMap<&str, Expected> = BTreeMap::new();
    let mut preempted = 0;
    for step in status["steps"].as_array().expect("steps") {
        let name = step["name"].as_str().expect("a step name");
        let (gpus, cores) = asks(name);
        for a in step["attempts"].as_array().expect("attempts") {
            let hours = (ms(a["ended_at"].as_str().expect("ended"))
                - ms(a["started_at"].as_str().expect("started")))
                / 3_600_000.0;
            let nodes = a["nodes"].as_array().expect("cluster mode records nodes");
            for node in nodes {
                let (pool, gpu_hour, cpu_hour) = POOLS[node.as_u64().expect("a node") as usize];
                let e = by_pool.entry(pool).or_default();
                e.gpu_hours += gpus * hours;
                e.cpu_hours += cores * hours;
                e.cost += gpus * hours * gpu_hour + cores * hours * cpu_hour;
                // No checkpoints: a preempted attempt's whole GPU time is lost.
                if a["state"] == "Preempted" {
                    preempted += 1;
                    e.wasted_gpu_hours += gpus * hours;
                }
            }
        }
    }
    assert_eq!(preempted, 1, "{status}");
    // A pool whose attempts took no measurable time (under a millisecond) has no row.
    by_pool.retain(|_, e| e.gpu_hours > 0.0);

    let usage = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["usage", "--output", "json"];
        all.extend_from_slice(args);
        let out = sb.run(&all);
        assert_eq!(out.code, Some(0), "usage {args:?}: {}", out.stderr);
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("usage prints JSON ({e}): {}", out.stdout))
    };

    // By pool: one row per pool the attempts ran on, each with only its key.
    let u = usage(&["--by", "pool"]);
    let rows = u["rows"].as_array().expect("rows");
    let pools: Vec<&str> = rows.iter().filter_map(|r| r["pool"].as_str()).collect();
    assert_eq!(pools, by_pool.keys().copied().collect::<Vec<_>>(), "{u}");
    assert!(
        rows.iter().all(|r| r.get("team").is_none()),
        "only --by's keys: {u}"
    );
    let mut total = Expected::default();
    for row in rows {
        let pool = row["pool"].as_str().expect("a pool");
        let want = by_pool[pool];
        check(row, &want, pool);
        total.gpu_hours += want.gpu_hours;
        total.cpu_hours += want.cpu_hours;
        total.cost += want.cost;
        total.wasted_gpu_hours += want.wasted_gpu_hours;
    }
    check(&u["total"], &total, "total");
    let wasted = u["total"]["wasted_gpu_hours"].as_f64().expect("a number");
    assert!(wasted > 0.0, "the preempted attempt's work is wasted: {u}");

    // By default, per team; with the pipeline too, its keys in every row.
    let u = usage(&[]);
    assert_eq!(u["rows"].as_array().map(Vec::len), Some(1), "{u}");
    assert_eq!(u["rows"][0]["team"], "vision", "{u}");
    check(&u["rows"][0], &total, "team vision");
    let u = usage(&["--by", "team,pipeline"]);
    assert_eq!(u["rows"][0]["pipeline"], "priced", "{u}");
    assert_eq!(u["rows"][0]["team"], "vision", "{u}");
    // Another team used nothing; a window before the run holds nothing.
    let u = usage(&["--team", "nlp"]);
    assert_eq!(u["rows"], serde_json::json!([]), "{u}");
    assert_eq!(u["total"]["gpu_hours"], 0.0, "{u}");
    let u = usage(&["--until", "2000-01-01"]);
    assert_eq!(u["rows"], serde_json::json!([]), "{u}");

    // The text form: a header, a row per group and the total line.
    let out = sb.run(&["usage", "--by", "pool"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines[0].starts_with("POOL") && lines[0].ends_with("WASTED GPU-HOURS"),
        "{}",
        out.stdout
    );
    assert_eq!(lines.len(), by_pool.len() + 2, "{}", out.stdout);
    assert!(
        lines.last().is_some_and(|l| l.starts_with("total")),
        "{}",
        out.stdout
    );

    // A bad key is a usage error.
    let out = sb.run(&["usage", "--by", "teams"]);
    assert_eq!(out.code, Some(2), "{}", out.stdout);
    assert!(out.stderr.contains("did you mean 'team'"), "{}", out.stderr);
}
