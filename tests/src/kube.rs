//! The fake Kubernetes cluster (`fake-kube`, see `src/bin/fake_kube/main.rs`) started for a
//! test, and its test-only controls.
//!
//! The API it serves is the real Kubernetes protocol under `/api/v1` and `/apis/batch/v1`;
//! the controls are under `/fake/...`:
//! `POST /fake/pods/{ns}/{name}/evict[?grace=S]`, `POST /fake/pods/{ns}/{name}/oom`,
//! `POST /fake/pods/{ns}/{name}/unschedulable?message=M`, `POST /fake/images/bad?name=I`,
//! `POST /fake/nodes` (a Node JSON body, or `?spec=NAME:gpu=8,...`),
//! `POST /fake/nodes/{name}/lose[?delete=true]`, `POST /fake/nodes/{name}/cordon`,
//! `GET /fake/calls`, `POST /fake/calls/reset`, `GET /fake/pods`, `GET /fake/jobs`; with
//! `--kueue-gpus N`,
//! `GET /fake/kueue` and `POST /fake/kueue/evict/{ns}/{name}`.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::{Answer, request};

/// A running `fake-kube`; stopped (SIGTERM, which kills its pods' processes, then SIGKILL)
/// when dropped.
pub struct FakeKube {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its `--work` folder; its standard error is `fake-kube.log` beside it.
    pub work: PathBuf,
}

/// `s` percent-encoded for a query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A pod pinned to `node` (none when "") running `sh -c SCRIPT` in image `busybox`, labelled
/// `app: fake-test`.
pub fn pod(name: &str, node: &str, script: &str) -> serde_json::Value {
    let mut spec = serde_json::json!({"restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", script]}]});
    if !node.is_empty() {
        spec["nodeName"] = serde_json::json!(node);
    }
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fake-test"}}, "spec": spec})
}

/// A pod's `status.phase` ("" when it has none).
pub fn phase(p: &serde_json::Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or_default()
}

impl FakeKube {
    /// `fake-kube --work WORK/cluster --node N... --image NAME=ROOT...`; waits until it
    /// listens.
    pub fn start(work: &Path, nodes: &[&str], images: &[(&str, &Path)]) -> FakeKube {
        Self::start_with(work, nodes, images, &[])
    }

