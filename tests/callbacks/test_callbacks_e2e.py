"""Callbacks see every event of a real run, with Ray Tune's hook names and arguments."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import tunefleet as tune
from tests.helpers.results import metrics_of
from tests.helpers.resume_trainables import counting
from tunefleet.trial import Trial


class Recorder(tune.Callback):
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.results: Counter[str] = Counter()
        self.checkpoints: list[str] = []
        self.final: list[Trial] = []

    def setup(
        self,
        stop: Any = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        self.calls["setup"] += 1

    def on_trial_start(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.calls["start"] += 1
        assert trial in trials

    def on_trial_restore(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.calls["restore"] += 1

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        self.results[trial.trial_id] += 1
        assert result["trial_id"] == trial.trial_id

    def on_checkpoint(
        self, iteration: int, trials: list[Trial], trial: Trial, checkpoint: Any, **info: Any
    ) -> None:
        self.checkpoints.append(checkpoint.path)

    def on_trial_complete(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.calls["complete"] += 1

    def on_trial_error(
        self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
    ) -> None:
        self.calls["error"] += 1

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self.calls["end"] += 1
        self.final = list(trials)


def test_every_hook_is_called_as_the_run_goes(storage: str, tmp_path: Path) -> None:
    recorder = Recorder()
    grid = tune.Tuner(
        counting,
        param_space={
            "x": tune.grid_search([1.0, 2.0, 3.0]),
            "iterations": 3,
            "pause": 0,
            "fail_flag": str(tmp_path / "failed-once"),
            "fail_at": 1,
        },
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            callbacks=[recorder],
            failure_config=tune.FailureConfig(max_failures=1),
        ),
    ).fit()
    assert grid.num_terminated == 3
    # one trial fails once at iteration 1 and is retried from its checkpoint
    assert recorder.calls == Counter(setup=1, start=3, restore=1, complete=3, end=1)
    assert sorted(recorder.results.values()) == [3, 3, 3]
    assert len(recorder.checkpoints) == 9 and all(
        Path(p).is_dir() or p for p in recorder.checkpoints
    )
    assert {t.trial_id for t in recorder.final} == {metrics_of(r)["trial_id"] for r in grid}
