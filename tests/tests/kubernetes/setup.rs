//! One Kubernetes installation for a test: moto (S3), the fake cluster with its nodes, the
//! runtime image as a folder holding `sluice-runtime`, a Secret with the object store's
//! credentials, a Cluster file saying `executor: kubernetes`, and the server.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use sluice_e2e::kube::FakeKube;
use sluice_e2e::s3::S3;
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Ran, Sandbox, wait_for};

pub const NAMESPACE: &str = "default";
pub const RUNTIME_IMAGE: &str = "sluice.test/runtime:dev";

pub struct Cluster {
    pub server: Server,
    pub kube: FakeKube,
    pub s3: S3,
    pub token: String,
    pub sb: Sandbox,
    env: Vec<(String, String)>,
    cluster: PathBuf,
}

/// The Cluster file: one pool `gpu` of `pool` nodes with 4 GPUs each (the fake's nodes
/// labelled `pool=gpu`; `pool` 0: the nodes and their resources read from the cluster), team
/// `vision`, short timeouts; `extra` is appended to its spec; `admission` is its
/// `kubernetes.admission`.
fn cluster_yaml(objects: &str, pool: usize, extra: &str, admission: &str) -> String {
    let nodes = if pool == 0 {
        String::new()
    } else {
        format!("      nodes: {pool}\n      resources: {{gpu: 4, cpu: 16, memory: 64Gi}}\n")
    };
    format!(
        r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {{name: fake}}
spec:
  executor: kubernetes
  kubernetes:
    namespace: {NAMESPACE}
    runtimeImage: {RUNTIME_IMAGE}
    objectsSecret: sluice-objects
    podStartTimeout: 5s
    admission: {admission}
  objects: {objects}
  pools:
    - name: gpu
{nodes}      labels: {{pool: gpu}}
      taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}, {{key: dedicated, value: ml, effect: NoExecute}}]
  teams:
    - {{name: vision}}
  runtime: {{heartbeatTimeout: 3s}}
  preemption: {{gracePeriod: 5s}}
{extra}"#
    )
}

impl Cluster {
    /// Everything started, the server ready; `nodes` are the fake's node names (each with 4
    /// GPUs and the pool's label).
    pub fn start(tag: &str, nodes: &[&str], extra: &str) -> Cluster {
        Self::start_with(tag, nodes, 2, extra)
    }

    /// As [`Cluster::start`], the pool declaring `pool` nodes.
    pub fn start_with(tag: &str, nodes: &[&str], pool: usize, extra: &str) -> Cluster {
        let specs: Vec<String> = nodes
            .iter()
            .map(|n| format!("{n}:gpu=4,cpu=16,memory=64Gi,label.pool=gpu"))
            .collect();
        let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
        Self::start_all(tag, &specs, pool, extra, None)
    }

    /// As [`Cluster::start_with`], the fake's nodes given as `fake-kube --node` specs
    /// (`NAME:gpu=8,cpu=16,memory=64Gi,label.KEY=VALUE`).
    pub fn start_nodes(tag: &str, specs: &[&str], pool: usize, extra: &str) -> Cluster {
        Self::start_all(tag, specs, pool, extra, None)
    }

    /// `admission: kueue`, with the fake's Kueue holding `gpus` GPUs of quota.
    pub fn start_kueue(tag: &str, nodes: &[&str], gpus: u32) -> Cluster {
        let specs: Vec<String> = nodes
            .iter()
            .map(|n| format!("{n}:gpu=4,cpu=16,memory=64Gi,label.pool=gpu"))
            .collect();
        let specs: Vec<&str> = specs.iter().map(String::as_str).collect();
        Self::start_all(tag, &specs, nodes.len(), "", Some(gpus))
    }

