#!/usr/bin/env python3
"""The server under load, measured side by side with what it is compared to, in one run.

1. 50 concurrent clients on loopback for 60 s, each submitting a no-op pipeline and polling
   its status until it ends: errors, submissions per second, status latency p50/p95/p99.
   Then the same clients polling the status of ended runs only (the API's own cost).
2. Submission to first step started on an idle server: the step's attempt `started_at`
   (the engine's clock) minus the time the client sent the request (same machine), over 30
   submissions one after another: p50/p95.
3. A no-op sweep of N trials (random search, --parallel 2) run embedded and submitted through
   the server, taking turns: wall time of each, and the ratio.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/server_load.py [--clients 50] [--seconds 60] [--trials 10000] [--runs 2]
Python's standard library only. Prints markdown tables.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

NOOP = """apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: noop}
spec:
  steps:
    - name: work
      run: "true"
"""


def log(*a):
    print("server_load:", *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, token=None, body=None, conn=None, timeout=30):
    """One request to a server on loopback: (status, body bytes). `conn` is reused when given."""
    own = conn is None
    if own:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    out = (r.status, r.read())
    if own:
        conn.close()
    return out


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * len(values) + 0.5)) - 1))
    return values[k]


class Server:
    def __init__(self, sluice, home, rate=100000):
        self.home = home
        self.port = free_port()
        env = dict(os.environ, SLUICE_HOME=home)
        env.pop("SLUICE_SERVER", None)
        self.log = open(os.path.join(home, "..", "server-%d.log" % self.port), "w")
        self.proc = subprocess.Popen(
            [sluice, "server", "--listen", "127.0.0.1:%d" % self.port, "--rate", str(rate)],
            env=env, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the server did not start")

    def request(self, method, path, token=None, body=None, conn=None):
        return request(self.port, method, path, token, body, conn)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def token(sluice, home, team, role="member"):
    out = subprocess.run([sluice, "token", "create", "--team", team, "--role", role],
                         env=dict(os.environ, SLUICE_HOME=home), capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def load(sluice, work, clients, seconds):
    home = os.path.join(work, "load", "home")
    os.makedirs(home)
    tokens = [token(sluice, home, "team%d" % (i % 5)) for i in range(clients)]
    server = Server(sluice, home)
    status_ms, errors, submitted, ended = [], [], [0], [0]
    lock = threading.Lock()
    stop_at = time.time() + seconds

    def client(t):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        mine, errs, subs, ends = [], [], 0, 0
        while time.time() < stop_at:
            try:
                st, body = server.request("POST", "/api/v1/runs", t, {"source": NOOP}, conn)
                if st != 201:
                    errs.append("submit %d %s" % (st, body[:200]))
                    continue
                subs += 1
                run = json.loads(body)["id"]
                while time.time() < stop_at:
                    t0 = time.perf_counter()
                    st, body = server.request("GET", "/api/v1/runs/" + run, t, None, conn)
                    mine.append((time.perf_counter() - t0) * 1000)
                    if st != 200:
                        errs.append("status %d %s" % (st, body[:200]))
                        break
                    if json.loads(body)["state"] != "Running":
                        ends += 1
                        break
                    time.sleep(0.05)
            except (OSError, http.client.HTTPException) as e:
                errs.append(repr(e))
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        with lock:
            status_ms.extend(mine)
            errors.extend(errs)
            submitted[0] += subs
            ended[0] += ends

    threads = [threading.Thread(target=client, args=(t,)) for t in tokens]
    started = time.time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    took = time.time() - started
    server.stop()
    print("| clients | seconds | submissions | submissions/s | runs ended | status calls | status p50 ms | p95 ms | p99 ms | errors |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("| %d | %.0f | %d | %.1f | %d | %d | %.2f | %.2f | %.2f | %d |" % (
        clients, took, submitted[0], submitted[0] / took, ended[0], len(status_ms),
        pct(status_ms, 50), pct(status_ms, 95), pct(status_ms, 99), len(errors)))
    for e in errors[:5]:
        log("error:", e)
    print()


def poll(sluice, work, clients, seconds):
    """Reads alone: the clients poll the status of ended runs (as a dashboard does), so that
    what is measured is the API's own cost, not the machine running 50 runs a second."""
    home = os.path.join(work, "poll", "home")
    os.makedirs(home)
    tokens = [token(sluice, home, "team%d" % (i % 5)) for i in range(clients)]
    server = Server(sluice, home)
    runs = []
    for t in tokens:
        st, body = server.request("POST", "/api/v1/runs", t, {"source": NOOP})
        assert st == 201, body
        runs.append(json.loads(body)["id"])
    for t, run in zip(tokens, runs):
        while json.loads(server.request("GET", "/api/v1/runs/" + run, t)[1])["state"] == "Running":
            time.sleep(0.01)
    status_ms, errors = [], []
    lock = threading.Lock()
    stop_at = time.time() + seconds

    def client(t, run):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        mine, errs = [], []
        while time.time() < stop_at:
            t0 = time.perf_counter()
            try:
                st, body = server.request("GET", "/api/v1/runs/" + run, t, None, conn)
            except (OSError, http.client.HTTPException) as e:
                errs.append(repr(e))
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
                continue
            mine.append((time.perf_counter() - t0) * 1000)
            if st != 200:
                errs.append("status %d" % st)
            time.sleep(0.05)
        with lock:
            status_ms.extend(mine)
            errors.extend(errs)

    threads = [threading.Thread(target=client, args=tr) for tr in zip(tokens, runs)]
    started = time.time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    took = time.time() - started
    server.stop()
    print("| clients polling ended runs | seconds | status calls/s | p50 ms | p95 ms | p99 ms | errors |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("| %d | %.0f | %.0f | %.2f | %.2f | %.2f | %d |" % (
        clients, took, len(status_ms) / took, pct(status_ms, 50), pct(status_ms, 95),
        pct(status_ms, 99), len(errors)))
    print()


