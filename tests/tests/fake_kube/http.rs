//! The fake over plain HTTP: errors, selectors, counts, environment, images, logs, jobs,
//! init failures, and its own end.

use std::time::Duration;

use serde_json::{Value, json};
use sluice_e2e::TempDir;
use sluice_e2e::kube::{FakeKube, phase, pod};

const NS: &str = "default";

#[test]
fn errors_are_status_objects_lists_select_and_calls_are_counted() {
    let dir = TempDir::new("fk-api");
    let fk = FakeKube::start(dir.path(), &["n1:gpu=2", "n2"], &[]);
    assert_eq!(
        fk.call("GET", "/version", None).json()["gitVersion"],
        "v1.34.0-fake"
    );
    fk.reset_calls();
    let bad = fk.call("POST", "/api/v1/namespaces/default/pods", None);
    assert_eq!(
        (bad.status, bad.json()["reason"].clone()),
        (400, json!("BadRequest"))
    );
    let missing = fk.call("GET", "/api/v1/namespaces/default/pods/nope", None);
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["reason"], "NotFound");
    assert_eq!(missing.json()["kind"], "Status");

    let mut a = pod("a", "n1", "true");
    a["metadata"]["labels"]["tier"] = json!("x");
    assert_eq!(fk.create_pod_json(NS, &a).status, 201);
    assert_eq!(fk.create_pod_json(NS, &pod("b", "n2", "true")).status, 201);
    let names = |q: &str| -> Vec<Value> {
        let list = fk
            .call("GET", &format!("/api/v1/namespaces/{NS}/pods?{q}"), None)
            .json();
        assert_eq!(list["kind"], "PodList");
        assert!(list["metadata"]["resourceVersion"].is_string());
        let items = list["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|p| p["metadata"]["name"].clone())
            .collect()
    };
    assert_eq!(names("labelSelector=tier%3Dx"), [json!("a")]);
    assert_eq!(names("labelSelector=app%2C%21tier"), [json!("b")]);
    assert_eq!(
        names("fieldSelector=spec.nodeName%3Dn2&limit=10"),
        [json!("b")]
    );
    assert_eq!(names("labelSelector=tier%21%3Dx"), [json!("b")]);

    let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
    let made = fk.call("POST", "/api/v1/namespaces/default/services", Some(&svc));
    assert_eq!(
        (made.status, made.json()["kind"].clone()),
        (201, json!("Service"))
    );
    assert_eq!(
        fk.call("GET", "/api/v1/namespaces/default/services/s", None)
            .status,
        200
    );
    assert_eq!(
        fk.call("DELETE", "/api/v1/namespaces/default/services/s", None)
            .status,
        200
    );
    assert_eq!(
        fk.call("GET", "/api/v1/namespaces/default/services/s", None)
            .status,
        404
    );
    fk.pods();
    let calls = fk.calls();
    let want = json!({"create pods": 3, "get pods": 1, "list pods": 4, "create services": 1,
                      "get services": 2, "delete services": 1});
    assert_eq!(calls["by"], want, "/fake/... is not counted");
    assert_eq!(calls["total"], 12);
}

#[test]
fn the_environment_is_clean_with_field_refs_and_secrets() {
    let dir = TempDir::new("fk-env");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let secret = json!({"metadata": {"name": "creds"}, "data": {"K1": "b25l"},
                        "stringData": {"K2": "two"}});
    let made = fk.call("POST", "/api/v1/namespaces/default/secrets", Some(&secret));
    assert_eq!(made.status, 201, "{}", made.text());
    assert_eq!(
        made.json()["data"]["K2"],
        "dHdv",
        "stringData is stored base64 in data"
    );
    let mut p = pod("env", "n1", "");
    let c = &mut p["spec"]["containers"][0];
    c["command"] = json!(["env"]);
    c["env"] = json!([
        {"name": "A", "value": "1"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "S1", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "K1"}}},
    ]);
    c["envFrom"] = json!([{"secretRef": {"name": "creds"}}]);
    fk.create_pod_json(NS, &p);
    fk.wait_pod(NS, "env", "Succeeded", |p| phase(p) == "Succeeded");
    let log = fk
        .call("GET", "/api/v1/namespaces/default/pods/env/log", None)
        .text();
    let mut vars: Vec<&str> = log.lines().collect();
    vars.sort();
    let home = fk.work.join("default/env");
    let path = std::env::var("PATH").unwrap_or_default();
    let home = format!("HOME={}", home.display());
    let path = format!("PATH={path}");
    let want = [
        "A=1",
        &home,
        "IP=127.0.0.1",
        "K1=one",
        "K2=two",
        "NODE=n1",
        &path,
        "POD=env",
        "S1=one",
    ];
    assert_eq!(vars, want);
}

