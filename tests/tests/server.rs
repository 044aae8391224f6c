//! `sluice server` and the CLI against it: isolation between teams on every route of the
//! OpenAPI document, tokens (unknown, expired, revoked), bad input, the CLI's output and exit
//! codes through the server, and no token kept in clear text.

use serde_json::{Value, json};
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, wait_for};

/// A run that stays Running until the test lets it finish (`touch release`).
const WAITING: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: waiting}
spec:
  steps:
    - name: work
      run: |
        echo started
        # Until released, or until the test is gone (a failed test removes its folder).
        while [ ! -e "$RELEASE" ] && [ -d "${RELEASE%/*}" ]; do sleep 0.05; done
        echo released
      env:
        RELEASE: "{{params.release}}"
  params:
    release: {type: string, default: never}
"#;

const QUICK: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: quick}
spec:
  steps:
    - name: hello
      run: echo hello from quick
    - name: after
      needs: [hello]
      run: echo after
"#;

fn submit(server: &Server, token: &str, source: &str, params: &[String]) -> Value {
    let a = server.call(
        "POST",
        "/api/v1/runs",
        Some(token),
        Some(&json!({"source": source, "path": "p.yaml", "params": params})),
    );
    assert_eq!(a.status, 201, "submit: {}", a.text());
    a.json()
}

