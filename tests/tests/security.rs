//! What a security probe of the server found (issue 32), one test per finding: a step's
//! environment, a full disk, damaged and foreign stores, readiness, file modes. The web UI's
//! findings are in `web_security.rs`, the Kubernetes ones in `kubernetes.rs`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, wait_for};

/// A step that prints its whole environment, one variable per line.
const SHOW_ENV: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: show-env}
spec:
  steps:
    - name: env
      run: env
      env:
        DECLARED: "by the step"
"#;

fn submit(server: &Server, token: &str, source: &str) -> String {
    let a = server.call(
        "POST",
        "/api/v1/runs",
        Some(token),
        Some(&json!({"source": source, "path": "p.yaml"})),
    );
    assert_eq!(a.status, 201, "submit: {}", a.text());
    a.json()["id"].as_str().expect("an id").to_owned()
}

fn state_of(server: &Server, token: &str, id: &str) -> String {
    let a = server.call("GET", &format!("/api/v1/runs/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "status: {}", a.text());
    a.json()["state"].as_str().unwrap_or_default().to_owned()
}

fn wait_ended(server: &Server, token: &str, id: &str) -> String {
    let mut last = String::new();
    wait_for(&format!("run {id} to end"), || {
        last = state_of(server, token, id);
        last != "Running"
    });
    last
}

/// The variable names a step's log shows (`NAME=...` lines of `env`).
fn names_in(log: &str) -> Vec<String> {
    // Each line is `TIME STREAM TEXT`.
    log.lines()
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .filter_map(|l| l.split_once('='))
        .map(|(n, _)| n.to_owned())
        .collect()
}

/// The probe's step printed `SLUICE_STATE=postgres://sluice:PASSWORD@...`, `SLUICE_TOKEN` and
/// `AWS_*`: the server's own variables. A step gets what the step, its Cluster and the
/// runtime contract give, and nothing else of the server's.
#[test]
fn a_step_gets_a_clean_environment_not_the_servers() {
    let sb = Sandbox::new("sec-env");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let secrets = [
        ("SLUICE_TOKEN", "sluice_server_own_token_do_not_leak"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-do-not-leak"),
        ("AWS_ACCESS_KEY_ID", "AKIADONOTLEAK"),
        ("DATABASE_URL", "postgres://sluice:PASSWORD@db/sluice"),
        ("SOME_OPERATOR_SECRET", "operator-secret-do-not-leak"),
    ];
    let server = Server::start_with(&sb, &[], &secrets);
    server.wait_ready();
    let id = submit(&server, &member, SHOW_ENV);
    assert_eq!(wait_ended(&server, &member, &id), "Succeeded");
    let log = server.call(
        "GET",
        &format!("/api/v1/runs/{id}/logs?step=env"),
        Some(&member),
        None,
    );
    assert_eq!(log.status, 200, "{}", log.text());
    let log = log.text();
    let names = names_in(&log);
    for (name, value) in secrets {
        assert!(!log.contains(value), "the step saw {name}'s value:\n{log}");
        assert!(
            !names.contains(&name.to_owned()),
            "the step got {name}:\n{log}"
        );
    }
    // With PostgreSQL state, the server has SLUICE_STATE (and its password) in its own
    // environment: not the step's.
    for leaked in ["SLUICE_STATE", "SLUICE_HOME", "SLUICE_SERVER"] {
        assert!(
            !names.contains(&leaked.to_owned()),
            "the step got {leaked}:\n{log}"
        );
    }
    if let Some(url) = &sb.state {
        assert!(!log.contains(url.as_str()), "the step saw the store's URL");
    }
    // What the contract gives, what the step declared, and what a program needs.
    for given in [
        "SLUICE_RUN_ID",
        "SLUICE_STEP",
        "SLUICE_OUTPUT_DIR",
        "DECLARED",
        "PATH",
        "HOME",
    ] {
        assert!(names.contains(&given.to_owned()), "no {given}:\n{log}");
    }
}

/// The Cluster's `runtime.passEnv` names what else of a server's environment steps get:
/// names, and prefixes ending in `*`; nothing beyond them. An embedded `sluice run`, on the
/// user's own machine and for the user, passes the user's environment on, but for the
/// engine's own secrets.
#[test]
fn pass_env_adds_only_the_names_it_lists() {
    let sb = Sandbox::new("sec-passenv");
    let cluster = sb.write(
        "cluster.yaml",
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: here}
spec:
  pools:
    - {name: local, nodes: 1, resources: {cpu: 4, memory: 8Gi}}
  runtime:
    passEnv: [HF_HOME, WANDB_*]
"#,
    );
    let (_, member) = token(&sb, "teama", "member", &[]);
    let vars = [
        ("HF_HOME", "/data/hf"),
        ("WANDB_PROJECT", "sluice"),
        ("WANDBX", "not a match"),
        ("NOT_LISTED", "kept out"),
    ];
    let server = Server::start_with(&sb, &["--cluster", cluster.to_str().expect("utf-8")], &vars);
    server.wait_ready();
    let id = submit(&server, &member, SHOW_ENV);
    assert_eq!(wait_ended(&server, &member, &id), "Succeeded");
    let log = server
        .call(
            "GET",
            &format!("/api/v1/runs/{id}/logs?step=env"),
            Some(&member),
            None,
        )
        .text();
    let names = names_in(&log);
    assert!(log.contains("HF_HOME=/data/hf"), "{log}");
    assert!(log.contains("WANDB_PROJECT=sluice"), "{log}");
    for absent in ["WANDBX", "NOT_LISTED"] {
        assert!(
            !names.contains(&absent.to_owned()),
            "{absent} passed:\n{log}"
        );
    }
    drop(server);

    // Embedded: the user's variables, not the engine's secrets.
    let file = sb.write("p.yaml", SHOW_ENV);
    let out = sb
        .cmd(&["run", file.to_str().expect("utf-8")])
        .env("NOT_LISTED", "the user's own")
        .env("SLUICE_TOKEN", "sluice_not_for_steps")
        .output()
        .expect("sluice run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let logs = sb.run(&["logs", "@latest", "env"]);
    let names = names_in(&logs.stdout);
    assert!(
        logs.stdout.contains("NOT_LISTED=the user's own"),
        "{}",
        logs.stdout
    );
    for hidden in ["SLUICE_TOKEN", "SLUICE_STATE"] {
        assert!(
            !names.contains(&hidden.to_owned()),
            "{hidden}:\n{}",
            logs.stdout
        );
    }

    // A name that is not a variable's is refused at its line.
    let bad = sb.write(
        "bad-cluster.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: here}\nspec:\n  runtime:\n    passEnv: [\"A-B\", \"*X\"]\n",
    );
    let out = sb.run(&["lint", bad.to_str().expect("utf-8")]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("6:15: error: runtime.passEnv: 'A-B' is not a variable name"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("'*X' is not a variable name"),
        "{}",
        out.stderr
    );
}

/// A tmpfs of its own, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None when this process may not mount (not root): the caller says so and stops.
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_owned()))
    }

    /// Writes a file until the file system is full; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

const QUICK: &str = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: quick}\nspec:\n  steps:\n    - name: a\n      run: echo hi\n";

