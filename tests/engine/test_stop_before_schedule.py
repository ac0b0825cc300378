"""A result that ends its trial is not the scheduler's: the stopper is asked first.

As in Ray Tune, when the `stop` dict, a stopper or ``done`` ends a trial at a result,
the scheduler's `on_trial_result` and the searcher's `on_trial_result` never see that
result; both get it in `on_trial_complete`, once and at once (not when the trial's
process has gone). A scheduler's STOP is an end as well. The runs are on the
simulated backend with no real time in the clock: every event comes in the same
order on every run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tunefleet.backends.simulated import SimulatedTrainable
from tunefleet.engine.decisions import PausePlans
from tunefleet.schedulers import Decision, Exploit, FIFOScheduler
from tunefleet.schedulers._base import SchedulerDecision
from tunefleet.search import BasicVariantGenerator
from tunefleet.trial import Trial

Call = tuple[str, str, Any]  # (hook, trial id, training_iteration or None)


def iteration(result: dict[str, Any] | None) -> Any:
    return None if result is None else result.get("training_iteration")


class SpyScheduler(FIFOScheduler):
    """FIFO, recording every call; STOPs a trial at `stop_at` when given."""

    def __init__(self, calls: list[Call], stop_at: int | None = None) -> None:
        super().__init__()
        self.calls = calls
        self.stop_at = stop_at

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> SchedulerDecision:
        self.calls.append(("scheduler.result", trial.trial_id, iteration(result)))
        if result["training_iteration"] == self.stop_at:
            return Decision.STOP
        return Decision.CONTINUE

    def on_trial_complete(self, trial: Trial, result: dict[str, Any] | None) -> None:
        done = bool(result and result.get("done"))
        self.calls.append(("scheduler.complete", trial.trial_id, (iteration(result), done)))

    def on_trial_error(self, trial: Trial) -> None:
        self.calls.append(("scheduler.error", trial.trial_id, None))


class SpySearcher(BasicVariantGenerator):
    """The default searcher, recording what it is told."""

    def __init__(self, calls: list[Call]) -> None:
        super().__init__()
        self.calls = calls

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        self.calls.append(("searcher.result", trial_id, iteration(result)))

    def on_trial_complete(
        self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False
    ) -> None:
        self.calls.append(("searcher.complete", trial_id, (iteration(result), error)))
        super().on_trial_complete(trial_id, result, error)


def run(tmp_path: Path, calls: list[Call], **kwargs: Any) -> tune.ResultGrid:
    max_budget = kwargs.pop("max_budget", None)
    stop = kwargs.pop("stop", None)
    sim = SimulatedTrainable(
        lambda config, budget: {"loss": config["x"] / budget},
        max_budget=max_budget,
        workers=2,
        overhead_scale=0,
    )
    return tune.Tuner(
        sim,
        param_space={"x": tune.grid_search([1.0, 2.0])},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            search_alg=SpySearcher(calls),
            scheduler=SpyScheduler(calls, **kwargs),
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), stop=stop, verbose=0),
    ).fit()


def of(calls: list[Call], trial_id: str) -> list[tuple[str, Any]]:
    return [(hook, what) for hook, tid, what in calls if tid == trial_id]


def test_the_stop_dict_ends_a_trial_before_the_scheduler_sees_the_result(tmp_path: Path) -> None:
    calls: list[Call] = []
    grid = run(tmp_path, calls, stop={"training_iteration": 3})
    assert [r.metrics["training_iteration"] for r in grid] == [3, 3]
    for r in grid:
        assert of(calls, r.metrics["trial_id"]) == [
            ("scheduler.result", 1),
            ("searcher.result", 1),
            ("scheduler.result", 2),
            ("searcher.result", 2),
            # the stopped result: never on_trial_result; on_trial_complete once, with it
            ("searcher.complete", (3, False)),
            ("scheduler.complete", (3, True)),
        ]


def test_done_in_the_result_ends_the_trial_before_the_scheduler(tmp_path: Path) -> None:
    calls: list[Call] = []
    grid = run(tmp_path, calls, max_budget=2)  # the last step's result says done
    for r in grid:
        assert of(calls, r.metrics["trial_id"]) == [
            ("scheduler.result", 1),
            ("searcher.result", 1),
            ("searcher.complete", (2, False)),
            ("scheduler.complete", (2, True)),
        ]


def test_a_trial_the_scheduler_stops_is_completed_at_once_and_once(tmp_path: Path) -> None:
    calls: list[Call] = []
    grid = run(tmp_path, calls, stop_at=2, max_budget=5)
    assert [r.metrics["training_iteration"] for r in grid] == [2, 2]
    first, second = (r.metrics["trial_id"] for r in sorted(grid, key=lambda r: r.config["x"]))
    # told at the result itself, not when its process has gone: the other trial's
    # result of the same moment (the same poll) comes after
    told = calls.index(("scheduler.complete", first, (2, True)))
    assert told < calls.index(("scheduler.result", second, 2))
    for tid in (first, second):
        assert of(calls, tid) == [
            ("scheduler.result", 1),
            ("searcher.result", 1),
            ("scheduler.result", 2),  # the scheduler's STOP: the searcher gets it at the end
            ("searcher.complete", (2, False)),
            ("scheduler.complete", (2, True)),
        ]


def trial(tid: str, checkpoint: str | None, it: int) -> Trial:
    t = Trial(trial_id=tid, index=0, name=tid, config={"lr": 0.1}, resources={}, path="")
    t.latest_checkpoint, t.checkpoint_iteration = checkpoint, it
    t.last_result = {"training_iteration": it}
    return t


def test_an_exploit_copies_the_checkpoint_the_scheduler_chose_not_a_later_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, target = trial("src", "ckpt_2", 2), trial("dst", "own", 2)
    kept = {"ckpt_2", "own"}
    plans = PausePlans("PBT", {"src": source, "dst": target}, lambda r: None, kept.__contains__)
    exploit = Exploit("src", {"lr": 0.2})
    assert plans.decide(target, exploit) is Decision.PAUSE
    # the source runs on to its last result while the target pauses
    source.latest_checkpoint, source.checkpoint_iteration = "ckpt_6", 6
    source.last_result = {"training_iteration": 6, "done": True}
    planned, donor, resources = plans.take("dst")
    assert planned == exploit and resources is None
    assert donor is not None and donor.latest_checkpoint == "ckpt_2"
    assert donor.checkpoint_iteration == 2 and donor.last_result == {"training_iteration": 2}
    assert plans.take("dst") == (None, None, None)  # forgotten
    # retention deleted the chosen checkpoint meanwhile: no exploit, said so
    assert plans.decide(target, Exploit("src", {"lr": 0.3})) is Decision.PAUSE
    kept.discard("ckpt_6")
    with caplog.at_level(logging.WARNING, logger="tunefleet"):
        assert plans.take("dst") == (None, None, None)
    assert "ckpt_6" in caplog.text and "num_to_keep" in caplog.text


def fails_on_its_way_out(config: dict[str, Any]) -> None:
    try:
        for i in range(100_000):
            tune.report({"x": i})
    finally:
        raise RuntimeError("cleanup failed")


def test_a_trial_that_fails_after_the_stop_ended_it_stays_ended(tmp_path: Path) -> None:
    calls: list[Call] = []
    grid = tune.Tuner(
        fails_on_its_way_out,
        tune_config=tune.TuneConfig(metric="x", mode="max", scheduler=SpyScheduler(calls)),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"training_iteration": 2},
            failure_config=tune.FailureConfig(max_failures=2),
            verbose=0,
        ),
    ).fit()
    # as in Ray: ended at the stop (TERMINATED), not retried; the algorithms heard once
    (result,) = grid
    assert grid.num_errors == 0 and grid.num_terminated == 1 and result.error is None
    assert result.metrics["training_iteration"] == 2
    tid = result.metrics["trial_id"]
    assert [hook for hook, _ in of(calls, tid)] == ["scheduler.result", "scheduler.complete"]
    assert of(calls, tid)[-1] == ("scheduler.complete", (2, True))


class TargetStopper(tune.Stopper):
    """Records every result it is shown; ends the experiment when one reaches `target`."""

    def __init__(self, target: float) -> None:
        self.target = target
        self.seen: list[tuple[str, int]] = []
        self.reached = False

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.seen.append((trial_id, result["training_iteration"]))
        self.reached = self.reached or result["loss"] <= self.target
        return False

    def stop_all(self) -> bool:
        return self.reached


def test_a_stopper_sees_the_result_at_max_t_that_asha_stops_at(tmp_path: Path) -> None:
    # ASHA STOPs a trial at max_t; the stopper, asked first, still sees that result
    # and ends the experiment there instead of running the rest of the budget.
    stopper = TargetStopper(target=0.5)
    grid = tune.Tuner(
        SimulatedTrainable(lambda c, b: {"loss": 1.0 / b}, max_budget=10, workers=1),
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(
            metric="loss",
            mode="min",
            num_samples=20,
            scheduler=tune.schedulers.ASHAScheduler(max_t=2, grace_period=1),
        ),
        run_config=tune.RunConfig(storage_path=str(tmp_path), stop=stopper, verbose=0),
    ).fit()
    first = grid[0].metrics["trial_id"]
    assert stopper.seen[:2] == [(first, 1), (first, 2)]  # 2 = max_t: ASHA's STOP
    assert len(grid) == 1  # the target was reached at the first trial's max_t
