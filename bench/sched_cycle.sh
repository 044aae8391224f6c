#!/usr/bin/env bash
# One scheduling cycle (`admission::cycle`) on 1,250 nodes x 8 GPUs, 1,000 teams, half the
# GPUs busy, with 1k / 10k / 100k waiting steps (target: under 50 ms at 100k). Prints a
# markdown table of the median and slowest of REPS repetitions (default 5; 100k uses 3).
#
# Run from the repository's root:   bash bench/sched_cycle.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-engine --example sched_cycle
bin="${CARGO_TARGET_DIR:-target}/release/examples/sched_cycle"
reps="${1:-5}"
echo "| waiting | admitted | preempted | median ms | slowest ms | repetitions |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for n in 1000 10000 100000; do
  r="$reps"
  [ "$n" -lt 100000 ] || r=3
  "$bin" "$n" "$r" | awk '{
    for (i = 1; i <= NF; i++) { split($i, p, "="); v[p[1]] = p[2] }
    printf "| %d | %d | %d | %.2f | %.2f | %d |\n", v["waiting"], v["admitted"], v["preempted"], v["median_ms"], v["max_ms"], v["reps"] }'
done
