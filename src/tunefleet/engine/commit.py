"""What a step commits: the store's transaction, the algorithms' state, and the deletes
of the checkpoints retention dropped (after the commit that recorded it).
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tunefleet.schedulers._base import TrialScheduler
from tunefleet.search._base import Searcher
from tunefleet.stoppers import Stopper
from tunefleet.storage.checkpoint import CheckpointKeeper, delete_checkpoints
from tunefleet.store import ExperimentStore
from tunefleet.store._writer import StoreWriteError

logger = logging.getLogger("tunefleet")

_COMMIT_EVERY_S = 0.02  # of the driver's own time: the searcher's `suggest` is not counted
_COMMIT_AT_LEAST_EVERY_S = 5.0  # however long the searcher takes
# States that take long to save (a searcher whose `get_state` grows with its history, as
# Ax's snapshot does) space the commits so that saving them stays under this share of
# the driver's time, as Ray Tune's "auto" experiment checkpoint period does. Only the
# states' time counts: the results a commit writes cost the same however they are
# grouped, and counting them would space commits by what they buffer, without end.
_COMMIT_SHARE = 0.05
_SPACING_PER_COST = (1.0 - _COMMIT_SHARE) / _COMMIT_SHARE  # 19 s between for 1 s of states
_SLOW_STATES_S = 1.0  # states this slow are named once in the log, with what they cost
_RETRY_EVERY_S = 1.0  # while the store cannot write (disk full, locked)
# SQLite's result codes that may pass: SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL
_TRANSIENT = {5, 6, 10, 13}


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (sqlite3.OperationalError, StoreWriteError)):
        return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _TRANSIENT
    return False


class Commits:
    """Commits the store, then deletes the checkpoints dropped before the commit.

    Steps commit at most every `_COMMIT_EVERY_S` (a step can be a millisecond);
    a crash loses at most that much, which resume redoes exactly. The time the searcher
    spends choosing configs (`searcher_time`) does not count towards it, up to
    `_COMMIT_AT_LEAST_EVERY_S`: a model whose `suggest` takes longer as its history grows
    (TPE, BOHB) would otherwise make every step a commit, and the bookkeeping per trial
    grow with the model's time.

    `before_commit` runs just before each commit (the controller saves the algorithms'
    states there): what a commit holds is the state as of that moment, and a step that
    does not commit costs no `get_state()` nor encoding. States that took a while to
    save space the next commits by 19 times that, so that saving them takes at most
    `_COMMIT_SHARE` of the driver's time however slow it gets: a crash then loses more
    steps (resume still redoes them exactly), but a searcher whose state grows with its
    history no longer makes the run quadratic.

    A commit that fails for a reason that may pass (the disk is full, another process
    locks the database) keeps everything buffered, warns once, and is retried every
    `_RETRY_EVERY_S` while the run goes on; no checkpoint is deleted until the commit
    that records why has succeeded. Only the last commit (``final=True``) raises.
    """

    def __init__(
        self,
        store: ExperimentStore,
        keeper: CheckpointKeeper,
        before_commit: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._keeper = keeper
        self._before_commit = before_commit  # e.g. the algorithms' states into this commit
        self._to_delete: list[str] = []  # checkpoints to delete after the next commit
        self._committed = 0.0  # time.monotonic() of the last commit
        self._searcher_s = 0.0  # of the time since, what the searcher took (not counted)
        self._cost = 0.0  # seconds `before_commit` took at the last commit (the states)
        self._told_slow = False  # slow states have been named in the log
        self._failing: str | None = None  # why the store could not write, while it cannot
        self.deleter = Deleter()
        self._pins: dict[str, str] = {}  # trial id -> the checkpoint its next attempt copies
        self._held: set[str] = set()  # dropped while pinned: deleted once no longer

    def delete_later(self, paths: list[str]) -> None:
        """Delete these checkpoints once the store has recorded why (the next commit)."""
        self._to_delete.extend(paths)

    def before_relaunch(self, home: str) -> None:
        """A trial whose checkpoints go to `home` runs again: the deletes of its dropped
        checkpoints run first (committed now if they wait for it), since the new attempt
        may write those names again."""
        folder = f"{home.rstrip('/')}/checkpoints"  # what `_folder` gives for its checkpoints
        if any(_folder(path) == folder for path in self._to_delete):
            self.flush()
        self.deleter.wait_for(folder)

    def pin(self, trial_id: str, path: str) -> None:
        """Keep `path` until the trial's next attempt has copied it (a PBT exploit's
        source): its first event (`unpin`) says it has."""
        self._pins[trial_id] = path

    def unpin(self, trial_id: str) -> None:
        path = self._pins.pop(trial_id, None)
        if path is not None and path in self._held and path not in self._pins.values():
            self._held.discard(path)
            self.delete_later([path])

    def searcher_time(self, seconds: float) -> None:
        """The searcher took `seconds` choosing a config: not counted towards the next
        commit (up to `_COMMIT_AT_LEAST_EVERY_S`)."""
        self._searcher_s += seconds

    def flush(self, *, now: bool = True, final: bool = False) -> None:
        clock = time.monotonic()
        since = clock - self._committed
        if self._failing:
            due = since >= _RETRY_EVERY_S
        else:
            spacing = _SPACING_PER_COST * self._cost
            due = since - self._searcher_s >= max(_COMMIT_EVERY_S, spacing) or since >= max(
                _COMMIT_AT_LEAST_EVERY_S, spacing
            )
        if not (final or (now and not self._failing) or due):
            return
        if self._before_commit is not None:
            self._before_commit()
            self._paced_by(time.monotonic() - clock)
        self._committed = clock
        self._searcher_s = 0.0
        try:
            self._store.flush()
        except Exception as exc:
            if final or not _transient(exc):
                raise
            if self._failing is None:
                logger.warning(
                    "The experiment store %s cannot write (%s): what it has not written is "
                    "kept in memory and written once it can; retrying every %.0f s",
                    self._store.db_path,
                    getattr(exc, "cause", exc),
                    _RETRY_EVERY_S,
                )
            self._failing = str(exc)
            return
        if self._failing is not None:
            logger.warning("The experiment store writes again; nothing was lost")
            self._failing = None
        if self._to_delete:
            # a name written again since it was dropped (a PBT exploit's copy, say) stays
            doomed = [p for p in self._to_delete if not self._keeper.is_kept(p)]
            pinned = set(self._pins.values())
            self._held.update(p for p in doomed if p in pinned)
            self.deleter.delete([p for p in doomed if p not in pinned])
            self._to_delete.clear()

    def _paced_by(self, cost: float) -> None:
        """Saving the states for this commit took `cost` seconds: the next commits are
        spaced by it."""
        self._cost = cost
        if cost >= _SLOW_STATES_S and not self._told_slow:
            self._told_slow = True
            logger.warning(
                "Saving the experiment's state took %.1f s (the searcher's, the "
                "scheduler's and the stopper's get_state()): the next commits are spaced "
                "by %.0f s or more, so that saving takes at most %.0f%% of the driver's "
                "time; a crash of the driver redoes up to that much",
                cost,
                _SPACING_PER_COST * cost,
                _COMMIT_SHARE * 100,
            )

    def close(self) -> None:
        """The run's last commit: what is left is written and every delete has run."""
        for trial_id in list(self._pins):  # never relaunched: nothing copies them now
            self.unpin(trial_id)
        self.flush()
        self.deleter.close()


