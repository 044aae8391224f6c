#!/usr/bin/env bash
# sluice's TPE next to Optuna's (multivariate TPESampler), same functions, budgets and seeds:
# the median best of 20 seeds at 50 sequential trials, minimized. Installs Optuna from PyPI
# into target/optuna-venv on first use. Prints a markdown table.
#
# Run from the repository's root:   bash bench/tpe_vs_optuna.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/optuna-venv
if [[ ! -x $VENV/bin/python ]]; then
  echo "tpe_vs_optuna: installing optuna into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q optuna
fi
OPTUNA_VERSION=$("$VENV/bin/python" -c 'import optuna; print(optuna.__version__)')
OURS=$(cargo test --release -q -p sluice-engine tpe_beats -- --nocapture 2>&1 | awk '/^(branin|hartmann6|lr):/ { sub(":", "", $1); print $1, $3, $5, $7 }')
THEIRS=$("$VENV/bin/python" bench/tpe_vs_optuna.py 20)
echo "| function (minimized) | sluice TPE | Optuna $OPTUNA_VERSION TPE (multivariate) | random search (sluice) | target |"
echo "| --- | ---: | ---: | ---: | ---: |"
while read -r name ours random target; do
  theirs=$(awk -v n="$name" '$1 == n { printf "%.4f", $2 }' <<<"$THEIRS")
  echo "| $name | $ours | $theirs | $random | $target |"
done <<<"$OURS"
