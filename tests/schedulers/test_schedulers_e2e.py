"""Pausing schedulers on real worker processes: paused trials resume from their checkpoints."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tests.helpers.resume_trainables import counting
from tunefleet.schedulers import (
    ASHAScheduler,
    Candidates,
    Decision,
    HyperBandScheduler,
    TrialScheduler,
)
from tunefleet.store import StoreReader
from tunefleet.trial import Trial, TrialStatus


@pytest.mark.parametrize(
    "scheduler",
    [
        ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3, promotion=True),
        HyperBandScheduler(max_t=9, reduction_factor=3),
    ],
    ids=["asha_promotion", "hyperband"],
)
def test_pausing_scheduler_resumes_from_checkpoints(
    storage: str, scheduler: TrialScheduler
) -> None:
    xs = [0.1, 0.5, 0.9, 0.3, 0.7, 0.2]
    grid = tune.Tuner(
        counting,
        param_space={"x": tune.grid_search(xs), "iterations": 20, "pause": 0.0},
        tune_config=tune.TuneConfig(
            metric="score", mode="max", scheduler=scheduler, max_concurrent_trials=3
        ),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == len(xs)
    lengths: dict[float, int] = {}
    for result in grid:
        its = list(result.metrics_dataframe["training_iteration"])
        assert its == list(range(1, len(its) + 1)), (result.config, its)  # no gaps, no repeats
        # "i" comes from the checkpoint the trial resumed from: it matches the iteration
        assert list(result.metrics_dataframe["i"]) == its
        assert len(its) <= 9
        lengths[result.config["x"]] = len(its)
    best = grid.get_best_result()
    assert best.config["x"] == 0.9 and lengths[0.9] == 9
    assert min(lengths.values()) < 9  # someone was stopped early


class PauseForever(TrialScheduler):
    """Pauses every trial at iteration 2 and never picks a paused trial again."""

    needs_sync_decisions = True

    def on_trial_result(self, trial: Trial, result: dict[str, Any]) -> Decision:
        return Decision.PAUSE if result["training_iteration"] == 2 else Decision.CONTINUE

    def choose_trial_to_run(self, candidates: Candidates | Sequence[Trial]) -> Trial | None:
        return next((t for t in candidates if t.status is TrialStatus.PENDING), None)


def test_paused_trials_the_scheduler_never_resumes_end_instead_of_hanging(storage: str) -> None:
    grid = tune.Tuner(
        counting,
        param_space={"x": tune.grid_search([1.0, 2.0, 3.0]), "iterations": 5, "pause": 0},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=PauseForever()),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert grid.num_terminated == 3
    with StoreReader(grid.experiment_path) as reader:
        for trial in reader.trials():
            assert trial.stop_reason == "not resumed by the scheduler"
            assert [r["training_iteration"] for r in reader.results(trial.trial_id)] == [1, 2]


class ResettableCounter(tune.Trainable):
    """Counts up by `rate`; `reset_config` lets a reused worker take another trial."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.value = 0
        self.rate = config["rate"]
        self.setups = getattr(self, "setups", 0) + 1
        self.resets = 0

    def step(self) -> dict[str, Any]:
        self.value += self.rate
        return {"value": self.value, "pid": os.getpid(), "resets": self.resets}

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        Path(checkpoint_dir, "value.txt").write_text(str(self.value))
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.value = int(Path(checkpoint, "value.txt").read_text())

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        self.rate = new_config["rate"]
        self.value = 0
        self.resets += 1
        return True


def test_reused_workers_reset_config_with_a_pausing_scheduler(storage: str) -> None:
    rates = [1, 3, 2, 5, 4]
    grid = tune.Tuner(
        ResettableCounter,
        param_space={"rate": tune.grid_search(rates)},
        tune_config=tune.TuneConfig(
            metric="value",
            mode="max",
            scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3, promotion=True),
            max_concurrent_trials=1,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1),
        ),
    ).fit()
    assert grid.num_errors == 0 and len(grid) == len(rates)
    pids: set[int] = set()
    for result in grid:
        df = result.metrics_dataframe
        rate = result.config["rate"]
        # resumed on a reused worker: reset_config, then the trial's own checkpoint
        assert list(df["value"]) == [rate * i for i in df["training_iteration"]], df
        pids.update(df["pid"])
    assert len(pids) == 1  # one worker ran every trial and every resume
    assert max(metrics_of(grid[i])["resets"] for i in range(len(grid))) >= 1
    best = grid.get_best_result()
    assert best.config["rate"] == 5 and metrics_of(best)["training_iteration"] == 9
