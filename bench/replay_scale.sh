#!/usr/bin/env bash
# Issue 18's replay at scale: 1,250 nodes x 8 GPUs (10,000 GPUs), 1,000 teams, jobs offered at
# 1.5x the cluster's capacity, gangs of 1-16 workers of 1-8 GPUs (seed 1, fixed), fair policy,
# without and with `starvationLimit: 30m`, and with it plus EASY backfill (each job's estimate
# twice its run time, as a timeout with that much slack). Targets: 1,000,000 jobs under 60 s and 2 GiB each.
# Each replay runs in its own process (its own peak RSS) and is stopped after TIMEOUT seconds
# (default 600), reported as "> TIMEOUT".
#
# Run from the repository's root:   bash bench/replay_scale.sh [SIZES...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-engine --example sim_scale
bin="${CARGO_TARGET_DIR:-target}/release/examples/sim_scale"
limit="${TIMEOUT:-600}"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(20000 50000 100000 1000000)
echo "| jobs | starvationLimit | cycles | replay s | peak RSS MiB | GPU util | wait p95 s |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for n in "${sizes[@]}"; do
  for starve in none 1800 easy; do
    args=("$n" 1.5 fair 16)
    case "$starve" in
      none) label=none ;;
      1800) args+=(1800); label=30m ;;
      easy) args+=(1800 2x); label="30m + EASY (2x)" ;;
    esac
    if out=$(timeout "$limit" "$bin" "${args[@]}"); then
      echo "$out" | awk -v s="$label" '{
        for (i = 1; i <= NF; i++) { split($i, p, "="); v[p[1]] = p[2] }
        printf "| %d | %s | %d | %s | %s | %s | %s |\n", v["jobs"], s, v["cycles"],
          v["replay_s"], v["peak_rss_mib"], v["utilization"], v["wait_p95_s"] }'
    else
      echo "| $n | $label | - | > $limit | - | - | - |"
    fi
  done
done
