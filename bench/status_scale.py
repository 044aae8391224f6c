#!/usr/bin/env python3
"""`GET /api/v1/runs/{id}` as a team's runs pile up, with a member's token and an admin's.

The same ended run's status is asked, by its full id, with a token bound to its team and
with an admin's token (team `*`), after the team has 1, N1, N2, ... runs. A team-bound token
resolves the id among the team's runs (read from the store in full on every request, see
engine/src/service/resolve.rs); an admin's goes to the store's `resolve`, one lookup. The
table shows what that costs as the team grows. The server is otherwise idle: the runs are
submitted first, and the measurement starts once they have all ended.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/status_scale.py [--sizes 1,250,1000,2000] [--calls 200]
Python's standard library only. Prints a markdown table.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

NOOP = """apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: noop}
spec:
  steps:
    - name: work
      run: "true"
"""


def pct(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * len(values) + 0.5)) - 1))
    return values[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,250,1000,2000")
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "sluice-engine",
                        "-p", "sluice-runtime"], cwd=root, check=True)
    sluice = os.environ.get("SLUICE", os.path.join(target, "release", "sluice"))
    work = tempfile.mkdtemp(prefix="sluice-status-scale.")
    env = dict(os.environ, SLUICE_HOME=os.path.join(work, "home"))
    env.pop("SLUICE_SERVER", None)

    def token(team, role):
        return subprocess.run([sluice, "token", "create", "--team", team, "--role", role],
                              env=env, capture_output=True, text=True,
                              check=True).stdout.strip()

    member, admin = token("vision", "member"), token("*", "admin")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = subprocess.Popen([sluice, "server", "--listen", "127.0.0.1:%d" % port,
                               "--rate", "100000"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(method, path, tok, body=None):
        headers = {"Authorization": "Bearer " + tok}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()

    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if call("GET", "/readyz", member)[0] == 200:
                break
        except OSError:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            time.sleep(0.05)
    rows, runs, first = [], [], None
    try:
        for size in sizes:
            while len(runs) < size:
                st, body = call("POST", "/api/v1/runs", member, {"source": NOOP})
                assert st == 201, body
                runs.append(json.loads(body)["id"])
                first = first or runs[0]
            # Every run ended: the server is idle while it is measured.
            for run in runs:
                while json.loads(call("GET", "/api/v1/runs/" + run, admin)[1])["state"] == "Running":
                    time.sleep(0.05)
            row = [size]
            for tok in (member, admin):
                ms = []
                for _ in range(a.calls):
                    t0 = time.perf_counter()
                    st, _ = call("GET", "/api/v1/runs/" + first, tok)
                    ms.append((time.perf_counter() - t0) * 1000)
                    assert st == 200
                row += [pct(ms, 50), pct(ms, 99)]
            rows.append(row)
            print("status_scale: %d runs: member p50 %.2f ms, admin p50 %.2f ms" % (
                size, row[1], row[3]), file=sys.stderr, flush=True)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("| team's runs | member p50 ms | member p99 ms | admin p50 ms | admin p99 ms |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print("| %d | %.2f | %.2f | %.2f | %.2f |" % tuple(r))
    print("\nMachine: %d cores; load average %s at the end; %d calls per cell." % (
        os.cpu_count(), " ".join(open("/proc/loadavg").read().split()[:3]), a.calls))


if __name__ == "__main__":
    main()
