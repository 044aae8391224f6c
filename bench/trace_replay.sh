#!/usr/bin/env bash
# Replays the real GPU-cluster traces of examples/simulate/traces (see docs/traces.md) under
# fifo, priority and fair, one `sluice simulate` per policy (so each gets its own wall time),
# and prints one table. VARIANT: `-` as the Cluster file says; `starve` with
# `starvationLimit: 30m`; `easy` with it and each job's recorded run time as its `estimate`
# (a timeout that is exact: EASY backfill's best case).
#   bench/trace_replay.sh                 # all replays
#   SLUICE=path/to/sluice TRACES=dir bench/trace_replay.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE=${SLUICE:-${CARGO_TARGET_DIR:-target}/release/sluice}
TRACES=${TRACES:-examples/simulate/traces}
C=examples/simulate/traces
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$SLUICE" ] || { echo "no sluice binary at $SLUICE (cargo build --release -p sluice-engine)" >&2; exit 2; }

# name | cluster file | trace | arrivals divided by | variant
REPLAYS="
openb-full|$C/openb.yaml|alibaba-openb-2023.csv|1|-
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|1|-
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|2|-
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|2|starve
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|2|easy
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|1|-
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|4|-
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|4|starve
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|4|easy
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|8|-
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|8|starve
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|8|easy
"
printf '%-11s %5s %-7s %-8s %6s %8s %8s %8s %6s %9s %4s %6s %9s %6s %7s\n' \
  REPLAY ARR/ VARIANT POLICY UTIL P50_S P95_S P99_S JAIN PARTIAL_GH DL PREEMP DONE NEVER WALL_S
echo "$REPLAYS" | while IFS='|' read -r name cluster trace factor variant; do
  [ -n "$name" ] || continue
  wl="$TRACES/$trace"
  if [ "$factor" != 1 ]; then
    wl="$TMP/$name-$factor.csv"
    python3 bench/trace_compress.py "$TRACES/$trace" "$wl" --factor "$factor" 2>/dev/null
  fi
  if [ "$variant" != - ]; then
    # The Cluster with starvationLimit: 30m (its scheduling line, if any, replaced).
    grep -v '^  scheduling:' "$cluster" >"$TMP/cluster-$variant.yaml"
    echo '  scheduling: {policy: fair, backfill: true, placement: binpack, starvationLimit: 30m}' \
      >>"$TMP/cluster-$variant.yaml"
    cluster="$TMP/cluster-$variant.yaml"
  fi
  if [ "$variant" = easy ]; then
    # Each job's estimate: its recorded run time.
    python3 - "$wl" "$TMP/estimated.csv" <<'PY'
import csv, sys
src, dst = sys.argv[1:]
with open(src, newline="") as f, open(dst, "w", newline="") as g:
    r = csv.DictReader(f)
    w = csv.DictWriter(g, r.fieldnames + ["estimate"])
    w.writeheader()
    for row in r:
        row["estimate"] = row["duration"]
        w.writerow(row)
PY
    wl="$TMP/estimated.csv"
  fi
  for policy in fifo priority fair; do
    start=$(date +%s.%N)
    "$SLUICE" simulate --cluster "$cluster" --workload "$wl" --policy "$policy" --output json >"$TMP/out.json"
    end=$(date +%s.%N)
    python3 - "$TMP/out.json" "$name" "$factor" "$policy" "$start" "$end" "$variant" <<'PY'
import json, sys
out, name, factor, policy, start, end, variant = sys.argv[1:]
p = json.load(open(out))["policies"][policy]
w = p["wait_seconds"]
s = lambda v: "-" if v is None else str(v)
print(f"{name:11} {('x' + factor):>5} {variant:7} {policy:8} {100 * p['gpu_utilization']:5.1f}% {s(w['p50']):>8} "
      f"{s(w['p95']):>8} {s(w['p99']):>8} {p['jain_fairness']:6.3f} {p['partial_gang_gpu_hours']:10} "
      f"{p['deadlocks']:4} {p['preemptions']:6} {p['completed']:>4}/{p['jobs']:<4} {p['never_started']:6} "
      f"{float(end) - float(start):7.2f}")
PY
  done
done
