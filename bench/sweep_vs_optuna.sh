#!/usr/bin/env bash
# A sweep whose trials each run a subprocess (`python3 bench/branin_trial.py X1 X2`, printing
# `loss=...`): sluice (`sluice sweep`, TPE, --parallel P) next to Optuna (multivariate TPE,
# SQLite storage, `n_jobs=P`) running the same subprocesses, same number of trials, in one
# run. Installs Optuna from PyPI into target/optuna-venv on first use. Prints a markdown table
# (wall time, ratio, best Branin value found; the optimum is 0.398), with the floor of
# `xargs -P` running the same subprocess TRIALS times.
#
# Run from the repository's root:   bash bench/sweep_vs_optuna.sh
# Knobs (environment): TRIALS=1000  PARALLELISM=2  SEED=1  NO_BUILD=1  SLUICE=PATH
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${TRIALS:-1000}
P=${PARALLELISM:-2}
SEED=${SEED:-1}
SLUICE=${SLUICE:-target/release/sluice}
VENV=target/optuna-venv
log() { echo "sweep_vs_optuna: $*" >&2; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine -p sluice-runtime"
  cargo build --release -q -p sluice-engine -p sluice-runtime
fi
if [[ ! -x $VENV/bin/python ]]; then
  log "installing optuna into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q optuna
fi
OPTUNA_VERSION=$("$VENV/bin/python" -c 'import optuna; print(optuna.__version__)')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

log "floor: xargs -P$P, $TRIALS subprocesses"
t0=${EPOCHREALTIME//[.,]/}
seq "$TRIALS" | xargs -P "$P" -I{} python3 bench/branin_trial.py 1.0 2.0 >/dev/null
t1=${EPOCHREALTIME//[.,]/}
floor_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e6 }')

log "sluice: $TRIALS trials"
t0=${EPOCHREALTIME//[.,]/}
SLUICE_HOME=$WORK/home "$SLUICE" --output json sweep --name branin \
  -p x1=float:-5:10 -p x2=float:0:15 --objective minimize:loss --algorithm tpe \
  --seed "$SEED" --trials "$TRIALS" --parallel "$P" \
  -- python3 bench/branin_trial.py '{{params.x1}}' '{{params.x2}}' >"$WORK/sluice.json" 2>/dev/null
t1=${EPOCHREALTIME//[.,]/}
ours_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e6 }')
ours_best=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["best"]["value"], 6))' "$WORK/sluice.json")

log "optuna: $TRIALS trials"
read -r theirs_s theirs_best < <("$VENV/bin/python" bench/sweep_vs_optuna.py "$TRIALS" "$P" "$WORK/optuna.db" "$SEED")

echo "| $TRIALS trials, parallelism $P | wall s | ratio to Optuna | best Branin |"
echo "| --- | ---: | ---: | ---: |"
echo "| sluice sweep (TPE) | $ours_s | $(awk -v a="$ours_s" -v b="$theirs_s" 'BEGIN { printf "%.2f", a / b }') | $ours_best |"
echo "| Optuna $OPTUNA_VERSION (TPE, SQLite, n_jobs=$P) | $theirs_s | 1.00 | $theirs_best |"
echo "| floor: xargs -P$P, the same subprocess at a fixed point | $floor_s | $(awk -v a="$floor_s" -v b="$theirs_s" 'BEGIN { printf "%.2f", a / b }') | |"
