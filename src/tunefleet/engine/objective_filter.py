"""What searchers and schedulers see of a result: every objective present and finite.

The store and callbacks get each result as reported; `ObjectiveFilter` decides what
the algorithms get under `FailureConfig.nan_policy`, and remembers the worst finite
value of each objective for ``nan_policy="worst"`` (the default: as in Ray Tune the
trial goes on) and which trials reported a non-finite objective (flagged in the
progress table and the summary). An objective reported as text fails the trial under
any policy: it is never converted, and never ignored as if the trial had run well;
so does a list, a dict or an array (a multi-element tensor).

Each trial's first result is checked for the keys the run depends on (`RequiredKey`:
the metric, a scheduler's ``time_attr``, the ``stop`` keys): one missing is a
ValueError that ends the experiment before a typo spends the whole budget.
"""

from __future__ import annotations

import difflib
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunefleet._metrics import (
    MISSING,
    MetricSpec,
    ModeSpec,
    as_number,
    flatten,
    lookup,
    metric_value,
    objectives,
)
from tunefleet.trial import FailureKind

logger = logging.getLogger("tunefleet")

_AUTO_KEYS = frozenset(
    {
        "training_iteration",
        "time_this_iter_s",
        "time_total_s",
        "time_since_restore",
        "iterations_since_restore",
        "timestamp",
        "trial_id",
        "pid",
        "done",
        "checkpoint_dir_name",
        "date",
        "hostname",
        "node_ip",
        "experiment_tag",
        "resources",  # tunefleet's resource usage (result.RESOURCES)
    }
)


_SHOWN_CHARS = 80  # of a text value, in the failure message
_LISTED = 30  # keys of the result named in a missing-key error
STRICT_ENV = "TUNE_DISABLE_STRICT_METRIC_CHECKING"  # Ray's: "1" allows a first result without


