"""An objective reported as text fails its trial, naming the key, the type and the value.

Ray Tune never converts a text metric (its ASHA multiplies it by the mode's sign and
the driver dies of a TypeError); tunefleet fails that one trial, under any
``nan_policy``, while the other trials go on. The result is still recorded as
reported. A numpy scalar or a 0-d tensor is a number; a bool is accepted as it was.
Real trials in worker processes (local backend).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import tunefleet as tune

_STEPS = 3
_LONG = "x" * 200
# what each trial reports as its loss at iteration 2 (made in the worker)
_VALUES: dict[str, Any] = {
    "word": "abc",
    "numeric": "0.5",
    "long": _LONG,
    "number": 0.5,
    "numpy": np.float32(0.25),
    "tensor": torch.tensor(0.5),
    "bool": True,
}


def reports(config: dict[str, Any]) -> None:
    for step in range(1, _STEPS + 1):
        tune.report({"loss": _VALUES[config["kind"]] if step == 2 else float(step)})


def run(storage: str, kinds: list[str]) -> Any:
    return tune.Tuner(
        reports,
        param_space={"kind": tune.grid_search(kinds)},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()


def test_a_text_objective_fails_its_trial_naming_key_type_and_value(storage: str) -> None:
    grid = run(storage, ["word", "numeric", "long", "number"])
    by_kind = {r.config["kind"]: r for r in grid}
    assert grid.num_errors == 3 and grid.num_terminated == 1
    for kind, shown in (("word", "'abc'"), ("numeric", "'0.5'"), ("long", "'" + "x" * 77)):
        error = by_kind[kind].error
        assert error is not None and error.kind is tune.FailureKind.BAD_METRIC
        text = str(error)
        assert f"metric 'loss' is a str ({shown}" in text and "at iteration 2" in text
        assert "report a number (int or float)" in text
        assert _LONG not in text  # shortened
        # nothing lost: the result is recorded as reported
        losses = list(by_kind[kind].metrics_dataframe["loss"])
        assert losses[:2] == [1.0, _VALUES[kind]]
    sibling = by_kind["number"]
    assert sibling.error is None
    assert list(sibling.metrics_dataframe["training_iteration"]) == [1, 2, 3]


def test_numpy_and_torch_scalars_are_numbers_and_a_bool_is_accepted(storage: str) -> None:
    grid = run(storage, ["numpy", "tensor", "bool"])
    assert grid.num_errors == 0 and grid.num_terminated == 3
    for result in grid:
        assert len(result.metrics_dataframe) == _STEPS
    assert grid.get_best_result(scope="all").config["kind"] == "numpy"