/// With the home on a full disk, the first errors were clear, but after space was freed
/// submissions kept failing (`begin_with at non-zero transaction depth`) until a restart, and
/// `/readyz` said ready throughout. Now `/readyz` says the store cannot take a write while
/// the disk is full, and once space returns every submission is recorded and runs, without
/// a restart.
#[test]
fn a_full_disk_heals_once_space_returns() {
    let sb = Sandbox::new("sec-disk");
    if sb.state.is_some() {
        // The finding is SQLite's: its store lies on the full disk.
        return;
    }
    let Some(disk) = Tmpfs::mount(&sb.home(), "6m") else {
        panic!("this test mounts a tmpfs (as root, as CI runs): cannot mount here");
    };
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let filler = disk.fill();
    let mut refused = 0;
    for _ in 0..20 {
        let a = server.call(
            "POST",
            "/api/v1/runs",
            Some(&member),
            Some(&json!({"source": QUICK, "path": "p.yaml"})),
        );
        assert!(
            a.status == 201 || a.status == 503,
            "a full disk is 503: {} {}",
            a.status,
            a.text()
        );
        if a.status == 503 {
            refused += 1;
        }
    }
    assert!(refused > 0, "a full disk refused no submission");
    // Past the second a readiness answer stands for.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let ready = server.call("GET", "/readyz", None, None);
    assert_eq!(ready.status, 503, "ready on a full disk: {}", ready.text());
    assert!(
        ready.text().contains("cannot take a write"),
        "{}",
        ready.text()
    );

    std::fs::remove_file(&filler).expect("space returns");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let ready = server.call("GET", "/readyz", None, None);
    assert_eq!(
        ready.status,
        200,
        "not ready once space returned: {}",
        ready.text()
    );
    let mut ids = Vec::new();
    for i in 0..30 {
        let a = server.call(
            "POST",
            "/api/v1/runs",
            Some(&member),
            Some(&json!({"source": QUICK, "path": "p.yaml"})),
        );
        assert_eq!(
            a.status,
            201,
            "submission {i} after space returned: {}",
            a.text()
        );
        ids.push(a.json()["id"].as_str().expect("an id").to_owned());
    }
    for id in &ids {
        assert_eq!(wait_ended(&server, &member, id), "Succeeded", "run {id}");
    }
    drop(server);
}

