#!/usr/bin/env bash
# How `sluice lint --plan` scales from 1,000 to 100,000 steps, next to the floor of reading
# the same file (`cat`). Prints a markdown table. Run from the repository's root:
#   bash bench/lint_scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-engine
SLUICE=target/release/sluice
OUT=bench/out
mkdir -p "$OUT"
SIZES=${SIZES:-"1000 10000 100000"}
RUNS=${RUNS:-3}

# median of RUNS runs of a command: prints "wall_seconds peak_rss_kib"
measure() {
  python3 - "$RUNS" "$@" <<'PY'
import os, resource, subprocess, sys, time
runs = int(sys.argv[1]); cmd = sys.argv[2:]
walls, rss = [], []
for _ in range(runs):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.dup2(fd, 2)
        os.execvp(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    walls.append(time.perf_counter() - t)
    rss.append(usage.ru_maxrss)
    if os.waitstatus_to_exitcode(status) != 0:
        print(f"command failed: {' '.join(cmd)}", file=sys.stderr); sys.exit(1)
walls.sort(); rss.sort()
print(f"{walls[len(walls)//2]:.3f} {rss[len(rss)//2]}")
PY
}

echo "| shape | steps | file MiB | sluice lint --plan (s) | peak RSS (MiB) | µs/step | cat (s) |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for shape in fan chain; do
  for n in $SIZES; do
    f="$OUT/$shape-$n.yaml"
    python3 bench/gen_pipeline.py --shape "$shape" --steps "$n" > "$f"
    read -r wall rss < <(measure "$SLUICE" lint --plan --output json "$f")
    read -r cwall _ < <(measure cat "$f")
    python3 -c "
import os,sys
shape,n,f,wall,rss,cwall=sys.argv[1:]
n=int(n); wall=float(wall)
print(f'| {shape} | {n:,} | {os.path.getsize(f)/2**20:.1f} | {wall:.2f} | {int(rss)/1024:.0f} | {wall*1e6/n:.1f} | {float(cwall):.3f} |')
" "$shape" "$n" "$f" "$wall" "$rss" "$cwall"
  done
done
