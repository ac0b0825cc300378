"""param_space values that cannot reach a worker are refused before any trial starts;
those that can (functions, tensors) reach it by value, as in Ray Tune (issue 17)."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.cli.main import main


def echo(config: dict[str, Any]) -> None:
    tune.report({"loss": 1.0, "kind": type(config["value"]).__name__})


def call_it(config: dict[str, Any]) -> None:
    tune.report({"loss": float(config["fn"](2))})


def tensor_sum(config: dict[str, Any]) -> None:
    tune.report({"loss": float(config["weights"].sum()), "shape": list(config["weights"].shape)})


def open_log(directory: Path) -> Any:
    return open(directory / "log", "w")  # closed by the test


def run(trainable: Any, space: dict[str, Any], storage: str, **tune_config: Any) -> Any:
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(metric="loss", mode="min", **tune_config),
        run_config=tune.RunConfig(name="space", storage_path=storage, verbose=0),
    ).fit()


@pytest.mark.parametrize(
    ("make", "where", "kind"),
    [
        (
            lambda d: {"model": {"net": threading.Lock()}},
            'param_space["model"]["net"]',
            "_thread.lock",
        ),
        (
            lambda d: {"logs": [1, open_log(d)]},
            'param_space["logs"][1]',
            "_io.TextIOWrapper",
        ),
        (
            lambda d: {"s": tune.choice([1, socket.socket()])},
            'param_space["s"].categories[1]',
            "socket.socket",
        ),
        (
            lambda d: {"g": tune.grid_search([threading.RLock()])},
            'param_space["g"]["grid_search"][0]',
            "_thread.RLock",
        ),
    ],
)
def test_a_value_that_cannot_be_sent_is_refused_before_any_trial(
    tmp_path: Path, make: Callable[[Path], dict[str, Any]], where: str, kind: str
) -> None:
    storage = tmp_path / "results"
    storage.mkdir()
    space = make(tmp_path)
    with pytest.raises(ValueError) as caught:
        run(echo, space, str(storage))
    for value in flatten_leaves(space):
        if hasattr(value, "close"):
            value.close()
    message = str(caught.value)
    assert message.startswith(f"{where}: a {kind} value"), message
    assert "cannot be sent to the trials' worker processes" in message
    assert "tune.with_parameters(train, " in message
    assert list(storage.iterdir()) == []  # refused before the experiment was made


def flatten_leaves(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return [leaf for value in node.values() for leaf in flatten_leaves(value)]
    if isinstance(node, (list, tuple)):
        return [leaf for value in node for leaf in flatten_leaves(value)]
    return [*flatten_leaves(list(node.categories))] if hasattr(node, "categories") else [node]


def test_the_advice_names_the_key(storage: str) -> None:
    with pytest.raises(ValueError, match=r"tune.with_parameters\(train, net=\.\.\.\)"):
        run(echo, {"model": {"net": threading.Lock()}}, storage)


def test_a_function_value_reaches_the_trainable_as_in_ray(storage: str) -> None:
    """Ray Tune passes a plain function in param_space through as a value (cloudpickled):
    only tune.sample_from is sampled."""
    offset = 40.0
    grid = run(call_it, {"fn": lambda x: x + offset}, storage)
    assert grid.num_errors == 0 and grid[0].metrics["loss"] == 42.0
    sampled = run(echo, {"value": tune.sample_from(lambda spec: 3)}, storage)
    assert sampled[0].metrics["kind"] == "int"


def test_a_tensor_reaches_the_trainable_by_value(storage: str) -> None:
    """torch.multiprocessing registers a shared-memory reducer with multiprocessing's
    pickler; a config sent through it broke the worker's connection (digest received
    was wrong) and crashed every trial."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.multiprocessing")  # registers the reducer in this process

    grid = run(tensor_sum, {"weights": torch.ones(2, 3)}, storage)
    assert grid.num_errors == 0, [r.error for r in grid]
    assert grid[0].metrics["loss"] == 6.0 and grid[0].metrics["shape"] == [2, 3]


def test_a_config_that_cannot_be_sent_at_launch_is_an_error_listed_by_tunefleet_errors(
    storage: str,
) -> None:
    """A sample_from function may give what no check before the run could see."""
    grid = run(echo, {"value": tune.sample_from(lambda spec: threading.Lock())}, storage)
    assert len(grid) == 1 and grid.num_errors == 1 and grid.num_terminated == 0
    assert "cannot be sent to a worker process" in str(grid[0].error)
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["errors", grid.experiment_path]) == 0
    text = out.getvalue()
    assert "no failed trials" not in text.lower()
    assert "cannot be sent to a worker process" in text and "_thread.lock" in text


def test_only_builtin_data_is_sent_with_the_plain_pickler() -> None:
    # the local backend sends a config of builtin data with pickle (a third of
    # cloudpickle's cost); anything else, by value with cloudpickle, as Ray does
    from tunefleet.space._sendable import is_plain

    assert is_plain({"lr": 0.1, "layers": [64, (32, None)], "name": "a", "ok": True})
    assert not is_plain({"f": len})
    assert not is_plain({"x": {"y": [lambda: 1]}})
    assert not is_plain({1.5: object()})
    assert not is_plain({"s": type("Text", (str,), {})("a")})  # a subclass may pickle oddly
    deep: Any = []
    for _ in range(40):
        deep = [deep]
    assert not is_plain(deep)  # too deep to walk: cloudpickle decides
