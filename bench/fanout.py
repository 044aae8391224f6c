#!/usr/bin/env python3
"""A run of one `forEach` step over `--items` items through `sluice server`: how long the
submission takes to answer, how long until its first step runs, how fast its steps run, what
its status costs whole and as a page of 50 steps, and how long a cancel takes.

Each child step runs `true` with a tenth of a core, so the machine's pool runs 10 a core at
a time and the pace is the engine's and the runtime's, not the steps'. The first child to
start writes the time (`date +%s%N`); the time to its first step is that minus the time the
submission was sent. The pace is read from `step_counts` after `--run-for` seconds.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1; SLUICE=PATH
measures another binary):
    python3 bench/fanout.py [--items 100000] [--run-for 30] [--postgres URL]
Python's standard library only; prints a markdown table.
"""

import argparse
import json
import os
import time

from sluice_server import Server, fresh_database, logger, sluice_binary

log = logger("fanout")


def pipeline(items, marks):
    listed = ", ".join(str(i) for i in range(items))
    return f"""apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: wide}}
spec:
  steps:
    - name: shard
      forEach: [{listed}]
      resources: {{cpu: 100m}}
      run: '[ -e {marks}/first ] || date +%s%N > {marks}/first'
"""


def timed(server, path, method="GET"):
    t0 = time.perf_counter()
    status, body = server.call(method, path, timeout=600)
    ms = (time.perf_counter() - t0) * 1000
    if status >= 300:
        raise SystemExit(f"{method} {path}: {status} {body[:300]!r}")
    return ms, body


def measure(sluice, state, backend, a):
    server = Server(sluice, state, f"sluice-fanout-{backend.lower()}-")
    marks = os.path.join(server.home, "marks")
    os.makedirs(marks)
    rows = []
    try:
        source = pipeline(a.items, marks)
        log(f"{backend}: submitting {a.items} items ({len(source) // 1024} KiB)")
        sent = time.time() * 1000
        t0 = time.perf_counter()
        run = server.submit(source, "wide.yaml", timeout=600)
        answered = (time.perf_counter() - t0) * 1000
        rows.append(("submission answered", f"{answered:.0f} ms"))
        first = None
        deadline = time.time() + 600
        path = os.path.join(marks, "first")
        while time.time() < deadline:
            try:
                with open(path) as f:
                    text = f.read().strip()
                if text:
                    first = int(text) / 1e6 - sent
                    break
            except OSError:
                pass
            time.sleep(0.01)
        rows.append(("submit -> first step running",
                     f"{first:.0f} ms" if first is not None else "not in 600 s"))
        began = time.time()
        _, body = timed(server, f"/api/v1/runs/{run}?steps_limit=1")
        done0 = ended(json.loads(body)["step_counts"])
        time.sleep(a.run_for)
        _, body = timed(server, f"/api/v1/runs/{run}?steps_limit=1")
        done1 = ended(json.loads(body)["step_counts"])
        pace = (done1 - done0) / (time.time() - began)
        rows.append((f"steps ended a second (over {a.run_for:.0f} s)", f"{pace:.1f}"))
        pages = [timed(server, f"/api/v1/runs/{run}?steps_limit=50&steps_offset={o}")
                 for o in (0, a.items // 2, a.items - 50)]
        rows.append(("status, a page of 50 steps (first, middle, last)",
                     ", ".join(f"{ms:.0f} ms" for ms, _ in pages)
                     + f"; {len(pages[0][1]) // 1024} KiB"))
        ms, body = timed(server, f"/api/v1/runs/{run}")
        rows.append(("status, whole", f"{ms:.0f} ms; {len(body) // 1024} KiB"))
        t0 = time.perf_counter()
        status, body = server.call("POST", f"/api/v1/runs/{run}/cancel", timeout=600)
        if status == 409:
            # A run small enough to have ended already (a quick try of the script).
            rows.append(("cancel answered", "the run had ended"))
            return rows
        if status >= 300:
            raise SystemExit(f"cancel: {status} {body[:300]!r}")
        rows.append(("cancel answered", f"{(time.perf_counter() - t0) * 1000:.0f} ms"))
        deadline = time.time() + 600
        while time.time() < deadline:
            _, body = timed(server, f"/api/v1/runs/{run}?steps_limit=1")
            if json.loads(body)["state"] != "Running":
                break
            time.sleep(0.05)
        rows.append(("cancel -> run Cancelled", f"{(time.perf_counter() - t0) * 1000:.0f} ms"))
    finally:
        server.stop()
    return rows


def ended(counts):
    return sum(n for s, n in counts.items() if s not in ("Pending", "Queued", "Running"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--items", type=int, default=100000)
    p.add_argument("--run-for", type=float, default=30.0)
    p.add_argument("--postgres")
    a = p.parse_args()
    sluice = sluice_binary(log)
    backends = [("SQLite", None)]
    if a.postgres:
        backends.append(("PostgreSQL", a.postgres))
    results = []
    for backend, url in backends:
        state = fresh_database(url, f"sluice_fanout_{a.items}") if url else None
        results.append((backend, measure(sluice, state, backend, a)))
    print(f"| {a.items} items | " + " | ".join(b for b, _ in results) + " |")
    print("| --- |" + " --- |" * len(results))
    for i, (what, _) in enumerate(results[0][1]):
        print(f"| {what} | " + " | ".join(r[i][1] if i < len(r) else "" for _, r in results) + " |")


if __name__ == "__main__":
    main()
