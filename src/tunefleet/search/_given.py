"""The experiment's side of a searcher that declined its search space.

When `set_search_properties` returns False (the searcher has a space of its own),
Ray Tune merges the Tuner's `param_space`, which may then hold only constants, under
every config the searcher suggests. `WithParamSpace` does that around the searcher
and is otherwise transparent: every call and the state pass through unchanged.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from tunefleet.search._base import Searcher
from tunefleet.space import resolve


class WithParamSpace(Searcher):
    """`searcher`'s configs laid over `param_space` (its constants and sample_from values)."""

    def __init__(self, searcher: Searcher, param_space: dict[str, Any]) -> None:
        self.searcher = searcher
        super().__init__(searcher.metric, searcher.mode)
        self.param_space = param_space
        self.self_limiting = searcher.self_limiting
        self._rng = random.Random(0)  # spec.rng of sample_from values

    @property
    def metric(self) -> str | None:
        return self.searcher.metric

    @metric.setter
    def metric(self, value: str | None) -> None:
        self.searcher.metric = value

    @property
    def mode(self) -> str | None:
        return self.searcher.mode

    @mode.setter
    def mode(self, value: str | None) -> None:
        self.searcher.mode = value

    @property
    def total_samples(self) -> int | None:
        return self.searcher.total_samples

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        config = self.searcher.suggest(trial_id)
        if not isinstance(config, dict):
            return config
        return resolve(_merge(copy.deepcopy(self.param_space), config), self._rng)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def on_trial_stopped_early(self, trial_id: str, result: dict[str, Any] | None) -> None:
        self.searcher.on_trial_stopped_early(trial_id, result)

    def get_state(self) -> dict[str, Any]:
        return self.searcher.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self.searcher.set_state(state)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` laid over `base`, nested dicts merged (Ray's merge of config and suggestion)."""
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = _merge(base[key], value)
        else:
            base[key] = value
    return base
