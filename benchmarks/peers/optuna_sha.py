"""Optuna's SuccessiveHalvingPruner on the digits MLP of ``real_problems.py``.

Run by ``benchmarks/real_efficiency.py`` with the peer virtual environment's Python
(``.venv-peers``, made by ``make bench-peers``); Optuna is never a tunefleet
dependency. It prints one ``TUNEFLEET_REAL`` JSON line per result (wall seconds since
the start of the tuning call, the validation error) and a summary line.

Setup as an Optuna user would write it for parallel tuning on one machine:
``create_study`` with the default in-memory storage, ``RandomSampler(seed=seed)`` (so
that, as for the others, only the early stopping differs from random search),
``SuccessiveHalvingPruner(min_resource=grace, reduction_factor=eta,
min_early_stopping_rate=0)``, and ``study.optimize(objective, timeout=budget,
n_jobs=concurrency)``: Optuna's own parallelism, threads in one process. The
objective calls ``trial.report(error, epoch)`` and ``trial.should_prune()`` after each
epoch, up to ``max_t`` epochs. Optuna's ``timeout`` only stops starting new trials, so
a trial still running when the budget is spent stops at its next epoch (as the time
budget of tunefleet and Ray Tune does). The clock starts just before ``create_study``.

    .venv-peers/bin/python benchmarks/peers/optuna_sha.py --seed 0 --budget 30
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

# One CPU per trial: BLAS reads these when numpy is imported (by real_problems).
os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import real_problems as rp


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rp.add_peer_args(parser)
    args = parser.parse_args()
    data = rp.load_digits_data(args.data)
    spec = rp.SPACES[args.problem]

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results: list[dict[str, Any]] = []  # list.append is atomic: the threads share it

    t0 = time.time()
    study = optuna.create_study(
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=args.seed),
        pruner=optuna.pruners.SuccessiveHalvingPruner(
            min_resource=args.grace, reduction_factor=args.eta, min_early_stopping_rate=0
        ),
    )
    setup_s = time.time() - t0

    def objective(trial: optuna.Trial) -> float:
        model = rp.make_model(args.problem, rp.optuna_suggest(spec, trial), data)
        value = float("inf")
        while model.epoch < args.max_t:
            value = model.train_epoch()
            now = time.time()
            results.append(
                {"t": now - t0, "value": value, "trial": trial.number, "iter": model.epoch}
            )
            if now - t0 > args.budget:
                raise optuna.TrialPruned()  # the budget is spent: stop now, not at max_t
            trial.report(value, model.epoch)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    study.optimize(
        objective, timeout=max(0.0, args.budget - (time.time() - t0)), n_jobs=args.concurrency
    )
    wall_s = time.time() - t0
    trials = study.get_trials(deepcopy=False)
    failed = optuna.trial.TrialState.FAIL
    for r in results:
        rp.emit({"kind": "result", **r})
    rp.emit(
        {
            "kind": "summary",
            "framework": "optuna",
            "version": optuna.__version__,
            "setup_s": setup_s,
            "wall_s": wall_s,
            "trials": len(trials),
            "errors": sum(t.state == failed for t in trials),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
