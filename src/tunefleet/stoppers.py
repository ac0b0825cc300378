"""Stoppers: rules that end a trial, or the whole experiment, from its reported results.

The names and semantics follow Ray Tune's ``ray.tune.stopper`` module, so a Ray
script ports by changing its imports::

    from tunefleet.stoppers import CombinedStopper, MaximumIterationStopper, TimeoutStopper

    stop = CombinedStopper(MaximumIterationStopper(100), TimeoutStopper(3600))
    tuner = tune.Tuner(train, run_config=tune.RunConfig(stop=stop))

The controller calls ``stopper(trial_id, result)`` after each result (True stops
that trial) and ``stopper.stop_all()`` once per step (True ends the experiment).
`RunConfig(stop=...)` also takes a dict or a plain function; `make_stopper` turns
each form into a `Stopper`.

Differences from Ray Tune, on purpose:

- Non-finite metric values (NaN, inf) are ignored by the plateau stoppers instead
  of turning their standard deviation into NaN.
- `CombinedStopper` shows every result to every stopper (Ray's ``any()`` stops
  at the first True, so later stoppers miss results and count wrong).
- `ExperimentPlateauStopper(patience=n)` waits for n plateaued results after the
  first one (Ray counts the first, so its patience 0 and 1 behave the same).
- Optional constructor arguments are keyword-only, and bad arguments raise at once.
- State (`Stopper.get_state`) is plain JSON, never a pickle.
"""

from __future__ import annotations

import datetime
import math
import numbers
import statistics
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tunefleet._metrics import MISSING, lookup
from tunefleet._redact import get_logger

logger = get_logger(__name__)

__all__ = [
    "CombinedStopper",
    "DictStopper",
    "ExperimentPlateauStopper",
    "FunctionStopper",
    "MaximumIterationStopper",
    "NoopStopper",
    "Stopper",
    "TimeoutStopper",
    "TrialPlateauStopper",
    "make_stopper",
]


class Stopper(ABC):
    """Decides when a trial, or the whole experiment, should stop.

    Subclass it and implement `__call__`; override `stop_all` to end the
    experiment, and `get_state`/`set_state` when the stopper keeps state that
    must survive a resume.

    Example:
        >>> class StopAtLoss(Stopper):
        ...     def __call__(self, trial_id, result):
        ...         return result["loss"] < 0.1
        >>> StopAtLoss()("t1", {"loss": 0.05})
        True
    """

    @abstractmethod
    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Return True to stop the trial `trial_id`, which just reported `result`."""

    def stop_all(self) -> bool:
        """Return True to stop the whole experiment."""
        return False

    def get_state(self) -> dict[str, Any]:
        """Return the stopper's state as JSON-able data, for resuming."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore a state returned by `get_state`."""


