"""The simulated backend: trials of a blackbox on a virtual clock.

A trial is `f(config, budget) -> metrics` for budget = 1, 2, ... (its
training_iteration); each step costs `cost(config, budget)` virtual seconds. No
process runs: `poll()` jumps the virtual clock to the next result, so hours of
tuning take seconds, with the same controller, searchers and schedulers. The
driver's real time between polls (searcher, scheduler, store) is added to the
virtual clock, so a slow algorithm pays for its decisions. See docs/simulated.md.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tunefleet._metrics import python_scalars
from tunefleet._milestones import Crossing
from tunefleet.backends._base import (
    Backend,
    Event,
    Failed,
    Finished,
    FinishHow,
    Results,
    TrialLaunch,
)
from tunefleet.backends._restore import restore_point
from tunefleet.trial import FailureKind, FailureRecord

Blackbox = Callable[[dict[str, Any], int], Mapping[str, Any]]
Cost = Callable[[dict[str, Any], int], float]

_STATE_FILE = "simulated.json"


class SimulatedTrainable:
    """A blackbox to tune on the simulated backend instead of real processes.

    Pass it as the trainable of a `tune.Tuner`; the experiment then runs on a
    virtual clock (`SimulatedBackend`). Everything else (search space, searcher,
    scheduler, stop conditions, `time_budget_s` in virtual seconds, ResultGrid)
    works as for a real trainable.

    Args:
        f: `f(config, budget) -> dict of metrics`, the metrics after `budget`
            training iterations (1, 2, ...). It must not depend on earlier calls.
        cost: virtual seconds one budget step takes: a number, or
            `cost(config, budget) -> seconds` (stragglers: slow configs).
        max_budget: a trial ends by itself ("completed") after this many steps;
            None: only stop conditions, a scheduler or the time budget end it.
        workers: how many trials run at once (the simulated cluster's size).
        overhead_scale: factor on the driver's real time added to the virtual
            clock; 0 makes runs deterministic (no real time enters them).
        name: the trainable's name (default: `f`'s name).

    Example:
        >>> def f(config, budget):
        ...     return {"loss": config["x"] ** 2 + 1.0 / budget}
        >>> sim = SimulatedTrainable(f, cost=60.0, max_budget=100, workers=8)
        >>> tuner = tune.Tuner(sim, param_space={"x": tune.uniform(-1, 1)})  # doctest: +SKIP
    """

    def __init__(
        self,
        f: Blackbox,
        *,
        cost: float | Cost = 1.0,
        max_budget: int | None = None,
        workers: int = 4,
        overhead_scale: float = 1.0,
        name: str | None = None,
    ) -> None:
        if not callable(f):
            raise TypeError(f"SimulatedTrainable: f must be f(config, budget), not {f!r}")
        if not callable(cost) and not _is_seconds(cost):
            raise ValueError(
                f"SimulatedTrainable: cost={cost!r} must be a finite number of seconds >= 0 "
                "or cost(config, budget) -> seconds"
            )
        if max_budget is not None and (not isinstance(max_budget, int) or max_budget < 1):
            raise ValueError(f"SimulatedTrainable: max_budget={max_budget!r} must be an int >= 1")
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"SimulatedTrainable: workers={workers!r} must be an int >= 1")
        if not _is_seconds(overhead_scale):
            raise ValueError(
                f"SimulatedTrainable: overhead_scale={overhead_scale!r} must be a number >= 0"
            )
        self.f = f
        self.cost = cost
        self.max_budget = max_budget
        self.workers = workers
        self.overhead_scale = float(overhead_scale)
        self.__name__ = name or getattr(f, "__name__", None) or "simulated"

    def step_cost(self, config: dict[str, Any], budget: int) -> float:
        """Virtual seconds of step `budget` of `config`."""
        seconds = self.cost(config, budget) if callable(self.cost) else self.cost
        if not _is_seconds(seconds):
            raise ValueError(
                f"cost(config, {budget}) returned {seconds!r}: it must be a finite number "
                f"of seconds >= 0 (config {config!r})"
            )
        return float(seconds)

    def __call__(self, config: dict[str, Any]) -> None:
        """Run the blackbox as a plain function trainable (no virtual clock, no sleeping)."""
        from tunefleet.session import report

        budget = 0
        while self.max_budget is None or budget < self.max_budget:
            budget += 1
            report(dict(self.f(config, budget)))


@dataclass
class _Sim:
    """One running attempt."""

    launch: TrialLaunch
    budget: int  # steps done (training_iteration)
    started: float  # virtual time the attempt started
    last_report: float  # virtual time of the previous result (or the start)
    crossing: Crossing  # which results wait for a decision (the scheduler's decision points)
    token: int = 0  # the live entry of the event queue; older entries are ignored
    waiting: bool = False  # reported, waits for a decision (sync, or a decision point)
    last: dict[str, Any] | None = None  # the latest result (stop criteria after a decision)


class SimulatedBackend(Backend):
    """Runs `SimulatedTrainable` trials on a virtual clock (see the module docstring).

    Args:
        trainable: the blackbox and its cost.
        resources: what one trial needs (capacity is `workers` times that).
        time_budget_s: the experiment's time budget; the clock stops there once,
            so the controller ends the run before any result past the budget.
        stop: the experiment's stop condition (`RunConfig.stop`), only to check
            that trials end at all.

    Raises:
        ValueError: nothing would end a trial (no max_budget, stop or time budget).
    """

    def __init__(
        self,
        trainable: SimulatedTrainable,
        *,
        resources: dict[str, float] | None = None,
        time_budget_s: float | None = None,
        stop: Any = None,
    ) -> None:
        if trainable.max_budget is None and stop is None and time_budget_s is None:
            raise ValueError(
                "A simulated trial needs an end: give SimulatedTrainable(max_budget=...), "
                "RunConfig(stop={'training_iteration': N}) or TuneConfig(time_budget_s=...)"
            )
        self.sim = trainable
        self._per_trial = dict(resources or {"cpu": 1.0})
        self._horizon = time_budget_s
        self._now = 0.0
        self._mark: float | None = None  # perf_counter when the driver got control back
        self._queue: list[tuple[float, int, str]] = []  # (virtual time, token, trial_id)
        self._seq = 0
        self._active: dict[str, _Sim] = {}
        self._ready: list[Event] = []  # due now: delivered by the next poll

    # -- the virtual clock -----------------------------------------------------------------
    def clock(self) -> float:
        """Virtual seconds since the experiment started (pass it to the Controller)."""
        real = time.perf_counter()
        if self._mark is not None:
            self._now += (real - self._mark) * self.sim.overhead_scale
        self._mark = real
        return self._now

    def _resume_real(self) -> None:
        # The backend's own work (f, cost, checkpoints) is not the driver's time.
        self._mark = time.perf_counter()

    # -- capacity -------------------------------------------------------------------------
    def capacity(self) -> dict[str, float]:
        return {k: v * self.sim.workers for k, v in self._per_trial.items()}

    def can_start(self, resources: dict[str, float]) -> bool:
        return len(self._active) < self.sim.workers

    # -- trials ----------------------------------------------------------------------------
    def start_trial(self, launch: TrialLaunch) -> None:
        now = self.clock()
        launch, restored = restore_point(launch)  # as a worker does (`_restore.py`)
        if restored is not None:
            self._ready.append(Results(launch.trial_id, launch.epoch, [(restored, None)]))
        state = _Sim(
            launch=launch,
            budget=launch.iteration,
            started=now,
            last_report=now,
            crossing=Crossing(launch.decide_at),
        )
        self._active[launch.trial_id] = state
        if self.sim.max_budget is not None and state.budget >= self.sim.max_budget:
            self._finish(state, FinishHow.RETURNED)  # resumed at the end: nothing left to train
            self._resume_real()
            return
        try:
            self._schedule_next(state, now)
        except Exception as exc:  # the user's cost function
            self._fail(state, exc)
        self._resume_real()

    def stop_trial(self, trial_id: str, epoch: int) -> None:
        self.clock()
        state = self._state(trial_id, epoch)
        if state is not None:
            self._finish(state, FinishHow.STOPPED)
        self._resume_real()

    def send_decision(self, trial_id: str, epoch: int, decision: str) -> None:
        now = self.clock()
        state = self._state(trial_id, epoch)
        if state is not None and state.waiting:
            state.waiting = False
            try:
                if decision == "PAUSE":
                    self._finish(state, FinishHow.PAUSED)
                elif decision == "STOP":
                    self._finish(state, FinishHow.STOPPED)
                else:
                    self._continue(state, now)
            except Exception as exc:  # the user's cost function
                self._fail(state, exc)
        self._resume_real()

    def poll(self, timeout: float) -> list[Event]:
        now = self.clock()
        events, self._ready = self._ready, []
        # What is due now (a stop, a pause, an end) is told before the clock moves on: a
        # freed slot takes its next trial at once, not at another trial's next result.
        upcoming = None if events else self._next_time()
        if upcoming is None:
            if not self._active and not events:
                self._now += timeout  # idle: virtual time passes as the driver waits
        elif self._horizon is not None and now < self._horizon < upcoming:
            self._now = self._horizon  # the controller ends the run before any later result
        else:
            self._now = max(now, upcoming)
            self._run_due(events)
        for event in events:
            if not isinstance(event, Results):
                self._active.pop(event.trial_id, None)
        self._resume_real()
        return events

    def shutdown(self) -> None:
        self._active.clear()
        self._queue.clear()
        self._ready.clear()

    # -- the simulation --------------------------------------------------------------------
    def _state(self, trial_id: str, epoch: int) -> _Sim | None:
        state = self._active.get(trial_id)
        if state is None or state.launch.epoch != epoch or state.token < 0:
            return None
        return state

    def _next_time(self) -> float | None:
        queue = self._queue
        while queue:
            at, token, trial_id = queue[0]
            state = self._active.get(trial_id)
            if state is not None and state.token == token:
                return at
            heapq.heappop(queue)  # stale: the attempt was stopped or decided
        return None

    def _schedule_next(self, state: _Sim, now: float) -> None:
        self._seq += 1
        state.token = self._seq
        at = now + self.sim.step_cost(state.launch.config, state.budget + 1)
        heapq.heappush(self._queue, (at, self._seq, state.launch.trial_id))

    def _run_due(self, events: list[Event]) -> None:
        while (at := self._next_time()) is not None and at <= self._now:
            _, _, trial_id = heapq.heappop(self._queue)
            state = self._active[trial_id]
            state.token = 0
            try:
                self._step(state, at, events)
            except Exception as exc:  # the user's f or cost
                self._fail(state, exc)
            events.extend(self._ready)
            self._ready.clear()

    def _step(self, state: _Sim, at: float, events: list[Event]) -> None:
        launch, sim = state.launch, self.sim
        budget = state.budget + 1
        metrics = sim.f(launch.config, budget)
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"f(config, {budget}) must return a dict of metrics, not {type(metrics).__name__}"
            )
        state.budget = budget  # a step that raised is not done: a failure names the last one
        # numpy scalars from a surrogate model as Python numbers
        result: dict[str, Any] = python_scalars(dict(metrics))
        result.update(
            training_iteration=state.budget,
            time_this_iter_s=at - state.last_report,
            time_since_restore=at - state.started,
            time_total_s=launch.time_total + at - state.started,
            iterations_since_restore=state.budget - launch.iteration,
            timestamp=at,
            trial_id=launch.trial_id,
        )
        last = sim.max_budget is not None and state.budget >= sim.max_budget
        result.setdefault("done", last)  # the last step: the trial ends, nobody exploits it
        state.last_report = at
        state.last = result
        checkpoint = None
        if launch.checkpoint_freq and state.budget % launch.checkpoint_freq == 0:
            checkpoint = self._save(state)
            result["checkpoint_dir_name"] = os.path.basename(checkpoint)
        events.append(Results(launch.trial_id, launch.epoch, [(result, checkpoint)]))
        if launch.sync or state.crossing.crossed(result):
            state.waiting = True  # send_decision goes on
        else:
            self._continue(state, at)

    def _continue(self, state: _Sim, now: float) -> None:
        """After a result (and its decision, if sync): stop criteria, the end, or the next step."""
        if _meets(state.launch.stop_criteria, state.last):
            self._finish(state, FinishHow.STOPPED)
        elif self.sim.max_budget is not None and state.budget >= self.sim.max_budget:
            self._finish(state, FinishHow.RETURNED)
        else:
            self._schedule_next(state, now)

    def _finish(self, state: _Sim, how: FinishHow) -> None:
        launch = state.launch
        checkpoint = None
        at_end = launch.checkpoint_at_end and state.budget > launch.iteration
        if how is FinishHow.PAUSED or at_end:
            checkpoint = self._save(state)
        state.token = -1  # ended: no more results, stop and decisions ignored
        self._ready.append(Finished(launch.trial_id, launch.epoch, how, checkpoint))

    def _fail(self, state: _Sim, exc: BaseException) -> None:
        launch = state.launch
        state.token = -1
        failure = FailureRecord(
            kind=FailureKind.EXCEPTION,
            message=str(exc),
            exception_type=type(exc).__name__,
            traceback="".join(traceback.format_exception(exc)),
            attempt=launch.attempt,
            iteration=state.budget,
            checkpoint=launch.checkpoint,
        )
        self._ready.append(Failed(launch.trial_id, launch.epoch, failure))

    def _save(self, state: _Sim) -> str:
        """A real, tiny checkpoint folder, so verification, retention and PBT copies work."""
        from tunefleet.storage.checkpoint import persist_checkpoint

        launch = state.launch
        os.makedirs(launch.trial_dir, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".ckpt_", dir=launch.trial_dir)
        try:
            with open(os.path.join(tmp, _STATE_FILE), "w") as f:
                json.dump({"trial_id": launch.trial_id, "budget": state.budget}, f)
            return persist_checkpoint(tmp, launch.trial_dir, state.budget)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _meets(criteria: dict[str, float], result: dict[str, Any] | None) -> bool:
    """The session's rule: a flat numeric stop key reached its bound."""
    if not criteria or result is None:
        return False
    for key, bound in criteria.items():
        value = result.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= bound:
            return True
    return False


def _is_seconds(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def is_simulated(trainable: Any) -> bool:
    """Whether `trainable` (possibly wrapped by with_resources) runs on the simulated backend."""
    from tunefleet.trainable import unwrap

    inner, _, _ = unwrap(trainable)
    return isinstance(inner, SimulatedTrainable)


__all__ = ["SimulatedBackend", "SimulatedTrainable", "is_simulated"]
