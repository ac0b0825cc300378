"""A slot freed by a stop or a pause takes its next trial at once, on the virtual clock.

The simulated backend used to move its clock to another trial's next result before it
reported a stop: with one slow trial (10 s a step) and fast trials (1 s) stopped
after their first step, the fast trials started at t = 0, 10, 20, 30 instead of
0, 1, 2, 3, which biased every comparison of early stopping against running trials out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.schedulers import Decision, FIFOScheduler
from tunefleet.store import StoreReader
from tunefleet.trial import Trial


class StopsTheFastOnes(FIFOScheduler):
    """Stops a fast trial at its first result (or pauses it, `pause`); `sync`: decides
    on each result with the trial waiting for the decision (as ASHA's promotion form)."""

    def __init__(self, *, sync: bool, pause: bool = False) -> None:
        super().__init__()
        self.needs_sync_decisions = sync
        self._pause = pause

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        if trial.config["slow"]:
            return Decision.CONTINUE
        return Decision.PAUSE if self._pause else Decision.STOP

    def choose_trial_to_run(self, candidates: Any) -> Trial | None:
        return None  # a paused trial is not resumed: new ones take the slot


def cost(config: dict[str, Any], budget: int) -> float:
    return 10.0 if config["slow"] else 1.0


@pytest.mark.parametrize(("sync", "pause"), [(False, False), (True, False), (True, True)])
def test_a_freed_slot_starts_the_next_trial_at_once(
    tmp_path: Path, sync: bool, pause: bool
) -> None:
    grid = tune.Tuner(
        SimulatedTrainable(
            lambda c, b: {"loss": float(b)}, cost=cost, max_budget=3, workers=2, overhead_scale=0
        ),
        param_space={"slow": tune.grid_search([True, False, False, False, False])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", scheduler=StopsTheFastOnes(sync=sync, pause=pause)
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
    ).fit()
    assert grid.num_errors == 0
    with StoreReader(grid.experiment_path) as reader:
        firsts = sorted(
            reader.results(t.trial_id)[0]["timestamp"]
            for t in reader.trials()
            if not t.config["slow"]
        )
    assert firsts == [1.0, 2.0, 3.0, 4.0]  # each started when the one before was stopped
