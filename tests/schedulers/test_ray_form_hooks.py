# Ray-form hooks differ from the base class's typed signatures on purpose:
# mypy: disable-error-code="override, call-arg, arg-type, no-any-return"
"""Scheduler hooks in Ray Tune's form (the controller first) and in tunefleet's.

The end-to-end Ray-form run is tests/conformance/test_custom_scheduler.py; here each
hook is called as the engine calls it, and as a Ray-form ``super()`` call does.
"""

from __future__ import annotations

from typing import Any

from tunefleet.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from tunefleet.schedulers._base import Cluster, SchedulerDecision
from tunefleet.schedulers._candidates import Candidates
from tunefleet.trial import Trial, TrialStatus


def make_trial(i: int) -> Trial:
    return Trial(
        trial_id=f"t{i:03d}",
        index=i,
        name=f"t{i}",
        config={"x": i},
        resources={"cpu": 1.0, "gpu": 0.0},
        path="",
    )


class RayForm(FIFOScheduler):
    """Every hook in Ray's form; records what it got as the controller."""

    def __init__(self) -> None:
        super().__init__()
        self.controllers: list[Any] = []

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        self.controllers.append(tune_controller)
        super().on_trial_add(tune_controller, trial)

    def on_trial_result(
        self, tune_controller: Any, trial: Trial, result: dict[str, Any]
    ) -> SchedulerDecision:
        self.controllers.append(tune_controller)
        if result["score"] < 0:
            return TrialScheduler.STOP
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_complete(
        self, tune_controller: Any, trial: Trial, result: dict[str, Any] | None
    ) -> None:
        self.controllers.append(tune_controller)
        super().on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        self.controllers.append(tune_controller)
        super().on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self.controllers.append(tune_controller)
        super().on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        self.controllers.append(tune_controller)
        for trial in reversed(tune_controller.get_trials()):  # the newest first
            if trial.status is TrialStatus.PENDING:
                return trial
        return super().choose_trial_to_run(tune_controller)


def test_ray_form_hooks_get_the_cluster_from_the_engine_call() -> None:
    trials = [make_trial(i) for i in range(3)]
    cluster = Cluster({"cpu": 2.0}, {}, {"cpu": 1.0}, trials)
    scheduler = RayForm()
    scheduler.set_cluster(cluster)
    scheduler.on_trial_add(trials[0])
    assert scheduler.on_trial_result(trials[0], {"score": 1.0}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(trials[0], {"score": -1.0}) == TrialScheduler.STOP
    scheduler.on_trial_complete(trials[0], None)
    scheduler.on_trial_error(trials[1])
    scheduler.on_trial_remove(trials[1])
    assert scheduler.choose_trial_to_run(Candidates(trials)) is trials[2]
    assert scheduler.controllers == [cluster] * 7
    assert cluster.get_trials() == trials


def test_ray_form_choice_must_be_a_trial_that_waits() -> None:
    trials = [make_trial(i) for i in range(3)]
    scheduler = RayForm()
    scheduler.set_cluster(Cluster({"cpu": 2.0}, {}, {"cpu": 1.0}, trials))
    # the newest PENDING trial is not among those that may start now: no choice
    assert scheduler.choose_trial_to_run(Candidates(trials[:2])) is None
    # without PENDING trials, Ray's super() call picks the first paused one
    for trial in trials:
        trial.status = TrialStatus.PAUSED
    assert scheduler.choose_trial_to_run(Candidates(trials[1:])) is trials[1]


def test_ray_form_hooks_called_in_ray_form_pass_the_controller_on() -> None:
    scheduler = RayForm()
    trial, runner = make_trial(0), Cluster({}, {}, {}, [make_trial(0)])
    scheduler.on_trial_result(runner, trial, {"score": 1.0})
    scheduler.on_trial_complete(tune_controller=runner, trial=trial, result=None)
    assert scheduler.controllers == [runner, runner]
    assert scheduler.choose_trial_to_run(runner) is not None


class RayFormAsha(ASHAScheduler):
    """A Ray-form override over one of tunefleet's own schedulers."""

    def on_trial_result(
        self, tune_controller: Any, trial: Trial, result: dict[str, Any]
    ) -> SchedulerDecision:
        return super().on_trial_result(tune_controller, trial, result)


def test_ray_form_super_reaches_a_native_scheduler() -> None:
    scheduler = RayFormAsha(metric="score", mode="max", grace_period=1, max_t=4)
    trial = make_trial(0)
    scheduler.on_trial_add(trial)
    result = {"score": 1.0, "training_iteration": 1}
    assert scheduler.on_trial_result(trial, result) == TrialScheduler.CONTINUE


class NativeWithExtra(FIFOScheduler):
    """tunefleet's form, with an optional argument of its own: stays tunefleet's."""

    def on_trial_result(
        self, trial: Trial, result: dict[str, Any], extra: int = 0
    ) -> SchedulerDecision:
        return TrialScheduler.STOP if result["score"] + extra < 0 else TrialScheduler.CONTINUE


def test_tunefleet_form_hooks_still_take_the_engine_call() -> None:
    trial = make_trial(0)
    assert NativeWithExtra().on_trial_result(trial, {"score": -1.0}) == TrialScheduler.STOP
    assert FIFOScheduler().on_trial_result(trial, {"score": 1.0}) == TrialScheduler.CONTINUE
    assert FIFOScheduler().choose_trial_to_run([trial]) is trial
    assert TrialScheduler().choose_trial_to_run(Candidates([trial])) is trial
