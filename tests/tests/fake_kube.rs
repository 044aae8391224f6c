//! The fake Kubernetes cluster (`fake-kube`) behaves as the parts of Kubernetes the engine's
//! executor relies on: checked with the real `kube` client where it matters (watcher,
//! bookmarks, logs, 409, 410, delete), and over plain HTTP for the rest.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use sluice_e2e::TempDir;
use sluice_e2e::kube::{FakeKube, phase, pod};

#[path = "fake_kube/http.rs"]
mod http;
#[path = "fake_kube/jobs.rs"]
mod jobs;

const NS: &str = "default";

fn client(fk: &FakeKube) -> kube::Client {
    let mut config = kube::Config::new(fk.url().parse().expect("the fake's URL"));
    config.default_namespace = NS.into();
    kube::Client::try_from(config).expect("a kube client for the fake")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_sees_a_pod_succeed_and_reads_its_log_and_a_second_create_is_409() {
    let dir = TempDir::new("fk-watch");
    let fk = FakeKube::start_with(
        dir.path(),
        &["n1:gpu=8,cpu=16,memory=64Gi"],
        &[],
        &["--bookmark-ms", "100"],
    );
    let pods: Api<Pod> = Api::default_namespaced(client(&fk));
    let nodes: Api<Node> = Api::all(client(&fk));
    let n1 = nodes.get("n1").await.expect("get node n1");
    let alloc = n1.status.and_then(|s| s.allocatable).unwrap_or_default();
    assert_eq!(alloc.get("nvidia.com/gpu").map(|q| q.0.as_str()), Some("8"));

    let mut p = pod("hello", "n1", "echo hello $FOO; sleep 0.2");
    p["spec"]["containers"][0]["env"] = json!([{"name": "FOO", "value": "bar"}]);
    let p: Pod = serde_json::from_value(p).expect("a Pod");
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().fields("metadata.name=hello"),
    );
    let mut stream = stream.boxed();
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create the pod");
    let mut seen = vec![];
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = stream.next().await {
            let ev = ev.expect("a watcher event");
            if let watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) = ev {
                let ph = pod.status.and_then(|s| s.phase).unwrap_or_default();
                if seen.last() != Some(&ph) {
                    seen.push(ph.clone());
                }
                if ph == "Succeeded" {
                    return;
                }
            }
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "the watcher never saw Succeeded; phases seen: {seen:?}"
    );
    assert!(
        seen.contains(&"Running".to_owned()),
        "phases seen: {seen:?}"
    );

    let log = pods
        .logs("hello", &LogParams::default())
        .await
        .expect("the log");
    assert_eq!(log, "hello bar\n");

    match pods.create(&PostParams::default(), &p).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
            assert_eq!(s.message, "pods \"hello\" already exists");
        }
        other => panic!("a second create must be 409, got {other:?}"),
    }
    let created = fk.pods();
    assert_eq!(created[0]["created"], 1, "{created}");

    // Bookmarks come every --bookmark-ms on a watch that allows them.
    let wp = WatchParams::default().timeout(1);
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    let events: Vec<_> = pods
        .watch(&wp, &rv.unwrap_or_default())
        .await
        .expect("watch")
        .collect()
        .await;
    let marks = events
        .iter()
        .filter(|e| matches!(e, Ok(WatchEvent::Bookmark(_))))
        .count();
    assert!(marks >= 2, "bookmarks in a 1 s watch every 100 ms: {marks}");
    let calls = fk.calls();
    assert!(calls["by"]["watch pods"].as_u64() >= Some(2), "{calls}");
    assert!(calls["by"]["list pods"].as_u64() >= Some(2), "{calls}");
    assert_eq!(calls["by"]["create pods"], 2, "{calls}");
    assert_eq!(calls["by"]["get pods/log"], 1, "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_sigterms_the_main_process_then_kills_its_tree_and_the_pod_goes() {
    let dir = TempDir::new("fk-delete");
    let fk = FakeKube::start(dir.path(), &["n1:cpu=4"], &[]);
    let pods: Api<Pod> = Api::default_namespaced(client(&fk));
    let script = "trap 'echo term; exit 0' TERM; sleep 30 & echo $! > $HOME/child.pid; wait";
    let p: Pod = serde_json::from_value(pod("trap", "n1", script)).expect("a Pod");
    pods.create(&PostParams::default(), &p)
        .await
        .expect("create");
    let child = fk.pid_in(NS, "trap", "child.pid");
    fk.wait_pod(NS, "trap", "Running", |p| phase(p) == "Running");
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    // The watcher lists, then watches: it is watching once the list is done.
    loop {
        match stream.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(_) => {}
            None => panic!("the watcher ended before its first list"),
        }
    }
    let started = Instant::now();
    let answer = pods
        .delete("trap", &DeleteParams::default().grace_period(20))
        .await
        .expect("delete");
    let answered = answer.left().expect("the pod object");
    assert!(answered.metadata.deletion_timestamp.is_some());
    let gone = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Delete(p)) = ev {
                return p;
            }
        }
        panic!("the watch ended")
    })
    .await
    .expect("a DELETED event");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "SIGTERM ended it before the grace"
    );
    assert_eq!(
        gone.status.and_then(|s| s.phase).as_deref(),
        Some("Succeeded")
    );
    let log = std::fs::read_to_string(fk.work.join(NS).join("trap/main.log")).expect("log");
    assert!(log.contains(" term\n"), "{log}");
    sluice_e2e::wait_for("the background sleep killed", || !sluice_e2e::alive(child));
    assert_eq!(fk.pod(NS, "trap"), Value::Null);
    let api = fk.call(
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/trap/log"),
        None,
    );
    assert_eq!(api.status, 404, "the log of a deleted pod");
    let all = fk.pods();
    assert_eq!(
        (all[0]["deleted"].clone(), all[0]["created"].clone()),
        (json!(true), json!(1))
    );
}

