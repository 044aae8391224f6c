#!/usr/bin/env python3
"""The Kubernetes executor's own cost: N single-worker no-op steps (a fan-out of `true`)
through the real `sluice server`, on the FAKE cluster of the tests (`fake-kube`: the
Kubernetes JSON protocol over HTTP, and a kubelet that runs each pod as local processes,
copying sluice-runtime in with an init container as a real pod does). Beside it, in the same
run, the same pipeline through the same server with `executor: local` (the floor sluice
already has on one machine).

Reported per step: the server's own CPU time (the engine: scheduling, commits, the
executor, its watches; not the pods, which the fake's kubelet runs), the API calls the fake
counted (by verb and resource), and the wall time of the whole run. The target of issue 17:
under 10 ms of engine time per step.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/kube_steps.py [--steps 1000] [--parallelism 50]
Python's standard library only. Prints a markdown table.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_load import free_port, request  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")


def log(*a):
    print("kube_steps:", *a, file=sys.stderr, flush=True)


def cpu(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def pipeline(steps, parallelism):
    items = json.dumps(list(range(steps)))
    return ("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: noop}\nspec:\n"
            "  parallelism: %d\n  steps:\n    - name: step\n      forEach: %s\n"
            "      resources: {cpu: 100m}\n      run: \"true\"\n" % (parallelism, items))


def cluster(executor, objects, steps, read_nodes):
    """The Cluster file; `read_nodes`: the pool's nodes and their resources read from the
    cluster (no `nodes:`), so every scheduling cycle reads the node watch."""
    k8s = ("  kubernetes:\n    namespace: default\n    runtimeImage: bench/runtime:1\n"
           if executor == "kubernetes" else "")
    shape = ("" if read_nodes else
             "      nodes: 1\n      resources: {cpu: %d, memory: 1000Gi}\n" % steps)
    return ("apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: bench}\nspec:\n"
            "  executor: %s\n%s  objects: %s\n  pools:\n    - name: cpu\n%s"
            "      labels: {pool: cpu}\n"
            "  teams:\n    - {name: bench}\n" % (executor, k8s, objects, shape))


MODES = {
    # mode: (executor, nodes read from the cluster)
    "local": ("local", False),
    "kubernetes": ("kubernetes", False),
    "kubernetes, nodes read": ("kubernetes", True),
}


def one(work, mode, steps, parallelism):
    """One run of the pipeline through a fresh server: (wall s, server CPU s, calls)."""
    executor, read_nodes = MODES[mode]
    work = os.path.join(work, str(list(MODES).index(mode)))
    os.makedirs(work)
    home = os.path.join(work, executor, "home")
    os.makedirs(home)
    env = dict(os.environ, SLUICE_HOME=home)
    env.pop("SLUICE_SERVER", None)
    sluice = os.path.join(RELEASE, "sluice")
    fake = None
    if executor == "kubernetes":
        image = os.path.join(work, "image")
        os.makedirs(image, exist_ok=True)
        link = os.path.join(image, "sluice-runtime")
        if not os.path.exists(link):
            os.symlink(os.path.join(RELEASE, "sluice-runtime"), link)
        fake_log = open(os.path.join(work, "fake-kube.log"), "w")
        fake = subprocess.Popen(
            [os.path.join(RELEASE, "fake-kube"), "--listen", "127.0.0.1:0",
             "--work", os.path.join(work, "kube"),
             "--node", "node-0:cpu=%d,memory=1000Gi,pods=100000,label.pool=cpu" % steps,
             "--image", "bench/runtime:1=%s" % image],
            stdout=subprocess.PIPE, stderr=fake_log, text=True)
        line = fake.stdout.readline()
        fake_port = int(line.rsplit(":", 1)[1])
        kubeconfig = os.path.join(work, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
                    "    server: http://127.0.0.1:%d\nusers:\n- name: fake\n  user:\n"
                    "    token: fake\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n"
                    "    user: fake\n    namespace: default\ncurrent-context: fake\n"
                    % fake_port)
        env["KUBECONFIG"] = kubeconfig
    objects = "file://" + os.path.join(work, executor, "objects")
    cluster_file = os.path.join(work, executor, "cluster.yaml")
    with open(cluster_file, "w") as f:
        f.write(cluster(executor, objects, steps, read_nodes))
    token = subprocess.run([sluice, "token", "create", "--team", "bench", "--role", "member"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    port = free_port()
    server_log = open(os.path.join(work, executor, "server.log"), "w")
    server = subprocess.Popen(
        [sluice, "server", "--listen", "127.0.0.1:%d" % port, "--cluster", cluster_file],
        env=env, stdout=subprocess.DEVNULL, stderr=server_log)
    try:
        deadline = time.time() + 30
        while True:
            try:
                if request(port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        if fake:
            request(fake_port, "POST", "/fake/calls/reset")
        before = cpu(server.pid)
        start = time.time()
        status, body = request(port, "POST", "/api/v1/runs", token,
                               {"source": pipeline(steps, parallelism), "path": "noop.yaml"})
        if status != 201:
            raise RuntimeError("submit: %d %s" % (status, body[:500]))
        run = json.loads(body)["id"]
        while True:
            status, body = request(port, "GET", "/api/v1/runs/%s" % run, token)
            state = json.loads(body)["state"]
            if state != "Running":
                break
            time.sleep(0.2)
        wall = time.time() - start
        used = cpu(server.pid) - before
        if state != "Succeeded":
            raise RuntimeError("the run ended %s" % state)
        calls = {}
        if fake:
            calls = json.loads(request(fake_port, "GET", "/fake/calls")[1])["by"]
        return wall, used, calls
    finally:
        server.terminate()
        server.wait(30)
        if fake:
            fake.terminate()
            fake.wait(30)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--parallelism", type=int, default=50)
    a = p.parse_args()
    if os.environ.get("NO_BUILD") != "1":
        log("building the release binaries")
        subprocess.run(["cargo", "build", "--release", "-p", "sluice-engine", "-p",
                        "sluice-runtime", "-p", "sluice-e2e", "--bin", "sluice",
                        "--bin", "sluice-runtime", "--bin", "fake-kube"], cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="sluice-kube-bench-")
    try:
        rows = []
        for mode in MODES:
            log("%d steps, executor: %s" % (a.steps, mode))
            wall, used, calls = one(work, mode, a.steps, a.parallelism)
            rows.append((mode, wall, used, calls))
        print("| executor | steps | wall s | server CPU s | engine ms/step | API calls/step |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for executor, wall, used, calls in rows:
            total = sum(calls.values())
            per = "%.2f" % (total / a.steps) if calls else "-"
            print("| %s | %d | %.1f | %.2f | %.2f | %s |"
                  % (executor, a.steps, wall, used, 1000 * used / a.steps, per))
        for executor, _, _, calls in rows:
            if calls:
                print("\nAPI calls of the %s run, by verb and resource (fake-kube's count):\n"
                      % executor)
                print("| call | count | per step |")
                print("| --- | ---: | ---: |")
                for k in sorted(calls):
                    print("| %s | %d | %.3f |" % (k, calls[k], calls[k] / a.steps))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