class NoopStopper(Stopper):
    """Never stops anything."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False


class MaximumIterationStopper(Stopper):
    """Stops each trial after `max_iter` results.

    Args:
        max_iter: the number of results after which a trial is stopped.
    """

    def __init__(self, max_iter: int) -> None:
        _check_int("MaximumIterationStopper", "max_iter", max_iter, minimum=1)
        self._max_iter = int(max_iter)
        self._iter: dict[str, int] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._iter[trial_id] = self._iter.get(trial_id, 0) + 1
        return self._iter[trial_id] >= self._max_iter

    def get_state(self) -> dict[str, Any]:
        return {"iter": dict(self._iter)}

    def set_state(self, state: dict[str, Any]) -> None:
        self._iter = {str(k): int(v) for k, v in _field(self, state, "iter", dict).items()}


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
        *,
        std: float = 0.01,
        num_results: int = 4,
        grace_period: int = 4,
        metric_threshold: float | None = None,
        mode: str | None = None,
    ) -> None:
        name = "TrialPlateauStopper"
        _check_metric(name, metric)
        _check_number(name, "std", std, "a positive number", _positive)
        _check_int(name, "num_results", num_results, minimum=1)
        _check_int(name, "grace_period", grace_period, minimum=0)
        if mode not in (None, "min", "max"):
            raise ValueError(f"{name}: mode={mode!r} must be 'min', 'max' or None")
        if metric_threshold is not None:
            _check_number(name, "metric_threshold", metric_threshold, "a finite number", _true)
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

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._iter[trial_id] = self._iter.get(trial_id, 0) + 1
        value = _metric_value(self, self._metric, trial_id, result)
        if value is None:
            return False
        window = self._window.setdefault(trial_id, deque(maxlen=self._num_results))
        window.append(value)
        if self._iter[trial_id] < self._grace_period or len(window) < self._num_results:
            return False
        if self._threshold is not None and (
            (self._mode == "min" and value > self._threshold)
            or (self._mode == "max" and value < self._threshold)
        ):
            return False
        return _pstdev(window) < self._std

    def get_state(self) -> dict[str, Any]:
        return {
            "iter": dict(self._iter),
            "window": {k: list(v) for k, v in self._window.items()},
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._iter = {str(k): int(v) for k, v in _field(self, state, "iter", dict).items()}
        self._window = {
            str(k): deque((float(x) for x in v), maxlen=self._num_results)
            for k, v in _field(self, state, "window", dict).items()
        }


class TimeoutStopper(Stopper):
    """Stops the experiment after `timeout` of running time.

    The clock starts at the first call (a result or a `stop_all` check), not at
    construction. On resume the remaining budget carries over: time while the
    experiment was not running does not count.

    Args:
        timeout: seconds, or a `datetime.timedelta`.
        clock: returns the current time in seconds; injectable for tests.
    """

    def __init__(
        self,
        timeout: float | datetime.timedelta,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        _check_number(
            "TimeoutStopper", "timeout", seconds, "a positive number of seconds", _positive, timeout
        )
        self._timeout = float(seconds)
        self._budget = self._timeout
        self._clock = clock
        self._last_check: float | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._tick()
        return False

    def stop_all(self) -> bool:
        self._tick()
        if self._budget <= 0:
            logger.info("TimeoutStopper: %gs of running time reached", self._timeout)
            return True
        return False

    def _tick(self) -> None:
        now = self._clock()
        if self._last_check is not None:
            self._budget -= max(0.0, now - self._last_check)
        self._last_check = now

    def get_state(self) -> dict[str, Any]:
        budget = self._budget
        if self._last_check is not None:
            budget -= max(0.0, self._clock() - self._last_check)
        return {"budget_left": budget}

    def set_state(self, state: dict[str, Any]) -> None:
        self._budget = float(_field(self, state, "budget_left", numbers.Real))
        self._last_check = None


class CombinedStopper(Stopper):
    """Stops when any of its stoppers says so; every stopper sees every result.

    Args:
        *stoppers: the `Stopper` objects to combine.
    """

    def __init__(self, *stoppers: Stopper) -> None:
        for i, stopper in enumerate(stoppers):
            if not isinstance(stopper, Stopper):
                raise TypeError(
                    f"CombinedStopper: argument {i} is {stopper!r} "
                    f"({type(stopper).__name__}), not a Stopper; "
                    "convert a dict or function with make_stopper() first"
                )
        self._stoppers = stoppers

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        # A list, not any(): stateful stoppers must count every result.
        return any([s(trial_id, result) for s in self._stoppers])

    def stop_all(self) -> bool:
        return any([s.stop_all() for s in self._stoppers])

    def get_state(self) -> dict[str, Any]:
        return {"stoppers": [s.get_state() for s in self._stoppers]}

    def set_state(self, state: dict[str, Any]) -> None:
        states = _field(self, state, "stoppers", list)
        if len(states) != len(self._stoppers):
            raise ValueError(
                f"CombinedStopper: the state holds {len(states)} stoppers, "
                f"this one combines {len(self._stoppers)}"
            )
        for stopper, sub in zip(self._stoppers, states, strict=True):
            stopper.set_state(sub)


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
        *,
        std: float = 0.001,
        top: int = 10,
        mode: str = "min",
        patience: int = 0,
    ) -> None:
        name = "ExperimentPlateauStopper"
        _check_metric(name, metric)
        _check_number(name, "std", std, "a number >= 0", lambda x: x >= 0)
        _check_int(name, "top", top, minimum=2)
        _check_int(name, "patience", patience, minimum=0)
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
        values = [float(x) for x in _field(self, state, "top_values", list)]
        self._top_values = sorted(values, reverse=self._mode == "max")[: self._top]
        self._iterations = int(_field(self, state, "iterations", numbers.Integral))


class FunctionStopper(Stopper):
    """Wraps a plain function ``fn(trial_id, result) -> bool`` as a stopper.

    Args:
        fn: returns True to stop the trial.
    """

    def __init__(self, fn: Callable[[str, dict[str, Any]], bool]) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionStopper: {fn!r} ({type(fn).__name__}) is not callable")
        self._fn = fn

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self._fn(trial_id, result))


class DictStopper(Stopper):
    """Stops a trial when any ``result[key] >= value`` (Ray Tune's dict rule).

    A key with ``/`` such as ``"info/loss"`` is looked up in nested dicts. A key
    missing from a trial's first result raises `ValueError`, as it would never
    stop anything; a key missing from a later result is skipped.

    Args:
        criteria: metric names mapped to the values at which trials stop, e.g.
            ``{"training_iteration": 50, "mean_accuracy": 0.98}``.
    """

    def __init__(self, criteria: Mapping[str, float]) -> None:
        if not isinstance(criteria, Mapping):
            raise TypeError(f"DictStopper: criteria must be a dict, not {type(criteria).__name__}")
        for key, value in criteria.items():
            if not isinstance(key, str) or not key:
                raise ValueError(
                    f"stop criteria: key {key!r} ({type(key).__name__}) must be a "
                    "non-empty string (nest with 'a/b', not with dicts)"
                )
            if not isinstance(value, numbers.Real) or value != value:  # NaN never stops
                raise ValueError(
                    f"stop criteria: value {value!r} of key {key!r} must be a number (not NaN), "
                    "at or above which trials stop"
                )
        self._criteria = dict(criteria)
        self._seen: set[str] = set()

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        first = trial_id not in self._seen
        self._seen.add(trial_id)
        stop = False
        for key, limit in self._criteria.items():
            value = lookup(result, key)
            if value is MISSING:
                if first:
                    raise ValueError(
                        f"stop criteria: key {key!r} is not in the first result of trial "
                        f"{trial_id!r}; the result has keys {sorted(map(str, result))}"
                    )
                continue
            if value is not None and _at_least(key, trial_id, value, limit):
                stop = True
        return stop


def make_stopper(stop: Any) -> Stopper | None:
    """Turn the ``stop`` argument of `RunConfig` into a `Stopper`.

    Args:
        stop: None, a dict of ``{metric: value}`` criteria, a `Stopper`, or a
            function ``(trial_id, result) -> bool``.

    Returns:
        The stopper, or None when `stop` is None.

    Raises:
        ValueError: a dict with a non-string key or a non-number value.
        TypeError: any other kind of object.
    """
    if stop is None or isinstance(stop, Stopper):
        return stop
    if isinstance(stop, Mapping):
        return DictStopper(stop)
    if callable(stop):
        if hasattr(stop, "stop_all"):
            raise TypeError(
                f"stop: {type(stop).__name__} has stop_all() but does not subclass "
                "tunefleet.stoppers.Stopper; subclass it so stop_all() is called"
            )
        return FunctionStopper(stop)
    raise TypeError(
        f"stop: got {stop!r} ({type(stop).__name__}); expected None, a dict of "
        "{metric: value}, a Stopper, or a function (trial_id, result) -> bool"
    )


# -- helpers ----------------------------------------------------------------------------------


def _check_int(owner: str, name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{owner}: {name}={value!r} must be {what}")


def _check_number(
    owner: str, name: str, value: Any, what: str, ok: Callable[[float], bool], shown: Any = None
) -> None:
    number = None if isinstance(value, bool) else _finite(value)
    if not isinstance(value, numbers.Real) or number is None or not ok(number):
        raise ValueError(f"{owner}: {name}={value if shown is None else shown!r} must be {what}")


def _positive(x: float) -> bool:
    return x > 0


def _true(x: float) -> bool:
    return True


def _check_metric(owner: str, metric: Any) -> None:
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"{owner}: metric={metric!r} must be a non-empty string")


def _field(owner: Stopper, state: dict[str, Any], key: str, kind: Any) -> Any:
    value = state.get(key) if isinstance(state, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"{type(owner).__name__}: state {state!r} has no valid {key!r}")
    return value


def _as_float(value: Any) -> float | None:
    """The value as a float, or None when it is missing, text, or not a number."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _finite(value: Any) -> float | None:
    """The value as a finite float, or None (missing, non-numeric, NaN or inf)."""
    number = _as_float(value)
    return number if number is not None and math.isfinite(number) else None


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
    return None if raw is MISSING else _finite(raw)


def _pstdev(values: Iterable[float]) -> float:
    """Population standard deviation (numpy's default); inf when it cannot be computed."""
    try:
        return statistics.pstdev(values)
    except (OverflowError, ValueError, statistics.StatisticsError):
        return math.inf


def _at_least(key: str, trial_id: str, value: Any, limit: float) -> bool:
    if isinstance(value, numbers.Real):
        real: Any = value  # compare as given: exact for big ints; NaN compares False
        return bool(real >= limit)
    number = _as_float(value)
    if number is None:
        raise ValueError(
            f"stop criteria: result[{key!r}] of trial {trial_id!r} is {value!r} "
            f"({type(value).__name__}), which cannot be compared with {limit!r}"
        )
    return number >= limit
