//! The scheduler on the local executor: a Cluster file declares two virtual nodes of 4 GPUs,
//! and steps are admitted onto them as on a real cluster: gangs whole, a production step
//! preempting a best-effort one (which resumes from its checkpoint), a team under its quota
//! taking back what another borrowed, trial starts held to the team's rate, and a submission
//! over `maxQueued` refused. Programs record what they saw (times, CUDA_VISIBLE_DEVICES) in
//! files the test reads.

use std::collections::BTreeMap;

use sluice_e2e::{Sandbox, step_states, wait, wait_for};

const CLUSTER: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 2
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision, quota: {gpu: 4}}
    - {name: nlp, quota: {gpu: 4}}
    - name: slow
      maxTrialsPerMinute: 1
    - name: small
      maxQueued: 3
  priorities:
    - {name: production, value: 1000}
    - {name: best-effort, value: 0, default: true}
  preemption:
    gracePeriod: 2s
"#;

/// Lines `WHAT TIME REST...` appended by the programs to `log`.
fn log(sb: &Sandbox) -> Vec<(String, f64, String)> {
    std::fs::read_to_string(sb.path().join("log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.splitn(3, ' ');
            let what = w.next()?.to_owned();
            let t = w.next()?.parse().ok()?;
            Some((what, t, w.next().unwrap_or("").to_owned()))
        })
        .collect()
}

fn times(log: &[(String, f64, String)], what: &str) -> Vec<f64> {
    log.iter()
        .filter(|(w, _, _)| w == what)
        .map(|(_, t, _)| *t)
        .collect()
}

/// A shell line that appends `WHAT TIME REST` to the sandbox's `log`.
fn note(what: &str, rest: &str) -> String {
    format!(
        r#"python3 -c 'import time,sys; open("log","a").write("{what} %.3f {rest}\n" % time.time())'"#
    )
}

/// Step `name` of a status document (null when absent).
fn step_in<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

#[test]
fn a_gang_waits_whole_and_its_workers_get_their_nodes_gpus() {
    let sb = Sandbox::new("sched-gang");
    sb.write("cluster.yaml", CLUSTER);
    // `hold` takes 2 GPUs of one node for 2 s: the 2 x 4 GPU gang cannot start until it ends,
    // even though 6 GPUs are free (4 on one node, 2 on the other).
    let pipeline = format!(
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: gang, team: vision}}
spec:
  steps:
    - name: hold
      resources: {{gpu: 2}}
      run: {start}; sleep 2; {end}
    - name: train
      resources: {{gpu: 4, workers: 2}}
      run: python3 -c 'import os,time; open("log","a").write("worker %.3f %s %s\n" % (time.time(), os.environ["RANK"], os.environ["CUDA_VISIBLE_DEVICES"]))'
"#,
        start = note("hold-start", ""),
        end = note("hold-end", ""),
    );
    sb.write("gang.yaml", &pipeline);
    let mut engine = sb.spawn(&["run", "gang.yaml", "--cluster", "cluster.yaml"]);
    // While `hold` runs, the gang waits, and says why.
    wait_for("hold to start", || {
        !times(&log(&sb), "hold-start").is_empty()
    });
    let mut reason = String::new();
    wait_for("the gang's waiting reason", || {
        let status = sb.status(&sb.last_run());
        reason = step_in(&status, "train")["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        reason.starts_with("waiting")
    });
    assert!(
        reason.contains("gang of 2") && reason.contains("free room for 1 of 2"),
        "reason: {reason}"
    );
    assert!(wait::status(&mut engine, "sluice run gang.yaml").success());
    // Status shows where each worker ran: one whole node each.
    let status = sb.status(&sb.last_run());
    let train = step_in(&status, "train");
    let mut nodes: Vec<u64> = train["attempts"][0]["nodes"]
        .as_array()
        .expect("nodes of the gang's attempt")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, [0, 1], "{train}");
    let log = log(&sb);
    let hold_end = times(&log, "hold-end")[0];
    let workers: Vec<&(String, f64, String)> = log.iter().filter(|l| l.0 == "worker").collect();
    assert_eq!(workers.len(), 2, "{log:?}");
    for (_, t, rest) in &workers {
        // Never partly: no worker started before the room for both existed.
        assert!(
            *t >= hold_end,
            "a worker started at {t}, before hold ended at {hold_end}"
        );
        // Each worker holds a whole node: its 4 GPUs, numbered on that node.
        let gpus = rest.split(' ').nth(1).unwrap_or_default();
        assert_eq!(gpus, "0,1,2,3", "{rest}");
    }
}

