#!/usr/bin/env bash
# `sluice simulate`'s replay at scale: 1,250 nodes x 8 GPUs, 1,000 teams, 10k / 100k / 1M
# generated jobs under the fair policy (target for 1M: under 60 s and 2 GiB peak RSS).
# Prints a markdown table. Each size runs in its own process, so peak RSS is its own.
#
# Run from the repository's root:   bash bench/simulate_scale.sh [SIZES...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sluice-engine --example sim_scale
bin="${CARGO_TARGET_DIR:-target}/release/examples/sim_scale"
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 100000 1000000)
echo "| jobs | events | cycles | generate s | replay s | peak RSS MiB | GPU util | wait p95 s |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for n in "${sizes[@]}"; do
  "$bin" "$n" | awk '{
    for (i = 1; i <= NF; i++) { split($i, p, "="); v[p[1]] = p[2] }
    printf "| %d | %d | %d | %s | %s | %s | %s | %s |\n", v["jobs"], v["events"], v["cycles"],
      v["generate_s"], v["replay_s"], v["peak_rss_mib"], v["utilization"], v["wait_p95_s"] }'
done
