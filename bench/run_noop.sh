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
#   BEFORE=PATH also times another build of sluice (its sluice-runtime beside it), e.g. the
#     release binary of an older commit, in the same run: "before" next to "after"
#     (BEFORE_LABEL names its row, e.g. BEFORE_LABEL="before, 2aede88")
#   POSTGRES=URL also runs each pipeline with its state on PostgreSQL (`--state URL`), a fresh
#     database per run created and dropped with psql, e.g.
#     POSTGRES=postgres://postgres@127.0.0.1:5432/postgres
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
[[ -z ${BEFORE:-} || -x $BEFORE ]] || die "BEFORE=$BEFORE is not an executable"
[[ -z ${POSTGRES:-} ]] || command -v psql >/dev/null || die "POSTGRES needs psql"
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

# print_floor N FLOOR_US: the xargs row.
print_floor() {
  awk -v n="$1" -v p="$P" -v f="$2" 'BEGIN {
    printf "| %d | xargs -P%d sh -c true | %.2f | 1.00 | %.2f | |\n", n, p, f/1e6, f/1e3/n
  }'
}

# once TAG COMMAND...: one run of COMMAND with a fresh home (and, where COMMAND holds @PG@, a
# fresh PostgreSQL database in its place); appends its wall time and peak RSS to WALL[TAG]
# and RSS[TAG].
declare -A WALL RSS
once() {
  local tag=$1; shift
  local home=$HOMES/noop-$tag-$n-$r db="" cmd=("$@")
  if [[ " $* " == *" @PG@ "* ]]; then
    db=sluice_bench_${tag}_${n}_${r}_$$
    PGOPTIONS="-c client_min_messages=warning" psql -q "$POSTGRES" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null \
      || die "cannot create database $db at $POSTGRES"
    cmd=("${cmd[@]/@PG@/${POSTGRES%/*}/$db}")
  fi
  log "$n steps, $tag, run $r of $RUNS"
  local t0 t1
  t0=${EPOCHREALTIME//[.,]/}
  SLUICE_HOME=$home /usr/bin/time -f '%M' -o "$RSS_FILE" "${cmd[@]}" >/dev/null 2>"$ERR" \
    || { cat "$ERR" >&2; die "${cmd[*]} failed"; }
  t1=${EPOCHREALTIME//[.,]/}
  WALL[$tag]+="$((t1 - t0)) "
  RSS[$tag]+="$(tail -n 1 "$RSS_FILE") "
  [[ -z $db ]] || PGOPTIONS="-c client_min_messages=warning" psql -q "$POSTGRES" -c "DROP DATABASE $db" >/dev/null || true
}

# row N FLOOR_US TAG LABEL: the median row of TAG's runs.
row() {
  local wall_us rss_kib
  wall_us=$(printf '%s\n' ${WALL[$3]} | median)
  rss_kib=$(printf '%s\n' ${RSS[$3]} | median)
  awk -v n="$1" -v l="$4" -v f="$2" -v w="$wall_us" -v r="$rss_kib" 'BEGIN {
    printf "| %d | %s | %.2f | %.2f | %.2f | %.0f |\n", n, l, w/1e6, w/f, w/1e3/n, r/1024
  }'
}

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
  print_floor "$n" "$floor_us"
  cluster=$OUT/noop-cluster.yaml
  printf 'apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: here}\nspec:\n  pools:\n    - {name: here, nodes: 1, resources: {cpu: %d, memory: 64Gi}}\n' "$(nproc)" > "$cluster"
  WALL=(); RSS=()
  # The variants take turns run by run, so that the machine's drift (and ext4's inode
  # allocation slowing as homes pile up) falls on each alike.
  for r in $(seq "$RUNS"); do
    once plain "$SLUICE" run "$file"
    [[ -z ${BEFORE:-} ]] || once before "$BEFORE" run "$file"
    [[ -z ${POSTGRES:-} ]] || once pg "$SLUICE" --state @PG@ run "$file"
    [[ -z ${CLUSTER:-} ]] || once cluster "$SLUICE" run "$file" --cluster "$cluster"
  done
  row "$n" "$floor_us" plain "sluice run (parallelism $P)"
  [[ -z ${BEFORE:-} ]] || row "$n" "$floor_us" before "sluice run, ${BEFORE_LABEL:-before} (parallelism $P)"
  [[ -z ${POSTGRES:-} ]] || row "$n" "$floor_us" pg "sluice run, state on PostgreSQL (parallelism $P)"
  [[ -z ${CLUSTER:-} ]] || row "$n" "$floor_us" cluster "sluice run --cluster (parallelism $P)"
done