#[test]
fn an_image_root_stands_in_for_the_image_filesystem() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("fk-image");
    let tool = dir.write("root/usr/bin/tool", "#!/bin/sh\necho tool \"$@\"\n");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir.write("root/etc/conf", "x");
    let root = dir.path().join("root");
    let fk = FakeKube::start(dir.path(), &["n1"], &[("img:1", root.as_path())]);
    let mut p = pod("img", "n1", "");
    p["spec"]["containers"][0]["image"] = json!("img:1");
    p["spec"]["containers"][0]["command"] = json!(["tool", "/etc/conf", "/not/there"]);
    fk.create_pod_json(NS, &p);
    fk.wait_pod(NS, "img", "Succeeded", |p| phase(p) == "Succeeded");
    let log = fk
        .call("GET", "/api/v1/namespaces/default/pods/img/log", None)
        .text();
    assert_eq!(
        log,
        format!("tool {}/etc/conf /not/there\n", root.display())
    );
}

#[test]
fn logs_follow_until_the_end_and_take_timestamps_since_and_limit() {
    let dir = TempDir::new("fk-logs");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    fk.create_pod_json(
        NS,
        &pod(
            "l",
            "n1",
            "echo 1; sleep 0.3; echo 2 >&2; sleep 0.3; echo 3",
        ),
    );
    fk.wait_pod(NS, "l", "Running", |p| phase(p) != "Pending");
    let path = "/api/v1/namespaces/default/pods/l/log";
    let followed = fk.call("GET", &format!("{path}?follow=true"), None);
    assert_eq!(
        followed.text(),
        "1\n2\n3\n",
        "follow ends when the container ends"
    );
    assert_eq!(phase(&fk.pod(NS, "l")), "Succeeded");
    assert_eq!(
        fk.call("GET", &format!("{path}?limitBytes=3"), None).text(),
        "1\n2"
    );
    assert_eq!(
        fk.call("GET", &format!("{path}?sinceSeconds=600"), None)
            .text(),
        "1\n2\n3\n"
    );
    let stamped = fk
        .call("GET", &format!("{path}?timestamps=true"), None)
        .text();
    for line in stamped.lines() {
        let (ts, _) = line.split_once(' ').expect("TIMESTAMP TEXT");
        assert!(
            ts.ends_with('Z') && ts.len() == 30,
            "an RFC 3339 nanosecond time: {ts}"
        );
    }
}