    /// [`FakeKube::start`] with more arguments (`--history 5`, `--bookmark-ms 200`).
    pub fn start_with(
        work: &Path,
        nodes: &[&str],
        images: &[(&str, &Path)],
        extra: &[&str],
    ) -> FakeKube {
        let dir = work.join("cluster");
        std::fs::create_dir_all(&dir).expect("the fake's work folder");
        let log = std::fs::File::create(work.join("fake-kube.log")).expect("fake-kube.log");
        let mut cmd = Command::new(crate::bin("fake-kube"));
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--work")
            .arg(&dir);
        for n in nodes {
            cmd.args(["--node", n]);
        }
        for (name, root) in images {
            cmd.arg("--image").arg(format!("{name}={}", root.display()));
        }
        cmd.args(extra);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("fake-kube starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(crate::wait::deadline())
            .unwrap_or_else(|_| {
                let _ = child.kill();
                let err = std::fs::read_to_string(work.join("fake-kube.log")).unwrap_or_default();
                panic!("fake-kube did not say where it listens; its stderr:\n{err}")
            });
        let addr = line
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("fake-kube's first line is {line:?}"))
            .trim()
            .to_owned();
        FakeKube {
            child,
            addr,
            work: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig for the fake into `dir`: server, a user with token `fake`,
    /// current context with namespace `default`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: fake\n  user:\n    token: fake\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// `METHOD PATH` with an optional JSON body, failing the test if the fake cannot answer.
    pub fn call(&self, method: &str, path: &str, body: Option<&serde_json::Value>) -> Answer {
        let bytes = body.map(|b| b.to_string().into_bytes());
        request(&self.addr, method, path, None, bytes.as_deref())
            .unwrap_or_else(|e| panic!("fake-kube: {method} {path}: {e}"))
    }

    fn control(&self, path: &str) -> Answer {
        let a = self.call("POST", path, None);
        assert!(
            a.status < 300,
            "fake-kube: POST {path}: {} {}",
            a.status,
            a.text()
        );
        a
    }

    pub fn evict(&self, ns: &str, name: &str) -> Answer {
        self.control(&format!("/fake/pods/{ns}/{name}/evict"))
    }

    pub fn oom(&self, ns: &str, name: &str) -> Answer {
        self.control(&format!("/fake/pods/{ns}/{name}/oom"))
    }

    pub fn lose_node(&self, name: &str, delete: bool) -> Answer {
        self.control(&format!("/fake/nodes/{name}/lose?delete={delete}"))
    }

    pub fn bad_image(&self, image: &str) -> Answer {
        self.control(&format!("/fake/images/bad?name={}", encode(image)))
    }

    pub fn unschedulable(&self, ns: &str, name: &str, message: &str) -> Answer {
        self.control(&format!(
            "/fake/pods/{ns}/{name}/unschedulable?message={}",
            encode(message)
        ))
    }

    pub fn calls(&self) -> serde_json::Value {
        self.call("GET", "/fake/calls", None).json()
    }

    pub fn reset_calls(&self) {
        self.control("/fake/calls/reset");
    }

    /// The fake Kueue's ClusterQueue: `{gpus, used, admitted: [{namespace, name, gpus}],
    /// waiting: [...]}`.
    pub fn kueue(&self) -> serde_json::Value {
        self.call("GET", "/fake/kueue", None).json()
    }

    /// Kueue preempts admitted Job `name`: suspended again, its pods deleted.
    pub fn kueue_evict(&self, ns: &str, name: &str) -> Answer {
        self.control(&format!("/fake/kueue/evict/{ns}/{name}"))
    }

    /// Every Job there is now (not counted as an API call).
    pub fn jobs(&self) -> Vec<serde_json::Value> {
        let a = self.call("GET", "/fake/jobs", None);
        a.json().as_array().cloned().unwrap_or_default()
    }

    pub fn pods(&self) -> serde_json::Value {
        self.call("GET", "/fake/pods", None).json()
    }

    pub fn create_pod_json(&self, ns: &str, pod: &serde_json::Value) -> Answer {
        self.call("POST", &format!("/api/v1/namespaces/{ns}/pods"), Some(pod))
    }

    /// The pod as the API has it (`Null` when it is not there).
    pub fn pod(&self, ns: &str, name: &str) -> serde_json::Value {
        let a = self.call("GET", &format!("/api/v1/namespaces/{ns}/pods/{name}"), None);
        if a.status == 200 {
            a.json()
        } else {
            serde_json::Value::Null
        }
    }

    pub fn delete_pod(&self, ns: &str, name: &str, grace: Option<i64>) -> Answer {
        let q = grace
            .map(|g| format!("?gracePeriodSeconds={g}"))
            .unwrap_or_default();
        self.call(
            "DELETE",
            &format!("/api/v1/namespaces/{ns}/pods/{name}{q}"),
            None,
        )
    }

    /// Waits (up to the test deadline) until the pod as the API has it satisfies `cond`
    /// (`Null` when it is not there); returns it.
    pub fn wait_pod(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + crate::wait::deadline();
        loop {
            let p = self.pod(ns, name);
            if cond(&p) {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "pod {name}: timed out waiting for {what}: {p:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The reasons of the Events about pod `name`, oldest first.
    pub fn event_reasons(&self, ns: &str, name: &str) -> Vec<String> {
        let path = format!(
            "/api/v1/namespaces/{ns}/events?fieldSelector={}",
            encode(&format!(
                "involvedObject.name={name},involvedObject.kind=Pod"
            ))
        );
        let a = self.call("GET", &path, None);
        assert_eq!(a.status, 200, "{}", a.text());
        a.json()["items"]
            .as_array()
            .expect("an EventList")
            .iter()
            .map(|e| e["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The pid a pod wrote into file `file` of its home (`WORK/NS/POD`), once written.
    pub fn pid_in(&self, ns: &str, pod: &str, file: &str) -> u32 {
        let path = self.work.join(ns).join(pod).join(file);
        let mut pid = None;
        crate::wait_for(&path.display().to_string(), || {
            pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            pid.is_some()
        });
        pid.unwrap_or_default()
    }
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `VERB RESOURCE` pairs the Helm chart's Role and ClusterRole grant, read from the flow lists
/// (`resources: [...]`, `verbs: [...]`) of `charts/sluice/templates/rbac.yaml`.
pub fn chart_role() -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(crate::root().join("charts/sluice/templates/rbac.yaml"))
        .expect("the chart's rbac.yaml");
    let list = |line: &str, key: &str| -> Option<Vec<String>> {
        let inner = line
            .trim()
            .strip_prefix(key)?
            .trim()
            .strip_prefix('[')?
            .strip_suffix(']')?
            .to_owned();
        Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
    };
    let mut out = std::collections::BTreeSet::new();
    let mut resources = Vec::new();
    for line in text.lines() {
        if let Some(r) = list(line, "resources:") {
            resources = r;
        } else if let Some(verbs) = list(line, "verbs:") {
            for r in &resources {
                for v in &verbs {
                    out.insert(format!("{v} {r}"));
                }
            }
        }
    }
    out
}
