"""NaN and infinite metrics: the trial fails as NAN_METRIC, or counts as the worst value.

Either way no searcher or scheduler ever sees a NaN (checked with a recording
searcher and scheduler in the driver, against real worker processes).
"""

from __future__ import annotations

import math
from typing import Any

import tunefleet as tune
from tunefleet.schedulers import FIFOScheduler
from tunefleet.search import BasicVariantGenerator


def goes_nan(config: dict[str, Any]) -> None:
    for step in range(1, 6):
        bad = config["bad"] and step == 3
        tune.report(loss=float(config["bad"]) if bad else config["base"] + step)


class SeenBySearcher(BasicVariantGenerator):
    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[float] = []
        self.completed: list[Any] = []

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.seen.append(result["loss"])

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        super().on_trial_complete(trial_id, result, error)
        self.completed.append(None if result is None else result["loss"])


class SeenByScheduler(FIFOScheduler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float] = []

    def on_trial_result(self, trial: Any, result: dict[str, Any]) -> Any:
        self.seen.append(result["loss"])
        return super().on_trial_result(trial, result)


def run(storage: str, policy: str) -> tuple[Any, SeenBySearcher, SeenByScheduler]:
    searcher, scheduler = SeenBySearcher(), SeenByScheduler()
    grid = tune.Tuner(
        goes_nan,
        param_space={"bad": tune.grid_search(["nan", "-inf", 0]), "base": tune.grid_search([10])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=searcher, scheduler=scheduler
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=tune.FailureConfig(nan_policy=policy),
        ),
    ).fit()
    return grid, searcher, scheduler


def test_nan_fails_the_trial_naming_key_and_iteration(storage: str) -> None:
    grid, searcher, scheduler = run(storage, "error")
    assert grid.num_errors == 2 and grid.num_terminated == 1
    for error in grid.errors:
        assert error.kind is tune.FailureKind.NAN_METRIC
        assert "metric 'loss' is" in str(error) and "at iteration 3" in str(error)
    assert all(math.isfinite(v) for v in searcher.seen + scheduler.seen)
    assert all(v is None or math.isfinite(v) for v in searcher.completed)


def test_worst_policy_counts_it_as_the_worst_value_seen(storage: str) -> None:
    grid, searcher, scheduler = run(storage, "worst")
    assert grid.num_errors == 0 and grid.num_terminated == 3
    assert all(math.isfinite(v) for v in searcher.seen + scheduler.seen)
    assert max(searcher.seen) == 15  # the worst finite loss any trial reported
    # the recorded results keep the true value
    assert any(math.isnan(v) or math.isinf(v) for r in grid for v in r.metrics_dataframe["loss"])
