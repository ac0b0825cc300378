"""NaN and infinite metrics: by default (as in Ray Tune) recorded and the trial goes on,
counted as the worst value and flagged; with ``nan_policy="error"`` the trial fails as
NAN_METRIC.

Either way no searcher or scheduler ever sees a NaN (checked with a recording
searcher and scheduler in the driver, against real worker processes).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.cli.main import main
from tunefleet.dashboard._data import experiment_view
from tunefleet.progress.view import NON_FINITE_MARK
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


def run(storage: str, policy: str | None) -> tuple[Any, SeenBySearcher, SeenByScheduler]:
    searcher, scheduler = SeenBySearcher(), SeenByScheduler()
    failures = tune.FailureConfig() if policy is None else tune.FailureConfig(nan_policy=policy)
    grid = tune.Tuner(
        goes_nan,
        param_space={"bad": tune.grid_search(["nan", "-inf", 0]), "base": tune.grid_search([10])},
        tune_config=tune.TuneConfig(
            metric="loss", mode="min", search_alg=searcher, scheduler=scheduler
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            failure_config=failures,
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


def test_by_default_nan_is_recorded_ranked_worst_and_flagged(
    storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray Tune's outcome (no trial fails), NaN-safe, and visible everywhere."""
    assert tune.FailureConfig().nan_policy == "worst"
    grid, searcher, scheduler = run(storage, None)
    assert grid.num_errors == 0 and grid.num_terminated == 3
    assert all(math.isfinite(v) for v in searcher.seen + scheduler.seen)
    assert all(
        math.isfinite(grid.get_best_result(scope=s).metrics["loss"]) for s in ("last", "all")
    )
    path = grid.experiment_path
    assert main(["show", path]) == 0
    shown = capsys.readouterr().out
    assert shown.count(f" {NON_FINITE_MARK}") == 2
    assert "2 trials reported NaN or inf (loss): recorded, never ranked best" in shown
    view = experiment_view(Path(path))
    assert view["non_finite_trials"] == 2
    flagged = {row["config"]["bad"]: row["non_finite"] for row in view["trials"]}
    assert flagged == {"nan": ["loss"], "-inf": ["loss"], 0: []}
    assert view["best"]["trial_id"] == grid.get_best_result().trial_id


def test_the_summary_counts_the_trials_that_reported_nan(
    storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tune.Tuner(
        goes_nan,
        param_space={"bad": tune.grid_search(["nan", 0]), "base": 1},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=1),
    ).fit()
    out = capsys.readouterr().out
    assert "1 trial reported NaN or inf (loss): recorded, never ranked best: " in out
    assert "1 TERMINATED" not in out and "2 TERMINATED" in out
