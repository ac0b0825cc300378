"""Reading a metric out of a result: one rule for the controller, stoppers and results.

A metric name is a key of the result, or a "/"-joined path into nested dicts
("val/loss" reads ``result["val"]["loss"]``), as in Ray Tune. Numbers are ints and
floats, never bools; an int too large for a float counts as an infinity.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

MISSING: Final = object()
"""What `lookup` returns for a key the result does not have."""


def lookup(result: Mapping[str, Any], key: str) -> Any:
    """``result[key]``, or the nested value for ``"a/b"``; `MISSING` when absent."""
    if key in result:
        return result[key]
    node: Any = result
    for part in key.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def as_number(value: Any) -> float | None:
    """The value as a float, or None when it is not an int or float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int too large for a float
        return math.inf if value > 0 else -math.inf


def metric_value(result: Mapping[str, Any], metric: str) -> float | None:
    """The numeric value of `metric` in one result, or None (missing or not a number)."""
    return as_number(lookup(result, metric))
