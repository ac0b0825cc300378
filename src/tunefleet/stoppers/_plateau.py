"""The plateau stoppers: `TrialPlateauStopper` ends a trial whose metric has gone
flat, `ExperimentPlateauStopper` ends the experiment when the best values have."""

from __future__ import annotations

import math
import numbers
import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from tunefleet._metrics import MISSING, lookup
from tunefleet._redact import get_logger
from tunefleet._state_log import StateLog
from tunefleet.stoppers._base import (
    Stopper,
    check_int,
    check_number,
    finite,
    positive,
    state_field,
)

logger = get_logger(__name__)


class TrialPlateauStopper(Stopper):
    """Stops a trial when its metric has plateaued.

    A trial stops once it has reported at least `grace_period` results, its last
    `num_results` finite values of `metric` have a standard deviation below
    `std`, and (if `metric_threshold` is given) its latest value is at or better
    than the threshold. Results without a finite value of `metric` are ignored
    for the window but count towards the grace period.

    Args:
        metric: the metric to watch; ``"a/b"`` looks up ``result["a"]["b"]``.
        std: stop when the window's standard deviation is below this.
        num_results: how many recent values form the window.
        grace_period: the fewest results a trial reports before it may stop.
        metric_threshold: only stop once the metric is at least this good.
        mode: ``"min"`` or ``"max"``; required with `metric_threshold`.
    """

    def __init__(
        self,
        metric: str,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ) -> None:
        name = "TrialPlateauStopper"
        _check_metric(name, metric)
        check_number(name, "std", std, "a positive number", positive)
        check_int(name, "num_results", num_results, minimum=1)
        check_int(name, "grace_period", grace_period, minimum=0)
        if mode not in (None, "min", "max"):
            raise ValueError(f"{name}: mode={mode!r} must be 'min', 'max' or None")
        if metric_threshold is not None:
            check_number(name, "metric_threshold", metric_threshold, "a finite number", _true)
            if mode is None:
                raise ValueError(
                    f"{name}: metric_threshold={metric_threshold!r} needs mode='min' or 'max'"
                )
        self._metric = metric
        self._std = float(std)
        self._num_results = int(num_results)
        self._grace_period = int(grace_period)
        self._threshold = None if metric_threshold is None else float(metric_threshold)
        self._mode = mode
        self._iter: dict[str, int] = {}
        self._window: dict[str, deque[float]] = {}
        self._warned = False
        self._log = StateLog()  # [trial, value or None] per result: the saved state

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = _metric_value(self, self._metric, trial_id, result)
        self._log.append([trial_id, value])
        self._count(trial_id, value)
        if value is None:
            return False
        window = self._window[trial_id]
        if self._iter[trial_id] < self._grace_period or len(window) < self._num_results:
            return False
        if self._threshold is not None and (
            (self._mode == "min" and value > self._threshold)
            or (self._mode == "max" and value < self._threshold)
        ):
            return False
        return _pstdev(window) < self._std

    def _count(self, trial_id: str, value: float | None) -> None:
        self._iter[trial_id] = self._iter.get(trial_id, 0) + 1
        if value is not None:
            window = self._window.setdefault(trial_id, deque(maxlen=self._num_results))
            window.append(value)

    def get_state(self) -> dict[str, Any]:
        """A log of the trials' values (saved by what it gained), not the windows whole."""
        return {"results": self._log}

    def set_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "iter" in state:  # before the log: counts, windows
            iters = state_field(self, state, "iter", dict)
            windows = state_field(self, state, "window", dict)
            log: list[Any] = []
            for k, n in iters.items():
                values = [float(x) for x in windows.get(k, [])]
                log += [[str(k), None]] * (int(n) - len(values)) + [[str(k), v] for v in values]
        else:
            log = state_field(self, state, "results", list)
        self._log, self._iter, self._window = StateLog(), {}, {}
        for entry in log:
            if not (isinstance(entry, list) and len(entry) == 2):
                raise ValueError(
                    f"TrialPlateauStopper: state entry {entry!r} is not [trial, value]"
                )
            value = None if entry[1] is None else float(entry[1])
            self._log.append([str(entry[0]), value])
            self._count(str(entry[0]), value)


class ExperimentPlateauStopper(Stopper):
    """Stops the experiment when the best `top` values of `metric` have plateaued.

    After each result, the `top` best finite values seen across all trials are
    kept; when there are `top` of them and their standard deviation is at most
    `std` for more than `patience` consecutive results, every trial and the
    experiment stop.

    Args:
        metric: the metric to watch; ``"a/b"`` looks up ``result["a"]["b"]``.
        std: the standard deviation at or under which the top values count as flat.
        top: how many best values to compare (at least 2).
        mode: ``"min"`` or ``"max"``: which values are best.
        patience: how many plateaued results to wait before stopping.
    """

    def __init__(
        self,
        metric: str,
        std: float = 0.001,
        top: int = 10,
        mode: str = "min",
        patience: int = 0,
    ) -> None:
        name = "ExperimentPlateauStopper"
        _check_metric(name, metric)
        check_number(name, "std", std, "a number >= 0", lambda x: x >= 0)
        check_int(name, "top", top, minimum=2)
        check_int(name, "patience", patience, minimum=0)
        if mode not in ("min", "max"):
            raise ValueError(f"{name}: mode={mode!r} must be 'min' or 'max'")
        self._metric = metric
        self._std = float(std)
        self._top = int(top)
        self._mode = mode
        self._patience = int(patience)
        self._top_values: list[float] = []
        self._iterations = 0
        self._warned = False

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        value = _metric_value(self, self._metric, trial_id, result)
        if value is not None:
            values = sorted([*self._top_values, value], reverse=self._mode == "max")
            self._top_values = values[: self._top]
            self._iterations = self._iterations + 1 if self.has_plateaued() else 0
        return self.stop_all()

    def has_plateaued(self) -> bool:
        """Whether the top values are currently flat enough."""
        return len(self._top_values) == self._top and _pstdev(self._top_values) <= self._std

    def stop_all(self) -> bool:
        return self.has_plateaued() and self._iterations > self._patience

    def get_state(self) -> dict[str, Any]:
        return {"top_values": list(self._top_values), "iterations": self._iterations}

    def set_state(self, state: dict[str, Any]) -> None:
        values = [float(x) for x in state_field(self, state, "top_values", list)]
        self._top_values = sorted(values, reverse=self._mode == "max")[: self._top]
        self._iterations = int(state_field(self, state, "iterations", numbers.Integral))


def _true(x: float) -> bool:
    return True


def _check_metric(owner: str, metric: Any) -> None:
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"{owner}: metric={metric!r} must be a non-empty string")


def _metric_value(
    owner: TrialPlateauStopper | ExperimentPlateauStopper,
    metric: str,
    trial_id: str,
    result: Mapping[str, Any],
) -> float | None:
    raw = lookup(result, metric)
    if raw is MISSING and not owner._warned:
        owner._warned = True
        logger.warning(
            "%s: metric %r is not in a result of trial %r (keys: %s); "
            "results without it are ignored",
            type(owner).__name__,
            metric,
            trial_id,
            sorted(map(str, result)),
        )
    return None if raw is MISSING else finite(raw)


def _pstdev(values: Iterable[float]) -> float:
    """Population standard deviation (numpy's default); inf when it cannot be computed."""
    try:
        return statistics.pstdev(values)
    except (OverflowError, ValueError, statistics.StatisticsError):
        return math.inf
