#!/usr/bin/env bash
# TPE proposal time with many finished trials (target: under 10 ms at 10,000), and TPE's
# quality on the test functions (Branin, Hartmann-6, the log-lr function) over 20 seeds of
# 50 sequential trials, next to random search. Prints a markdown table.
#
# Run from the repository's root:   bash bench/tpe_speed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-engine --example tpe_speed
echo "| observations | median ms per proposal | slowest of 25, ms |"
echo "| ---: | ---: | ---: |"
for n in 1000 10000; do
  target/release/examples/tpe_speed "$n" | awk '{
    for (i = 1; i <= NF; i++) { split($i, p, "="); v[p[1]] = p[2] }
    printf "| %d | %.2f | %.2f |\n", v["observations"], v["median_ms"], v["max_ms"] }'
done
echo
echo "| function (minimized) | TPE median best, 20 seeds x 50 trials | random search | target |"
echo "| --- | ---: | ---: | ---: |"
cargo test --release -q -p sluice-engine tpe_beats -- --nocapture 2>&1 \
  | awk 'match($0, /(branin|hartmann6|lr): tpe .*/) {
    $0 = substr($0, RSTART, RLENGTH); sub(":", "", $1); printf "| %s | %s | %s | %s |\n", $1, $3, $5, $7 }'
