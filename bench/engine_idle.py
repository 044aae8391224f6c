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
import json
import os
import time

from sluice_server import Server, fresh_database, logger, sluice_binary

CORES = os.cpu_count() or 1
TICKS = os.sysconf("SC_CLK_TCK")
log = logger("engine_idle")


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


class Queue(Server):
    """A server whose runs wait for the machine."""

    def submit_all(self, n):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.submit(pipeline(i), f"w{i}.yaml"), range(n)))

    def wait_queued(self, n):
        """Until every run's step is Running (one) or waiting (the others)."""
        deadline = time.time() + 600
        while time.time() < deadline:
            status, body = self.call("GET", "/api/v1/runs?limit=0&state=Running")
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--runs", default="300,1000")
    p.add_argument("--idle", type=float, default=30.0)
    p.add_argument("--postgres")
    a = p.parse_args()
    sluice = sluice_binary(log)
    backends = [("SQLite", None)]
    if a.postgres:
        backends.append(("PostgreSQL", a.postgres))
    rows = []
    for backend, url in backends:
        for n in [0] + [int(x) for x in a.runs.split(",") if x]:
            state = fresh_database(url, f"sluice_idle_{n}") if url else None
            s = Queue(sluice, state, f"sluice-idle-{backend.lower()}-{n}-")
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
