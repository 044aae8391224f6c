#!/usr/bin/env bash
# Replays the real GPU-cluster traces of examples/simulate/traces (see docs/traces.md) under
# fifo, priority and fair, one `sluice simulate` per policy (so each gets its own wall time),
# and prints one table.
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

# name | cluster file | trace | arrivals divided by
REPLAYS="
openb-full|$C/openb.yaml|alibaba-openb-2023.csv|1
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|1
openb-64|$C/openb-64.yaml|alibaba-openb-2023.csv|2
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|1
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|4
kalos|$C/kalos.yaml|acme-kalos-2023-gangs.csv|8
"
printf '%-11s %5s %-8s %6s %8s %8s %8s %6s %9s %4s %6s %9s %6s %7s\n' \
  REPLAY ARR/ POLICY UTIL P50_S P95_S P99_S JAIN PARTIAL_GH DL PREEMP DONE NEVER WALL_S
echo "$REPLAYS" | while IFS='|' read -r name cluster trace factor; do
  [ -n "$name" ] || continue
  wl="$TRACES/$trace"
  if [ "$factor" != 1 ]; then
    wl="$TMP/$name-$factor.csv"
    python3 bench/trace_compress.py "$TRACES/$trace" "$wl" --factor "$factor" 2>/dev/null
  fi
  for policy in fifo priority fair; do
    start=$(date +%s.%N)
    "$SLUICE" simulate --cluster "$cluster" --workload "$wl" --policy "$policy" --output json >"$TMP/out.json"
    end=$(date +%s.%N)
    python3 - "$TMP/out.json" "$name" "$factor" "$policy" "$start" "$end" <<'PY'
import json, sys
out, name, factor, policy, start, end = sys.argv[1:]
p = json.load(open(out))["policies"][policy]
w = p["wait_seconds"]
s = lambda v: "-" if v is None else str(v)
print(f"{name:11} {('x' + factor):>5} {policy:8} {100 * p['gpu_utilization']:5.1f}% {s(w['p50']):>8} "
      f"{s(w['p95']):>8} {s(w['p99']):>8} {p['jain_fairness']:6.3f} {p['partial_gang_gpu_hours']:10} "
      f"{p['deadlocks']:4} {p['preemptions']:6} {p['completed']:>4}/{p['jobs']:<4} {p['never_started']:6} "
      f"{float(end) - float(start):7.2f}")
PY
  done
done
