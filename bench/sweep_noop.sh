#!/usr/bin/env bash
# Engine overhead of a sweep: TRIALS no-op trials (each `/bin/echo loss=1`, the cheapest
# program that reports the objective) at --parallel P with random search, next to the floor
# of `xargs -P P` spawning the same TRIALS `/bin/echo loss=1`, in one run. Each sweep uses a
# fresh $SLUICE_HOME. Prints a markdown table on standard output (progress on standard error),
# then a line saying how memory was measured and how loaded the machine was.
#
# Run from the repository's root:   bash bench/sweep_noop.sh [TRIALS...]   (default 10000)
#   e.g. `bash bench/sweep_noop.sh 1000 10000` for two sizes in one table.
# Knobs (environment): TRIALS="10000" (when no argument)  PARALLELISM=2  RUNS=3  NO_BUILD=1
#   SLUICE=PATH (default target/release/sluice; sluice-runtime is taken from beside it)
#   KEEP=1 keeps the homes (printed at the end)  RSS=gnu|proc (default: gnu if /usr/bin/time)
#
# As in bench/run_noop.sh: homes are deleted only at the end (ext4 slows down creating files
# next to many just-deleted ones); leave 30 s between two invocations. Wall time: bash's
# microsecond clock, median of RUNS.
# Peak RSS of the `sluice sweep` process, median of RUNS:
#   gnu:  GNU `/usr/bin/time -f %M` (wait4's ru_maxrss: the largest of the engine and the
#         children it waited for, i.e. its `sluice-runtime serve`; the echo trials are the
#         runtime's children, a few hundred KiB each);
#   proc: VmHWM from /proc/PID/status of the engine alone, read every 20 ms until it exits
#         (growth after the last read is missed).
set -euo pipefail
cd "$(dirname "$0")/.."

if (($#)); then TRIALS="$*"; else TRIALS=${TRIALS:-10000}; fi
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
SLUICE=$(realpath "$SLUICE")
if [[ -z ${RSS:-} ]]; then
  if [[ -x /usr/bin/time ]]; then RSS=gnu; else RSS=proc; fi
fi
case $RSS in
  gnu) [[ -x /usr/bin/time ]] || die "RSS=gnu needs GNU time (apt-get install -y time)"
       RSS_HOW="GNU /usr/bin/time -f %M (ru_maxrss of sluice sweep and its waited-for children)" ;;
  proc) RSS_HOW="VmHWM of the sluice sweep process from /proc/PID/status, read every 20 ms" ;;
  *) die "RSS must be gnu or proc" ;;
esac

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

RSS_FILE=$(mktemp)
ERR=$(mktemp)
HOMES=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
if [[ -n ${KEEP:-} ]]; then
  trap 'rm -f "$RSS_FILE" "$ERR"; log "homes kept in $HOMES"' EXIT
else
  trap 'rm -f "$RSS_FILE" "$ERR"; rm -rf "$HOMES"' EXIT
fi

# sweep N HOME: one sweep of N no-op trials; peak RSS (KiB) into $RSS_FILE.
sweep() {
  local cmd=("$SLUICE" sweep --name noop -p x=float:0:1 --objective minimize:loss
    --algorithm random --trials "$1" --parallel "$P" -- /bin/echo loss=1)
  if [[ $RSS == gnu ]]; then
    SLUICE_HOME=$2 /usr/bin/time -f '%M' -o "$RSS_FILE" "${cmd[@]}" >/dev/null 2>"$ERR"
    return
  fi
  SLUICE_HOME=$2 "${cmd[@]}" >/dev/null 2>"$ERR" &
  local pid=$! hwm=0 v
  while kill -0 "$pid" 2>/dev/null; do
    v=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
    [[ -n $v ]] && hwm=$v
    sleep 0.02
  done
  echo "$hwm" >"$RSS_FILE"
  wait "$pid"
}

load_start=$(cut -d' ' -f1-3 /proc/loadavg)
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
    sweep "$n" "$home" || { tail -n 20 "$ERR" >&2; die "sluice sweep of $n trials failed"; }
    t1=${EPOCHREALTIME//[.,]/}
    walls+=($((t1 - t0)))
    rss+=("$(tail -n 1 "$RSS_FILE")")
    log "  $(awk -v w=$((t1 - t0)) -v r="${rss[-1]}" 'BEGIN { printf "%.2f s, %.0f MiB", w/1e6, r/1024 }')"
  done
  wall_us=$(printf '%s\n' "${walls[@]}" | median)
  rss_kib=$(printf '%s\n' "${rss[@]}" | median)
  awk -v n="$n" -v p="$P" -v f="$floor_us" -v w="$wall_us" -v r="$rss_kib" 'BEGIN {
    printf "| %d | xargs -P%d /bin/echo loss=1 | %.2f | 1.00 | %.2f | |\n", n, p, f/1e6, f/1e3/n
    printf "| %d | sluice sweep (random, --parallel %d) | %.2f | %.2f | %.2f | %.0f |\n", n, p, w/1e6, w/f, w/1e3/n, r/1024
  }'
done
echo
echo "Median of $RUNS; peak RSS: $RSS_HOW. Machine: $(nproc) cores, load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