#[test]
fn empty_dir_mount_paths_are_host_folders_in_commands_and_env() {
    let dir = TempDir::new("fk-emptydir");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let mut p = pod("vol", "n1", "cat /sluice-pod/data/x; echo \"$SPEC\"; pwd");
    p["spec"]["volumes"] = json!([{"name": "work", "emptyDir": {}}]);
    p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox",
        "command": ["sh", "-c", "mkdir -p /sluice-pod/data && echo from-init > /sluice-pod/data/x"],
        "volumeMounts": [{"name": "work", "mountPath": "/sluice-pod"}]}]);
    let main = &mut p["spec"]["containers"][0];
    main["volumeMounts"] = json!([{"name": "work", "mountPath": "/sluice-pod"}]);
    main["env"] = json!([{"name": "SPEC", "value": "{\"x\":\"/sluice-pod/data/x\"}"}]);
    main["workingDir"] = json!("/sluice-pod");
    assert_eq!(fk.create_pod_json(NS, &p).status, 201);
    let done = fk.wait_pod(NS, "vol", "Succeeded", |p| phase(p) == "Succeeded");
    let init = &done["status"]["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (init["exitCode"].clone(), init["reason"].clone()),
        (json!(0), json!("Completed"))
    );
    let host = fk.work.join(NS).join("vol/volumes/work");
    let log = fk
        .call(
            "GET",
            &format!("/api/v1/namespaces/{NS}/pods/vol/log"),
            None,
        )
        .text();
    let expected = format!(
        "from-init\n{{\"x\":\"{}/data/x\"}}\n{}\n",
        host.display(),
        host.display()
    );
    assert_eq!(log, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_before_the_history_is_410_and_a_relist_recovers() {
    let dir = TempDir::new("fk-410");
    let fk = FakeKube::start_with(dir.path(), &["n1"], &[], &["--history", "5"]);
    for i in 0..4 {
        assert_eq!(
            fk.create_pod_json(NS, &pod(&format!("p{i}"), "n1", "true"))
                .status,
            201
        );
    }
    for i in 0..4 {
        fk.wait_pod(NS, &format!("p{i}"), "Succeeded", |p| {
            phase(p) == "Succeeded"
        });
    }
    let old = fk.call(
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion=2"),
        None,
    );
    assert_eq!(old.status, 200);
    let first: Value =
        serde_json::from_str(old.text().lines().next().unwrap_or("")).expect("an event");
    assert_eq!(first["type"], "ERROR", "{first}");
    assert_eq!(
        (
            first["object"]["code"].clone(),
            first["object"]["reason"].clone()
        ),
        (json!(410), json!("Expired"))
    );

    let pods: Api<Pod> = Api::default_namespaced(client(&fk));
    let mut stream = pods
        .watch(&WatchParams::default().timeout(1), "2")
        .await
        .expect("watch")
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(s))) => assert_eq!(s.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    let list = pods
        .list(&ListParams::default().labels("app=fake-test"))
        .await
        .expect("re-list");
    assert_eq!(list.items.len(), 4);
    let rv = list.metadata.resource_version.expect("a list version");
    fk.create_pod_json(NS, &pod("after", "n1", "true"));
    let events: Vec<_> = pods
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .expect("watch")
        .collect()
        .await;
    let names: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Ok(WatchEvent::Added(p)) => p.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        ["after"],
        "only what came after the list: {events:?}"
    );
}