/// A home whose SQLite file is `text` (None: copied from a home with a run, then damaged).
fn home_holding(tag: &str, text: Option<&[u8]>) -> Sandbox {
    let sb = Sandbox::new(tag);
    std::fs::create_dir_all(sb.home()).expect("home");
    let db = sb.home().join("sluice.db");
    match text {
        Some(bytes) => std::fs::write(&db, bytes).expect("write the store"),
        None => {
            let file = sb.write("q.yaml", QUICK);
            let out = sb.run(&["run", file.to_str().expect("utf-8")]);
            assert_eq!(out.code, Some(0), "{}", out.stderr);
            // Its write-ahead log folded in first, so that what is damaged is the whole store
            // (a log left over would be replayed over the damage when the file is opened).
            let folded = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.execute('PRAGMA journal_mode=DELETE'); c.close()",
                ])
                .arg(&db)
                .status()
                .expect("python3");
            assert!(folded.success());
            // Every page but the first (the header) overwritten, as the probe did.
            let len = std::fs::metadata(&db).expect("the store").len();
            let mut bytes = std::fs::read(&db).expect("read");
            for b in bytes.iter_mut().skip(4096) {
                *b = 0xa5;
            }
            assert!(len > 4096, "the store has more than one page");
            std::fs::write(&db, bytes).expect("damage it");
        }
    }
    sb
}

