//! Helpers for end-to-end tests: find the real binaries, run them in a throwaway directory.
//!
//! The binaries are found in the target directory beside the test executable (as ripgrep's
//! tests do), so `cargo build --workspace` must run before the tests; `.ci/run` and the
//! README's test command do.

pub mod browser;
pub mod crashy;
pub mod http;
pub mod kube;
pub mod postgres;
pub mod s3;
pub mod schemathesis;
pub mod server;
pub mod site;
pub mod wait;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace's root folder.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The path of a binary of this workspace (`sluice`, `sluice-runtime`).
///
/// Panics with instructions when it has not been built: a test without its binary cannot say
/// anything true.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    // target/debug/deps/test-hash -> target/debug
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/PROFILE/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests",
        path.display()
    );
    path
}

/// A command for `sluice` with a clean environment for logs.
pub fn sluice() -> Command {
    let mut cmd = Command::new(bin("sluice"));
    cmd.env_remove("RUST_LOG");
    cmd
}

/// Output of a finished command, as text.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn ran(out: Output) -> Ran {
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `sluice ARGS` in `dir` (failing the test if it hangs, see [`wait`]).
pub fn run_in(dir: &Path, args: &[&str]) -> Ran {
    ran(wait::output(sluice().args(args).current_dir(dir)))
}

/// A fresh temporary folder, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let base = std::env::temp_dir().join(format!(
            "sluice-test-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(&base).expect("temp dir");
        TempDir(base)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&p, text).expect("write file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sandbox with its own `SLUICE_HOME`, for commands that run pipelines.
pub struct Sandbox {
    pub dir: TempDir,
    /// The state store's URL when the sandbox keeps state in PostgreSQL (a database of its
    /// own, with `SLUICE_TEST_STATE=postgres`); None: SQLite in the home.
    pub state: Option<String>,
}

impl Sandbox {
    pub fn new(tag: &str) -> Self {
        let state = postgres::wanted().then(|| {
            postgres::database(tag).unwrap_or_else(|e| panic!("SLUICE_TEST_STATE=postgres: {e}"))
        });
        Sandbox {
            dir: TempDir::new(tag),
            state,
        }
    }

    /// The environment every `sluice` of this sandbox runs with: its home, and its state
    /// store when that is not the home's SQLite (for commands a test builds itself).
    pub fn envs(&self) -> Vec<(&'static str, std::ffi::OsString)> {
        let mut envs = vec![("SLUICE_HOME", self.home().into_os_string())];
        if let Some(url) = &self.state {
            envs.push(("SLUICE_STATE", url.into()));
        }
        envs
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        self.dir.write(name, text)
    }

    /// `sluice ARGS` in the sandbox, with its home.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = sluice();
        cmd.args(args).current_dir(self.path()).envs(self.envs());
        cmd
    }

    /// `sluice ARGS` started in the background, its output discarded (an engine the test
    /// watches through files, kills or waits for).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        self.spawn_with(args, &[])
    }

    /// [`Sandbox::spawn`] with more environment variables.
    pub fn spawn_with(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        self.cmd(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("sluice starts")
    }

    pub fn run(&self, args: &[&str]) -> Ran {
        ran(wait::output(&mut self.cmd(args)))
    }

    /// `status RUN --output json`, parsed.
    pub fn status(&self, run: &str) -> serde_json::Value {
        let out = self.run(&["status", run, "--output", "json"]);
        assert_eq!(out.code, Some(0), "status failed: {}", out.stderr);
        serde_json::from_str(&out.stdout).expect("status prints JSON")
    }

    /// The id of the newest run.
    pub fn last_run(&self) -> String {
        let out = self.run(&["runs", "--output", "json", "--limit", "1"]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("runs prints JSON");
        v[0]["id"].as_str().expect("a run exists").to_owned()
    }
}

/// Each step's state in a status document, by name.
pub fn step_states(status: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    status["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    (
                        s["name"].as_str().unwrap_or_default().to_owned(),
                        s["state"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits up to 60 s for `cond`, failing the test with `what` if it never holds.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends `sig` (`KILL`, `STOP`, `INT`...) to `pid` with kill(1), failing the test if it
/// cannot.
pub fn signal(pid: u32, sig: &str) {
    let out = wait::output(Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]));
    assert!(
        out.status.success(),
        "kill -{sig} {pid} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The runtime pid recorded in the lock of attempt `n` of `step` in `run`, once it started.
pub fn runtime_pid(home: &Path, run: &str, step: &str, n: u32) -> Option<u32> {
    let lock = home.join(format!("attempts/{run}/{step}.{n}/lock"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(lock).ok()?).ok()?;
    v["runtime_pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
}

/// Whether process `pid` still runs (a zombie waiting for its parent counts as ended).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `PID (COMM) STATE ...`: the state follows the last parenthesis.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'))
    })
}

/// The pids a file holds, one a line.
pub fn pids(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
