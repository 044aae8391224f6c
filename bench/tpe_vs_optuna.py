#!/usr/bin/env python3
"""Optuna's TPE on the sweep issue's test functions: the best of each seed at 50 sequential
trials, for bench/tpe_vs_optuna.sh (which installs Optuna). Prints one line per function:
NAME MEDIAN MEAN ADAMW, ADAMW being how many seeds' best trial uses `adamw` (log-lr only, `-`
elsewhere). Arguments: [SEEDS (20)] [FIRST SEED (0)] [FUNCTIONS (branin,hartmann6,lr)]."""
import math
import statistics
import sys

import optuna

optuna.logging.set_verbosity(optuna.logging.WARNING)


def branin(t):
    x1 = t.suggest_float("x1", -5, 10)
    x2 = t.suggest_float("x2", 0, 15)
    b, c, r, s, tt = 5.1 / (4 * math.pi**2), 5 / math.pi, 6, 10, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - r) ** 2 + s * (1 - tt) * math.cos(x1) + s


A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
]
ALPHA = [1.0, 1.2, 3.0, 3.2]


def hartmann6(t):
    x = [t.suggest_float(f"x{i}", 0, 1) for i in range(1, 7)]
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))


def lr(t):
    lr_ = t.suggest_float("lr", 1e-5, 1e-1, log=True)
    layers = t.suggest_int("layers", 2, 8)
    opt = t.suggest_categorical("opt", ["adam", "sgd", "adamw"])
    return (math.log10(lr_) + 2.5) ** 2 + 0.1 * (layers - 5) ** 2 - (0.3 if opt == "adamw" else 0)


seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
base = int(sys.argv[2]) if len(sys.argv) > 2 else 0  # the first seed
names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["branin", "hartmann6", "lr"]
functions = {"branin": branin, "hartmann6": hartmann6, "lr": lr}
for name in names:
    bests, adamw = [], 0
    for seed in range(base, base + seeds):
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True))
        study.optimize(functions[name], n_trials=50)
        bests.append(study.best_value)
        adamw += study.best_params.get("opt") == "adamw"
    print(name, statistics.median(bests), statistics.fmean(bests), adamw if name == "lr" else "-")
