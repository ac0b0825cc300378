"""Small helpers of the controller: Ctrl-C handling between steps, slow-hook warnings,
asking the searcher, telling the algorithms once that a trial ended."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from tunefleet._metrics import objectives
from tunefleet._milestones import Crossing
from tunefleet._redact import redact, redact_text
from tunefleet.engine.experiment_spec import ExperimentSpec
from tunefleet.engine.objective_filter import ObjectiveFilter, RequiredKey
from tunefleet.result import SHOULD_CHECKPOINT
from tunefleet.schedulers._base import TrialScheduler
from tunefleet.search._base import FINISHED, Searcher
from tunefleet.trial import StopCause, Trial

logger = logging.getLogger("tunefleet")

_SLOW_HOOK_S = 0.5


class CtrlC:
    """Counts Ctrl-C presses (and SIGTERMs) during a run instead of raising wherever the
    driver is.

    A KeyboardInterrupt raised in the middle of reading a worker's message would cut
    it in half and leave the stream unreadable; the loop checks `presses` between
    steps instead. The first press winds down (trials stopped, results kept), the
    second kills the trials at once. Once the wind-down has begun (`winding_down`),
    later presses never raise: the results are being saved and `fit()` returns them;
    the fifth press exits at once (status 130), a last resort should saving hang, with
    every result committed so far kept. Before the wind-down, the third press raises
    KeyboardInterrupt where the driver is (a last resort if a user hook hangs).
    SIGTERM (how `timeout`, Docker, Kubernetes and Slurm stop a program) counts as a
    press and sets `terminated`: the run winds down the same way, then exits with code
    143. Only the main thread gets signals, so from another thread this does nothing.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)
    _EXIT_NOW = 5  # presses: exit without waiting any longer

    def __init__(self) -> None:
        self.presses = 0
        self.terminated = False  # a SIGTERM came: exit with 143 once wound down
        self.winding_down = False  # the run stops: presses no longer raise
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.presses += 1
        if signum == signal.SIGTERM:
            self.terminated = True
        if not self.winding_down:
            if self.presses >= 3:
                raise KeyboardInterrupt
        elif self.presses >= self._EXIT_NOW:
            # No logging here: the handler may run inside a logging call.
            os.write(2, b"\nInterrupted 5 times: exiting now; every result saved so far is kept\n")
            os._exit(128 + signal.SIGINT)
        elif self.presses > 2:
            os.write(2, b"\nStill saving the results (press Ctrl-C 5 times to exit at once)\n")

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()


_counting = threading.local()  # .scope: the outermost CtrlC of this thread's run


@contextmanager
def counting_presses() -> Iterator[CtrlC]:
    """Count presses for a whole `fit()` / `tune.run()`: from before the experiment starts
    until its results are returned, so a press while they are being read back (after the
    controller's loop) is counted, not raised. Nested scopes share the outermost one."""
    outer: CtrlC | None = getattr(_counting, "scope", None)
    if outer is not None:
        yield outer
        return
    with CtrlC() as ctrl_c:
        _counting.scope = ctrl_c
        try:
            yield ctrl_c
        finally:
            _counting.scope = None


def warn_if_slow(started: float, what: str) -> None:
    """Warn when a user hook that began at `started` (`time.perf_counter()`) was slow."""
    elapsed = time.perf_counter() - started
    if elapsed > _SLOW_HOOK_S:
        logger.warning("%s took %.2fs; the controller waits for it", what, elapsed)


def ask_searcher(searcher: Searcher, trial_id: str) -> dict[str, Any] | Literal["FINISHED"] | None:
    """The searcher's config for `trial_id`, None (nothing now) or FINISHED (nothing ever)."""
    started = time.perf_counter()
    config = searcher.suggest(trial_id)
    warn_if_slow(started, f"{type(searcher).__name__}.suggest")
    if config is None or isinstance(config, dict):
        return config
    if isinstance(config, str) and config == FINISHED:
        return FINISHED
    raise TypeError(
        f"{type(searcher).__name__}.suggest() returned {config!r}: "
        "it must return a config dict, None or FINISHED"
    )


def total_trials(searcher: Searcher, num_samples: int) -> int | None:
    """How many trials the run will make, when the searcher (a grid's size) or
    num_samples says."""
    known = searcher.total_samples
    if isinstance(known, int) and known > 0:
        return known
    return num_samples if num_samples > 0 else None


def wants_checkpoint(result: dict[str, Any], seen: dict[str, Any] | None) -> bool:
    """Whether a callback (in `result`) or the scheduler (in the copy it saw, `seen`) set
    ``should_checkpoint`` on a result, as Ray Tune's way to have a trial checkpointed."""
    return bool(result.get(SHOULD_CHECKPOINT)) or bool(seen and seen.get(SHOULD_CHECKPOINT))


def add_tag(result: dict[str, Any], trial: Trial, cache: dict[str, str]) -> None:
    """Add the trial's experiment tag to `result` (Ray adds it to each result), its
    config's secrets hidden, unless the result has one."""
    if "experiment_tag" in result:
        return
    tag = cache.get(trial.trial_id)
    if tag is None:
        redact(trial.config)  # learns the config's secrets, for redact_text
        tag = cache[trial.trial_id] = redact_text(trial.experiment_tag)
    result["experiment_tag"] = tag


