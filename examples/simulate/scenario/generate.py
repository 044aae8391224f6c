#!/usr/bin/env python3
"""Writes jobs.csv, the workload of docs/scheduler-scenario.md, for cluster.yaml (32 A100s:
2 on-demand + 2 spot nodes of 8). Python standard library only; a fixed seed, so running it
again writes the same file:

    python3 generate.py > jobs.csv            # the documented workload (seed 20261204)
    python3 generate.py --seed 7 > other.csv  # the same mix, other random draws

A busy working day (8 hours of arrivals, times in seconds from 09:00) in a three-team lab,
about 1.2 times as much work asked as the 32 GPUs can do in those 8 hours:
- nlp and vision: production training as 2x4-GPU gangs, about 1.5 an hour each (so a day
  has a couple of dozen production gangs); nlp also runs default-priority 2x4 experiments,
  vision 1x4 dev runs. None of it is interruptible: it needs the 16 on-demand GPUs, and asks
  about as much as they can do in the day.
- research: hyperparameter sweeps (bursts of 12-32 one-GPU trials, interruptible,
  checkpointed every 5 min) and best-effort interruptible jobs (1-2 GPUs, 1-2 hours,
  checkpointed every 10 min) all day: more than the spot nodes can take, so that whatever is
  left of the on-demand pool can be borrowed.
Every training job checkpoints (production every 10 min, default every 15 min). Arrivals are
Poisson; durations uniform in the ranges below. Each stream is drawn with its own seeded
generator, so changing one rate leaves the others alone.
"""
import argparse
import random
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--seed", type=int, default=20261204)
SEED = ap.parse_args().seed
HOURS = 8  # arrivals span this many hours
rows = []


def job(submit, team, workers, gpu, duration, priority, interruptible, ckpt):
    # An A100 node here has 96 CPUs and 1,000Gi for 8 GPUs: each GPU comes with 12 and 120Gi.
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


# nlp production fine-tunes: a 2x4 gang about every 40 minutes, 20-40 min long.
rng, ts = stream("nlp-production", 1.5)
for t in ts:
    job(t, "nlp", 2, 4, minutes(rng, 20, 40), "production", False, 600)
# nlp experiments: a 2x4 gang about every 2.5 hours, 30-60 min, at the default priority.
rng, ts = stream("nlp-default", 0.4)
for t in ts:
    job(t, "nlp", 2, 4, minutes(rng, 30, 60), "default", False, 900)
# vision production: a 2x4 gang about every 40 minutes, 20-40 min.
rng, ts = stream("vision-production", 1.5)
for t in ts:
    job(t, "vision", 2, 4, minutes(rng, 20, 40), "production", False, 600)
# vision dev runs: a 4-GPU job about every 2 hours, 20-60 min.
rng, ts = stream("vision-default", 0.5)
for t in ts:
    job(t, "vision", 1, 4, minutes(rng, 20, 60), "default", False, 900)
# research sweeps: one about every 40 minutes; 12-32 trials of 1 GPU, 10-40 min each,
# submitted together as a sweep does (its parallelism is left to the scheduler).
rng, ts = stream("research-sweeps", 1.5)
for t in ts:
    for _ in range(rng.randint(12, 32)):
        job(t, "research", 1, 1, minutes(rng, 10, 40), "default", True, 300)
# research best-effort: about 4.5 an hour until an hour before the end, 1-2 GPUs, 1-2 hours.
rng, ts = stream("research-best-effort", 4.5, end=HOURS - 1)
for t in ts:
    job(t, "research", 1, rng.choice((1, 2)), minutes(rng, 60, 120), "best-effort", True, 600)

rows.sort(key=lambda r: (r[0], r[1]))
spot = sum(r[2] * r[3] * r[6] for r in rows if r[8] == "true") / 3600
rest = sum(r[2] * r[3] * r[6] for r in rows if r[8] == "false") / 3600
print(f"seed {SEED}: {len(rows)} jobs; GPU-hours asked: {rest:.1f} non-interruptible (16 on-demand"
      f" GPUs: {16 * HOURS} in {HOURS} h), {spot:.1f} interruptible (any GPU); {HOURS} h of arrivals"
      f" x 32 GPUs = {32 * HOURS}: offered load {(rest + spot) / (32 * HOURS):.2f}",
      file=sys.stderr)
print("submit,team,workers,gpu,cpu,memory,duration,priority,interruptible,checkpoint_every,flavor")
for r in rows:
    print(",".join(str(x) for x in r) + ",")
