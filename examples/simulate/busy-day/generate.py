#!/usr/bin/env python3
"""Writes jobs.csv, the workload of docs/scheduler-busy-day.md, for cluster.yaml and
cluster-v2.yaml (16 A100s: 2 on-demand + 2 spot nodes of 4). Python standard library only; a
fixed seed (chosen, with every rate and range below, before any replay was run), so running
it again writes the same file:

    python3 generate.py > jobs.csv            # the documented workload (seed 20261206)
    python3 generate.py --seed 7 > other.csv  # the same mix, other random draws

A busy working day (8 hours of arrivals, times in seconds from 09:00) for three teams that
all run best-effort sweeps, and two of which (nlp, vision) also train production models:
- nlp and vision production: 2x2-GPU gangs, about one an hour each, 30-50 min, checkpointed
  every 10 min; not interruptible, so they need the 8 on-demand GPUs.
- nlp and vision dev runs: one 2-GPU job about every 2 hours each, 30-60 min, default class,
  not interruptible.
- nlp, vision and research best-effort sweeps: a burst of 8-16 one-GPU trials about every 75
  minutes per team, 20-40 min each, interruptible, checkpointed every 5 min: together more
  than the spot nodes can take, so they also borrow idle on-demand GPUs.
About 1.3 times the work the 16 GPUs can do in the 8 hours is asked.
"""
import argparse
import random
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=20261206)
SEED = ap.parse_args().seed
HOURS = 8
rows = []


def job(submit, team, workers, gpu, duration, priority, interruptible, ckpt):
    # A node here has 48 CPUs and 500Gi for 4 GPUs: each GPU comes with 12 and 120Gi.
    rows.append((int(submit), team, workers, gpu, 12 * gpu, f"{120 * gpu}Gi", int(duration),
                 priority, "true" if interruptible else "false", ckpt))


def stream(name, per_hour, start=0.0, end=HOURS):
    """A seeded generator and the Poisson arrival times (s) of one stream of jobs."""
    rng = random.Random(f"{SEED}-{name}")
    times, t = [], start * 3600
    while True:
        t += rng.expovariate(per_hour / 3600)
        if t >= end * 3600:
            return rng, times
        times.append(t)


def minutes(rng, lo, hi):
    return 60 * rng.uniform(lo, hi)


for team in ("nlp", "vision"):
    rng, ts = stream(f"{team}-production", 1.0)
    for t in ts:
        job(t, team, 2, 2, minutes(rng, 30, 50), "production", False, 600)
    rng, ts = stream(f"{team}-default", 0.5)
    for t in ts:
        job(t, team, 1, 2, minutes(rng, 30, 60), "default", False, 900)
for team in ("nlp", "vision", "research"):
    rng, ts = stream(f"{team}-sweeps", 0.8)
    for t in ts:
        for _ in range(rng.randint(8, 16)):
            job(t, team, 1, 1, minutes(rng, 20, 40), "best-effort", True, 300)

rows.sort(key=lambda r: (r[0], r[1]))
gpuh = lambda pred: sum(r[2] * r[3] * r[6] for r in rows if pred(r)) / 3600  # noqa: E731
prod = gpuh(lambda r: r[7] == "production")
rest = gpuh(lambda r: r[8] == "false")
spot = gpuh(lambda r: r[8] == "true")
print(f"seed {SEED}: {len(rows)} jobs ({sum(r[7] == 'production' for r in rows)} production"
      f" gangs); GPU-hours asked: {rest:.1f} non-interruptible ({prod:.1f} production; 8"
      f" on-demand GPUs: {8 * HOURS} in {HOURS} h), {spot:.1f} interruptible; {HOURS} h x 16"
      f" GPUs = {16 * HOURS}: offered load {(rest + spot) / (16 * HOURS):.2f}", file=sys.stderr)
print("submit,team,workers,gpu,cpu,memory,duration,priority,interruptible,checkpoint_every,flavor")
for r in rows:
    print(",".join(str(x) for x in r) + ",")
