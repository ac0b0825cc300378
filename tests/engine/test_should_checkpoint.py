"""`should_checkpoint` (Ray Tune's SHOULD_CHECKPOINT) is honoured: a class trainable's
step() result or a callback's on_trial_result asks, and a checkpoint is taken."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

import tunefleet as tune
from tests.helpers.results import metrics_of
from tunefleet.result import SHOULD_CHECKPOINT
from tunefleet.store import StoreReader


class Counter(tune.Trainable):
    """Counts its steps; its checkpoint holds the count, so a checkpoint's iteration and
    the state saved in it can be compared."""

    def setup(self, config: dict[str, Any], **params: Any) -> None:
        self.count = 0
        self.ask_at: set[int] = set(config.get("ask_at", ()))

    def step(self) -> dict[str, Any]:
        self.count += 1
        result: dict[str, Any] = {"count": self.count, "done": self.count >= 6}
        if self.count in self.ask_at:
            result[SHOULD_CHECKPOINT] = True
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        Path(checkpoint_dir, "count.json").write_text(json.dumps(self.count))

    def load_checkpoint(self, checkpoint: Any) -> None:
        self.count = json.loads(Path(str(checkpoint), "count.json").read_text())


# only the checkpoints asked for (a Tuner's default also saves a class trainable at its end)
_ASKED_ONLY = tune.CheckpointConfig(checkpoint_at_end=False)


def _checkpoints(experiment: str) -> list[tuple[int, int]]:
    """(iteration, saved count) of every checkpoint the store recorded, oldest first."""
    with StoreReader(experiment) as reader:
        (trial,) = reader.trials()
        rows = [(it, path) for it, path, _ in reader.checkpoints(trial.trial_id)]
    return [(it, json.loads(Path(path, "count.json").read_text())) for it, path in rows]


def test_a_step_result_asking_is_checkpointed_after_that_step(storage: str) -> None:
    grid = tune.Tuner(
        Counter,
        param_space={"ask_at": [2, 5]},
        run_config=tune.RunConfig(storage_path=storage, verbose=0, checkpoint_config=_ASKED_ONLY),
    ).fit()
    assert _checkpoints(grid.experiment_path) == [(2, 2), (5, 5)]
    assert grid[0].checkpoint is not None
    assert metrics_of(grid[0])["training_iteration"] == 6


class AskAt(tune.Callback):
    def __init__(self, iterations: set[int]) -> None:
        self.iterations = iterations

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if result["training_iteration"] in self.iterations:
            result[SHOULD_CHECKPOINT] = True


class Sync(tune.schedulers.FIFOScheduler):
    """FIFO that waits for a decision after every result (as PBT does)."""

    needs_sync_decisions = True


def test_a_callback_asking_is_checkpointed_after_that_step_when_sync(storage: str) -> None:
    grid = tune.Tuner(
        Counter,
        tune_config=tune.TuneConfig(scheduler=Sync()),
        run_config=tune.RunConfig(
            storage_path=storage, verbose=0, callbacks=[AskAt({3})], checkpoint_config=_ASKED_ONLY
        ),
    ).fit()
    assert _checkpoints(grid.experiment_path) == [(3, 3)]


class Lockstep(Counter):
    """Step k starts once the driver has seen result k - 2 (a file its callback writes),
    so a request reaches the trial while it still runs, however fast its steps are.

    The callback marks result k seen before the driver sends the request it asked for
    at k, so the trial may take two more steps first (k + 1 needs k - 1, k + 2 needs
    k): it must not end there, or the request finds it gone (a loaded run's failure,
    with the request at 3 and the trial's end at 5). Step k + 3 needs result k + 1,
    which the driver reads after sending the request, so the trial takes the request
    at step k + 3 at the latest.
    """

    def step(self) -> dict[str, Any]:
        seen = Path(self.config["seen"], str(self.count - 1))
        while self.count >= 2 and not seen.exists():
            time.sleep(0.001)  # polls for the event
        # Counter's own end at 6 is the last step that may take the request: its test's
        # `stop` ends it later instead (a loaded run found the request at 6, the end)
        return {**super().step(), "done": False}


class AskAndAcknowledge(AskAt):
    def __init__(self, iterations: set[int], seen: str) -> None:
        super().__init__(iterations)
        self.seen = seen

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        super().on_trial_result(iteration, trials, trial, result)
        Path(self.seen, str(result["training_iteration"])).touch()


def test_a_callback_asking_gets_a_checkpoint_of_the_state_it_reaches(
    storage: str, tmp_path: Path
) -> None:
    # Without sync decisions the trial runs on while the driver reads its result: the
    # checkpoint is of the state when the request arrives (docs/checkpoints.md).
    seen = tmp_path / "seen"
    seen.mkdir()
    grid = tune.Tuner(
        Lockstep,
        param_space={"seen": str(seen)},
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            callbacks=[AskAndAcknowledge({3}, str(seen))],
            stop={"count": 8},  # past the step (6 at the latest) that takes the request
            checkpoint_config=_ASKED_ONLY,
        ),
    ).fit()
    ((iteration, count),) = _checkpoints(grid.experiment_path)
    assert 3 <= iteration == count <= 6
    assert grid[0].checkpoint is not None


def function_trainable(config: dict[str, Any]) -> None:
    for i in range(3):
        tune.report({"i": i})


def test_a_function_trainable_is_not_checkpointed_on_request(storage: str) -> None:
    # As in Ray Tune: a function trainable saves only the checkpoints it reports.
    grid = tune.Tuner(
        function_trainable,
        run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[AskAt({1, 2})]),
    ).fit()
    assert grid.num_errors == 0 and grid[0].checkpoint is None


@pytest.mark.parametrize(
    ("freq", "at_end", "stop", "expected"),
    [
        (2, False, None, [2, 4, 6]),
        (0, True, None, [6]),
        (4, True, None, [4, 6]),
        (2, True, {"training_iteration": 4}, [2, 4]),  # at_end and freq meet once
        (3, True, {"training_iteration": 4}, [3, 4]),
    ],
)
def test_frequency_and_at_end(
    storage: str, freq: int, at_end: bool, stop: dict[str, int] | None, expected: list[int]
) -> None:
    grid = tune.Tuner(
        Counter,
        run_config=tune.RunConfig(
            storage_path=storage,
            verbose=0,
            stop=stop,
            checkpoint_config=tune.CheckpointConfig(
                checkpoint_frequency=freq, checkpoint_at_end=at_end
            ),
        ),
    ).fit()
    assert [it for it, _ in _checkpoints(grid.experiment_path)] == expected
    assert all(it == count for it, count in _checkpoints(grid.experiment_path))
    assert grid[0].checkpoint is not None
    assert os.path.isdir(grid[0].checkpoint.path)