/// `counter.py NAME N` counts to N, a count per 100 ms, checkpointing each count; it appends
/// `NAME-start TIME COUNT ATTEMPT` when it starts and `NAME-end TIME COUNT` when done.
const COUNTER: &str = r#"import os, sys, time
name, goal = sys.argv[1], int(sys.argv[2])
ck = os.path.join(os.environ["SLUICE_CHECKPOINT_DIR"], "n")
n = int(open(ck).read()) if os.path.exists(ck) else 0
open("log", "a").write("%s-start %.3f %d %s\n" % (name, time.time(), n, os.environ["SLUICE_ATTEMPT"]))
while n < goal:
    n += 1
    open(ck + ".tmp", "w").write(str(n))
    os.replace(ck + ".tmp", ck)
    open(name + "-count", "w").write(str(n))
    time.sleep(0.1)
open("log", "a").write("%s-end %.3f %d\n" % (name, time.time(), n))
"#;

fn counter(name: &str, n: u32) -> String {
    format!("python3 counter.py {name} {n}")
}

fn count(sb: &Sandbox, name: &str) -> u32 {
    std::fs::read_to_string(sb.path().join(format!("{name}-count")))
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_production_step_preempts_a_best_effort_one_which_resumes_from_its_checkpoint() {
    let sb = Sandbox::new("sched-preempt");
    sb.write("cluster.yaml", CLUSTER);
    sb.write("counter.py", COUNTER);
    // Best-effort: the whole cluster (a 2 x 4 GPU gang), checkpointing each count.
    sb.write(
        "low.yaml",
        &format!(
            r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: low, team: vision}}
spec:
  steps:
    - name: explore
      priority: best-effort
      resources: {{gpu: 4, workers: 2}}
      checkpoint: {{every: 100ms}}
      run: if [ "$RANK" = 0 ]; then {prog}; fi
"#,
            prog = counter("low", 60)
        ),
    );
    sb.write(
        "high.yaml",
        &format!(
            r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: high, team: vision}}
spec:
  steps:
    - name: serve-eval
      priority: production
      resources: {{gpu: 4}}
      run: {start}; sleep 1; {end}