/// Pages of `sluice.db` overwritten: the server started and `/readyz` answered 200 while
/// every request failed. An empty (0-byte) `sluice.db` started silently as a new store. Each
/// is refused at start now, with the way out; so is a file that is not SQLite, and another
/// program's SQLite database.
#[test]
fn a_damaged_empty_or_foreign_store_is_refused_at_start() {
    if sluice_e2e::postgres::wanted() {
        return; // SQLite's files.
    }
    let foreign = {
        let sb = Sandbox::new("sec-foreign-sqlite");
        std::fs::create_dir_all(sb.home()).expect("home");
        let db = sb.home().join("sluice.db");
        let made = std::process::Command::new("python3")
            .args([
                "-c",
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table invoices(id)'); c.commit()",
            ])
            .arg(&db)
            .status()
            .expect("python3");
        assert!(made.success());
        sb
    };
    let cases: Vec<(Sandbox, &str)> = vec![
        (home_holding("sec-damaged", None), "is damaged"),
        (home_holding("sec-empty", Some(b"")), "is empty (0 bytes)"),
        (
            home_holding(
                "sec-not-sqlite",
                Some(b"these are not the pages of a database\n"),
            ),
            "is not a SQLite database",
        ),
        (
            foreign,
            "a SQLite database of another program (its tables: invoices)",
        ),
    ];
    for (sb, says) in cases {
        let before = std::fs::read(sb.home().join("sluice.db")).expect("the store");
        let mut child = sb
            .cmd(&["server", "--listen", "127.0.0.1:0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sluice server");
        let status = sluice_e2e::wait::status(&mut child, "sluice server on a bad store");
        let mut stderr = String::new();
        use std::io::Read;
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        assert_eq!(status.code(), Some(3), "{says}: {stderr}");
        assert!(stderr.contains(says), "{says}: {stderr}");
        assert!(
            stderr.contains("move it away") || stderr.contains("move this file away"),
            "the way out: {stderr}"
        );
        let after = std::fs::read(sb.home().join("sluice.db")).expect("the store");
        assert!(before == after, "{says}: the refused file was changed");
    }
}

/// `sluice.db` and its WAL were created world-readable (0644). The home is its owner's only,
/// and so are the store's files; an older home's files are made private when a server
/// starts on it.
#[test]
fn state_files_are_their_owners_only() {
    if sluice_e2e::postgres::wanted() {
        return;
    }
    let sb = Sandbox::new("sec-modes");
    let file = sb.write("q.yaml", QUICK);
    let out = sb.run(&["run", file.to_str().expect("utf-8")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mode = |p: &Path| {
        std::fs::metadata(p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&sb.home()), 0o700, "the home");
    for f in ["sluice.db", "sluice.db-wal", "sluice.db-shm"] {
        let p = sb.home().join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{f}");
        }
    }
    // A home made by an earlier version: its files readable by all until a server starts.
    let db = sb.home().join("sluice.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    assert_eq!(mode(&db), 0o600, "sluice.db once a server started");
    for f in ["sluice.db-wal", "sluice.db-shm"] {
        let p = sb.home().join(f);
        if p.exists() {
            assert_eq!(mode(&p), 0o600, "{f}");
        }
    }
}

/// 52 KB of merge keys (a mapping of 4,000 keys merged 250 times) cost 13 s of CPU on the
/// server's async workers before being refused, and three of them made `/healthz` wait 27.8 s.
/// Now the merges cost what they copy, and validation runs off the async workers: the files
/// are refused with their diagnostics, and `/healthz` answers while they are read.
#[test]
fn a_file_of_merge_keys_stalls_no_one() {
    let sb = Sandbox::new("sec-merge");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let keys: Vec<String> = (0..4000).map(|i| format!("k{i}: {i}")).collect();
    let mut bomb = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: bomb}}\nx: &m {{{}}}\nspec:\n  steps:\n    - name: a\n      run: 'true'\ny:\n",
        keys.join(", ")
    );
    for _ in 0..250 {
        bomb.push_str("  - {<<: *m}\n");
    }
    assert!(bomb.len() > 50_000, "{} bytes", bomb.len());
    let (done_tx, done) = std::sync::mpsc::channel();
    let mut senders = Vec::new();
    for i in 0..3 {
        let (addr, token, body, tx) = (
            server.addr.clone(),
            member.clone(),
            bomb.clone(),
            done_tx.clone(),
        );
        senders.push(std::thread::spawn(move || {
            let body = json!({"source": body, "path": format!("bomb{i}.yaml")}).to_string();
            let a = sluice_e2e::http::request(
                &addr,
                "POST",
                "/api/v1/runs",
                Some(&token),
                Some(body.as_bytes()),
            )
            .expect("an answer");
            let _ = tx.send(format!("bomb {i}"));
            a
        }));
    }
    // Once the files are being read, a health check goes through before they are done.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let health = server.call("GET", "/healthz", None, None);
    assert_eq!(health.status, 200);
    let _ = done_tx.send("healthz".to_owned());
    let first = done.recv().expect("an answer");
    assert_eq!(
        first, "healthz",
        "a health check waited for the files of merge keys"
    );
    for s in senders {
        let a = s.join().expect("the sender");
        assert_eq!(a.status, 400, "{}", a.text());
        let errors = a.json()["error"]["rendered"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            errors
                .iter()
                .any(|e| e.as_str().is_some_and(|e| e.contains("unknown field 'x'"))),
            "{}",
            a.text()
        );
    }
}

