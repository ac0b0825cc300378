"""Mistakes caught at a trial's first result, before the budget is spent.

As in Ray Tune, a first result without the ``TuneConfig`` metric ends the run with a
ValueError (unless ``TUNE_DISABLE_STRICT_METRIC_CHECKING=1``); tunefleet checks each
trial's first result, also for a scheduler's ``time_attr`` and the ``stop`` keys, and
names the keys the result had and the closest one. The trial that reported it is
PAUSED (it did not finish) and no other trial starts. An objective that is a list, a
dict or an array fails its trial as text does (BAD_METRIC). Real trials in worker
processes (local backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tunefleet as tune
from tunefleet.schedulers import ASHAScheduler
from tunefleet.store import StoreReader
from tunefleet.trial import TrialStatus


def reports(config: dict[str, Any]) -> None:
    for step in range(1, 4):
        result: dict[str, Any] = {"loss": 1.0 / step, "accuracy": 0.1 * step, "epoch": step}
        if step % 2 == 0:  # evaluated every 2nd iteration only
            result["val_loss"] = 2.0 / step
        tune.report(result)


def tuner(storage: str, name: str, **tune_kw: Any) -> tune.Tuner:
    stop = tune_kw.pop("stop", None)
    return tune.Tuner(
        reports,
        tune_config=tune.TuneConfig(mode="min", **tune_kw),
        run_config=tune.RunConfig(storage_path=storage, name=name, stop=stop, verbose=0),
    )


def started(storage: str, name: str) -> list[tuple[TrialStatus, int]]:
    """(status, number of results) of each trial the store has."""
    with StoreReader(Path(storage) / name) as reader:
        return [(t.status, len(reader.results(t.trial_id))) for t in reader.trials()]


def test_a_metric_typo_stops_the_run_at_the_first_result(storage: str) -> None:
    runner = tuner(storage, "typo", metric="los", num_samples=4, max_concurrent_trials=1)
    with pytest.raises(ValueError) as caught:
        runner.fit()
    text = str(caught.value)
    assert "TuneConfig(metric=...): 'los' is not in the first result of trial" in text
    assert "which has accuracy, epoch, loss (and the auto-filled keys)" in text
    assert "did you mean 'loss'?" in text
    assert "TUNE_DISABLE_STRICT_METRIC_CHECKING=1" in text
    # one trial ran, PAUSED (it did not finish), its first result recorded; none other
    assert started(storage, "typo") == [(TrialStatus.PAUSED, 1)]


def test_a_metric_reported_only_from_the_second_result_on_is_an_error(storage: str) -> None:
    with pytest.raises(ValueError, match="'val_loss' is not in the first result"):
        tuner(storage, "late", metric="val_loss", num_samples=2).fit()
    assert {status for status, _ in started(storage, "late")} == {TrialStatus.PAUSED}


def test_the_env_var_lets_results_without_the_metric_through(
    storage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    grid = tuner(storage, "lenient", metric="val_loss", num_samples=2).fit()
    assert grid.num_errors == 0 and grid.num_terminated == 2
    for result in grid:  # recorded as reported, the 2nd result with val_loss
        assert list(result.metrics_dataframe["val_loss"].dropna()) == [1.0]


def test_a_stop_key_typo_names_the_stop_dict(storage: str) -> None:
    stop = {"training_iteration": 5, "acuracy": 0.9}
    with pytest.raises(ValueError) as caught:
        tuner(storage, "stop", metric="loss", num_samples=2, stop=stop).fit()
    text = str(caught.value)
    assert "RunConfig(stop=...): 'acuracy' is not in the first result" in text
    assert "did you mean 'accuracy'?" in text
    assert "TUNE_DISABLE_STRICT" not in text  # a stop key is never let off


def test_a_scheduler_time_attr_typo_names_the_scheduler(storage: str) -> None:
    scheduler = ASHAScheduler(time_attr="epochs", max_t=3)
    with pytest.raises(ValueError) as caught:
        tuner(storage, "asha", metric="loss", num_samples=2, scheduler=scheduler).fit()
    text = str(caught.value)
    assert "AsyncHyperBandScheduler(time_attr=...): 'epochs' is not in the first result" in text
    assert "did you mean 'epoch'?" in text


_NOT_NUMBERS: dict[str, Any] = {
    "list": [1.0, 2.0],
    "dict": {"a": 1.0},
    "array": np.arange(100.0),
    "scalar_tensor": torch.tensor(0.5),  # 0-d: a number
}


def reports_kind(config: dict[str, Any]) -> None:
    for _ in range(2):
        tune.report({"loss": _NOT_NUMBERS[config["kind"]]})


def test_a_list_dict_or_array_objective_fails_its_trial(storage: str) -> None:
    grid = tune.Tuner(
        reports_kind,
        param_space={"kind": tune.grid_search(list(_NOT_NUMBERS))},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    by_kind = {r.config["kind"]: r for r in grid}
    assert by_kind["scalar_tensor"].error is None
    assert by_kind["scalar_tensor"].metrics["loss"] == 0.5
    shown = {
        "list": "is a list ([1.0, 2.0]) at iteration 1",
        "dict": "is a dict ({'a': 1.0}) at iteration 1",
        "array": "is a ndarray (array([ 0., 1., 2.,",
    }
    for kind, part in shown.items():
        error = by_kind[kind].error
        assert error is not None and error.kind is tune.FailureKind.BAD_METRIC
        text = str(error)
        assert f"metric 'loss' {part}" in text, text
        assert "report a number (int or float" in text
    assert "99." not in str(by_kind["array"].error)  # shortened
