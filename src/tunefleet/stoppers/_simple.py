"""The stoppers that need no history beyond a count: Noop, maximum iterations,
a plain function, and Ray's dict of ``{metric: value}`` criteria."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

from tunefleet._metrics import MISSING, lookup
from tunefleet._state_log import StateLog
from tunefleet.stoppers._base import Stopper, as_float, check_int, state_field


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
        check_int("MaximumIterationStopper", "max_iter", max_iter, minimum=1)
        self._max_iter = int(max_iter)
        self._iter: dict[str, int] = {}
        self._calls = StateLog()  # the trial of each result, in order: the saved state

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self._iter[trial_id] = self._iter.get(trial_id, 0) + 1
        self._calls.append(trial_id)
        return self._iter[trial_id] >= self._max_iter

    def get_state(self) -> dict[str, Any]:
        """A log of the trials' results (saved by what it gained), not the counts whole."""
        return {"calls": self._calls}

    def set_state(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and "iter" in state:  # before the log: the counts
            counts = state_field(self, state, "iter", dict)
            calls = [str(k) for k, v in counts.items() for _ in range(int(v))]
        else:
            calls = state_field(self, state, "calls", list)
        self._calls = StateLog(str(trial_id) for trial_id in calls)
        self._iter = {}
        for trial_id in self._calls:
            self._iter[trial_id] = self._iter.get(trial_id, 0) + 1


class FunctionStopper(Stopper):
    """Wraps a plain function ``function(trial_id, result) -> bool`` as a stopper.

    Args:
        function: returns True to stop the trial.
    """

    def __init__(self, function: Callable[[str, dict[str, Any]], bool]) -> None:
        if not callable(function):
            raise TypeError(
                f"FunctionStopper: {function!r} ({type(function).__name__}) is not callable"
            )
        self._fn = function

    @classmethod
    def is_valid_function(cls, fn: Any) -> bool:
        """Whether `fn` is a plain function stopper (Ray's check, with its error).

        Raises:
            TypeError: `fn` has ``stop_all`` but is no `Stopper` (it would never be called).
        """
        is_function = callable(fn) and not isinstance(fn, Stopper)
        if is_function and hasattr(fn, "stop_all"):
            raise TypeError(
                f"stop: {type(fn).__name__} has stop_all() but does not subclass "
                "tunefleet.stoppers.Stopper; subclass it so stop_all() is called"
            )
        return is_function

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


def _at_least(key: str, trial_id: str, value: Any, limit: float) -> bool:
    if isinstance(value, numbers.Real):
        real: Any = value  # compare as given: exact for big ints; NaN compares False
        return bool(real >= limit)
    number = as_float(value)
    if number is None:
        raise ValueError(
            f"stop criteria: result[{key!r}] of trial {trial_id!r} is {value!r} "
            f"({type(value).__name__}), which cannot be compared with {limit!r}"
        )
    return number >= limit