/// The series of a metric family in `/metrics`' text.
fn series(server: &Server, family: &str) -> Vec<String> {
    let m = server.call("GET", "/metrics", None, None);
    assert_eq!(m.status, 200);
    m.text()
        .lines()
        .filter(|l| l.starts_with(family))
        .map(str::to_owned)
        .collect()
}

/// `sluice_api_requests_total{method=...}` took the raw HTTP method: 2,000 random methods to
/// `/healthz`, without a token, added 2,000 series, and 60 KB methods grew `/metrics` by
/// megabytes. Methods are a fixed set of labels now.
#[test]
fn metrics_labels_stay_bounded_whatever_the_client_sends() {
    use std::io::{Read, Write};
    let sb = Sandbox::new("sec-metrics");
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let long = "M".repeat(60_000);
    for i in 0..200 {
        let method = if i % 10 == 0 {
            long.clone()
        } else {
            format!("RANDOM{i}")
        };
        let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        let _ = write!(
            s,
            "{method} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    let lines = series(&server, "sluice_api_requests_total{");
    let methods: std::collections::BTreeSet<String> = lines
        .iter()
        .filter_map(|l| l.split("method=\"").nth(1))
        .filter_map(|r| r.split('"').next())
        .map(str::to_owned)
        .collect();
    for m in &methods {
        assert!(
            [
                "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"
            ]
            .contains(&m.as_str()),
            "method label {m:?}"
        );
    }
    assert!(lines.len() < 20, "{} series: {lines:?}", lines.len());
    let size = server.call("GET", "/metrics", None, None).body.len();
    assert!(size < 64 * 1024, "/metrics is {size} bytes");
}

/// A half-open request stayed open past 100 s; with 1,024 descriptors, 1,100 of them stopped
/// `/healthz`, `/readyz` and submissions. A connection that does not send its request's head
/// within the header timeout is closed; past the connection cap new ones wait in the
/// backlog instead of taking descriptors; and once the idle ones are closed, the server
/// answers again.
#[test]
fn half_open_requests_are_closed_and_capped() {
    use std::io::{Read, Write};
    let sb = Sandbox::new("sec-slow");
    let server = Server::start(&sb, &["--header-timeout", "2s", "--max-connections", "40"]);
    server.wait_ready();
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let before = fds(server.pid());
    let mut open = Vec::new();
    for _ in 0..120 {
        let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
        open.push(s);
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = fds(server.pid());
    assert!(
        during <= before + 40 + 8,
        "{during} descriptors open with 120 half-open requests (cap 40, {before} before)"
    );
    // The server closes each of them, the first within the header timeout.
    let mut closed = 0;
    for s in &mut open {
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        // Closed: end of stream, or reset; a read that times out is a connection still open.
        let gone = match s.read(&mut buf) {
            Ok(n) => n == 0,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        if gone {
            closed += 1;
        }
    }
    assert_eq!(closed, open.len(), "every half-open request was closed");
    drop(open);
    let health = server.call("GET", "/healthz", None, None);
    assert_eq!(health.status, 200);
}

/// A `Content-Length` of 10 GB was waited on for 30 s: it is refused at once (413).
#[test]
fn a_declared_body_past_the_limit_is_413_at_once() {
    use std::io::{Read, Write};
    let sb = Sandbox::new("sec-413");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let mut s = std::net::TcpStream::connect(&server.addr).expect("connect");
    // The answer comes without a byte of the body sent: a server waiting for it would let
    // the read time out.
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    write!(
        s,
        "POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {member}\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n"
    )
    .expect("send the head");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("too_large"), "{text}");
}

/// Failed authentications are limited per address: past the limit, 429 with `Retry-After`
/// before the token is looked up, a valid token included, until the minute is over.
#[test]
fn failed_authentications_are_limited_per_address() {
    let sb = Sandbox::new("sec-authfail");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &["--auth-failures", "5"]);
    server.wait_ready();
    for i in 0..5 {
        let a = server.call("GET", "/api/v1/runs", Some("sluice_guess"), None);
        assert_eq!(a.status, 401, "guess {i}: {}", a.text());
    }
    let a = server.call("GET", "/api/v1/runs", Some("sluice_guess"), None);
    assert_eq!(a.status, 429, "{}", a.text());
    assert!(
        a.header("retry-after")
            .is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n >= 1))
    );
    assert!(
        a.text()
            .contains("failed authentications from this address"),
        "{}",
        a.text()
    );
    let a = server.call("GET", "/api/v1/runs", Some(&member), None);
    assert_eq!(
        a.status, 429,
        "a blocked address is refused before any lookup"
    );
}

/// `Authorization: bearer` (lower case) was refused though the scheme is case-insensitive.
#[test]
fn the_bearer_scheme_is_read_in_any_case() {
    let sb = Sandbox::new("sec-bearer");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let a = sluice_e2e::http::request_with(
            &server.addr,
            "GET",
            "/api/v1/whoami",
            &[("Authorization", &format!("{scheme} {member}"))],
            None,
        )
        .expect("an answer");
        assert_eq!(a.status, 200, "{scheme}: {}", a.text());
    }
}

