"""The trial side: `report`, `get_checkpoint`, `get_context`.

These functions work inside a trial, in the worker process that runs it. A
report is cheap: results are sent in small batches without waiting for the
driver, unless the scheduler needs to decide on each one (`sync`) or on this one
(the first at or past one of its decision points, `decide_at`). A stop asked by the
driver surfaces at the next `report()` and unwinds the trainable.
"""

from __future__ import annotations

import datetime
import functools
import importlib
import math
import os
import platform
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from tunefleet import result as keys
from tunefleet._linger import LINGERING
from tunefleet._metrics import python_scalars
from tunefleet._milestones import Crossing, DecisionPoints
from tunefleet.resources import PlacementGroupFactory
from tunefleet.storage import _staged
from tunefleet.storage.checkpoint import Checkpoint, checkpoint_dir_name, persist_checkpoint
from tunefleet.storage.paths import is_url

# "module:function" installing a session in a process a launcher started (`_require_session`).
SESSION_HOOK_ENV = "TUNEFLEET_SESSION_HOOK"

_FLUSH_EVERY_S = 0.002  # batch reports that come faster than this
_MAX_BATCH = 512


def host_keys(now: float) -> dict[str, Any]:
    """Ray Tune's auto-filled ``date``, ``hostname`` and ``node_ip`` of a result made at
    `now` (seconds since the epoch): function and class trainables both get them here."""
    return {keys.DATE: _date(int(now)), keys.HOSTNAME: platform.node(), keys.NODE_IP: _node_ip()}


@functools.lru_cache(maxsize=4)
def _date(second: int) -> str:
    """The local time of `second` as Ray Tune writes it (made once a second, not per report)."""
    return datetime.datetime.fromtimestamp(second).strftime("%Y-%m-%d_%H-%M-%S")


