"""What the framework callbacks share: which metrics to report, when, and the checkpoint.

`metrics` is Ray Tune's: None (every metric the framework logged), a name, a list of
names, or a dict ``{name reported to tunefleet: name logged by the framework}``.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from tunefleet import session
from tunefleet._metrics import python_scalar
from tunefleet.storage.checkpoint import Checkpoint

MetricNames = dict[str, str] | None
"""``{name reported: name logged}``, or None for every logged metric."""


def import_framework(module: str, *, package: str, extra: str, what: str) -> ModuleType:
    """Import a framework, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {package} ({e}): pip install 'tunefleet[{extra}]'") from e


def metric_names(metrics: Any, where: str) -> MetricNames:
    """Check Ray Tune's `metrics` argument and return ``{reported: logged}`` (or None)."""
    if metrics is None:
        return None
    if isinstance(metrics, str):
        metrics = [metrics]
    if isinstance(metrics, Mapping):
        pairs = list(metrics.items())
    elif isinstance(metrics, (list, tuple)):
        pairs = [(name, name) for name in metrics]
    else:
        raise TypeError(
            f"{where}: metrics={metrics!r} is a {type(metrics).__name__}; it must be None "
            "(report every logged metric), a metric name, a list of names, or a dict "
            "{name to report: name the framework logs}"
        )
    if not pairs:
        raise ValueError(f"{where}: metrics is empty; pass None to report every logged metric")
    for reported, logged in pairs:
        if (
            not isinstance(reported, str)
            or not isinstance(logged, str)
            or not reported
            or not logged
        ):
            raise TypeError(
                f"{where}: metrics entry {reported!r}: {logged!r} is not a pair of "
                "non-empty strings (metric names are strings)"
            )
    return dict(pairs)


def hooks(
    on: Any, allowed: Mapping[str, object] | list[str], where: str, arg: str = "on"
) -> list[str]:
    """Check an event name or list of names (hook names less their ``on_``)."""
    names = [on] if isinstance(on, str) else on
    if not isinstance(names, (list, tuple)) or not names:
        raise TypeError(
            f"{where}: {arg}={on!r} must be an event name such as 'epoch_end', or a "
            "non-empty list of them"
        )
    for name in names:
        if not isinstance(name, str) or name not in allowed:
            raise ValueError(
                f"{where}: {arg}={name!r} is not an event of this framework; use one of "
                f"{sorted(allowed)}"
            )
    return list(dict.fromkeys(names))


def pick(names: MetricNames, logged: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The metrics to report, from what the framework logged."""
    if names is None:
        return {key: python_scalar(value) for key, value in logged.items()}
    missing = [name for name in names.values() if name not in logged]
    if missing:
        raise KeyError(
            f"{where}: metric(s) {missing} asked for in `metrics` were not logged at this "
            f"point; the framework logged {sorted(logged)}"
        )
    return {reported: python_scalar(logged[name]) for reported, name in names.items()}


def check_filename(filename: Any, where: str) -> str:
    if (
        not isinstance(filename, str)
        or not filename
        or os.sep in filename
        or filename in (".", "..")
    ):
        raise ValueError(
            f"{where}: filename={filename!r} must be a plain file name (no folder), "
            "e.g. 'model.ubj'"
        )
    return filename


def check_frequency(frequency: Any, where: str) -> int:
    if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 0:
        raise ValueError(
            f"{where}: frequency={frequency!r} must be an integer >= 0 "
            "(checkpoint every `frequency` iterations; 0: only at the end)"
        )
    return frequency


def report(
    metrics: dict[str, Any],
    save: Callable[[str], None] | None = None,
    *,
    folder: str | None = None,
) -> None:
    """Report to tunefleet, with a checkpoint: `save` writes one into a temporary folder,
    or `folder` already holds one."""
    if folder is not None:
        session.report(metrics, checkpoint=Checkpoint.from_directory(folder))
        return
    if save is None:
        session.report(metrics)
        return
    with tempfile.TemporaryDirectory(prefix="tunefleet-checkpoint-") as folder:
        save(folder)
        session.report(metrics, checkpoint=Checkpoint.from_directory(folder))
