#!/usr/bin/env python3
"""What sluice-runtime adds to starting a program, per attempt.

Runs the same no-op program (/usr/bin/true) N times one after another, three ways, and
prints a markdown table of milliseconds per attempt:

- direct:  the program spawned by this script (the floor);
- exec:    `sluice-runtime exec DIR`, one runtime process per attempt (how a pod runs);
- serve:   one `sluice-runtime serve` handed one attempt at a time, waiting for each to end
           (how the local engine runs attempts).

Each attempt has a prepared folder with its launch.json, as the engine writes it, and
checkpointing on (the default for steps), so the runtime also looks for a checkpoint to
restore and syncs an empty folder at the end.

Run from the repository's root:  python3 bench/runtime_overhead.py [N]   (default 500)
Needs the release build: cargo build --release -p sluice-runtime
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
RUNTIME = os.path.abspath(os.environ.get("SLUICE_RUNTIME", "target/release/sluice-runtime"))
if not os.access(RUNTIME, os.X_OK):
    sys.exit(f"{RUNTIME} not found: cargo build --release -p sluice-runtime")

work = tempfile.mkdtemp(prefix="sluice-rt-bench.")
objects = f"file://{work}/objects"


def prepare(tag, i):
    d = os.path.join(work, tag, f"s{i}.1")
    os.makedirs(d)
    launch = {
        "argv": ["/usr/bin/true"],
        "workdir": work,
        "env": {"SLUICE_STEP": f"s{i}", "SLUICE_ATTEMPT": "1"},
        "timeout_ms": None,
        "grace_ms": 30000,
        "inputs": [],
        "outputs": [],
        "output_dir": os.path.join(d, "out"),
        "checkpoint_dir": os.path.join(d, "checkpoint"),
        "checkpoint": {"every_ms": 60000, "prefix": f"teams/t/checkpoints/r/{tag}{i}", "keep": 3},
        "workers": 1,
        "objects": objects,
        "outputs_key": f"teams/t/runs/r/s{i}/1/outputs",
        "metrics_stdout": True,
    }
    with open(os.path.join(d, "launch.json"), "w") as f:
        json.dump(launch, f)
    return d


def check(d):
    with open(os.path.join(d, "result.json")) as f:
        end = json.load(f)["end"]
    if end != "Succeeded":
        sys.exit(f"{d}: {end}")


try:
    dirs = {tag: [prepare(tag, i) for i in range(N)] for tag in ("exec", "serve")}

    t = time.perf_counter()
    for _ in range(N):
        subprocess.run(["/usr/bin/true"], check=True)
    direct = (time.perf_counter() - t) / N

    t = time.perf_counter()
    for d in dirs["exec"]:
        subprocess.run([RUNTIME, "exec", d], check=True)
    execd = (time.perf_counter() - t) / N
    for d in dirs["exec"]:
        check(d)

    server = subprocess.Popen(
        [RUNTIME, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    t = time.perf_counter()
    for i, d in enumerate(dirs["serve"]):
        server.stdin.write(f"exec\t1\ts{i}\t{d}\n")
        server.stdin.flush()
        reply = server.stdout.readline()
        if not reply.startswith("ended"):
            sys.exit(f"serve answered {reply!r}")
    served = (time.perf_counter() - t) / N
    server.stdin.close()
    server.wait()
    for d in dirs["serve"]:
        check(d)

    print(f"| way ({N} attempts of /usr/bin/true, one after another) | ms per attempt | overhead over direct, ms |")
    print("| --- | ---: | ---: |")
    print(f"| direct spawn | {direct * 1e3:.2f} | |")
    print(f"| `sluice-runtime exec DIR` (a runtime process per attempt) | {execd * 1e3:.2f} | {(execd - direct) * 1e3:.2f} |")
    print(f"| `sluice-runtime serve` (one runtime, an attempt at a time) | {served * 1e3:.2f} | {(served - direct) * 1e3:.2f} |")
finally:
    shutil.rmtree(work, ignore_errors=True)
