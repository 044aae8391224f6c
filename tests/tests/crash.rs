//! SIGKILL the engine at many moments of a run, resume it each time, and check with
//! side-effect files that every step's program ran to completion exactly once, and that
//! steps running at a kill were reattached, not started again.

use std::collections::BTreeSet;
use std::time::Duration;

use sluice_e2e::crashy::{PIPELINE, STEPS};
use sluice_e2e::{Sandbox, step_states, wait};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

fn kill_after(sb: &Sandbox, args: &[&str], ms: u64) {
    let mut child = sb
        .cmd(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("sluice starts");
    std::thread::sleep(Duration::from_millis(ms));
    let _ = child.kill(); // SIGKILL
    wait::status(&mut child, "sluice (killed)");
}

fn count(sb: &Sandbox, dir: &str, step: &str) -> usize {
    std::fs::read_to_string(sb.path().join(dir).join(step)).map_or(0, |t| t.lines().count())
}

fn running_steps(sb: &Sandbox, id: &str) -> BTreeSet<String> {
    step_states(&sb.status(id))
        .into_iter()
        .filter(|(_, s)| s == "Running")
        .map(|(n, _)| n)
        .collect()
}

#[test]
fn killing_the_engine_anywhere_loses_nothing_and_runs_nothing_twice() {
    crash_rounds("crash", 0x5eed, &[], PIPELINE);
}

/// One node with two GPUs; every step asks for one, so the fan-out's three shards and the
/// diamond's two branches wait for each other through the scheduler's rows.
const SMALL: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: small}
spec:
  pools:
    - {name: gpu, nodes: 1, resources: {gpu: 2, cpu: 8, memory: 16Gi}}
"#;

#[test]
fn killing_the_engine_anywhere_in_cluster_mode_loses_nothing_and_runs_nothing_twice() {
    // Each step holds its GPU as a folder while it works: a GPU given to two steps at once
    // shows as a clash.
    let pipeline = PIPELINE
        .replace("resources: {cpu: 100m}", "resources: {cpu: 100m, gpu: 1}")
        .replace(
            "        sleep 0.3\n",
            "        mkdir \"gpu-$CUDA_VISIBLE_DEVICES\" || echo \"$SLUICE_STEP $CUDA_VISIBLE_DEVICES\" >> clashes\n        sleep 0.3\n        rmdir \"gpu-$CUDA_VISIBLE_DEVICES\"\n",
        );
    assert!(pipeline.contains("mkdir"));
    crash_rounds(
        "crash-cluster",
        0xc1a5,
        &["--cluster", "cluster.yaml"],
        &pipeline,
    );
}

/// Rounds of: start the run, SIGKILL its engine at random moments, resume, kill again...
/// then check every step ran once to completion.
fn crash_rounds(tag: &str, seed: u64, extra: &[&str], pipeline: &str) {
    let mut rng = Lcg(seed);
    let mut running_at_a_kill: BTreeSet<String> = BTreeSet::new();
    let mut kills = 0;
    let mut run_args = vec!["run", "p.yaml"];
    run_args.extend_from_slice(extra);
    for round in 0..5 {
        let sb = Sandbox::new(&format!("{tag}{round}"));
        sb.write("p.yaml", pipeline);
        sb.write("cluster.yaml", SMALL);
        std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
        std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
        // The first engine may die before it has even recorded the run.
        let mut id = None;
        for _ in 0..5 {
            kill_after(&sb, &run_args, rng.next(5, 400));
            kills += 1;
            let runs = sb.run(&["runs", "--output", "json"]);
            if runs.stdout.contains("\"id\"") {
                id = Some(sb.last_run());
                break;
            }
        }
        let id = id.unwrap_or_else(|| {
            let out = sb.run(&run_args);
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            sb.last_run()
        });
        for _ in 0..8 {
            if sb.status(&id)["state"] != "Running" {
                break;
            }
            running_at_a_kill.extend(running_steps(&sb, &id));
            kill_after(&sb, &["resume", &id], rng.next(20, 700));
            kills += 1;
            running_at_a_kill.extend(running_steps(&sb, &id));
        }
        let out = sb.run(&["resume", &id]);
        assert_eq!(
            out.code,
            Some(0),
            "round {round}: {}\n{}",
            out.stdout,
            out.stderr
        );
        let status = sb.status(&id);
        assert_eq!(status["state"], "Succeeded", "round {round}: {status}");
        let clashes = std::fs::read_to_string(sb.path().join("clashes")).unwrap_or_default();
        assert!(
            clashes.is_empty(),
            "round {round}: GPUs given twice: {clashes}"
        );
        for step in STEPS {
            assert_eq!(
                count(&sb, "starts", step),
                1,
                "round {round}: {step} started {} times",
                count(&sb, "starts", step)
            );
            assert_eq!(
                count(&sb, "done", step),
                1,
                "round {round}: {step} completed {} times",
                count(&sb, "done", step)
            );
        }
        // Every attempt beyond the first is one the engine gave up before it started.
        for s in status["steps"].as_array().expect("steps") {
            let attempts = s["attempts"].as_array().expect("attempts");
            let succeeded = attempts
                .iter()
                .filter(|a| a["state"] == "Succeeded")
                .count();
            assert_eq!(succeeded, 1, "round {round}: {s}");
            for a in attempts.iter().filter(|a| a["state"] != "Succeeded") {
                assert_eq!(a["state"], "Lost", "{s}");
                assert_eq!(
                    a["reason"], "the engine stopped before the attempt started",
                    "{s}"
                );
            }
        }
    }
    eprintln!("{kills} kills; steps running at a kill: {running_at_a_kill:?}");
    assert!(kills >= 20, "only {kills} kills");
    // Steps were caught running by a kill, and still ran once: they were reattached.
    assert!(
        !running_at_a_kill.is_empty(),
        "no kill landed while a step ran"
    );
}
