//! A real S3-compatible server for tests: moto's server on a free loopback port, with a
//! bucket made for the test.
//!
//! moto is found as `$SLUICE_MOTO_SERVER`, else `moto_server` on `PATH` (what `.ci/run`
//! installs), else installed once into `target/moto-venv` with python3's venv and pip
//! (`moto[server]` from PyPI, about 30 s). A test that needs S3 and cannot get it fails,
//! saying why: it never passes without having talked to the server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct S3 {
    child: Child,
    pub port: u16,
    pub bucket: String,
}

fn moto_server() -> PathBuf {
    if let Ok(p) = std::env::var("SLUICE_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    let out = crate::wait::output(Command::new("sh").args(["-c", "command -v moto_server"]));
    if out.status.success() {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    let venv = crate::root().join("target/moto-venv");
    let server = venv.join("bin/moto_server");
    if server.is_file() {
        return server;
    }
    // One installer at a time across test binaries: `mkdir` is atomic.
    let lock = crate::root().join("target/moto-venv.lock");
    let _ = std::fs::create_dir_all(crate::root().join("target"));
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::create_dir(&lock).is_err() {
        assert!(
            Instant::now() < deadline,
            "waited 300 s for another test installing moto"
        );
        std::thread::sleep(Duration::from_millis(500));
        if server.is_file() {
            return server;
        }
    }
    // Bounded like every other child, with room for a slow download.
    let install = |cmd: &mut Command| {
        let what = crate::wait::describe(cmd);
        cmd.spawn().is_ok_and(|mut child| {
            crate::wait::status_within(&mut child, Duration::from_secs(600), &what).success()
        })
    };
    let ok = install(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        && install(Command::new(venv.join("bin/pip")).args(["install", "-q", "moto[server]"]));
    let _ = std::fs::remove_dir(&lock);
    assert!(
        ok && server.is_file(),
        "no S3 server for the S3 tests: install moto (pip install 'moto[server]', as .ci/run does) \
         or set SLUICE_MOTO_SERVER"
    );
    server
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One HTTP request without a body; returns the status code.
fn request(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head)?;
    let text = String::from_utf8_lossy(&head);
    text.get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not HTTP: {text}")))
}

impl S3 {
    /// Starts a server and creates the bucket `bucket`.
    pub fn start(bucket: &str) -> S3 {
        let server = moto_server();
        let port = free_port();
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", server.display()));
        let s3 = S3 {
            child,
            port,
            bucket: bucket.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match request(port, "PUT", &format!("/{bucket}")) {
                Ok(200) => break,
                Ok(code) => panic!("moto answered {code} to creating bucket {bucket}"),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("moto did not come up on port {port}: {e}"),
            }
        }
        s3
    }

    /// The environment that points sluice (and object_store) at this server, as a user would
    /// write it for a local S3 server: an `http://` endpoint, and no `AWS_ALLOW_HTTP` (sluice
    /// takes the endpoint's scheme at its word).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// Whether an object exists in the bucket, from moto's own dump of its state (S3 requests
    /// need signing; moto's `/moto-api/data.json` does not).
    pub fn exists(&self, key: &str) -> bool {
        self.dump()
            .is_some_and(|body| body.contains(&format!("\"{key}\"")))
    }

    /// The keys of the objects stored under `prefix` now, from a (unsigned) ListObjectsV2
    /// request, which moto answers; unlike its dump, it does not show deleted objects. At most
    /// 1000 keys (the tests store far fewer). Fails the test when the server does not answer.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let body = self
            .get(&format!("/{}?list-type=2&prefix={prefix}", self.bucket))
            .expect("moto answers a list request");
        assert!(body.contains("<ListBucketResult"), "not a listing: {body}");
        body.split("<Key>")
            .skip(1)
            .filter_map(|k| k.split_once("</Key>").map(|(key, _)| key.to_owned()))
            .collect()
    }

    /// moto's dump of its state, or None when it cannot be read.
    fn dump(&self) -> Option<String> {
        self.get("/moto-api/data.json")
    }

    /// The whole response to `GET path` (head and body), or None when it cannot be read.
    fn get(&self, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    }

    /// Freezes the server (SIGSTOP): connections are accepted and never answered, as with a
    /// server that hangs. moto keeps its objects in memory, so it is frozen rather than
    /// stopped, to find them again after `resume`.
    pub fn pause(&self) {
        signal(self.child.id(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = crate::wait::output(Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]));
}

impl Drop for S3 {
    fn drop(&mut self) {
        signal(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
