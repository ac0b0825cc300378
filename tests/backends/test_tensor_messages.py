"""Tensors in what a trial reports travel by value, whatever torch registered on
multiprocessing's pickler (its shared-memory reducers would hand the driver a handle it
cannot open, and the driver died with "digest sent was rejected")."""

from __future__ import annotations

from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of

torch = pytest.importorskip("torch")


def reports_tensors(config: dict[str, Any]) -> None:
    import torch.multiprocessing  # registers torch's reducers on multiprocessing's pickler

    value = torch.tensor([0.5, 0.25]) if config["as_metric"] else torch.tensor(0.5)
    tune.report({"loss": value, "weights": torch.arange(3.0)})


def run(storage: str, as_metric: bool) -> tune.Result:
    grid = tune.Tuner(
        reports_tensors,
        param_space={"as_metric": as_metric},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    (result,) = list(grid)
    return result


def test_a_reported_tensor_reaches_the_driver_by_value(storage: str) -> None:
    result = run(storage, as_metric=False)
    assert result.error is None
    assert metrics_of(result)["loss"] == 0.5  # a 0-d tensor is a number


def test_a_tensor_objective_fails_its_trial_naming_it(storage: str) -> None:
    result = run(storage, as_metric=True)
    assert result.error is not None
    assert result.error.failure.kind is tune.FailureKind.BAD_METRIC
    assert "'loss'" in result.error.failure.message