class Deleter:
    """Deletes checkpoints on a thread of its own, in the order asked, so that the
    controller's thread does no file IO for retention (a delete of a big folder takes
    a while). `wait_for` holds a relaunch until no delete under its folder is pending:
    the new attempt may write those names again."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._pending: dict[str, int] = {}  # checkpoints folder -> deletes queued there
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None

    def delete(self, paths: list[str]) -> None:
        if not paths:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tunefleet-deletes", daemon=True)
            self._thread.start()
        with self._done:
            for path in paths:
                folder = _folder(path)
                self._pending[folder] = self._pending.get(folder, 0) + 1
                self._queue.put(path)

    def wait_for(self, folder: str) -> None:
        """Until the deletes queued in the checkpoints folder `folder` have run."""
        with self._done:
            self._done.wait_for(lambda: folder not in self._pending)

    def close(self) -> None:
        """Run what is queued, then end the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while (path := self._queue.get()) is not None:
            for failed, reason in delete_checkpoints([path]):
                logger.warning("could not delete checkpoint %s: %s", failed, reason)
            folder = _folder(path)
            with self._done:
                self._pending[folder] -= 1
                if not self._pending[folder]:
                    del self._pending[folder]
                self._done.notify_all()


def _folder(path: str) -> str:
    """The checkpoints folder a checkpoint is in (a local path or a URL)."""
    return path.rstrip("/").rsplit("/", 1)[0]


def save_states(
    store: ExperimentStore,
    elapsed_s: float,
    searcher: Searcher,
    scheduler: TrialScheduler,
    stopper: Stopper | None,
    callbacks: Sequence[Any] = (),
) -> None:
    """Before each commit, in its transaction (`Commits`' ``before_commit``): a resume
    continues from here."""
    store.save_state("clock", {"elapsed_s": round(elapsed_s)})
    store.save_state("searcher", searcher.get_state())
    store.save_state("scheduler", scheduler.get_state())
    if stopper is not None:
        store.save_state("stopper", stopper.get_state())
    states = callback_states(callbacks)
    if states:
        store.save_state("callbacks", {"callbacks": states})


def callback_states(callbacks: Sequence[Any]) -> list[dict[str, Any]]:
    """The callbacks' `get_state()`s that are not None, with their place and class.

    The experiment state holds JSON only (never a pickle), so a state that is not JSON
    is refused, naming the callback.
    """
    states = []
    for index, callback in enumerate(callbacks):
        get_state = getattr(callback, "get_state", None)
        state = get_state() if callable(get_state) else None
        if state is None:
            continue
        name = type(callback).__qualname__
        try:
            json.dumps(state)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"callback {name} (RunConfig.callbacks[{index}]).get_state() returned a state "
                f"that is not JSON ({exc}): tunefleet keeps the experiment state as JSON, "
                "never a pickle, so return dicts, lists, strings, numbers, bools and None "
                "(e.g. a list for a set, a path to a file you wrote for a model)"
            ) from exc
        states.append({"index": index, "class": name, "state": state})
    return states


def restore_callback_states(saved: dict[str, Any] | None, callbacks: Sequence[Any]) -> None:
    """Give each callback the state saved for the one at its place in `RunConfig.callbacks`
    (the same class); a saved state with no such callback is left, with a warning."""
    for entry in (saved or {}).get("callbacks", []):
        index, name = int(entry["index"]), str(entry["class"])
        callback = callbacks[index] if index < len(callbacks) else None
        if callback is None or type(callback).__qualname__ != name:
            logger.warning(
                "The experiment saved the state of callback %s (RunConfig.callbacks[%d]), "
                "but the restored run has %s there: its state is not restored",
                name,
                index,
                type(callback).__qualname__ if callback is not None else "no callback",
            )
            continue
        callback.set_state(entry["state"])
