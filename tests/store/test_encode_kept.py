"""The store's encoder keeps one C JSON encoder for every record (`_schema._ENCODE`):
the text must be exactly what the standard encoder writes, for every kind of value."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tunefleet.store import _schema

VALUES: list[Any] = [
    {"loss": 0.125, "nan": float("nan"), "inf": [float("inf"), float("-inf")], 3: "int key"},
    {"nested": {"deep": [1, (2, 3), {"e": None, "t": True}]}, "text": "h\u00e9llo \u2713"},
    {"np": np.float32(1.5), "array": np.arange(3), "int": np.int64(7)},
    {"object": object()},
    "a string",
    1.0,
    [],
    {},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_kept_encoder_writes_what_the_standard_one_does(value: Any) -> None:
    assert _schema._ENCODE(value) == _schema._ENCODER.encode(value)


def test_a_tuple_key_fails_alike_and_encode_still_answers() -> None:
    with pytest.raises(TypeError):
        _schema._ENCODE({(1, 2): 3})
    assert json.loads(_schema.encode({(1, 2): 3})) is not None


def test_a_circular_value_is_still_encoded() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert _schema.encode(loop).startswith('{"self":{"self":')


def test_without_the_c_accelerator_the_standard_encoder_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    encoder = _schema._chunked_encoder()
    assert encoder({"a": [1.5]}) == '{"a":[1.5]}'
