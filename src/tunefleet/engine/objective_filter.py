"""What searchers and schedulers see of a result: every objective present and finite.

The store and callbacks get each result as reported; `ObjectiveFilter` decides what
the algorithms get under `FailureConfig.nan_policy`, and remembers the worst finite
value of each objective for ``nan_policy="worst"`` (the default: as in Ray Tune the
trial goes on) and which trials reported a non-finite objective (flagged in the
progress table and the summary). An objective reported as text fails the trial under
any policy: it is never converted, and never ignored as if the trial had run well.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from tunefleet._metrics import (
    MISSING,
    MetricSpec,
    ModeSpec,
    as_number,
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
    }
)


_SHOWN_CHARS = 80  # of a text value, in the failure message


@dataclass(frozen=True)
class NanObjective:
    """An objective is not a usable number and the trial fails: NaN or infinite with
    ``nan_policy="error"``, or text (``"abc"``, ``"0.5"``) under any policy."""

    metric: str
    value: float | str

    @property
    def kind(self) -> FailureKind:
        return FailureKind.BAD_METRIC if isinstance(self.value, str) else FailureKind.NAN_METRIC

    def message(self, iteration: Any) -> str:
        if isinstance(self.value, str):
            shown = self.value
            if len(shown) > _SHOWN_CHARS:
                shown = shown[: _SHOWN_CHARS - 3] + "..."
            return (
                f"tune.report(): metric {self.metric!r} is a str ({shown!r}) at iteration "
                f"{iteration}; report a number (int or float): text is never converted"
            )
        return (
            f"metric {self.metric!r} is {self.value} at iteration "
            f"{iteration} (FailureConfig.nan_policy="
            "'error'; 'worst' would count it as the worst value seen)"
        )


class ObjectiveFilter:
    """Checks each result's objectives (one metric and mode, or several) for the algorithms."""

    def __init__(self, metric: MetricSpec, mode: ModeSpec, *, nan_policy: str) -> None:
        self.objectives = objectives(metric, mode)
        self.nan_policy = nan_policy
        self._worst: dict[str, float] = {}  # worst finite value per objective
        self._missing_warned: set[str] = set()  # trials warned about a missing objective
        # trial id -> the first non-finite objective it reported (flagged, warned once)
        self.non_finite: dict[str, str] = {}

    def for_algorithms(
        self, trial_id: str, result: dict[str, Any]
    ) -> dict[str, Any] | NanObjective | None:
        """The result as searchers and schedulers see it: never with a NaN objective.

        None: they do not see it (an objective missing). `NanObjective`: an objective
        was NaN or infinite (nan_policy="error") or text, and the trial fails. With
        "worst", a NaN is replaced by the worst finite value of that objective seen so far.
        """
        for metric, _ in self.objectives:
            raw = lookup(result, metric)
            if isinstance(raw, str):  # never ignored: the trial would end as if it had run well
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


def _with_value(result: dict[str, Any], metric: str, value: float) -> dict[str, Any]:
    """A copy of `result` with `metric` (a key or an "a/b" path) set to `value`."""
    if metric in result or "/" not in metric:
        return {**result, metric: value}
    head, rest = metric.split("/", 1)
    inner = result.get(head)
    return {**result, head: _with_value(inner if isinstance(inner, dict) else {}, rest, value)}
