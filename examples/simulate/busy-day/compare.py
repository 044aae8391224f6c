#!/usr/bin/env python3
"""The tables of docs/scheduler-busy-day.md: the busy day's workload (generate.py, the
documented seed and others) replayed by `sluice simulate --output json` under fifo,
priority and fair with today's settings (cluster.yaml), and under fair with quotaPools and
acrossTeams (cluster-v2.yaml). Python standard library only.

    python3 examples/simulate/busy-day/compare.py [--sluice PATH] [SEED ...]
    # seeds default to the documented one (20261206) then 1..10

Which jobs waited, and behind what: `sluice simulate ... --jobs FILE` (docs/simulate.md).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--sluice", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"),
                                                 "release", "sluice"))
ap.add_argument("seeds", nargs="*", type=int, default=[20261206] + list(range(1, 11)))
args = ap.parse_args()


def replay(cluster, workload, policies):
    cmd = [args.sluice, "simulate", "--cluster", os.path.join(HERE, cluster),
           "--workload", workload, "--output", "json"]
    for p in policies:
        cmd += ["--policy", p]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["policies"]


def prod_p95(r):
    return r["priorities"].get("production", {}).get("wait_seconds", {}).get("p95", 0)


print("| seed | jobs | offered load | policy | GPU util | production p95 wait (s) | best-effort p95"
      " (s) | preemptions | partial-gang GPU-h | completed |")
print("| " + " | ".join(["---"] * 10) + " |")
summary = []
for seed in args.seeds:
    with tempfile.NamedTemporaryFile("w+", suffix=".csv") as f:
        gen = subprocess.run([sys.executable, os.path.join(HERE, "generate.py"), "--seed",
                              str(seed)], stdout=f, stderr=subprocess.PIPE, text=True, check=True)
        f.flush()
        load = gen.stderr.rsplit("offered load ", 1)[1].strip()
        today = replay("cluster.yaml", f.name, ["fifo", "priority", "fair"])
        v2 = replay("cluster-v2.yaml", f.name, ["fair"])["fair"]
    rows = [(k, today[k]) for k in ("fifo", "priority", "fair")] + [("fair v2", v2)]
    for name, r in rows:
        be = r["priorities"].get("best-effort", {}).get("wait_seconds", {}).get("p95", 0)
        print(f"| {seed} | {r['jobs']} | {load} | {name} | {100 * r['gpu_utilization']:.1f}% |"
              f" {prod_p95(r)} | {be} | {r['preemptions']} | {r['partial_gang_gpu_hours']} |"
              f" {r['completed']}/{r['jobs']} |")
    f_, fa, v = prod_p95(today["fifo"]), prod_p95(today["fair"]), prod_p95(v2)
    summary.append((seed, f_, fa, v, v2["gpu_utilization"], v2["completed"] == v2["jobs"]))

print()
print("| seed | fair v2 vs fifo, production p95 | fair v2 vs today's fair | fair v2 util | all done |")
print("| --- | --- | --- | --- | --- |")
for seed, f_, fa, v, util, done in summary:
    def pct(a, b):
        if b == 0:
            return "-"
        d = 100 * (1 - a / b)
        return f"{d:.0f}% lower" if d >= 0 else f"{-d:.0f}% higher"
    print(f"| {seed} | {pct(v, f_)} | {pct(v, fa)} | {100 * util:.1f}% | {'yes' if done else 'no'} |")
