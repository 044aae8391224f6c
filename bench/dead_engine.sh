#!/usr/bin/env bash
# How long a machine stays blocked after its engine died: a run whose one step asks for the
# whole machine is started, its engine killed with SIGKILL while the step runs, and a second
# run asking for the whole machine is started at once. Prints, per repetition, the time from
# the first step's end to the second step's start (what a dead engine costs the next run;
# before issue 13: forever), and the time `sluice resume` took to return right after the kill
# (the dead engine still a zombie).
#
# Run from the repository's root:   bash bench/dead_engine.sh
# Knobs: RUNS=5  SLUICE=PATH (default target/release/sluice)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SLUICE=$(realpath "${SLUICE:-target/release/sluice}")
[ -x "$SLUICE" ] || { echo "no sluice binary at $SLUICE (cargo build --release)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
hog() { # NAME SECONDS
  cat >"$1.yaml" <<EOF
apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: $1}
spec:
  steps:
    - name: hog
      resources: {cpu: 1000}
      run: sleep $2; python3 -c 'import time; print(int(time.time() * 1000))' > $1.ended
EOF
}
now_ms() { python3 -c 'import time; print(int(time.time() * 1000))'; }
wait_started() { # waits for the newest run's step to be running
  for _ in $(seq 1 600); do
    if "$SLUICE" status @latest --output json 2>/dev/null | grep -q '"attempts":\[{"number":1,"state":"Running"'; then
      return 0
    fi
    sleep 0.05
  done
  echo "the first run's step never started" >&2
  exit 1
}
hog first 2
cat >second.yaml <<'EOF'
apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: second}
spec:
  steps:
    - name: hog
      resources: {cpu: 1000}
      run: python3 -c 'import time; print(int(time.time() * 1000))' > second.started
EOF
printf '| run | blocked after the dead engine'"'"'s step ended (ms) | resume right after kill -9 returned (s) |\n| ---: | ---: | ---: |\n'
for i in $(seq 1 "$RUNS"); do
  export SLUICE_HOME=$TMP/home-$i
  rm -f first.ended second.started
  "$SLUICE" run first.yaml >/dev/null 2>&1 &
  pid=$!
  disown "$pid" # not reaped: the dead engine stays a zombie, as under a parent that is busy
  wait_started
  kill -9 "$pid"
  "$SLUICE" run second.yaml >/dev/null 2>&1
  gap=$(( $(cat second.started) - $(cat first.ended) ))
  # The same kill, then resume at once.
  rm -f first.ended
  "$SLUICE" run first.yaml >/dev/null 2>&1 &
  pid=$!
  disown "$pid" # not reaped: the dead engine stays a zombie, as under a parent that is busy
  wait_started
  kill -9 "$pid"
  t0=$(now_ms)
  "$SLUICE" resume @latest >/dev/null 2>&1
  t1=$(now_ms)
  printf '| %d | %d | %s |\n' "$i" "$gap" "$(python3 -c "print(f'{($t1 - $t0) / 1000:.2f}')")"
done
