#!/usr/bin/env bash
# Engine overhead on a local machine: N independent no-op steps (`run: "true"`) at
# `parallelism: P`, next to the floor of `xargs -P P` spawning the same N `sh -c true`, in one
# run. Each sluice run uses a fresh $SLUICE_HOME. Prints a markdown table on standard output
# (progress on standard error); exits non-zero if a run fails.
#
# Run from the repository's root:   bash bench/run_noop.sh
# Knobs (environment): STEPS="1000 10000"  PARALLELISM=2  RUNS=3  NO_BUILD=1
#   SLUICE=PATH (default target/release/sluice; sluice-runtime is taken from beside it)
#   KEEP=1 keeps the homes (printed at the end) for a look at what a run leaves
#   CLUSTER=1 also runs each pipeline with `--cluster` (one virtual node of this machine's
#     cores): the scheduler's cycle and its rows, next to the machine's pool, in the same run
#
# Homes are fresh folders of one temporary folder, deleted only at the end: ext4 slows down
# creating files next to many just-deleted ones (it skips "recently deleted" inodes), and
# deleting a 10,000-step home between runs made the next run 2.5x slower. For the same
# reason, leave 30 s between two invocations (the window in which ext4 avoids reusing
# freed inodes).
#
# Wall time: bash's microsecond clock around the command, median of RUNS. Peak RSS: GNU
# /usr/bin/time -f %M of the `sluice run` process (its own, not the runtimes').
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-"1000 10000"}
P=${PARALLELISM:-2}
RUNS=${RUNS:-3}
SLUICE=${SLUICE:-target/release/sluice}
OUT=bench/out

log() { echo "run_noop: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine -p sluice-runtime"
  cargo build --release -q -p sluice-engine -p sluice-runtime || die "cargo build failed"
fi
[[ -x $SLUICE ]] || die "$SLUICE not found"
[[ -x /usr/bin/time ]] || die "GNU time is needed (apt-get install -y time)"
mkdir -p "$OUT"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# gen N FILE: a pipeline of N independent `true` steps at parallelism P.
gen() {
  python3 - "$1" "$2" "$P" <<'PY'
import sys
n, path, p = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with open(path, "w") as f:
    f.write(f"apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata:\n  name: noop-{n}\nspec:\n  parallelism: {p}\n  steps:\n")
    for i in range(n):
        f.write(f"    - name: s{i}\n      run: \"true\"\n")
PY
}

RSS_FILE=$(mktemp)
ERR=$(mktemp)
HOMES=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
if [[ -n ${KEEP:-} ]]; then
  trap 'rm -f "$RSS_FILE" "$ERR"; log "homes kept in $HOMES"' EXIT
else
  trap 'rm -f "$RSS_FILE" "$ERR"; rm -rf "$HOMES"' EXIT
fi

echo "| steps | what | wall s | ratio to xargs | ms/step | engine peak RSS MiB |"
echo "| ---: | --- | ---: | ---: | ---: | ---: |"
for n in $STEPS; do
  file=$OUT/noop-$n.yaml
  gen "$n" "$file"
  floor=()
  for _ in $(seq "$RUNS"); do
    t0=${EPOCHREALTIME//[.,]/}
    seq "$n" | xargs -P "$P" -I{} sh -c true
    t1=${EPOCHREALTIME//[.,]/}
    floor+=($((t1 - t0)))
  done
  floor_us=$(printf '%s\n' "${floor[@]}" | median)
  walls=(); rss=()
  for r in $(seq "$RUNS"); do
    home=$HOMES/noop-$n-$r
    log "$n steps, run $r of $RUNS"
    t0=${EPOCHREALTIME//[.,]/}
    SLUICE_HOME=$home /usr/bin/time -f '%M' -o "$RSS_FILE" "$SLUICE" run "$file" >/dev/null 2>"$ERR" \
      || { cat "$ERR" >&2; die "sluice run $file failed"; }
    t1=${EPOCHREALTIME//[.,]/}
    walls+=($((t1 - t0)))
    rss+=("$(tail -n 1 "$RSS_FILE")")
  done
  wall_us=$(printf '%s\n' "${walls[@]}" | median)
  rss_kib=$(printf '%s\n' "${rss[@]}" | median)
  awk -v n="$n" -v p="$P" -v f="$floor_us" -v w="$wall_us" -v r="$rss_kib" 'BEGIN {
    printf "| %d | xargs -P%d sh -c true | %.2f | 1.00 | %.2f | |\n", n, p, f/1e6, f/1e3/n
    printf "| %d | sluice run (parallelism %d) | %.2f | %.2f | %.2f | %.0f |\n", n, p, w/1e6, w/f, w/1e3/n, r/1024
  }'
  if [[ -n ${CLUSTER:-} ]]; then
    cluster=$OUT/noop-cluster.yaml
    printf 'apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: here}\nspec:\n  pools:\n    - {name: here, nodes: 1, resources: {cpu: %d, memory: 64Gi}}\n' "$(nproc)" > "$cluster"
    walls=(); rss=()
    for r in $(seq "$RUNS"); do
      home=$HOMES/noop-cluster-$n-$r
      log "$n steps with --cluster, run $r of $RUNS"
      t0=${EPOCHREALTIME//[.,]/}
      SLUICE_HOME=$home /usr/bin/time -f '%M' -o "$RSS_FILE" "$SLUICE" run "$file" --cluster "$cluster" >/dev/null 2>"$ERR" \
        || { cat "$ERR" >&2; die "sluice run $file --cluster failed"; }
      t1=${EPOCHREALTIME//[.,]/}
      walls+=($((t1 - t0)))
      rss+=("$(tail -n 1 "$RSS_FILE")")
    done
    wall_us=$(printf '%s\n' "${walls[@]}" | median)
    rss_kib=$(printf '%s\n' "${rss[@]}" | median)
    awk -v n="$n" -v p="$P" -v f="$floor_us" -v w="$wall_us" -v r="$rss_kib" 'BEGIN {
      printf "| %d | sluice run --cluster (parallelism %d) | %.2f | %.2f | %.2f | %.0f |\n", n, p, w/1e6, w/f, w/1e3/n, r/1024
    }'
  fi
done