def _shorten(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class NanObjective:
    """An objective is not a usable number and the trial fails: NaN or infinite with
    ``nan_policy="error"``, or text (``"abc"``, ``"0.5"``), a list, a dict or an array
    under any policy."""

    metric: str
    value: Any

    @property
    def kind(self) -> FailureKind:
        is_float = isinstance(self.value, float)
        return FailureKind.NAN_METRIC if is_float else FailureKind.BAD_METRIC

    def message(self, iteration: Any) -> str:
        if isinstance(self.value, str):
            return (
                f"tune.report(): metric {self.metric!r} is a str ({_shorten(self.value)!r}) at "
                f"iteration {iteration}; report a number (int or float): text is never converted"
            )
        if not isinstance(self.value, float):
            shown = _shorten(" ".join(repr(self.value).split()))
            return (
                f"tune.report(): metric {self.metric!r} is a {type(self.value).__name__} "
                f"({shown}) at iteration {iteration}; report a number (int or float, a numpy "
                "scalar or a 0-d tensor): reduce it first, e.g. loss.mean().item()"
            )
        return (
            f"metric {self.metric!r} is {self.value} at iteration "
            f"{iteration} (FailureConfig.nan_policy="
            "'error'; 'worst' would count it as the worst value seen)"
        )


@dataclass(frozen=True)
class RequiredKey:
    """A key each trial's first result must have, and what wants it (for the error):
    ``strict`` keys (metrics) may be let off with TUNE_DISABLE_STRICT_METRIC_CHECKING=1."""

    key: str
    owner: str  # e.g. "TuneConfig(metric=...)", "ASHAScheduler(time_attr=...)"
    strict: bool = True


def check_first_result(trial_id: str, result: dict[str, Any], keys: Sequence[RequiredKey]) -> bool:
    """Whether `result` was checked; a ValueError names the first of `keys` it lacks,
    the keys it has and the closest match. Auto-filled keys always count as present;
    as in Ray, a result with nothing but auto-filled keys is not checked."""
    flat = flatten({k: v for k, v in result.items() if k != "config"})
    has = sorted(k for k in flat if k.split("/", 1)[0] not in _AUTO_KEYS)
    if not has:
        return False
    lenient = os.environ.get(STRICT_ENV) == "1"
    for need in keys:
        if need.key in _AUTO_KEYS or lookup(result, need.key) is not MISSING:
            continue
        if need.strict and lenient:
            continue
        close = difflib.get_close_matches(need.key, list(flat), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        listed = ", ".join(has[:_LISTED]) + (
            f" and {len(has) - _LISTED} more" if has[_LISTED:] else ""
        )
        off = (
            f" Set {STRICT_ENV}=1 to allow results without it (then they are recorded "
            "but not used by the searcher or scheduler)."
            if need.strict
            else ""
        )
        raise ValueError(
            f"{need.owner}: {need.key!r} is not in the first result of trial {trial_id!r}, "
            f"which has {listed} (and the auto-filled keys){hint} The experiment was "
            f"stopped before more trials started; report {need.key!r} with tune.report() "
            f"or fix the name.{off}"
        )
    return True


class ObjectiveFilter:
    """Checks each result's objectives (one metric and mode, or several) for the algorithms,
    and each trial's first result for the `required` keys (`check_first_result`)."""

    def __init__(
        self,
        metric: MetricSpec,
        mode: ModeSpec,
        *,
        nan_policy: str,
        required: Sequence[RequiredKey] = (),
    ) -> None:
        self.objectives = objectives(metric, mode)
        self.nan_policy = nan_policy
        self.required = list(required)
        self._checked: set[str] = set()  # trials whose first result was checked
        self._worst: dict[str, float] = {}  # worst finite value per objective
        self._missing_warned: set[str] = set()  # trials warned about a missing objective
        # trial id -> the first non-finite objective it reported (flagged, warned once)
        self.non_finite: dict[str, str] = {}

    def for_algorithms(
        self, trial_id: str, result: dict[str, Any]
    ) -> dict[str, Any] | NanObjective | None:
        """The result as searchers and schedulers see it: never with a NaN objective.

        None: they do not see it (an objective missing). `NanObjective`: an objective
        was NaN or infinite (nan_policy="error") or not a number, and the trial fails.
        With "worst", a NaN is replaced by the worst finite value of that objective seen
        so far. Raises ValueError when a trial's first result lacks a required key.
        """
        if trial_id not in self._checked and check_first_result(trial_id, result, self.required):
            self._checked.add(trial_id)
        for metric, _ in self.objectives:
            raw = lookup(result, metric)
            if _not_a_number(raw):  # never ignored: the trial would end as if it had run well
                return NanObjective(metric, raw)
        if not self._usable(trial_id, result):
            return None
        seen = result
        for metric, mode in self.objectives:
            value = metric_value(result, metric)
            assert value is not None  # _usable checked it is a number
            if math.isfinite(value):
                self._note_worst(metric, mode, value)
                continue
            if self.nan_policy == "worst":
                self._flag(trial_id, metric, value, result)
                worst = self._worst.get(metric)
                if worst is None:
                    return None
                seen = _with_value(seen, metric, worst)
                continue
            return NanObjective(metric, value)
        return seen

    def _flag(self, trial_id: str, metric: str, value: float, result: dict[str, Any]) -> None:
        if trial_id in self.non_finite:
            return
        self.non_finite[trial_id] = metric
        logger.warning(
            "Trial %s reported %s=%s at iteration %s: recorded, and ranked as the worst "
            "value (FailureConfig.nan_policy='worst'; 'error' would fail the trial)",
            trial_id,
            metric,
            value,
            result.get("training_iteration"),
        )

    def clean(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """The result for a searcher: None unless every objective is present and finite."""
        if not result:  # none yet ({}): the searcher hears None, as before any report
            return None
        for metric, _ in self.objectives:
            value = metric_value(result, metric)
            if value is None or not math.isfinite(value):
                return None
        return result

    def _note_worst(self, metric: str, mode: str, value: float) -> None:
        worst = self._worst.get(metric)
        if worst is None or (value > worst) == (mode != "max"):
            self._worst[metric] = value

    def _usable(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Whether every objective is present and a number (NaN included: see above)."""
        for metric, _ in self.objectives:
            raw = lookup(result, metric)
            if raw is MISSING:
                if trial_id not in self._missing_warned:
                    self._missing_warned.add(trial_id)
                    logger.warning(
                        "Trial %s reported a result without the metric %r (it has: %s); "
                        "such results are recorded but not used by the searcher or scheduler",
                        trial_id,
                        metric,
                        ", ".join(sorted(k for k in result if k not in _AUTO_KEYS)) or "nothing",
                    )
                return False
            if as_number(raw) is None:
                return False
        return True


def _not_a_number(raw: Any) -> bool:
    """Text, a list, a dict, an array: not None (unset), not a bool (taken as 0 or 1)."""
    if raw is MISSING or raw is None or isinstance(raw, bool):
        return False
    return as_number(raw) is None


def _with_value(result: dict[str, Any], metric: str, value: float) -> dict[str, Any]:
    """A copy of `result` with `metric` (a key or an "a/b" path) set to `value`."""
    if metric in result or "/" not in metric:
        return {**result, metric: value}
    head, rest = metric.split("/", 1)
    inner = result.get(head)
    return {**result, head: _with_value(inner if isinstance(inner, dict) else {}, rest, value)}
