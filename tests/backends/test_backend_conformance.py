"""One lifecycle suite over every backend, each driven through the `Backend` interface.

The local backend runs real worker processes, the Ray backend real actors on a local
Ray (started once for the module), the simulated backend a blackbox on its virtual
clock. A `Harness` says how the same trial is written for each (a class trainable, or
the blackbox `f(config, budget)`); the tests then expect the same events. A new backend
gets the whole suite by adding one harness to `HARNESSES`.

The trial: step n reports ``{"total": n}``; ``steps`` ends it by itself after that many
steps (None: it runs until stopped); ``fail_at`` raises ValueError at that step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import tunefleet as tune
from tunefleet.backends import Backend, Event, Failed, Finished, Results, TrialLaunch
from tunefleet.backends._base import FinishHow
from tunefleet.trial import FailureKind

CPUS = 2  # every backend's capacity: what a local Ray is started with
_STEP_S = 0.02  # a real trial's pace, so that it is still running when the test acts


class Counter(tune.Trainable):
    """The real backends' trial (see the module docstring)."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.total = 0

    def step(self) -> dict[str, Any]:
        self.total += 1
        if self.config.get("fail_at") == self.total:
            raise ValueError(f"boom at step {self.total}")
        steps = self.config.get("steps")
        if steps is None:
            time.sleep(_STEP_S)
        return {"total": self.total, "done": steps is not None and self.total >= steps}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any]:
        return {"total": self.total}

    def load_checkpoint(self, checkpoint: dict[str, Any] | str | None) -> None:
        assert isinstance(checkpoint, dict)
        self.total = checkpoint["total"]


def blackbox(config: dict[str, Any], budget: int) -> dict[str, Any]:
    """The simulated backend's trial (see the module docstring)."""
    if config.get("fail_at") == budget:
        raise ValueError(f"boom at step {budget}")
    return {"total": budget}


# -- one harness per backend ------------------------------------------------------------------
class Harness:
    """How a backend is made, and how the suite's trial is launched on it."""

    name = ""

    def backend(self, path: Path, *, steps: int | None) -> Backend:
        raise NotImplementedError

    def config(self, steps: int | None, fail_at: int | None) -> dict[str, Any]:
        return {"steps": steps, "fail_at": fail_at}

    def launch(
        self,
        path: Path,
        trial_id: str,
        *,
        steps: int | None = None,
        fail_at: int | None = None,
        **fields: Any,
    ) -> TrialLaunch:
        return TrialLaunch(
            trial_id=trial_id,
            epoch=fields.pop("epoch", 1),
            name=trial_id,
            config=self.config(steps, fail_at),
            resources={"cpu": 1.0},
            trial_dir=str(path / trial_id),
            **fields,
        )


class LocalHarness(Harness):
    name = "local"

    def backend(self, path: Path, *, steps: int | None) -> Backend:
        from tunefleet.backends.local import LocalBackend

        return LocalBackend(
            trainable=Counter,
            experiment_name="conformance",
            experiment_path=str(path),
            resources={"cpu": float(CPUS)},
        )


class RayHarness(Harness):
    name = "ray"

    def backend(self, path: Path, *, steps: int | None) -> Backend:
        from tunefleet.backends.ray import RayBackend

        return RayBackend(
            trainable=Counter, experiment_name="conformance", experiment_path=str(path)
        )


class SimulatedHarness(Harness):
    """The blackbox ends by itself at `max_budget`, which is the backend's: `steps` is
    given to the backend, not to the trial."""

    name = "simulated"

    def backend(self, path: Path, *, steps: int | None) -> Backend:
        from tunefleet.backends.simulated import SimulatedBackend, SimulatedTrainable

        sim = SimulatedTrainable(blackbox, cost=1.0, max_budget=steps, workers=CPUS)
        # A trial without max_budget must have some end: the stop condition says so.
        return SimulatedBackend(sim, resources={"cpu": 1.0}, stop={"training_iteration": 10**9})

    def config(self, steps: int | None, fail_at: int | None) -> dict[str, Any]:
        return {"fail_at": fail_at}


HARNESSES = [
    pytest.param(LocalHarness(), id="local"),
    pytest.param(SimulatedHarness(), id="simulated"),
    pytest.param(RayHarness(), id="ray", marks=pytest.mark.slow),
]


