"""The base of the local and Ray backends: a pool of workers, each running one attempt
at a time.

What both do alike lives here: giving a worker an attempt, stop requests that turn
into force after a grace period, the attempt's time limits, the worker loop's
messages as events, releasing a worker when its attempt ends (and retiring it when
workers are not reused), and reporting an attempt whose worker died. A backend
supplies the transport (`_send`), what force means (`_force_stop`: signals to a
process group, ``ray.kill``), how a worker is retired, and what an attempt holds.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from tunefleet.backends._attempt import (
    Worker,
    limit_deadline,
    out_of_memory,
    timeout_record,
    trial_event,
)
from tunefleet.backends._base import (
    Backend,
    Event,
    Failed,
    Finished,
    FinishHow,
    Results,
    TrialLaunch,
)
from tunefleet.backends._protocol import Decide, Exit, Save, Stop, ToWorker, TrialMessage
from tunefleet.trial import FailureRecord

W = TypeVar("W", bound=Worker)


class PoolBackend(Backend, Generic[W]):
    """A backend whose trials run on reusable workers (processes or actors).

    Args:
        reuse: keep a worker for the next trial when its attempt ends (reuse_actors).
        stop_grace_s: how long an attempt may take to stop when asked, before force.
    """

    def __init__(self, *, reuse: bool, stop_grace_s: float) -> None:
        self._reuse = reuse
        self._stop_grace = stop_grace_s
        self._by_trial: dict[str, W] = {}  # the worker running each trial's current attempt
        self._fatal: FailureRecord | None = None

    @property
    def fatal(self) -> FailureRecord | None:
        return self._fatal

    # -- what a backend supplies -----------------------------------------------------------
    @abstractmethod
    def _live_workers(self) -> Iterable[W]:
        """Every worker alive now, idle or busy."""

    @abstractmethod
    def _send(self, worker: W, msg: ToWorker) -> None:
        """Pass a message to the worker's loop; a dead worker is noticed by `poll`."""

    @abstractmethod
    def _retire(self, worker: W) -> None:
        """Never give the worker another trial, and end it."""

    @abstractmethod
    def _force_stop(self, worker: W, now: float) -> float | None:
        """End the worker's attempt by force, harder each time (`worker.forced` says how
        many times before); return when to push again, or None after the last step."""

    def _free(self, worker: W) -> None:
        """The worker's attempt ended: give back what it held."""

    def _explain(self, worker: W, failure: FailureRecord) -> FailureRecord:
        """The failure an attempt reported, with what only the backend knows added."""
        return failure

    def _limit_deadline(self, worker: W) -> tuple[float, str] | None:
        """When the worker's attempt times out, and which limit that is; None if never."""
        return limit_deadline(worker)

    # -- trials ----------------------------------------------------------------------------
    def _assign(self, worker: W, launch: TrialLaunch, *, running: bool) -> None:
        """Give `launch` to `worker`; its clocks start now if it is `running` already."""
        worker.launch = launch
        worker.stopping = worker.timed_out = False
        worker.stop_deadline = None
        worker.forced = 0
        worker.clock_start = worker.last_report = None
        if running:
            worker.start_clock()
        worker.last_iteration = launch.iteration or None
        self._by_trial[launch.trial_id] = worker

    def stop_trial(self, trial_id: str, epoch: int) -> None:
        worker = self._worker_of(trial_id, epoch)
        if worker is None or worker.stopping:
            return
        worker.stopping = True
        worker.stop_deadline = time.monotonic() + self._stop_grace
        self._send(worker, Stop(trial_id, epoch))

    def send_decision(self, trial_id: str, epoch: int, decision: str) -> None:
        worker = self._worker_of(trial_id, epoch)
        if worker is not None:
            self._send(worker, Decide(trial_id, epoch, decision))

    def request_checkpoint(self, trial_id: str, epoch: int) -> None:
        worker = self._worker_of(trial_id, epoch)
        if worker is not None and not worker.stopping:
            self._send(worker, Save(trial_id, epoch))

    def attempt_alive(self, trial_id: str) -> bool:
        return any(
            w.launch is not None and w.launch.trial_id == trial_id for w in self._live_workers()
        )

    def _worker_of(self, trial_id: str, epoch: int) -> W | None:
        worker = self._by_trial.get(trial_id)
        if worker is None or worker.launch is None or worker.launch.epoch != epoch:
            return None
        return worker

    # -- events ----------------------------------------------------------------------------
    def _poll_timeout(self, timeout: float) -> float:
        """`timeout`, shortened to the next deadline (a stop to push, a time limit)."""
        deadline = self._next_deadline()
        if deadline is None:
            return timeout
        return max(0.0, min(timeout, deadline - time.monotonic()))

    def _next_deadline(self) -> float | None:
        deadlines = []
        for worker in self._live_workers():
            limit = self._limit_deadline(worker)
            deadlines += [limit[0]] if limit is not None else []
            deadlines += [worker.stop_deadline] if worker.stop_deadline is not None else []
        return min(deadlines, default=None)

    def _on_trial_message(self, worker: W, msg: TrialMessage, events: list[Event]) -> None:
        event = trial_event(worker, msg)  # None: an attempt already reported as ended
        if event is None:
            return
        if isinstance(event, Failed):
            event = Failed(event.trial_id, event.epoch, self._explain(worker, event.failure))
        events.append(event)
        if not isinstance(event, Results):
            self._release(worker)
        if out_of_memory(event) and not worker.retiring:
            self._retire(worker)  # not reused: the next trial gets the memory (host or GPU)

    def _release(self, worker: W) -> None:
        """The worker's attempt ended: free what it held; the worker is idle (or retired)."""
        launch = worker.launch
        self._free(worker)
        if launch is not None and self._by_trial.get(launch.trial_id) is worker:
            del self._by_trial[launch.trial_id]  # not a newer attempt's
        worker.launch = None
        worker.stopping = False
        worker.stop_deadline = None
        worker.forced = 0
        if not self._reuse:
            self._retire(worker)

    def _report_death(
        self, worker: W, events: list[Event], failure: Callable[[], FailureRecord | None]
    ) -> None:
        """The worker died: its attempt stopped if that was asked, else it failed.

        `failure()` says why it died; None holds the report back (the backend reports
        and releases it later, when it knows more).
        """
        launch = worker.launch
        if launch is None:
            return
        if worker.stopping or (worker.retiring and not worker.timed_out):
            events.append(Finished(launch.trial_id, launch.epoch, FinishHow.STOPPED))
        elif not worker.timed_out:  # a timed-out attempt was reported when it timed out
            record = failure()
            if record is None:
                return
            events.append(Failed(launch.trial_id, launch.epoch, record))
        self._release(worker)

    # -- deadlines: stop grace and the trial limits ------------------------------------------
    def _enforce_deadlines(self, events: list[Event]) -> None:
        now = time.monotonic()
        for worker in list(self._live_workers()):
            limit = self._limit_deadline(worker)
            if limit is not None and now >= limit[0]:
                self._time_out(worker, limit[1], now, events)
            elif worker.stop_deadline is not None and now >= worker.stop_deadline:
                self._push_stop(worker, now)

    def _push_stop(self, worker: W, now: float) -> None:
        worker.stop_deadline = self._force_stop(worker, now)
        worker.forced += 1

    def _time_out(self, worker: W, limit: str, now: float, events: list[Event]) -> None:
        """Report the attempt as TIMEOUT now, once; end it by force; release it at its death."""
        launch = worker.launch
        assert launch is not None
        failure = timeout_record(worker, limit, now)
        worker.timed_out = True
        worker.retiring = True  # never given another trial: replaced
        if self._by_trial.get(launch.trial_id) is worker:
            del self._by_trial[launch.trial_id]
        events.append(Failed(launch.trial_id, launch.epoch, failure))
        self._push_stop(worker, now)

    # -- the end ---------------------------------------------------------------------------
    def _ask_to_exit(self, workers: Iterable[W]) -> None:
        """Ask each worker to stop its attempt, then to exit."""
        for worker in workers:
            if worker.launch is not None:
                self._send(worker, Stop(worker.launch.trial_id, worker.launch.epoch))
            self._send(worker, Exit())