fn run_state(server: &Server, token: &str, id: &str) -> String {
    let a = server.call("GET", &format!("/api/v1/runs/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "status: {}", a.text());
    a.json()["state"].as_str().unwrap_or_default().to_owned()
}

fn wait_state(server: &Server, token: &str, id: &str, state: &str) {
    wait_for(&format!("run {id} to be {state}"), || {
        run_state(server, token, id) == state
    });
}

/// The routes of the OpenAPI document that take a token: (method, path template, tags).
fn routes(server: &Server) -> Vec<(String, String, Vec<String>)> {
    let doc = server.call("GET", "/api/v1/openapi.json", None, None);
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("operations") {
            let tags = op["tags"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            out.push((method.to_uppercase(), path.clone(), tags));
        }
    }
    assert!(out.len() >= 10, "the document lists the API: {out:?}");
    out
}

/// A route's path with its parameters filled in from `values`; every parameter must have one
/// (a new kind of parameter needs a value here, which the failure says).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut path = template.to_owned();
    for (name, value) in values {
        path = path.replace(&format!("{{{name}}}"), value);
    }
    assert!(
        !path.contains('{'),
        "{template}: a path parameter this test has no value for; add one to `values`"
    );
    path
}

/// A body that is valid for the route, so that what refuses a request is who asks, not what
/// is sent.
fn body_for(method: &str, path: &str, team_a_source: &str) -> Option<Value> {
    match (method, path) {
        ("POST", "/api/v1/runs") => Some(json!({"source": team_a_source, "path": "p.yaml"})),
        ("POST", "/api/v1/apply") => {
            Some(json!({"files": [{"path": "p.yaml", "text": team_a_source}]}))
        }
        // Team A's applied pipeline, by name.
        ("POST", "/api/v1/submit") => Some(json!({"name": "applied"})),
        ("POST", "/api/v1/tokens") => Some(json!({"team": "vision", "role": "admin"})),
        ("POST", _) => None,
        _ => None,
    }
}

#[test]
fn every_route_keeps_teams_apart_and_refuses_bad_tokens() {
    let sb = Sandbox::new("server-isolation");
    let (a_id, a) = token(&sb, "vision", "member", &["--name", "alice"]);
    let (_, b) = token(&sb, "nlp", "member", &[]);
    let (_, viewer) = token(&sb, "vision", "viewer", &[]);
    let (_, admin) = token(&sb, "*", "admin", &[]);
    let (revoked_id, revoked) = token(&sb, "vision", "member", &[]);
    let (_, expiring) = token(&sb, "vision", "member", &["--expires", "1s"]);
    // This test makes a few hundred failed authentications from one address on purpose.
    let server = Server::start(&sb, &["--auth-failures", "100000"]);
    server.wait_ready();

    let release = sb.path().join("release");
    let param = format!("release={}", release.display());
    let run = submit(&server, &a, WAITING, &[param]);
    let id = run["id"].as_str().expect("an id").to_owned();
    wait_for("the step to start", || {
        let v = server
            .call("GET", &format!("/api/v1/runs/{id}"), Some(&a), None)
            .json();
        v["steps"][0]["state"] == "Running"
    });
    let out = sb.run(&["token", "revoke", &revoked_id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    std::thread::sleep(std::time::Duration::from_millis(1100));

    let team_a_file = WAITING.replace(
        "metadata: {name: waiting}",
        "metadata: {name: waiting, team: vision}",
    );
    // Team A has an applied pipeline and schedule too.
    let applied = format!(
        "{}---\napiVersion: sluice.dev/v1\nkind: Schedule\nmetadata: {{name: nightly}}\nspec:\n  pipeline: applied\n  cron: \"0 2 * * *\"\n",
        WAITING.replace("metadata: {name: waiting}", "metadata: {name: applied}")
    );
    let got = server.call(
        "POST",
        "/api/v1/apply",
        Some(&a),
        Some(&json!({"files": [{"path": "applied.yaml", "text": applied}]})),
    );
    assert_eq!(got.status, 200, "{}", got.text());
    let values = [
        ("run", id.as_str()),
        ("step", "work"),
        ("id", a_id.as_str()),
        ("name", "nightly"),
    ];
    let before = server
        .call("GET", &format!("/api/v1/runs/{id}"), Some(&a), None)
        .json();
    for (method, template, tags) in routes(&server) {
        let path = fill(&template, &values);
        let body = body_for(&method, &template, &team_a_file);
        let call = |token: Option<&str>| server.call(&method, &path, token, body.as_ref());
        let what = format!("{method} {template}");

        // No token, or one that is unknown, expired or revoked: 401, saying which.
        for (t, says) in [
            (None, "no token"),
            (Some("sluice_0000"), "unknown"),
            (Some(expiring.as_str()), "expired"),
            (Some(revoked.as_str()), "revoked"),
        ] {
            let got = call(t);
            assert_eq!(got.status, 401, "{what} with {says}: {}", got.text());
            let message = got.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            assert!(message.contains(says), "{what}: {message}");
        }

        // Team B's member on team A's objects: as if they did not exist.
        let got = call(Some(&b));
        let status = got.status;
        if tags.iter().any(|t| t == "admin") {
            assert_eq!(
                status,
                403,
                "{what} as another team's member: {}",
                got.text()
            );
        } else if template.contains("{run}") {
            assert_eq!(
                status,
                404,
                "{what} as another team's member: {}",
                got.text()
            );
            assert_eq!(
                got.json()["error"]["message"],
                json!(format!("unknown run '{id}'")),
                "{what}: the same words as for an id never used"
            );
        } else if template.contains("{name}") || template == "/api/v1/submit" {
            // Team A's schedule or applied pipeline, named: it does not exist for team B.
            assert_eq!(
                status,
                404,
                "{what} as another team's member: {}",
                got.text()
            );
        } else if method == "POST" {
            // Submitting team A's file with team B's token.
            assert_eq!(status, 403, "{what}: {}", got.text());
            assert!(
                got.text().contains("'nlp'"),
                "{what} says the token's team: {}",
                got.text()
            );
        } else {
            assert_eq!(status, 200, "{what}: {}", got.text());
            assert!(
                !got.text().contains(&id),
                "{what} shows team A's run to team B: {}",
                got.text()
            );
        }

        // A viewer may not change anything.
        if method != "GET" {
            let got = call(Some(&viewer));
            assert_eq!(got.status, 403, "{what} as a viewer: {}", got.text());
        }
    }
    // Nothing changed: the run runs, with the same step states and attempts.
    let after = server
        .call("GET", &format!("/api/v1/runs/{id}"), Some(&a), None)
        .json();
    assert_eq!(after["state"], "Running");
    assert_eq!(after["steps"], before["steps"]);
    // The refusals and the revocation are in the audit record; only an admin reads it.
    let audit = server.call("GET", "/api/v1/audit", Some(&admin), None);
    assert_eq!(audit.status, 200, "{}", audit.text());
    let record = audit.json();
    let entries = record.as_array().expect("a list");
    assert!(
        entries
            .iter()
            .any(|e| e["action"] == "submit" && e["who"] == a_id && e["result"] == "ok")
    );
    assert!(entries.iter().any(|e| e["action"] == "token revoke"));
    assert!(
        entries.iter().any(|e| e["action"] == "cancel"
            && e["result"].as_str().is_some_and(|r| r.starts_with("404")))
    );

    std::fs::write(&release, "").expect("release");
    wait_state(&server, &a, &id, "Succeeded");
}

#[test]
fn the_cli_through_a_server_prints_what_embedded_mode_prints() {
    let sb = Sandbox::new("server-cli");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (_, b) = token(&sb, "nlp", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    sb.write("quick.yaml", QUICK);

    let out = server.cli(&sb, Some(&a), &["run", "quick.yaml"]);
    assert_eq!(out.code, Some(0), "run through the server: {}", out.stderr);
    assert!(out.stdout.contains("Succeeded"), "{}", out.stdout);
    let id = out
        .stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("run ")
                .and_then(|r| r.split_whitespace().next())
        })
        .expect("run says its id")
        .to_owned();

    // The same documents, through the server and from the server's home.
    for args in [
        vec!["status", id.as_str()],
        vec!["status", id.as_str(), "--output", "json"],
        vec![
            "status",
            id.as_str(),
            "--steps-limit",
            "1",
            "--steps-offset",
            "1",
        ],
        vec![
            "status",
            id.as_str(),
            "--steps-limit",
            "1",
            "--output",
            "json",
        ],
        vec!["logs", id.as_str()],
        vec!["logs", id.as_str(), "hello", "--output", "json"],
    ] {
        let remote = server.cli(&sb, Some(&a), &args);
        let local = sb.run(&args);
        assert_eq!(remote.code, Some(0), "{args:?}: {}", remote.stderr);
        assert_eq!(remote.stdout, local.stdout, "{args:?} through the server");
    }
    // A page of the steps: the second only, with the counts of all.
    let page = server.call(
        "GET",
        &format!("/api/v1/runs/{id}?steps_limit=1&steps_offset=1"),
        Some(&a),
        None,
    );
    assert_eq!(page.status, 200, "{}", page.text());
    let page = page.json();
    assert_eq!(page["steps"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["steps"][0]["name"], "after", "{page}");
    assert_eq!(
        page["steps"][0]["attempts"][0]["state"], "Succeeded",
        "{page}"
    );
    assert_eq!(page["steps_total"], 2, "{page}");
    assert_eq!(page["step_counts"], json!({"Succeeded": 2}), "{page}");
    let text = server.cli(&sb, Some(&a), &["status", &id, "--steps-limit", "1"]);
    assert!(
        text.stdout.contains("2 steps (2 Succeeded), 1 shown"),
        "{}",
        text.stdout
    );
    let bad = server.call(
        "GET",
        &format!("/api/v1/runs/{id}?steps_limit=-1"),
        Some(&a),
        None,
    );
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(bad.text().contains("steps limit -1"), "{}", bad.text());
    // Following an ended run's logs prints them and returns.
    let followed = server.cli(&sb, Some(&a), &["logs", &id, "-f"]);
    assert_eq!(followed.code, Some(0), "{}", followed.stderr);
    assert_eq!(followed.stdout, sb.run(&["logs", &id]).stdout);
    let remote = server.cli(&sb, Some(&a), &["usage", "--by", "team,pool,pipeline"]);
    let local = sb.run(&["usage", "--by", "team,pool,pipeline"]);
    assert_eq!(remote.code, Some(0), "usage: {}", remote.stderr);
    assert_eq!(remote.stdout, local.stdout, "usage through the server");
    let remote = server.cli(&sb, Some(&a), &["runs", "--output", "json"]);
    let local = sb.run(&["runs", "--output", "json"]);
    let strip = |s: &str| -> Value {
        // `runs` shows whether a running run's engine is alive: both ended here, so equal.
        serde_json::from_str(s).expect("JSON")
    };
    assert_eq!(strip(&remote.stdout), strip(&local.stdout));

    // Metrics: aggregates per team and state, the API by route template; no run id or name.
    let metrics = server.call("GET", "/metrics", None, None);
    assert_eq!(metrics.status, 200);
    let text = metrics.text();
    assert!(
        text.lines().any(|l| l.starts_with("sluice_attempts{")
            && l.contains("team=\"vision\"")
            && l.contains("state=\"Succeeded\"")
            && l.ends_with(" 2")),
        "{text}"
    );
    assert!(text.contains("route=\"/api/v1/runs/{run}\""), "{text}");
    assert!(text.contains("sluice_leader 1"), "{text}");
    assert!(
        !text.contains(&id) && !text.contains("quick"),
        "no run ids or names: {text}"
    );
    // Another team: the run does not exist for it.
    let out = server.cli(&sb, Some(&b), &["status", &id]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains(&format!("unknown run '{id}'")),
        "{}",
        out.stderr
    );
    let out = server.cli(&sb, Some(&b), &["runs"]);
    assert_eq!(out.code, Some(0));
    assert!(!out.stdout.contains(&id), "{}", out.stdout);
    // A file of another team is refused, naming the token's team.
    sb.write(
        "theirs.yaml",
        &QUICK.replace(
            "metadata: {name: quick}",
            "metadata: {name: quick, team: vision}",
        ),
    );
    let out = server.cli(&sb, Some(&b), &["run", "theirs.yaml"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("'nlp'"), "{}", out.stderr);
    // No token, a bad one: exit 2 saying so.
    let out = server.cli(&sb, None, &["runs"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no token"), "{}", out.stderr);
    let out = server.cli(&sb, Some("sluice_nope"), &["runs"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("unknown"), "{}", out.stderr);
    // An invalid file: lint's diagnostics, exit 2.
    sb.write(
        "bad.yaml",
        &QUICK.replace("needs: [hello]", "needs: [helo]"),
    );
    let out = server.cli(&sb, Some(&a), &["run", "bad.yaml"]);
    let embedded = sb.run(&["run", "bad.yaml"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(embedded.code, Some(2));
    assert!(
        out.stderr.contains("bad.yaml:9:15: error:"),
        "{}",
        out.stderr
    );
    assert_eq!(
        out.stderr, embedded.stderr,
        "the same diagnostics as embedded mode"
    );
    // --detach returns at once with the id; cancel through the server.
    sb.write("waiting.yaml", WAITING);
    let release = sb.path().join("release");
    let param = format!("release={}", release.display());
    let out = server.cli(
        &sb,
        Some(&a),
        &["run", "waiting.yaml", "-p", &param, "--detach"],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let waiting = out.stdout.trim().to_owned();
    wait_state(&server, &a, &waiting, "Running");
    let out = server.cli(&sb, Some(&a), &["cancel", &waiting, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        serde_json::from_str::<Value>(&out.stdout).expect("JSON"),
        json!({"id": waiting, "state": "Cancelled"})
    );
    // A server that cannot be reached: exit 3.
    let mut cmd = sluice_e2e::sluice();
    cmd.args(["runs"])
        .env("SLUICE_SERVER", "http://127.0.0.1:9")
        .env("SLUICE_TOKEN", &a);
    let out = sluice_e2e::ran(sluice_e2e::wait::output(&mut cmd));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
}

#[test]
fn bad_requests_are_400_with_lints_diagnostics_never_500() {
    let sb = Sandbox::new("server-bad-input");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let post = |body: &[u8]| {
        sluice_e2e::http::request(&server.addr, "POST", "/api/v1/runs", Some(&a), Some(body))
            .expect("an answer")
    };
    for (what, body) in [
        ("malformed JSON", b"{\"source\": ".to_vec()),
        ("not an object", b"[1, 2]".to_vec()),
        (
            "an unknown field",
            br#"{"source": "x", "colour": "red"}"#.to_vec(),
        ),
        ("a missing field", br#"{"path": "p.yaml"}"#.to_vec()),
    ] {
        let got = post(&body);
        assert_eq!(got.status, 400, "{what}: {}", got.text());
        assert_eq!(
            got.json()["error"]["kind"],
            "invalid",
            "{what}: {}",
            got.text()
        );
    }
    // A body over the limit is 413, said before it is read.
    let big = "x".repeat(5 * 1024 * 1024);
    let got = post(format!("{{\"source\": \"{big}\"}}").as_bytes());
    assert_eq!(got.status, 413, "{}", got.text());
    assert_eq!(got.json()["error"]["kind"], "too_large", "{}", got.text());
    // Invalid YAML: the diagnostics `lint --output json` gives, as JSON.
    let bad = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: x}\nspec:\n  steps:\n    - name: a\n      run: echo\n      needs: [b]\n";
    sb.write("p.yaml", bad);
    let got = post(
        json!({"source": bad, "path": "p.yaml"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(got.status, 400, "{}", got.text());
    let lint = sb.run(&["lint", "p.yaml", "--output", "json"]);
    let lint: Value = serde_json::from_str(&lint.stdout).expect("lint JSON");
    let from_lint = lint["diagnostics"].clone();
    let from_api = got.json()["error"]["diagnostics"].clone();
    assert!(
        from_api.as_array().is_some_and(|d| !d.is_empty()),
        "{}",
        got.text()
    );
    for d in from_api.as_array().into_iter().flatten() {
        for key in ["path", "line", "column", "message"] {
            assert!(!d[key].is_null(), "a diagnostic has its {key}: {d}");
        }
    }
    assert_eq!(from_api, from_lint, "the API's diagnostics are lint's");
    // Query strings and paths that do not parse.
    for path in [
        "/api/v1/runs?limit=abc",
        "/api/v1/runs?limit=-1",
        "/api/v1/runs?colour=red",
        "/api/v1/runs?since=yesterday",
        "/api/v1/runs?state=sleeping",
        "/api/v1/runs/x/logs?follow=maybe",
        "/api/v1/runs/x/logs?attempt=1",
    ] {
        let got = server.call("GET", path, Some(&a), None);
        assert_eq!(got.status, 400, "{path}: {}", got.text());
    }
    assert_eq!(
        server.call("GET", "/api/v1/nothing", Some(&a), None).status,
        404
    );
    // A NUL character, which PostgreSQL cannot hold (SQLite can): refused as the request's
    // fault there, never a 5xx on either store.
    for (method, path, body) in [
        ("GET", "/api/v1/runs?pipeline=%00", None),
        ("GET", "/api/v1/runs/a%00b", None),
        ("GET", "/api/v1/runs/a%00b/logs", None),
        ("POST", "/api/v1/submit", Some(json!({"name": "x\u{0}y"}))),
        (
            "POST",
            "/api/v1/runs",
            Some(json!({"source": QUICK, "path": "nul\u{0}.yaml"})),
        ),
    ] {
        let got = server.call(method, path, Some(&a), body.as_ref());
        let expected: &[u16] = if sb.state.is_some() {
            &[400]
        } else {
            &[200, 201, 404]
        };
        assert!(
            expected.contains(&got.status),
            "{method} {path} with a NUL: {} {}",
            got.status,
            got.text()
        );
    }
}

#[test]
fn no_token_is_kept_in_clear_text() {
    let sb = Sandbox::new("server-token-store");
    let (_, secret) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    // It works...
    assert_eq!(
        server
            .call("GET", "/api/v1/whoami", Some(&secret), None)
            .status,
        200
    );
    drop(server);
    // ...and the store holds only its hash.
    let held = match &sb.state {
        Some(url) => {
            let out = sluice_e2e::wait::output(std::process::Command::new("psql").arg(url).args([
                "-At",
                "-c",
                "SELECT * FROM tokens; SELECT * FROM audit;",
            ]));
            assert!(
                out.status.success(),
                "psql: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }
        None => {
            let mut all = Vec::new();
            for entry in std::fs::read_dir(sb.home()).expect("the home").flatten() {
                if entry.file_name().to_string_lossy().starts_with("sluice.db") {
                    all.extend(std::fs::read(entry.path()).expect("the database"));
                }
            }
            assert!(!all.is_empty(), "the SQLite files were read");
            all
        }
    };
    let token_hex = secret.trim_start_matches("sluice_");
    let held = String::from_utf8_lossy(&held);
    assert!(
        !held.contains(token_hex),
        "the token is in the store in clear text"
    );
}

#[test]
fn a_token_over_its_rate_waits_with_429_and_retry_after() {
    let sb = Sandbox::new("server-rate");
    let (_, a) = token(&sb, "vision", "viewer", &[]);
    let (_, b) = token(&sb, "nlp", "viewer", &[]);
    let server = Server::start(&sb, &["--rate", "3"]);
    server.wait_ready();
    let statuses: Vec<(u16, Option<String>)> = (0..20)
        .map(|_| {
            let got = server.call("GET", "/api/v1/whoami", Some(&a), None);
            (got.status, got.header("retry-after").map(str::to_owned))
        })
        .collect();
    let limited: Vec<&(u16, Option<String>)> = statuses.iter().filter(|(s, _)| *s == 429).collect();
    assert!(
        !limited.is_empty(),
        "20 requests at once pass a rate of 3 a second: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|(s, _)| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    for (_, retry) in limited {
        let secs: u64 = retry
            .as_deref()
            .and_then(|r| r.parse().ok())
            .expect("Retry-After in seconds");
        assert!(secs >= 1, "{secs}");
    }
    // Another token has its own budget.
    assert_eq!(
        server.call("GET", "/api/v1/whoami", Some(&b), None).status,
        200
    );
}

const ONE_GPU: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: one}
spec:
  pools:
    - {name: gpu, nodes: 1, resources: {gpu: 1, cpu: 8, memory: 16Gi}}
  priorities:
    - {name: production, value: 1000}
    - {name: best-effort, value: 0, default: true}
"#;

/// Holds the cluster's one GPU until released.
const HOLDS_GPU: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: holds}
spec:
  steps:
    - name: work
      resources: {gpu: 1, cpu: 1}
      run: |
        # Until released, or until the test is gone (a failed test removes its folder).
        while [ ! -e "$RELEASE" ] && [ -d "${RELEASE%/*}" ]; do sleep 0.05; done
      env:
        RELEASE: "{{params.release}}"
  params:
    release: {type: string, default: never}
"#;

#[test]
fn a_server_admits_every_teams_runs_through_its_clusters_one_scheduler() {
    let sb = Sandbox::new("server-cluster");
    let cluster = sb.write("cluster.yaml", ONE_GPU);
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (_, b) = token(&sb, "nlp", "member", &[]);
    let server = Server::start(&sb, &["--cluster", cluster.to_str().expect("a path")]);
    server.wait_ready();
    let release = sb.path().join("release");
    let param = format!("release={}", release.display());
    let first = submit(&server, &a, HOLDS_GPU, std::slice::from_ref(&param));
    let first = first["id"].as_str().expect("an id").to_owned();
    wait_for("the first run's step to hold the GPU", || {
        server
            .call("GET", &format!("/api/v1/runs/{first}"), Some(&a), None)
            .json()["steps"][0]["state"]
            == "Running"
    });
    // Another team's run waits for the GPU: one scheduler sees both.
    let second = submit(&server, &b, HOLDS_GPU, std::slice::from_ref(&param));
    let second = second["id"].as_str().expect("an id").to_owned();
    wait_for("the second run's step to wait, with its reason", || {
        let v = server
            .call("GET", &format!("/api/v1/runs/{second}"), Some(&b), None)
            .json();
        v["steps"][0]["state"] == "Queued" && !v["steps"][0]["reason"].is_null()
    });
    let metrics = server.call("GET", "/metrics", None, None).text();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_queue_length{")
                && l.contains("team=\"nlp\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_gpus_held{team=\"vision\",pool=\"gpu\"} 1")),
        "{metrics}"
    );
    std::fs::write(&release, "").expect("release");
    wait_state(&server, &a, &first, "Succeeded");
    wait_state(&server, &b, &second, "Succeeded");
}

#[test]
fn ctrl_c_on_a_run_through_a_server_cancels_it_and_exits_130() {
    let sb = Sandbox::new("server-ctrl-c");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    sb.write("waiting.yaml", WAITING);
    let param = format!("release={}", sb.path().join("release").display());
    let child = sluice_e2e::sluice()
        .args(["run", "waiting.yaml", "-p", &param])
        .current_dir(sb.path())
        .env("SLUICE_SERVER", server.url())
        .env("SLUICE_TOKEN", &a)
        .env("SLUICE_HOME", sb.path().join("client-home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sluice run starts");
    wait_for("the run's step to run", || {
        let runs = server.call("GET", "/api/v1/runs", Some(&a), None).json();
        runs[0]["id"].as_str().is_some_and(|id| {
            server
                .call("GET", &format!("/api/v1/runs/{id}"), Some(&a), None)
                .json()["steps"][0]["state"]
                == "Running"
        })
    });
    sluice_e2e::signal(child.id(), "INT");
    let out = sluice_e2e::wait::output_of(child, "sluice run (interrupted)");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Cancelled"));
    let runs = server.call("GET", "/api/v1/runs", Some(&a), None).json();
    assert_eq!(runs[0]["state"], "Cancelled", "{runs}");
}
