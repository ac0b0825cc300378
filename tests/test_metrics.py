"""The shared shapes of results in `tunefleet._metrics`: flatten, and numpy / torch
values as Python ones (`python_scalar`, `python_scalars`, `json_data`)."""

from __future__ import annotations

import enum
import json
import math
from collections import namedtuple
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest

from tunefleet._metrics import flatten, json_data, python_scalar, python_scalars

# -- flatten ----------------------------------------------------------------------------------


def test_flatten_joins_nested_keys_and_keeps_their_order() -> None:
    data = {"a": 1, "b": {"c": 2, "d": {"e": 3}}, "f": 4}
    assert list(flatten(data).items()) == [("a", 1), ("b/c", 2), ("b/d/e", 3), ("f", 4)]


def test_flatten_keeps_lists_whole_and_does_not_look_inside_them() -> None:
    data = {"a": [1, {"b": 2}], "t": (1, 2)}
    assert flatten(data) == {"a": [1, {"b": 2}], "t": (1, 2)}


def test_flatten_keeps_an_empty_dict_as_a_value() -> None:
    assert flatten({"a": {}, "b": {"c": {}}}) == {"a": {}, "b/c": {}}
    assert flatten({}) == {}


def test_flatten_makes_keys_text() -> None:
    assert flatten({1: {2: "x"}, None: 0, (1, 2): 3}) == {"1/2": "x", "None": 0, "(1, 2)": 3}


def test_flatten_delimiter_and_prefix() -> None:
    config = {"lr": 0.1, "model": {"width": 64}}
    assert flatten(config, ".") == {"lr": 0.1, "model.width": 64}
    assert flatten(config, prefix="config/") == {"config/lr": 0.1, "config/model/width": 64}


def test_flatten_reads_any_mapping_and_never_changes_its_input() -> None:
    inner = {"b": 1}
    data = {"a": MappingProxyType(inner)}
    assert flatten(data) == {"a/b": 1}
    assert data == {"a": MappingProxyType(inner)} and inner == {"b": 1}


def test_space_flatten_is_the_same_function() -> None:
    from tunefleet.space import flatten as space_flatten

    assert space_flatten is flatten


# -- python_scalar / python_scalars ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected", "kind"),
    [
        (np.float32(0.5), 0.5, float),
        (np.float64(0.25), 0.25, float),
        (np.int64(3), 3, int),
        (np.bool_(True), True, bool),
        (np.array(7), 7, int),  # a 0-dim array
        (np.array(1.5, dtype=np.float16), 1.5, float),
        (np.str_("x"), "x", str),
    ],
)
def test_python_scalar_of_numpy(value: Any, expected: Any, kind: type) -> None:
    out = python_scalar(value)
    assert out == expected and type(out) is kind


def test_python_scalar_keeps_nan_and_infinities() -> None:
    assert math.isnan(python_scalar(np.float32("nan")))
    assert python_scalar(np.float64("-inf")) == -math.inf
    nan = float("nan")
    assert python_scalar(nan) is nan


def test_python_scalar_leaves_python_values_arrays_and_objects_as_they_are() -> None:
    array = np.arange(3)
    one = np.array([4])  # one element, but not a scalar: it stays an array
    thing = object()
    for value in (True, 1, 0.5, "s", None, array, one, thing, [np.int64(1)]):
        assert python_scalar(value) is value


def test_python_scalar_of_torch() -> None:
    torch = pytest.importorskip("torch")
    assert type(python_scalar(torch.tensor(2.5))) is float
    assert python_scalar(torch.tensor(3)) == 3 and type(python_scalar(torch.tensor(3))) is int
    assert python_scalar(torch.tensor(True)) is True
    loss = torch.tensor(0.75, requires_grad=True) * 1
    assert python_scalar(loss) == 0.75
    vector = torch.ones(2)
    assert python_scalar(vector) is vector


def test_python_scalars_walks_dicts_lists_and_tuples_and_copies_them() -> None:
    Point = namedtuple("Point", "x y")
    array = np.zeros(2)
    metrics = {
        "loss": np.float32(0.5),
        "nested": {"acc": np.float64(0.9), "n": [np.int64(1), (np.int64(2), "b")]},
        "point": Point(np.int64(1), 2.0),
        "array": array,
        "empty": {},
        7: "int key",
    }
    out = python_scalars(metrics)
    assert out == {
        "loss": 0.5,
        "nested": {"acc": 0.9, "n": [1, (2, "b")]},
        "point": Point(1, 2.0),
        "array": array,
        "empty": {},
        7: "int key",
    }
    assert type(out["loss"]) is float and type(out["nested"]["n"][0]) is int
    assert type(out["point"]) is Point and type(out["nested"]["n"][1]) is tuple
    assert out["array"] is array
    assert out is not metrics and out["empty"] is not metrics["empty"]
    out["new"] = 1  # the caller may add keys: the input is untouched
    assert "new" not in metrics


# -- json_data --------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_json_data_makes_json_types_only() -> None:
    value = {
        "f": np.float32(0.5),
        "i": np.int64(3),
        "b": np.bool_(False),
        "zero_dim": np.array(2.0),
        "array": np.arange(3),
        "matrix": np.eye(2, dtype=np.int8),
        "tuple": (1, np.int64(2)),
        "set": {3, 1, 2},
        "enum": Color.RED,
        "object": Unprintable(),
        "empty": {},
        1: "int key",
        None: "None key",
    }
    out = json_data(value)
    assert out == {
        "f": 0.5,
        "i": 3,
        "b": False,
        "zero_dim": 2.0,
        "array": [0, 1, 2],
        "matrix": [[1, 0], [0, 1]],
        "tuple": [1, 2],
        "set": [1, 2, 3],
        "enum": "red",
        "object": "<unprintable Unprintable>",
        "empty": {},
        "1": "int key",
        "None": "None key",
    }
    assert json.loads(json.dumps(out)) == out
    assert type(out["f"]) is float and type(out["i"]) is int and type(out["b"]) is bool


def test_json_data_keeps_nan_and_infinities_as_floats() -> None:
    out = json_data({"nan": np.float64("nan"), "inf": float("inf")})
    assert math.isnan(out["nan"]) and out["inf"] == math.inf
    assert json.dumps(out) == '{"nan": NaN, "inf": Infinity}'


def test_json_data_of_torch() -> None:
    torch = pytest.importorskip("torch")
    out = json_data({"loss": torch.tensor(0.5), "weights": torch.tensor([[1, 2]])})
    assert out == {"loss": 0.5, "weights": [[1, 2]]}


def test_json_data_of_a_value_that_holds_itself_ends() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    out = json_data(loop)
    depth = 0
    while isinstance(out, dict):
        out, depth = out["self"], depth + 1
    assert isinstance(out, str) and depth > 10
