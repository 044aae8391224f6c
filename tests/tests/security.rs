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

/// The Cluster's `runtime.passEnv` names what else of the engine's environment steps get:
/// names, and prefixes ending in `*`; nothing beyond them.
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
    let file = sb.write("p.yaml", SHOW_ENV);
    let out = sb
        .cmd(&[
            "run",
            file.to_str().expect("utf-8"),
            "--cluster",
            cluster.to_str().expect("utf-8"),
        ])
        .env("HF_HOME", "/data/hf")
        .env("WANDB_PROJECT", "sluice")
        .env("WANDBX", "not a match")
        .env("NOT_LISTED", "kept out")
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
    assert!(logs.stdout.contains("HF_HOME=/data/hf"), "{}", logs.stdout);
    assert!(
        logs.stdout.contains("WANDB_PROJECT=sluice"),
        "{}",
        logs.stdout
    );
    for absent in ["WANDBX", "NOT_LISTED"] {
        assert!(
            !names.contains(&absent.to_owned()),
            "{absent} passed:\n{}",
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