"#,
            start = note("high-start", ""),
            end = note("high-end", ""),
        ),
    );
    let mut low = sb.spawn(&["run", "low.yaml", "--cluster", "cluster.yaml"]);
    // Past the grace period (2 s): a step that young is never a victim.
    wait_for("the best-effort gang to count past 25", || {
        count(&sb, "low") >= 25
    });
    let high = sb.run(&["run", "high.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(high.code, Some(0), "{}", high.stderr);
    assert!(wait::status(&mut low, "sluice run low.yaml").success());
    let log = log(&sb);
    let starts: Vec<&(String, f64, String)> = log.iter().filter(|l| l.0 == "low-start").collect();
    assert!(
        starts.len() >= 2,
        "the best-effort step was not preempted: {log:?}"
    );
    let high_start = times(&log, "high-start")[0];
    let high_end = times(&log, "high-end")[0];
    // The production step ran while the best-effort one was stopped...
    assert!(
        starts[1].1 >= high_start,
        "the best-effort step came back before the production step started: {log:?}"
    );
    // ...which came back from its checkpoint, not from zero, and counted to the end once.
    let resumed_at: u32 = starts[1]
        .2
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(resumed_at >= 20, "resumed from {resumed_at}: {log:?}");
    assert_eq!(times(&log, "low-end").len(), 1, "{log:?}");
    assert!(high_end > high_start);
    let run = sb.last_run();
    let status = sb.status(&run);
    assert_eq!(step_states(&status)["serve-eval"], "Succeeded");
}

#[test]
fn a_team_under_its_quota_takes_back_what_another_borrowed() {
    let sb = Sandbox::new("sched-reclaim");
    sb.write("cluster.yaml", CLUSTER);
    sb.write("counter.py", COUNTER);
    // nlp (quota 4) fills the cluster with two 4-GPU steps: the second is borrowed.
    write_filler(&sb, "nlp", None);
    write_urgent(&sb, "vision", "train", None);
    let log = one_of_two_preempted_for(&sb, "nlp", "vision");
    let vision_end = times(&log, "vision-end")[0];
    assert!(times(&log, "vision-start")[0] < vision_end);
}

/// Writes `TEAM.yaml`: two 4-GPU counter steps `a` and `b` (50 counts, checkpointed every
/// 100 ms), of class `priority` when given.
fn write_filler(sb: &Sandbox, team: &str, priority: Option<&str>) {
    let class = priority.map_or(String::new(), |p| format!("      priority: {p}\n"));
    let step = |name: &str| {
        format!(
            "    - name: {name}\n{class}      resources: {{gpu: 4}}\n      checkpoint: {{every: 100ms}}\n      run: {}\n",
            counter(name, 50)
        )
    };
    sb.write(
        &format!("{team}.yaml"),
        &format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {team}, team: {team}}}\nspec:\n  steps:\n{}{}",
            step("a"),
            step("b")
        ),
    );
}

/// Writes `TEAM.yaml`: one 4-GPU step `step` (of class `priority` when given) that notes
/// `TEAM-start`, sleeps a second and notes `TEAM-end`.
fn write_urgent(sb: &Sandbox, team: &str, step: &str, priority: Option<&str>) {
    let class = priority.map_or(String::new(), |p| format!("      priority: {p}\n"));
    sb.write(
        &format!("{team}.yaml"),
        &format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {team}, team: {team}}}\nspec:\n  steps:\n    - name: {step}\n{class}      resources: {{gpu: 4}}\n      run: {}; sleep 1; {}\n",
            note(&format!("{team}-start"), ""),
            note(&format!("{team}-end"), "")
        ),
    );
}

