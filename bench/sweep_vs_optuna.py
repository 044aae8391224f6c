#!/usr/bin/env python3
"""Optuna's side of bench/sweep_vs_optuna.sh: TRIALS trials of multivariate TPE with SQLite
storage, run by `study.optimize(n_jobs=PARALLEL)` (threads, Optuna's own way of running trials
in parallel in one process; the subprocess releases the GIL while it runs), each trial running
`PYTHON bench/branin_trial.py X1 X2` as a subprocess and reading its `loss=` line.

Usage: sweep_vs_optuna.py TRIALS PARALLEL DB SEED [PYTHON]
Prints: WALL_SECONDS SUCCEEDED_TRIALS BEST (wall time from study creation to the last trial)."""
import subprocess
import sys
import time

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)
trials, parallel, db, seed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
python = sys.argv[5] if len(sys.argv) > 5 else "python3"


def objective(t):
    x1 = t.suggest_float("x1", -5, 10)
    x2 = t.suggest_float("x2", 0, 15)
    out = subprocess.run(
        [python, "bench/branin_trial.py", repr(x1), repr(x2)],
        capture_output=True, text=True, check=True,
    ).stdout
    return float(out.split("loss=")[1])


start = time.perf_counter()
study = optuna.create_study(
    storage=f"sqlite:///{db}",
    sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True),
    direction="minimize",
)
study.optimize(objective, n_trials=trials, n_jobs=parallel)
wall = time.perf_counter() - start
ok = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
print(f"{wall:.2f} {ok} {study.best_value:.6f}")
