"""Stoppers built from others: `CombinedStopper`, and `make_stopper`, which turns
each form that ``RunConfig(stop=...)`` takes into a `Stopper`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunefleet.stoppers._base import Stopper, state_field
from tunefleet.stoppers._simple import DictStopper, FunctionStopper


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
        # by place, in a dict: the store finds the `StateLog`s in nested dicts only
        return {"stoppers": {str(i): s.get_state() for i, s in enumerate(self._stoppers)}}

    def set_state(self, state: dict[str, Any]) -> None:
        states = state_field(self, state, "stoppers", (list, dict))
        if isinstance(states, dict):
            states = [states[k] for k in sorted(states, key=int)]
        if len(states) != len(self._stoppers):
            raise ValueError(
                f"CombinedStopper: the state holds {len(states)} stoppers, "
                f"this one combines {len(self._stoppers)}"
            )
        for stopper, sub in zip(self._stoppers, states, strict=True):
            stopper.set_state(sub)


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
    if FunctionStopper.is_valid_function(stop):
        return FunctionStopper(stop)
    raise TypeError(
        f"stop: got {stop!r} ({type(stop).__name__}); expected None, a dict of "
        "{metric: value}, a Stopper, or a function (trial_id, result) -> bool"
    )
