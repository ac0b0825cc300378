"""Optuna's TPE with its own pruners on the tabulated problems, in virtual time.

Run by ``benchmarks/search_efficiency.py`` (methods ``optuna-tpe-sha`` and
``optuna-tpe-hb``) with the peer environment's Python (``.venv-peers``); Optuna is never
a tunefleet dependency. The same table and nearest lookup as tunefleet's ``tab-*``
problems (``tabulated.py``), the same virtual budget and workers, no noise.

Setup as an Optuna user would write ask-and-tell tuning with ``workers`` trials at once:
``create_study(sampler=TPESampler(seed=seed), pruner=...)`` with
``SuccessiveHalvingPruner(min_resource=1, reduction_factor=3,
min_early_stopping_rate=0)`` ("sha") or ``HyperbandPruner(min_resource=1,
max_resource=max_budget, reduction_factor=3)`` ("hb"). After each step the trial calls
``trial.report(loss, step)``; at the max budget it is told complete, else
``trial.should_prune()`` decides (``tell(..., PRUNED)``). The workers are simulated by
``_virtual_workers.py``. One JSON line per seed (tag ``TUNEFLEET_TABULATED``).

    .venv-peers/bin/python benchmarks/peers/optuna_tabulated.py --task gbm \\
        --variant sha --seeds 0 1 --budget 4000
"""

from __future__ import annotations

import sys
from typing import Any

import _virtual_workers as vw
import real_problems as rp
import tabulated


def run(task: str, variant: str, seed: int, budget: float, workers: int) -> dict[str, Any]:
    import optuna

    table = tabulated.table(task)
    if variant == "sha":
        pruner: Any = optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=3, min_early_stopping_rate=0
        )
    else:
        pruner = optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=table.max_budget, reduction_factor=3
        )
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)

    def ask(now: float) -> tuple[Any, dict[str, Any]]:
        trial = study.ask()
        return trial, rp.optuna_suggest(table.spec, trial)

    def tell(trial: Any, step: int, loss: float) -> bool:
        trial.report(loss, step)
        if step == table.max_budget:
            study.tell(trial, loss)
            return False
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return False
        return True

    return {"seed": seed, **vw.simulate(table, budget, workers, ask, tell)}


def main() -> int:
    args = vw.peer_args(__doc__ or "", ["sha", "hb"])
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in args.seeds:
        vw.emit(run(args.task, args.variant, seed, args.budget, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
