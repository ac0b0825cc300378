"""Bad configuration is refused at `Tuner(...)`, naming the setting, the value and the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.space import SearchSpaceError


def train(config: dict[str, Any]) -> None:
    tune.report(loss=config.get("x", 1.0))


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    (dict(tune_config=tune.TuneConfig(num_samples=0)), ValueError, r"num_samples=0 .* >= 1"),
    (dict(tune_config=tune.TuneConfig(num_samples=2.5)), ValueError, r"num_samples=2.5"),  # type: ignore[arg-type]
    (
        dict(tune_config=tune.TuneConfig(metric="loss", mode="minimize")),
        ValueError,
        r"TuneConfig.mode='minimize' .* 'min', 'max'",
    ),
    (dict(tune_config=tune.TuneConfig(metric="loss")), ValueError, r"metric='loss' and mode=None"),
    (
        dict(tune_config=tune.TuneConfig(max_concurrent_trials=-2)),
        ValueError,
        r"max_concurrent_trials=-2",
    ),
    (dict(tune_config=tune.TuneConfig(time_budget_s=-1)), ValueError, r"time_budget_s=-1"),
    (
        dict(tune_config=tune.TuneConfig(trial_name_creator="t")),  # type: ignore[arg-type]
        TypeError,
        r"trial_name_creator",
    ),
    (dict(run_config=tune.RunConfig(verbose=7)), ValueError, r"RunConfig.verbose=7"),
    (dict(run_config=tune.RunConfig(name="a/b")), ValueError, r"RunConfig.name='a/b'.*'/'"),
    (
        dict(run_config=tune.RunConfig(stop={"loss": "low"})),
        ValueError,
        r"value 'low' of key 'loss' must be a number",
    ),
    (
        dict(run_config=tune.RunConfig(stop={"training_iteration": float("nan")})),
        ValueError,
        r"key 'training_iteration' must be a number \(not NaN\)",
    ),
    (
        dict(run_config=tune.RunConfig(checkpoint_config=tune.CheckpointConfig(num_to_keep=0))),
        ValueError,
        r"CheckpointConfig.num_to_keep=0",
    ),
    (
        dict(run_config=tune.RunConfig(failure_config=tune.FailureConfig(max_failures=-3))),
        ValueError,
        r"FailureConfig.max_failures=-3 .* -1 to retry forever",
    ),
    (
        dict(run_config=tune.RunConfig(failure_config=tune.FailureConfig(fail_fast="yes"))),
        ValueError,
        r"fail_fast='yes' .* True, False or 'raise'",
    ),
    (
        dict(run_config=tune.RunConfig(callbacks=[object()])),
        TypeError,
        r"RunConfig.callbacks\[0\]=.* not a tune.Callback",
    ),
    (dict(param_space=[1, 2]), TypeError, r"param_space must be a dict"),
    (
        dict(param_space={"a": {"b": {"grid_search": "xy"}}}),
        SearchSpaceError,
        r'\["a"\]\["b"\].*must be a list',
    ),
]


@pytest.mark.parametrize(("kwargs", "error", "pattern"), BAD)
def test_bad_settings_are_refused_before_anything_runs(
    kwargs: dict[str, Any], error: type[Exception], pattern: str, storage: str
) -> None:
    kwargs = dict(kwargs)
    run_config = kwargs.pop("run_config", None)
    if run_config is not None:
        run_config.storage_path = storage
    with pytest.raises(error, match=pattern):
        tune.Tuner(train, run_config=run_config, **kwargs).fit()
    assert not any(Path(storage).iterdir())


def test_max_concurrent_trials_zero_means_no_limit(storage: str) -> None:
    grid = tune.Tuner(
        train,
        param_space={"x": tune.grid_search([1.0, 2.0, 3.0])},
        tune_config=tune.TuneConfig(max_concurrent_trials=0),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert sorted(metrics_of(r)["loss"] for r in grid) == [1.0, 2.0, 3.0]