def first_step(sluice, work, n):
    home = os.path.join(work, "first", "home")
    os.makedirs(home)
    t = token(sluice, home, "vision")
    server = Server(sluice, home)
    delays = []
    for _ in range(n):
        sent = time.time()
        st, body = server.request("POST", "/api/v1/runs", t, {"source": NOOP})
        assert st == 201, body
        run = json.loads(body)["id"]
        while True:
            st, body = server.request("GET", "/api/v1/runs/" + run, t)
            v = json.loads(body)
            attempts = v["steps"][0]["attempts"]
            if attempts:
                started = attempts[0]["started_at"]
                break
            time.sleep(0.002)
        # started_at is RFC 3339 UTC with milliseconds.
        from datetime import datetime
        at = datetime.strptime(started, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=__import__("datetime").timezone.utc).timestamp()
        delays.append((at - sent) * 1000)
        while json.loads(server.request("GET", "/api/v1/runs/" + run, t)[1])["state"] == "Running":
            time.sleep(0.01)
    server.stop()
    print("| submissions | submit to first attempt started p50 ms | p95 ms | max ms |")
    print("| ---: | ---: | ---: | ---: |")
    print("| %d | %.1f | %.1f | %.1f |" % (n, pct(delays, 50), pct(delays, 95), max(delays)))
    print()


def sweep(sluice, work, trials, runs):
    args = [sluice, "sweep", "--name", "noop", "-p", "x=float:0:1", "--objective",
            "minimize:loss", "--algorithm", "random", "--trials", str(trials),
            "--parallel", "2", "--output", "json", "--", "/bin/echo", "loss=1"]
    embedded, served = [], []
    for r in range(runs):
        home = os.path.join(work, "sweep-embedded-%d" % r, "home")
        os.makedirs(home)
        t0 = time.perf_counter()
        subprocess.run(args, env=dict(os.environ, SLUICE_HOME=home), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        embedded.append(time.perf_counter() - t0)
        log("sweep of %d trials embedded: %.1f s" % (trials, embedded[-1]))
        home = os.path.join(work, "sweep-server-%d" % r, "home")
        os.makedirs(home)
        t = token(sluice, home, "vision")
        server = Server(sluice, home)
        env = dict(os.environ, SLUICE_SERVER="http://127.0.0.1:%d" % server.port,
                   SLUICE_TOKEN=t, SLUICE_HOME=os.path.join(work, "client-home"))
        t0 = time.perf_counter()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        served.append(time.perf_counter() - t0)
        server.stop()
        log("sweep of %d trials through the server: %.1f s" % (trials, served[-1]))
    e, s = statistics.median(embedded), statistics.median(served)
    print("| trials | embedded s | through the server s | server / embedded |")
    print("| ---: | ---: | ---: | ---: |")
    print("| %d | %.1f | %.1f | %.2f |" % (trials, e, s, s / e))
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--first", type=int, default=30)
    ap.add_argument("--trials", type=int, default=10000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", choices=["load", "poll", "first", "sweep"])
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "sluice-engine",
                        "-p", "sluice-runtime"], cwd=root, check=True)
    sluice = os.environ.get("SLUICE", os.path.join(target, "release", "sluice"))
    work = tempfile.mkdtemp(prefix="sluice-server-bench.")
    load_start = open("/proc/loadavg").read().split()[:3]
    try:
        if a.only in (None, "load"):
            load(sluice, work, a.clients, a.seconds)
        if a.only in (None, "poll"):
            poll(sluice, work, a.clients, a.seconds)
        if a.only in (None, "first"):
            first_step(sluice, work, a.first)
        if a.only in (None, "sweep"):
            sweep(sluice, work, a.trials, a.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("Machine: %d cores; load average %s at the start, %s at the end." % (
        os.cpu_count(), " ".join(load_start), " ".join(open("/proc/loadavg").read().split()[:3])))


if __name__ == "__main__":
    main()
