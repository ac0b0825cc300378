"""The trials that wait to run: PENDING and PAUSED, each once its last attempt has exited."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tunefleet.schedulers._candidates import Candidates
from tunefleet.trial import Trial


class Waiting:
    """`ready`: the trials that may run next, a live `Candidates` view for the scheduler
    (never copied). A trial whose last attempt's process has not exited yet settles
    first: it joins `ready` once it has (a trial never runs twice at once).
    """

    def __init__(self, trials: Iterable[Trial], attempt_alive: Callable[[str], bool]) -> None:
        self.ready = Candidates(trials)
        self._attempt_alive = attempt_alive
        self._settling: dict[str, Trial] = {}

    def add(self, trial: Trial) -> None:
        """`trial` (PENDING or PAUSED) may run again once its last attempt has exited."""
        if self._attempt_alive(trial.trial_id):
            self._settling[trial.trial_id] = trial
        else:
            self.ready.add(trial)

    def settle(self) -> None:
        """Move the trials whose last attempt has exited to `ready`."""
        for trial_id, trial in list(self._settling.items()):
            if not self._attempt_alive(trial_id):
                del self._settling[trial_id]
                self.ready.add(trial)

    @property
    def settling(self) -> bool:
        """Whether a trial still waits for its last attempt to exit."""
        return bool(self._settling)
