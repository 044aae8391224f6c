#!/usr/bin/env python3
"""The web UI's pages for a team with 10,000 runs: server time and size of each, beside the
JSON API's answers for the same data (the floor: the same store reads, no HTML).

A server on a fresh home runs four real runs through the API (the diamond example, a
pipeline whose step fails, the fan-out example and the early-stopping sweep with 16 trials).
It is then stopped, and their rows (runs, steps, attempts, the audit record's `submit`) are
copied in the SQLite state store until the team has N runs, one a minute back in time (10,000
runs: about a week; --spacing sets the minutes between two), so that every page reads real rows at the scale asked. The server is
started again, signed in through `/login`, and each page is fetched CALLS times over one
keep-alive connection: median, p95 and slowest milliseconds, and bytes.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/ui_pages.py [--runs 10000] [--calls 30]
Python's standard library only. Prints a markdown table. KEEP=1 keeps the home; WARM_UP=S
waits S seconds (default 5) after the restart before measuring.
"""

import argparse
import datetime
import http.client
import json
import os
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse

FAILS = """apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: validate}
spec:
  steps:
    - name: load
      run: echo loaded 0 rows
    - name: check
      needs: [load]
      run: echo "the input has 0 rows, expected at least 1" >&2; exit 3
"""


def pct(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100.0 * len(values) + 0.5)) - 1))
    return values[k]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def shift(text, seconds):
    """An RFC 3339 time as the store writes it, moved back by `seconds`."""
    if not text:
        return text
    t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    t -= datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--spacing", type=float, default=1.0,
                    help="minutes between two runs' starts (1: 10,000 runs in a week)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "sluice-engine",
                        "-p", "sluice-runtime"], cwd=root, check=True)
    sluice = os.environ.get("SLUICE", os.path.join(target, "release", "sluice"))
    work = tempfile.mkdtemp(prefix="sluice-ui-pages.")
    home = os.path.join(work, "home")
    env = dict(os.environ, SLUICE_HOME=home)
    env.pop("SLUICE_SERVER", None)
    token = json.loads(subprocess.run(
        [sluice, "token", "create", "--team", "vision", "--role", "member", "--name", "alice",
         "--output", "json"], env=env, check=True, capture_output=True, text=True).stdout)["token"]
    port = free_port()
    base = f"127.0.0.1:{port}"

    def start():
        p = subprocess.Popen([sluice, "server", "--listen", base, "--rate", "100000"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                c = http.client.HTTPConnection(base, timeout=5)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    return p
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit("the server never became ready")

    server = start()
    client_env = dict(env, SLUICE_SERVER=f"http://{base}", SLUICE_TOKEN=token,
                      SLUICE_HOME=os.path.join(work, "client"))
    with open(os.path.join(work, "fails.yaml"), "w") as f:
        f.write(FAILS)
    seeds = []
    for cwd, args in [
        (os.path.join(root, "examples", "pipelines"), ["run", "diamond.yaml"]),
        (work, ["run", "fails.yaml"]),
        (os.path.join(root, "examples", "pipelines"), ["run", "fan-out.yaml"]),
        (os.path.join(root, "examples", "sweeps"), ["sweep", "early-stop.yaml"]),
    ]:
        out = subprocess.run([sluice, *args, "--detach"], cwd=cwd, env=client_env, check=True,
                             capture_output=True, text=True).stdout.strip()
        seeds.append(out)

    def api(path):
        c = http.client.HTTPConnection(base, timeout=30)
        c.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        return json.loads(c.getresponse().read())

    deadline = time.time() + 300
    while any(api(f"/api/v1/runs/{i}")["state"] == "Running" for i in seeds):
        if time.time() > deadline:
            raise SystemExit("the seed runs never ended")
        time.sleep(0.5)
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)

    # Copies of the seeds' rows, one run a minute back in time, until the team has N runs.
    db = sqlite3.connect(os.path.join(home, "sluice.db"))
    cols = {t: [r[1] for r in db.execute(f"pragma table_info({t})")]
            for t in ["runs", "steps", "attempts"]}
    rows = {t: [dict(zip(cols[t], r)) for r in db.execute(f"select * from {t}")]
            for t in cols}
    audit = {r[0]: r for r in db.execute(
        "select target, at, who, team, action, result from audit where action = 'submit'")}
    copies = (a.runs - len(seeds)) // len(seeds)
    made = 0
    for k in range(1, copies + 1):
        ids = {}
        for r in rows["runs"]:
            new = f"{k:06x}{r['id'][6:]}"
            ids[r["id"]] = new
            age = int(60 * a.spacing * (k * len(seeds) + len(ids)))
            c = dict(r, id=new, created_at=shift(r["created_at"], age),
                     ended_at=shift(r["ended_at"], age), lease_owner=None)
            db.execute(f"insert into runs ({','.join(c)}) values ({','.join('?' * len(c))})",
                       list(c.values()))
            a_ = audit.get(f"run {r['id']}")
            if a_:
                db.execute("insert into audit (at, who, team, action, target, result) "
                           "values (?, ?, ?, ?, ?, ?)",
                           (shift(a_[1], age), a_[2], a_[3], a_[4], f"run {new}", a_[5]))
            made += 1
        for t in ["steps", "attempts"]:
            for r in rows[t]:
                age = int(60 * a.spacing * (k * len(seeds) + list(ids).index(r["run_id"]) + 1))
                c = dict(r, run_id=ids[r["run_id"]], started_at=shift(r["started_at"], age),
                         ended_at=shift(r["ended_at"], age))
                db.execute(f"insert into {t} ({','.join(c)}) values ({','.join('?' * len(c))})",
                           list(c.values()))
    db.commit()
    total = db.execute("select count(*) from runs where team = 'vision'").fetchone()[0]
    db.close()

    server = start()
    # The server reads each team's last week of usage once it starts, a day at a time in the
    # background (service::usage::days); the pages are measured once that is done.
    time.sleep(float(os.environ.get("WARM_UP", "5")))
    c = http.client.HTTPConnection(base, timeout=30)
    c.request("POST", "/login", body=urllib.parse.urlencode({"token": token, "next": "/runs"}),
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    r = c.getresponse()
    r.read()
    cookie = r.getheader("Set-Cookie").split(";")[0]
    diamond, failed, fan_out, sweep = seeds
    week = (datetime.datetime.now(datetime.timezone.utc).date()
            - datetime.timedelta(days=6)).isoformat()
    pages = [
        ("runs list, page 1", "/runs", True),
        ("runs list, page 100", "/runs?page=100", True),
        ("runs list, state=Failed", "/runs?state=Failed", True),
        ("runs list, pipeline=diamond", "/runs?pipeline=diamond", True),
        ("run: diamond (DAG)", f"/runs/{diamond}", True),
        ("run: fan-out", f"/runs/{fan_out}", True),
        ("run: sweep, 16 trials, charts", f"/runs/{sweep}", True),
        ("step: failed step with its log", f"/runs/{failed}/steps/check", True),
        ("queue", "/queue", True),
        ("schedules", "/schedules", True),
        ("usage, 7 days", "/usage", True),
        ("usage, 30 days", "/usage?days=30", True),
        ("floor: API runs, limit 50", "/api/v1/runs?limit=50", False),
        ("floor: API run status (sweep)", f"/api/v1/runs/{sweep}", False),
        ("floor: API usage, 7 days, by team,pool,pipeline",
         f"/api/v1/usage?since={week}&by=team,pool,pipeline", False),
    ]
    conn = http.client.HTTPConnection(base, timeout=60)
    print(f"{total} runs of team vision, one every {a.spacing:g} minute(s); {a.calls} calls per "
          "page, one keep-alive connection\n")
    print("| page | bytes | median ms | p95 ms | slowest ms | within 200 ms and 300 KB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, path, ui in pages:
        headers = {"Cookie": cookie} if ui else {"Authorization": f"Bearer {token}"}
        times = []
        size = 0
        for _ in range(a.calls):
            t0 = time.perf_counter()
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            times.append((time.perf_counter() - t0) * 1000)
            if resp.status != 200:
                raise SystemExit(f"{path}: {resp.status} {body[:200]!r}")
            size = len(body)
        ok = "yes" if pct(times, 100) < 200 and size < 300 * 1024 else "NO"
        if not ui:
            ok = "(floor)"
        print(f"| {name} | {size:,} | {pct(times, 50):.1f} | {pct(times, 95):.1f} | "
              f"{pct(times, 100):.1f} | {ok} |")
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)
    if os.environ.get("KEEP"):
        print(f"\nkept: {work}")
    else:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
