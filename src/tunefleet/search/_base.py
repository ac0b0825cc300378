"""The Searcher interface: where new trial configurations come from.

A searcher is an event handler with JSON-able state. The controller asks it for
a configuration whenever a slot is free, and tells it about results and ends of
trials. Results reach it already normalised: the metric it was given is present
and finite (non-finite values are filtered by the controller).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Final

from tunefleet._metrics import MetricSpec, ModeSpec, fill_objective

FINISHED: Final = "FINISHED"
"""Returned by `suggest` when the searcher has no more configurations, ever."""


class Searcher(ABC):
    """Base class of search algorithms (Ray Tune's `Searcher` names).

    Args:
        metric: the metric to optimise; filled in from `TuneConfig` if None.
        mode: "min" or "max"; filled in from `TuneConfig` if None.
    """

    #: True when the searcher knows its own number of trials (grid x num_samples)
    #: and returns FINISHED itself; otherwise the controller stops at num_samples.
    self_limiting: bool = False

    def __init__(self, *, metric: str | None = None, mode: str | None = None) -> None:
        if mode is not None and mode not in ("min", "max"):
            raise ValueError(f"mode={mode!r} is not valid: it must be 'min' or 'max'")
        self.metric = metric
        self.mode = mode

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Receive the experiment's metric, mode, search space, `num_samples` and
        `constraints` (names of reported values that must be <= 0).

        Values the searcher was constructed with win over the experiment's. A
        searcher for several objectives overrides this (the base takes one).
        Returns False if the searcher cannot use them.
        """
        owner = type(self).__name__
        self.metric, self.mode = fill_objective(owner, self.metric, self.mode, metric, mode)
        return True

    @property
    def total_samples(self) -> int | None:
        """How many configs it gives in all, when it knows (shown as the run's total)."""
        return None

    @abstractmethod
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """A configuration for a new trial, None to wait, or FINISHED."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """An intermediate result of a running trial."""

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """The trial ended; `result` is its last result, `error` True if it failed."""

    def get_state(self) -> dict[str, Any]:
        """The searcher's state as JSON-able data (random generators included)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned."""
