//! The server killed with SIGKILL at many moments of a run and started again: every step runs
//! to completion exactly once, and steps running at a kill are adopted by the next server,
//! not started again. SIGTERM stops a server gracefully and leaves the steps running.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_e2e::crashy::{PIPELINE, STEPS};
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, wait_for};

fn count(sb: &Sandbox, dir: &str, step: &str) -> usize {
    std::fs::read_to_string(sb.path().join(dir).join(step)).map_or(0, |t| t.lines().count())
}

fn submit(server: &Server, token: &str, sb: &Sandbox, source: &str) -> String {
    let a = server.call(
        "POST",
        "/api/v1/runs",
        Some(token),
        Some(&json!({
            "source": source,
            "path": "p.yaml",
            "workdir": sb.path().display().to_string(),
        })),
    );
    assert_eq!(a.status, 201, "submit: {}", a.text());
    a.json()["id"].as_str().expect("an id").to_owned()
}

fn status(server: &Server, token: &str, id: &str) -> Value {
    let a = server.call("GET", &format!("/api/v1/runs/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()
}

#[test]
fn killing_the_server_anywhere_loses_nothing_and_runs_nothing_twice() {
    // A fixed sequence of kill moments (a linear congruential generator, seeded).
    let mut seed: u64 = 0x5e7e;
    let mut next = |lo: u64, hi: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        lo + (seed >> 33) % (hi - lo)
    };
    for round in 0..5 {
        let sb = Sandbox::new(&format!("server-crash{round}"));
        std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
        std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
        let (_, t) = token(&sb, "vision", "member", &[]);
        let mut server = Server::start(&sb, &[]);
        server.wait_ready();
        let id = submit(&server, &t, &sb, PIPELINE);
        let mut kills = 0;
        let mut adopted_running = false;
        loop {
            std::thread::sleep(Duration::from_millis(next(10, 400)));
            let before = status(&server, &t, &id);
            if before["state"] != "Running" {
                break;
            }
            let running_at_kill = before["steps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["state"] == "Running"));
            server.kill();
            kills += 1;
            server = Server::start(&sb, &[]);
            server.wait_ready();
            adopted_running |= running_at_kill;
            assert!(kills < 40, "round {round}: the run never ended");
        }
        wait_for("the run to end", || {
            status(&server, &t, &id)["state"] != "Running"
        });
        let end = status(&server, &t, &id);
        assert_eq!(end["state"], "Succeeded", "round {round}: {end}");
        for step in STEPS {
            assert_eq!(
                count(&sb, "starts", step),
                1,
                "round {round}: {step} starts"
            );
            assert_eq!(
                count(&sb, "done", step),
                1,
                "round {round}: {step} completions"
            );
        }
        eprintln!("round {round}: {kills} kills, a step running at a kill: {adopted_running}");
    }
}

/// A step that runs until released, in a run submitted to the server.
const WAITING: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: waiting}
spec:
  steps:
    - name: work
      run: |
        echo start >> starts/work
        while [ ! -e release ] && [ -e starts ]; do sleep 0.05; done
        echo done >> done/work
"#;

#[test]
fn sigterm_stops_the_server_and_leaves_steps_to_the_next() {
    let sb = Sandbox::new("server-sigterm");
    std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
    std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
    let (_, t) = token(&sb, "vision", "member", &[]);
    let mut server = Server::start(&sb, &[]);
    server.wait_ready();
    let id = submit(&server, &t, &sb, WAITING);
    wait_for("the step to start", || count(&sb, "starts", "work") == 1);
    sluice_e2e::signal(server.pid(), "TERM");
    assert_eq!(
        server.wait_within(Duration::from_secs(30)),
        Some(0),
        "a clean exit"
    );
    // The run is still Running (its step too), and nobody drives it.
    let out = sb.run(&["status", &id, "--output", "json"]);
    let v: Value = serde_json::from_str(&out.stdout).expect("status JSON");
    assert_eq!(v["state"], "Running", "{v}");
    assert_eq!(v["steps"][0]["state"], "Running", "{v}");
    // The next server adopts it; released, it succeeds with its one attempt.
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    std::fs::write(sb.path().join("release"), "").expect("release");
    wait_for("the run to end", || {
        status(&server, &t, &id)["state"] != "Running"
    });
    let end = status(&server, &t, &id);
    assert_eq!(end["state"], "Succeeded", "{end}");
    assert_eq!(
        end["steps"][0]["attempts"].as_array().map(Vec::len),
        Some(1),
        "{end}"
    );
    assert_eq!(count(&sb, "starts", "work"), 1);
    assert_eq!(count(&sb, "done", "work"), 1);
}

/// Whether the server at `server` leads (its `/metrics` say so).
fn leads(server: &Server) -> bool {
    sluice_e2e::http::request(&server.addr, "GET", "/metrics", None, None)
        .is_ok_and(|a| a.text().lines().any(|l| l.trim() == "sluice_leader 1"))
}

#[test]
fn a_second_server_takes_over_when_the_leader_is_killed() {
    let sb = Sandbox::new("server-takeover");
    std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
    std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
    let (_, t) = token(&sb, "vision", "member", &[]);
    let mut first = Server::start(&sb, &[]);
    first.wait_ready();
    wait_for("the first server to lead", || leads(&first));
    let second = Server::start(&sb, &[]);
    second.wait_ready();
    // Both serve the API; only one leads.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!leads(&second), "two leaders");
    // Submitted through the follower, driven by the leader.
    let id = submit(&second, &t, &sb, PIPELINE);
    wait_for("a step to run", || {
        status(&second, &t, &id)["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["state"] == "Running"))
    });
    first.kill();
    let killed = std::time::Instant::now();
    wait_for("the second server to lead", || leads(&second));
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(15), "took over in {took:?}");
    wait_for("the run to end", || {
        status(&second, &t, &id)["state"] != "Running"
    });
    let end = status(&second, &t, &id);
    assert_eq!(end["state"], "Succeeded", "{end}");
    for step in STEPS {
        assert_eq!(count(&sb, "starts", step), 1, "{step} starts");
        assert_eq!(count(&sb, "done", step), 1, "{step} completions");
    }
    eprintln!("the second server took over {took:?} after the leader was killed");
}

#[test]
fn a_leader_frozen_past_its_lease_is_fenced_and_the_other_finishes_the_run() {
    let sb = Sandbox::new("server-fence");
    std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
    std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
    let (_, t) = token(&sb, "vision", "member", &[]);
    // Two machines, as far as leases can tell: neither can check the other's process.
    let first = Server::start_with(&sb, &[], &[("SLUICE_ENGINE_HOST", "node-a")]);
    first.wait_ready();
    wait_for("the first server to lead", || leads(&first));
    let second = Server::start_with(&sb, &[], &[("SLUICE_ENGINE_HOST", "node-b")]);
    second.wait_ready();
    let slow = PIPELINE.replace("sleep 0.3", "sleep 1");
    let id = submit(&second, &t, &sb, &slow);
    wait_for("a step to run", || {
        status(&second, &t, &id)["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["state"] == "Running"))
    });
    // The leader freezes (a partition, a long GC pause): the other takes over once its
    // lease has run out, and adopts the run without waiting for the run's own lease.
    sluice_e2e::signal(first.pid(), "STOP");
    let frozen = std::time::Instant::now();
    wait_for("the second server to lead", || leads(&second));
    let took = frozen.elapsed();
    assert!(took < Duration::from_secs(15), "took over in {took:?}");
    // The old leader wakes up: whatever it tries to write is refused, and it steps down.
    sluice_e2e::signal(first.pid(), "CONT");
    wait_for("the old leader to step down", || !leads(&first));
    wait_for("the run to end", || {
        status(&second, &t, &id)["state"] != "Running"
    });
    let end = status(&second, &t, &id);
    assert_eq!(end["state"], "Succeeded", "{end}");
    for step in STEPS {
        assert_eq!(count(&sb, "starts", step), 1, "{step} starts");
        assert_eq!(count(&sb, "done", step), 1, "{step} completions");
    }
    eprintln!("took over {took:?} after the leader froze");
}

/// A run of one step that records, by its run's id, that it started and that it ended.
const COUNTED: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: counted}
spec:
  steps:
    - name: work
      resources: {cpu: 500m}
      run: |
        echo "$SLUICE_RUN_ID" >> starts/all
        echo "$SLUICE_RUN_ID" >> done/all
"#;

/// Each line of `file` in the sandbox, counted.
fn tally(sb: &Sandbox, file: &str) -> std::collections::BTreeMap<String, usize> {
    let mut n = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(sb.path().join(file))
        .unwrap_or_default()
        .lines()
    {
        *n.entry(line.to_owned()).or_insert(0) += 1;
    }
    n
}

/// The server killed with SIGKILL while 1,000 runs wait for the machine and 50 submissions a
/// second arrive (sent with an `Idempotency-Key`, and again with it while the server does
/// not answer): after it starts again every run completes, none twice and none lost, and
/// every submission that got an answer, before or after the kill, is one run.
#[test]
fn killing_a_server_with_a_long_queue_and_submissions_arriving_loses_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let queued = 1000;
    let sb = Sandbox::new("server-queue-crash");
    std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
    std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
    let (_, t) = token(&sb, "vision", "member", &[]);
    let mut server = Server::start(&sb, &["--rate", "100000"]);
    server.wait_ready();
    let addr = Arc::new(Mutex::new(server.addr.clone()));
    let body =
        json!({"source": COUNTED, "path": "p.yaml", "workdir": sb.path().display().to_string()})
            .to_string();
    // Sends one submission with `key` until it is answered: its run's id.
    let send = {
        let (addr, t, body) = (addr.clone(), t.clone(), body.clone());
        move |key: String| -> String {
            let deadline = std::time::Instant::now() + sluice_e2e::wait::deadline();
            loop {
                let at = addr.lock().expect("the address").clone();
                let answer = sluice_e2e::http::request_with(
                    &at,
                    "POST",
                    "/api/v1/runs",
                    &[
                        ("Authorization", &format!("Bearer {t}")),
                        ("Content-Type", "application/json"),
                        ("Idempotency-Key", &key),
                    ],
                    Some(body.as_bytes()),
                );
                if let Ok(a) = answer
                    && (a.status == 200 || a.status == 201)
                {
                    return a.json()["id"].as_str().expect("an id").to_owned();
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "submission {key} never answered"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    let mut ids: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<Vec<usize>> = (0..queued)
            .collect::<Vec<_>>()
            .chunks(queued / 8)
            .map(<[usize]>::to_vec)
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let send = send.clone();
                s.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|i| send(format!("q{i}")))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a submitter"))
            .collect()
    });
    // 50 a second while the server is killed and started again.
    let done = Arc::new(AtomicBool::new(false));
    let arriving = {
        let (send, done) = (send.clone(), done.clone());
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            let mut i = 0;
            while !done.load(Ordering::SeqCst) {
                ids.push(send(format!("a{i}")));
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            ids
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    server.kill();
    server = Server::start(&sb, &["--rate", "100000"]);
    *addr.lock().expect("the address") = server.addr.clone();
    server.wait_ready();
    std::thread::sleep(Duration::from_secs(2));
    done.store(true, Ordering::SeqCst);
    ids.extend(arriving.join().expect("the submitter"));
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "a submission was answered with another's run"
    );
    let everything = server.call("GET", "/api/v1/runs?limit=0", Some(&t), None);
    let listed = everything.json().as_array().map_or(0, Vec::len);
    assert_eq!(listed, ids.len(), "one run per submission");
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    loop {
        let running = server.call("GET", "/api/v1/runs?limit=0&state=Running", Some(&t), None);
        if running.json().as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "runs still running after 600 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let failed = server.call("GET", "/api/v1/runs?limit=0&state=Failed", Some(&t), None);
    assert_eq!(
        failed.json().as_array().map_or(0, Vec::len),
        0,
        "{}",
        failed.text()
    );
    let (starts, ends) = (tally(&sb, "starts/all"), tally(&sb, "done/all"));
    for id in &ids {
        assert_eq!(
            starts.get(id),
            Some(&1),
            "run {id} started {:?} times",
            starts.get(id)
        );
        assert_eq!(
            ends.get(id),
            Some(&1),
            "run {id} ended {:?} times",
            ends.get(id)
        );
    }
    assert_eq!(starts.len(), ids.len(), "a step of no known run started");
}

/// With PostgreSQL state, another process's cancel reaches the server's driver by NOTIFY. The
/// server's listening connection is cut (its backend terminated) and the run cancelled by
/// another process right then: the notification is lost, and the run is cancelled all the
/// same, within the resync period (`store::feed::RESYNC`, 30 s), here as soon as the
/// listener is back.
#[test]
fn a_lost_notification_delays_a_cancel_by_at_most_the_resync_period() {
    let sb = Sandbox::new("server-lost-notify");
    let Some(url) = sb.state.clone() else {
        return; // SQLite's changes are seen by polling, not notified: nothing to lose.
    };
    std::fs::create_dir_all(sb.path().join("starts")).expect("mkdir");
    std::fs::create_dir_all(sb.path().join("done")).expect("mkdir");
    let (_, t) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let id = submit(&server, &t, &sb, WAITING);
    wait_for("the step to start", || count(&sb, "starts", "work") == 1);
    let psql = |sql: &str| {
        let out = std::process::Command::new("psql")
            .args([url.as_str(), "-Atc", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    wait_for("the server to listen", || {
        !psql("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%'").is_empty()
    });
    psql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'");
    let asked = std::time::Instant::now();
    let out = sb.run(&["cancel", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let deadline = asked + Duration::from_secs(30 + 10);
    loop {
        if status(&server, &t, &id)["state"] == "Cancelled" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the cancel was lost");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "cancelled {:?} after the notification was lost",
        asked.elapsed()
    );
}
