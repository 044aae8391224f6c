#!/usr/bin/env python3
"""The schedule loop at scale: 10,000 applied schedules on one server, 1,000 of them firing
every minute (no-op pipelines), measured in one run beside the floor.

1. Idle: 10,000 schedules of which none is due during the phase (daily at 03:00): the loop's
   own cost, the server's CPU seconds per minute.
2. Firing: the same 10,000 applied again, 1,000 now every minute (the other 9,000 daily), for
   N whole minutes. For every fire of every tick: the delay from its tick to the moment its
   run was created (a started fire) or its record was written (skipped, missed). Exactly
   once is checked: each every-minute schedule has one record per tick of the window. The
   server's CPU seconds per minute, its own and with the steps it ran.
3. Floor: the same 1,000 no-op runs submitted through the API by one client back to back
   (what an external cron calling the API would do): how long the server takes to accept
   them, beside how long the loop took from a tick to its last fire.

Run from the repository's root (builds the release binaries first unless NO_BUILD=1):
    python3 bench/schedule_scale.py [--schedules 10000] [--every-minute 1000] [--teams 10]
                                    [--minutes 3] [--idle 60]
Python's standard library only. Prints markdown tables.
"""

import argparse
import datetime
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_load import NOOP, Server, pct, token  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*a):
    print("schedule_scale:", *a, file=sys.stderr, flush=True)


def cpu(pid):
    """(own, with reaped children) CPU seconds of a process."""
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) for x in f[11:15])
    return (utime + stime) / CLK_TCK, (utime + stime + cutime + cstime) / CLK_TCK


def documents(team, count, every_minute):
    """One team's file: the no-op pipeline and `count` schedules, the first `every_minute`
    of them every minute, the others daily at 03:00 UTC."""
    docs = [NOOP]
    for i in range(count):
        cron = "* * * * *" if i < every_minute else "0 3 * * *"
        docs.append(
            "apiVersion: sluice.dev/v1\nkind: Schedule\nmetadata: {name: s%05d}\nspec:\n"
            "  pipeline: noop\n  cron: \"%s\"\n  timezone: UTC\n  concurrency: forbid\n"
            "  keepRuns: 3\n" % (i, cron))
    return "---\n".join(docs)


def apply(server, tokens, per_team, every_minute):
    started = time.time()
    for team, tok in tokens.items():
        body = {"files": [{"path": "%s.yaml" % team,
                           "text": documents(team, per_team, every_minute)}]}
        status, out = server.request("POST", "/api/v1/apply", tok, body)
        if status != 200:
            raise RuntimeError("apply for %s: %d %s" % (team, status, out[:400]))
    return time.time() - started


def parse(ts):
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def wait_until(t):
    while True:
        left = t - time.time()
        if left <= 0:
            return
        time.sleep(min(left, 1.0))


def idle(server, tokens, per_team, seconds):
    log("applying %d schedules, none due" % (per_team * len(tokens)))
    took = apply(server, tokens, per_team, 0)
    time.sleep(5)  # the loop reads and parses them once
    a = cpu(server.proc.pid)
    time.sleep(seconds)
    b = cpu(server.proc.pid)
    return took, (b[0] - a[0]) * 60.0 / seconds


