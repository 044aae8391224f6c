#!/usr/bin/env bash
# A sweep whose trials each run a subprocess (`python3 bench/branin_trial.py X1 X2`, printing
# `loss=...`): sluice (`sluice sweep`, TPE, --parallel P) next to Optuna (multivariate TPE,
# SQLite storage, `study.optimize(n_jobs=P)`) running the same subprocesses, same number of
# trials, in one run. Installs Optuna from PyPI into target/optuna-venv on first use (the venv
# of bench/tpe_vs_optuna.sh, reused if it exists). Prints a markdown table (wall time, ratio,
# trials that succeeded, best Branin value found; the optimum is 0.397887), with the floor of
# `xargs -P` running the same subprocess TRIALS times, then a line on the machine's load.
#
# Run from the repository's root:   bash bench/sweep_vs_optuna.sh [TRIALS=1000] [PARALLEL=2]
# Knobs (environment): SEED=1  NO_BUILD=1  SLUICE=PATH (sluice-runtime from beside it)
#   PYTHON=python3 (the trials' interpreter, the same for all three; here a pyenv shim)
#
# Why Optuna runs its trials on n_jobs threads: it is Optuna's own way of running trials in
# parallel in one study, and the trial's time is spent in subprocess.run, which releases the
# GIL, so P threads keep P subprocesses running. P processes sharing the SQLite storage would
# each pay Python's and Optuna's start (about 2 s here) and contend for SQLite's write lock;
# they would not be faster at P=2.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-${TRIALS:-1000}}
P=${2:-${PARALLELISM:-2}}
SEED=${SEED:-1}
SLUICE=${SLUICE:-target/release/sluice}
PYTHON=${PYTHON:-python3}
VENV=target/optuna-venv
log() { echo "sweep_vs_optuna: $*" >&2; }
die() { log "error: $*"; exit 1; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

if [[ -z ${NO_BUILD:-} ]]; then
  log "cargo build --release -p sluice-engine -p sluice-runtime"
  cargo build --release -q -p sluice-engine -p sluice-runtime || die "cargo build failed"
fi
[[ -x $SLUICE ]] || die "$SLUICE not found"
if [[ ! -x $VENV/bin/python ]]; then
  log "installing optuna into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q optuna
fi
OPTUNA_VERSION=$("$VENV/bin/python" -c 'import optuna; print(optuna.__version__)')
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

log "floor: xargs -P$P, $TRIALS subprocesses"
t0=${EPOCHREALTIME//[.,]/}
seq "$TRIALS" | xargs -P "$P" -I{} "$PYTHON" bench/branin_trial.py 1.0 2.0 >/dev/null
t1=${EPOCHREALTIME//[.,]/}
floor_s=$(secs "$t0" "$t1")

log "sluice: $TRIALS trials"
t0=${EPOCHREALTIME//[.,]/}
SLUICE_HOME=$WORK/home "$SLUICE" --output json sweep --name branin \
  -p x1=float:-5:10 -p x2=float:0:15 --objective minimize:loss --algorithm tpe \
  --seed "$SEED" --trials "$TRIALS" --parallel "$P" \
  -- "$PYTHON" bench/branin_trial.py '{{params.x1}}' '{{params.x2}}' >"$WORK/sluice.json" 2>"$WORK/sluice.err" \
  || { tail -n 20 "$WORK/sluice.err" >&2; die "sluice sweep failed"; }
t1=${EPOCHREALTIME//[.,]/}
ours_s=$(secs "$t0" "$t1")
read -r ours_ok ours_best < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(t["state"] == "Succeeded" for t in d["trials"]), round(d["best"]["value"], 6))' "$WORK/sluice.json")

log "optuna: $TRIALS trials"
read -r theirs_s theirs_ok theirs_best < <("$VENV/bin/python" bench/sweep_vs_optuna.py "$TRIALS" "$P" "$WORK/optuna.db" "$SEED" "$PYTHON")
[[ -n ${theirs_best:-} ]] || die "optuna's side failed"

echo "| $TRIALS trials, parallelism $P | wall s | ratio to Optuna | ms/trial | trials succeeded | best Branin |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
echo "| sluice sweep (TPE, --parallel $P) | $ours_s | $(ratio "$ours_s" "$theirs_s") | $(awk -v s="$ours_s" -v n="$TRIALS" 'BEGIN { printf "%.1f", s*1e3/n }') | $ours_ok | $ours_best |"
echo "| Optuna $OPTUNA_VERSION (TPE, SQLite, n_jobs=$P threads) | $theirs_s | 1.00 | $(awk -v s="$theirs_s" -v n="$TRIALS" 'BEGIN { printf "%.1f", s*1e3/n }') | $theirs_ok | $theirs_best |"
echo "| floor: xargs -P$P, the same subprocess at a fixed point | $floor_s | $(ratio "$floor_s" "$theirs_s") | $(awk -v s="$floor_s" -v n="$TRIALS" 'BEGIN { printf "%.1f", s*1e3/n }') | | |"
echo
echo "Machine: $(nproc) cores, load average $load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; trial interpreter: $(command -v "$PYTHON")."
