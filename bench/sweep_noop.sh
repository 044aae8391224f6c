#!/usr/bin/env bash
# Engine overhead of a sweep: TRIALS no-op trials (each `/bin/echo loss=1`, the cheapest
# program that reports the objective) at --parallel P with random search, next to the floor
# of `xargs -P P` spawning the same TRIALS `/bin/echo loss=1`, in one run. Each sweep uses a
# fresh $SLUICE_HOME. Prints a markdown table on standard output (progress on standard error).
#
# Run from the repository's root:   bash bench/sweep_noop.sh
# Knobs (environment): TRIALS="1000 10000"  PARALLELISM=2  RUNS=3  NO_BUILD=1
#   SLUICE=PATH (default target/release/sluice; sluice-runtime is taken from beside it)
#
# As in bench/run_noop.sh: homes are deleted only at the end (ext4 slows down creating files
# next to many just-deleted ones); leave 30 s between two invocations. Wall time: bash's
# microsecond clock, median of RUNS. Peak RSS: GNU /usr/bin/time -f %M of the `sluice sweep`
# process (the engine; not the runtime, which runs the trials).
set -euo pipefail
cd "$(dirname "$0")/.."

TRIALS=${TRIALS:-"1000 10000"}
P=${PARALLELISM:-2}
RUNS=${RUNS:-3}
SLUICE=${SLUICE:-target/release/sluice}

log() { echo "sweep_noop: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine -p sluice-runtime"
  cargo build --release -q -p sluice-engine -p sluice-runtime || die "cargo build failed"
fi
[[ -x $SLUICE ]] || die "$SLUICE not found"
[[ -x /usr/bin/time ]] || die "GNU time is needed (apt-get install -y time)"
SLUICE=$(realpath "$SLUICE")

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

RSS_FILE=$(mktemp)
ERR=$(mktemp)
HOMES=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap 'rm -f "$RSS_FILE" "$ERR"; rm -rf "$HOMES"' EXIT

echo "| trials | what | wall s | ratio to xargs | ms/trial | engine peak RSS MiB |"
echo "| ---: | --- | ---: | ---: | ---: | ---: |"
for n in $TRIALS; do
  floor=()
  for _ in $(seq "$RUNS"); do
    t0=${EPOCHREALTIME//[.,]/}
    seq "$n" | xargs -P "$P" -I{} /bin/echo loss=1 >/dev/null
    t1=${EPOCHREALTIME//[.,]/}
    floor+=($((t1 - t0)))
  done
  floor_us=$(printf '%s\n' "${floor[@]}" | median)
  walls=(); rss=()
  for r in $(seq "$RUNS"); do
    home=$HOMES/sweep-$n-$r
    log "$n trials, run $r of $RUNS"
    t0=${EPOCHREALTIME//[.,]/}
    SLUICE_HOME=$home /usr/bin/time -f '%M' -o "$RSS_FILE" "$SLUICE" sweep --name noop \
      -p x=float:0:1 --objective minimize:loss --algorithm random --trials "$n" --parallel "$P" \
      -- /bin/echo loss=1 >/dev/null 2>"$ERR" \
      || { tail -n 20 "$ERR" >&2; die "sluice sweep of $n trials failed"; }
    t1=${EPOCHREALTIME//[.,]/}
    walls+=($((t1 - t0)))
    rss+=("$(tail -n 1 "$RSS_FILE")")
  done
  wall_us=$(printf '%s\n' "${walls[@]}" | median)
  rss_kib=$(printf '%s\n' "${rss[@]}" | median)
  awk -v n="$n" -v p="$P" -v f="$floor_us" -v w="$wall_us" -v r="$rss_kib" 'BEGIN {
    printf "| %d | xargs -P%d /bin/echo loss=1 | %.2f | 1.00 | %.2f | |\n", n, p, f/1e6, f/1e3/n
    printf "| %d | sluice sweep (random, --parallel %d) | %.2f | %.2f | %.2f | %.0f |\n", n, p, w/1e6, w/f, w/1e3/n, r/1024
  }'
done