@pytest.fixture(scope="module", params=HARNESSES)
def kind(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Module-scoped, so pytest runs each backend's cases together: one Ray for all."""
    harness: Harness = request.param
    if harness.name != "ray":
        yield harness
        return
    ray = pytest.importorskip("ray")
    from tests.helpers.ray_trainables import shutdown_and_check

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    ray.init(address="local", num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
    yield harness
    shutdown_and_check(before)


@pytest.fixture(autouse=True)
def _no_leftover_processes(kind: Harness) -> Iterator[None]:
    """Overrides conftest's: no worker process is left behind; on Ray, which keeps idle
    workers, every resource comes back (its processes are checked at its shutdown)."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    if kind.name == "ray":
        from tests.helpers.ray_trainables import resources_returned

        resources_returned()
        return
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    for p in left:
        p.kill()
    assert not left, f"processes left behind: {[p.cmdline() for p in left]}"


@pytest.fixture
def make(kind: Harness, tmp_path: Path) -> Iterator[Callable[..., Backend]]:
    """make(steps=...) -> a backend of this kind; shut down after the test."""
    made: list[Backend] = []

    def make(*, steps: int | None = None) -> Backend:
        made.append(kind.backend(tmp_path, steps=steps))
        return made[-1]

    yield make
    for backend in made:
        backend.shutdown()


# -- driving a backend ------------------------------------------------------------------------
def poll_until(
    backend: Backend,
    done: Callable[[list[Event]], bool],
    what: str,
    events: list[Event] | None = None,
    on_event: Callable[[Event], None] | None = None,
    timeout: float = 30.0,
) -> list[Event]:
    """Poll (each poll waits for events) until `done(events)`; `on_event` sees each one."""
    events = [] if events is None else events
    deadline = time.monotonic() + timeout
    while not done(events):
        assert time.monotonic() < deadline, f"no {what} within {timeout} s; events: {events}"
        for event in backend.poll(0.05):
            events.append(event)
            if on_event is not None:
                on_event(event)
    return events


def ended(events: list[Event]) -> bool:
    return any(isinstance(e, (Finished, Failed)) for e in events)


def reported(events: list[Event]) -> bool:
    return any(isinstance(e, Results) for e in events)


def metrics(events: list[Event]) -> list[dict[str, Any]]:
    return [m for e in events if isinstance(e, Results) for m, _ in e.items]


def the_end(events: list[Event], trial_id: str = "t1") -> Finished | Failed:
    """The one end of the trial's attempt; nothing of it comes after."""
    own = [e for e in events if e.trial_id == trial_id]
    (end,) = [e for e in own if isinstance(e, (Finished, Failed))]
    assert own[-1] is end, "nothing of the attempt comes after its end"
    return end


# -- the lifecycle ----------------------------------------------------------------------------
def test_results_arrive_in_order_and_the_trial_returns(
    kind: Harness, make: Callable[..., Backend], tmp_path: Path
) -> None:
    backend = make(steps=3)
    launch = kind.launch(tmp_path, "t1", steps=3)
    backend.start_trial(launch)
    events = poll_until(backend, ended, "end")
    assert all((e.trial_id, e.epoch) == ("t1", 1) for e in events)
    assert [m["training_iteration"] for m in metrics(events)] == [1, 2, 3]
    assert [m["total"] for m in metrics(events)] == [1, 2, 3]
    end = the_end(events)
    assert isinstance(end, Finished) and end.how is FinishHow.RETURNED, end


def test_a_trial_that_raises_is_a_failure_with_its_cause(
    kind: Harness, make: Callable[..., Backend], tmp_path: Path
) -> None:
    backend = make(steps=5)
    backend.start_trial(kind.launch(tmp_path, "t1", steps=5, fail_at=2))
    events = poll_until(backend, ended, "failure")
    assert [m["total"] for m in metrics(events)] == [1]
    end = the_end(events)
    assert isinstance(end, Failed), end
    failure = end.failure
    assert failure.kind is FailureKind.EXCEPTION
    assert failure.exception_type == "ValueError" and failure.message == "boom at step 2"
    assert "boom at step 2" in (failure.traceback or "")
    assert failure.iteration == 1  # the last iteration it reported
    assert backend.can_start({"cpu": float(CPUS)}), "its resources came back"


def test_a_stopped_trial_ends_as_stopped(
    kind: Harness, make: Callable[..., Backend], tmp_path: Path
) -> None:
    backend = make()
    backend.start_trial(kind.launch(tmp_path, "t1"))
    events = poll_until(backend, reported, "result")
    backend.stop_trial("t1", 1)
    poll_until(backend, ended, "stop", events)
    end = the_end(events)
    assert isinstance(end, Finished) and end.how is FinishHow.STOPPED, end
    totals = [m["total"] for m in metrics(events)]
    assert totals == list(range(1, len(totals) + 1))
    assert backend.can_start({"cpu": float(CPUS)}), "its resources came back"


def test_pause_checkpoints_then_stops_and_the_trial_resumes_from_the_checkpoint(
    kind: Harness, make: Callable[..., Backend], tmp_path: Path
) -> None:
    backend = make(steps=4)
    first = kind.launch(tmp_path, "t1", steps=4, sync=True)
    backend.start_trial(first)

    def decide(event: Event) -> None:  # a synchronous scheduler: PAUSE at total 2
        for result, _ in event.items if isinstance(event, Results) else []:
            decision = "PAUSE" if result["total"] == 2 else "CONTINUE"
            backend.send_decision("t1", 1, decision)

    events = poll_until(backend, ended, "pause", on_event=decide)
    assert [m["total"] for m in metrics(events)] == [1, 2]
    paused = the_end(events)
    assert isinstance(paused, Finished) and paused.how is FinishHow.PAUSED, paused
    assert paused.checkpoint is not None and os.path.isdir(paused.checkpoint)

    poll_until(backend, lambda _: not backend.attempt_alive("t1"), "the attempt's exit")
    backend.start_trial(
        kind.launch(tmp_path, "t1", steps=4, epoch=2, checkpoint=paused.checkpoint, iteration=2)
    )
    resumed = poll_until(backend, ended, "end after the resume")
    assert [m["training_iteration"] for m in metrics(resumed)] == [3, 4]
    assert [m["total"] for m in metrics(resumed)] == [3, 4], "the state came from the checkpoint"
    end = the_end(resumed)
    assert isinstance(end, Finished) and end.how is FinishHow.RETURNED and end.epoch == 2


def test_a_trial_killed_by_a_signal_is_a_crash(
    kind: Harness, make: Callable[..., Backend], tmp_path: Path
) -> None:
    if kind.name == "simulated":
        pytest.skip("a simulated trial runs in no process: nothing to kill")
    backend = make()
    backend.start_trial(kind.launch(tmp_path, "t1"))
    events = poll_until(backend, reported, "result")
    os.kill(metrics(events)[0]["pid"], signal.SIGKILL)
    poll_until(backend, ended, "crash", events)
    end = the_end(events)
    assert isinstance(end, Failed) and end.failure.kind is FailureKind.CRASH, end
    if kind.name == "local":  # the worker is the trial's own process: its signal is known
        assert end.failure.signal == "SIGKILL" and "SIGKILL" in end.failure.message
    else:  # Ray reports the actor's death, not the signal that caused it
        assert "Ray actor" in end.failure.message
    assert backend.can_start({"cpu": float(CPUS)}), "its resources came back"


def test_capacity_is_respected(kind: Harness, make: Callable[..., Backend], tmp_path: Path) -> None:
    backend = make()
    assert backend.capacity()["cpu"] == CPUS
    for n in range(CPUS):
        assert backend.can_start({"cpu": 1.0})
        backend.start_trial(kind.launch(tmp_path, f"t{n}"))
    assert not backend.can_start({"cpu": 1.0}), "every CPU is taken"
    events = poll_until(backend, reported, "a result")
    backend.stop_trial("t0", 1)
    poll_until(backend, ended, "the stop", events)
    assert isinstance(the_end(events, "t0"), Finished)
    assert backend.can_start({"cpu": 1.0}), "the stopped trial's CPU came back"
    backend.stop_trial("t1", 1)
    poll_until(backend, lambda es: sum(isinstance(e, Finished) for e in es) == 2, "stop", events)