#[test]
fn a_failed_init_container_fails_the_pod_and_the_main_one_never_runs() {
    let dir = TempDir::new("fk-init");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let mut p = pod("i", "n1", "echo main");
    p["spec"]["initContainers"] =
        json!([{"name": "setup", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]);
    fk.create_pod_json(NS, &p);
    let p = fk.wait_pod(NS, "i", "Failed", |p| phase(p) == "Failed");
    assert_eq!(p["status"]["reason"], "Init:Error");
    let t = &p["status"]["initContainerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].clone(), t["reason"].clone()),
        (json!(3), json!("Error"))
    );
    let waiting = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
    assert_eq!(*waiting, "PodInitializing");
    assert!(!fk.work.join("default/i/main.log").exists());
}

#[test]
fn a_job_makes_its_pods_unless_suspended_and_its_delete_takes_them() {
    let dir = TempDir::new("fk-jobs");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let template = json!({"spec": pod("x", "n1", "sleep 30")["spec"]});
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    for (name, suspend) in [("run", false), ("held", true)] {
        let job = json!({"metadata": {"name": name},
            "spec": {"suspend": suspend, "parallelism": 2, "template": template}});
        assert_eq!(fk.call("POST", jobs, Some(&job)).status, 201);
    }
    let of = |job: &str| {
        let q = format!("/api/v1/namespaces/default/pods?labelSelector=job-name%3D{job}");
        fk.call("GET", &q, None).json()["items"]
            .as_array()
            .map_or(0, Vec::len)
    };
    sluice_e2e::wait_for("the job's pods", || of("run") == 2);
    assert_eq!(of("held"), 0);
    let del = json!({"propagationPolicy": "Background", "gracePeriodSeconds": 1});
    let gone = fk.call("DELETE", &format!("{jobs}/run"), Some(&del));
    assert_eq!(gone.status, 200);
    sluice_e2e::wait_for("the job's pods deleted", || of("run") == 0);
    assert_eq!(fk.call("GET", &format!("{jobs}/run"), None).status, 404);
}

#[test]
fn sigterm_to_the_fake_kills_every_pod_process_tree() {
    let dir = TempDir::new("fk-term");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    fk.create_pod_json(
        NS,
        &pod("t", "n1", "sleep 60 & echo $! > $HOME/c.pid; wait"),
    );
    let child = fk.pid_in(NS, "t", "c.pid");
    let mut fk = fk;
    let pid = fk.child.id();
    sluice_e2e::signal(pid, "TERM");
    let status =
        sluice_e2e::wait::status_within(&mut fk.child, Duration::from_secs(30), "fake-kube");
    assert!(status.success(), "fake-kube exits 0 on SIGTERM: {status:?}");
    sluice_e2e::wait_for("the pod's child killed", || !sluice_e2e::alive(child));
}

#[test]
fn a_watch_selects_and_ends_cleanly_at_its_timeout() {
    let dir = TempDir::new("fk-watch-sel");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let mut a = pod("a", "n1", "true");
    a["metadata"]["labels"]["pick"] = json!("yes");
    fk.create_pod_json(NS, &a);
    fk.create_pod_json(NS, &pod("b", "n1", "true"));
    let q = "watch=1&labelSelector=pick%3Dyes&timeoutSeconds=1&resourceVersion=0";
    let w = fk.call("GET", &format!("/api/v1/namespaces/default/pods?{q}"), None);
    let events: Vec<Value> = w
        .text()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(!events.is_empty());
    assert_eq!(events[0]["type"], "ADDED");
    for e in &events {
        assert_eq!(
            e["object"]["metadata"]["name"], "a",
            "only the selected pod: {e}"
        );
    }
}

#[test]
fn a_forced_delete_ends_a_pod_that_ignores_sigterm() {
    let dir = TempDir::new("fk-force");
    let fk = FakeKube::start(dir.path(), &["n1"], &[]);
    let script = "trap '' TERM; echo $$ > $HOME/main.pid; sleep 60 & wait; sleep 60";
    fk.create_pod_json(NS, &pod("stubborn", "n1", script));
    let main = fk.pid_in(NS, "stubborn", "main.pid");
    fk.wait_pod(NS, "stubborn", "Running", |p| phase(p) == "Running");
    let first = fk.delete_pod(NS, "stubborn", Some(60));
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["metadata"]["deletionGracePeriodSeconds"], 60);
    assert!(first.json()["metadata"]["deletionTimestamp"].is_string());
    std::thread::sleep(Duration::from_millis(300));
    assert!(sluice_e2e::alive(main), "SIGTERM is ignored: it still runs");
    assert_eq!(fk.delete_pod(NS, "stubborn", Some(0)).status, 200);
    assert_eq!(
        fk.pod(NS, "stubborn"),
        Value::Null,
        "a forced delete removes it at once"
    );
    sluice_e2e::wait_for("the stubborn pod killed", || !sluice_e2e::alive(main));
}