@functools.cache
def _node_ip() -> str:
    """The Ray node's address in a Ray worker (the Ray backend), else the loopback one."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            return str(ray.util.get_node_ip_address())
        except Exception:  # an address is informative only: never fail a report for it
            pass
    return "127.0.0.1"


class RunningTotals:
    """Ray Tune's ``timesteps_total`` and ``episodes_total``: the sums of the
    ``timesteps_this_iter`` / ``episodes_this_iter`` a trainable reports, filled in only
    once it has reported such an increment, and never over a total it reports itself."""

    def __init__(self) -> None:
        self.timesteps: float | None = None
        self.episodes: float | None = None
        self.timesteps_since_restore: float = 0

    def fill(self, result: dict[str, Any]) -> None:
        steps, episodes = result.get(keys.TIMESTEPS_THIS_ITER), result.get(keys.EPISODES_THIS_ITER)
        if _is_count(steps):
            self.timesteps = (self.timesteps or 0) + steps
            self.timesteps_since_restore += steps
        if _is_count(episodes):
            self.episodes = (self.episodes or 0) + episodes
        if self.timesteps is not None:
            result.setdefault(keys.TIMESTEPS_TOTAL, self.timesteps)
        if self.episodes is not None:
            result.setdefault(keys.EPISODES_TOTAL, self.episodes)
        if self.timesteps_since_restore:
            result.setdefault(keys.TIMESTEPS_SINCE_RESTORE, self.timesteps_since_restore)


def _is_count(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class StopTrial(BaseException):
    """Raised inside the trainable at `report()` when the driver stopped the trial.

    A BaseException so that a user's `except Exception:` does not swallow it.
    """

    def __init__(self, pause: bool = False) -> None:
        super().__init__("trial stopped by tunefleet")
        self.pause = pause


@dataclass(frozen=True)
class TuneContext:
    """What a trial knows about itself (Ray Tune's `get_context()` names)."""

    trial_id: str
    trial_name: str
    trial_dir: str
    experiment_name: str
    attempt: int
    resources: dict[str, float]  # tunefleet's names: {"cpu": 2.0, "gpu": 0.0, ...}
    gpu_ids: tuple[str, ...] = ()  # the devices given to this trial (CUDA_VISIBLE_DEVICES)
    placement: PlacementGroupFactory | None = None  # the bundles of `with_resources`, if any

    def get_trial_id(self) -> str:
        return self.trial_id

    def get_trial_name(self) -> str:
        return self.trial_name

    def get_trial_dir(self) -> str:
        return self.trial_dir

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_trial_resources(self) -> PlacementGroupFactory:
        """The trial's resources as a `PlacementGroupFactory`, as in Ray Tune: the one given
        to `tune.with_resources`, or one bundle of its dict (after a resize, the new one).

        ``get_trial_resources()["cpu"]`` (tunefleet's earlier dict form) still works.
        """
        held = {"cpu": 0.0, "gpu": 0.0, **self.resources}
        if self.placement is not None and self.placement.totals() == held:
            return self.placement
        return PlacementGroupFactory.of(self.resources)

    def get_gpu_ids(self) -> list[str]:
        """The GPU ids given to this trial (as ``ray.get_gpu_ids()`` in a Ray trial)."""
        return list(self.gpu_ids)

    def new_checkpoint_dir(self) -> str:
        """A fresh empty folder inside the trial's checkpoints folder: write a checkpoint
        there and hand it to ``tune.report(checkpoint=tune.Checkpoint.from_directory(d))``,
        which renames it into place instead of copying it (the zero-copy path; with remote
        storage it is a local folder, uploaded by report()). Do not modify it afterwards.
        One that is never reported is removed when the trial ends."""
        return _require_session("get_context").new_checkpoint_dir()

    def get_world_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 1


Sender = Callable[[list[tuple[dict[str, Any], str | None]]], None]
ControlPoll = Callable[[bool], str | None]  # (block) -> None | "CONTINUE" | "STOP" | "PAUSE"


class TrialSession:
    """The state of the trial running in this process."""

    def __init__(
        self,
        *,
        context: TuneContext,
        send: Sender,
        poll_control: ControlPoll,
        checkpoint: str | None,
        iteration: int,
        time_total: float,
        sync: bool,
        stop_criteria: dict[str, float],
        decide_at: DecisionPoints | None = None,
        storage_dir: str | None = None,
        storage_filesystem: Any = None,
        usage: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.context = context
        self._usage = usage  # adds the trial's resource usage to a result (backends/_usage.py)
        self._send = send
        self._poll_control = poll_control
        # Checkpoints go to the trial's folder in remote storage if there is one.
        self.checkpoint_home = storage_dir or context.trial_dir
        if storage_dir and storage_filesystem is not None:
            from tunefleet.storage.remote import register_filesystem

            register_filesystem(storage_dir, storage_filesystem)
        self.checkpoint = Checkpoint(checkpoint) if checkpoint else None
        self.iteration = iteration
        self._iterations_since_restore = 0
        self._totals = RunningTotals()
        self._time_total_offset = time_total
        self._sync = sync
        self._crossing = Crossing(decide_at)  # the results that wait for the decision
        self._stop_criteria = stop_criteria
        self._start = time.time()
        self._last_report = time.perf_counter()
        self._start_perf = self._last_report
        self._last_flush = 0.0
        self._buffer: list[tuple[dict[str, Any], str | None]] = []
        self._lingering = False  # its tail waits for the linger thread (`_linger.py`)
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        # A checkpoint being persisted in the background holds back the results from its
        # own on (`_held`), so that the driver records it, and them, in order once it is.
        self._persister = _staged.Persister()
        self._held: list[tuple[dict[str, Any], str | None]] | None = None
        self._persist_error: BaseException | None = None
        self._fresh_dirs: set[str] = set()  # folders of new_checkpoint_dir()

    @property
    def time_total_before(self) -> float:
        """Seconds of training before this attempt (a restored checkpoint's total)."""
        return self._time_total_offset

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None) -> None:
        now = time.perf_counter()
        ckpt_path: str | None = None
        staged: _staged.Staged | None = None
        if checkpoint is not None:  # first: if it fails (CheckpointWriteError), nothing counts
            got = self._stage(checkpoint, self.iteration + 1)
            if isinstance(got, str):  # persisted already (remote storage, or as it is)
                ckpt_path = got
            else:
                staged = got
        self.iteration += 1
        self._iterations_since_restore += 1
        # plain numbers for searchers and schedulers; the driver never unpickles a tensor
        result: dict[str, Any] = python_scalars(metrics)
        self._totals.fill(result)
        result[keys.TRAINING_ITERATION] = self.iteration
        result[keys.TIME_THIS_ITER_S] = now - self._last_report
        result[keys.TIME_SINCE_RESTORE] = now - self._start_perf
        result[keys.TIME_TOTAL_S] = self._time_total_offset + (now - self._start_perf)
        result[keys.ITERATIONS_SINCE_RESTORE] = self._iterations_since_restore
        result[keys.TIMESTAMP] = int(self._start + (now - self._start_perf))
        result.update(host_keys(self._start + (now - self._start_perf)))
        result[keys.TRIAL_ID] = self.context.trial_id
        result[keys.PID] = self._pid
        result.setdefault(keys.DONE, False)
        if self._usage is not None:
            self._usage(result)
        self._last_report = now
        wait = self._sync or self._crossing.crossed(result)  # for the driver's decision
        if checkpoint is not None:
            result["checkpoint_dir_name"] = checkpoint_dir_name(self.iteration)
        with self._lock:
            if staged is not None:  # sent with its checkpoint's path once it is persisted
                self._held = [(result, None)]
            elif self._held is not None:
                self._held.append((result, ckpt_path))
            else:
                self._buffer.append((result, ckpt_path))
                urgent = ckpt_path is not None or wait or len(self._buffer) >= _MAX_BATCH
                if urgent or now - self._last_flush >= _FLUSH_EVERY_S:
                    self._flush_locked(now)
                elif not self._lingering:  # never with sync decisions: each result waits
                    self._lingering = True
                    LINGERING.ask(self)
        if staged is not None:
            self._persister.start(staged, self._persisted)
            if wait:  # the driver decides on this result: it must have reached it
                self._persister.wait()
                self._raise_persist_error()
        decision = self._poll_control(wait)
        if decision == "STOP" or decision == "PAUSE":
            raise StopTrial(pause=decision == "PAUSE")
        if self._meets_stop_criteria(result):
            raise StopTrial()

    def send_now(self, item: dict[str, Any], checkpoint: str | None) -> None:
        """Send an item that is not a report (a checkpoint of the last result), after
        the results before it."""
        with self._lock:
            if self._held is not None:
                self._held.append((item, checkpoint))
                return
            self._buffer.append((item, checkpoint))
            self._flush_locked(time.perf_counter())

    def poll_stop(self) -> None:
        """Between reports: raise `StopTrial` if the driver has asked this trial to stop
        or pause (what `report` does after each result)."""
        decision = self._poll_control(False)
        if decision == "STOP" or decision == "PAUSE":
            raise StopTrial(pause=decision == "PAUSE")

    def persist(self, checkpoint: Checkpoint | str, iteration: int) -> str:
        """Persist a checkpoint into the trial's storage as `iteration`'s now, after the
        one in flight; return where it is."""
        if isinstance(checkpoint, str):
            checkpoint = Checkpoint(checkpoint)
        staged = self._stage(checkpoint, iteration)
        return staged if isinstance(staged, str) else _staged.finish(staged)

    def new_checkpoint_dir(self) -> str:
        """See `TuneContext.new_checkpoint_dir`."""
        if is_url(self.checkpoint_home):  # uploaded by report(): any local folder will do
            path = _staged.new_checkpoint_dir(self.context.trial_dir)
        else:
            path = _staged.new_checkpoint_dir(self.checkpoint_home)
        self._fresh_dirs.add(os.path.normpath(path))
        return path

    def _stage(self, checkpoint: Checkpoint, iteration: int) -> _staged.Staged | str:
        """Wait for the checkpoint in flight, then stage this one: hard-link (or copy) its
        files next to their final place, or take a `new_checkpoint_dir` folder as it is.
        A remote checkpoint or storage is persisted here and now (its path returned)."""
        self._persister.wait()
        self._raise_persist_error()
        home, source = self.checkpoint_home, checkpoint.path
        if is_url(home) or is_url(source) or checkpoint.filesystem is not None:
            path = persist_checkpoint(
                source, home, iteration, source_filesystem=checkpoint.filesystem
            )
            if os.path.normpath(source) in self._fresh_dirs:
                self._drop_fresh(os.path.normpath(source))
            return path
        final = os.path.join(home, "checkpoints", checkpoint_dir_name(iteration))
        if os.path.abspath(source) == os.path.abspath(final):
            return final  # a restored checkpoint reported again as it is
        zero_copy = _staged.is_zero_copy(source, home)
        staged = _staged.stage(source, final, self._persister.linker, zero_copy=zero_copy)
        self._fresh_dirs.discard(os.path.normpath(source))
        return staged

    def _persisted(self, path: str | None, error: BaseException | None) -> None:
        """The background persist is done (on its thread): send what it held back."""
        with self._lock:
            held, self._held = self._held or [], None
            if held:
                held[0] = (held[0][0], path)
            self._persist_error = error
            self._buffer.extend(held)
            self._flush_locked(time.perf_counter())

    def _raise_persist_error(self) -> None:
        error, self._persist_error = self._persist_error, None
        if error is not None:
            raise error

    def settle(self) -> BaseException | None:
        """At the trial's end: finish the checkpoint in flight (its result and those after
        it are sent), remove unused `new_checkpoint_dir` folders; return the error of a
        background persist that failed, if any."""
        self._persister.wait()
        for path in list(self._fresh_dirs):
            self._drop_fresh(path)
        error, self._persist_error = self._persist_error, None
        return error

    def _drop_fresh(self, path: str) -> None:
        self._fresh_dirs.discard(path)
        shutil.rmtree(path, ignore_errors=True)

    def _meets_stop_criteria(self, result: dict[str, Any]) -> bool:
        # The driver decides too; checking here makes `stop={"training_iteration": 10}` exact.
        for key, bound in self._stop_criteria.items():
            value = result.get(key)
            try:
                if value is not None and math.isfinite(value) and value >= bound:
                    return True
            except TypeError:
                continue
        return False

    def flush(self) -> None:
        with self._lock:
            self._flush_locked(time.perf_counter())

    def close(self) -> None:
        self._persister.wait()
        self._closed = True
        self.flush()

    def _flush_locked(self, now: float) -> None:
        if self._buffer:
            batch, self._buffer = self._buffer, []
            self._send(batch)
        self._last_flush = now
        if self._lingering:  # its tail is sent: the linger thread need not wake for it
            self._lingering = False
            LINGERING.cancel(self)

    def _linger_flush(self) -> None:
        """Send the batched tail (`_Lingering`, a linger after the last report)."""
        with self._lock:
            if not self._closed:
                self._flush_locked(time.perf_counter())


_session: TrialSession | None = None


def _set_session(session: TrialSession | None) -> None:
    global _session
    _session = session


def _require_session(what: str) -> TrialSession:
    if _session is None and (hook := os.environ.get(SESSION_HOOK_ENV)):
        # A program whose launcher (`tunefleet run`) started it some other way than
        # through its own child (a shell wrapper, torchrun): the launcher names, in the
        # environment, the function that installs a session reporting to it.
        module, _, function = hook.partition(":")
        getattr(importlib.import_module(module), function)()
    if _session is None:
        raise RuntimeError(
            f"tune.{what}() was called outside a tunefleet trial: call it from the "
            "trainable passed to tune.Tuner(...) or tune.run(...)"
        )
    return _session


def report(
    metrics: dict[str, Any] | None = None,
    *,
    checkpoint: Checkpoint | None = None,
    **kwargs: Any,
) -> None:
    """Report metrics (and optionally a checkpoint) for the current iteration.

    Args:
        metrics: a dict of metric names to values, e.g. ``{"loss": 0.3}``.
        checkpoint: a `Checkpoint` whose directory is persisted into the trial's
            storage. Locally its files are hard-linked (copied across filesystems) and
            hashed, fsynced and renamed into place on a background thread: the
            checkpoint, and the results after it, reach the driver once that is done,
            and the next checkpoint's report() waits for it. Do not modify the folder
            after report() (you may delete it). A folder from
            ``tune.get_context().new_checkpoint_dir()`` is renamed, not copied. With
            `storage_path` a URL such as s3://, it is uploaded before report() returns.
        **kwargs: metrics as keywords, the older form ``tune.report(loss=0.3)``.

    Raises:
        CheckpointWriteError: the checkpoint could not be written (e.g. disk full);
            nothing of it was kept, this report did not count, and the previous
            checkpoint is intact. Uncaught, the trial fails and is retried from it.

    Example:
        >>> def train(config):  # doctest: +SKIP
        ...     for step in range(10):
        ...         tune.report({"loss": 1.0 / (step + 1)})
    """
    session = _require_session("report")
    if metrics is None:
        metrics = kwargs
    elif not isinstance(metrics, dict):
        raise TypeError(
            "tune.report(metrics) takes a dict such as {'loss': 0.1}, "
            f"not {type(metrics).__name__}"
        )
    elif kwargs:
        metrics = {**metrics, **kwargs}
    if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
        raise TypeError(
            "tune.report(checkpoint=...) takes a tune.Checkpoint "
            f"(tune.Checkpoint.from_directory(path)), not {type(checkpoint).__name__}"
        )
    if checkpoint is not None:  # in the result, as Ray's function trainables have it
        metrics = {**metrics, keys.SHOULD_CHECKPOINT: True}
    session.report(metrics, checkpoint)


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from (after a restart, a resume or a PBT exploit), or None."""
    return _require_session("get_checkpoint").checkpoint


def get_context() -> TuneContext:
    """The current trial's id, name, directory, attempt and resources."""
    return _require_session("get_context").context


def get_trial_id() -> str:
    return get_context().trial_id


def get_trial_name() -> str:
    return get_context().trial_name


def get_trial_dir() -> str:
    return get_context().trial_dir


__all__ = [
    "TuneContext",
    "get_checkpoint",
    "get_context",
    "get_trial_dir",
    "get_trial_id",
    "get_trial_name",
    "report",
]
