"""What a step commits: the store's transaction, the algorithms' state, and the deletes
of the checkpoints retention dropped (after the commit that recorded it).
"""

from __future__ import annotations

import logging
import time

from tunefleet.schedulers._base import TrialScheduler
from tunefleet.search._base import Searcher
from tunefleet.stoppers import Stopper
from tunefleet.storage.checkpoint import CheckpointKeeper, delete_checkpoints
from tunefleet.store import ExperimentStore

logger = logging.getLogger("tunefleet")

_COMMIT_EVERY_S = 0.02


class Commits:
    """Commits the store, then deletes the checkpoints dropped before the commit.

    Steps commit at most every `_COMMIT_EVERY_S` (a step can be a millisecond);
    a crash loses at most that much, which resume redoes exactly.
    """

    def __init__(self, store: ExperimentStore, keeper: CheckpointKeeper) -> None:
        self._store = store
        self._keeper = keeper
        self._to_delete: list[str] = []  # checkpoints to delete after the next commit
        self._committed = 0.0  # time.monotonic() of the last commit

    def delete_later(self, paths: list[str]) -> None:
        """Delete these checkpoints once the store has recorded why (the next commit)."""
        self._to_delete.extend(paths)

    def flush(self, *, now: bool = True) -> None:
        clock = time.monotonic()
        if not (now or self._to_delete or clock - self._committed >= _COMMIT_EVERY_S):
            return
        self._committed = clock
        self._store.flush()
        if self._to_delete:
            # a name written again since it was dropped (a PBT exploit's copy, say) stays
            doomed = [p for p in self._to_delete if not self._keeper.is_kept(p)]
            for path, reason in delete_checkpoints(doomed):
                logger.warning("could not delete checkpoint %s: %s", path, reason)
            self._to_delete.clear()


def save_states(
    store: ExperimentStore,
    elapsed_s: float,
    searcher: Searcher,
    scheduler: TrialScheduler,
    stopper: Stopper | None,
) -> None:
    """Every step, in the step's transaction: a resume continues from here."""
    store.save_state("clock", {"elapsed_s": round(elapsed_s)})
    store.save_state("searcher", searcher.get_state())
    store.save_state("scheduler", scheduler.get_state())
    if stopper is not None:
        store.save_state("stopper", stopper.get_state())
