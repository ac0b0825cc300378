"""What a user's scheduler may return from `on_trial_result`: Ray's plain strings work,
anything else is refused by name (never taken as STOP)."""

from __future__ import annotations

from typing import Any

import pytest

import tunefleet as tune
from tunefleet.schedulers import FIFOScheduler


class Says(FIFOScheduler):
    def __init__(self, answer: Any) -> None:
        super().__init__()
        self.answer = answer

    def on_trial_result(self, trial: Any, result: dict[str, Any]) -> Any:
        return self.answer


def counts(config: dict[str, Any]) -> None:
    for i in range(3):
        tune.report({"i": i + 1})


def fit(storage: str, answer: Any) -> tune.ResultGrid:
    return tune.Tuner(
        counts,
        tune_config=tune.TuneConfig(scheduler=Says(answer)),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()


@pytest.mark.parametrize("answer", ["CONTINUE", FIFOScheduler.CONTINUE])
def test_a_plain_continue_string_continues(storage: str, answer: Any) -> None:
    (result,) = list(fit(storage, answer))
    assert result.metrics["training_iteration"] == 3


def test_plain_stop_string_stops(storage: str) -> None:
    (result,) = list(fit(storage, "STOP"))
    assert result.metrics["training_iteration"] == 1


@pytest.mark.parametrize("answer", ["continue!", None, 1])
def test_anything_else_is_refused_by_name(storage: str, answer: Any) -> None:
    with pytest.raises(ValueError, match=r"Says\.on_trial_result\(\) returned .*CONTINUE, PAUSE"):
        fit(storage, answer)


def test_a_hook_set_on_the_instance_is_asked_too(storage: str) -> None:
    # FIFO's own hook, which always continues, is not called (a few us a result); a
    # hook put on the instance must still be, whatever its class has
    scheduler = FIFOScheduler()
    asked: list[int] = []

    def stop_at_two(trial: Any, result: dict[str, Any]) -> str:
        asked.append(result["i"])
        return "STOP" if result["i"] == 2 else "CONTINUE"

    scheduler.on_trial_result = stop_at_two  # type: ignore[method-assign,assignment]
    (result,) = tune.Tuner(
        counts,
        tune_config=tune.TuneConfig(scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert asked == [1, 2] and result.metrics["training_iteration"] == 2