def firing(server, tokens, per_team, every_minute, minutes):
    log("applying again: %d per team every minute" % every_minute)
    took = apply(server, tokens, per_team, every_minute)
    applied = time.time()
    # The window: whole minutes starting at the first minute boundary at least 5 s after
    # the apply (ticks before it belong to no version... the apply's own minute is not due).
    first = (int(applied) // 60 + 1) * 60
    if first - applied < 5:
        first += 60
    end = first + 60 * minutes
    wait_until(first - 1)
    marks = [(time.time(), cpu(server.proc.pid))]
    for m in range(minutes):
        wait_until(first + 60 * (m + 1) - 1)
        marks.append((time.time(), cpu(server.proc.pid)))
    wait_until(end + 10)  # the last tick's runs end
    per_minute = []
    for (t0, c0), (t1, c1) in zip(marks, marks[1:]):
        per_minute.append(((c1[0] - c0[0]) * 60 / (t1 - t0), (c1[1] - c0[1]) * 60 / (t1 - t0)))
    return took, first, end, per_minute


def read_fires(home, first, end, every_minute, teams):
    db = sqlite3.connect(os.path.join(home, "sluice.db"))
    rows = db.execute(
        "SELECT f.team, f.schedule, f.tick, f.outcome, f.recorded_at, r.created_at "
        "FROM fires f LEFT JOIN runs r ON r.id = f.run_id").fetchall()
    db.close()
    lags, outcomes, per_tick, late = [], {}, {}, []
    for team, schedule, tick, outcome, recorded, created in rows:
        t = parse(tick)
        if not first <= t < end:
            continue
        at = parse(created) if created else parse(recorded)
        lags.append(at - t)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        per_tick.setdefault(t, {}).setdefault((team, schedule), 0)
        per_tick[t][(team, schedule)] += 1
        if at - t > 1.0:
            late.append((team, schedule, tick, round(at - t, 3)))
    expected = every_minute * len(teams)
    ticks = sorted(per_tick)
    once = all(len(per_tick[t]) == expected and max(per_tick[t].values()) == 1 for t in ticks)
    # The runs the loop created: the delay from the tick to the last of them, per tick.
    spans = {}
    for team, schedule, tick, outcome, recorded, created in rows:
        t = parse(tick)
        if first <= t < end:
            at = parse(created) if created else parse(recorded)
            spans[t] = max(spans.get(t, 0), at - t)
    return lags, outcomes, ticks, once, late, spans


def floor(server, tok, count):
    """`count` no-op runs submitted through the API back to back on one connection."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    body = {"source": NOOP}
    started = time.time()
    for _ in range(count):
        status, out = server.request("POST", "/api/v1/runs", tok, body, conn)
        if status not in (200, 201, 202):
            raise RuntimeError("submit: %d %s" % (status, out[:300]))
    took = time.time() - started
    conn.close()
    return took


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=10000)
    ap.add_argument("--every-minute", type=int, default=1000)
    ap.add_argument("--teams", type=int, default=10)
    ap.add_argument("--minutes", type=int, default=3)
    ap.add_argument("--idle", type=float, default=60)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    if not os.environ.get("NO_BUILD"):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "sluice-engine",
                        "-p", "sluice-runtime"], cwd=root, check=True)
    sluice = os.environ.get("SLUICE", os.path.join(target, "release", "sluice"))
    work = tempfile.mkdtemp(prefix="sluice-schedule-bench.")
    load_start = open("/proc/loadavg").read().split()[:3]
    per_team = a.schedules // a.teams
    every = a.every_minute // a.teams
    try:
        home = os.path.join(work, "home")
        os.makedirs(home)
        teams = ["team%02d" % i for i in range(a.teams)]
        tokens = {t: token(sluice, home, t) for t in teams}
        server = Server(sluice, home)
        try:
            applied_idle, idle_cpu = idle(server, tokens, per_team, a.idle)
            applied_firing, first, end, per_minute = firing(
                server, tokens, per_team, every, a.minutes)
            # Stop the fires before the floor, so that it runs on the same, quiet server.
            apply(server, tokens, per_team, 0)
            time.sleep(3)
            floor_s = floor(server, tokens[teams[0]], every * a.teams)
        finally:
            server.stop()
        lags, outcomes, ticks, once, late, spans = read_fires(home, first, end, every, teams)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("### Schedule loop: %d schedules, %d every minute, %d teams (SQLite)\n" % (
        a.schedules, a.every_minute, a.teams))
    print("| measure | value |")
    print("|---|---|")
    print("| apply of %d schedules (%d requests) | %.2f s, then %.2f s to apply them again |" % (
        a.schedules, a.teams, applied_idle, applied_firing))
    print("| server CPU, none due (idle %.0f s) | %.2f s per minute |" % (a.idle, idle_cpu))
    for i, (own, all_) in enumerate(per_minute):
        print("| server CPU, firing minute %d | %.1f s per minute own, %.1f s with its steps |" % (
            i + 1, own, all_))
    print("| ticks in the window | %d x %d schedules |" % (len(ticks), a.every_minute))
    print("| fires recorded | %d (%s) |" % (
        len(lags), ", ".join("%s %d" % kv for kv in sorted(outcomes.items()))))
    print("| each tick exactly once | %s |" % ("yes" if once and len(ticks) == a.minutes
                                              else "NO"))
    if lags:
        print("| tick to run created (or record written), p50 / p99 / max | "
              "%.3f / %.3f / %.3f s |" % (pct(lags, 50), pct(lags, 99), max(lags)))
    print("| fires later than 1 s | %d |" % len(late))
    if spans:
        print("| tick to its last fire, per tick (mean, max; each) | %.2f s, %.2f s; %s |" % (
            statistics.mean(spans.values()), max(spans.values()),
            ", ".join("%.2f" % spans[t] for t in sorted(spans))))
    print("| floor: %d no-op runs submitted through the API by one client | %.2f s |" % (
        a.every_minute, floor_s))
    print()
    for row in late[:10]:
        print("late:", *row)
    print("Machine: %d cores; load average %s at the start, %s at the end." % (
        os.cpu_count(), " ".join(load_start), " ".join(open("/proc/loadavg").read().split()[:3])))


if __name__ == "__main__":
    main()
