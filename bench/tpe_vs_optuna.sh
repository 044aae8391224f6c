#!/usr/bin/env bash
# sluice's TPE next to Optuna's (multivariate TPESampler), same functions, budgets and seeds,
# 50 sequential trials, minimized: the median best of seeds 0..19 on Branin, Hartmann-6 and
# the log-lr function; then the log-lr function over seeds 0..99 (median and mean of the
# best values, and how many seeds' best trial uses `adamw`). Installs Optuna from PyPI into
# target/optuna-venv on first use. Prints two markdown tables.
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
# The engine's quality tests print their results: `NAME: tpe MEDIAN random MEDIAN target T`
# (20 seeds) and `lr100: median M mean A adamw N/100 ...` (100 seeds), each possibly after
# the progress dots of `-q` on the same line.
TESTS=$(cargo test --release -q -p sluice-engine tpe_ -- --nocapture 2>&1)
OURS=$(awk 'match($0, /(branin|hartmann6|lr): tpe .*/) {
  $0 = substr($0, RSTART, RLENGTH); sub(":", "", $1); print $1, $3, $5, $7 }' <<<"$TESTS")
OURS100=$(awk 'match($0, /lr100: .*/) { $0 = substr($0, RSTART, RLENGTH); print $3, $5, $7 }' <<<"$TESTS")
THEIRS=$("$VENV/bin/python" bench/tpe_vs_optuna.py 20)
THEIRS100=$("$VENV/bin/python" bench/tpe_vs_optuna.py 100 0 lr)
echo "| function (minimized), median best of seeds 0..19 | sluice TPE | Optuna $OPTUNA_VERSION TPE (multivariate) | random search (sluice) | target |"
echo "| --- | ---: | ---: | ---: | ---: |"
while read -r name ours random target; do
  theirs=$(awk -v n="$name" '$1 == n { printf "%.4f", $2 }' <<<"$THEIRS")
  echo "| $name | $ours | $theirs | $random | $target |"
done <<<"$OURS"
echo
echo "| log-lr function, seeds 0..99, 50 trials | median best | mean best | best trial uses adamw |"
echo "| --- | ---: | ---: | ---: |"
read -r median mean adamw <<<"$OURS100"
echo "| sluice TPE | $median | $mean | $adamw |"
awk -v v="$OPTUNA_VERSION" '$1 == "lr" { printf "| Optuna %s TPE (multivariate) | %.4f | %.4f | %d/100 |\n", v, $2, $3, $4 }' <<<"$THEIRS100"
