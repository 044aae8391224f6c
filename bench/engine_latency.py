#!/usr/bin/env python3
"""How fast a server answers while a long queue waits: submit to the first step running,
cancel (its answer, and its attempt stopped), and run status under 50 concurrent clients.

The queue: the machine is given one GPU (a stand-in `nvidia-smi` on the server's PATH that
lists GPU 0), one run holds it and `--queued` runs wait for it. The measured runs ask for a
tenth of a core and no GPU, so they find the machine idle: what they wait for is the engine.

- submit -> Running: `--rate` submissions a second for `--seconds`; each run's step writes
  the time its command started (`date +%s%N`) to a file; the latency is that time minus the
  time the submission was sent (so it includes the runtime starting the step's shell).
- cancel: `--cancels` runs whose step traps SIGTERM and writes the time; the cancel's HTTP
  answer time, and the time from sending the cancel to the trap's write (the attempt
  stopped).
- status: `--clients` threads, each with its own keep-alive connection, read one run's
  status `--requests` times.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1; SLUICE=PATH
measures another binary):
    python3 bench/engine_latency.py [--queued 10000] [--postgres URL]
Python's standard library only; prints a markdown table (milliseconds).
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import shutil
import tempfile
import threading
import time

from sluice_server import Server, fresh_database, logger, request, sluice_binary

log = logger("engine_latency")


def quantile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def waiting(i):
    return f"""apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: wait-{i}}}
spec:
  steps:
    - name: hold
      run: sleep 100000
      resources: {{cpu: 100m, gpu: 1}}
"""


def quick(i, marks):
    return f"""apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: quick-{i}}}
spec:
  steps:
    - name: go
      run: date +%s%N > {marks}/start-{i}
      resources: {{cpu: 100m}}
"""


def stoppable(i, marks):
    return f"""apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: stop-{i}}}
spec:
  steps:
    - name: go
      run: |
        trap 'date +%s%N > {marks}/stopped-{i}; exit 0' TERM
        date +%s%N > {marks}/running-{i}
        sleep 100000 & wait
      resources: {{cpu: 100m}}
"""


class Bench(Server):
    """A server on a machine of one GPU (a stand-in `nvidia-smi` that lists GPU 0)."""

    def __init__(self, sluice, state, tag):
        bindir = tempfile.mkdtemp(prefix=f"sluice-lat-{tag}-bin-")
        fake = os.path.join(bindir, "nvidia-smi")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho 0\n")
        os.chmod(fake, 0o755)
        super().__init__(sluice, state, f"sluice-lat-{tag}-", path=[bindir])
        self.bindir = bindir
        self.marks = os.path.join(self.home, "marks")
        os.makedirs(self.marks)

    def queue(self, n):
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.submit(waiting(i), f"w{i}.yaml"), range(n)))
        deadline = time.time() + 900
        while time.time() < deadline:
            status, body = self.call("GET", "/api/v1/runs?limit=0&state=Running")
            if status == 200 and len(json.loads(body)) >= n:
                return
            time.sleep(0.5)
        raise SystemExit("the runs were not all queued")

    def mark(self, name, timeout=60):
        path = os.path.join(self.marks, name)
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    return int(text) / 1e6
            except OSError:
                pass
            time.sleep(0.002)
        return None

    def submit_to_running(self, rate, seconds):
        sent = {}
        threads = []
        n = int(rate * seconds)
        start = time.time()
        for i in range(n):
            at = start + i / rate
            time.sleep(max(0.0, at - time.time()))
            t0 = time.time() * 1000
            sent[i] = t0
            th = threading.Thread(target=self.submit, args=(quick(i, self.marks), f"q{i}.yaml"))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        lat = []
        missing = 0
        for i, t0 in sent.items():
            t = self.mark(f"start-{i}")
            if t is None:
                missing += 1
            else:
                lat.append(t - t0)
        return lat, missing

    def cancels(self, n):
        answer, stopped = [], []
        for i in range(n):
            run = self.submit(stoppable(i, self.marks), f"s{i}.yaml")
            if self.mark(f"running-{i}") is None:
                raise SystemExit(f"cancel run {i} never started")
            time.sleep(0.05)
            t0 = time.time() * 1000
            status, body = self.call("POST", f"/api/v1/runs/{run}/cancel")
            t1 = time.time() * 1000
            if status >= 300:
                raise SystemExit(f"cancel: {status} {body[:200]!r}")
            answer.append(t1 - t0)
            t = self.mark(f"stopped-{i}")
            if t is not None:
                stopped.append(t - t0)
        return answer, stopped

    def statuses(self, clients, requests):
        run = self.submit(quick("status", self.marks), "status.yaml")
        self.mark("start-status")
        lat = []
        lock = threading.Lock()

        def client(_):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            mine = []
            for _ in range(requests):
                t0 = time.perf_counter()
                status, _body = request(self.port, "GET", f"/api/v1/runs/{run}", self.token, conn=conn)
                mine.append((time.perf_counter() - t0) * 1000)
                if status != 200:
                    raise SystemExit(f"status: {status}")
            conn.close()
            with lock:
                lat.extend(mine)

        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        return lat

    def stop(self):
        super().stop()
        shutil.rmtree(self.bindir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--queued", type=int, default=10000)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--cancels", type=int, default=50)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--postgres")
    a = p.parse_args()
    sluice = sluice_binary(log)
    backends = [("SQLite", None)]
    if a.postgres:
        backends.append(("PostgreSQL", a.postgres))
    rows = []
    for backend, url in backends:
        state = fresh_database(url, f"sluice_lat_{a.queued}") if url else None
        s = Bench(sluice, state, backend.lower())
        try:
            log(f"{backend}: queueing {a.queued} runs behind one GPU")
            s.queue(a.queued)
            time.sleep(3)
            log(f"{backend}: {a.rate:.0f} submissions/s for {a.seconds:.0f} s")
            lat, missing = s.submit_to_running(a.rate, a.seconds)
            rows.append((backend, "submit -> step running", lat, missing))
            log(f"{backend}: {a.cancels} cancels")
            answer, stopped = s.cancels(a.cancels)
            rows.append((backend, "cancel answered", answer, 0))
            rows.append((backend, "cancel -> attempt stopped", stopped, a.cancels - len(stopped)))
            log(f"{backend}: status, {a.clients} clients x {a.requests}")
            rows.append((backend, f"status ({a.clients} clients)", s.statuses(a.clients, a.requests), 0))
        finally:
            s.stop()
    print(f"| state | {a.queued} runs queued | n | p50 ms | p99 ms | max ms | missing |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for backend, what, xs, missing in rows:
        print(f"| {backend} | {what} | {len(xs)} | {quantile(xs, 0.5):.1f} | {quantile(xs, 0.99):.1f} "
              f"| {max(xs) if xs else float('nan'):.1f} | {missing} |")


if __name__ == "__main__":
    main()