    fn start_all(
        tag: &str,
        specs: &[&str],
        pool: usize,
        extra: &str,
        kueue: Option<u32>,
    ) -> Cluster {
        let sb = Sandbox::new(tag);
        let s3 = S3::start("sluice-k8s");
        let image = sb.path().join("images/runtime");
        std::fs::create_dir_all(&image).expect("image folder");
        std::os::unix::fs::symlink(
            sluice_e2e::bin("sluice-runtime"),
            image.join("sluice-runtime"),
        )
        .expect("the runtime in its image");
        let gpus = kueue.map(|g| g.to_string()).unwrap_or_default();
        let args: &[&str] = if kueue.is_some() {
            &["--kueue-gpus", &gpus]
        } else {
            &[]
        };
        let kube = FakeKube::start_with(
            &sb.path().join("kube"),
            specs,
            &[(RUNTIME_IMAGE, image.as_path())],
            args,
        );
        let mut secret = serde_json::Map::new();
        for (k, v) in s3.env() {
            secret.insert(k.to_owned(), json!(v));
        }
        let made = kube.call(
            "POST",
            &format!("/api/v1/namespaces/{NAMESPACE}/secrets"),
            Some(&json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "sluice-objects"}, "stringData": secret})),
        );
        assert_eq!(made.status, 201, "the objects Secret: {}", made.text());
        // From here on, the calls counted are the server's (and the tests' own reads).
        kube.reset_calls();
        let kubeconfig = kube.kubeconfig(sb.path());
        let cluster = sb.write(
            "cluster.yaml",
            &cluster_yaml(
                &s3.url("sluice"),
                pool,
                extra,
                if kueue.is_some() { "kueue" } else { "sluice" },
            ),
        );
        let mut env: Vec<(String, String)> = s3
            .env()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
        let (_, token) = token(&sb, "vision", "member", &[]);
        let server = start_server(&sb, &cluster, &env);
        Cluster {
            server,
            kube,
            s3,
            token,
            sb,
            env,
            cluster,
        }
    }

    /// SIGKILL to the server, and a new one on the same home.
    pub fn restart_server(&mut self) {
        self.server.kill();
        self.server = start_server(&self.sb, &self.cluster, &self.env);
    }

    /// Submits a pipeline through the API: its run's id.
    pub fn submit(&self, source: &str, params: &[&str]) -> String {
        let a = self.server.call(
            "POST",
            "/api/v1/runs",
            Some(&self.token),
            Some(&json!({"source": source, "path": "p.yaml", "params": params})),
        );
        assert_eq!(a.status, 201, "submit: {}", a.text());
        a.json()["id"].as_str().expect("an id").to_owned()
    }

    pub fn run(&self, id: &str) -> Value {
        let a = self.server.call(
            "GET",
            &format!("/api/v1/runs/{id}"),
            Some(&self.token),
            None,
        );
        assert_eq!(a.status, 200, "status: {}", a.text());
        a.json()
    }

    pub fn runs(&self) -> Vec<Value> {
        let a = self
            .server
            .call("GET", "/api/v1/runs", Some(&self.token), None);
        a.json().as_array().cloned().unwrap_or_default()
    }

    /// `sluice ARGS` against the server.
    pub fn cli(&self, args: &[&str]) -> Ran {
        self.server.cli(&self.sb, Some(&self.token), args)
    }

    /// The pods of run `id` the fake has now (not deleted), by name.
    pub fn live_pods(&self, id: &str) -> Vec<Value> {
        let label = format!("sluice.dev/run={id}");
        let a = self.kube.call(
            "GET",
            &format!(
                "/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={}",
                sluice_e2e::kube::encode(&label)
            ),
            None,
        );
        a.json()["items"].as_array().cloned().unwrap_or_default()
    }

    /// The Jobs of run `id` the fake has now (read through a control: not an API call).
    pub fn jobs(&self, id: &str) -> Vec<Value> {
        let mut jobs = self.kube.jobs();
        jobs.retain(|j| j["metadata"]["labels"]["sluice.dev/run"] == id);
        jobs
    }

    /// Waits for the one running pod of step `step` of run `id`; its name.
    pub fn running_pod(&self, id: &str, step: &str) -> String {
        let mut name = String::new();
        wait_for(&format!("a running pod of {step}"), || {
            let pods = self.live_pods(id);
            let found = pods.iter().find(|p| {
                p["metadata"]["annotations"]["sluice.dev/step-name"] == step
                    && p["status"]["phase"] == "Running"
                    && p["metadata"]["deletionTimestamp"].is_null()
            });
            if let Some(p) = found {
                name = p["metadata"]["name"].as_str().unwrap_or("").to_owned();
            }
            found.is_some()
        });
        name
    }

    /// Every API call the executor made (as the fake counted them) is one the chart's Role
    /// grants.
    pub fn assert_calls_within_the_role(&self) {
        let granted = sluice_e2e::kube::chart_role();
        let calls = self.kube.calls();
        for (call, _) in calls["by"].as_object().expect("calls by verb") {
            assert!(
                granted.contains(call),
                "the executor called `{call}`, which the chart's Role does not grant: {granted:?}"
            );
        }
    }
}

fn start_server(sb: &Sandbox, cluster: &std::path::Path, env: &[(String, String)]) -> Server {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_with(sb, &["--cluster", cluster.to_str().expect("a path")], &env);
    server.wait_ready();
    server
}

/// Waits for run `id` to reach `state` (another end fails the test); says what the run and
/// the fake's pods were like when it never comes.
pub fn wait_state(k: &Cluster, id: &str, state: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let run = k.run(id);
        if run["state"] == state {
            return;
        }
        assert!(
            run["state"] == "Running",
            "run {id} ended {}, not {state}: {run}",
            run["state"]
        );
        assert!(
            std::time::Instant::now() < deadline,
            "run {id} never became {state}: {run}\npods: {}",
            k.kube.pods()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Steps of a run's status by name.
pub fn steps(run: &Value) -> BTreeMap<String, Value> {
    run["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| (s["name"].as_str().unwrap_or("").to_owned(), s.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits for `cond`; on timeout, says what run `id` and the fake's pods were like.
pub fn wait_run(k: &Cluster, id: &str, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {}\npods: {}",
            k.run(id),
            k.kube.pods()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
