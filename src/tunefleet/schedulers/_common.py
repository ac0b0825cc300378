"""Helpers shared by the early-stopping schedulers (ASHA, HyperBand, median rule)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunefleet._metrics import as_number, lookup, metric_value
from tunefleet.schedulers._base import Decision
from tunefleet.trial import Trial, TrialStatus


def check_positive(owner: str, name: str, value: float, *, integer: bool = False) -> None:
    """A loud error unless `value` is a positive number (an int when `integer`)."""
    kind = "a positive integer" if integer else "a positive number"
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not value > 0:
        raise ValueError(f"{owner}: {name}={value!r} is not valid: it must be {kind}")


def check_time_attr(owner: str, time_attr: str) -> None:
    if not isinstance(time_attr, str) or not time_attr:
        raise ValueError(f"{owner}: time_attr={time_attr!r} is not valid: it must be a result key")


def direction(owner: str, metric: str | None, mode: str | None) -> float:
    """+1.0 for mode="max", -1.0 for "min": values are stored as "higher is better"."""
    for name, value in (("metric", metric), ("mode", mode)):
        if value is None:
            raise ValueError(
                f"{owner} needs `{name}`: pass {name}= to {owner}(...) or to "
                "TuneConfig(...) (set_search_properties)"
            )
    return 1.0 if mode == "max" else -1.0


def score(result: Mapping[str, Any], metric: str, sign: float) -> float:
    """The metric as "higher is better"; the controller guarantees it is finite."""
    value = metric_value(result, metric)
    if value is None:  # pragma: no cover - the controller filters such results
        raise ValueError(f"result has no numeric metric {metric!r}")
    return sign * value


def result_time(result: Mapping[str, Any], time_attr: str) -> float | None:
    """The progress of a trial (`time_attr`), or None when the result lacks it."""
    return as_number(lookup(result, time_attr))


class Starvation:
    """Notices that the searcher has no more trials to give (a pausing scheduler's end).

    The controller asks the scheduler first, then the searcher. When nothing runs,
    no trial was added, and the scheduler is asked twice with the same waiting
    trials, the searcher had nothing (finished, or blocked by paused trials): the
    scheduler must then resume something itself or the experiment would never end.
    What runs is derived from the events only, so the state is plain data.
    """

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.waiting: set[str] = set()
        self.last: set[str] | None = None  # the previous `waiting` (a list in the state)
        self.starved = False

    def added(self, trial_id: str) -> None:
        self.running.add(trial_id)  # the controller launches a new trial at once
        self.last = None
        self.starved = False

    def started(self, trial: Trial | None) -> Trial | None:
        if trial is not None:
            self.running.add(trial.trial_id)
            self.waiting.discard(trial.trial_id)
        return trial

    def ended(self, trial_id: str) -> None:
        self.running.discard(trial_id)

    def decided(self, trial_id: str, decision: Decision) -> Decision:
        if decision is not Decision.CONTINUE:
            self.running.discard(trial_id)
        return decision

    def check(self, candidates: Sequence[Trial], paused: Mapping[str, Trial] | None = None) -> bool:
        """`paused`: the PAUSED candidates by id, when the caller built them already."""
        if paused is not None and len(paused) == len(candidates):
            self.waiting = set(paused)  # all candidates are paused: no second pass
        else:
            self.waiting = {t.trial_id for t in candidates}
        self.running -= self.waiting
        # sets compare as the sorted lists did: no sort per call
        if not self.running and self.last == self.waiting:
            self.starved = True
        self.last = self.waiting.copy()  # `started` changes `waiting` later
        return self.starved

    def get_state(self) -> dict[str, Any]:
        return {
            "running": sorted(self.running),
            "waiting": sorted(self.waiting),
            "last": None if self.last is None else sorted(self.last),
            "starved": self.starved,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        self.running = set(state["running"])
        self.waiting = set(state["waiting"])
        self.last = None if state["last"] is None else set(state["last"])
        self.starved = state["starved"]


def split_candidates(candidates: Sequence[Trial]) -> tuple[dict[str, Trial], Trial | None]:
    """The PAUSED candidates by id (in order), and the first PENDING one, in one pass."""
    paused = {t.trial_id: t for t in candidates if t.status is TrialStatus.PAUSED}
    pending = None if len(paused) == len(candidates) else first_pending(candidates)
    return paused, pending


def first_pending(candidates: Sequence[Trial]) -> Trial | None:
    for trial in candidates:
        if trial.status is TrialStatus.PENDING:
            return trial
    return None
