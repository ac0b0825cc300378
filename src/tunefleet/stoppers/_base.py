"""The Stopper interface, and the argument and state checks the stoppers share."""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


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


def check_int(owner: str, name: str, value: Any, *, minimum: int) -> None:
    """A loud error unless `value` is an integer (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{owner}: {name}={value!r} must be {what}")


def check_number(
    owner: str, name: str, value: Any, what: str, ok: Callable[[float], bool], shown: Any = None
) -> None:
    """A loud error unless `value` is a finite real number (not a bool) that `ok` accepts.

    The message shows `shown` instead of `value` when given, and says `value` must be `what`.
    """
    number = None if isinstance(value, bool) else finite(value)
    if not isinstance(value, numbers.Real) or number is None or not ok(number):
        raise ValueError(f"{owner}: {name}={value if shown is None else shown!r} must be {what}")


def positive(x: float) -> bool:
    return x > 0


def state_field(owner: Stopper, state: dict[str, Any], key: str, kind: Any) -> Any:
    """`state[key]`, which must be an instance of `kind`; else a loud error naming `owner`."""
    value = state.get(key) if isinstance(state, dict) else None
    if not isinstance(value, kind):
        raise ValueError(f"{type(owner).__name__}: state {state!r} has no valid {key!r}")
    return value


def as_float(value: Any) -> float | None:
    """The value as a float, or None when it is missing, text, or not a number."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def finite(value: Any) -> float | None:
    """The value as a finite float, or None (missing, non-numeric, NaN or inf)."""
    number = as_float(value)
    return number if number is not None and math.isfinite(number) else None