def result_filter(spec: ExperimentSpec, scheduler: TrialScheduler) -> ObjectiveFilter:
    """What the algorithms see of each result; each trial's first result must have the
    metric(s), the scheduler's metric and ``time_attr`` and the ``stop`` keys."""
    required = [RequiredKey(m, "TuneConfig(metric=...)") for m, _ in objectives(spec.metric, None)]
    name = type(scheduler).__name__
    own = scheduler.metric
    if isinstance(own, str) and all(own != r.key for r in required):
        required.append(RequiredKey(own, f"{name}(metric=...)"))
    time_attr = getattr(scheduler, "time_attr", None)  # the base has none; most schedulers do
    if isinstance(time_attr, str):
        required.append(RequiredKey(time_attr, f"{name}(time_attr=...)"))
    required += [RequiredKey(k, "RunConfig(stop=...)", strict=False) for k in spec.stop_criteria]
    return ObjectiveFilter(spec.metric, spec.mode, nan_policy=spec.nan_policy, required=required)


class Endings:
    """The searcher and scheduler hear that a trial ended once, from the moment it ends.

    As in Ray Tune, that moment is the result at which the stopper, ``done`` or the
    scheduler's STOP ends a running trial (not the later event that its process has
    gone), a waiting trial's end, or its failure. From then on no scheduler ranks it,
    exploits from it or changes its config; a later event tells them nothing more.
    """

    def __init__(
        self,
        searcher: Searcher,
        scheduler: TrialScheduler,
        clean: Callable[[dict[str, Any] | None], dict[str, Any] | None],
    ) -> None:
        self._searcher = searcher
        self._scheduler = scheduler
        self._clean = clean  # the result as a searcher may see it (ObjectiveFilter.clean)
        self._told: set[str] = set()

    def told(self, trial_id: str) -> bool:
        """Whether the algorithms already know that the trial ended."""
        return trial_id in self._told

    def _first(self, trial_id: str) -> bool:
        if trial_id in self._told:
            return False
        self._told.add(trial_id)
        return True

    def completed(self, trial: Trial) -> None:
        """A running trial ended: both get its last result, marked ``done``; the
        searcher hears whether the scheduler stopped it early (`stopped_early`)."""
        read = getattr(self._scheduler, "stopped_early", None)  # a Ray-form one has none
        early = bool(read(trial)) if read is not None else False  # read, told or not
        if self._first(trial.trial_id):
            last = trial.last_result
            final = {**last, "done": True} if last else last
            self._tell(trial.trial_id, self._clean(final), early=early)
            self._scheduler.on_trial_complete(trial, final)

    def removed(self, trial: Trial) -> None:
        """A trial that was not running (pending or paused) ended; one that the
        scheduler paused and never resumed was stopped early."""
        if self._first(trial.trial_id):
            self._scheduler.on_trial_remove(trial)
            early = trial.stop_reason is StopCause.NOT_RESUMED_BY_SCHEDULER
            self._tell(trial.trial_id, self._clean(trial.last_result), early=early)

    def _tell(self, trial_id: str, result: dict[str, Any] | None, *, early: bool) -> None:
        if early and result is not None:
            self._searcher.on_trial_stopped_early(trial_id, result)
        else:
            self._searcher.on_trial_complete(trial_id, result)

    def failed(self, trial: Trial) -> None:
        """A trial failed for good (no retry)."""
        if self._first(trial.trial_id):
            result = self._clean(trial.last_result)
            self._searcher.on_trial_complete(trial.trial_id, result, error=True)
            self._scheduler.on_trial_error(trial)


def warn_no_result(trial: Trial) -> None:
    """The trial's trainable returned without a result: TERMINATED as in Ray, not silently."""
    logger.warning(
        "Trial %s finished without reporting a result (its trainable returned "
        "without calling tune.report()); its metrics are {}",
        trial.trial_id,
    )


class Waits:
    """Which results a running trial waits at for the scheduler's decision: every one
    (`sync`, a synchronous or pausing scheduler) or the first at or past each of its
    decision points (`points`); counted per attempt as the trial's session counts them
    (`_milestones.Crossing`), so the driver answers exactly the results that wait."""

    def __init__(self, scheduler: TrialScheduler, running: dict[str, Trial]) -> None:
        self._scheduler = scheduler
        self.points = scheduler.decision_points()
        self._running = running
        self._of: dict[str, tuple[int, Crossing]] = {}  # trial -> (attempt's epoch, count)

    @property
    def sync(self) -> bool:
        return self._scheduler.needs_sync_decisions

    def waits(self, trial: Trial, result: dict[str, Any]) -> bool:
        if self.sync or self.points is None:
            return self.sync
        entry = self._of.get(trial.trial_id)
        if entry is None or entry[0] != trial.epoch:
            if len(self._of) > 2 * len(self._running) + 16:  # forget the ended ones
                self._of = {t: e for t, e in self._of.items() if t in self._running}
            entry = self._of[trial.trial_id] = (trial.epoch, Crossing(self.points))
        return entry[1].crossed(result)
