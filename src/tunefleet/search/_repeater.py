"""Repeater: run each configuration several times and report the mean (Ray's)."""

from __future__ import annotations

import copy
import math
from typing import Any, Final

from tunefleet._metrics import MetricSpec, ModeSpec, metric_value, objectives
from tunefleet._redact import get_logger
from tunefleet.search._base import Searcher, WrappingSearcher
from tunefleet.search._shared import check_state_version

logger = get_logger(__name__)

TRIAL_INDEX: Final = "__trial_index__"
"""The config key that tells a repeated trial its index in its group (0 .. repeat-1)."""

_STATE_VERSION = 1
_FAILED: Final = "error"


class Repeater(WrappingSearcher):
    """Runs each config of the wrapped searcher `repeat` times (e.g. over random seeds).

    The wrapped searcher sees one trial per group (the group's first trial id) and,
    once every trial of the group ended, is told the MEAN of each objective (and of
    each constraint) over the trials of the group that succeeded. A trial that failed
    or reported no finite objective is left out of the mean; if all did, the group
    is told as failed (``error=True``). Intermediate results are not passed on (as
    in Ray: they belong to several trials). ``num_samples`` counts trials, every
    repetition included (as in Ray): make it a multiple of `repeat`, or the last
    group is cut short.

    Args:
        searcher: the searcher whose configs are repeated.
        repeat: how many trials each config gets (a positive int).
        set_index: add ``config["__trial_index__"]`` (0 .. repeat-1) to each trial.

    Example:
        >>> from tunefleet import space as tune
        >>> from tunefleet.search import BasicVariantGenerator
        >>> rep = Repeater(BasicVariantGenerator(seed=0), repeat=2)
        >>> rep.set_search_properties("loss", "min", {"x": tune.uniform(0, 1)}, num_samples=4)
        True
        >>> a, b = rep.suggest("t0"), rep.suggest("t1")
        >>> a["x"] == b["x"], a["__trial_index__"], b["__trial_index__"]
        (True, 0, 1)
    """

    def __init__(self, searcher: Searcher, repeat: int = 1, set_index: bool = True) -> None:
        if not isinstance(searcher, Searcher):
            raise TypeError(
                f"Repeater: searcher={searcher!r} is not a tunefleet Searcher "
                "(see tunefleet.search)"
            )
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ValueError(f"Repeater: repeat={repeat!r} must be a positive int")
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.repeat = repeat
        self.set_index = bool(set_index)
        # num_samples counts trials, repetitions included (as in Ray): the controller
        # stops at it even when the wrapped searcher counts its own configs
        self.self_limiting = False
        self._metric_spec: MetricSpec = searcher.metric
        self._mode_spec: ModeSpec = searcher.mode
        self._constraints: list[str] = []
        # Groups not yet told to the searcher: primary trial id -> config and outcomes.
        # An outcome is None (running), _FAILED, or {name: value} of the averaged names.
        self._groups: dict[str, dict[str, Any]] = {}
        self._group_of: dict[str, str] = {}  # trial id -> primary trial id
        self._current: str | None = None  # the group still taking trials

    def set_search_properties(
        self, metric: MetricSpec, mode: ModeSpec, config: dict[str, Any], **spec: Any
    ) -> bool:
        """Passed on to the wrapped searcher; its metric (else the experiment's) is averaged."""
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self.metric, self.mode = self.searcher.metric, self.searcher.mode
        self._metric_spec = self.searcher.metric if self.searcher.metric is not None else metric
        self._mode_spec = self.searcher.mode if self.searcher.mode is not None else mode
        self._constraints = list(spec.get("constraints") or [])
        return ok

    def _names(self) -> list[str]:
        """The averaged names: the objectives, then the constraints."""
        names = [m for m, _ in objectives(self._metric_spec, self._mode_spec)]
        return names + [c for c in self._constraints if c not in names]

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        """The current group's config (with its index), or a new one from the searcher."""
        group = self._groups.get(self._current) if self._current is not None else None
        if group is None or len(group["trials"]) >= self.repeat:
            config = self.searcher.suggest(trial_id)
            if not isinstance(config, dict):
                return config
            group = {"config": copy.deepcopy(config), "trials": {}}
            self._groups[trial_id] = group
            self._current = trial_id
        assert self._current is not None
        index = len(group["trials"])
        group["trials"][trial_id] = None
        self._group_of[trial_id] = self._current
        repeated: dict[str, Any] = copy.deepcopy(group["config"])
        if self.set_index:
            repeated[TRIAL_INDEX] = index
        return repeated

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        """Record the trial's outcome; tell the searcher the mean once its group ended."""
        primary = self._group_of.pop(trial_id, None)
        if primary is None:
            logger.warning("Repeater: trial %s is not one of its trials; ignored", trial_id)
            return
        group = self._groups[primary]
        group["trials"][trial_id] = self._outcome(result, error)
        outcomes = list(group["trials"].values())
        if len(outcomes) < self.repeat and primary == self._current:
            return  # more trials of this group are still to come
        if any(o is None for o in outcomes):
            return
        del self._groups[primary]
        if primary == self._current:
            self._current = None
        good = [o for o in outcomes if isinstance(o, dict)]
        if not good:
            self.searcher.on_trial_complete(primary, result=None, error=True)
            return
        mean = {name: math.fsum(o[name] for o in good) / len(good) for name in good[0]}
        self.searcher.on_trial_complete(primary, result=mean, error=False)

    def _outcome(self, result: dict[str, Any] | None, error: bool) -> dict[str, float] | str:
        if error or result is None:
            return _FAILED
        values = {}
        for name in self._names():
            value = metric_value(result, name)
            if value is None or not math.isfinite(value):
                return _FAILED
            values[name] = value
        return values

    def _restore_space(self, saved: dict[str, Any]) -> None:
        super()._restore_space(saved)
        self._metric_spec, self._mode_spec = self.metric, self.mode
        self._constraints = list(self.searcher._saved_spec().get("constraints") or [])

    def get_state(self) -> dict[str, Any]:
        """The groups not yet told to the searcher, and the searcher's state."""
        return {
            "version": _STATE_VERSION,
            "groups": [
                {"primary": p, "config": g["config"], "trials": list(g["trials"].items())}
                for p, g in self._groups.items()
            ],
            "current": self._current,
            "repeat": self.repeat,
            "set_index": self.set_index,
            "searcher": self.searcher.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what `get_state` returned (the wrapped searcher's state included)."""
        check_state_version("Repeater", state, _STATE_VERSION)
        self._groups, self._group_of = {}, {}
        for group in state["groups"]:
            trials = {str(tid): outcome for tid, outcome in group["trials"]}
            self._groups[group["primary"]] = {"config": group["config"], "trials": trials}
            for tid, outcome in trials.items():
                if outcome is None:
                    self._group_of[tid] = group["primary"]
        self._current = state["current"]
        # the saved repeat count comes back, as in Ray (its state is its attributes)
        self.repeat = int(state.get("repeat", self.repeat))
        self.set_index = bool(state.get("set_index", self.set_index))
        self.searcher.set_state(state["searcher"])
