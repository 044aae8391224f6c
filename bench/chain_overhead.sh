#!/usr/bin/env bash
# Engine overhead between dependent steps: a chain of N no-op steps (each `needs` the one
# before), from one step's end to the next one's start, median, p90, p99 and max; next to the
# floor of a shell loop running the same N `true` one after the other. Prints a markdown
# table on standard output (progress on standard error); exits non-zero if the run fails.
#
# Run from the repository's root:   bash bench/chain_overhead.sh
# Knobs (environment): STEPS=1000  NO_BUILD=1  SLUICE=PATH (default target/release/sluice)
#
# The gap of step i+1 is when its program started minus when step i's program ended, both as
# the runtime recorded them in the attempts' result.json (milliseconds: read the median with
# +-1 ms). It covers everything between two programs: the engine collecting the end and
# committing it, deciding and committing the next start, and the runtime starting the
# program. The wall time of the whole run per step is printed beside it, and the floor: a
# shell loop running the same N `true` one after the other.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${STEPS:-1000}
SLUICE=${SLUICE:-target/release/sluice}
OUT=bench/out

log() { echo "chain_overhead: $*" >&2; }
die() { log "error: $*"; exit 1; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine -p sluice-runtime"
  cargo build --release -q -p sluice-engine -p sluice-runtime || die "cargo build failed"
fi
[[ -x $SLUICE ]] || die "$SLUICE not found"
mkdir -p "$OUT"
file=$OUT/chain-noop-$N.yaml
python3 - "$N" "$file" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as f:
    f.write(f"apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata:\n  name: chain-{n}\nspec:\n  steps:\n")
    f.write("    - name: s0\n      run: \"true\"\n")
    for i in range(1, n):
        f.write(f"    - name: s{i}\n      needs: [s{i-1}]\n      run: \"true\"\n")
PY

HOME_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sluice-chain.XXXXXX")
STATUS=$(mktemp)
trap 'rm -rf "$HOME_DIR" "$STATUS"' EXIT

log "floor: $N x true in a shell loop"
t0=${EPOCHREALTIME//[.,]/}
for ((i = 0; i < N; i++)); do /usr/bin/true; done
t1=${EPOCHREALTIME//[.,]/}
floor_us=$((t1 - t0))

log "sluice run $file"
t0=${EPOCHREALTIME//[.,]/}
SLUICE_HOME=$HOME_DIR "$SLUICE" run "$file" >/dev/null 2>&1 || die "sluice run failed"
t1=${EPOCHREALTIME//[.,]/}
wall_us=$((t1 - t0))
SLUICE_HOME=$HOME_DIR "$SLUICE" runs --output json --limit 1 >"$STATUS"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$STATUS")

python3 - "$HOME_DIR/attempts/$id" "$floor_us" "$wall_us" "$N" <<'PY'
import json, sys
from datetime import datetime
from pathlib import Path

def ms(t):
    return datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp() * 1000

run = Path(sys.argv[1])
floor_us, wall_us, n = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
results = [json.loads((run / f"s{i}.1" / "result.json").read_text()) for i in range(n)]
gaps = sorted(ms(b["started_at"]) - ms(a["ended_at"]) for a, b in zip(results, results[1:]))
q = lambda p: gaps[min(len(gaps) - 1, int(p * len(gaps)))]
print("| steps | end to next start, median ms | p90 | p99 | max | sluice wall ms/step | shell loop ms/step |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print(f"| {n} | {q(0.5):.0f} | {q(0.9):.0f} | {q(0.99):.0f} | {gaps[-1]:.0f} | {wall_us / 1000 / n:.2f} | {floor_us / 1000 / n:.2f} |")
PY
