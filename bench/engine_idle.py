#!/usr/bin/env python3
"""What a server costs while runs wait: its CPU in an idle window, beside the same server
holding no run, in one run of this script.

Each queued run is one step asking for every core of the machine (`resources: {cpu: N}`),
so the first runs (a `sleep`) and every other one waits for room. Once all are submitted
and queued, the server's CPU time (utime + stime from /proc/PID/stat) is read over
`--idle` seconds, and its resident set size at the end. The empty server is measured the
same way first, on its own home.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1; SLUICE=PATH
measures another binary):
    python3 bench/engine_idle.py [--runs 300,1000] [--idle 30] [--postgres URL]
The CPU is also shown for each 10 s of the window, so that a transient (a minute's
housekeeping, drivers still settling) is not mistaken for the steady cost.
`--postgres URL` (a server whose user may create databases) measures with state in a fresh
PostgreSQL database of its own too. Python's standard library only; prints a markdown table.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORES = os.cpu_count() or 1
TICKS = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("engine_idle:", *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, token=None, body=None, timeout=60):
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
    conn.close()
    return out


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat; after the name, 12 and 13.
    return (int(fields[11]) + int(fields[12])) * 1000.0 / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def pipeline(i):
    return f"""apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: wait-{i}}}
spec:
  steps:
    - name: hold
      run: sleep 100000
      resources: {{cpu: {CORES}}}
"""


class Server:
    def __init__(self, sluice, state, tag):
        self.home = tempfile.mkdtemp(prefix=f"sluice-idle-{tag}-")
        self.env = dict(os.environ, SLUICE_HOME=self.home)
        if state:
            self.env["SLUICE_STATE"] = state
        out = subprocess.run(
            [sluice, "token", "create", "--team", "bench", "--role", "member", "--output", "json"],
            env=self.env, capture_output=True, text=True, check=True,
        )
        self.token = json.loads(out.stdout)["token"]
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sluice, "server", "--listen", f"127.0.0.1:{self.port}", "--rate", "100000"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if request(self.port, "GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("the server did not become ready")

    def submit_all(self, n):
        def one(i):
            status, body = request(self.port, "POST", "/api/v1/runs", self.token,
                                   {"source": pipeline(i), "path": f"w{i}.yaml"})
            if status != 201:
                raise SystemExit(f"submit {i}: {status} {body[:200]!r}")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(n)))

    def wait_queued(self, n):
        """Until every run's step is Running (one) or waiting (the others)."""
        deadline = time.time() + 600
        while time.time() < deadline:
            status, body = request(self.port, "GET", "/api/v1/runs?limit=0&state=Running", self.token)
            if status == 200 and len(json.loads(body)) >= n:
                return
            time.sleep(0.5)
        raise SystemExit("the runs were not all queued")

    def measure(self, idle):
        """CPU ms over `idle` seconds, and in each 10 s of it (a transient shows), and RSS."""
        # Settle first: submissions' own work is not the idle cost.
        time.sleep(3)
        first = before = cpu_ms(self.proc.pid)
        windows = []
        left = idle
        while left > 0:
            step = min(10.0, left)
            time.sleep(step)
            now = cpu_ms(self.proc.pid)
            windows.append(now - before)
            before = now
            left -= step
        return before - first, windows, rss_mib(self.proc.pid)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        # Whatever still runs of the runs' steps (their runtimes outlive the server).
        subprocess.run(["pkill", "-f", f"{self.home}/"], check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def fresh_database(url, tag):
    """A database of its own on the PostgreSQL server of `url`: its URL."""
    name = f"sluice_idle_{tag}_{os.getpid()}"
    subprocess.run(["psql", url, "-qc", f"CREATE DATABASE {name}"], check=True,
                   capture_output=True)
    base = url.rsplit("/", 1)[0]
    return f"{base}/{name}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", default="300,1000")
    p.add_argument("--idle", type=float, default=30.0)
    p.add_argument("--postgres")
    a = p.parse_args()
    if not os.environ.get("NO_BUILD"):
        log("building the release binaries")
        subprocess.run(["cargo", "build", "--release", "-p", "sluice-engine", "-p", "sluice-runtime"],
                       cwd=ROOT, check=True)
    sluice = os.environ.get("SLUICE") or os.path.join(ROOT, "target", "release", "sluice")
    backends = [("SQLite", None)]
    if a.postgres:
        backends.append(("PostgreSQL", a.postgres))
    rows = []
    for backend, url in backends:
        for n in [0] + [int(x) for x in a.runs.split(",") if x]:
            state = fresh_database(url, n) if url else None
            s = Server(sluice, state, f"{backend.lower()}-{n}")
            try:
                if n:
                    log(f"{backend}: submitting {n} runs")
                    s.submit_all(n)
                    s.wait_queued(n)
                log(f"{backend}: {n} runs queued, measuring {a.idle:.0f} s idle")
                used, windows, rss = s.measure(a.idle)
            finally:
                s.stop()
            rows.append((backend, n, used, used / (a.idle * 10.0), windows, rss))
    print(f"| state | runs queued | CPU ms in {a.idle:.0f} s | % of one core "
          "| CPU ms in each 10 s | RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for backend, n, used, pct, windows, rss in rows:
        each = " ".join(f"{w:.0f}" for w in windows)
        print(f"| {backend} | {n} | {used:.0f} | {pct:.2f} | {each} | {rss:.0f} |")


if __name__ == "__main__":
    main()