/// `token create --team teama --role admin` was a global admin: it read team B's runs,
/// listed every team's and minted a `*` admin. An admin of one team is that team's only; an
/// admin of `*` still sees and manages every team.
#[test]
fn a_team_admin_is_its_team_s_and_a_star_admin_every_team_s() {
    let sb = Sandbox::new("sec-admin");
    let (_, a_admin) = token(&sb, "teama", "admin", &[]);
    let (_, a_member) = token(&sb, "teama", "member", &[]);
    let (b_token_id, b_member) = token(&sb, "teamb", "member", &[]);
    let (_, root) = token(&sb, "*", "admin", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let b_run = submit(&server, &b_member, QUICK);
    let a_run = submit(&server, &a_member, QUICK);

    // Team A's admin: team A's runs, not team B's.
    let a = server.call(
        "GET",
        &format!("/api/v1/runs/{b_run}"),
        Some(&a_admin),
        None,
    );
    assert_eq!(a.status, 404, "{}", a.text());
    let a = server.call(
        "GET",
        &format!("/api/v1/runs/{a_run}"),
        Some(&a_admin),
        None,
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let listed = server.call("GET", "/api/v1/runs?limit=0", Some(&a_admin), None);
    let ids: Vec<String> = listed
        .json()
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    assert!(ids.contains(&a_run) && !ids.contains(&b_run), "{ids:?}");
    // Its team's tokens only; no `*` admin, no token of team B.
    let tokens = server.call("GET", "/api/v1/tokens", Some(&a_admin), None);
    assert_eq!(tokens.status, 200, "{}", tokens.text());
    assert!(!tokens.text().contains(&b_token_id), "{}", tokens.text());
    assert!(!tokens.text().contains("\"*\""), "{}", tokens.text());
    for (team, role) in [("*", "admin"), ("teamb", "member"), ("teamb", "admin")] {
        let a = server.call(
            "POST",
            "/api/v1/tokens",
            Some(&a_admin),
            Some(&json!({"team": team, "role": role})),
        );
        assert_eq!(a.status, 403, "{team} {role}: {}", a.text());
    }
    let a = server.call(
        "POST",
        "/api/v1/tokens",
        Some(&a_admin),
        Some(&json!({"team": "teama", "role": "viewer"})),
    );
    assert_eq!(a.status, 201, "{}", a.text());
    let a = server.call(
        "DELETE",
        &format!("/api/v1/tokens/{b_token_id}"),
        Some(&a_admin),
        None,
    );
    assert_eq!(
        a.status,
        404,
        "another team's token does not exist for it: {}",
        a.text()
    );
    let who = server.call("GET", "/api/v1/whoami", Some(&b_member), None);
    assert_eq!(who.status, 200, "team B's token still works");
    let audit = server.call("GET", "/api/v1/audit", Some(&a_admin), None);
    assert_eq!(audit.status, 200, "{}", audit.text());
    assert!(
        !audit.text().contains(&b_run),
        "team B's audit record: {}",
        audit.text()
    );

    // The `*` admin: every team's.
    let a = server.call("GET", &format!("/api/v1/runs/{b_run}"), Some(&root), None);
    assert_eq!(a.status, 200, "{}", a.text());
    let tokens = server.call("GET", "/api/v1/tokens", Some(&root), None);
    assert!(tokens.text().contains(&b_token_id), "{}", tokens.text());
    let a = server.call(
        "POST",
        "/api/v1/tokens",
        Some(&root),
        Some(&json!({"team": "teamb", "role": "admin"})),
    );
    assert_eq!(a.status, 201, "{}", a.text());
}

/// A token's team was not validated (`"team": "../../../tmp/x"` was accepted and reached
/// paths, labels and pages). It follows the naming rule of teams everywhere.
#[test]
fn a_token_s_team_is_a_team_name() {
    let sb = Sandbox::new("sec-teamname");
    let (_, root) = token(&sb, "*", "admin", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    for team in ["../../../tmp/x", "Team A", "a/b", "", "-x"] {
        let a = server.call(
            "POST",
            "/api/v1/tokens",
            Some(&root),
            Some(&json!({"team": team, "role": "member"})),
        );
        assert_eq!(a.status, 400, "{team:?}: {}", a.text());
    }
    let out = sb.run(&[
        "token",
        "create",
        "--team",
        "../../../tmp/x",
        "--role",
        "member",
    ]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is not a team name"), "{}", out.stderr);
    let a = server.call("GET", "/api/v1/runs?team=../x", Some(&root), None);
    assert_eq!(a.status, 400, "{}", a.text());
}

/// A TCP proxy in front of a server that answers nothing to the first connection: it passes
/// the request on, waits for the server's answer to begin, then closes, as a server killed
/// right after its commit does. Later connections pass both ways.
struct LossyProxy {
    addr: String,
    dropped: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl LossyProxy {
    fn start(server: &str) -> LossyProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let dropped = std::sync::Arc::new(AtomicUsize::new(0));
        let count = dropped.clone();
        let server = server.to_owned();
        std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                let Ok(mut client) = client else { continue };
                let Ok(mut upstream) = std::net::TcpStream::connect(&server) else {
                    continue;
                };
                let (mut c2, mut u2) = (
                    client.try_clone().expect("clone"),
                    upstream.try_clone().expect("clone"),
                );
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut u2);
                });
                if n == 0 {
                    // The answer is lost: the server has recorded what it answers for.
                    let mut first = [0u8; 1];
                    let _ = upstream.read(&mut first);
                    let _ = client.shutdown(std::net::Shutdown::Both);
                    let _ = upstream.shutdown(std::net::Shutdown::Both);
                    count.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut upstream, &mut client);
                    let _ = client.flush();
                });
            }
        });
        LossyProxy { addr, dropped }
    }
}

