//! A `sluice server` started for a test on a port of its own, with tokens made on its home.

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::Sandbox;

/// A running server; killed (SIGKILL) when dropped if still running.
pub struct Server {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Server {
    /// `sluice server --listen 127.0.0.1:0 ARGS` in the sandbox; waits until it listens.
    pub fn start(sb: &Sandbox, args: &[&str]) -> Server {
        Self::start_with(sb, args, &[])
    }

    pub fn start_with(sb: &Sandbox, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut all = vec!["server", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut child = sb
            .cmd(&all)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sluice server starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        // Its standard error is read to the end (so that it never blocks on a full pipe); the
        // line saying where it listens is sent back.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1)
                    && let Some(t) = tx.take()
                {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = t.send(addr);
                }
                if std::env::var_os("SLUICE_TEST_SERVER_LOG").is_some() {
                    eprintln!("server: {line}");
                }
            }
        });
        let addr = rx
            .recv_timeout(crate::wait::deadline())
            .expect("the server says where it listens");
        Server { child, addr }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        crate::wait::status(&mut self.child, "sluice server (killed)");
    }

    /// Waits until the server has exited, at most `limit`; its exit code.
    pub fn wait_within(&mut self, limit: Duration) -> Option<i32> {
        crate::wait::status_within(&mut self.child, limit, "sluice server").code()
    }

    /// `sluice ARGS` against this server with `token`.
    pub fn cli(&self, sb: &Sandbox, token: Option<&str>, args: &[&str]) -> crate::Ran {
        let mut cmd = crate::sluice();
        cmd.args(args)
            .current_dir(sb.path())
            .env("SLUICE_SERVER", self.url())
            // Not the sandbox's home: a client has none of the server's files.
            .env("SLUICE_HOME", sb.path().join("client-home"));
        match token {
            Some(t) => cmd.env("SLUICE_TOKEN", t),
            None => cmd.env_remove("SLUICE_TOKEN"),
        };
        crate::ran(crate::wait::output(&mut cmd))
    }

    /// A request to this server.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&serde_json::Value>,
    ) -> crate::http::Answer {
        let bytes = body.map(|b| b.to_string().into_bytes());
        crate::http::request(&self.addr, method, path, token, bytes.as_deref())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + crate::wait::deadline();
        loop {
            if crate::http::request(&self.addr, "GET", "/readyz", None, None)
                .is_ok_and(|a| a.status == 200)
            {
                return;
            }
            assert!(Instant::now() < deadline, "the server never became ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `sluice token create --team TEAM --role ROLE [EXTRA]` on the sandbox's home: (id, token).
pub fn token(sb: &Sandbox, team: &str, role: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "token", "create", "--team", team, "--role", role, "--output", "json",
    ];
    args.extend_from_slice(extra);
    let out = sb.run(&args);
    assert_eq!(out.code, Some(0), "token create: {}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("token create prints JSON");
    (
        v["id"].as_str().expect("an id").to_owned(),
        v["token"].as_str().expect("a token").to_owned(),
    )
}