/// Runs pipeline `filler` (two checkpointing counter steps `a` and `b` of 50 counts, filling
/// the cluster), and once both count past 25, pipeline `urgent` (which must finish while
/// `filler` still runs); then checks that exactly one of `a` and `b` was preempted, once, and
/// that both finished from their checkpoints. The programs' log.
fn one_of_two_preempted_for(
    sb: &Sandbox,
    filler: &str,
    urgent: &str,
) -> Vec<(String, f64, String)> {
    let (filler_file, urgent_file) = (format!("{filler}.yaml"), format!("{urgent}.yaml"));
    let mut filling = sb.spawn(&["run", &filler_file, "--cluster", "cluster.yaml"]);
    wait_for("both filler steps to count past 25", || {
        count(sb, "a") >= 25 && count(sb, "b") >= 25
    });
    let ran = sb.run(&["run", &urgent_file, "--cluster", "cluster.yaml"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // The urgent run got its room while the filler still had work.
    assert!(
        count(sb, "a") < 50 || count(sb, "b") < 50,
        "{urgent} only ran once {filler} was done: {:?}",
        log(sb)
    );
    assert!(wait::status(&mut filling, &format!("sluice run {filler_file}")).success());
    let log = log(sb);
    let restarts: BTreeMap<&str, usize> = ["a", "b"]
        .iter()
        .map(|s| (*s, times(&log, &format!("{s}-start")).len()))
        .collect();
    assert_eq!(
        restarts.values().filter(|&&n| n == 2).count(),
        1,
        "{restarts:?}: {log:?}"
    );
    assert_eq!(restarts.values().sum::<usize>(), 3, "{log:?}");
    assert_eq!(times(&log, "a-end").len() + times(&log, "b-end").len(), 2);
    // The second start began from a checkpoint, past 0.
    let resumed = log
        .iter()
        .filter(|(w, _, _)| w == "a-start" || w == "b-start")
        .filter_map(|(_, _, rest)| rest.split_whitespace().next()?.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    assert!(resumed > 0, "resumed from a checkpoint: {log:?}");
    log
}

/// The rate's arithmetic (one start per interval, shared by every engine, no burst after an
/// idle spell) is tested under virtual time in `engine/tests/rate_limit.rs`. Here, the
/// wiring: at one trial a minute, two sweeps of the team in two engines start one trial
/// between them, the other trials wait saying why, and a cancel ends both.
#[test]
fn a_trial_over_the_teams_rate_waits_saying_why_in_every_engine() {
    let sb = Sandbox::new("sched-rate");
    sb.write("cluster.yaml", CLUSTER);
    for name in ["rate-a", "rate-b"] {
        sb.write(
            &format!("{name}.yaml"),
            &format!(
                r#"apiVersion: sluice.dev/v1
kind: Sweep
metadata: {{name: {name}, team: slow}}
spec:
  objective: {{metric: loss, goal: minimize}}
  algorithm: {{name: random, seed: 1}}
  budget: {{maxTrials: 3, parallelism: 3}}
  params:
    x: {{type: float, min: 0, max: 1}}
  trial:
    run: {start}; echo loss={{{{params.x}}}}
"#,
                start = note("trial", name),
            ),
        );
    }
    let mut a = sb.spawn(&["sweep", "rate-a.yaml", "--cluster", "cluster.yaml"]);
    let mut b = sb.spawn(&["sweep", "rate-b.yaml", "--cluster", "cluster.yaml"]);
    let runs = || -> Vec<String> {
        let out = sb.run(&["runs", "--output", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
        v.as_array()
            .map(|runs| {
                runs.iter()
                    .filter_map(|r| r["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let waiting = "waiting: team slow at its trial rate limit (1 per minute)";
    let held = |id: &str| {
        sb.status(id)["steps"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(|s| s["reason"].as_str() == Some(waiting)))
    };
    // The next start is a minute away: until then, both sweeps show a trial held by the rate,
    // and one trial in all has run.
    wait_for(
        "one trial to run and both sweeps to hold one by the rate",
        || {
            let ids = runs();
            ids.len() == 2 && ids.iter().all(|id| held(id)) && !times(&log(&sb), "trial").is_empty()
        },
    );
    let ran = log(&sb);
    assert_eq!(times(&ran, "trial").len(), 1, "{ran:?}");
    for id in runs() {
        assert_eq!(sb.run(&["cancel", &id]).code, Some(0));
    }
    // Cancelled from another process: each engine ends with exit 1 (cli.md).
    assert_eq!(
        wait::status(&mut a, "sluice sweep rate-a.yaml").code(),
        Some(1)
    );
    assert_eq!(
        wait::status(&mut b, "sluice sweep rate-b.yaml").code(),
        Some(1)
    );
    for id in runs() {
        assert_eq!(sb.status(&id)["state"], "Cancelled");
    }
    assert_eq!(
        times(&log(&sb), "trial").len(),
        1,
        "no trial started after the first"
    );
}

#[test]
fn a_submission_over_the_teams_max_queued_is_refused_with_the_limit_named() {
    let sb = Sandbox::new("sched-queued");
    sb.write("cluster.yaml", CLUSTER);
    sb.write(
        "four.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: four, team: small}
spec:
  steps:
    - {name: a, run: "true"}
    - {name: b, run: "true"}
    - {name: c, run: "true"}
    - {name: d, run: "true"}
"#,
    );
    let out = sb.run(&["run", "four.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.starts_with("cluster.yaml:15:7: error:")
            && out.stderr.contains("maxQueued of 3")
            && out.stderr.contains("help:"),
        "{}",
        out.stderr
    );
    // Nothing was recorded.
    let runs = sb.run(&["runs", "--output", "json"]);
    assert_eq!(runs.stdout.trim(), "[]", "{}", runs.stdout);
}

/// `acrossTeams: {below: default}`: a production step of a team without quota preempts
/// another team's best-effort step although that team is within its quota; the victim
/// resumes from its checkpoint once there is room.
#[test]
fn a_production_step_preempts_another_teams_best_effort_step_across_teams() {
    let sb = Sandbox::new("sched-across");
    sb.write(
        "cluster.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 2
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision, quota: {gpu: 8}}
    - {name: nlp}
  preemption:
    gracePeriod: 2s
    acrossTeams: {below: default}
"#,
    );
    sb.write("counter.py", COUNTER);
    // vision fills both nodes with best-effort work, all of it within its quota.
    write_filler(&sb, "vision", Some("best-effort"));
    write_urgent(&sb, "nlp", "urgent", Some("production"));
    let log = one_of_two_preempted_for(&sb, "vision", "nlp");
    assert_eq!(times(&log, "nlp-end").len(), 1, "{log:?}");
}

/// `quotaPools`: vision's quota holds in the on-demand pool only, so its best-effort work
/// filling the spot pool does not count against it, and its production step takes back the
/// on-demand GPUs nlp borrowed (without quotaPools, the spot work would fill vision's quota
/// and its production step would wait for nlp to finish: checked by hand, it does).
#[test]
fn a_quota_held_in_its_pools_is_taken_back_whatever_the_team_borrows_elsewhere() {
    let sb = Sandbox::new("sched-quota-pools");
    sb.write(
        "cluster.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: ondemand
      nodes: 2
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
    - name: spot
      nodes: 1
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
      interruptible: true
  teams:
    - {name: vision, quota: {gpu: 4}, quotaPools: [ondemand]}
    - {name: nlp}
  preemption:
    gracePeriod: 2s
"#,
    );
    sb.write("counter.py", COUNTER);
    // vision's best-effort sweep fills the spot node (4 GPUs, as much as its quota).
    sb.write(
        "sweep.yaml",
        &format!(
            r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: sweep, team: vision}}
spec:
  steps:
    - name: trial
      priority: best-effort
      interruptible: true
      resources: {{gpu: 4, flavor: spot}}
      run: {start}; while [ ! -e release ]; do sleep 0.1; done
"#,
            start = note("sweep-start", ""),
        ),
    );
    // nlp (no quota) fills both on-demand nodes: all of it borrowed.
    write_filler(&sb, "nlp", None);
    write_urgent(&sb, "vision", "train", None);
    let mut sweep = sb.spawn(&["run", "sweep.yaml", "--cluster", "cluster.yaml"]);
    wait_for("the sweep's trial to run", || {
        !times(&log(&sb), "sweep-start").is_empty()
    });
    let log = one_of_two_preempted_for(&sb, "nlp", "vision");
    assert_eq!(times(&log, "vision-end").len(), 1, "{log:?}");
    // The sweep ran on all along: the production step took on-demand room, not spot.
    assert_eq!(times(&log, "sweep-start").len(), 1, "{log:?}");
    std::fs::write(sb.path().join("release"), "").expect("release");
    assert!(wait::status(&mut sweep, "sluice run sweep.yaml").success());
}

/// The EASY tests' Cluster: one node of 4 GPUs, one team, `starvationLimit: 1s`.
fn easy_cluster(sb: &Sandbox) {
    sb.write(
        "cluster.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 1
      resources: {gpu: 4, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision}
  scheduling:
    starvationLimit: 1s
"#,
    );
}

/// An EASY test's step: `gpu` GPUs, then `timeout` and `needs` lines as given, noting its start
/// in the log and sleeping `secs`.
fn easy_step(name: &str, gpu: u32, timeout: &str, needs: &str, secs: f64) -> String {
    format!(
        "    - name: {name}\n      resources: {{gpu: {gpu}}}\n{timeout}{needs}      run: {start}; sleep {secs}\n",
        start = note(&format!("{name}-start"), ""),
    )
}

/// EASY backfill: a gang past `starvationLimit` reserves the node; a step whose `timeout` ends
/// before what runs there will have ended (its own `timeout`) starts on it meanwhile, and a
/// step with no timeout waits for the gang.
#[test]
fn a_step_with_a_timeout_backfills_a_starving_gangs_node_and_one_without_waits() {
    let sb = Sandbox::new("sched-easy");
    easy_cluster(&sb);
    // hold: 2 GPUs for 3 s (at most 60 s). big: all 4 GPUs, starving after 1 s. After a
    // 2 s pause, quick (at most 20 s, ending well before hold's 60 s) and slow (no timeout).
    let step = easy_step;
    let pipeline = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: easy, team: vision}}\nspec:\n  steps:\n{}{}{}{}{}",
        step("hold", 2, "      timeout: 60s\n", "", 3.0),
        step("big", 4, "", "", 0.1),
        step("pause", 0, "", "", 2.0),
        step(
            "quick",
            1,
            "      timeout: 20s\n",
            "      needs: [pause]\n",
            0.1
        ),
        step("slow", 1, "", "      needs: [pause]\n", 0.1),
    );
    sb.write("easy.yaml", &pipeline);
    let out = sb.run(&["run", "easy.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let log = log(&sb);
    let at = |w: &str| {
        *times(&log, &format!("{w}-start"))
            .first()
            .unwrap_or_else(|| panic!("{w} started: {log:?}"))
    };
    // big waited for hold; quick started on the reserved node before big, slow only after.
    assert!(at("big") >= at("hold"), "{log:?}");
    assert!(at("quick") < at("big"), "quick backfilled: {log:?}");
    assert!(at("slow") >= at("big"), "slow waited for the gang: {log:?}");
}

/// EASY backfill from history: a step with no `timeout` has no estimate in the first run of its
/// pipeline, so it waits for the starving gang; in the next run its earlier attempt's duration
/// is its estimate, and it backfills the gang's node. A step new in that run has no history and
/// still waits.
#[test]
fn a_step_without_a_timeout_backfills_once_its_history_says_it_ends_in_time() {
    let sb = Sandbox::new("sched-easy-history");
    easy_cluster(&sb);
    let step = easy_step;
    // hold: 2 GPUs for 3 s (at most 60 s). big: all 4 GPUs, starving after 1 s. After a 2 s
    // pause, quick (no timeout; 0.1 s) and, in the second run only, fresh (the same).
    let pipeline = |fresh: bool| {
        format!(
            "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: easy, team: vision}}\nspec:\n  steps:\n{}{}{}{}{}",
            step("hold", 2, "      timeout: 60s\n", "", 3.0),
            step("big", 4, "", "", 0.1),
            step("pause", 0, "", "", 2.0),
            step("quick", 1, "", "      needs: [pause]\n", 0.1),
            if fresh {
                step("fresh", 1, "", "      needs: [pause]\n", 0.1)
            } else {
                String::new()
            },
        )
    };
    let at = |log: &[(String, f64, String)], w: &str| {
        *times(log, &format!("{w}-start"))
            .first()
            .unwrap_or_else(|| panic!("{w} started: {log:?}"))
    };
    sb.write("easy.yaml", &pipeline(false));
    let out = sb.run(&["run", "easy.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let first = log(&sb);
    assert!(
        at(&first, "quick") >= at(&first, "big"),
        "no history yet: quick waited for the gang: {first:?}"
    );
    std::fs::remove_file(sb.path().join("log")).expect("the first run's log");
    sb.write("easy.yaml", &pipeline(true));
    let out = sb.run(&["run", "easy.yaml", "--cluster", "cluster.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let second = log(&sb);
    assert!(at(&second, "big") >= at(&second, "hold"), "{second:?}");
    assert!(
        at(&second, "quick") < at(&second, "big"),
        "quick backfilled from its history: {second:?}"
    );
    assert!(
        at(&second, "fresh") >= at(&second, "big"),
        "fresh, with no history, waited for the gang: {second:?}"
    );
}