/// After a server kill, 5 of 19 submissions whose answer was lost had been recorded: a
/// client that retried made a second run. A submission's `Idempotency-Key` is recorded with
/// its run; the same request with the same key is answered with that run (200,
/// `Idempotent-Replayed`), another request with it is refused, and the CLI sends a key of
/// its own and retries with it when an answer is lost.
#[test]
fn a_retried_submission_makes_one_run() {
    let sb = Sandbox::new("sec-idem");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let body = json!({"source": QUICK, "path": "q.yaml"}).to_string();
    let post = |key: &str, body: &str| {
        sluice_e2e::http::request_with(
            &server.addr,
            "POST",
            "/api/v1/runs",
            &[
                ("Authorization", &format!("Bearer {member}")),
                ("Content-Type", "application/json"),
                ("Idempotency-Key", key),
            ],
            Some(body.as_bytes()),
        )
        .expect("an answer")
    };
    let first = post("key-1", &body);
    assert_eq!(first.status, 201, "{}", first.text());
    let again = post("key-1", &body);
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first.json()["id"]);
    let other = json!({"source": QUICK, "path": "other.yaml"}).to_string();
    let reused = post("key-1", &other);
    assert_eq!(reused.status, 409, "{}", reused.text());
    let bad = post("", &body);
    assert_eq!(bad.status, 400, "{}", bad.text());
    let runs = server.call("GET", "/api/v1/runs?limit=0", Some(&member), None);
    assert_eq!(
        runs.json().as_array().map(Vec::len),
        Some(1),
        "{}",
        runs.text()
    );

    // The CLI through a proxy that loses the first answer.
    let proxy = LossyProxy::start(&server.addr);
    let file = sb.write(
        "cli.yaml",
        &QUICK.replace("name: quick", "name: through-proxy"),
    );
    let mut cmd = sluice_e2e::sluice();
    cmd.args([
        "run",
        file.to_str().expect("utf-8"),
        "--detach",
        "--output",
        "json",
    ])
    .current_dir(sb.path())
    .env("SLUICE_SERVER", format!("http://{}", proxy.addr))
    .env("SLUICE_TOKEN", &member)
    .env("SLUICE_HOME", sb.path().join("client-home"));
    let out = sluice_e2e::ran(sluice_e2e::wait::output(&mut cmd));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        proxy.dropped.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the first answer was lost"
    );
    let id: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    let runs = server.call(
        "GET",
        "/api/v1/runs?limit=0&pipeline=through-proxy",
        Some(&member),
        None,
    );
    let listed = runs.json();
    let listed = listed.as_array().cloned().unwrap_or_default();
    assert_eq!(
        listed.len(),
        1,
        "one run for one submission: {}",
        runs.text()
    );
    assert_eq!(listed[0]["id"], id["id"]);
}

