"""Syne Tune's ASHA and BOHB on the tabulated problems, in virtual time.

Run by ``benchmarks/search_efficiency.py`` (methods ``syne-asha`` and ``syne-bohb``)
with the peer environment's Python (``.venv-peers``, ``pip install syne-tune``); never a
tunefleet dependency. The same table, nearest lookup, budget and workers as tunefleet's
``tab-*`` problems, no noise.

Syne Tune's schedulers are driven as its ``Tuner`` drives them, without its backend:
``ASHA(config_space, metric="loss", time_attr="epoch", max_t=max_budget,
random_seed=seed, grace_period=1, reduction_factor=3)`` ("asha": random configs) or
``BOHB(...)`` with the same arguments ("bohb": its KDE searcher); ``suggest()`` and
``on_trial_add`` start a trial, ``on_trial_result`` after each step decides (anything
but CONTINUE ends it), ``on_trial_complete`` at the max budget. The workers are
simulated by ``_virtual_workers.py``. One JSON line per seed.

    .venv-peers/bin/python benchmarks/peers/syne_tune_tabulated.py --task gbm \\
        --variant asha --seeds 0 --budget 4000
"""

from __future__ import annotations

import datetime
import logging
import random
import sys
from typing import Any

import _virtual_workers as vw
import numpy as np
import tabulated


def config_space(spec: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    from syne_tune import config_space as cs

    space: dict[str, Any] = {}
    for name, (kind, *args) in spec.items():
        if kind == "randint":  # Syne Tune's upper bound is included
            space[name] = cs.randint(args[0], args[1] - 1)
        elif kind == "choice":
            space[name] = cs.choice(list(args[0]))
        else:
            space[name] = getattr(cs, kind)(args[0], args[1])
    return space


def run(task: str, variant: str, seed: int, budget: float, workers: int) -> dict[str, Any]:
    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer.baselines import ASHA, BOHB

    np.random.seed(seed)  # ASHA's brackets draw from numpy's global generator
    random.seed(seed)
    table = tabulated.table(task)
    kind = ASHA if variant == "asha" else BOHB
    scheduler = kind(
        config_space(table.spec),
        metric="loss",
        time_attr="epoch",
        max_t=table.max_budget,
        random_seed=seed,
        grace_period=1,
        reduction_factor=3,
    )
    created = datetime.datetime.now()
    names = list(table.spec)

    trials: list[Any] = []

    def ask(now: float) -> tuple[Any, dict[str, Any]]:
        suggestion = scheduler.suggest()
        assert suggestion is not None and suggestion.config is not None
        trial = Trial(trial_id=len(trials), config=suggestion.config, creation_time=created)
        trials.append(trial)
        scheduler.on_trial_add(trial)
        return trial, {k: suggestion.config[k] for k in names}

    def tell(trial: Any, step: int, loss: float) -> bool:
        result = {"loss": loss, "epoch": step}
        decision = scheduler.on_trial_result(trial, result)
        if step == table.max_budget:
            scheduler.on_trial_complete(trial, result)
            return False
        return bool(decision == "CONTINUE")

    return {"seed": seed, **vw.simulate(table, budget, workers, ask, tell)}


def main() -> int:
    args = vw.peer_args(__doc__ or "", ["asha", "bohb"])
    logging.getLogger("syne_tune").setLevel(logging.ERROR)  # its notes on defaults
    for seed in args.seeds:
        vw.emit(run(args.task, args.variant, seed, args.budget, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
