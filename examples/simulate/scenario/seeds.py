#!/usr/bin/env python3
"""The robustness table of docs/scheduler-scenario.md: the scenario's generator with other
seeds, each replayed by `sluice simulate --output json` under fifo, priority and fair.
Python standard library only.

    python3 examples/simulate/scenario/seeds.py [--sluice PATH] [--cluster FILE] [SEED ...]
    # seeds default to 1..10; the Cluster file to examples/simulate/scenario/cluster.yaml
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
ap.add_argument("--cluster", default=os.path.join(HERE, "cluster.yaml"))
ap.add_argument("seeds", nargs="*", type=int, default=list(range(1, 11)))
args = ap.parse_args()

print("| seed | jobs | prod. jobs | offered load | fifo util | fifo prod p95 (s) | fifo partial GPU-h"
      " | fifo deadlocks / never started | priority util | priority prod p95 | fair util"
      " | fair prod p95 | fair vs fifo prod p95 | fair Jain | fifo Jain |")
print("| " + " | ".join(["---"] * 15) + " |")
for seed in args.seeds:
    with tempfile.NamedTemporaryFile("w+", suffix=".csv") as f:
        gen = subprocess.run([sys.executable, os.path.join(HERE, "generate.py"), "--seed", str(seed)],
                             stdout=f, stderr=subprocess.PIPE, text=True, check=True)
        f.flush()
        load = gen.stderr.rsplit("offered load ", 1)[1].strip()
        out = subprocess.run([args.sluice, "simulate", "--cluster", args.cluster,
                              "--workload", f.name, "--output", "json"],
                             capture_output=True, text=True, check=True)
        f.seek(0)
        prod = sum(1 for line in f if ",production," in line)
    p = json.loads(out.stdout)["policies"]
    pp = {k: v["priorities"].get("production", {}).get("wait_seconds", {}).get("p95") for k, v in p.items()}
    cut = "-" if not pp["fifo"] else f"{100 * (1 - pp['fair'] / pp['fifo']):.0f}%"
    u = {k: f"{100 * v['gpu_utilization']:.1f}%" for k, v in p.items()}
    f_ = p["fifo"]
    print(f"| {seed} | {f_['jobs']} | {prod} | {load} | {u['fifo']} | {pp['fifo']} | {f_['partial_gang_gpu_hours']}"
          f" | {f_['deadlocks']} / {f_['never_started']} | {u['priority']} | {pp['priority']} | {u['fair']}"
          f" | {pp['fair']} | {cut} | {p['fair']['jain_fairness']} | {f_['jain_fairness']} |")
