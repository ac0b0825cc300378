"""Every HyperBand bracket trains its survivors to `max_t`, a power of eta or not.

With ``max_t=52, reduction_factor=3`` the brackets used to end at 27, 45, 51 and 52
(``r0 * eta^s`` falls short of max_t): the most aggressive bracket, which
HyperBandForBOHB fills first, stopped its best trials at 27. A bracket's rung k is now
``int(max_t * eta^(k - s))``: the same rungs as before (and as Ray Tune) when max_t
is a power of eta, and max_t last in every bracket. Real runs on the simulated backend.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import HyperBandForBOHB, HyperBandScheduler
from tunefleet.store import StoreReader


def loss(config: dict[str, Any], budget: int) -> dict[str, float]:
    return {"loss": (config["x"] - 0.3) ** 2 + 1.0 / budget}


def band_size(max_t: int, eta: int) -> int:
    """How many trials fill every bracket of one band (HyperBand's n0 per bracket)."""
    sched = HyperBandScheduler(metric="loss", mode="min", max_t=max_t, reduction_factor=eta)
    return sum(b["n0"] for b in (sched._new_bracket() for _ in range(sched._s_max_1)))


@pytest.mark.parametrize("make", [HyperBandScheduler, HyperBandForBOHB])
@pytest.mark.parametrize(("max_t", "eta"), [(52, 3), (81, 3), (20, 2)])
def test_every_brackets_best_trials_reach_max_t(
    tmp_path: Path, make: type[HyperBandScheduler], max_t: int, eta: int
) -> None:
    sched = make(max_t=max_t, reduction_factor=eta)
    grid = tune.Tuner(
        SimulatedTrainable(loss, cost=1.0, max_budget=max_t, workers=4),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", num_samples=band_size(max_t, eta), scheduler=sched
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    reached: dict[int, int] = defaultdict(int)
    with StoreReader(grid.experiment_path) as reader:
        for trial_id in reader.trial_ids():
            last = reader.results(trial_id)[-1]
            bracket = sched._of[trial_id]
            reached[bracket] = max(reached[bracket], int(last["training_iteration"]))
    assert len(reached) >= 3
    assert reached == dict.fromkeys(reached, max_t), reached
