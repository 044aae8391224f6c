//! `sluice simulate` end to end: the example cluster and workload, the contract's JSON shape,
//! byte-identical output, and bad inputs named by file, line and column.

use sluice_e2e::{TempDir, root, run_in};

fn example(args: &[&str]) -> sluice_e2e::Ran {
    let mut all = vec![
        "simulate",
        "--cluster",
        "examples/simulate/lab.yaml",
        "--workload",
        "examples/simulate/jobs.csv",
    ];
    all.extend(args);
    run_in(&root(), &all)
}

/// `sluice simulate --cluster CLUSTER --workload WORKLOAD EXTRA...` in `tmp`.
fn simulate_in(
    tmp: &TempDir,
    cluster: &std::path::Path,
    workload: &std::path::Path,
    extra: &[&str],
) -> sluice_e2e::Ran {
    let (c, w) = (
        cluster.display().to_string(),
        workload.display().to_string(),
    );
    let mut all = vec!["simulate", "--cluster", &c, "--workload", &w];
    all.extend(extra);
    run_in(tmp.path(), &all)
}

/// The documented scenario (docs/scheduler-scenario.md): behaviours, not its exact numbers.
#[test]
fn the_documented_scenario_shows_fifo_stuck_in_half_placed_gangs_and_fair_ahead() {
    let out = run_in(
        &root(),
        &[
            "simulate",
            "--cluster",
            "examples/simulate/scenario/cluster.yaml",
            "--workload",
            "examples/simulate/scenario/jobs.csv",
            "--output",
            "json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let p = |policy: &str, key: &str| v["policies"][policy][key].as_f64().expect(key);
    let prod_p95 = |policy: &str| {
        v["policies"][policy]["priorities"]["production"]["wait_seconds"]["p95"]
            .as_f64()
            .expect("production p95")
    };
    // fifo holds GPUs in half-placed gangs and ends deadlocked with jobs never started.
    assert!(p("fifo", "partial_gang_gpu_hours") > 0.0, "{v}");
    assert!(p("fifo", "deadlocks") >= 1.0, "{v}");
    assert!(p("fifo", "never_started") > 0.0, "{v}");
    for policy in ["priority", "fair"] {
        assert_eq!(p(policy, "partial_gang_gpu_hours"), 0.0, "{policy}");
        assert_eq!(p(policy, "deadlocks"), 0.0, "{policy}");
        assert_eq!(p(policy, "never_started"), 0.0, "{policy}");
    }
    // fair uses the cluster best, serves production soonest and is the fairest.
    assert!(
        p("fair", "gpu_utilization") > p("priority", "gpu_utilization"),
        "{v}"
    );
    assert!(
        p("priority", "gpu_utilization") > p("fifo", "gpu_utilization"),
        "{v}"
    );
    assert!(prod_p95("fair") < prod_p95("priority"), "{v}");
    assert!(prod_p95("fair") < prod_p95("fifo"), "{v}");
    assert!(
        p("fair", "jain_fairness") > p("fifo", "jain_fairness"),
        "{v}"
    );
}

/// GPU-hours of the example's workload (`examples/simulate/jobs.csv`), row by row (workers x
/// GPUs x hours): fixed whatever the policy, as nothing in it is preempted.
const NLP_GPU_HOURS: f64 = 4.0 * (1.0 * 1.0 * 1.0) + 2.0 * 4.0 * 2.0 + 8.0; // 28
const VISION_GPU_HOURS: f64 = 2.0 * 8.0 * 1.5 + 2.0 * (2.0 * 0.5) + 1.0 / 6.0; // 26.17
/// The example lab's GPUs: 4 nodes of 8.
const LAB_GPUS: f64 = 32.0;

#[test]
fn the_example_replays_under_each_policy_with_the_contract_shape() {
    let out = example(&["--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let round = |x: f64, places: i32| (x * 10f64.powi(places)).round() / 10f64.powi(places);
    for policy in ["fifo", "priority", "fair"] {
        let p = &v["policies"][policy];
        let num = |key: &str| p[key].as_f64().unwrap_or_else(|| panic!("{key}: {p}"));
        // Every job fits the lab and nothing can hold it up for ever: all ten complete.
        assert_eq!(p["jobs"], 10, "{policy}: {p}");
        assert_eq!(p["completed"], 10, "{policy}: {p}");
        assert_eq!(p["never_started"], 0, "{policy}: {p}");
        assert_eq!(p["deadlocks"], 0, "{policy}: {p}");
        assert_eq!(p["preemptions"], 0, "{policy}: {p}");
        assert_eq!(num("gpu_hours_lost"), 0.0, "{policy}: {p}");
        for key in ["p50", "p95", "p99"] {
            assert!(p["wait_seconds"][key].is_u64(), "{p}");
        }
        // Each team's GPU-hours are its rows' sum.
        let team = |t: &str, key: &str| {
            p["teams"][t][key]
                .as_f64()
                .unwrap_or_else(|| panic!("teams.{t}.{key}: {p}"))
        };
        assert_eq!(
            team("nlp", "gpu_hours"),
            round(NLP_GPU_HOURS, 2),
            "{policy}"
        );
        assert_eq!(
            team("vision", "gpu_hours"),
            round(VISION_GPU_HOURS, 2),
            "{policy}"
        );
        // Costs follow the pools' prices: interruptible pools take only interruptible jobs,
        // which prefer them (1.10 per GPU-hour); the rest run on demand (2.50). nlp's four
        // 1-GPU hour-long jobs and vision's 10-minute one are the interruptible ones.
        let nlp_spot = 4.0;
        let vision_spot = 1.0 / 6.0;
        assert_eq!(
            team("nlp", "cost"),
            round(nlp_spot * 1.10 + (NLP_GPU_HOURS - nlp_spot) * 2.50, 2),
            "{policy}: {p}"
        );
        assert_eq!(
            team("vision", "cost"),
            round(
                vision_spot * 1.10 + (VISION_GPU_HOURS - vision_spot) * 2.50,
                2
            ),
            "{policy}: {p}"
        );
        // Utilization is the work over the lab's GPU-time from the first submission (0) to
        // the last completion.
        let makespan_hours = num("makespan_seconds") / 3600.0;
        assert_eq!(
            num("gpu_utilization"),
            round(
                (NLP_GPU_HOURS + VISION_GPU_HOURS) / (LAB_GPUS * makespan_hours),
                4
            ),
            "{policy}: {p}"
        );
        assert!(
            p["jain_fairness"]
                .as_f64()
                .is_some_and(|j| j > 0.0 && j <= 1.0)
        );
        assert!(p["priorities"]["production"]["wait_seconds"]["p50"].is_u64());
    }
    let production_wait = |policy: &str| {
        v["policies"][policy]["priorities"]["production"]["wait_seconds"]["p50"]
            .as_u64()
            .expect("production p50")
    };
    let makespan = |policy: &str| {
        v["policies"][policy]["makespan_seconds"]
            .as_u64()
            .expect("makespan_seconds")
    };
    // Whole gangs (priority, fair): the production gang (2 x 8 GPUs, submitted at 60 s)
    // needs both on-demand nodes whole; nlp's 2 x 4 gang holds 8 of their GPUs from 10 s to
    // 7210 s, so the production gang starts at 7210 s and ends last, 5400 s later; the rest
    // is backfilled meanwhile. No GPU is ever held by half a gang.
    for policy in ["priority", "fair"] {
        let p = &v["policies"][policy];
        assert_eq!(p["partial_gang_gpu_hours"], 0.0, "{policy}: {p}");
        assert_eq!(production_wait(policy), 7210 - 60, "{policy}: {p}");
        assert_eq!(makespan(policy), 7210 + 5400, "{policy}: {p}");
    }
    // Only the pod-by-pod fifo (Kubernetes' default scheduler) places gangs partly: a part
    // of the production gang holds GPUs it cannot use, so the gang starts later and the
    // replay ends later than with whole gangs.
    let fifo = &v["policies"]["fifo"];
    assert!(
        fifo["partial_gang_gpu_hours"]
            .as_f64()
            .is_some_and(|h| h > 0.0),
        "{fifo}"
    );
    assert!(production_wait("fifo") > production_wait("fair"), "{fifo}");
    assert!(makespan("fifo") > makespan("fair"), "{fifo}");
    // Byte-identical for the same inputs.
    let again = example(&["--output", "json"]);
    assert_eq!(out.stdout, again.stdout);
    // The text form has a row per policy asked for.
    let text = example(&["--policy", "fair", "--policy", "fifo"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    let rows: Vec<&str> = text
        .stdout
        .lines()
        .filter(|l| l.starts_with("fair") || l.starts_with("fifo"))
        .collect();
    assert_eq!(rows.len(), 2, "{}", text.stdout);
}

#[test]
fn bad_clusters_workloads_and_policies_are_usage_errors_saying_where() {
    let tmp = TempDir::new("simulate-bad");
    let cluster = tmp.write(
        "c.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n    - {name: a, nodes: 2, resources: {gpu: 8, cpus: 4}}\n  scheduling: {policy: fiar}\n",
    );
    let jobs = tmp.write(
        "j.csv",
        "submit,team,workers,gpu,duration\n0,vision,1,1,60\n5,vision,x,1,60\n",
    );
    let out = simulate_in(&tmp, &cluster, &jobs, &[]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("c.yaml:6:47: error: unknown field 'cpus' in pools.resources"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("did you mean 'cpu'"), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "c.yaml:7:24: error: scheduling.policy: 'fiar' is not one of fifo, priority, fair"
        ),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("did you mean 'fair'"), "{}", out.stderr);
    let good = tmp.write(
        "ok.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n    - {name: a, nodes: 2, resources: {gpu: 8}}\n",
    );
    let out = simulate_in(&tmp, &good, &jobs, &[]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("j.csv:3:10: workers 'x' is not a non-negative number"),
        "{}",
        out.stderr
    );
    let out = simulate_in(&tmp, &good, &jobs, &["--policy", "lifo"]);
    assert_eq!(out.code, Some(2));
}

#[test]
fn a_generated_yaml_workload_replays_and_reports_fragmentation_and_jobs_never_started() {
    let run = || {
        run_in(
            &root(),
            &[
                "simulate",
                "--cluster",
                "examples/simulate/lab.yaml",
                "--workload",
                "examples/simulate/generated.yaml",
                "--output",
                "json",
            ],
        )
    };
    let out = run();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    for policy in ["fifo", "priority", "fair"] {
        let p = &v["policies"][policy];
        assert_eq!(p["jobs"], 300, "{p}");
        let f = p["fragmentation"].as_f64().expect("fragmentation");
        assert!((0.0..=1.0).contains(&f), "{p}");
        let never = p["never_started"].as_u64().expect("never_started");
        let completed = p["completed"].as_u64().expect("completed");
        assert!(never + completed <= 300, "{p}");
        assert!(p["teams"]["vision"]["never_started"].is_u64(), "{p}");
    }
    // Pod by pod, gangs deadlock: the jobs stuck count as waiting until the replay stopped.
    let fifo = &v["policies"]["fifo"];
    assert!(fifo["never_started"].as_u64() > Some(0), "{fifo}");
    assert!(
        fifo["wait_seconds"]["p99"].as_u64()
            > v["policies"]["fair"]["wait_seconds"]["p99"].as_u64(),
        "{v}"
    );
    // Seeded: byte-identical again.
    assert_eq!(out.stdout, run().stdout);
}

#[test]
fn bad_yaml_workloads_are_reported_by_file_line_and_column() {
    let tmp = TempDir::new("simulate-bad-workload");
    let w = tmp.write(
        "w.yaml",
        "apiVersion: sluice.dev/v1\nkind: Workload\nmetadata: {name: w}\nspec:\n  generate:\n    jobs: 10\n    arrivalRate: 60\n    teams: [vision]\n    duration: {lognormal: {median: 30m, sigma: -1}}\n",
    );
    let p = tmp.write(
        "p.yml",
        "apiVersion: sluice.dev/v1\nkind: Workload\nmetadata: {name: p}\nspec:\n  jobs:\n    - {submit: 0, team: vision, gpu: 1, duration: 1h, priority: prod}\n",
    );
    let cluster = root().join("examples/simulate/lab.yaml");
    for (file, want, help) in [
        (
            &w,
            "w.yaml:9:48: error: generate.duration.lognormal.sigma: -1 is not between 0 and 10",
            "help: the standard deviation of the log",
        ),
        (
            &p,
            "p.yml:6:65: error: priority class 'prod' is not one of the cluster's",
            "help: did you mean 'production'?",
        ),
    ] {
        let out = simulate_in(&tmp, &cluster, file, &[]);
        assert_eq!(out.code, Some(2), "{}", out.stderr);
        assert!(out.stderr.contains(want), "{}", out.stderr);
        assert!(out.stderr.contains(help), "{}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}

#[test]
fn chart_writes_an_svg_with_both_panels_and_a_line_per_policy() {
    let tmp = TempDir::new("simulate-chart");
    let svg = tmp.path().join("c.svg");
    let path = svg.display().to_string();
    let out = example(&["--policy", "fifo", "--policy", "fair", "--chart", &path]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = std::fs::read_to_string(&svg).expect("the chart was written");
    assert!(text.starts_with("<svg"));
    assert!(text.contains("GPU utilization") && text.contains("Queue length"));
    assert!(
        text.contains("\nfifo\n") && text.contains("\nfair\n"),
        "{text}"
    );
    // Two series (2 px lines) in each of the two panels.
    assert_eq!(
        text.matches("stroke-width=\"2\" points=").count(),
        4,
        "{text}"
    );
    assert!(text.len() < 200_000);
}

/// `--jobs FILE`: a row per job and policy, whose wait is its first start less its
/// submission, and whose production waits give the summary's production p95.
#[test]
fn jobs_writes_each_jobs_story_per_policy_matching_the_summary() {
    let tmp = TempDir::new("simulate-jobs");
    let csv = tmp.path().join("jobs.csv");
    let path = csv.display().to_string();
    let out = example(&[
        "--policy", "fifo", "--policy", "fair", "--jobs", &path, "--output", "json",
    ]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let summary: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let text = std::fs::read_to_string(&csv).expect("the jobs were written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let jobs = summary["policies"]["fair"]["jobs"].as_u64().expect("jobs") as usize;
    assert_eq!(rows.len(), 2 * jobs, "{text}");
    for policy in ["fifo", "fair"] {
        let mine: Vec<&Vec<&str>> = rows.iter().filter(|r| r[0] == policy).collect();
        assert_eq!(mine.len(), jobs);
        let mut waits = Vec::new();
        for r in &mine {
            let submit: u64 = r[col("submit")].parse().expect("submit");
            let wait: u64 = r[col("wait_seconds")].parse().expect("wait");
            if let Ok(start) = r[col("first_start")].parse::<u64>() {
                assert_eq!(wait, start - submit, "{r:?}");
            }
            if r[col("priority")] == "production" {
                waits.push(wait);
            }
        }
        waits.sort_unstable();
        if let Some(p95) =
            summary["policies"][policy]["priorities"]["production"]["wait_seconds"]["p95"].as_u64()
        {
            // The nearest-rank p95 is one of the rows' waits.
            assert!(waits.contains(&p95), "{policy}: {p95} not in {waits:?}");
        }
    }
}

/// Workload columns beyond the contract's: `DOMAIN/NAME` (extended resources per worker) and
/// `estimate` (EASY backfill), read from the CSV and from `kind: Workload` jobs alike.
#[test]
fn slices_and_estimates_in_a_workload_are_scheduled() {
    let tmp = TempDir::new("simulate-ext");
    let cluster = tmp.write(
        "c.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n    - {name: mig, nodes: 1, resources: {gpu: 4, nvidia.com/mig-1g.10gb: 7, cpu: 32}}\n  teams: [{name: t}]\n  scheduling: {starvationLimit: 10m}\n",
    );
    // a and b take 4 of 7 slices each: b waits for a (100 s). gang (4 GPUs) waits for hold
    // (2 GPUs, 2000 s) and starves; quick (1 GPU, estimate 500 s) backfills its node, slow
    // (no estimate) waits for the gang.
    let csv = tmp.write(
        "w.csv",
        "submit,team,workers,gpu,duration,nvidia.com/mig-1g.10gb,estimate,name\n\
         0,t,1,0,100,4,,a\n\
         0,t,1,0,100,4,,b\n\
         0,t,1,2,2000,0,2000,hold\n\
         1,t,1,4,100,0,,gang\n\
         700,t,1,1,100,0,500,quick\n\
         700,t,1,1,100,0,,slow\n",
    );
    let yaml = tmp.write(
        "w.yaml",
        "apiVersion: sluice.dev/v1\nkind: Workload\nmetadata: {name: w}\nspec:\n  jobs:\n    - {submit: 0, team: t, duration: 100, nvidia.com/mig-1g.10gb: 4}\n    - {submit: 0, team: t, duration: 100, nvidia.com/mig-1g.10gb: 4}\n    - {submit: 0, team: t, gpu: 2, duration: 2000, estimate: 2000}\n    - {submit: 1, team: t, gpu: 4, duration: 100}\n    - {submit: 700, team: t, gpu: 1, duration: 100, estimate: 500}\n    - {submit: 700, team: t, gpu: 1, duration: 100}\n",
    );
    for workload in [&csv, &yaml] {
        let jobs = tmp.path().join("jobs.csv");
        let out = simulate_in(
            &tmp,
            &cluster,
            workload,
            &["--policy", "fair", "--jobs", &jobs.display().to_string()],
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let text = std::fs::read_to_string(&jobs).expect("the jobs were written");
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
        let start: Vec<u64> = lines
            .map(|l| {
                let r: Vec<&str> = l.split(',').collect();
                r[col("first_start")].parse().expect("every job started")
            })
            .collect();
        let (a, b, hold, gang, quick, slow) =
            (start[0], start[1], start[2], start[3], start[4], start[5]);
        assert_eq!(
            (a, b),
            (0, 100),
            "{workload:?}: 8 slices on a node of 7\n{text}"
        );
        assert_eq!(hold, 0, "{text}");
        assert_eq!(gang, 2000, "{text}");
        assert_eq!(
            quick, 700,
            "{workload:?}: quick backfills the reserved node\n{text}"
        );
        assert!(
            slow >= gang,
            "{workload:?}: slow waits for the gang\n{text}"
        );
    }
}

/// The simulator's cost per team counts extended resources at their pool's price per
/// unit-hour, as `sluice usage` does: 3 slices for an hour at 0.40 and a GPU for half an hour
/// at 2.00 cost 2.20; slices in a pool that prices none cost nothing.
#[test]
fn cost_per_team_counts_extended_resources_at_their_price() {
    let tmp = TempDir::new("simulate-ext-cost");
    let cluster = tmp.write(
        "c.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  pools:\n    - {name: mig, nodes: 1, resources: {gpu: 1, nvidia.com/mig-1g.10gb: 7, cpu: 32}, price: {gpuHour: 2.0, nvidia.com/mig-1g.10gb: 0.40}}\n    - {name: free, nodes: 1, resources: {nvidia.com/mig-1g.10gb: 7, cpu: 32}, labels: {kind: free}}\n  teams: [{name: a}, {name: b}]\n",
    );
    let csv = tmp.write(
        "w.csv",
        "submit,team,workers,gpu,duration,nvidia.com/mig-1g.10gb,flavor\n\
         0,a,1,0,3600,3,mig\n\
         0,a,1,1,1800,0,mig\n\
         0,b,1,0,3600,3,free\n",
    );
    let out = simulate_in(
        &tmp,
        &cluster,
        &csv,
        &["--policy", "fair", "--output", "json"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    let cost = |t: &str| v["policies"]["fair"]["teams"][t]["cost"].as_f64();
    assert_eq!(cost("a"), Some(2.2), "{v}");
    assert_eq!(cost("b"), Some(0.0), "{v}");
}