/// API-submitted runs without a `workdir` ran inside the server's home, beside `sluice.db`
/// of every team. Each gets a folder of its own.
#[test]
fn an_api_run_without_a_workdir_runs_in_its_own_folder() {
    let sb = Sandbox::new("sec-workdir");
    let (_, member) = token(&sb, "teama", "member", &[]);
    let server = Server::start(&sb, &[]);
    server.wait_ready();
    let source = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: where}\nspec:\n  steps:\n    - name: here\n      run: 'pwd; ls -a'\n";
    let mut folders = Vec::new();
    for _ in 0..2 {
        let id = submit(&server, &member, source);
        assert_eq!(wait_ended(&server, &member, &id), "Succeeded");
        let log = server.call(
            "GET",
            &format!("/api/v1/runs/{id}/logs?step=here"),
            Some(&member),
            None,
        );
        let lines: Vec<String> = log
            .text()
            .lines()
            .filter_map(|l| l.splitn(3, ' ').nth(2))
            .map(str::to_owned)
            .collect();
        let pwd = PathBuf::from(lines.first().expect("pwd"));
        let home = sb.home().canonicalize().expect("home");
        assert_ne!(pwd, home, "the run ran in the server's home");
        assert!(
            pwd.starts_with(&home) && pwd.ends_with("workdir"),
            "{}",
            pwd.display()
        );
        assert!(
            !lines.iter().any(|l| l.starts_with("sluice.db")),
            "{lines:?}"
        );
        folders.push(pwd);
    }
    assert_ne!(folders[0], folders[1], "each run its own folder");
}
