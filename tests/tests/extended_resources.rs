//! Extended resources (`nvidia.com/mig-1g.10gb`: MIG slices) on the local executor: a Cluster
//! declares a node cut into seven slices, and steps asking for slices are placed, held to the
//! node's count, explained while they wait, and priced in `sluice usage`. Without a Cluster
//! nothing counts slices, so such a step fails saying so.

use sluice_e2e::{Sandbox, step_states, wait, wait_for};

const MIG: &str = "nvidia.com/mig-1g.10gb";

const CLUSTER: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100-mig
      nodes: 1
      resources: {nvidia.com/mig-1g.10gb: 7, cpu: 8, memory: 16Gi}
      price: {nvidia.com/mig-1g.10gb: 0.5}
  teams:
    - {name: serving}
"#;

/// Steps `a` and `b` ask for 4 slices each (together more than 7), `c` for 3 (fits beside
/// either). Each appends `NAME-start TIME` and `NAME-end TIME` to `log`.
fn pipeline() -> String {
    let step = |name: &str, slices: u32| {
        format!(
            r#"    - name: {name}
      resources: {{{MIG}: {slices}, cpu: 1}}
      run: python3 -c 'import time; open("log","a").write("{name}-start %.3f\n" % time.time()); time.sleep(1.5); open("log","a").write("{name}-end %.3f\n" % time.time())'
"#
        )
    };
    format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: serve, team: serving}}\nspec:\n  steps:\n{}{}{}",
        step("a", 4),
        step("b", 4),
        step("c", 3)
    )
}

fn times(sb: &Sandbox, what: &str) -> Option<f64> {
    std::fs::read_to_string(sb.path().join("log"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what} "))?.parse().ok())
}

#[test]
fn steps_asking_for_slices_never_take_more_than_the_node_has_and_are_priced() {
    let sb = Sandbox::new("ext-res");
    sb.write("cluster.yaml", CLUSTER);
    sb.write("serve.yaml", &pipeline());
    let mut engine = sb.spawn(&["run", "serve.yaml", "--cluster", "cluster.yaml"]);
    // While one 4-slice step runs, the other waits and names the slices it needs.
    wait_for("a step to start", || sb.path().join("log").is_file());
    let mut reason = String::new();
    wait_for("a step waiting for slices", || {
        let status = sb.status(&sb.last_run());
        reason = status["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["reason"].as_str())
            .find(|r| r.starts_with("waiting"))
            .unwrap_or_default()
            .to_owned();
        !reason.is_empty()
    });
    assert!(reason.contains(&format!("4 {MIG}")), "reason: {reason}");
    assert!(
        wait::status(&mut engine, "sluice run serve.yaml").success(),
        "the run succeeds"
    );
    let run = sb.last_run();
    let status = sb.status(&run);
    for s in ["a", "b", "c"] {
        assert_eq!(step_states(&status)[s], "Succeeded", "{status}");
    }
    // a and b (8 slices together) never ran at the same time; c ran beside one of them.
    let at = |w: &str| times(&sb, w).unwrap_or_else(|| panic!("{w} in the log"));
    let (a, b, c) = (
        (at("a-start"), at("a-end")),
        (at("b-start"), at("b-end")),
        (at("c-start"), at("c-end")),
    );
    assert!(
        a.1 <= b.0 || b.1 <= a.0,
        "a {a:?} and b {b:?} overlapped: 8 slices on a node of 7"
    );
    let overlaps = |x: (f64, f64), y: (f64, f64)| x.0 < y.1 && y.0 < x.1;
    assert!(
        overlaps(c, a) || overlaps(c, b),
        "c {c:?} fits beside a {a:?} or b {b:?}, and did not wait for both"
    );

    // Usage: slice-hours per the attempts' recorded times, priced at the pool's 0.5.
    let ms = |t: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(t.as_str().expect("a time"))
            .expect("RFC 3339")
            .timestamp_millis() as f64
    };
    let mut slice_hours = 0.0;
    for step in status["steps"].as_array().expect("steps") {
        let slices = if step["name"] == "c" { 3.0 } else { 4.0 };
        for a in step["attempts"].as_array().expect("attempts") {
            slice_hours += slices * (ms(&a["ended_at"]) - ms(&a["started_at"])) / 3_600_000.0;
        }
    }
    let out = sb.run(&["usage", "--output", "json"]);
    assert_eq!(out.code, Some(0), "usage: {}", out.stderr);
    let u: serde_json::Value = serde_json::from_str(&out.stdout).expect("usage prints JSON");
    let got = u["total"]["extended_hours"][MIG]
        .as_f64()
        .unwrap_or_else(|| panic!("slice-hours in {u}"));
    assert!(
        (got - slice_hours).abs() < 1e-6,
        "{got} != {slice_hours}: {u}"
    );
    let cost = u["total"]["cost"].as_f64().expect("a cost");
    assert!((cost - 0.5 * slice_hours).abs() < 1e-6, "cost {cost}: {u}");
    // The table has a column for them.
    let table = sb.run(&["usage"]);
    assert_eq!(table.code, Some(0), "usage: {}", table.stderr);
    assert!(
        table.stdout.contains(&format!("{MIG} HOURS")),
        "{}",
        table.stdout
    );
}

#[test]
fn without_a_cluster_a_step_asking_for_slices_fails_saying_why() {
    let sb = Sandbox::new("ext-res-local");
    sb.write("serve.yaml", &pipeline());
    let out = sb.run(&["run", "serve.yaml"]);
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    let status = sb.status(&sb.last_run());
    let a = status["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "a")
        .cloned()
        .unwrap_or_default();
    assert_eq!(a["state"], "Failed", "{status}");
    let reason = a["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains(MIG) && reason.contains("--cluster"),
        "reason: {reason}"
    );
}
