#!/usr/bin/env bash
# How `sluice lint --plan` scales from 1,000 to 100,000 steps, next to the floor of reading
# the same file (`cat`). Builds the release binary, generates the pipelines into bench/out/
# (gitignored) with bench/gen_pipeline.py, and prints a markdown table on standard output
# (progress goes to standard error). Exits non-zero if a lint fails.
#
# Run from the repository's root:   bash bench/lint_scale.sh
# Knobs (environment): SIZES="1000 10000 100000"  SHAPES="fan chain"  RUNS=3  NO_BUILD=1
#   SLUICE=PATH (default target/release/sluice)
#   TIMER=gnu|python (default: gnu when /usr/bin/time exists)
#
# Each number is the median of RUNS runs (wall and peak RSS are medians taken separately).
# Wall time comes from bash's microsecond clock around the command; peak RSS from GNU
# `/usr/bin/time -f %M` when present (`apt-get install -y time`), else both from python3's
# os.wait4 (resource usage of the child).
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"1000 10000 100000"}
SHAPES=${SHAPES:-"fan chain"}
RUNS=${RUNS:-3}
SLUICE=${SLUICE:-target/release/sluice}
OUT=bench/out

log() { echo "lint_scale: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine"
  cargo build --release -q -p sluice-engine || die "cargo build failed"
fi
[[ -x $SLUICE ]] || die "$SLUICE not found after the build"
mkdir -p "$OUT"

if [[ -n ${TIMER:-} ]]; then
  [[ $TIMER == gnu || $TIMER == python ]] || die "TIMER must be gnu or python"
elif [[ -x /usr/bin/time && -n ${EPOCHREALTIME:-} ]]; then
  TIMER=gnu
else
  TIMER=python
  log "/usr/bin/time not found: measuring with python3's os.wait4 instead"
fi

ERR=$(mktemp)
RSS_FILE=$(mktemp)
trap 'rm -f "$ERR" "$RSS_FILE"' EXIT

# Runs CMD once with stdout to /dev/null and stderr to $ERR. Sets WALL_US and RSS_KIB.
# Returns the command's exit status.
run_once() {
  local rc=0
  if [[ $TIMER == gnu ]]; then
    local t0=${EPOCHREALTIME//[.,]/}
    /usr/bin/time -f '%M' -o "$RSS_FILE" "$@" >/dev/null 2>"$ERR" || rc=$?
    local t1=${EPOCHREALTIME//[.,]/}
    WALL_US=$((t1 - t0))
    RSS_KIB=$(tail -n 1 "$RSS_FILE")
  else
    local res
    res=$(python3 - "$@" 2>"$ERR" <<'PY'
import os, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    try:
        os.execvp(sys.argv[1], sys.argv[1:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t
print(round(wall * 1e6), usage.ru_maxrss, os.waitstatus_to_exitcode(status))
PY
    ) || return 1
    read -r WALL_US RSS_KIB rc <<<"$res"
  fi
  return "$rc"
}

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# measure CMD...: RUNS runs; sets MED_WALL_US and MED_RSS_KIB, or stops the script with the
# command's standard error if any run fails.
measure() {
  local walls=() rsss=() i rc
  for ((i = 0; i < RUNS; i++)); do
    rc=0
    run_once "$@" || rc=$?
    if ((rc != 0)); then
      log "FAILED (exit $rc): $*"
      sed 's/^/  | /' "$ERR" | head -n 40 >&2
      exit 1
    fi
    walls+=("$WALL_US")
    rsss+=("$RSS_KIB")
  done
  MED_WALL_US=$(median "${walls[@]}")
  MED_RSS_KIB=$(median "${rsss[@]}")
}

# row LABEL STEPS FILE: one markdown row from MED_WALL_US and MED_RSS_KIB.
row() {
  python3 - "$@" "$MED_WALL_US" "$MED_RSS_KIB" <<'PY'
import os, sys
label, steps, path, wall_us, rss_kib = sys.argv[1:]
steps, wall_us, rss_kib = int(steps), int(wall_us), int(rss_kib)
mib = os.path.getsize(path) / 2**20
print(f"| {label} | {steps:,} | {mib:.1f} | {wall_us / 1e6:.3f} | {rss_kib / 1024:.0f} | {wall_us / steps:.2f} |")
PY
}

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
echo "sluice lint --plan --output json FILE > /dev/null, median of $RUNS runs;" \
  "commit $commit$dirty; $(nproc) cores; timer: $TIMER; a \`cat\` row is the floor of reading the file."
echo
echo "| shape | steps | file MiB | wall s | peak RSS MiB | µs/step |"
echo "|---|---:|---:|---:|---:|---:|"
for shape in $SHAPES; do
  for n in $SIZES; do
    f="$OUT/$shape-$n.yaml"
    log "generating $f"
    python3 bench/gen_pipeline.py --shape "$shape" --steps "$n" >"$f"
    log "timing sluice lint on $f"
    measure "$SLUICE" lint --plan --output json "$f"
    row "$shape" "$n" "$f"
    measure cat "$f"
    row "$shape: \`cat\` floor" "$n" "$f"
  done
done
log "done"