#[test]
fn evict_oom_and_bad_image_give_the_statuses_kubernetes_gives() {
    let dir = TempDir::new("fk-failures");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    for name in ["ev", "oom"] {
        fk.create_pod_json(NS, &pod(name, "n1", "echo $$ > $HOME/main.pid; sleep 30"));
        fk.wait_pod(NS, name, "Running", |p| phase(p) == "Running");
    }
    fk.pid_in(NS, "ev", "main.pid");
    fk.evict(NS, "ev");
    let ev = fk.wait_pod(NS, "ev", "evicted", |p| phase(p) == "Failed");
    assert_eq!(ev["status"]["reason"], "Evicted");
    assert!(
        ev["status"]["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("The node was low on resource: memory.")
    );
    let code = &ev["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"];
    assert!(*code == json!(143) || *code == json!(137), "{code}");
    assert!(fk.event_reasons(NS, "ev").contains(&"Evicted".to_owned()));

    let main = fk.pid_in(NS, "oom", "main.pid");
    fk.oom(NS, "oom");
    let oom = fk.wait_pod(NS, "oom", "OOMKilled", |p| phase(p) == "Failed");
    let t = &oom["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["reason"].clone(), t["exitCode"].clone()),
        (json!("OOMKilled"), json!(137))
    );
    assert!(!sluice_e2e::alive(main));

    fk.bad_image("registry.example/missing:1");
    let mut bad = pod("bad", "n1", "true");
    bad["spec"]["containers"][0]["image"] = json!("registry.example/missing:1");
    fk.create_pod_json(NS, &bad);
    let p = fk.wait_pod(NS, "bad", "ImagePullBackOff", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    });
    assert_eq!(phase(&p), "Pending");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Back-off pulling image \"registry.example/missing:1\""
    );
    let reasons = fk.event_reasons(NS, "bad");
    assert!(
        reasons.contains(&"Failed".into()) && reasons.contains(&"BackOff".into()),
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_kills_its_pods_and_turns_unknown_and_unscheduled_pods_say_why() {
    let dir = TempDir::new("fk-lose");
    let fk = FakeKube::start(dir.path(), &["n1", "n2"], &[]);
    fk.create_pod_json(NS, &pod("on2", "n2", "echo $$ > $HOME/main.pid; sleep 30"));
    let main = fk.pid_in(NS, "on2", "main.pid");
    fk.wait_pod(NS, "on2", "Running", |p| phase(p) == "Running");
    fk.lose_node("n2", false);
    sluice_e2e::wait_for("the lost node's process killed", || {
        !sluice_e2e::alive(main)
    });
    // Through the kubeconfig FakeKube writes, as a kubectl-like client would.
    let kc = kube::config::Kubeconfig::read_from(fk.kubeconfig(dir.path())).expect("kubeconfig");
    let opts = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(kc, &opts)
        .await
        .expect("config");
    assert_eq!(config.default_namespace, NS);
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).expect("client"));
    let n2 = nodes.get("n2").await.expect("n2 is still there");
    let ready = n2.status.and_then(|s| s.conditions).unwrap_or_default();
    let ready = ready
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("Unknown", Some("NodeStatusUnknown"))
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        phase(&fk.pod(NS, "on2")),
        "Running",
        "its pod keeps its last status"
    );
    fk.lose_node("n1", true);
    assert!(
        nodes.get_opt("n1").await.expect("get").is_none(),
        "deleted with ?delete=true"
    );

    fk.create_pod_json(NS, &pod("nowhere", "", "true"));
    let p = fk.wait_pod(NS, "nowhere", "Unschedulable", |p| {
        p["status"]["conditions"][0]["reason"] == "Unschedulable"
    });
    assert_eq!(phase(&p), "Pending");
    let msg = p["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("");
    assert!(msg.starts_with("0/1 nodes are available: "), "{msg}");
    let events: Api<Event> = Api::default_namespaced(client(&fk));
    let lp = ListParams::default().fields("involvedObject.name=nowhere");
    let got = events.list(&lp).await.expect("events");
    assert_eq!(
        got.items.first().and_then(|e| e.reason.clone()).as_deref(),
        Some("FailedScheduling")
    );

    fk.unschedulable(
        NS,
        "nowhere",
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    );
    let p = fk.wait_pod(NS, "nowhere", "the new message", |p| {
        p["status"]["conditions"][0]["message"]
            == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    });
    assert_eq!(p["status"]["conditions"][0]["status"], "False");
}
