"""Ray Tune's ``ray.tune.logger`` names: the logger base class and the per-trial loggers."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from tunefleet.callbacks import (
    CSVLoggerCallback,
    JsonLoggerCallback,
    LoggerCallback,
    TBXLoggerCallback,
)

__all__ = [
    "CSVLoggerCallback",
    "JsonLoggerCallback",
    "LoggerCallback",
    "TBXLoggerCallback",
    "pretty_print",
]


def pretty_print(result: Mapping[str, Any], exclude: set[str] | None = None) -> str:
    """A result as readable YAML, as Ray's ``pretty_print``: ``config`` and empty
    values left out, and any key in `exclude`; values YAML cannot show become text.

    Example:
        >>> print(pretty_print({"loss": 0.5, "config": {"lr": 0.1}}), end="")
        loss: 0.5
    """
    yaml: Any = importlib.import_module("yaml")  # untyped; a core dependency
    if not isinstance(result, Mapping):
        raise TypeError(f"pretty_print: result must be a dict, not {type(result).__name__}")
    shown = {
        key: value
        for key, value in result.items()
        if key not in ("config", "hist_stats")
        and value is not None
        and (exclude is None or key not in exclude)
    }
    plain = json.loads(json.dumps(shown, default=str))
    text: str = yaml.safe_dump(plain, default_flow_style=False)
    return text
