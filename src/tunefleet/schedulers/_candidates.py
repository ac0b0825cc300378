"""The trials a scheduler may run next, kept by the controller (never copied per call).

`choose_trial_to_run` is called every time a slot is free. At 10,000 paused trials,
building a list of them per call would cost more than the 1 ms a decision may take,
so the controller keeps this view up to date as trials pause, fail and start, and
schedulers look trials up by id in O(1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from tunefleet.trial import StopCause, Trial, TrialStatus


class Candidates:
    """PENDING and PAUSED trials that can start now, in the order they became ready.

    Iterating gives the trials; ``len``, ``in`` (a trial or a trial id) and `get` are
    O(1). `pending` and `paused` are read-only views by id; `interrupted` holds the
    paused trials that no scheduler paused (Ctrl-C, a driver restart): schedulers run
    those first. `starved` is True when nothing runs and the searcher had no new trial
    the last time it was asked: unless the scheduler resumes one of these trials, the
    experiment ends (the controller then ends them, "not resumed by the scheduler").

    A plain list of trials converts with `Candidates.of(trials)`.
    """

    __slots__ = ("_all", "_interrupted", "_paused", "_pending", "starved")

    def __init__(self, trials: Iterable[Trial] = (), *, starved: bool = False) -> None:
        self._all: dict[str, Trial] = {}
        self._pending: dict[str, Trial] = {}
        self._paused: dict[str, Trial] = {}
        self._interrupted: dict[str, Trial] = {}
        self.starved = starved
        for trial in trials:
            self.add(trial)

    @classmethod
    def of(cls, candidates: Candidates | Iterable[Trial]) -> Candidates:
        """`candidates` itself, or a new view of a plain sequence of trials."""
        return candidates if isinstance(candidates, Candidates) else cls(candidates)

    def add(self, trial: Trial) -> None:
        """Add (or re-add) `trial`, filed by its status (PENDING or PAUSED)."""
        if trial.status not in (TrialStatus.PENDING, TrialStatus.PAUSED):
            raise ValueError(
                f"trial {trial.trial_id} is {trial.status.value}: only PENDING or PAUSED "
                "trials can wait to run"
            )
        self.discard(trial.trial_id)
        self._all[trial.trial_id] = trial
        if trial.status is TrialStatus.PENDING:
            self._pending[trial.trial_id] = trial
        else:
            self._paused[trial.trial_id] = trial
            if trial.stop_reason is not StopCause.PAUSED_BY_SCHEDULER:
                self._interrupted[trial.trial_id] = trial

    def discard(self, trial_id: str) -> Trial | None:
        """Remove the trial if present; returns it."""
        self._pending.pop(trial_id, None)
        self._paused.pop(trial_id, None)
        self._interrupted.pop(trial_id, None)
        return self._all.pop(trial_id, None)

    def get(self, trial_id: str) -> Trial | None:
        return self._all.get(trial_id)

    @property
    def pending(self) -> Mapping[str, Trial]:
        return MappingProxyType(self._pending)

    @property
    def paused(self) -> Mapping[str, Trial]:
        return MappingProxyType(self._paused)

    @property
    def interrupted(self) -> Mapping[str, Trial]:
        return MappingProxyType(self._interrupted)

    def first_pending(self) -> Trial | None:
        return next(iter(self._pending.values()), None)

    def first_paused(self) -> Trial | None:
        return next(iter(self._paused.values()), None)

    def __contains__(self, item: object) -> bool:
        key = item.trial_id if isinstance(item, Trial) else item
        return isinstance(key, str) and key in self._all

    def __iter__(self) -> Iterator[Trial]:
        return iter(list(self._all.values()))  # a snapshot: the view may change meanwhile

    def __len__(self) -> int:
        return len(self._all)

    def __bool__(self) -> bool:
        return bool(self._all)

    def __repr__(self) -> str:
        return (
            f"Candidates({len(self._pending)} pending, {len(self._paused)} paused, "
            f"starved={self.starved})"
        )
