"""Helpers shared by the early-stopping schedulers (ASHA, HyperBand, median rule)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunefleet._metrics import as_number, lookup, metric_value


def check_positive(owner: str, name: str, value: float, *, integer: bool = False) -> None:
    """A loud error unless `value` is a positive number (an int when `integer`)."""
    kind = "a positive integer" if integer else "a positive number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not value > 0:
        raise ValueError(f"{owner}: {name}={value!r} is not valid: it must be {kind}")


def check_time_attr(owner: str, time_attr: str) -> None:
    if not isinstance(time_attr, str) or not time_attr:
        raise ValueError(f"{owner}: time_attr={time_attr!r} is not valid: it must be a result key")


def direction(owner: str, metric: str | None, mode: str | None) -> float:
    """+1.0 for mode="max", -1.0 for "min": values are stored as "higher is better"."""
    for name, value in (("metric", metric), ("mode", mode)):
        if value is None:
            raise ValueError(
                f"{owner} needs `{name}`: pass {name}= to {owner}(...) or to "
                "TuneConfig(...) (set_search_properties)"
            )
    return 1.0 if mode == "max" else -1.0


def score(result: Mapping[str, Any], metric: str, sign: float) -> float:
    """The metric as "higher is better"; the controller guarantees it is finite."""
    value = metric_value(result, metric)
    if value is None:  # pragma: no cover - the controller filters such results
        raise ValueError(f"result has no numeric metric {metric!r}")
    return sign * value


def result_time(result: Mapping[str, Any], time_attr: str) -> float | None:
    """The progress of a trial (`time_attr`), or None when the result lacks it."""
    return as_number(lookup(result, time_attr))
